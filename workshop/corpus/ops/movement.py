"""Data movement: transpose, embedding lookup, 1D gather, scatter-add (index_add).

Pure memory traffic, so what varies is how the accesses are laid out:
- transpose: naive kernels coalesced on the read or on the write side, shared-memory tiles
  (16/32/64, rows per thread, +1 padding against bank conflicts), vectorized tiles; Triton
  blocks with tl.trans or with a strided store. fp32 and fp16 problems.
- embedding: a thread per element (row-major or token-fastest, the latter uncoalesced),
  a group of threads per row (warp, block, or one thread: the bad case) with vector width;
  Triton 2D blocks and a per-row loop. fp32 and fp16 problems.
- gather: block size, gathers per thread (memory-level parallelism), L1-cached or L2-only
  loads; the index pattern is part of the problem (indices drawn from a span of the table:
  the whole table, an L2-sized window, a hot set), since inputs are uniform random integers.
- scatter_add: global atomics per element or per row with float2/float4 vector atomics,
  warp-aggregated atomics (__match_any_sync) vs the same tile without aggregation, Triton
  atomics with acq_rel or relaxed ordering; contention (rows per target) is part of the
  problem. Every variant clears its output first (a ZERO launch).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import pack_struct
from workshop.corpus.ops.rowkit import TRITON_HEADER, divisible, unsupported
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
    ZERO,
    Launch,
    Op,
    Sizes,
    TensorSpec,
    Variant,
    block1,
    cdiv,
    grid1,
    i32,
    product,
)

# --- transpose ----------------------------------------------------------------------------------

TRANSPOSE_SIZES = [
    {"m": 100, "n": 76, "dtype": "f32"},
    {"m": 2048, "n": 3000, "dtype": "f32"},
    {"m": 8192, "n": 8192, "dtype": "f32"},
    {"m": 2048, "n": 3000, "dtype": "f16"},
    {"m": 8192, "n": 8192, "dtype": "f16"},
]
TRANSPOSE_VECTORS = {"f32": (2, 4), "f16": (4, 8)}


def _transpose_naive(dtype: str, write_coalesced: bool) -> str:
    """One element per thread; threadIdx.x runs along the input row (reads coalesced) or the output row."""
    ctype = CUDA_TYPES[dtype]
    if write_coalesced:
        coords = "    int r = blockIdx.x * blockDim.x + threadIdx.x;\n    int c = blockIdx.y * blockDim.y + threadIdx.y;\n"
    else:
        coords = "    int c = blockIdx.x * blockDim.x + threadIdx.x;\n    int r = blockIdx.y * blockDim.y + threadIdx.y;\n"
    return f"""{CUDA_HEADER}
extern "C" __global__ void transpose(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int m, int n) {{
{coords}    if (r < m && c < n) y[(long long)c * m + r] = x[(long long)r * n + c];
}}
"""


def _transpose_tiled(dtype: str, tile: int, rows: int, pad: int) -> str:
    """A TILE x TILE shared tile, block (TILE, ROWS): each thread moves TILE/ROWS elements each way."""
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}
#define TILE {tile}
#define ROWS {rows}

extern "C" __global__ void transpose(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int m, int n) {{
    __shared__ {ctype} tile[TILE][TILE + {pad}];
    int c = blockIdx.x * TILE + threadIdx.x;
    int r0 = blockIdx.y * TILE + threadIdx.y;
    #pragma unroll
    for (int k = 0; k < TILE; k += ROWS) {{
        int r = r0 + k;
        if (r < m && c < n) tile[threadIdx.y + k][threadIdx.x] = x[(long long)r * n + c];
    }}
    __syncthreads();
    int oc = blockIdx.y * TILE + threadIdx.x;
    int or0 = blockIdx.x * TILE + threadIdx.y;
    #pragma unroll
    for (int k = 0; k < TILE; k += ROWS) {{
        int orow = or0 + k;
        if (orow < n && oc < m) y[(long long)orow * m + oc] = tile[threadIdx.x][threadIdx.y + k];
    }}
}}
"""


def _transpose_tiled_vector(dtype: str, tile: int, vector: int, rows: int, pad: int) -> str:
    """Shared tile with vector global loads and stores: each thread moves VEC consecutive elements."""
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}
#define TILE {tile}
#define VEC {vector}
#define ROWS {rows}
{pack_struct(dtype, vector)}
extern "C" __global__ void transpose(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int m, int n) {{
    __shared__ {ctype} tile[TILE][TILE + {pad}];
    int c = blockIdx.x * TILE + threadIdx.x * VEC;
    int r0 = blockIdx.y * TILE + threadIdx.y;
    #pragma unroll
    for (int k = 0; k < TILE; k += ROWS) {{
        int r = r0 + k;
        if (r < m && c < n) {{
            Pack p = *reinterpret_cast<const Pack*>(x + (long long)r * n + c);
            #pragma unroll
            for (int e = 0; e < VEC; ++e) tile[threadIdx.y + k][threadIdx.x * VEC + e] = p.v[e];
        }}
    }}
    __syncthreads();
    int oc = blockIdx.y * TILE + threadIdx.x * VEC;
    int or0 = blockIdx.x * TILE + threadIdx.y;
    #pragma unroll
    for (int k = 0; k < TILE; k += ROWS) {{
        int orow = or0 + k;
        if (orow < n && oc < m) {{
            Pack p;
            #pragma unroll
            for (int e = 0; e < VEC; ++e) p.v[e] = tile[threadIdx.x * VEC + e][threadIdx.y + k];
            *reinterpret_cast<Pack*>(y + (long long)orow * m + oc) = p;
        }}
    }}
}}
"""


def _transpose_triton(explicit_trans: bool) -> str:
    if explicit_trans:
        store = """    out_mask = (cols[:, None] < n) & (rows[None, :] < m)
    tl.store(y_ptr + cols[:, None] * m + rows[None, :], tl.trans(tile), mask=out_mask)"""
    else:
        store = "    tl.store(y_ptr + rows[:, None] + cols[None, :] * m, tile, mask=mask)"
    return f"""{TRITON_HEADER}

@triton.jit
def transpose(x_ptr, y_ptr, m, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < m) & (cols[None, :] < n)
    tile = tl.load(x_ptr + rows[:, None] * n + cols[None, :], mask=mask)
{store}
"""


def _transpose_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "y", i32(sizes["m"]), i32(sizes["n"]))


NAIVE_SHAPES = [(32, 8), (16, 16), (32, 32), (64, 4), (256, 1), (8, 32)]
TILED_SHAPES = [(16, 4), (16, 8), (16, 16), (32, 4), (32, 8), (32, 16), (32, 32), (64, 4), (64, 8), (64, 16)]
TRITON_TILES = [(32, 32), (64, 64), (128, 128), (32, 128), (128, 32), (64, 128)]


def transpose_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        only = unsupported(dtype)
        for (block_x, block_y), write_coalesced in ((shape, write) for shape in NAIVE_SHAPES for write in (False, True)):
            params = {"dtype": dtype, "block_x": block_x, "block_y": block_y, "write_coalesced": write_coalesced}
            yield Variant(
                "cuda-naive",
                "cuda",
                params,
                _transpose_naive(dtype, write_coalesced),
                _naive_launch(block_x, block_y, write_coalesced),
                unsupported=only,
            )
        for (tile, rows), pad in ((shape, pad) for shape in TILED_SHAPES for pad in (0, 1)):
            params = {"dtype": dtype, "tile": tile, "rows": rows, "pad": pad}
            yield Variant(
                "cuda-tiled", "cuda", params, _transpose_tiled(dtype, tile, rows, pad), _tile_launch(tile, tile, rows), unsupported=only
            )
        for params in product({"dtype": [dtype], "tile": [32, 64], "vector": list(TRANSPOSE_VECTORS[dtype]), "rows": [8], "pad": [0, 1]}):
            tile, vector, rows = params["tile"], params["vector"], params["rows"]
            yield Variant(
                "cuda-tiled-vector",
                "cuda",
                params,
                _transpose_tiled_vector(dtype, tile, vector, rows, params["pad"]),
                _tile_launch(tile, tile // vector, rows),
                unsupported=unsupported(dtype, divisible("m", vector), divisible("n", vector)),
            )
        for (block_m, block_n), warps in ((tiles, warps) for tiles in TRITON_TILES for warps in (2, 4, 8)):
            yield _transpose_triton_variant(dtype, "triton-trans", block_m, block_n, warps)
        for block, warps in ((block, warps) for block in (32, 64, 128) for warps in (4, 8)):
            yield _transpose_triton_variant(dtype, "triton-strided-store", block, block, warps)


def _naive_launch(block_x: int, block_y: int, write_coalesced: bool):
    def launches(sizes: Sizes) -> list[Launch]:
        along_x, along_y = (sizes["m"], sizes["n"]) if write_coalesced else (sizes["n"], sizes["m"])
        return [Launch("transpose", (cdiv(along_x, block_x), cdiv(along_y, block_y), 1), _transpose_args(sizes), (block_x, block_y, 1))]

    return launches


def _tile_launch(tile: int, threads_x: int, rows: int):
    """One block per TILE x TILE tile of the input."""
    return lambda sizes: [
        Launch("transpose", (cdiv(sizes["n"], tile), cdiv(sizes["m"], tile), 1), _transpose_args(sizes), (threads_x, rows, 1))
    ]


def _transpose_triton_variant(dtype: str, family: str, block_m: int, block_n: int, warps: int) -> Variant:
    def launches(sizes: Sizes) -> list[Launch]:
        grid = (cdiv(sizes["m"], block_m), cdiv(sizes["n"], block_n), 1)
        return [Launch("transpose", grid, _transpose_args(sizes), constexprs={"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps)]

    params = {"dtype": dtype, "BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps}
    return Variant(family, "triton", params, _transpose_triton(family == "triton-trans"), launches, unsupported=unsupported(dtype))


TRANSPOSE = Op(
    name="transpose",
    bound="memory",
    sizes=TRANSPOSE_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["m"], s["n"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["n"], s["m"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": inputs["x"].t().contiguous()},
    reference_code="def reference(x):\n    return x.t().contiguous()\n",
    variants=transpose_variants,
)

# --- embedding ----------------------------------------------------------------------------------

EMBEDDING_SIZES = [
    {"v": 1000, "d": 64, "t": 32, "dtype": "f32"},
    {"v": 32000, "d": 1024, "t": 4096, "dtype": "f32"},
    {"v": 16384, "d": 4096, "t": 16384, "dtype": "f32"},
    {"v": 32000, "d": 1024, "t": 4096, "dtype": "f16"},
    {"v": 32000, "d": 4096, "t": 16384, "dtype": "f16"},
]
EMBEDDING_VECTORS = {"f32": (1, 2, 4), "f16": (1, 2, 8)}
# (threads per block, threads per row): a whole warp, several warps, the block, or one thread (uncoalesced).
ROW_GROUPS = [(128, 1), (128, 32), (128, 128), (256, 32), (256, 128), (256, 256)]


def _embedding_elementwise(dtype: str, token_fastest: bool) -> str:
    ctype = CUDA_TYPES[dtype]
    if token_fastest:
        coords = "    long long col = i / t;\n    long long tok = i - col * t;\n"
    else:
        coords = "    long long tok = i / d;\n    long long col = i - tok * d;\n"
    return f"""{CUDA_HEADER}
extern "C" __global__ void embedding(const long long* __restrict__ idx, const {ctype}* __restrict__ w, {ctype}* __restrict__ out, int t, int d) {{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)t * d) return;
{coords}    out[tok * d + col] = w[idx[tok] * d + col];
}}
"""


def _embedding_rows(dtype: str, group: int, vector: int) -> str:
    """GROUP threads copy one row with VEC-wide loads; a block holds blockDim.x / GROUP rows."""
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}
#define GROUP {group}
#define VEC {vector}
{pack_struct(dtype, vector)}
extern "C" __global__ void embedding(const long long* __restrict__ idx, const {ctype}* __restrict__ w, {ctype}* __restrict__ out, int t, int d) {{
    int lane = threadIdx.x % GROUP;
    long long row = (long long)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
    if (row >= t) return;
    const Pack* src = reinterpret_cast<const Pack*>(w + idx[row] * d);
    Pack* dst = reinterpret_cast<Pack*>(out + row * d);
    for (int c = lane; c < d / VEC; c += GROUP) dst[c] = src[c];
}}
"""


def _embedding_triton(loop: bool) -> str:
    if loop:
        return f"""{TRITON_HEADER}

@triton.jit
def embedding(idx_ptr, w_ptr, out_ptr, t, d, BLOCK_D: tl.constexpr):
    tok = tl.program_id(0)
    row = tl.load(idx_ptr + tok)
    for start in range(0, d, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < d
        tl.store(out_ptr + tok.to(tl.int64) * d + cols, tl.load(w_ptr + row * d + cols, mask=mask), mask=mask)
"""
    return f"""{TRITON_HEADER}

@triton.jit
def embedding(idx_ptr, w_ptr, out_ptr, t, d, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    tok = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    rows = tl.load(idx_ptr + tok, mask=tok < t, other=0)
    mask = (tok[:, None] < t) & (cols[None, :] < d)
    values = tl.load(w_ptr + rows[:, None] * d + cols[None, :], mask=mask)
    tl.store(out_ptr + tok[:, None].to(tl.int64) * d + cols[None, :], values, mask=mask)
"""


def _embedding_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("idx", "w", "out", i32(sizes["t"]), i32(sizes["d"]))


def embedding_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        only = unsupported(dtype)
        for params in product({"dtype": [dtype], "block": [128, 256, 512, 1024], "token_fastest": [False, True]}):
            block = params["block"]
            launches = lambda s, block=block: [Launch("embedding", grid1(cdiv(s["t"] * s["d"], block)), _embedding_args(s), block1(block))]
            yield Variant(
                "cuda-elementwise", "cuda", params, _embedding_elementwise(dtype, params["token_fastest"]), launches, unsupported=only
            )
        for (block, group), vector in ((shape, vector) for shape in ROW_GROUPS for vector in EMBEDDING_VECTORS[dtype]):
            params = {"dtype": dtype, "block": block, "group": group, "vector": vector}
            launches = lambda s, block=block, group=group: [
                Launch("embedding", grid1(cdiv(s["t"], block // group)), _embedding_args(s), block1(block))
            ]
            yield Variant(
                "cuda-rows",
                "cuda",
                params,
                _embedding_rows(dtype, group, vector),
                launches,
                unsupported=unsupported(dtype, divisible("d", vector)),
            )
        for params in product({"dtype": [dtype], "BLOCK_T": [1, 4, 16], "BLOCK_D": [128, 512, 2048], "num_warps": [2, 8]}):
            if params["BLOCK_T"] * params["BLOCK_D"] > 8192:
                continue
            yield _embedding_triton_variant(params)
        for params in product({"dtype": [dtype], "BLOCK_D": [256, 1024], "num_warps": [1, 2, 4, 8]}):
            yield _embedding_triton_variant(params)


def _embedding_triton_variant(params: dict[str, Any]) -> Variant:
    block_t = params.get("BLOCK_T")

    def launches(sizes: Sizes) -> list[Launch]:
        if block_t is None:
            return [
                Launch(
                    "embedding",
                    grid1(sizes["t"]),
                    _embedding_args(sizes),
                    constexprs={"BLOCK_D": params["BLOCK_D"]},
                    num_warps=params["num_warps"],
                )
            ]
        grid = (cdiv(sizes["t"], block_t), cdiv(sizes["d"], params["BLOCK_D"]), 1)
        return [
            Launch(
                "embedding",
                grid,
                _embedding_args(sizes),
                constexprs={"BLOCK_T": block_t, "BLOCK_D": params["BLOCK_D"]},
                num_warps=params["num_warps"],
            )
        ]

    family = "triton-row-loop" if block_t is None else "triton-2d"
    return Variant(family, "triton", params, _embedding_triton(block_t is None), launches, unsupported=unsupported(params["dtype"]))


EMBEDDING = Op(
    name="embedding",
    bound="memory",
    sizes=EMBEDDING_SIZES,
    inputs=lambda s: {"idx": TensorSpec((s["t"],), "i64", f"randint:0:{s['v']}"), "w": TensorSpec((s["v"], s["d"]), s["dtype"])},
    outputs=lambda s: {"out": TensorSpec((s["t"], s["d"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"out": torch.nn.functional.embedding(inputs["idx"], inputs["w"])},
    reference_code="def reference(idx, w):\n    return torch.nn.functional.embedding(idx, w)\n",
    variants=embedding_variants,
)

# --- gather -------------------------------------------------------------------------------------

# Indices are uniform in [0, span): the whole 256 MB table, a 16 MB (L2-resident) window, a 256 KB hot set.
GATHER_SIZES = [
    {"n": 4096, "m": 4096, "span": 4096},
    {"n": 1 << 20, "m": 1 << 20, "span": 1 << 20},
    {"n": 1 << 26, "m": 1 << 24, "span": 1 << 16},
    {"n": 1 << 26, "m": 1 << 24, "span": 1 << 22},
    {"n": 1 << 26, "m": 1 << 24, "span": 1 << 26},
]
GATHER_LOADS = {"default": "x[j[k]]", "ldcg": "__ldcg(x + j[k])"}


def _gather_cuda(per_thread: int, load: str) -> str:
    """All PER indices of a thread are loaded before the gathers, so PER gathers are in flight at once."""
    return f"""{CUDA_HEADER}
#define PER {per_thread}

extern "C" __global__ void gather(const float* __restrict__ x, const long long* __restrict__ idx, float* __restrict__ out, int m) {{
    long long base = (long long)blockIdx.x * blockDim.x * PER + threadIdx.x;
    long long j[PER];
    #pragma unroll
    for (int k = 0; k < PER; ++k) {{
        long long i = base + (long long)k * blockDim.x;
        j[k] = i < m ? idx[i] : 0;
    }}
    #pragma unroll
    for (int k = 0; k < PER; ++k) {{
        long long i = base + (long long)k * blockDim.x;
        if (i < m) out[i] = {GATHER_LOADS[load]};
    }}
}}
"""


def _gather_triton(cache: str) -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def gather(x_ptr, idx_ptr, out_ptr, m, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < m
    j = tl.load(idx_ptr + offsets, mask=mask, other=0)
    tl.store(out_ptr + offsets, tl.load(x_ptr + j, mask=mask, cache_modifier="{cache}"), mask=mask)
"""


def gather_variants() -> Iterable[Variant]:
    for params in product({"block": [128, 256, 512, 1024], "per_thread": [1, 2, 4, 8], "load": ["default", "ldcg"]}):
        block, per_thread = params["block"], params["per_thread"]
        launches = lambda s, block=block, per_thread=per_thread: [
            Launch("gather", grid1(cdiv(s["m"], block * per_thread)), ("x", "idx", "out", i32(s["m"])), block1(block))
        ]
        yield Variant("cuda-gather", "cuda", params, _gather_cuda(per_thread, params["load"]), launches)
    for params in product({"BLOCK": [256, 1024, 4096], "num_warps": [2, 4, 8], "cache_modifier": ["", ".cg"]}):
        block, warps = params["BLOCK"], params["num_warps"]
        launches = lambda s, block=block, warps=warps: [
            Launch("gather", grid1(cdiv(s["m"], block)), ("x", "idx", "out", i32(s["m"])), constexprs={"BLOCK": block}, num_warps=warps)
        ]
        yield Variant("triton-gather", "triton", params, _gather_triton(params["cache_modifier"]), launches)


GATHER = Op(
    name="gather",
    bound="memory",
    sizes=GATHER_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],)), "idx": TensorSpec((s["m"],), "i64", f"randint:0:{s['span']}")},
    outputs=lambda s: {"out": TensorSpec((s["m"],))},
    reference=lambda torch, inputs, sizes: {"out": inputs["x"][inputs["idx"]]},
    reference_code="def reference(x, idx):\n    return x[idx]\n",
    variants=gather_variants,
)

# --- scatter_add --------------------------------------------------------------------------------

# t rows of width d added into v target rows: ~t/v additions per output element (512 in the contended one).
SCATTER_SIZES = [
    {"v": 64, "d": 32, "t": 128},
    {"v": 4096, "d": 256, "t": 16384},
    {"v": 65536, "d": 512, "t": 65536},
    {"v": 32, "d": 1024, "t": 16384},
    {"v": 50000, "d": 128, "t": 1 << 19},
]
ATOMIC_VECTOR_TYPES = {1: "float", 2: "float2", 4: "float4"}


def _scatter_elementwise(per_thread: int) -> str:
    return f"""{CUDA_HEADER}
#define PER {per_thread}

extern "C" __global__ void scatter_add(const long long* __restrict__ idx, const float* __restrict__ src, float* __restrict__ out, int t, int d) {{
    long long total = (long long)t * d;
    long long base = (long long)blockIdx.x * blockDim.x * PER + threadIdx.x;
    #pragma unroll
    for (int k = 0; k < PER; ++k) {{
        long long i = base + (long long)k * blockDim.x;
        if (i < total) {{
            long long tok = i / d;
            atomicAdd(out + idx[tok] * d + (i - tok * d), src[i]);
        }}
    }}
}}
"""


def _scatter_rows(group: int, vector: int) -> str:
    """GROUP threads add one source row with float/float2/float4 atomics (sm_90 has vector atomicAdd)."""
    vtype = ATOMIC_VECTOR_TYPES[vector]
    return f"""{CUDA_HEADER}
#define GROUP {group}
#define VEC {vector}

extern "C" __global__ void scatter_add(const long long* __restrict__ idx, const float* __restrict__ src, float* __restrict__ out, int t, int d) {{
    int lane = threadIdx.x % GROUP;
    long long row = (long long)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
    if (row >= t) return;
    const {vtype}* s = reinterpret_cast<const {vtype}*>(src + row * d);
    {vtype}* o = reinterpret_cast<{vtype}*>(out + idx[row] * d);
    for (int c = lane; c < d / VEC; c += GROUP) atomicAdd(o + c, s[c]);
}}
"""


def _scatter_warp_tile(warps: int, aggregate: bool) -> str:
    """A 32-token x 32-column tile staged in shared memory; a warp takes a column, lane = token.

    With aggregation, lanes whose tokens share a target row (__match_any_sync) sum their
    values with shuffles and only the lowest such lane issues the atomic.
    """
    if aggregate:
        update = """        float sum = 0.0f;
        #pragma unroll
        for (int s = 0; s < 32; ++s) {
            float other = __shfl_sync(0xffffffffu, v, s);
            if ((peers >> s) & 1u) sum += other;
        }
        if (key >= 0 && col < d && lane == leader) atomicAdd(out + key * d + col, sum);"""
    else:
        update = "        if (key >= 0 && col < d) atomicAdd(out + key * d + col, v);"
    return f"""{CUDA_HEADER}
#define WARPS {warps}

extern "C" __global__ void scatter_add(const long long* __restrict__ idx, const float* __restrict__ src, float* __restrict__ out, int t, int d) {{
    __shared__ float tile[32][33];
    __shared__ long long keys[32];
    int lane = threadIdx.x, warp = threadIdx.y;
    int t0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    if (warp == 0) keys[lane] = t0 + lane < t ? idx[t0 + lane] : -1;
    for (int r = warp; r < 32; r += WARPS) {{
        int tok = t0 + r, col = c0 + lane;
        tile[r][lane] = (tok < t && col < d) ? src[(long long)tok * d + col] : 0.0f;
    }}
    __syncthreads();
    long long key = keys[lane];
    unsigned peers = __match_any_sync(0xffffffffu, key);
    int leader = __ffs(peers) - 1;
    for (int c = warp; c < 32; c += WARPS) {{
        int col = c0 + c;
        float v = tile[lane][c];
{update}
    }}
}}
"""


def _scatter_triton(sem: str) -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def scatter_add(idx_ptr, src_ptr, out_ptr, t, d, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    tok = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    rows = tl.load(idx_ptr + tok, mask=tok < t, other=0)
    mask = (tok[:, None] < t) & (cols[None, :] < d)
    values = tl.load(src_ptr + tok[:, None].to(tl.int64) * d + cols[None, :], mask=mask)
    tl.atomic_add(out_ptr + rows[:, None] * d + cols[None, :], values, mask=mask, sem="{sem}")
"""


def _scatter_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("idx", "src", "out", i32(sizes["t"]), i32(sizes["d"]))


def scatter_variants() -> Iterable[Variant]:
    for params in product({"block": [128, 256, 512, 1024], "per_thread": [1, 4]}):
        block, per_thread = params["block"], params["per_thread"]
        launches = lambda s, block=block, per_thread=per_thread: [
            Launch(ZERO, grid1(1), ("out",)),
            Launch("scatter_add", grid1(cdiv(s["t"] * s["d"], block * per_thread)), _scatter_args(s), block1(block)),
        ]
        yield Variant("cuda-atomic", "cuda", params, _scatter_elementwise(per_thread), launches)
    for (block, group), vector in ((shape, vector) for shape in ROW_GROUPS if shape[1] > 1 for vector in (1, 2, 4)):
        params = {"block": block, "group": group, "vector": vector}
        launches = lambda s, block=block, group=group: [
            Launch(ZERO, grid1(1), ("out",)),
            Launch("scatter_add", grid1(cdiv(s["t"], block // group)), _scatter_args(s), block1(block)),
        ]
        yield Variant(
            "cuda-atomic-rows",
            "cuda",
            params,
            _scatter_rows(group, vector),
            launches,
            unsupported=unsupported(None, divisible("d", vector)),
        )
    for params in product({"warps": [2, 4, 8], "aggregate": [False, True]}):
        warps = params["warps"]
        launches = lambda s, warps=warps: [
            Launch(ZERO, grid1(1), ("out",)),
            Launch("scatter_add", (cdiv(s["d"], 32), cdiv(s["t"], 32), 1), _scatter_args(s), (32, warps, 1)),
        ]
        yield Variant("cuda-warp-tile", "cuda", params, _scatter_warp_tile(warps, params["aggregate"]), launches)
    for params in product({"BLOCK_T": [1, 8, 32], "BLOCK_D": [128, 512], "sem": ["acq_rel", "relaxed"], "num_warps": [4]}):
        yield _scatter_triton_variant(params)


def _scatter_triton_variant(params: dict[str, Any]) -> Variant:
    block_t, block_d = params["BLOCK_T"], params["BLOCK_D"]

    def launches(sizes: Sizes) -> list[Launch]:
        grid = (cdiv(sizes["t"], block_t), cdiv(sizes["d"], block_d), 1)
        constexprs = {"BLOCK_T": block_t, "BLOCK_D": block_d}
        return [
            Launch(ZERO, grid1(1), ("out",)),
            Launch("scatter_add", grid, _scatter_args(sizes), constexprs=constexprs, num_warps=params["num_warps"]),
        ]

    return Variant("triton-atomic", "triton", params, _scatter_triton(params["sem"]), launches)


def _scatter_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    out = torch.zeros((sizes["v"], sizes["d"]), dtype=inputs["src"].dtype, device=inputs["src"].device)
    return {"out": out.index_add_(0, inputs["idx"], inputs["src"])}


SCATTER_ADD = Op(
    name="scatter_add",
    bound="memory",
    sizes=SCATTER_SIZES,
    inputs=lambda s: {"idx": TensorSpec((s["t"],), "i64", f"randint:0:{s['v']}"), "src": TensorSpec((s["t"], s["d"]))},
    outputs=lambda s: {"out": TensorSpec((s["v"], s["d"]))},
    reference=_scatter_reference,
    reference_code="def reference(idx, src, v):\n    return torch.zeros(v, src.shape[1], device=src.device).index_add_(0, idx, src)\n",
    variants=scatter_variants,
    # Up to ~512 fp32 additions per element in an order the atomics choose (the reference's too).
    tolerance={"f32": 1e-4},
)

OPS = [TRANSPOSE, EMBEDDING, GATHER, SCATTER_ADD]
