"""Stencils: a 5-point 2D smoothing (Jacobi-style) step and a radius-3 1D stencil, zero outside.

What varies is how neighbours are reused:
- stencil2d: every neighbour from global memory (L1/L2 catch the reuse) with block shapes
  from coalesced (32x8) to column-heavy (8x32); one thread marching down a column keeping
  three rows in registers (rows per thread); a shared-memory tile with its halo loaded
  cooperatively or by the edge threads (divergent); VEC outputs per thread from vector loads;
  Triton 2D blocks of five shifted loads (BLOCK_H, BLOCK_W, num_warps).
- stencil1d: seven global loads per output (outputs per thread), a shared-memory tile with
  halo, neighbours from warp shuffles (edge lanes load their own), VEC outputs per thread from
  three vector loads, Triton blocks of seven shifted loads. Asymmetric weights, so a mirrored
  stencil is caught.
fp32 and fp16 problems (fp32 arithmetic).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import pack_struct
from workshop.corpus.ops.rowkit import TRITON_HEADER, divisible, unsupported
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
    Launch,
    Op,
    Sizes,
    TensorSpec,
    Variant,
    block1,
    cdiv,
    cuda_load_as_float,
    cuda_store_from_float,
    grid1,
    i32,
    product,
)

FULL = "0xffffffffu"


def _loader_2d(dtype: str) -> str:
    ctype = CUDA_TYPES[dtype]
    return f"""
__device__ __forceinline__ float at(const {ctype}* __restrict__ x, int i, int j, int h, int w) {{
    return (i >= 0 && i < h && j >= 0 && j < w) ? {cuda_load_as_float(dtype, "x[(long long)i * w + j]")} : 0.0f;
}}
"""


def _signature_2d(dtype: str) -> str:
    ctype = CUDA_TYPES[dtype]
    return f'extern "C" __global__ void stencil2d(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int h, int w)'


# --- stencil2d ----------------------------------------------------------------------------------

STENCIL2D_SIZES = [
    {"h": 100, "w": 72, "dtype": "f32"},
    {"h": 1024, "w": 1536, "dtype": "f32"},
    {"h": 8192, "w": 8192, "dtype": "f32"},
    {"h": 4096, "w": 4096, "dtype": "f16"},
    {"h": 8192, "w": 8192, "dtype": "f16"},
]
NAIVE_2D_SHAPES = [(32, 4), (32, 8), (32, 16), (32, 32), (64, 4), (128, 2), (256, 1), (16, 16), (8, 32)]
TILE_2D_SHAPES = [(32, 4), (32, 8), (32, 16), (32, 32), (64, 8), (16, 16)]
VECTOR_2D_SHAPES = [(32, 4), (32, 8), (64, 4), (128, 1)]
VECTORS = {"f32": (2, 4), "f16": (4, 8)}
TRITON_2D_TILES = [(4, 128), (8, 128), (16, 64), (32, 32), (1, 512), (16, 256)]


def _stencil2d_naive(dtype: str) -> str:
    return f"""{CUDA_HEADER}{_loader_2d(dtype)}
{_signature_2d(dtype)} {{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= h || j >= w) return;
    float sum = at(x, i, j, h, w) + at(x, i - 1, j, h, w) + at(x, i + 1, j, h, w) + at(x, i, j - 1, h, w) + at(x, i, j + 1, h, w);
    y[(long long)i * w + j] = {cuda_store_from_float(dtype, "0.2f * sum")};
}}
"""


def _stencil2d_march(dtype: str, rows: int) -> str:
    """A thread walks ROWS rows down its column, loading one new row element per step."""
    return f"""{CUDA_HEADER}#define ROWS {rows}
{_loader_2d(dtype)}
{_signature_2d(dtype)} {{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= w) return;
    int i0 = blockIdx.y * ROWS;
    float up = at(x, i0 - 1, j, h, w), center = at(x, i0, j, h, w);
    for (int r = 0; r < ROWS; ++r) {{
        int i = i0 + r;
        if (i >= h) break;
        float down = at(x, i + 1, j, h, w);
        float sum = center + up + down + at(x, i, j - 1, h, w) + at(x, i, j + 1, h, w);
        y[(long long)i * w + j] = {cuda_store_from_float(dtype, "0.2f * sum")};
        up = center;
        center = down;
    }}
}}
"""


def _stencil2d_tiled(dtype: str, bx: int, by: int, halo: str) -> str:
    """A (BY+2) x (BX+2) shared tile: filled by all threads in a strided loop, or halo by edge threads."""
    if halo == "cooperative":
        fill = """    for (int k = threadIdx.y * BX + threadIdx.x; k < (BY + 2) * (BX + 2); k += BX * BY) {
        int ti = k / (BX + 2), tj = k - ti * (BX + 2);
        s[ti][tj] = at(x, i0 + ti - 1, j0 + tj - 1, h, w);
    }"""
    else:
        fill = """    s[ty + 1][tx + 1] = at(x, i, j, h, w);
    if (tx == 0) s[ty + 1][0] = at(x, i, j - 1, h, w);
    if (tx == BX - 1) s[ty + 1][BX + 1] = at(x, i, j + 1, h, w);
    if (ty == 0) s[0][tx + 1] = at(x, i - 1, j, h, w);
    if (ty == BY - 1) s[BY + 1][tx + 1] = at(x, i + 1, j, h, w);"""
    return f"""{CUDA_HEADER}#define BX {bx}
#define BY {by}
{_loader_2d(dtype)}
{_signature_2d(dtype)} {{
    __shared__ float s[BY + 2][BX + 2];
    int tx = threadIdx.x, ty = threadIdx.y;
    int j0 = blockIdx.x * BX, i0 = blockIdx.y * BY;
    int i = i0 + ty, j = j0 + tx;
{fill}
    __syncthreads();
    if (i < h && j < w) {{
        float sum = s[ty + 1][tx + 1] + s[ty][tx + 1] + s[ty + 2][tx + 1] + s[ty + 1][tx] + s[ty + 1][tx + 2];
        y[(long long)i * w + j] = {cuda_store_from_float(dtype, "0.2f * sum")};
    }}
}}
"""


def _stencil2d_vector(dtype: str, vector: int) -> str:
    """VEC consecutive outputs per thread: vector loads of the row and the rows above and below."""
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}#define VEC {vector}
{pack_struct(dtype, vector)}{_loader_2d(dtype)}
__device__ __forceinline__ void load_row(const {ctype}* __restrict__ x, int i, int j0, int h, int w, float* out) {{
    if (i >= 0 && i < h) {{
        Pack p = *reinterpret_cast<const Pack*>(x + (long long)i * w + j0);
        #pragma unroll
        for (int e = 0; e < VEC; ++e) out[e] = {cuda_load_as_float(dtype, "p.v[e]")};
    }} else {{
        #pragma unroll
        for (int e = 0; e < VEC; ++e) out[e] = 0.0f;
    }}
}}

{_signature_2d(dtype)} {{
    int j0 = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= h || j0 >= w) return;
    float up[VEC], center[VEC], down[VEC];
    load_row(x, i - 1, j0, h, w, up);
    load_row(x, i, j0, h, w, center);
    load_row(x, i + 1, j0, h, w, down);
    float left = at(x, i, j0 - 1, h, w), right = at(x, i, j0 + VEC, h, w);
    Pack out;
    #pragma unroll
    for (int e = 0; e < VEC; ++e) {{
        float l = e > 0 ? center[e - 1] : left;
        float r = e < VEC - 1 ? center[e + 1] : right;
        float sum = center[e] + up[e] + down[e] + l + r;
        out.v[e] = {cuda_store_from_float(dtype, "0.2f * sum")};
    }}
    *reinterpret_cast<Pack*>(y + (long long)i * w + j0) = out;
}}
"""


STENCIL2D_TRITON = f"""{TRITON_HEADER}

@triton.jit
def shifted(x_ptr, rows, cols, h, w):
    mask = (rows[:, None] >= 0) & (rows[:, None] < h) & (cols[None, :] >= 0) & (cols[None, :] < w)
    return tl.load(x_ptr + rows[:, None] * w + cols[None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def stencil2d(x_ptr, y_ptr, h, w, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    rows = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    cols = tl.program_id(0) * BLOCK_W + tl.arange(0, BLOCK_W)
    total = shifted(x_ptr, rows, cols, h, w) + shifted(x_ptr, rows - 1, cols, h, w) + shifted(x_ptr, rows + 1, cols, h, w)
    total += shifted(x_ptr, rows, cols - 1, h, w) + shifted(x_ptr, rows, cols + 1, h, w)
    mask = (rows[:, None] < h) & (cols[None, :] < w)
    tl.store(y_ptr + rows[:, None] * w + cols[None, :], (0.2 * total).to(y_ptr.dtype.element_ty), mask=mask)
"""


def _args_2d(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "y", i32(sizes["h"]), i32(sizes["w"]))


def _launch_2d(threads: tuple[int, int], per_x: int, per_y: int):
    """Blocks of `threads`, each thread covering per_x columns and per_y rows."""
    bx, by = threads

    def launches(sizes: Sizes) -> list[Launch]:
        grid = (cdiv(sizes["w"], bx * per_x), cdiv(sizes["h"], by * per_y), 1)
        return [Launch("stencil2d", grid, _args_2d(sizes), (bx, by, 1))]

    return launches


def stencil2d_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        only = unsupported(dtype)
        for bx, by in NAIVE_2D_SHAPES:
            yield Variant(
                "cuda-naive",
                "cuda",
                {"dtype": dtype, "block_x": bx, "block_y": by},
                _stencil2d_naive(dtype),
                _launch_2d((bx, by), 1, 1),
                unsupported=only,
            )
        for params in product({"dtype": [dtype], "block_x": [32, 64, 128, 256], "rows": [4, 16, 64]}):
            code = _stencil2d_march(dtype, params["rows"])
            yield Variant(
                "cuda-column-march", "cuda", params, code, _launch_2d((params["block_x"], 1), 1, params["rows"]), unsupported=only
            )
        for (bx, by), halo in ((shape, halo) for shape in TILE_2D_SHAPES for halo in ("cooperative", "edge-threads")):
            params = {"dtype": dtype, "block_x": bx, "block_y": by, "halo": halo}
            yield Variant(
                "cuda-smem-tile", "cuda", params, _stencil2d_tiled(dtype, bx, by, halo), _launch_2d((bx, by), 1, 1), unsupported=only
            )
        for (bx, by), vector in ((shape, vector) for shape in VECTOR_2D_SHAPES for vector in VECTORS[dtype]):
            params = {"dtype": dtype, "block_x": bx, "block_y": by, "vector": vector}
            yield Variant(
                "cuda-vector",
                "cuda",
                params,
                _stencil2d_vector(dtype, vector),
                _launch_2d((bx, by), vector, 1),
                unsupported=unsupported(dtype, divisible("w", vector)),
            )
        for (block_h, block_w), warps in ((tile, warps) for tile in TRITON_2D_TILES for warps in (4, 8)):
            params = {"dtype": dtype, "BLOCK_H": block_h, "BLOCK_W": block_w, "num_warps": warps}
            yield Variant("triton-2d", "triton", params, STENCIL2D_TRITON, _triton_launch_2d(block_h, block_w, warps), unsupported=only)


def _triton_launch_2d(block_h: int, block_w: int, warps: int):
    def launches(sizes: Sizes) -> list[Launch]:
        grid = (cdiv(sizes["w"], block_w), cdiv(sizes["h"], block_h), 1)
        return [Launch("stencil2d", grid, _args_2d(sizes), constexprs={"BLOCK_H": block_h, "BLOCK_W": block_w}, num_warps=warps)]

    return launches


def _stencil2d_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    x = inputs["x"]
    p = torch.nn.functional.pad(x.float(), (1, 1, 1, 1))
    out = 0.2 * (p[1:-1, 1:-1] + p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])
    return {"y": out.to(x.dtype)}


STENCIL2D = Op(
    name="stencil2d",
    bound="memory",
    sizes=STENCIL2D_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["h"], s["w"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["h"], s["w"]), s["dtype"])},
    reference=_stencil2d_reference,
    reference_code="""def reference(x):
    p = torch.nn.functional.pad(x.float(), (1, 1, 1, 1))
    return (0.2 * (p[1:-1, 1:-1] + p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])).to(x.dtype)
""",
    variants=stencil2d_variants,
)

# --- stencil1d ----------------------------------------------------------------------------------

STENCIL1D_SIZES = [
    {"n": 5003, "dtype": "f32"},
    {"n": 1 << 20, "dtype": "f32"},
    {"n": 1 << 26, "dtype": "f32"},
    {"n": 1 << 20, "dtype": "f16"},
    {"n": 1 << 26, "dtype": "f16"},
]
RADIUS = 3
WEIGHTS = (0.01, 0.02, 0.07, 0.5, 0.2, 0.12, 0.08)  # x[i-3] .. x[i+3]


def _weighted(term) -> str:
    """The stencil as one C/Python expression; term(k) is the neighbour at offset k - RADIUS."""
    return " + ".join(f"{weight}f * {term(k)}" for k, weight in enumerate(WEIGHTS))


def _loader_1d(dtype: str) -> str:
    ctype = CUDA_TYPES[dtype]
    return f"""
__device__ __forceinline__ float at(const {ctype}* __restrict__ x, long long i, int n) {{
    return (i >= 0 && i < n) ? {cuda_load_as_float(dtype, "x[i]")} : 0.0f;
}}
"""


def _signature_1d(dtype: str) -> str:
    ctype = CUDA_TYPES[dtype]
    return f'extern "C" __global__ void stencil1d(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int n)'


def _stencil1d_naive(dtype: str, per_thread: int) -> str:
    value = _weighted(lambda k: f"at(x, i + {k - RADIUS}, n)")
    return f"""{CUDA_HEADER}#define PER {per_thread}
{_loader_1d(dtype)}
{_signature_1d(dtype)} {{
    long long base = (long long)blockIdx.x * blockDim.x * PER + threadIdx.x;
    #pragma unroll
    for (int k = 0; k < PER; ++k) {{
        long long i = base + (long long)k * blockDim.x;
        if (i < n) y[i] = {cuda_store_from_float(dtype, value)};
    }}
}}
"""


def _stencil1d_smem(dtype: str, block: int, per_thread: int) -> str:
    """BLOCK*PER outputs per block from a shared tile with RADIUS halo elements on each side."""
    value = _weighted(lambda k: f"s[t + {k}]")
    return f"""{CUDA_HEADER}#define BLOCK {block}
#define PER {per_thread}
#define R {RADIUS}
{_loader_1d(dtype)}
{_signature_1d(dtype)} {{
    __shared__ float s[BLOCK * PER + 2 * R];
    long long start = (long long)blockIdx.x * BLOCK * PER;
    for (int k = threadIdx.x; k < BLOCK * PER + 2 * R; k += BLOCK) s[k] = at(x, start + k - R, n);
    __syncthreads();
    #pragma unroll
    for (int p = 0; p < PER; ++p) {{
        int t = threadIdx.x + p * BLOCK;
        if (start + t < n) y[start + t] = {cuda_store_from_float(dtype, value)};
    }}
}}
"""


def _stencil1d_shuffle(dtype: str) -> str:
    """One element per thread; neighbours come from other lanes, lanes at the warp's edges load their own."""
    fetch = []
    for d in range(1, RADIUS + 1):
        fetch.append(f"    float l{d} = __shfl_up_sync({FULL}, c, {d});\n    if (lane < {d}) l{d} = at(x, i - {d}, n);")
        fetch.append(f"    float r{d} = __shfl_down_sync({FULL}, c, {d});\n    if (lane > {31 - d}) r{d} = at(x, i + {d}, n);")
    names = [f"l{RADIUS - k}" for k in range(RADIUS)] + ["c"] + [f"r{k}" for k in range(1, RADIUS + 1)]
    value = _weighted(lambda k: names[k])
    return f"""{CUDA_HEADER}{_loader_1d(dtype)}
{_signature_1d(dtype)} {{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    float c = at(x, i, n);
{chr(10).join(fetch)}
    if (i < n) y[i] = {cuda_store_from_float(dtype, value)};
}}
"""


def _stencil1d_vector(dtype: str, vector: int) -> str:
    """VEC outputs per thread from the vectors left of, at and right of its own (VEC >= RADIUS)."""
    ctype = CUDA_TYPES[dtype]
    value = _weighted(lambda k: f"win[VEC + e + {k - RADIUS}]")
    return f"""{CUDA_HEADER}#define VEC {vector}
{pack_struct(dtype, vector)}{_loader_1d(dtype)}
__device__ __forceinline__ void load_vec(const {ctype}* __restrict__ x, long long j, int n, float* out) {{
    if (j >= 0 && j + VEC <= n) {{
        Pack p = *reinterpret_cast<const Pack*>(x + j);
        #pragma unroll
        for (int e = 0; e < VEC; ++e) out[e] = {cuda_load_as_float(dtype, "p.v[e]")};
    }} else {{
        #pragma unroll
        for (int e = 0; e < VEC; ++e) out[e] = at(x, j + e, n);
    }}
}}

{_signature_1d(dtype)} {{
    long long j0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (j0 >= n) return;
    float win[3 * VEC];
    load_vec(x, j0 - VEC, n, win);
    load_vec(x, j0, n, win + VEC);
    load_vec(x, j0 + VEC, n, win + 2 * VEC);
    Pack out;
    #pragma unroll
    for (int e = 0; e < VEC; ++e) out.v[e] = {cuda_store_from_float(dtype, value)};
    if (j0 + VEC <= n) {{
        *reinterpret_cast<Pack*>(y + j0) = out;
    }} else {{
        for (int e = 0; j0 + e < n; ++e) y[j0 + e] = out.v[e];
    }}
}}
"""


def _stencil1d_triton() -> str:
    def term(k: int) -> str:
        return f"tl.load(x_ptr + offsets + {k - RADIUS}, mask=(offsets + {k - RADIUS} >= 0) & (offsets + {k - RADIUS} < n), other=0.0).to(tl.float32)"

    lines = "\n".join(f"    total += {weight} * {term(k)}" for k, weight in enumerate(WEIGHTS))
    return f"""{TRITON_HEADER}

@triton.jit
def stencil1d(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], dtype=tl.float32)
{lines}
    tl.store(y_ptr + offsets, total.to(y_ptr.dtype.element_ty), mask=offsets < n)
"""


def _launch_1d(block: int, per_thread: int):
    return lambda s: [Launch("stencil1d", grid1(cdiv(s["n"], block * per_thread)), ("x", "y", i32(s["n"])), block1(block))]


def stencil1d_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        only = unsupported(dtype)
        for params in product({"dtype": [dtype], "block": [128, 256, 512, 1024], "per_thread": [1, 2, 4]}):
            block, per_thread = params["block"], params["per_thread"]
            yield Variant(
                "cuda-naive", "cuda", params, _stencil1d_naive(dtype, per_thread), _launch_1d(block, per_thread), unsupported=only
            )
            yield Variant(
                "cuda-smem", "cuda", params, _stencil1d_smem(dtype, block, per_thread), _launch_1d(block, per_thread), unsupported=only
            )
        for block in (128, 256, 512, 1024):
            yield Variant(
                "cuda-shuffle", "cuda", {"dtype": dtype, "block": block}, _stencil1d_shuffle(dtype), _launch_1d(block, 1), unsupported=only
            )
        for params in product({"dtype": [dtype], "block": [128, 256, 512], "vector": [4, 8]}):
            yield Variant(
                "cuda-vector",
                "cuda",
                params,
                _stencil1d_vector(dtype, params["vector"]),
                _launch_1d(params["block"], params["vector"]),
                unsupported=only,
            )
        for params in product({"dtype": [dtype], "BLOCK": [256, 1024, 4096], "num_warps": [2, 4, 8]}):
            block, warps = params["BLOCK"], params["num_warps"]
            launches = lambda s, block=block, warps=warps: [
                Launch("stencil1d", grid1(cdiv(s["n"], block)), ("x", "y", i32(s["n"])), constexprs={"BLOCK": block}, num_warps=warps)
            ]
            yield Variant("triton-1d", "triton", params, _stencil1d_triton(), launches, unsupported=only)


def _stencil1d_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    x = inputs["x"]
    n = x.shape[0]
    p = torch.nn.functional.pad(x.float(), (RADIUS, RADIUS))
    out = sum(weight * p[k : k + n] for k, weight in enumerate(WEIGHTS))
    return {"y": out.to(x.dtype)}


STENCIL1D = Op(
    name="stencil1d",
    bound="memory",
    sizes=STENCIL1D_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["n"],), s["dtype"])},
    reference=_stencil1d_reference,
    reference_code=f"""def reference(x):
    weights = {WEIGHTS}
    p = torch.nn.functional.pad(x.float(), ({RADIUS}, {RADIUS}))
    return sum(w * p[k : k + x.shape[0]] for k, w in enumerate(weights)).to(x.dtype)
""",
    variants=stencil1d_variants,
)

OPS = [STENCIL2D, STENCIL1D]
