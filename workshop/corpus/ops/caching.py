"""Random-access reads under cache hints: flat_take (a 1-D take) and pick_columns (gather along rows).

Neighbours of gather, index_select_rows, take_along_rows and embedding. In both the gathered
load is one scattered read per output, and what it costs depends on where the indices land
(one L1's worth, an L2's worth or all of DRAM) and on how the load asks the caches to treat
it, which the code shows only as a hint: `__ldg`, `__ldcs` (streaming, evict first), `__ldcg`
(L2 only, not L1), `__ldca` (all levels), and in Triton `cache_modifier` ("", ".ca", ".cg",
".cv": the values tl.load accepts) and `eviction_policy` ("", "evict_first", "evict_last").
Only the gathered load carries the hint; indices and outputs are read and written plainly.

- flat_take: out[i] = x[idx[i]] for x [n] fp32 (randn) and idx [m] int32 uniform over
  [0, span): span 4096 (16 KB, L1-resident), 1M (4 MB, L2-resident) or 64M (256 MB, a DRAM
  sector per read); n up to 64M, m up to 16M. CUDA families:
  - cuda-thread: one output per thread; block size, load (plain, ldg, ldcs, ldcg, ldca);
  - cuda-items: ITEMS outputs per thread whose indices are all read before the first gather
    (ITEMS reads in flight), either one by one or as int4 packs (VEC 4: the outputs leave
    as float4); items, vector, load;
  - cuda-grid-stride: a resident grid of blocks_per_sm blocks per SM loops over the output;
    blocks_per_sm, load.
  Triton: triton-take (BLOCK outputs per program; BLOCK, num_warps, cache_modifier and
  eviction_policy of the gathered load, idx_evict: "evict_first" on the streamed indices so
  they do not push the gathered lines out of L2; the two hints of the gathered load vary one
  at a time, since ptxas takes no eviction priority on a .cg or .cv load) and
  triton-persistent (programs_per_sm programs per SM loop over the output; programs_per_sm,
  cache_modifier; BLOCK 1024).
- pick_columns: out = torch.gather(x, 1, idx) for x [rows, n] (fp32 or fp16, the `dtype`
  size entry) and idx [rows, k] int64 uniform over the row; few picks from long rows (k = 32
  of 8192: most of a row is never read), and as many picks as columns (k = n: every sector
  of the row is read, most of them several times). fp16 gets a sample of each family.
  CUDA families:
  - cuda-thread: a thread per output from a flat index (`row = i / k`); block, load (plain,
    ldg, ldcs);
  - cuda-staged-row: a block per row copies the row of x into shared memory (scalar or
    16-byte loads), then gathers from there; block, vector, smem ("dynamic": n elements, or
    "static": a fixed 48 KB array, which holds an SM to 4 blocks whatever n is; only where
    the row fits it);
  - cuda-warp-per-row: a warp walks its row's picks 32 apart, UNROLL indices read before
    their gathers; warps per block, unroll (1, 4), load (plain, ldg).
  Triton: triton-row (a program per row loops over k in BLOCK_K picks; BLOCK_K, num_warps,
  cache_modifier, eviction_policy) and triton-staged (a program per row loads the row in
  BLOCK_N tiles, capped at the row's next power of two, and takes each tile's picks out of
  registers with tl.gather: k picks per tile, so BLOCK_N trades registers for repeated
  index reads; BLOCK_N, BLOCK_K, num_warps).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import ELEMENT_BYTES, one_launch, pack_struct
from workshop.corpus.ops.rowkit import TRITON_HEADER, at_most, divisible, next_pow2, resident_blocks, unsupported, vector_width
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
    Launch,
    Op,
    Sizes,
    TensorSpec,
    Variant,
    around,
    block1,
    cdiv,
    grid1,
    i32,
    product,
)

# How a CUDA kernel reads the gathered element at pointer p (the same builtins exist for __half).
LOADS = {"plain": "*p", "ldg": "__ldg(p)", "ldcs": "__ldcs(p)", "ldcg": "__ldcg(p)", "ldca": "__ldca(p)"}


def _fetch(dtype: str, load: str) -> str:
    """fetch(p): the gathered load with its cache hint, one place for every kernel of a family."""
    ctype = CUDA_TYPES[dtype]
    return f"""
// the scattered read, with the variant's cache hint
__device__ __forceinline__ {ctype} fetch(const {ctype}* p) {{ return {LOADS[load]}; }}
"""


# --- flat_take -----------------------------------------------------------------------------------

# Same output count, three spans: the indices hit a 16 KB, 4 MB or 256 MB window of the 256 MB x.
FLAT_SIZES = [
    {"n": 4096, "m": 4096, "span": 4096},
    {"n": 1 << 20, "m": 1 << 20, "span": 1 << 20},
    {"n": 1 << 26, "m": 1 << 24, "span": 4096},
    {"n": 1 << 26, "m": 1 << 24, "span": 1 << 20},
    {"n": 1 << 26, "m": 1 << 24, "span": 1 << 26},
]
FLAT_BLOCK = 256  # threads per block where the block size is not an axis
FLAT_SIGNATURE = (
    'extern "C" __global__ void flat_take(const float* __restrict__ x, const int* __restrict__ idx, float* __restrict__ out, int m)'
)


def _flat_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "idx", "out", i32(sizes["m"]))


def _flat_thread(load: str) -> str:
    return f"""{CUDA_HEADER}{_fetch("f32", load)}
{FLAT_SIGNATURE} {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m) out[i] = fetch(x + idx[i]);
}}
"""


def _flat_items(items: int, vector: int, load: str) -> str:
    """PACKS = ITEMS / VEC packs per thread, blockDim.x packs apart so a warp's index reads coalesce."""
    return f"""{CUDA_HEADER}#define ITEMS {items}
#define VEC {vector}
#define PACKS (ITEMS / VEC)
{pack_struct("i32", vector, "Idx")}{pack_struct("f32", vector, "Vals")}{_fetch("f32", load)}
{FLAT_SIGNATURE} {{
    int first = blockIdx.x * blockDim.x * PACKS + threadIdx.x;
    // every index of the thread first, so its ITEMS gathers are issued back to back
    Idx j[PACKS];
    #pragma unroll
    for (int k = 0; k < PACKS; ++k) {{
        int p = first + k * blockDim.x;
        if (p * VEC < m) j[k] = reinterpret_cast<const Idx*>(idx)[p];  // m is a multiple of VEC
    }}
    #pragma unroll
    for (int k = 0; k < PACKS; ++k) {{
        int p = first + k * blockDim.x;
        if (p * VEC < m) {{
            Vals v;
            #pragma unroll
            for (int e = 0; e < VEC; ++e) v.v[e] = fetch(x + j[k].v[e]);
            reinterpret_cast<Vals*>(out)[p] = v;
        }}
    }}
}}
"""


def _flat_grid_stride(load: str) -> str:
    return f"""{CUDA_HEADER}{_fetch("f32", load)}
{FLAT_SIGNATURE} {{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += gridDim.x * blockDim.x) out[i] = fetch(x + idx[i]);
}}
"""


def _flat_triton(cache: str, evict: str, idx_evict: str) -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def flat_take(x_ptr, idx_ptr, out_ptr, m, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < m
    j = tl.load(idx_ptr + offsets, mask=mask, other=0, eviction_policy="{idx_evict}")
    values = tl.load(x_ptr + j, mask=mask, cache_modifier="{cache}", eviction_policy="{evict}")
    tl.store(out_ptr + offsets, values, mask=mask)
"""


def _flat_triton_persistent(cache: str) -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def flat_take(x_ptr, idx_ptr, out_ptr, m, BLOCK: tl.constexpr):
    # each program takes every num_programs-th block of outputs
    for start in range(tl.program_id(0) * BLOCK, m, tl.num_programs(0) * BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < m
        j = tl.load(idx_ptr + offsets, mask=mask, other=0)
        tl.store(out_ptr + offsets, tl.load(x_ptr + j, mask=mask, cache_modifier="{cache}"), mask=mask)
"""


def flat_take_variants() -> Iterable[Variant]:
    for params in product({"block": [128, 512], "load": list(LOADS)}):
        block = params["block"]
        yield Variant(
            "cuda-thread",
            "cuda",
            params,
            _flat_thread(params["load"]),
            one_launch("flat_take", _flat_args, lambda s, block=block: cdiv(s["m"], block), block),
        )
    for params in product({"items": [2, 4, 8], "vector": [1, 4], "load": ["plain", "ldcg"]}):
        items, vector = params["items"], params["vector"]
        if vector > items:
            continue
        yield Variant(
            "cuda-items",
            "cuda",
            params,
            _flat_items(items, vector, params["load"]),
            one_launch("flat_take", _flat_args, lambda s, items=items: cdiv(s["m"], FLAT_BLOCK * items), FLAT_BLOCK),
            unsupported=unsupported(None, divisible("m", vector)),
        )
    for params in product({"blocks_per_sm": [2, 8], "load": ["plain", "ldg", "ldcs"]}):
        per_sm = params["blocks_per_sm"]
        yield Variant(
            "cuda-grid-stride",
            "cuda",
            params,
            _flat_grid_stride(params["load"]),
            one_launch("flat_take", _flat_args, lambda s, per_sm=per_sm: resident_blocks(cdiv(s["m"], FLAT_BLOCK), per_sm), FLAT_BLOCK),
        )
    base = {"BLOCK": 1024, "num_warps": 4, "cache_modifier": "", "eviction_policy": "", "idx_evict": ""}
    take_settings = [
        *around(
            base,
            BLOCK=[256, 4096],
            num_warps=[2, 8],
            cache_modifier=[".ca", ".cg", ".cv"],
            eviction_policy=["evict_first", "evict_last"],
            idx_evict=["evict_first"],
        ),
        # PTX takes no eviction priority on a .cg/.cv load (ptxas rejects the pair): the hints vary one at a time
        *around({**base, "BLOCK": 4096}, cache_modifier=[".cg", ".cv"], eviction_policy=["evict_first", "evict_last"])[1:],
    ]
    for params in take_settings:
        block, warps = params["BLOCK"], params["num_warps"]
        yield Variant(
            "triton-take",
            "triton",
            params,
            _flat_triton(params["cache_modifier"], params["eviction_policy"], params["idx_evict"]),
            lambda s, block=block, warps=warps: [
                Launch("flat_take", grid1(cdiv(s["m"], block)), _flat_args(s), constexprs={"BLOCK": block}, num_warps=warps)
            ],
        )
    for params in product({"programs_per_sm": [2, 8], "cache_modifier": ["", ".cg"]}):
        per_sm = params["programs_per_sm"]
        yield Variant(
            "triton-persistent",
            "triton",
            params,
            _flat_triton_persistent(params["cache_modifier"]),
            lambda s, per_sm=per_sm: [
                Launch(
                    "flat_take", grid1(resident_blocks(cdiv(s["m"], 1024), per_sm)), _flat_args(s), constexprs={"BLOCK": 1024}, num_warps=4
                )
            ],
        )


FLAT_TAKE = Op(
    name="flat_take",
    bound="memory",
    sizes=FLAT_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],)), "idx": TensorSpec((s["m"],), "i32", f"randint:0:{s['span']}")},
    outputs=lambda s: {"out": TensorSpec((s["m"],))},
    reference=lambda torch, inputs, sizes: {"out": inputs["x"][inputs["idx"].long()]},
    reference_code="def reference(x, idx):\n    return x[idx.long()]\n",
    variants=flat_take_variants,
)

# --- pick_columns --------------------------------------------------------------------------------

# Few picks from long rows (k = 32 of 8192), k = n (every sector read, most several times),
# short rows in many blocks; 64 x 8 outputs is launch-bound.
PICK_SIZES = [
    {"rows": 64, "n": 128, "k": 8, "dtype": "f32"},
    {"rows": 65536, "n": 256, "k": 64, "dtype": "f32"},
    {"rows": 16384, "n": 8192, "k": 32, "dtype": "f32"},
    {"rows": 16384, "n": 1024, "k": 1024, "dtype": "f32"},
    {"rows": 4096, "n": 4096, "k": 512, "dtype": "f16"},
    {"rows": 65536, "n": 128, "k": 128, "dtype": "f16"},
]
STATIC_LINE_BYTES = 48 * 1024  # the largest static __shared__ array a kernel may declare


def _pick_signature(dtype: str) -> str:
    ctype = CUDA_TYPES[dtype]
    return (
        f'extern "C" __global__ void pick_columns(const {ctype}* __restrict__ x, const long long* __restrict__ idx, '
        f"{ctype}* __restrict__ out, int rows, int n, int k)"
    )


def _pick_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "idx", "out", i32(sizes["rows"]), i32(sizes["n"]), i32(sizes["k"]))


def _pick_thread(dtype: str, load: str) -> str:
    return f"""{CUDA_HEADER}{_fetch(dtype, load)}
{_pick_signature(dtype)} {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * k) {{
        int row = i / k;
        out[i] = fetch(x + (long long)row * n + idx[i]);
    }}
}}
"""


def _pick_staged(dtype: str, vector: int, smem: str) -> str:
    ctype = CUDA_TYPES[dtype]
    if smem == "static":
        line = f"    __shared__ __align__(16) {ctype} line[{STATIC_LINE_BYTES // ELEMENT_BYTES[dtype]}];  // sized for the longest row, not this one\n"
    else:
        line = f"    extern __shared__ __align__(16) unsigned char smem[];  // n elements\n    {ctype}* line = reinterpret_cast<{ctype}*>(smem);\n"
    if vector == 1:
        copy = "    for (int c = threadIdx.x; c < n; c += blockDim.x) line[c] = src[c];\n"
        pack = ""
    else:
        copy = """    for (int c = threadIdx.x; c < n / VEC; c += blockDim.x)  // n is a multiple of VEC: rows start 16-byte aligned
        reinterpret_cast<Pack*>(line)[c] = reinterpret_cast<const Pack*>(src)[c];
"""
        pack = f"#define VEC {vector}\n{pack_struct(dtype, vector)}"
    return f"""{CUDA_HEADER}{pack}
{_pick_signature(dtype)} {{
{line}    const {ctype}* src = x + (long long)blockIdx.x * n;
{copy}    __syncthreads();
    const long long* picks = idx + (long long)blockIdx.x * k;
    {ctype}* dst = out + (long long)blockIdx.x * k;
    for (int j = threadIdx.x; j < k; j += blockDim.x) dst[j] = line[picks[j]];
}}
"""


def _pick_warp(dtype: str, warps: int, unroll: int, load: str) -> str:
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}#define WARPS {warps}
#define UNROLL {unroll}
{_fetch(dtype, load)}
{_pick_signature(dtype)} {{
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const {ctype}* line = x + (long long)row * n;
    const long long* picks = idx + (long long)row * k;
    {ctype}* dst = out + (long long)row * k;
    int j = lane;
    // UNROLL picks per lane, 32 apart: their indices are read before any of the gathers
    for (; j + (UNROLL - 1) * 32 < k; j += UNROLL * 32) {{
        long long c[UNROLL];
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) c[u] = picks[j + u * 32];
        {ctype} v[UNROLL];
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = fetch(line + c[u]);
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[j + u * 32] = v[u];
    }}
    for (; j < k; j += 32) dst[j] = fetch(line + picks[j]);
}}
"""


def _pick_triton_row(cache: str, evict: str) -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def pick_columns(x_ptr, idx_ptr, out_ptr, rows, n, k, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    line = x_ptr + row.to(tl.int64) * n
    for start in range(0, k, BLOCK_K):
        j = start + tl.arange(0, BLOCK_K)
        mask = j < k
        cols = tl.load(idx_ptr + row * k + j, mask=mask, other=0)
        values = tl.load(line + cols, mask=mask, cache_modifier="{cache}", eviction_policy="{evict}")
        tl.store(out_ptr + row * k + j, values, mask=mask)
"""


PICK_TRITON_STAGED = f"""{TRITON_HEADER}

@triton.jit
def pick_columns(x_ptr, idx_ptr, out_ptr, rows, n, k, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    line = x_ptr + row.to(tl.int64) * n
    for tile in range(0, n, BLOCK_N):
        # one tile of the row in registers; every pick that falls inside it is taken from there
        cols = tile + tl.arange(0, BLOCK_N)
        values = tl.load(line + cols, mask=cols < n, other=0.0)
        for start in range(0, k, BLOCK_K):
            j = start + tl.arange(0, BLOCK_K)
            local = tl.load(idx_ptr + row * k + j, mask=j < k, other=-1) - tile
            hit = (local >= 0) & (local < BLOCK_N)
            got = tl.gather(values, tl.where(hit, local, 0).to(tl.int32), 0)
            tl.store(out_ptr + row * k + j, got, mask=hit)
"""


def _pick_cuda_variant(family: str, params: dict[str, Any], code: str, blocks, block: int, shared=lambda s: 0, checks=()) -> Variant:
    """A one-kernel CUDA pick_columns: `blocks(sizes)` blocks of `block` threads."""

    def launches(s: Sizes) -> list[Launch]:
        return [Launch("pick_columns", grid1(blocks(s)), _pick_args(s), block1(block), shared_bytes=shared(s))]

    return Variant(family, "cuda", params, code, launches, unsupported=unsupported(params["dtype"], *checks))


def _pick_triton_variant(family: str, params: dict[str, Any], code: str) -> Variant:
    meta = {name: value for name, value in params.items() if name.startswith("BLOCK_")}

    def launches(s: Sizes) -> list[Launch]:
        constexprs = dict(meta)
        if "BLOCK_N" in constexprs:
            constexprs["BLOCK_N"] = min(constexprs["BLOCK_N"], next_pow2(s["n"]))  # no tile wider than the row
        return [Launch("pick_columns", grid1(s["rows"]), _pick_args(s), constexprs=constexprs, num_warps=params["num_warps"])]

    return Variant(family, "triton", params, code, launches, unsupported=unsupported(params["dtype"]))


def pick_columns_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"  # fp16 gets a sample of each family
        bytes_ = ELEMENT_BYTES[dtype]
        for params in product(
            {"dtype": [dtype], "block": [128, 256, 512] if full else [256], "load": ["plain", "ldg", "ldcs"] if full else ["plain", "ldg"]}
        ):
            block = params["block"]
            yield _pick_cuda_variant(
                "cuda-thread", params, _pick_thread(dtype, params["load"]), lambda s, block=block: cdiv(s["rows"] * s["k"], block), block
            )
        staged = (
            product({"dtype": [dtype], "block": [128, 512], "vector": [1, vector_width(dtype)], "smem": ["dynamic", "static"]})
            if full
            else around({"dtype": dtype, "block": 256, "vector": 1, "smem": "dynamic"}, vector=[vector_width(dtype)], smem=["static"])
        )
        for params in staged:
            vector, static = params["vector"], params["smem"] == "static"
            shared = (lambda s: 0) if static else (lambda s, bytes_=bytes_: s["n"] * bytes_)
            checks = (divisible("n", vector),) + (
                (at_most("n", STATIC_LINE_BYTES // bytes_, "the row does not fit the static 48 KB line"),) if static else ()
            )
            yield _pick_cuda_variant(
                "cuda-staged-row",
                params,
                _pick_staged(dtype, vector, params["smem"]),
                lambda s: s["rows"],
                params["block"],
                shared=shared,
                checks=checks,
            )
        warp_settings = (
            product({"dtype": [dtype], "warps": [4, 8], "unroll": [1, 4], "load": ["plain", "ldg"]})
            if full
            else product({"dtype": [dtype], "warps": [4], "unroll": [1, 4], "load": ["plain"]})
        )
        for params in warp_settings:
            warps = params["warps"]
            yield _pick_cuda_variant(
                "cuda-warp-per-row",
                params,
                _pick_warp(dtype, warps, params["unroll"], params["load"]),
                lambda s, warps=warps: cdiv(s["rows"], warps),
                32 * warps,
            )
        row_base = {"dtype": dtype, "BLOCK_K": 256, "num_warps": 4, "cache_modifier": "", "eviction_policy": ""}
        row_settings = (
            around(
                row_base,
                BLOCK_K=[64, 1024],
                num_warps=[1, 8],
                cache_modifier=[".ca", ".cg", ".cv"],
                eviction_policy=["evict_first", "evict_last"],
            )
            if full
            else around(row_base, cache_modifier=[".cg"], eviction_policy=["evict_first"])
        )
        for params in row_settings:
            yield _pick_triton_variant("triton-row", params, _pick_triton_row(params["cache_modifier"], params["eviction_policy"]))
        staged_settings = (
            product({"dtype": [dtype], "BLOCK_N": [1024, 4096], "BLOCK_K": [64, 256], "num_warps": [4, 8]})
            if full
            else [{"dtype": dtype, "BLOCK_N": 4096, "BLOCK_K": 256, "num_warps": 8}]
        )
        for params in staged_settings:
            yield _pick_triton_variant("triton-staged", params, PICK_TRITON_STAGED)


PICK_COLUMNS = Op(
    name="pick_columns",
    bound="memory",
    sizes=PICK_SIZES,
    inputs=lambda s: {
        "x": TensorSpec((s["rows"], s["n"]), s["dtype"]),
        "idx": TensorSpec((s["rows"], s["k"]), "i64", f"randint:0:{s['n']}"),
    },
    outputs=lambda s: {"out": TensorSpec((s["rows"], s["k"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"out": torch.gather(inputs["x"], 1, inputs["idx"])},
    reference_code="def reference(x, idx):\n    return torch.gather(x, 1, idx)\n",
    variants=pick_columns_variants,
)

OPS = [FLAT_TAKE, PICK_COLUMNS]
