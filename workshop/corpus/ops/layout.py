"""Layout changes: a batched 0-2-1 permute and a 2x nearest-neighbour upsample.

Pure copies (outputs must match bit for bit), so what varies is which side of the copy is
coalesced and how much index arithmetic a thread does:
- permute021 (y[b, j, i] = x[b, i, j], e.g. NCHW -> NHWC): naive kernels with threadIdx.x
  along the read side or the write side (block shape, restrict), batch in blockIdx.z; a flat
  1D index over the output or the input with integer divisions (block size); shared-memory
  tiles (tile 16/32, rows per thread, +1 padding, batch in blockIdx.z or folded into
  blockIdx.x with divisions, restrict); for few channels (M <= 16) a thread per pixel looping
  over channels, writing directly or staging the block's channels in shared memory so the
  stores are one contiguous run; Triton blocks with tl.trans or a strided store (BLOCK_M,
  BLOCK_N, num_warps). Shapes with M, N not multiples of 32 and a 3-channel image.
- upsample_nearest2d ((N, C, H, W) -> (N, C, 2H, 2W)): a thread per output element with
  div/mod index math (block size, grid-stride loop, restrict) or a 3D grid (block shape); a
  thread per input element writing its 2x2 outputs with scalar, pair (float2/half2) or
  quad (two input columns) vector stores; a thread per (input row, output column) writing
  both output rows; Triton 2D blocks over the output (a gather) or over the input duplicated
  with tl.interleave (BLOCK_R, BLOCK_W, num_warps).
fp32 and fp16 problems.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import ELEMENT_BYTES, pack_struct
from workshop.corpus.ops.rowkit import THREADS_PER_SM, TRITON_HEADER, at_most, divisible, resident_blocks, unsupported
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
    grid1,
    i32,
    product,
)

DTYPES = ("f32", "f16")


def _pointers(dtype: str, restrict: bool, names: tuple[str, str] = ("x", "y")) -> str:
    """The input and output pointer parameters, with or without __restrict__."""
    ctype = CUDA_TYPES[dtype]
    qualifier = " __restrict__" if restrict else ""
    return f"const {ctype}*{qualifier} {names[0]}, {ctype}*{qualifier} {names[1]}"


# --- permute021 ---------------------------------------------------------------------------------

PERMUTE_SIZES = [
    {"b": 4, "m": 50, "n": 70, "dtype": "f32"},
    {"b": 32, "m": 3, "n": 50176, "dtype": "f32"},  # a batch of 3x224x224 images to channels-last
    {"b": 16, "m": 384, "n": 500, "dtype": "f32"},
    {"b": 32, "m": 1024, "n": 1000, "dtype": "f32"},
    {"b": 32, "m": 3, "n": 50176, "dtype": "f16"},
    {"b": 32, "m": 1024, "n": 1000, "dtype": "f16"},
]
CHANNELS_MAX_M = 16


def _permute_naive(dtype: str, coalesced: str, restrict: bool) -> str:
    """One element per thread, batch in blockIdx.z; threadIdx.x walks the input row (coalesced loads) or the output row."""
    if coalesced == "read":
        coords = "    int j = blockIdx.x * blockDim.x + threadIdx.x;\n    int i = blockIdx.y * blockDim.y + threadIdx.y;\n"
    else:
        coords = "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int j = blockIdx.y * blockDim.y + threadIdx.y;\n"
    return f"""{CUDA_HEADER}
extern "C" __global__ void permute021({_pointers(dtype, restrict)}, int B, int M, int N) {{
    int b = blockIdx.z;
{coords}    if (i < M && j < N)
        y[((long long)b * N + j) * M + i] = x[((long long)b * M + i) * N + j];
}}
"""


def _permute_flat(dtype: str, coalesced: str) -> str:
    """A 1D index over the output (coalesced stores) or the input (coalesced loads), split with / and %."""
    if coalesced == "write":
        body = """    int b = idx / (M * N);
    int rem = idx % (M * N);
    int j = rem / M;
    int i = rem % M;
    y[idx] = x[b * M * N + i * N + j];"""
    else:
        body = """    int b = idx / (M * N);
    int rem = idx % (M * N);
    int i = rem / N;
    int j = rem % N;
    y[b * M * N + j * M + i] = x[idx];"""
    return f"""{CUDA_HEADER}
extern "C" __global__ void permute021({_pointers(dtype, False)}, int B, int M, int N) {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * M * N) return;
{body}
}}
"""


def _permute_tiled(dtype: str, tile: int, rows: int, pad: int, batch: str, restrict: bool) -> str:
    """A TILE x TILE shared tile per block of (TILE, ROWS) threads; the batch from blockIdx.z or divided out of blockIdx.x."""
    ctype = CUDA_TYPES[dtype]
    if batch == "grid_z":
        where = "    int b = blockIdx.z, tile_r = blockIdx.y, tile_c = blockIdx.x;\n"
    else:
        where = """    int tiles_c = (cols + TILE - 1) / TILE;
    int tiles_r = (rows + TILE - 1) / TILE;
    int b = blockIdx.x / (tiles_r * tiles_c);
    int t = blockIdx.x % (tiles_r * tiles_c);
    int tile_r = t / tiles_c, tile_c = t % tiles_c;
"""
    width = "TILE + 1" if pad else "TILE"
    return f"""{CUDA_HEADER}
#define TILE {tile}
#define ROWS {rows}

extern "C" __global__ void permute021({_pointers(dtype, restrict)}, int batch, int rows, int cols) {{
    __shared__ {ctype} tile[TILE][{width}];
{where}    const {ctype}* src = x + (long long)b * rows * cols;
    {ctype}* dst = y + (long long)b * rows * cols;
    int c = tile_c * TILE + threadIdx.x;
    for (int k = 0; k < TILE; k += ROWS) {{
        int r = tile_r * TILE + threadIdx.y + k;
        if (r < rows && c < cols) tile[threadIdx.y + k][threadIdx.x] = src[r * cols + c];
    }}
    __syncthreads();
    int oc = tile_r * TILE + threadIdx.x;  // output column = input row
    for (int k = 0; k < TILE; k += ROWS) {{
        int orow = tile_c * TILE + threadIdx.y + k;  // output row = input column
        if (orow < cols && oc < rows) dst[orow * rows + oc] = tile[threadIdx.x][threadIdx.y + k];
    }}
}}
"""


def _permute_channels(dtype: str, block: int, staged: bool) -> str:
    """NCHW -> NHWC for few channels: a thread per pixel (blockIdx.y = image).

    Direct: each thread stores its C channels itself (C-strided stores). Staged: the block
    copies its pixels' channels into shared memory, then writes its count * C outputs as one
    contiguous run.
    """
    ctype = CUDA_TYPES[dtype]
    head = f"""{CUDA_HEADER}
#define BLOCK {block}

extern "C" __global__ void permute021({_pointers(dtype, True)}, int B, int C, int HW) {{
    const {ctype}* src = x + (long long)blockIdx.y * C * HW;
    {ctype}* dst = y + (long long)blockIdx.y * HW * C;
"""
    if not staged:
        return (
            head
            + """    int p = blockIdx.x * BLOCK + threadIdx.x;
    if (p >= HW) return;
    for (int c = 0; c < C; ++c) dst[p * C + c] = src[c * HW + p];
}
"""
        )
    return (
        head
        + f"""    extern __shared__ {ctype} slab[];  // C x BLOCK
    int p0 = blockIdx.x * BLOCK;
    int count = min(BLOCK, HW - p0);
    if (threadIdx.x < count)
        for (int c = 0; c < C; ++c) slab[c * BLOCK + threadIdx.x] = src[c * HW + p0 + threadIdx.x];
    __syncthreads();
    for (int e = threadIdx.x; e < count * C; e += BLOCK) dst[p0 * C + e] = slab[(e % C) * BLOCK + e / C];
}}
"""
    )


def _permute_triton(explicit_trans: bool) -> str:
    if explicit_trans:
        store = """    out_mask = (cols[:, None] < N) & (rows[None, :] < M)
    tl.store(y_ptr + base + cols[:, None] * M + rows[None, :], tl.trans(tile), mask=out_mask)"""
    else:
        store = "    tl.store(y_ptr + base + rows[:, None] + cols[None, :] * M, tile, mask=mask)"
    return f"""{TRITON_HEADER}

@triton.jit
def permute021(x_ptr, y_ptr, B, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    base = tl.program_id(2).to(tl.int64) * M * N
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + base + rows[:, None] * N + cols[None, :], mask=mask)
{store}
"""


def _permute_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "y", i32(sizes["b"]), i32(sizes["m"]), i32(sizes["n"]))


def _permute_launch(grid, block: tuple[int, int, int], shared_bytes=lambda sizes: 0):
    """`grid(sizes)` blocks of `block` threads running permute021."""
    return lambda sizes: [Launch("permute021", grid(sizes), _permute_args(sizes), block, shared_bytes(sizes))]


PERMUTE_NAIVE = [
    *product({"shape": [(32, 8), (16, 16), (64, 4)], "coalesced": ["read", "write"], "restrict": [True]}),
    *product({"shape": [(32, 8)], "coalesced": ["read", "write"], "restrict": [False]}),
]
PERMUTE_TILED = [
    *product({"shape": [(16, 4), (16, 16), (32, 8), (32, 32)], "pad": [0, 1], "batch": ["grid_z"], "restrict": [True]}),
    {"shape": (32, 8), "pad": 1, "batch": "folded", "restrict": True},
    {"shape": (32, 8), "pad": 1, "batch": "grid_z", "restrict": False},
]
PERMUTE_TRITON = [
    *({"store": "trans", "tiles": tiles, "num_warps": warps} for tiles in [(32, 32), (64, 64), (4, 256)] for warps in (4, 8)),
    *({"store": "strided", "tiles": tiles, "num_warps": warps} for tiles in [(32, 32), (64, 64)] for warps in (4, 8)),
]


def permute_variants() -> Iterable[Variant]:
    for dtype in DTYPES:
        only = unsupported(dtype)
        for axes in PERMUTE_NAIVE:
            (block_x, block_y), coalesced = axes["shape"], axes["coalesced"]
            params = {"dtype": dtype, "block_x": block_x, "block_y": block_y, "coalesced": coalesced, "restrict": axes["restrict"]}

            def grid(s, bx=block_x, by=block_y, along_x_is_n=coalesced == "read"):
                along_x, along_y = (s["n"], s["m"]) if along_x_is_n else (s["m"], s["n"])
                return (cdiv(along_x, bx), cdiv(along_y, by), s["b"])

            code = _permute_naive(dtype, coalesced, axes["restrict"])
            yield Variant("cuda-naive", "cuda", params, code, _permute_launch(grid, (block_x, block_y, 1)), unsupported=only)
        for params in product({"dtype": [dtype], "block": [128, 512], "coalesced": ["read", "write"]}):
            grid = lambda s, block=params["block"]: grid1(cdiv(s["b"] * s["m"] * s["n"], block))
            yield Variant(
                "cuda-naive-flat",
                "cuda",
                params,
                _permute_flat(dtype, params["coalesced"]),
                _permute_launch(grid, block1(params["block"])),
                unsupported=only,
            )
        for axes in PERMUTE_TILED:
            (tile, rows), batch = axes["shape"], axes["batch"]
            params = {"dtype": dtype, "tile": tile, "rows": rows, "pad": axes["pad"], "batch": batch, "restrict": axes["restrict"]}
            if batch == "grid_z":
                grid = lambda s, tile=tile: (cdiv(s["n"], tile), cdiv(s["m"], tile), s["b"])
            else:
                grid = lambda s, tile=tile: grid1(s["b"] * cdiv(s["n"], tile) * cdiv(s["m"], tile))
            code = _permute_tiled(dtype, tile, rows, axes["pad"], batch, axes["restrict"])
            yield Variant("cuda-tiled", "cuda", params, code, _permute_launch(grid, (tile, rows, 1)), unsupported=only)
        for params in product({"dtype": [dtype], "block": [128, 256, 512], "staged": [False, True]}):
            block = params["block"]
            grid = lambda s, block=block: (cdiv(s["n"], block), s["b"], 1)
            shared = (lambda s, block=block, dtype=dtype: s["m"] * block * ELEMENT_BYTES[dtype]) if params["staged"] else (lambda s: 0)
            yield Variant(
                "cuda-channels",
                "cuda",
                params,
                _permute_channels(dtype, block, params["staged"]),
                _permute_launch(grid, block1(block), shared),
                unsupported=unsupported(dtype, at_most("m", CHANNELS_MAX_M, "written for a few channels")),
            )
        for axes in PERMUTE_TRITON:
            yield _permute_triton_variant(dtype, axes)


def _permute_triton_variant(dtype: str, axes: dict[str, Any]) -> Variant:
    block_m, block_n = axes["tiles"]

    def launches(sizes: Sizes) -> list[Launch]:
        grid = (cdiv(sizes["m"], block_m), cdiv(sizes["n"], block_n), sizes["b"])
        return [
            Launch(
                "permute021", grid, _permute_args(sizes), constexprs={"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=axes["num_warps"]
            )
        ]

    family = "triton-trans" if axes["store"] == "trans" else "triton-strided-store"
    params = {"dtype": dtype, "BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": axes["num_warps"]}
    return Variant(family, "triton", params, _permute_triton(axes["store"] == "trans"), launches, unsupported=unsupported(dtype))


PERMUTE021 = Op(
    name="permute021",
    bound="memory",
    sizes=PERMUTE_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["b"], s["m"], s["n"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["b"], s["n"], s["m"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": inputs["x"].permute(0, 2, 1).contiguous()},
    reference_code="def reference(x):\n    return x.permute(0, 2, 1).contiguous()\n",
    variants=permute_variants,
)

# --- upsample_nearest2d -------------------------------------------------------------------------

UPSAMPLE_SIZES = [
    {"n": 1, "c": 8, "h": 16, "w": 16, "dtype": "f32"},
    {"n": 4, "c": 32, "h": 75, "w": 75, "dtype": "f32"},
    {"n": 8, "c": 64, "h": 56, "w": 56, "dtype": "f32"},
    {"n": 8, "c": 128, "h": 96, "w": 96, "dtype": "f32"},
    {"n": 8, "c": 64, "h": 56, "w": 56, "dtype": "f16"},
    {"n": 8, "c": 128, "h": 96, "w": 96, "dtype": "f16"},
]


def _upsample_per_output(dtype: str, grid_stride: bool, restrict: bool) -> str:
    """A thread per output element (coalesced stores), its source found with / and %."""
    body = """        int ow = idx % OW;
        int oh = (idx / OW) % OH;
        int nc = idx / (OW * OH);
        y[idx] = x[(nc * H + oh / 2) * W + ow / 2];"""
    if grid_stride:
        loop = f"""    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += gridDim.x * blockDim.x) {{
{body}
    }}"""
    else:
        loop = f"""    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < total) {{
{body}
    }}"""
    return f"""{CUDA_HEADER}
extern "C" __global__ void upsample_nearest2d({_pointers(dtype, restrict)}, int N, int C, int H, int W) {{
    int OH = 2 * H, OW = 2 * W;
    int total = N * C * OH * OW;
{loop}
}}
"""


def _upsample_per_output_3d(dtype: str) -> str:
    """A thread per output element on a (columns, rows, planes) grid: no divisions."""
    return f"""{CUDA_HEADER}
extern "C" __global__ void upsample_nearest2d({_pointers(dtype, False, ("in", "out"))}, int H, int W) {{
    int ox = blockIdx.x * blockDim.x + threadIdx.x;
    int oy = blockIdx.y * blockDim.y + threadIdx.y;
    int plane = blockIdx.z;
    if (ox >= 2 * W || oy >= 2 * H) return;
    out[((long long)plane * 2 * H + oy) * 2 * W + ox] = in[((long long)plane * H + oy / 2) * W + ox / 2];
}}
"""


def _upsample_per_input(dtype: str, vector: int) -> str:
    """A thread per input element (VEC 1, 2) or input pair (VEC 4) writing its 2x2 (2x4) outputs.

    VEC 1 stores the four outputs one by one (stride-2 stores across a warp); VEC 2 stores
    each output row's pair as one Pack; VEC 4 loads two inputs and stores a 4-wide Pack per row.
    """
    ctype = CUDA_TYPES[dtype]
    if vector == 4:
        fill = """    int w = 2 * (idx % (W / 2));
    int h = (idx / (W / 2)) % H;
    int nc = idx / ((W / 2) * H);
    In2 a = *reinterpret_cast<const In2*>(x + 2 * idx);
    Pack p;
    p.v[0] = a.v[0]; p.v[1] = a.v[0]; p.v[2] = a.v[1]; p.v[3] = a.v[1];"""
        count, packs = "N * C * H * (W / 2)", pack_struct(dtype, 2, "In2") + pack_struct(dtype, 4)
    else:
        fill = f"""    int w = idx % W;
    int h = (idx / W) % H;
    int nc = idx / (W * H);
    {ctype} v = x[idx];"""
        count, packs = "N * C * H * W", pack_struct(dtype, 2) if vector == 2 else ""
    if vector == 1:
        store = "    out[0] = v;\n    out[1] = v;\n    out[2 * W] = v;\n    out[2 * W + 1] = v;"
    else:
        store = "    *reinterpret_cast<Pack*>(out) = p;\n    *reinterpret_cast<Pack*>(out + 2 * W) = p;"
        if vector == 2:
            fill += "\n    Pack p;\n    p.v[0] = v; p.v[1] = v;"
    return f"""{CUDA_HEADER}{packs}
extern "C" __global__ void upsample_nearest2d({_pointers(dtype, True)}, int N, int C, int H, int W) {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= {count}) return;
{fill}
    {ctype}* out = y + ((long long)nc * 2 * H + 2 * h) * 2 * W + 2 * w;
{store}
}}
"""


def _upsample_row_pair(dtype: str) -> str:
    """A thread per (input row, output column): one load, the same value stored to both output rows."""
    return f"""{CUDA_HEADER}
extern "C" __global__ void upsample_nearest2d({_pointers(dtype, True)}, int rows, int W) {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int OW = 2 * W;
    if (idx >= rows * OW) return;
    int r = idx / OW, col = idx - r * OW;
    auto v = x[r * W + (col >> 1)];
    y[(2 * r) * OW + col] = v;
    y[(2 * r + 1) * OW + col] = v;
}}
"""


UPSAMPLE_GATHER_TRITON = f"""{TRITON_HEADER}

@triton.jit
def upsample_nearest2d(x_ptr, y_ptr, out_rows, W, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    # output rows run over N*C*2H; output row r reads input row r // 2
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    mask = (rows[:, None] < out_rows) & (cols[None, :] < 2 * W)
    v = tl.load(x_ptr + (rows[:, None] // 2) * W + cols[None, :] // 2, mask=mask)
    tl.store(y_ptr + rows[:, None] * (2 * W) + cols[None, :], v, mask=mask)
"""

UPSAMPLE_INTERLEAVE_TRITON = f"""{TRITON_HEADER}

@triton.jit
def upsample_nearest2d(x_ptr, y_ptr, in_rows, W, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    # a tile of input rows (over N*C*H), each column doubled, stored to output rows 2r and 2r+1
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    tile = tl.load(x_ptr + rows[:, None] * W + cols[None, :], mask=(rows[:, None] < in_rows) & (cols[None, :] < W))
    wide = tl.interleave(tile, tile)
    out_cols = tl.program_id(1) * 2 * BLOCK_W + tl.arange(0, 2 * BLOCK_W)
    out_mask = (rows[:, None] < in_rows) & (out_cols[None, :] < 2 * W)
    top = y_ptr + (2 * rows[:, None]) * (2 * W) + out_cols[None, :]
    tl.store(top, wide, mask=out_mask)
    tl.store(top + 2 * W, wide, mask=out_mask)
"""


def _nchw_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "y", i32(sizes["n"]), i32(sizes["c"]), i32(sizes["h"]), i32(sizes["w"]))


def _input_rows(sizes: Sizes) -> int:
    return sizes["n"] * sizes["c"] * sizes["h"]


def _output_count(sizes: Sizes) -> int:
    return sizes["n"] * sizes["c"] * 4 * sizes["h"] * sizes["w"]


def _upsample_launch(grid, args, block: tuple[int, int, int]):
    return lambda sizes: [Launch("upsample_nearest2d", grid(sizes), args(sizes), block)]


UPSAMPLE_PER_OUTPUT = [
    *product({"block": [128, 256, 512, 1024], "grid_stride": [False], "restrict": [True]}),
    {"block": 256, "grid_stride": True, "restrict": True},
    {"block": 256, "grid_stride": False, "restrict": False},
]
UPSAMPLE_3D_SHAPES = [(32, 8), (64, 4), (128, 1), (16, 16)]
UPSAMPLE_PER_INPUT = [*product({"block": [128, 256], "vector": [1, 2, 4]}), {"block": 512, "vector": 2}]
# (family, BLOCK_R, BLOCK_W, num_warps); the interleave family's tiles are of the input.
UPSAMPLE_TRITON = [
    *(("triton-gather", block_r, block_w, 4) for block_r, block_w in [(1, 1024), (4, 256), (16, 128), (32, 32)]),
    ("triton-gather", 16, 128, 8),
    *(("triton-interleave", block_r, block_w, 4) for block_r, block_w in [(4, 128), (16, 64), (32, 32)]),
    ("triton-interleave", 16, 64, 8),
]


def upsample_variants() -> Iterable[Variant]:
    for dtype in DTYPES:
        only = unsupported(dtype)
        for axes in UPSAMPLE_PER_OUTPUT:
            block = axes["block"]
            params = {"dtype": dtype, **axes}
            if axes["grid_stride"]:
                # A persistent grid: as many blocks as stay resident at full occupancy.
                grid = lambda s, block=block: grid1(resident_blocks(cdiv(_output_count(s), block), THREADS_PER_SM // block))
            else:
                grid = lambda s, block=block: grid1(cdiv(_output_count(s), block))
            code = _upsample_per_output(dtype, axes["grid_stride"], axes["restrict"])
            yield Variant("cuda-per-output", "cuda", params, code, _upsample_launch(grid, _nchw_args, block1(block)), unsupported=only)
        for block_x, block_y in UPSAMPLE_3D_SHAPES:
            params = {"dtype": dtype, "block_x": block_x, "block_y": block_y}
            grid = lambda s, bx=block_x, by=block_y: (cdiv(2 * s["w"], bx), cdiv(2 * s["h"], by), s["n"] * s["c"])
            args = lambda s: ("x", "y", i32(s["h"]), i32(s["w"]))
            yield Variant(
                "cuda-per-output-3d",
                "cuda",
                params,
                _upsample_per_output_3d(dtype),
                _upsample_launch(grid, args, (block_x, block_y, 1)),
                unsupported=only,
            )
        for axes in UPSAMPLE_PER_INPUT:
            block, vector = axes["block"], axes["vector"]
            per_thread = 2 if vector == 4 else 1
            grid = lambda s, block=block, per_thread=per_thread: grid1(cdiv(s["n"] * s["c"] * s["h"] * s["w"] // per_thread, block))
            checks = [divisible("w", 2)] if vector == 4 else []
            yield Variant(
                "cuda-per-input",
                "cuda",
                {"dtype": dtype, **axes},
                _upsample_per_input(dtype, vector),
                _upsample_launch(grid, _nchw_args, block1(block)),
                unsupported=unsupported(dtype, *checks),
            )
        for block in (128, 256, 512):
            grid = lambda s, block=block: grid1(cdiv(_input_rows(s) * 2 * s["w"], block))
            args = lambda s: ("x", "y", i32(_input_rows(s)), i32(s["w"]))
            yield Variant(
                "cuda-row-pair",
                "cuda",
                {"dtype": dtype, "block": block},
                _upsample_row_pair(dtype),
                _upsample_launch(grid, args, block1(block)),
                unsupported=only,
            )
        for family, block_r, block_w, warps in UPSAMPLE_TRITON:
            yield _upsample_triton_variant(dtype, family, block_r, block_w, warps)


def _upsample_triton_variant(dtype: str, family: str, block_r: int, block_w: int, warps: int) -> Variant:
    over_output = family == "triton-gather"

    def launches(sizes: Sizes) -> list[Launch]:
        rows = _input_rows(sizes) * (2 if over_output else 1)
        width = 2 * sizes["w"] if over_output else sizes["w"]
        grid = (cdiv(rows, block_r), cdiv(width, block_w), 1)
        args = ("x", "y", i32(rows), i32(sizes["w"]))
        return [Launch("upsample_nearest2d", grid, args, constexprs={"BLOCK_R": block_r, "BLOCK_W": block_w}, num_warps=warps)]

    params = {"dtype": dtype, "BLOCK_R": block_r, "BLOCK_W": block_w, "num_warps": warps}
    code = UPSAMPLE_GATHER_TRITON if over_output else UPSAMPLE_INTERLEAVE_TRITON
    return Variant(family, "triton", params, code, launches, unsupported=unsupported(dtype))


UPSAMPLE_NEAREST2D = Op(
    name="upsample_nearest2d",
    bound="memory",
    sizes=UPSAMPLE_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"], s["c"], s["h"], s["w"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["n"], s["c"], 2 * s["h"], 2 * s["w"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": torch.nn.functional.interpolate(inputs["x"], scale_factor=2, mode="nearest")},
    reference_code='def reference(x):\n    return torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest")\n',
    variants=upsample_variants,
)

OPS = [PERMUTE021, UPSAMPLE_NEAREST2D]
