"""Keyed row scatters: rowscatter_max (a row-wise index_reduce amax) and embedgrad_sum (the embedding backward).

Neighbours of indexadd_rows, class_sum, bag_sum and embedding: every source row goes to the
output row its key names, and the speed depends on how many source rows share a key (16 keys:
every warp's atomics collide; a million: almost never) and on how wide a row is (d = 8: a warp
spans several rows; d = 1024: a row is many warps' worth), which the code alone does not show.

- rowscatter_max: out = base.index_reduce(0, idx, src, "amax", include_self=True) (base (rows, d)
  randn, src (m, d) randn, idx int64 randint over `rows`). Sizes: rows 16 to 1M keys, m 4096
  to 4M source rows, d 8 to 256 (m x d at most 64M). Every variant copies base into out first
  (scatters' copy kernel, the same in each language), then takes maxima into it: exact, in any
  order. A float atomic max is done the three ways of keyed_max (`atomics.ATOMIC_MAX`,
  "atomic"): "int-sign" (non-negative: atomicMax on the int bits; negative: atomicMin on the
  unsigned bits), "cas" (an atomicCAS loop that always swaps in fmaxf) and "cas-early-exit"
  (CAS only while v is above what is stored). CUDA: cuda-element (a thread per element of src;
  block, atomic), cuda-warp-row (a warp per source row, lanes over d in scalar or float4 packs;
  vector, warps, atomic), cuda-aggregate (a thread per VEC columns of one source row, int-sign
  atomics; with small d a warp spans 32 / (d / VEC) source rows, and "aggregate" groups lanes of
  equal address with __match_any_sync and takes their max with shuffles before one atomic per
  group; aggregate, vector, block; d <= 64 only). Triton: triton-tile (tl.atomic_max of
  [BLOCK_M, BLOCK_D] tiles; BLOCK_M, BLOCK_D, num_warps, sem).
- embedgrad_sum: out[v, :] = sum of grad_out[t, :] over tokens t with ids[t] == v, i.e.
  torch.zeros(vocab, d).index_add_(0, ids, grad_out) (grad_out (tokens, d) randn, ids int64
  randint over `vocab`). Sizes: vocab 64 (hot ids, 64 to 4096 tokens each) to 1M, tokens 4096
  to 1M, d 64 to 1024. Every variant clears out first (a ZERO launch). CUDA: cuda-block-token
  (a block per TOKENS consecutive tokens, threads over d in scalar or float4 packs; block,
  vector, tokens), cuda-warp-token (a warp per TOKENS consecutive tokens, lanes over d; vector,
  warps, tokens), cuda-shared-private (sort-free privatisation: a block of a resident grid sums
  its tokens' CHUNK columns into a vocab x CHUNK table in shared memory with shared atomics,
  then adds each non-zero entry to out with one global atomic; block, chunk, blocks_per_sm;
  only when the table fits shared memory). Triton: triton-tile (tl.atomic_add of [BLOCK_T,
  BLOCK_D] tiles; BLOCK_T, BLOCK_D, num_warps).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.atomics import ATOMIC_MAX
from workshop.corpus.ops.memkit import MAX_SHARED_BYTES, pack_struct
from workshop.corpus.ops.rowkit import FULL_MASK, TRITON_HEADER, at_most, divisible, resident_blocks, unsupported
from workshop.corpus.ops.scatters import (
    COPY_BASE,
    cleared_first,
    copied_from_base,
    define_lines,
    pack_atomics,
    row_scatter_args,
    row_scatter_inputs,
    scatter_row,
    tile_kernel,
    tile_params,
    tile_variant,
)
from workshop.corpus.spec import CUDA_HEADER, Launch, Op, Sizes, TensorSpec, Variant, block1, cdiv, grid1, i32, product

# --- rowscatter_max ----------------------------------------------------------------------------------

# Source rows per key: 256 (tiny), 262144 (16 keys, d = 8), 1024, 256, ~1 (1M keys).
MAX_SIZES = [
    {"rows": 16, "m": 4096, "d": 64},
    {"rows": 16, "m": 1 << 22, "d": 8},
    {"rows": 256, "m": 1 << 18, "d": 256},
    {"rows": 4096, "m": 1 << 20, "d": 64},
    {"rows": 1 << 20, "m": 1 << 20, "d": 64},
]
AGGREGATE_MAX_D = 64  # wider rows put different columns on every lane of a warp: nothing to aggregate

MAX_SIGNATURE = (
    'extern "C" __global__ void rowscatter_max(const float* __restrict__ src, const long long* __restrict__ idx, '
    "float* __restrict__ out, int m, int d)"
)


def _max_prelude(atomic: str, defines: dict[str, int]) -> str:
    return f"{CUDA_HEADER}{define_lines(defines)}{pack_struct('f32', defines['VEC'])}{ATOMIC_MAX[atomic]}{COPY_BASE}"


def _max_element(atomic: str) -> str:
    return f"""{_max_prelude(atomic, {"VEC": 1})}
{MAX_SIGNATURE} {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m * d) {{
        int row = i / d;
        atomic_max_float(out + idx[row] * d + (i - row * d), src[i]);
    }}
}}
"""


def _max_warp_row(atomic: str, vector: int, warps: int) -> str:
    return f"""{_max_prelude(atomic, {"VEC": vector, "WARPS": warps})}
{MAX_SIGNATURE} {{
    int row = blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (row >= m) return;  // the same for the whole warp
{scatter_row("src + (long long)row * d", "idx[row]", ("threadIdx.x & 31", "32"), "atomic_max_float")}}}
"""


def _max_pack(aggregate: bool) -> str:
    """max_pack(out, key, v): lanes of the same address (equal idx, same columns) take the max of their packs; the first stores it."""
    best = f"""    // lanes of the same address (equal idx, same columns) take the max of their packs; the first stores it
    unsigned peers = __match_any_sync({FULL_MASK}, key);
    Pack best = v;
    for (int from = 0; from < 32; ++from) {{
        #pragma unroll
        for (int e = 0; e < VEC; ++e) {{
            float other = __shfl_sync({FULL_MASK}, v.v[e], from);
            if ((peers >> from) & 1u) best.v[e] = fmaxf(best.v[e], other);
        }}
    }}
"""
    return pack_atomics("max_pack", "atomic_max_float", (best, "best") if aggregate else None)


def _max_aggregate(aggregate: bool, vector: int) -> str:
    return f"""{_max_prelude("int-sign", {"VEC": vector})}{_max_pack(aggregate)}
{MAX_SIGNATURE} {{
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;  // first of this thread's VEC columns
    long long key = -1;  // lanes past the end keep -1 but still call max_pack (the match needs the whole warp)
    Pack v;
    #pragma unroll
    for (int e = 0; e < VEC; ++e) v.v[e] = 0.0f;
    if (i < m * d) {{
        int row = i / d;  // d is a multiple of VEC: the pack lies in one source row
        key = idx[row] * d + (i - row * d);
        v = *reinterpret_cast<const Pack*>(src + i);
    }}
    max_pack(out, key, v);
}}
"""


def _max_cuda_variant(family: str, params: dict[str, Any], code: str, blocks: Callable[[Sizes], int], block: int, checks=()) -> Variant:
    """The copy of base, then one CUDA kernel of `blocks(sizes)` blocks of `block` threads."""

    def launches(s: Sizes) -> list[Launch]:
        return copied_from_base("cuda", s, Launch("rowscatter_max", grid1(blocks(s)), row_scatter_args(s), block1(block)))

    return Variant(family, "cuda", params, code, launches, unsupported=unsupported(None, *checks))


def rowscatter_variants() -> Iterable[Variant]:
    for params in product({"block": [128, 256, 1024], "atomic": list(ATOMIC_MAX)}):
        block = params["block"]
        yield _max_cuda_variant(
            "cuda-element", params, _max_element(params["atomic"]), lambda s, block=block: cdiv(s["m"] * s["d"], block), block
        )
    for params in product({"vector": [1, 4], "warps": [2, 8], "atomic": ["int-sign", "cas"]}):
        warps, vector = params["warps"], params["vector"]
        yield _max_cuda_variant(
            "cuda-warp-row",
            params,
            _max_warp_row(params["atomic"], vector, warps),
            lambda s, warps=warps: cdiv(s["m"], warps),
            32 * warps,
            (divisible("d", vector),),
        )
    for params in product({"aggregate": [False, True], "vector": [1, 4], "block": [128, 512]}):
        block, vector = params["block"], params["vector"]
        yield _max_cuda_variant(
            "cuda-aggregate",
            params,
            _max_aggregate(params["aggregate"], vector),
            lambda s, block=block, vector=vector: cdiv(s["m"] * s["d"] // vector, block),
            block,
            (divisible("d", vector), at_most("d", AGGREGATE_MAX_D, "a warp's lanes hold one row's columns")),
        )
    for params in tile_params([4, 16, 64, 256]):
        yield tile_variant("rowscatter_max", params, tile_kernel("rowscatter_max", "atomic_max", params["sem"]), row_scatter_args)


ROWSCATTER_MAX = Op(
    name="rowscatter_max",
    bound="memory",
    sizes=MAX_SIZES,
    inputs=row_scatter_inputs,
    outputs=lambda s: {"out": TensorSpec((s["rows"], s["d"]))},
    reference=lambda torch, inputs, sizes: {"out": inputs["base"].index_reduce(0, inputs["idx"], inputs["src"], "amax", include_self=True)},
    reference_code='def reference(base, idx, src):\n    return base.index_reduce(0, idx, src, "amax", include_self=True)\n',
    variants=rowscatter_variants,
    # A max picks one of the values whatever the order: exact.
    tolerance={"f32": 0.0},
)

# --- embedgrad_sum -----------------------------------------------------------------------------------

# Tokens per id: 64 (tiny), 4096 (64 hot ids), 64, 4, ~1 (1M ids). At most 4096 additions per sum
# keep the atomics' order within tolerance (see `tolerance` below).
EMBED_SIZES = [
    {"vocab": 64, "tokens": 4096, "d": 64},
    {"vocab": 64, "tokens": 1 << 18, "d": 256},
    {"vocab": 1024, "tokens": 1 << 16, "d": 1024},
    {"vocab": 32768, "tokens": 1 << 17, "d": 512},
    {"vocab": 1 << 20, "tokens": 1 << 20, "d": 64},
]

EMBED_SIGNATURE = (
    'extern "C" __global__ void embedgrad_sum(const float* __restrict__ grad_out, const long long* __restrict__ ids, '
    "float* __restrict__ out, int tokens, int d{extra})"
)


def _embed_block_token(vector: int, tokens: int) -> str:
    return f"""{CUDA_HEADER}{define_lines({"VEC": vector, "TOKENS": tokens})}{pack_struct("f32", vector)}
{EMBED_SIGNATURE.format(extra="")} {{
    int first = blockIdx.x * TOKENS;
    int last = min(first + TOKENS, tokens);
    for (int t = first; t < last; ++t) {{
{scatter_row("grad_out + (long long)t * d", "ids[t]", ("threadIdx.x", "blockDim.x"), indent="        ")}    }}
}}
"""


def _embed_warp_token(vector: int, warps: int, tokens: int) -> str:
    return f"""{CUDA_HEADER}{define_lines({"VEC": vector, "WARPS": warps, "TOKENS": tokens})}{pack_struct("f32", vector)}
{EMBED_SIGNATURE.format(extra="")} {{
    int first = (blockIdx.x * WARPS + (threadIdx.x >> 5)) * TOKENS;
    int last = min(first + TOKENS, tokens);
    for (int t = first; t < last; ++t) {{
{scatter_row("grad_out + (long long)t * d", "ids[t]", ("threadIdx.x & 31", "32"), indent="        ")}    }}
}}
"""


def _embed_shared(chunk: int) -> str:
    return f"""{CUDA_HEADER}{define_lines({"CHUNK": chunk})}
{EMBED_SIGNATURE.format(extra=", int vocab")} {{
    extern __shared__ float table[];  // this block's vocab x CHUNK sums of columns blockIdx.y * CHUNK on
    int c = threadIdx.x % CHUNK;  // a token's CHUNK columns lie on consecutive threads: coalesced loads
    int slot = threadIdx.x / CHUNK;
    int slots = blockDim.x / CHUNK;
    int col = blockIdx.y * CHUNK + c;
    for (int e = threadIdx.x; e < vocab * CHUNK; e += blockDim.x) table[e] = 0.0f;
    __syncthreads();
    for (int t = blockIdx.x * slots + slot; t < tokens; t += gridDim.x * slots)
        atomicAdd(&table[ids[t] * CHUNK + c], grad_out[(long long)t * d + col]);
    __syncthreads();
    // one global atomic per id this block saw (an entry still 0.0f adds nothing)
    for (int e = threadIdx.x; e < vocab * CHUNK; e += blockDim.x) {{
        float s = table[e];
        if (s != 0.0f) atomicAdd(out + (long long)(e / CHUNK) * d + blockIdx.y * CHUNK + e % CHUNK, s);
    }}
}}
"""


EMBED_TRITON = f"""{TRITON_HEADER}

@triton.jit
def embedgrad_sum(grad_ptr, ids_ptr, out_ptr, tokens, d, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    keys = tl.load(ids_ptr + toks, mask=toks < tokens, other=0)
    mask = (toks[:, None] < tokens) & (cols[None, :] < d)
    vals = tl.load(grad_ptr + toks[:, None] * d + cols[None, :], mask=mask, other=0.0)
    tl.atomic_add(out_ptr + keys[:, None] * d + cols[None, :], vals, mask=mask, sem="relaxed")
"""


def _embed_args(sizes: Sizes, with_vocab: bool = False) -> tuple[Any, ...]:
    return ("grad_out", "ids", "out", i32(sizes["tokens"]), i32(sizes["d"])) + ((i32(sizes["vocab"]),) if with_vocab else ())


def _embed_cuda_variant(family: str, params: dict[str, Any], code: str, blocks: Callable[[Sizes], int], block: int, vector: int) -> Variant:
    """The clear, then one CUDA kernel of `blocks(sizes)` blocks of `block` threads."""

    def launches(s: Sizes) -> list[Launch]:
        return cleared_first(Launch("embedgrad_sum", grid1(blocks(s)), _embed_args(s), block1(block)))

    return Variant(family, "cuda", params, code, launches, unsupported=unsupported(None, divisible("d", vector)))


def _embed_shared_variant(params: dict[str, Any]) -> Variant:
    block, chunk, per_sm = params["block"], params["chunk"], params["blocks_per_sm"]

    def launches(s: Sizes) -> list[Launch]:
        chunks = s["d"] // chunk
        # the resident grid is shared among the column chunks: fewer blocks per chunk, fewer flushes
        token_blocks = max(1, cdiv(resident_blocks(cdiv(s["tokens"], block // chunk), per_sm), chunks))
        return cleared_first(
            Launch("embedgrad_sum", (token_blocks, chunks, 1), _embed_args(s, True), block1(block), shared_bytes=s["vocab"] * chunk * 4)
        )

    def table_fits(s: Sizes) -> str | None:
        return None if s["vocab"] * chunk * 4 <= MAX_SHARED_BYTES else "the vocab x CHUNK table does not fit shared memory"

    return Variant(
        "cuda-shared-private",
        "cuda",
        params,
        _embed_shared(chunk),
        launches,
        unsupported=unsupported(None, divisible("d", chunk), table_fits),
    )


def embedgrad_variants() -> Iterable[Variant]:
    for params in product({"block": [64, 256], "vector": [1, 4], "tokens": [1, 4, 16]}):
        tokens = params["tokens"]
        yield _embed_cuda_variant(
            "cuda-block-token",
            params,
            _embed_block_token(params["vector"], tokens),
            lambda s, tokens=tokens: cdiv(s["tokens"], tokens),
            params["block"],
            params["vector"],
        )
    for params in product({"vector": [1, 4], "warps": [4, 8], "tokens": [1, 8]}):
        per_block = params["warps"] * params["tokens"]
        yield _embed_cuda_variant(
            "cuda-warp-token",
            params,
            _embed_warp_token(params["vector"], params["warps"], params["tokens"]),
            lambda s, per_block=per_block: cdiv(s["tokens"], per_block),
            32 * params["warps"],
            params["vector"],
        )
    for params in product({"block": [256, 1024], "chunk": [32, 64], "blocks_per_sm": [1, 2, 4]}):
        yield _embed_shared_variant(params)
    for params in product({"BLOCK_T": [4, 16, 64], "BLOCK_D": [64, 256], "num_warps": [2, 8]}):
        yield _embed_triton_variant(params)


def _embed_triton_variant(params: dict[str, Any]) -> Variant:
    block_t, block_d, warps = params["BLOCK_T"], params["BLOCK_D"], params["num_warps"]

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["tokens"], block_t), cdiv(s["d"], block_d), 1)
        return cleared_first(
            Launch("embedgrad_sum", grid, _embed_args(s), constexprs={"BLOCK_T": block_t, "BLOCK_D": block_d}, num_warps=warps)
        )

    return Variant("triton-tile", "triton", params, EMBED_TRITON, launches)


def _embed_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    grad_out = inputs["grad_out"]
    table = torch.zeros((sizes["vocab"], sizes["d"]), dtype=grad_out.dtype, device=grad_out.device)
    return {"out": table.index_add_(0, inputs["ids"], grad_out)}


EMBEDGRAD_SUM = Op(
    name="embedgrad_sum",
    bound="memory",
    sizes=EMBED_SIZES,
    inputs=lambda s: {"grad_out": TensorSpec((s["tokens"], s["d"])), "ids": TensorSpec((s["tokens"],), "i64", f"randint:0:{s['vocab']}")},
    outputs=lambda s: {"out": TensorSpec((s["vocab"], s["d"]))},
    reference=_embed_reference,
    reference_code=(
        "def reference(grad_out, ids, vocab):\n"
        "    grad_table = torch.zeros(vocab, grad_out.shape[1], device=grad_out.device)\n"
        "    return grad_table.index_add_(0, ids, grad_out)\n"
    ),
    variants=embedgrad_variants,
    # At most 4096 randn additions per sum (64 hot ids), in an order the atomics choose; the check
    # allows tol * (1 + |sum|), so sums near 0 set it. Sequential, shuffled and 8-way blocked fp32
    # orders of 4096 randn differ by at most 2e-4 (1 + |sum|) over 32768 sums (CPU check): 1e-3.
    tolerance={"f32": 1e-3},
)

OPS = [ROWSCATTER_MAX, EMBEDGRAD_SUM]
