"""Average pooling over NCHW planes and max pooling along the last dimension of (N, C, L).

Neighbours of maxpool2d (ops.matvec), one of the worst-forecast operations: the same
question, which threads read which addresses and how often each input is read, asked with
more knobs, each turned one at a time.

- avgpool2d: x (n, c, h, w) -> y (n, c, oh, ow), no padding, window 2 stride 2, window 3
  stride 3 and window 3 stride 1 (overlapping windows), fp32 and fp16 (fp32 sums). CUDA:
  cuda-flat (a thread per output from a flat index: block, `order` "w" (coalesced along
  W) or "c" (channel fastest, a deliberately uncoalesced mapping), grid-stride or one
  pass, restrict); cuda-plane (a (ow, oh, plane) grid: block shape 32x8 / 16x16 / 256x1 /
  ..., `items` outputs per thread along W a block width apart, `staging` of the block's
  input tile with its halo in shared memory or direct global loads, `pad` of the tile's
  rows against bank conflicts, restrict); cuda-row-segment (a thread owns SEG consecutive
  outputs of a row and reads each input column of their windows once: register reuse for
  overlapping windows; seg, block); cuda-vector (2x2 stride 2 only: float2/float4 or 4/8
  halves from two input rows per thread; vector, block). Triton: triton-2d (BLOCK_H x
  BLOCK_W outputs of one plane; num_warps) and triton-rows (ROWS output rows of BLOCK_W
  per program; num_warps). The window is a Triton constexpr.
- maxpool1d: x (n, c, l) -> y (n, c, ol), window 2 stride 2, window 4 stride 4, window 3
  stride 1 (sliding), fp32 and fp16. CUDA: cuda-naive (`int idx` per output over one size
  N; block, grid-stride or one pass, restrict); cuda-multi (several outputs per thread:
  per_thread, `layout` consecutive or a block apart, `reuse` of the sliding window in
  registers (each input read once) or reloading every window, block); cuda-smem (the
  block's input span staged in shared memory with coalesced loads; block, per_thread);
  cuda-vector (window = stride compiled in, VEC-wide loads give VEC/K outputs; vector,
  block). Triton: triton-tile (a [BLOCK, K] tile then tl.max(axis=1)) and triton-strided
  (K strided loads folded with tl.maximum); BLOCK, num_warps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.memkit import pack_struct
from workshop.corpus.ops.rowkit import (
    ELEMENT_BYTES,
    NEG_INF,
    THREADS_PER_SM,
    TRITON_HEADER,
    Check,
    divisible,
    next_pow2,
    resident_blocks,
    unsupported,
)
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
    cuda_load_as_float,
    cuda_pointer,
    cuda_store_from_float,
    grid1,
    i32,
    product,
)


def _window_is(window: int, stride: int) -> Check:
    """A kernel with the window compiled in runs only the problems of that window."""
    return lambda s: None if (s["window"], s["stride"]) == (window, stride) else f"written for window {window}, stride {stride}"


def _window_constexprs(s: Sizes) -> dict[str, int]:
    return {"KSIZE": s["window"], "STRIDE": s["stride"]}


def _one_pass_or_grid_stride(grid_stride: bool, index: str, total: str, body: str) -> str:
    """`body` (indented 8) for one `index` per thread, or in a grid-stride loop over `total`."""
    if grid_stride:
        return f"""    for (int {index} = blockIdx.x * blockDim.x + threadIdx.x; {index} < {total}; {index} += gridDim.x * blockDim.x) {{
{body}    }}
"""
    return f"""    int {index} = blockIdx.x * blockDim.x + threadIdx.x;
    if ({index} < {total}) {{
{body}    }}
"""


def _flat_blocks(grid_stride: bool, block: int, total: int) -> int:
    """A grid-stride kernel fills the GPU once (resident blocks); one pass needs a thread per item."""
    return resident_blocks(cdiv(total, block), THREADS_PER_SM // block) if grid_stride else cdiv(total, block)


# --- avgpool2d ----------------------------------------------------------------------------------

AVGPOOL_SIZES = [
    {"n": 1, "c": 16, "h": 32, "w": 32, "window": 2, "stride": 2, "dtype": "f32"},
    {"n": 8, "c": 64, "h": 96, "w": 96, "window": 3, "stride": 3, "dtype": "f32"},
    {"n": 16, "c": 128, "h": 112, "w": 112, "window": 2, "stride": 2, "dtype": "f32"},
    {"n": 16, "c": 64, "h": 112, "w": 112, "window": 3, "stride": 1, "dtype": "f32"},
    {"n": 16, "c": 128, "h": 112, "w": 112, "window": 2, "stride": 2, "dtype": "f16"},
    {"n": 16, "c": 64, "h": 112, "w": 112, "window": 3, "stride": 1, "dtype": "f16"},
]
AVG_VECTORS = {"f32": (2, 4), "f16": (4, 8)}


def _pooled2d(s: Sizes) -> tuple[int, int]:
    """Output height and width: windows that fit entirely, as avg_pool2d without padding."""
    return (s["h"] - s["window"]) // s["stride"] + 1, (s["w"] - s["window"]) // s["stride"] + 1


def _window_sum(dtype: str, element: str, indent: str) -> str:
    """`sum` = the window's elements (`element`, an expression in i, j) added in fp32."""
    return f"""{indent}float sum = 0.0f;
{indent}for (int i = 0; i < K; i++)
{indent}    for (int j = 0; j < K; j++) sum += {cuda_load_as_float(dtype, element)};
"""


def _avg_flat(dtype: str, restrict: bool, order: str, grid_stride: bool) -> str:
    ctype = CUDA_TYPES[dtype]
    if order == "w":
        coords = """        int ow = idx % OW;
        int oh = (idx / OW) % OH;
        int nc = idx / (OW * OH);
"""
    else:  # channel fastest: neighbouring threads read planes H*W elements apart
        coords = """        int c = idx % C;
        int ow = (idx / C) % OW;
        int oh = (idx / (C * OW)) % OH;
        int nc = idx / (C * OW * OH) * C + c;
"""
    body = (
        coords
        + _window_sum(dtype, "x[(nc * H + oh * S + i) * W + ow * S + j]", "        ")
        + f"        y[(nc * OH + oh) * OW + ow] = {cuda_store_from_float(dtype, 'sum / (K * K)')};\n"
    )
    return f"""{CUDA_HEADER}
// one thread per output, its (n*c, oh, ow) from a flat index
extern "C" __global__ void avgpool2d({cuda_pointer(ctype, "x", restrict)}, {cuda_pointer(ctype, "y", restrict, const=False)}, int N, int C, int H, int W, int OH, int OW, int K, int S) {{
    int total = N * C * OH * OW;
{_one_pass_or_grid_stride(grid_stride, "idx", "total", body)}}}
"""


def _avg_plane(dtype: str, restrict: bool, block_x: int, block_y: int, items: int, staging: str, pad: int) -> str:
    """ITEMS outputs per thread, BX apart along W; windows read from global or from a shared tile."""
    ctype = CUDA_TYPES[dtype]
    store = cuda_store_from_float(dtype, "sum / (K * K)")
    if staging == "shared":
        defines = f"#define PAD {pad}\n"
        stage = f"""    // the block's outputs need a tile_h x tile_w input tile, halo included
    extern __shared__ float tile[];
    int tile_w = (BX * ITEMS - 1) * S + K, tile_h = (BY - 1) * S + K, pitch = tile_w + PAD;
    int ih0 = blockIdx.y * BY * S, iw0 = ow0 * S;
    for (int r = ty; r < tile_h; r += BY)
        for (int c = tx; c < tile_w; c += BX)
            if (ih0 + r < H && iw0 + c < W) tile[r * pitch + c] = {cuda_load_as_float(dtype, "plane[(ih0 + r) * W + iw0 + c]")};
    __syncthreads();
"""
        window = _window_sum("f32", "tile[(ty * S + i) * pitch + (p * BX + tx) * S + j]", "            ")
    else:
        defines = stage = ""
        window = _window_sum(dtype, "plane[(oh * S + i) * W + ow * S + j]", "            ")
    return f"""{CUDA_HEADER}#define BX {block_x}
#define BY {block_y}
#define ITEMS {items}
{defines}
extern "C" __global__ void avgpool2d({cuda_pointer(ctype, "x", restrict)}, {cuda_pointer(ctype, "y", restrict, const=False)}, int H, int W, int OH, int OW, int K, int S) {{
    int tx = threadIdx.x, ty = threadIdx.y;
    int ow0 = blockIdx.x * BX * ITEMS;
    int oh = blockIdx.y * BY + ty;
    const {ctype}* plane = x + (size_t)blockIdx.z * H * W;
    {ctype}* out = y + (size_t)blockIdx.z * OH * OW;
{stage}    if (oh >= OH) return;
    #pragma unroll
    for (int p = 0; p < ITEMS; p++) {{
        int ow = ow0 + p * BX + tx;
        if (ow < OW) {{
{window}            out[oh * OW + ow] = {store};
        }}
    }}
}}
"""


def _avg_row_segment(dtype: str, seg: int) -> str:
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}#define SEG {seg}

// a thread owns SEG consecutive outputs of one output row; every input column of their
// windows is loaded once and added to each window that holds it
extern "C" __global__ void avgpool2d(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int rows, int H, int W, int OH, int OW, int K, int S) {{
    int segs = (OW + SEG - 1) / SEG;
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= rows * segs) return;
    int ow0 = (t % segs) * SEG;
    int r = t / segs;  // output row, over planes * OH
    int oh = r % OH, plane = r / OH;
    float acc[SEG];
    #pragma unroll
    for (int q = 0; q < SEG; q++) acc[q] = 0.0f;
    int columns = min((SEG - 1) * S + K, W - ow0 * S);
    for (int i = 0; i < K; i++) {{
        const {ctype}* in = x + ((size_t)plane * H + oh * S + i) * W + ow0 * S;
        for (int col = 0; col < columns; col++) {{
            float v = {cuda_load_as_float(dtype, "in[col]")};
            #pragma unroll
            for (int q = 0; q < SEG; q++) {{
                int j = col - q * S;
                if (j >= 0 && j < K) acc[q] += v;
            }}
        }}
    }}
    #pragma unroll
    for (int q = 0; q < SEG; q++)
        if (ow0 + q < OW) y[(size_t)r * OW + ow0 + q] = {cuda_store_from_float(dtype, "acc[q] / (K * K)")};
}}
"""


def _avg_vector(dtype: str, vector: int) -> str:
    """2x2 windows, stride 2: one VEC-wide load from each of two input rows gives VEC/2 outputs."""
    ctype = CUDA_TYPES[dtype]
    pair = " + ".join(cuda_load_as_float(dtype, f"{row}.v[2 * e{extra}]") for row in "ab" for extra in ("", " + 1"))
    return f"""{CUDA_HEADER}#define VEC {vector}
{pack_struct(dtype, vector)}{pack_struct(dtype, vector // 2, "OutPack")}
extern "C" __global__ void avgpool2d(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int rows, int H, int W, int OH) {{
    int packs = W / VEC;  // per input row
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * packs) return;
    int r = idx / packs, col = (idx % packs) * VEC;
    int plane = r / OH, oh = r % OH;
    const {ctype}* top = x + ((size_t)plane * H + 2 * oh) * W + col;
    Pack a = *reinterpret_cast<const Pack*>(top);
    Pack b = *reinterpret_cast<const Pack*>(top + W);
    OutPack o;
    #pragma unroll
    for (int e = 0; e < VEC / 2; e++) o.v[e] = {cuda_store_from_float(dtype, f"0.25f * ({pair})")};
    *reinterpret_cast<OutPack*>(y + (size_t)r * (W / 2) + col / 2) = o;
}}
"""


AVGPOOL_TRITON_2D = f"""{TRITON_HEADER}

@triton.jit
def avgpool2d(x_ptr, y_ptr, H, W, OH, OW, KSIZE: tl.constexpr, STRIDE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    plane = tl.program_id(0).to(tl.int64)
    oh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ow = tl.program_id(2) * BLOCK_W + tl.arange(0, BLOCK_W)
    mask = (oh[:, None] < OH) & (ow[None, :] < OW)
    src = x_ptr + plane * H * W + (oh[:, None] * STRIDE) * W + ow[None, :] * STRIDE
    total = tl.zeros([BLOCK_H, BLOCK_W], dtype=tl.float32)
    for i in tl.static_range(KSIZE):
        for j in tl.static_range(KSIZE):
            total += tl.load(src + i * W + j, mask=mask, other=0.0).to(tl.float32)
    out = total / (KSIZE * KSIZE)
    tl.store(y_ptr + plane * OH * OW + oh[:, None] * OW + ow[None, :], out.to(y_ptr.dtype.element_ty), mask=mask)
"""

AVGPOOL_TRITON_ROWS = f"""{TRITON_HEADER}

@triton.jit
def avgpool2d(x_ptr, y_ptr, rows, H, W, OH, OW, KSIZE: tl.constexpr, STRIDE: tl.constexpr, ROWS: tl.constexpr, BLOCK_W: tl.constexpr):
    ow = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    for k in tl.static_range(ROWS):
        r = tl.program_id(0) * ROWS + k  # output row, over planes * OH
        mask = ow < tl.where(r < rows, OW, 0)  # a row past the end masks all its columns
        plane = (r // OH).to(tl.int64)
        src = x_ptr + (plane * H + (r % OH) * STRIDE) * W + ow * STRIDE
        total = tl.zeros([BLOCK_W], dtype=tl.float32)
        for i in tl.static_range(KSIZE):
            for j in tl.static_range(KSIZE):
                total += tl.load(src + i * W + j, mask=mask, other=0.0).to(tl.float32)
        out = total / (KSIZE * KSIZE)
        tl.store(y_ptr + r.to(tl.int64) * OW + ow, out.to(y_ptr.dtype.element_ty), mask=mask)
"""


def _avg_window_args(s: Sizes) -> tuple[Any, ...]:
    return i32(s["window"]), i32(s["stride"])


def _avg_flat_launch(block: int, grid_stride: bool) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        oh, ow = _pooled2d(s)
        args = ("x", "y", i32(s["n"]), i32(s["c"]), i32(s["h"]), i32(s["w"]), i32(oh), i32(ow), *_avg_window_args(s))
        return [Launch("avgpool2d", grid1(_flat_blocks(grid_stride, block, s["n"] * s["c"] * oh * ow)), args, block1(block))]

    return launches


def _avg_plane_launch(p: dict[str, Any]) -> Callable[[Sizes], list[Launch]]:
    bx, by, items = p["block_x"], p["block_y"], p["items"]

    def shared(s: Sizes) -> int:
        if p["staging"] != "shared":
            return 0
        tile_w = (bx * items - 1) * s["stride"] + s["window"]
        return ((by - 1) * s["stride"] + s["window"]) * (tile_w + p["pad"]) * ELEMENT_BYTES["f32"]

    def launches(s: Sizes) -> list[Launch]:
        oh, ow = _pooled2d(s)
        args = ("x", "y", i32(s["h"]), i32(s["w"]), i32(oh), i32(ow), *_avg_window_args(s))
        return [Launch("avgpool2d", (cdiv(ow, bx * items), cdiv(oh, by), s["n"] * s["c"]), args, (bx, by, 1), shared_bytes=shared(s))]

    return launches


def _avg_segment_launch(block: int, seg: int) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        oh, ow = _pooled2d(s)
        rows = s["n"] * s["c"] * oh
        args = ("x", "y", i32(rows), i32(s["h"]), i32(s["w"]), i32(oh), i32(ow), *_avg_window_args(s))
        return [Launch("avgpool2d", grid1(cdiv(rows * cdiv(ow, seg), block)), args, block1(block))]

    return launches


def _avg_vector_launch(block: int, vector: int) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        oh, _ = _pooled2d(s)
        rows = s["n"] * s["c"] * oh
        args = ("x", "y", i32(rows), i32(s["h"]), i32(s["w"]), i32(oh))
        return [Launch("avgpool2d", grid1(cdiv(rows * (s["w"] // vector), block)), args, block1(block))]

    return launches


def _avg_triton_2d_launch(p: dict[str, Any]) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        oh, ow = _pooled2d(s)
        grid = (s["n"] * s["c"], cdiv(oh, p["BLOCK_H"]), cdiv(ow, p["BLOCK_W"]))
        return [
            Launch(
                "avgpool2d",
                grid,
                ("x", "y", i32(s["h"]), i32(s["w"]), i32(oh), i32(ow)),
                constexprs={**_window_constexprs(s), "BLOCK_H": p["BLOCK_H"], "BLOCK_W": p["BLOCK_W"]},
                num_warps=p["num_warps"],
            )
        ]

    return launches


def _avg_triton_rows_launch(p: dict[str, Any]) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        oh, ow = _pooled2d(s)
        rows = s["n"] * s["c"] * oh
        grid = (cdiv(rows, p["ROWS"]), cdiv(ow, p["BLOCK_W"]), 1)
        return [
            Launch(
                "avgpool2d",
                grid,
                ("x", "y", i32(rows), i32(s["h"]), i32(s["w"]), i32(oh), i32(ow)),
                constexprs={**_window_constexprs(s), "ROWS": p["ROWS"], "BLOCK_W": p["BLOCK_W"]},
                num_warps=p["num_warps"],
            )
        ]

    return launches


def avgpool_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"
        only = unsupported(dtype)
        flat = {"block": 256, "order": "w", "grid_stride": False, "restrict": True}
        flat_settings = (
            around(flat, block=[128, 1024], order=["c"], grid_stride=[True], restrict=[False])
            if full
            else around(flat, order=["c"], restrict=[False])
        )
        for p in flat_settings:
            yield Variant(
                "cuda-flat",
                "cuda",
                {"dtype": dtype, **p},
                _avg_flat(dtype, p["restrict"], p["order"], p["grid_stride"]),
                _avg_flat_launch(p["block"], p["grid_stride"]),
                unsupported=only,
            )
        direct = {"block_x": 32, "block_y": 8, "items": 1, "staging": "global", "pad": 0, "restrict": True}
        staged = {**direct, "staging": "shared"}
        direct_shapes = [(16, 16), (256, 1), (8, 32), (64, 4)] if full else [(16, 16)]
        staged_shapes = [(16, 16), (256, 1)] if full else [(16, 16)]
        settings = [
            *around(direct, items=[2, 4] if full else [2], staging=["shared"], restrict=[False]),
            *around(staged, items=[2, 4] if full else [], pad=[1]),
            *({**direct, "block_x": bx, "block_y": by} for bx, by in direct_shapes),
            *({**staged, "block_x": bx, "block_y": by} for bx, by in staged_shapes),
        ]
        if full:
            settings.append({**staged, "block_x": 16, "block_y": 16, "pad": 1})
        for p in settings:
            code = _avg_plane(dtype, p["restrict"], p["block_x"], p["block_y"], p["items"], p["staging"], p["pad"])
            yield Variant("cuda-plane", "cuda", {"dtype": dtype, **p}, code, _avg_plane_launch(p), unsupported=only)
        for p in around({"seg": 4, "block": 256}, seg=[1, 2, 8] if full else [1], block=[128] if full else []):
            yield Variant(
                "cuda-row-segment",
                "cuda",
                {"dtype": dtype, **p},
                _avg_row_segment(dtype, p["seg"]),
                _avg_segment_launch(p["block"], p["seg"]),
                unsupported=only,
            )
        for p in product({"vector": AVG_VECTORS[dtype], "block": [128, 256] if full else [256]}):
            yield Variant(
                "cuda-vector",
                "cuda",
                {"dtype": dtype, **p},
                _avg_vector(dtype, p["vector"]),
                _avg_vector_launch(p["block"], p["vector"]),
                unsupported=unsupported(dtype, _window_is(2, 2), divisible("w", p["vector"])),
            )
        tiles = [(8, 32, 4), (16, 32, 4), (16, 64, 4), (16, 64, 8), (4, 128, 4)] if full else [(8, 32, 4), (16, 64, 4), (16, 64, 8)]
        for block_h, block_w, warps in tiles:
            p = {"dtype": dtype, "BLOCK_H": block_h, "BLOCK_W": block_w, "num_warps": warps}
            yield Variant("triton-2d", "triton", p, AVGPOOL_TRITON_2D, _avg_triton_2d_launch(p), unsupported=only)
        rows = {"ROWS": 4, "BLOCK_W": 64, "num_warps": 4}
        for p in around(rows, ROWS=[1, 16], BLOCK_W=[128], num_warps=[2, 8]) if full else around(rows, ROWS=[1], BLOCK_W=[128]):
            p = {"dtype": dtype, **p}
            yield Variant("triton-rows", "triton", p, AVGPOOL_TRITON_ROWS, _avg_triton_rows_launch(p), unsupported=only)


AVGPOOL = Op(
    name="avgpool2d",
    bound="memory",
    sizes=AVGPOOL_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"], s["c"], s["h"], s["w"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["n"], s["c"], *_pooled2d(s)), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": torch.nn.functional.avg_pool2d(inputs["x"], sizes["window"], sizes["stride"])},
    reference_code="def reference(x, kernel_size, stride):\n    return torch.nn.functional.avg_pool2d(x, kernel_size, stride)\n",
    variants=avgpool_variants,
)

# --- maxpool1d ----------------------------------------------------------------------------------

MAXPOOL1D_SIZES = [
    {"n": 1, "c": 16, "l": 1000, "window": 2, "stride": 2, "dtype": "f32"},
    {"n": 8, "c": 64, "l": 4096, "window": 4, "stride": 4, "dtype": "f32"},
    {"n": 16, "c": 256, "l": 8192, "window": 2, "stride": 2, "dtype": "f32"},
    {"n": 8, "c": 256, "l": 8192, "window": 3, "stride": 1, "dtype": "f32"},
    {"n": 16, "c": 256, "l": 8192, "window": 2, "stride": 2, "dtype": "f16"},
    {"n": 8, "c": 256, "l": 8192, "window": 3, "stride": 1, "dtype": "f16"},
]
MAX_VECTORS = {"f32": (4, 8), "f16": (8, 16)}


def _pooled1d(s: Sizes) -> int:
    return (s["l"] - s["window"]) // s["stride"] + 1


def _max_naive(dtype: str, restrict: bool, grid_stride: bool) -> str:
    ctype = CUDA_TYPES[dtype]
    body = f"""        int row = idx / OL, o = idx % OL;
        const {ctype}* in = x + (size_t)row * L + o * S;
        float m = {cuda_load_as_float(dtype, "in[0]")};
        for (int j = 1; j < K; j++) m = fmaxf(m, {cuda_load_as_float(dtype, "in[j]")});
        y[idx] = {cuda_store_from_float(dtype, "m")};
"""
    return f"""{CUDA_HEADER}
// N outputs (rows * OL), one per thread
extern "C" __global__ void maxpool1d({cuda_pointer(ctype, "x", restrict)}, {cuda_pointer(ctype, "y", restrict, const=False)}, int N, int L, int OL, int K, int S) {{
{_one_pass_or_grid_stride(grid_stride, "idx", "N", body)}}}
"""


def _max_multi(dtype: str, per_thread: int, layout: str, reuse: bool) -> str:
    """PER outputs per thread: consecutive ones (each input loaded once with `reuse`), or BLOCK apart."""
    ctype = CUDA_TYPES[dtype]
    load = cuda_load_as_float(dtype, "in[col]" if reuse else "in[q * S + j]")
    if layout == "block-apart":
        work = f"""    int base = blockIdx.x * blockDim.x * PER + threadIdx.x;
    #pragma unroll
    for (int q = 0; q < PER; q++) {{
        int idx = base + q * blockDim.x;
        if (idx < N) {{
            const {ctype}* in = x + (size_t)(idx / OL) * L + (idx % OL) * S;
            float m = {NEG_INF};
            for (int j = 0; j < K; j++) m = fmaxf(m, {cuda_load_as_float(dtype, "in[j]")});
            y[idx] = {cuda_store_from_float(dtype, "m")};
        }}
    }}
"""
        return f"""{CUDA_HEADER}#define PER {per_thread}

extern "C" __global__ void maxpool1d(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int N, int L, int OL, int K, int S) {{
{work}}}
"""
    if reuse:  # slide along the span once: every input goes to each window that holds it
        fold = f"""    int span = min((PER - 1) * S + K, L - o0 * S);
    for (int col = 0; col < span; col++) {{
        float v = {load};
        #pragma unroll
        for (int q = 0; q < PER; q++) {{
            int j = col - q * S;
            if (j >= 0 && j < K) m[q] = fmaxf(m[q], v);
        }}
    }}
"""
    else:
        fold = f"""    #pragma unroll
    for (int q = 0; q < PER; q++) {{
        if (o0 + q < OL) {{
            for (int j = 0; j < K; j++) m[q] = fmaxf(m[q], {load});
        }}
    }}
"""
    return f"""{CUDA_HEADER}#define PER {per_thread}

// a thread owns PER consecutive outputs of one row
extern "C" __global__ void maxpool1d(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int rows, int L, int OL, int K, int S) {{
    int chunks = (OL + PER - 1) / PER;
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= rows * chunks) return;
    int row = t / chunks, o0 = (t % chunks) * PER;
    const {ctype}* in = x + (size_t)row * L + o0 * S;
    float m[PER];
    #pragma unroll
    for (int q = 0; q < PER; q++) m[q] = {NEG_INF};
{fold}    #pragma unroll
    for (int q = 0; q < PER; q++)
        if (o0 + q < OL) y[(size_t)row * OL + o0 + q] = {cuda_store_from_float(dtype, "m[q]")};
}}
"""


def _max_smem(dtype: str, block: int, per_thread: int) -> str:
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}#define BLOCK {block}
#define PER {per_thread}

// a block's BLOCK * PER outputs of one row (blockIdx.y) read a span of the row staged in shared memory
extern "C" __global__ void maxpool1d(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int L, int OL, int K, int S) {{
    extern __shared__ float span[];
    int first = blockIdx.x * BLOCK * PER;  // first output of the block
    int start = first * S;
    int count = min((BLOCK * PER - 1) * S + K, L - start);
    const {ctype}* in = x + (size_t)blockIdx.y * L + start;
    for (int k = threadIdx.x; k < count; k += BLOCK) span[k] = {cuda_load_as_float(dtype, "in[k]")};
    __syncthreads();
    #pragma unroll
    for (int p = 0; p < PER; p++) {{
        int local = p * BLOCK + threadIdx.x;
        if (first + local < OL) {{
            float m = span[local * S];
            for (int j = 1; j < K; j++) m = fmaxf(m, span[local * S + j]);
            y[(size_t)blockIdx.y * OL + first + local] = {cuda_store_from_float(dtype, "m")};
        }}
    }}
}}
"""


def _max_vector(dtype: str, window: int, vector: int) -> str:
    """Window = stride = K compiled in; a VEC-wide load holds VEC / K whole windows (rows are multiples of VEC)."""
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}#define K {window}
#define VEC {vector}
{pack_struct(dtype, vector)}{pack_struct(dtype, vector // window, "OutPack")}
extern "C" __global__ void maxpool1d(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int packs) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= packs) return;
    Pack p = reinterpret_cast<const Pack*>(x)[i];
    OutPack o;
    #pragma unroll
    for (int e = 0; e < VEC / K; e++) {{
        float m = {cuda_load_as_float(dtype, "p.v[e * K]")};
        #pragma unroll
        for (int j = 1; j < K; j++) m = fmaxf(m, {cuda_load_as_float(dtype, "p.v[e * K + j]")});
        o.v[e] = {cuda_store_from_float(dtype, "m")};
    }}
    reinterpret_cast<OutPack*>(y)[i] = o;
}}
"""


MAXPOOL1D_TRITON_TILE = f"""{TRITON_HEADER}

@triton.jit
def maxpool1d(x_ptr, y_ptr, L, OL, KSIZE: tl.constexpr, STRIDE: tl.constexpr, KPAD: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(1).to(tl.int64)
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    j = tl.arange(0, KPAD)  # the window, padded to a power of two
    mask = (o[:, None] < OL) & (j[None, :] < KSIZE)
    tile = tl.load(x_ptr + row * L + o[:, None] * STRIDE + j[None, :], mask=mask, other=float("-inf")).to(tl.float32)
    tl.store(y_ptr + row * OL + o, tl.max(tile, axis=1).to(y_ptr.dtype.element_ty), mask=o < OL)
"""

MAXPOOL1D_TRITON_STRIDED = f"""{TRITON_HEADER}

@triton.jit
def maxpool1d(x_ptr, y_ptr, L, OL, KSIZE: tl.constexpr, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(1).to(tl.int64)
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = o < OL
    src = x_ptr + row * L + o * STRIDE
    best = tl.load(src, mask=mask, other=float("-inf")).to(tl.float32)
    for j in tl.static_range(1, KSIZE):
        best = tl.maximum(best, tl.load(src + j, mask=mask, other=float("-inf")).to(tl.float32))
    tl.store(y_ptr + row * OL + o, best.to(y_ptr.dtype.element_ty), mask=mask)
"""


def _max_window_args(s: Sizes) -> tuple[Any, ...]:
    return i32(s["l"]), i32(_pooled1d(s)), i32(s["window"]), i32(s["stride"])


def _max_outputs(s: Sizes) -> int:
    return s["n"] * s["c"] * _pooled1d(s)


def _max_naive_launch(block: int, grid_stride: bool) -> Callable[[Sizes], list[Launch]]:
    return lambda s: [
        Launch(
            "maxpool1d",
            grid1(_flat_blocks(grid_stride, block, _max_outputs(s))),
            ("x", "y", i32(_max_outputs(s)), *_max_window_args(s)),
            block1(block),
        )
    ]


def _max_multi_launch(block: int, per_thread: int, layout: str) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        # the first argument: N outputs (block-apart) or the rows (consecutive)
        if layout == "block-apart":
            count, threads = _max_outputs(s), cdiv(_max_outputs(s), per_thread)
        else:
            count = s["n"] * s["c"]
            threads = count * cdiv(_pooled1d(s), per_thread)
        return [Launch("maxpool1d", grid1(cdiv(threads, block)), ("x", "y", i32(count), *_max_window_args(s)), block1(block))]

    return launches


def _max_smem_launch(block: int, per_thread: int) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        shared = ((block * per_thread - 1) * s["stride"] + s["window"]) * ELEMENT_BYTES["f32"]
        grid = (cdiv(_pooled1d(s), block * per_thread), s["n"] * s["c"], 1)
        return [Launch("maxpool1d", grid, ("x", "y", *_max_window_args(s)), block1(block), shared_bytes=shared)]

    return launches


def _max_vector_launch(block: int, vector: int) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        packs = s["n"] * s["c"] * s["l"] // vector
        return [Launch("maxpool1d", grid1(cdiv(packs, block)), ("x", "y", i32(packs)), block1(block))]

    return launches


def _max_triton_launch(p: dict[str, Any], tile: bool) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        constexprs = {**_window_constexprs(s), **({"KPAD": next_pow2(s["window"])} if tile else {}), "BLOCK": p["BLOCK"]}
        grid = (cdiv(_pooled1d(s), p["BLOCK"]), s["n"] * s["c"], 1)
        return [Launch("maxpool1d", grid, ("x", "y", i32(s["l"]), i32(_pooled1d(s))), constexprs=constexprs, num_warps=p["num_warps"])]

    return launches


def maxpool1d_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"
        only = unsupported(dtype)
        naive = {"block": 256, "grid_stride": False, "restrict": True}
        for p in around(naive, block=[128, 512, 1024] if full else [1024], grid_stride=[True], restrict=[False]):
            yield Variant(
                "cuda-naive",
                "cuda",
                {"dtype": dtype, **p},
                _max_naive(dtype, p["restrict"], p["grid_stride"]),
                _max_naive_launch(p["block"], p["grid_stride"]),
                unsupported=only,
            )
        multi = {"per_thread": 4, "layout": "consecutive", "reuse": True, "block": 256}
        settings = around(multi, per_thread=[2, 8] if full else [], reuse=[False], block=[128] if full else [])
        settings.append({**multi, "layout": "block-apart", "reuse": False})
        if full:
            settings.append({**multi, "per_thread": 8, "reuse": False})
        for p in settings:
            code = _max_multi(dtype, p["per_thread"], p["layout"], p["reuse"])
            yield Variant(
                "cuda-multi",
                "cuda",
                {"dtype": dtype, **p},
                code,
                _max_multi_launch(p["block"], p["per_thread"], p["layout"]),
                unsupported=only,
            )
        for p in product({"block": [128, 256, 512] if full else [256], "per_thread": [1, 4]}):
            yield Variant(
                "cuda-smem",
                "cuda",
                {"dtype": dtype, **p},
                _max_smem(dtype, p["block"], p["per_thread"]),
                _max_smem_launch(p["block"], p["per_thread"]),
                unsupported=only,
            )
        for p in product({"window": [2, 4] if full else [2], "vector": MAX_VECTORS[dtype], "block": [128, 256] if full else [256]}):
            yield Variant(
                "cuda-vector",
                "cuda",
                {"dtype": dtype, **p},
                _max_vector(dtype, p["window"], p["vector"]),
                _max_vector_launch(p["block"], p["vector"]),
                unsupported=unsupported(dtype, _window_is(p["window"], p["window"]), divisible("l", p["vector"])),
            )
        blocks = [(256, 4), (1024, 4), (1024, 8), (4096, 8), (512, 2)] if full else [(1024, 4), (4096, 8)]
        for family, code, tile in (("triton-tile", MAXPOOL1D_TRITON_TILE, True), ("triton-strided", MAXPOOL1D_TRITON_STRIDED, False)):
            for block, warps in blocks:
                p = {"dtype": dtype, "BLOCK": block, "num_warps": warps}
                yield Variant(family, "triton", p, code, _max_triton_launch(p, tile), unsupported=only)


MAXPOOL1D = Op(
    name="maxpool1d",
    bound="memory",
    sizes=MAXPOOL1D_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"], s["c"], s["l"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["n"], s["c"], _pooled1d(s)), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": torch.nn.functional.max_pool1d(inputs["x"], sizes["window"], sizes["stride"])},
    reference_code="def reference(x, kernel_size, stride):\n    return torch.nn.functional.max_pool1d(x, kernel_size, stride)\n",
    variants=maxpool1d_variants,
)

OPS = [AVGPOOL, MAXPOOL1D]
