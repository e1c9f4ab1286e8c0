"""Matrix-vector product and 2D max pooling: two memory-bound operations whose speed is
decided by which threads read which addresses.

- gemv: y = A @ x for a row-major A (m x k), fp32 and fp16 (fp32 accumulation), shapes
  from square to tall-skinny, wide and very wide (64 rows of 65536). CUDA:
  cuda-thread-per-row (the classic `row * N + col` kernel: a warp reads 32 rows at once,
  uncoalesced; block, x staged in shared-memory tiles or read from global, restrict);
  cuda-warp-per-row (lanes stride over the row, __shfl_down_sync; warps per block = rows
  per block, float4/half2 loads, the whole x in dynamic shared memory or not, restrict);
  cuda-block-per-row (rowkit's block reduction, shuffle or shared-memory tree; block,
  vector loads); cuda-split-k (fp32: row chunks over grid.y folded with atomicAdd after a
  ZERO launch; chunk, warps, vector). Triton: triton-tiles (BLOCK_M x BLOCK_K tiles
  looped over k; num_warps) and triton-split-k (fp32: one tile per program, atomics).
  Inputs are uniform [0, 1): every output is a sum of k positive terms, so any order of
  summation agrees to fp32's tolerance (see ops.gemm).
- maxpool2d: x (n, c, h, w) -> y (n, c, oh, ow), no padding, window 2 stride 2 and
  window 3 stride 2 (overlapping windows), fp32 and fp16. CUDA: cuda-flat (a thread per
  output, coordinates from a flat id by divisions; block, restrict, unroll), cuda-grid3d
  (a thread per output on a (ow, oh, plane) grid; block shape, restrict, unroll),
  cuda-row-segment (a thread keeps SEG running maxima of one output row and walks the
  input rows of its windows once; segment length, block), cuda-smem-tile (the block's
  input tile, halo included, staged in dynamic shared memory; block shape). `unroll`
  True fixes the window at compile time (#define KSIZE/STRIDE) under #pragma unroll, so
  such a kernel runs only the 2x2 problems; False passes ksize/stride as arguments.
  Triton: triton-2d (BLOCK_H x BLOCK_W outputs of one plane; num_warps) and triton-flat
  (BLOCK outputs from a flat id). The window and stride are Triton constexprs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.memkit import MAX_SHARED_BYTES
from workshop.corpus.ops.rowkit import (
    ELEMENT_BYTES,
    NEG_INF,
    TRITON_HEADER,
    Check,
    at_most,
    cuda_prelude,
    cuda_reductions,
    divisible,
    unsupported,
)
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
    ZERO,
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
)

# --- gemv ---------------------------------------------------------------------------------------

GEMV_SIZES = [
    {"m": 256, "k": 256, "dtype": "f32"},
    {"m": 4096, "k": 4096, "dtype": "f32"},
    {"m": 16384, "k": 1024, "dtype": "f32"},
    {"m": 1024, "k": 16384, "dtype": "f32"},
    {"m": 64, "k": 65536, "dtype": "f32"},
    {"m": 4096, "k": 4096, "dtype": "f16"},
    {"m": 1024, "k": 16384, "dtype": "f16"},
]
# One load: float4 for fp32, __half2 for fp16.
GEMV_VECTOR_TYPES = {"f32": ("float4", 4), "f16": ("__half2", 2)}
SERIAL_MAX_K = 16384


def _dot_step(dtype: str, vector: int, a: str, b: str) -> str:
    """A statement adding the product of element (or vector) a and b to `sum`."""
    if vector == 1:
        return f"sum += {cuda_load_as_float(dtype, a)} * {cuda_load_as_float(dtype, b)};"
    if dtype == "f32":
        return f"{{ float4 p = {a}, q = {b}; sum += p.x * q.x + p.y * q.y + p.z * q.z + p.w * q.w; }}"
    return f"{{ float2 p = __half22float2({a}), q = __half22float2({b}); sum += p.x * q.x + p.y * q.y; }}"


def _loads_of(dtype: str, vector: int) -> str:
    """The type one load reads: the element or its vector."""
    return CUDA_TYPES[dtype] if vector == 1 else GEMV_VECTOR_TYPES[dtype][0]


def _as_loads(dtype: str, vector: int, pointer: str) -> str:
    return pointer if vector == 1 else f"reinterpret_cast<const {_loads_of(dtype, vector)}*>({pointer})"


def _gemv_thread_per_row(dtype: str, block: int, x_shared: bool, restrict: bool) -> str:
    ctype = CUDA_TYPES[dtype]
    signature = (
        f'extern "C" __global__ void gemv({cuda_pointer(ctype, "A", restrict)}, {cuda_pointer(ctype, "x", restrict)}, '
        f"{cuda_pointer(ctype, 'y', restrict, const=False)}, int M, int N)"
    )
    store = cuda_store_from_float(dtype, "sum")
    if not x_shared:
        return f"""{CUDA_HEADER}
// one thread per row: the 32 threads of a warp read 32 rows, N elements apart
{signature} {{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M) {{
        float sum = 0.0f;
        for (int col = 0; col < N; col++) {{
            {_dot_step(dtype, 1, "A[row * N + col]", "x[col]")}
        }}
        y[row] = {store};
    }}
}}
"""
    return f"""{CUDA_HEADER}
#define TILE {block}

// one thread per row; the block stages TILE entries of x at a time in shared memory
{signature} {{
    __shared__ float xs[TILE];
    int row = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int base = 0; base < N; base += TILE) {{
        xs[threadIdx.x] = base + threadIdx.x < N ? {cuda_load_as_float(dtype, "x[base + threadIdx.x]")} : 0.0f;
        __syncthreads();
        if (row < M) {{
            for (int j = 0; j < TILE && base + j < N; j++) sum += {cuda_load_as_float(dtype, "A[row * N + base + j]")} * xs[j];
        }}
        __syncthreads();
    }}
    if (row < M) y[row] = {store};
}}
"""


def _gemv_warp_per_row(dtype: str, warps: int, vector: int, x_shared: bool, restrict: bool) -> str:
    ctype = CUDA_TYPES[dtype]
    loads = _loads_of(dtype, vector)
    if x_shared:
        stage = f"""    extern __shared__ {ctype} xs[];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) xs[j] = x[j];
    __syncthreads();
"""
        source = "xs"
    else:
        stage, source = "", "x"
    return f"""{CUDA_HEADER}
#define WARPS {warps}

// one warp per row, WARPS rows per block; lanes stride over the row, shuffles add up
extern "C" __global__ void gemv({cuda_pointer(ctype, "a", restrict)}, {cuda_pointer(ctype, "x", restrict)}, {cuda_pointer(ctype, "y", restrict, const=False)}, int rows, int cols) {{
{stage}    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const {loads}* arow = {_as_loads(dtype, vector, "a + (size_t)row * cols")};
    const {loads}* xv = {_as_loads(dtype, vector, source)};
    float sum = 0.0f;
    for (int j = lane; j < cols{f" / {vector}" if vector > 1 else ""}; j += 32) {_dot_step(dtype, vector, "arow[j]", "xv[j]")}
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_down_sync(0xffffffff, sum, offset);
    if (lane == 0) y[row] = {cuda_store_from_float(dtype, "sum")};
}}
"""


def _gemv_block_per_row(dtype: str, block: int, vector: int, reduction: str) -> str:
    ctype = CUDA_TYPES[dtype]
    loads = _loads_of(dtype, vector)
    return f"""{cuda_prelude(dtype, {"BLOCK": block})}{cuda_reductions(("sum",), reduction)}
// one block per row
extern "C" __global__ void gemv(const {ctype}* __restrict__ a, const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int m, int k) {{
    const {loads}* arow = {_as_loads(dtype, vector, "a + (size_t)blockIdx.x * k")};
    const {loads}* xv = {_as_loads(dtype, vector, "x")};
    float sum = 0.0f;
    for (int j = threadIdx.x; j < k{f" / {vector}" if vector > 1 else ""}; j += BLOCK) {_dot_step(dtype, vector, "arow[j]", "xv[j]")}
    sum = block_sum(sum);
    if (threadIdx.x == 0) y[blockIdx.x] = {cuda_store_from_float(dtype, "sum")};
}}
"""


def _gemv_split_k(warps: int, chunk: int, vector: int) -> str:
    """fp32 only: atomics fold each chunk's partial into y (fp16 atomics would round every partial)."""
    loads = _loads_of("f32", vector)
    packs = "" if vector == 1 else f" / {vector}"
    return f"""{CUDA_HEADER}
#define WARPS {warps}
#define CHUNK {chunk}

// grid (row groups, k chunks): a warp per row sums CHUNK columns, then one atomicAdd
extern "C" __global__ void gemv_split_k(const float* __restrict__ a, const float* __restrict__ x, float* __restrict__ y, int m, int k) {{
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= m) return;
    int begin = blockIdx.y * CHUNK{packs};
    int end = min(k, (int)(blockIdx.y + 1) * CHUNK){packs};
    const {loads}* arow = {_as_loads("f32", vector, "a + (size_t)row * k")};
    const {loads}* xv = {_as_loads("f32", vector, "x")};
    float sum = 0.0f;
    for (int j = begin + lane; j < end; j += 32) {_dot_step("f32", vector, "arow[j]", "xv[j]")}
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_down_sync(0xffffffff, sum, offset);
    if (lane == 0) atomicAdd(y + row, sum);
}}
"""


GEMV_TRITON_TILES = f"""{TRITON_HEADER}

@triton.jit
def gemv(a_ptr, x_ptr, y_ptr, M, K, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * K + cols[None, :], mask=(rows[:, None] < M) & (cols[None, :] < K), other=0.0)
        x = tl.load(x_ptr + cols, mask=cols < K, other=0.0)
        acc += a.to(tl.float32) * x[None, :].to(tl.float32)
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=rows < M)
"""

GEMV_TRITON_SPLIT_K = f"""{TRITON_HEADER}

@triton.jit
def gemv_split_k(a_ptr, x_ptr, y_ptr, M, K, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    # grid (row blocks, k blocks): one tile per program, partial row sums added atomically
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + rows[:, None] * K + cols[None, :], mask=(rows[:, None] < M) & (cols[None, :] < K), other=0.0)
    x = tl.load(x_ptr + cols, mask=cols < K, other=0.0)
    tl.atomic_add(y_ptr + rows, tl.sum(a * x[None, :], axis=1), mask=rows < M)
"""


def _gemv_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("a", "x", "y", i32(sizes["m"]), i32(sizes["k"]))


def _fits_shared(dtype: str) -> Check:
    limit = MAX_SHARED_BYTES // ELEMENT_BYTES[dtype]
    return lambda sizes: None if sizes["k"] <= limit else f"x ({sizes['k']} elements) does not fit shared memory"


def _at_least(name: str, low: int, why: str) -> Check:
    return lambda sizes: None if sizes[name] >= low else f"{name} < {low}: {why}"


def gemv_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        yield from _gemv_cuda_variants(dtype)
        yield from _gemv_triton_variants(dtype)


def _gemv_cuda_variants(dtype: str) -> Iterable[Variant]:
    """fp32 gets every edit around each family's base; fp16 the base and its main knobs."""
    full = dtype == "f32"
    width = GEMV_VECTOR_TYPES[dtype][1]
    thread_base = {"block": 128, "x_shared": False, "restrict": False}
    thread_settings = (
        (
            around(thread_base, block=[256], x_shared=[True], restrict=[True])
            + [{"block": 256, "x_shared": True, "restrict": True}, {"block": 64, "x_shared": False, "restrict": True}]
        )
        if full
        else (around(thread_base, x_shared=[True], restrict=[True]))
    )
    serial = unsupported(dtype, at_most("k", SERIAL_MAX_K, "one thread walking a longer row alone takes milliseconds"))
    for p in thread_settings:
        yield Variant(
            "cuda-thread-per-row",
            "cuda",
            {"dtype": dtype, **p},
            _gemv_thread_per_row(dtype, p["block"], p["x_shared"], p["restrict"]),
            _gemv_rows_launch(p["block"], 1),
            unsupported=serial,
        )
    warp_base = {"warps": 4, "vector": width, "x_shared": False, "restrict": True}
    warp_settings = (
        (around(warp_base, warps=[1, 2, 8], vector=[1], x_shared=[True], restrict=[False]) + [{**warp_base, "warps": 8, "vector": 1}])
        if full
        else (around(warp_base, vector=[1], x_shared=[True]))
    )
    for p in warp_settings:
        yield Variant(
            "cuda-warp-per-row",
            "cuda",
            {"dtype": dtype, **p},
            _gemv_warp_per_row(dtype, p["warps"], p["vector"], p["x_shared"], p["restrict"]),
            _gemv_rows_launch(32 * p["warps"], 32, ELEMENT_BYTES[dtype] if p["x_shared"] else 0),
            unsupported=unsupported(dtype, divisible("k", p["vector"]), *([_fits_shared(dtype)] if p["x_shared"] else [])),
        )
    block_base = {"block": 256, "vector": width, "reduction": "shuffle"}
    for p in around(block_base, block=[128, 512, 1024], vector=[1], reduction=["smem"]) if full else around(block_base, reduction=["smem"]):
        yield Variant(
            "cuda-block-per-row",
            "cuda",
            {"dtype": dtype, **p},
            _gemv_block_per_row(dtype, p["block"], p["vector"], p["reduction"]),
            _gemv_rows_launch(p["block"], p["block"]),
            unsupported=unsupported(dtype, divisible("k", p["vector"])),
        )
    if not full:
        return
    for p in around({"warps": 4, "chunk": 2048, "vector": 4}, warps=[8], chunk=[512, 1024], vector=[1]):
        yield Variant(
            "cuda-split-k",
            "cuda",
            {"dtype": dtype, **p},
            _gemv_split_k(p["warps"], p["chunk"], p["vector"]),
            lambda s, p=p: [
                Launch(ZERO, grid1(1), ("y",)),
                Launch("gemv_split_k", (cdiv(s["m"], p["warps"]), cdiv(s["k"], p["chunk"]), 1), _gemv_args(s), block1(32 * p["warps"])),
            ],
            unsupported=unsupported(dtype, divisible("k", p["vector"]), _at_least("k", 2 * p["chunk"], "one chunk: nothing to split")),
        )


def _gemv_triton_variants(dtype: str) -> Iterable[Variant]:
    full = dtype == "f32"
    tiles = (
        [(1, 1024, 4), (4, 256, 4), (16, 256, 4), (64, 64, 4), (16, 512, 8), (4, 1024, 8)]
        if full
        else [(1, 1024, 4), (16, 256, 4), (4, 1024, 8)]
    )
    for block_m, block_k, warps in tiles:
        params = {"dtype": dtype, "BLOCK_M": block_m, "BLOCK_K": block_k, "num_warps": warps}
        yield Variant(
            "triton-tiles",
            "triton",
            params,
            GEMV_TRITON_TILES,
            lambda s, p=params: [
                Launch(
                    "gemv",
                    grid1(cdiv(s["m"], p["BLOCK_M"])),
                    _gemv_args(s),
                    constexprs={"BLOCK_M": p["BLOCK_M"], "BLOCK_K": p["BLOCK_K"]},
                    num_warps=p["num_warps"],
                )
            ],
            unsupported=unsupported(dtype),
        )
    if not full:
        return
    for block_m, block_k in ((4, 1024), (16, 512)):
        params = {"dtype": dtype, "BLOCK_M": block_m, "BLOCK_K": block_k, "num_warps": 4}
        yield Variant(
            "triton-split-k",
            "triton",
            params,
            GEMV_TRITON_SPLIT_K,
            lambda s, p=params: [
                Launch(ZERO, grid1(1), ("y",)),
                Launch(
                    "gemv_split_k",
                    (cdiv(s["m"], p["BLOCK_M"]), cdiv(s["k"], p["BLOCK_K"]), 1),
                    _gemv_args(s),
                    constexprs={"BLOCK_M": p["BLOCK_M"], "BLOCK_K": p["BLOCK_K"]},
                    num_warps=p["num_warps"],
                ),
            ],
            unsupported=unsupported(dtype, _at_least("k", 2 * block_k, "one tile: nothing to split")),
        )


def _gemv_rows_launch(threads: int, threads_per_row: int, shared_per_element: int = 0) -> Callable[[Sizes], list[Launch]]:
    """Blocks of `threads` threads, threads_per_row to a row; shared_per_element * k bytes for a copy of x."""
    rows_per_block = threads // threads_per_row
    return lambda s: [
        Launch("gemv", grid1(cdiv(s["m"], rows_per_block)), _gemv_args(s), block1(threads), shared_bytes=shared_per_element * s["k"])
    ]


GEMV = Op(
    name="gemv",
    bound="memory",
    sizes=GEMV_SIZES,
    inputs=lambda s: {"a": TensorSpec((s["m"], s["k"]), s["dtype"], "rand"), "x": TensorSpec((s["k"],), s["dtype"], "rand")},
    outputs=lambda s: {"y": TensorSpec((s["m"],), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": inputs["a"] @ inputs["x"]},
    reference_code="def reference(a, x):\n    return a @ x\n",
    variants=gemv_variants,
)

# --- maxpool2d ----------------------------------------------------------------------------------

MAXPOOL_SIZES = [
    {"n": 1, "c": 32, "h": 30, "w": 30, "window": 2, "stride": 2, "dtype": "f32"},
    {"n": 8, "c": 64, "h": 56, "w": 56, "window": 2, "stride": 2, "dtype": "f32"},
    {"n": 16, "c": 128, "h": 112, "w": 112, "window": 2, "stride": 2, "dtype": "f32"},
    {"n": 8, "c": 64, "h": 112, "w": 112, "window": 3, "stride": 2, "dtype": "f32"},
    {"n": 16, "c": 128, "h": 112, "w": 112, "window": 2, "stride": 2, "dtype": "f16"},
    {"n": 8, "c": 64, "h": 112, "w": 112, "window": 3, "stride": 2, "dtype": "f16"},
]
UNROLLED_WINDOW = 2  # the window (= stride) an `unroll` kernel is compiled for


def _pooled(sizes: Sizes) -> tuple[int, int]:
    """Output height and width: windows that fit entirely, as max_pool2d without padding."""
    return (sizes["h"] - sizes["window"]) // sizes["stride"] + 1, (sizes["w"] - sizes["window"]) // sizes["stride"] + 1


def _window_names(unroll: bool) -> tuple[str, str, str, str]:
    """(window, stride, their kernel parameters, their #defines): constants or arguments."""
    if unroll:
        return "KSIZE", "STRIDE", "", f"#define KSIZE {UNROLLED_WINDOW}\n#define STRIDE {UNROLLED_WINDOW}\n"
    return "ksize", "stride", ", int ksize, int stride", ""


def _window_max(dtype: str, unroll: bool, element: str) -> str:
    """`best` = the max over the window of `element` (an expression in i, j)."""
    window = _window_names(unroll)[0]
    pragma = "#pragma unroll\n    " if unroll else ""
    return f"""    float best = {NEG_INF};
    {pragma}for (int i = 0; i < {window}; i++) {{
        {pragma.replace("    ", "        ")}for (int j = 0; j < {window}; j++) best = fmaxf(best, {cuda_load_as_float(dtype, element)});
    }}
"""


def _maxpool_flat(dtype: str, restrict: bool, unroll: bool) -> str:
    ctype = CUDA_TYPES[dtype]
    _, stride, window_params, defines = _window_names(unroll)
    return f"""{CUDA_HEADER}{defines}
// one thread per output; (plane, oh, ow) from the flat index by divisions
extern "C" __global__ void maxpool2d({cuda_pointer(ctype, "x", restrict)}, {cuda_pointer(ctype, "y", restrict, const=False)}, int N, int C, int H, int W, int OH, int OW{window_params}) {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * C * OH * OW) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int nc = idx / (OW * OH);
    const {ctype}* in = x + (long long)nc * H * W + (oh * {stride}) * W + ow * {stride};
{_window_max(dtype, unroll, "in[i * W + j]")}    y[idx] = {cuda_store_from_float(dtype, "best")};
}}
"""


def _maxpool_grid3d(dtype: str, restrict: bool, unroll: bool) -> str:
    ctype = CUDA_TYPES[dtype]
    _, stride, window_params, defines = _window_names(unroll)
    return f"""{CUDA_HEADER}{defines}
// one thread per output: x along ow, y along oh, z over the n * c planes
extern "C" __global__ void maxpool2d({cuda_pointer(ctype, "x", restrict)}, {cuda_pointer(ctype, "y", restrict, const=False)}, int H, int W, int OH, int OW{window_params}) {{
    int ow = blockIdx.x * blockDim.x + threadIdx.x;
    int oh = blockIdx.y * blockDim.y + threadIdx.y;
    if (ow >= OW || oh >= OH) return;
    const {ctype}* in = x + (size_t)blockIdx.z * H * W + (size_t)(oh * {stride}) * W + ow * {stride};
{_window_max(dtype, unroll, "in[i * W + j]")}    y[((size_t)blockIdx.z * OH + oh) * OW + ow] = {cuda_store_from_float(dtype, "best")};
}}
"""


def _maxpool_row_segment(dtype: str, seg: int) -> str:
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}
#define SEG {seg}

// a thread owns SEG consecutive outputs of one output row and walks each input row of their windows once
extern "C" __global__ void maxpool2d(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int planes, int H, int W, int OH, int OW, int ksize, int stride) {{
    int segs = (OW + SEG - 1) / SEG;
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= planes * OH * segs) return;
    int ow0 = (t % segs) * SEG;
    int r = t / segs;  // output row, over planes * OH
    int oh = r % OH;
    int plane = r / OH;
    float best[SEG];
    #pragma unroll
    for (int s = 0; s < SEG; s++) best[s] = {NEG_INF};
    for (int i = 0; i < ksize; i++) {{
        const {ctype}* in = x + ((size_t)plane * H + oh * stride + i) * W + ow0 * stride;
        #pragma unroll
        for (int s = 0; s < SEG; s++) {{
            if (ow0 + s < OW) {{
                for (int j = 0; j < ksize; j++) best[s] = fmaxf(best[s], {cuda_load_as_float(dtype, "in[s * stride + j]")});
            }}
        }}
    }}
    #pragma unroll
    for (int s = 0; s < SEG; s++) {{
        if (ow0 + s < OW) y[(size_t)r * OW + ow0 + s] = {cuda_store_from_float(dtype, "best[s]")};
    }}
}}
"""


def _maxpool_smem_tile(dtype: str, tile_x: int, tile_y: int) -> str:
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}
#define TX {tile_x}
#define TY {tile_y}

// the block's TX x TY outputs need a ((TY-1)*stride+ksize) x ((TX-1)*stride+ksize) input tile:
// staged in shared memory with coalesced loads, then every window is read from there
extern "C" __global__ void maxpool2d(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int H, int W, int OH, int OW, int ksize, int stride) {{
    extern __shared__ {ctype} tile[];
    int tile_w = (TX - 1) * stride + ksize;
    int tile_h = (TY - 1) * stride + ksize;
    int ih0 = blockIdx.y * TY * stride;
    int iw0 = blockIdx.x * TX * stride;
    const {ctype}* plane = x + (size_t)blockIdx.z * H * W;
    for (int r = threadIdx.y; r < tile_h; r += TY)
        for (int c = threadIdx.x; c < tile_w; c += TX)
            if (ih0 + r < H && iw0 + c < W) tile[r * tile_w + c] = plane[(ih0 + r) * W + iw0 + c];
    __syncthreads();
    int ow = blockIdx.x * TX + threadIdx.x;
    int oh = blockIdx.y * TY + threadIdx.y;
    if (ow >= OW || oh >= OH) return;
{_window_max(dtype, False, "tile[(threadIdx.y * stride + i) * tile_w + threadIdx.x * stride + j]")}    y[((size_t)blockIdx.z * OH + oh) * OW + ow] = {cuda_store_from_float(dtype, "best")};
}}
"""


MAXPOOL_TRITON_2D = f"""{TRITON_HEADER}

@triton.jit
def maxpool2d(x_ptr, y_ptr, H, W, OH, OW, KSIZE: tl.constexpr, STRIDE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    plane = tl.program_id(0).to(tl.int64)
    oh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ow = tl.program_id(2) * BLOCK_W + tl.arange(0, BLOCK_W)
    mask = (oh[:, None] < OH) & (ow[None, :] < OW)
    src = x_ptr + plane * H * W + (oh[:, None] * STRIDE) * W + ow[None, :] * STRIDE
    best = tl.full([BLOCK_H, BLOCK_W], float("-inf"), tl.float32)
    for i in tl.static_range(KSIZE):
        for j in tl.static_range(KSIZE):
            best = tl.maximum(best, tl.load(src + i * W + j, mask=mask, other=float("-inf")).to(tl.float32))
    tl.store(y_ptr + plane * OH * OW + oh[:, None] * OW + ow[None, :], best.to(y_ptr.dtype.element_ty), mask=mask)
"""

MAXPOOL_TRITON_FLAT = f"""{TRITON_HEADER}

@triton.jit
def maxpool2d(x_ptr, y_ptr, total, H, W, OH, OW, KSIZE: tl.constexpr, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < total
    ow = idx % OW
    oh = (idx // OW) % OH
    plane = idx // (OW * OH)
    src = x_ptr + (plane * H + oh * STRIDE) * W + ow * STRIDE
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    for i in tl.static_range(KSIZE):
        for j in tl.static_range(KSIZE):
            best = tl.maximum(best, tl.load(src + i * W + j, mask=mask, other=float("-inf")).to(tl.float32))
    tl.store(y_ptr + idx, best.to(y_ptr.dtype.element_ty), mask=mask)
"""


def _window_args(sizes: Sizes, unroll: bool) -> tuple[Any, ...]:
    return () if unroll else (i32(sizes["window"]), i32(sizes["stride"]))


def _flat_launch(block: int, unroll: bool) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        oh, ow = _pooled(s)
        args = ("x", "y", i32(s["n"]), i32(s["c"]), i32(s["h"]), i32(s["w"]), i32(oh), i32(ow), *_window_args(s, unroll))
        return [Launch("maxpool2d", grid1(cdiv(s["n"] * s["c"] * oh * ow, block)), args, block1(block))]

    return launches


def _plane_grid_launch(
    block_x: int, block_y: int, unroll: bool, shared: Callable[[Sizes], int] = lambda s: 0
) -> Callable[[Sizes], list[Launch]]:
    """A (ow, oh, plane) grid of (block_x, block_y) blocks."""

    def launches(s: Sizes) -> list[Launch]:
        oh, ow = _pooled(s)
        args = ("x", "y", i32(s["h"]), i32(s["w"]), i32(oh), i32(ow), *_window_args(s, unroll))
        return [
            Launch(
                "maxpool2d", (cdiv(ow, block_x), cdiv(oh, block_y), s["n"] * s["c"]), args, (block_x, block_y, 1), shared_bytes=shared(s)
            )
        ]

    return launches


def _segment_launch(block: int, seg: int) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        oh, ow = _pooled(s)
        planes = s["n"] * s["c"]
        args = ("x", "y", i32(planes), i32(s["h"]), i32(s["w"]), i32(oh), i32(ow), *_window_args(s, False))
        return [Launch("maxpool2d", grid1(cdiv(planes * oh * cdiv(ow, seg), block)), args, block1(block))]

    return launches


def _tile_shared(dtype: str, tile_x: int, tile_y: int) -> Callable[[Sizes], int]:
    def extent(tiles: int, s: Sizes) -> int:
        return (tiles - 1) * s["stride"] + s["window"]

    return lambda s: extent(tile_y, s) * extent(tile_x, s) * ELEMENT_BYTES[dtype]


def _window_fixed(unroll: bool) -> Check:
    """An unrolled kernel has the 2x2, stride-2 window compiled in."""
    return lambda s: (
        None if not unroll or (s["window"], s["stride"]) == (UNROLLED_WINDOW, UNROLLED_WINDOW) else "window compiled in as 2x2, stride 2"
    )


def _triton_window(s: Sizes) -> dict[str, int]:
    return {"KSIZE": s["window"], "STRIDE": s["stride"]}


def maxpool_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"
        flat = {"block": 256, "restrict": True, "unroll": False}
        flat_settings = (
            (around(flat, block=[128, 1024], restrict=[False], unroll=[True]) + [{**flat, "restrict": False, "unroll": True}])
            if full
            else (around(flat, restrict=[False], unroll=[True]))
        )
        for p in flat_settings:
            yield Variant(
                "cuda-flat",
                "cuda",
                {"dtype": dtype, **p},
                _maxpool_flat(dtype, p["restrict"], p["unroll"]),
                _flat_launch(p["block"], p["unroll"]),
                unsupported=unsupported(dtype, _window_fixed(p["unroll"])),
            )
        grid = {"block_x": 32, "block_y": 8, "restrict": True, "unroll": False}
        shapes = [(16, 16), (8, 32), (64, 4), (128, 1)] if full else [(8, 32)]
        settings = [*around(grid, restrict=[False], unroll=[True]), *({**grid, "block_x": bx, "block_y": by} for bx, by in shapes)]
        if full:
            settings.append({**grid, "block_x": 16, "block_y": 16, "restrict": False})
        for p in settings:
            yield Variant(
                "cuda-grid3d",
                "cuda",
                {"dtype": dtype, **p},
                _maxpool_grid3d(dtype, p["restrict"], p["unroll"]),
                _plane_grid_launch(p["block_x"], p["block_y"], p["unroll"]),
                unsupported=unsupported(dtype, _window_fixed(p["unroll"])),
            )
        for p in around({"seg": 4, "block": 256}, seg=[1, 2, 8] if full else [1], block=[128] if full else []):
            yield Variant(
                "cuda-row-segment",
                "cuda",
                {"dtype": dtype, **p},
                _maxpool_row_segment(dtype, p["seg"]),
                _segment_launch(p["block"], p["seg"]),
                unsupported=unsupported(dtype),
            )
        for tile_x, tile_y in [(32, 8), (32, 4), (16, 16), (64, 4)] if full else [(32, 8), (16, 16)]:
            yield Variant(
                "cuda-smem-tile",
                "cuda",
                {"dtype": dtype, "block_x": tile_x, "block_y": tile_y},
                _maxpool_smem_tile(dtype, tile_x, tile_y),
                _plane_grid_launch(tile_x, tile_y, False, _tile_shared(dtype, tile_x, tile_y)),
                unsupported=unsupported(dtype),
            )
        tiles = (
            [(8, 32, 4), (16, 32, 4), (16, 64, 4), (32, 32, 8), (4, 128, 4), (16, 64, 8)]
            if full
            else [(8, 32, 4), (16, 64, 4), (16, 64, 8)]
        )
        for block_h, block_w, warps in tiles:
            params = {"dtype": dtype, "BLOCK_H": block_h, "BLOCK_W": block_w, "num_warps": warps}
            yield Variant("triton-2d", "triton", params, MAXPOOL_TRITON_2D, _triton_2d_launch(params), unsupported=unsupported(dtype))
        for block, warps in [(256, 4), (1024, 4), (4096, 8)] if full else [(1024, 4), (4096, 8)]:
            params = {"dtype": dtype, "BLOCK": block, "num_warps": warps}
            yield Variant("triton-flat", "triton", params, MAXPOOL_TRITON_FLAT, _triton_flat_launch(params), unsupported=unsupported(dtype))


def _triton_2d_launch(p: dict[str, Any]) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        oh, ow = _pooled(s)
        grid = (s["n"] * s["c"], cdiv(oh, p["BLOCK_H"]), cdiv(ow, p["BLOCK_W"]))
        return [
            Launch(
                "maxpool2d",
                grid,
                ("x", "y", i32(s["h"]), i32(s["w"]), i32(oh), i32(ow)),
                constexprs={**_triton_window(s), "BLOCK_H": p["BLOCK_H"], "BLOCK_W": p["BLOCK_W"]},
                num_warps=p["num_warps"],
            )
        ]

    return launches


def _triton_flat_launch(p: dict[str, Any]) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        oh, ow = _pooled(s)
        total = s["n"] * s["c"] * oh * ow
        return [
            Launch(
                "maxpool2d",
                grid1(cdiv(total, p["BLOCK"])),
                ("x", "y", i32(total), i32(s["h"]), i32(s["w"]), i32(oh), i32(ow)),
                constexprs={**_triton_window(s), "BLOCK": p["BLOCK"]},
                num_warps=p["num_warps"],
            )
        ]

    return launches


MAXPOOL = Op(
    name="maxpool2d",
    bound="memory",
    sizes=MAXPOOL_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"], s["c"], s["h"], s["w"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["n"], s["c"], *_pooled(s)), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": torch.nn.functional.max_pool2d(inputs["x"], sizes["window"], sizes["stride"])},
    reference_code="def reference(x, kernel_size, stride):\n    return torch.nn.functional.max_pool2d(x, kernel_size, stride)\n",
    variants=maxpool_variants,
)

OPS = [GEMV, MAXPOOL]
