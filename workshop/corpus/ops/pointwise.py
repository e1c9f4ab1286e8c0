"""Pointwise kernels of two inputs: swiglu (a gated activation) and broadcast_add (row + vector).

swiglu: y = silu(a) * b over n elements, fp32, fp16 and bf16 problems. Three inputs'
worth of traffic per element and an exp, so still memory-bound. CUDA families:
- scalar: block size, elements per thread, grid-stride loop (persistent grid) or one
  pass, strided access order (neighbouring threads PER_THREAD elements apart), and
  `__restrict__` on the pointers or not;
- vector: float2/float4 for fp32, half2/bfloat162 or 16-byte packs for half types (with a
  scalar tail), block size, and the exponential as expf or the fast __expf intrinsic;
- two kernels: silu(a) into a scratch buffer, then a second launch multiplies by b (what
  unfused framework code does), with the scratch in the input precision or in fp32.
Triton: one tile per program; BLOCK, num_warps.

broadcast_add: y[r, c] = x[r, c] + bias[c] over rows x cols, fp32 and fp16 problems. CUDA
families:
- elementwise: one element per thread, found from a flat index (a modulo or division per
  element) or from a 2D grid (blockIdx.y is the row), with threads running along the
  columns (coalesced) or down the rows (uncoalesced); block size, `__restrict__`;
- tile: 2D blocks that walk a band of rows per column, with the bias cached in shared
  memory, held in a register, or read from global memory in every row (which, without
  `__restrict__`, the compiler cannot hoist out of the loop); block shape, rows per block;
- vector: 2D grid with float2/float4, half2 (__hadd2) or 16-byte packs along the columns.
Triton: 2D tiles (BLOCK_R, BLOCK_C, num_warps) and one program per row looping over the
columns (BLOCK_C, num_warps). The tall-skinny problem (60000 x 64) leaves most threads of a
256-wide row of threads idle and makes a 2D grid launch one block row per matrix row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import pack_struct
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
    cuda_load_as_float,
    cuda_store_from_float,
    grid1,
    i32,
    product,
)

RESTRICT = {True: " __restrict__", False: ""}
# Vector widths per element type: a native pair/quad type, then a 16-byte pack.
VECTORS = {"f32": (2, 4), "f16": (2, 8), "bf16": (2, 8)}
NATIVE_VECTOR = {("f32", 2): "float2", ("f32", 4): "float4", ("f16", 2): "__half2", ("bf16", 2): "__nv_bfloat162"}
MAX_GRID_Y = 65535


def vector_type(dtype: str, width: int) -> tuple[str, str]:
    """(declaration needed, type name) of `width` elements loaded at once."""
    native = NATIVE_VECTOR.get((dtype, width))
    return ("", native) if native else (pack_struct(dtype, width), "Pack")


def lanewise(dtype: str, width: int, statement: str, pad: str) -> str:
    """`statement` (with {l} for a lane's member) for every lane: spelled out for native vectors, a loop for packs."""
    if (dtype, width) in NATIVE_VECTOR:
        return "".join(f"{pad}{statement.format(l=lane)}\n" for lane in "xyzw"[:width])
    return f"{pad}#pragma unroll\n{pad}for (int k = 0; k < {width}; ++k) {statement.format(l='v[k]')}\n"


# --- swiglu ------------------------------------------------------------------------------------------

SWIGLU_SIZES = [
    {"n": 5003, "dtype": "f32"},
    {"n": 1 << 20, "dtype": "f32"},
    {"n": 1 << 24, "dtype": "f32"},
    {"n": 1 << 20, "dtype": "f16"},
    {"n": 1 << 25, "dtype": "f16"},
    {"n": 1 << 25, "dtype": "bf16"},
]

SWIGLU_REFERENCE = """\
def reference(a, b):
    return torch.nn.functional.silu(a) * b
"""


def silu_function(math: str) -> str:
    return f"__device__ __forceinline__ float silu(float v) {{ return v / (1.0f + {math}(-v)); }}\n"


def swiglu_element(dtype: str, index: str, pad: str) -> str:
    value = f"silu({cuda_load_as_float(dtype, f'a[{index}]')}) * {cuda_load_as_float(dtype, f'b[{index}]')}"
    return f"{pad}y[{index}] = {cuda_store_from_float(dtype, value)};\n"


def swiglu_signature(dtype: str, restrict: bool) -> str:
    t, r = CUDA_TYPES[dtype], RESTRICT[restrict]
    return f'extern "C" __global__ void swiglu(const {t}*{r} a, const {t}*{r} b, {t}*{r} y, int N)'


def swiglu_scalar_code(dtype: str, per_thread: int, grid_stride: bool, strided: bool, restrict: bool) -> str:
    if per_thread == 1:
        first = "blockIdx.x * blockDim.x + threadIdx.x"
        if grid_stride:
            body = f"    for (int idx = {first}; idx < N; idx += blockDim.x * gridDim.x)\n{swiglu_element(dtype, 'idx', ' ' * 8)}"
        else:
            body = f"    int idx = {first};\n    if (idx < N)\n{swiglu_element(dtype, 'idx', ' ' * 8)}"
        defines = ""
    else:
        # strided: thread t owns PER_THREAD consecutive elements, so a warp's loads are PER_THREAD apart
        first, step = (
            ("(blockIdx.x * blockDim.x + threadIdx.x) * PER_THREAD", "k")
            if strided
            else ("blockIdx.x * blockDim.x * PER_THREAD + threadIdx.x", "k * blockDim.x")
        )

        def chunk(base: str, pad: str) -> str:
            return (
                f"{pad}#pragma unroll\n{pad}for (int k = 0; k < PER_THREAD; ++k) {{\n{pad}    int idx = {base} + {step};\n"
                f"{pad}    if (idx < N)\n{swiglu_element(dtype, 'idx', pad + ' ' * 8)}{pad}}}\n"
            )

        if grid_stride:
            body = f"    for (int offset = 0; offset < N; offset += gridDim.x * blockDim.x * PER_THREAD) {{\n{chunk('offset + ' + first, ' ' * 8)}    }}\n"
        else:
            body = chunk(first, "    ")
        defines = f"#define PER_THREAD {per_thread}\n"
    return f"""{CUDA_HEADER}{defines}
{silu_function("expf")}
{swiglu_signature(dtype, restrict)} {{
{body}}}
"""


def swiglu_vector_code(dtype: str, width: int, math: str) -> str:
    """Thread i handles elements [i*W, i*W + W); the last partial vector element by element."""
    declaration, vtype = vector_type(dtype, width)
    value = f"silu({cuda_load_as_float(dtype, 'va.{l}')}) * {cuda_load_as_float(dtype, 'vb.{l}')}"
    return f"""{CUDA_HEADER}{declaration}
{silu_function(math)}
{swiglu_signature(dtype, True)} {{
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * {width};
    if (i + {width} <= N) {{
        {vtype} va = *reinterpret_cast<const {vtype}*>(a + i);
        {vtype} vb = *reinterpret_cast<const {vtype}*>(b + i);
        {vtype} out;
{lanewise(dtype, width, "out.{l} = " + cuda_store_from_float(dtype, value) + ";", " " * 8)}        *reinterpret_cast<{vtype}*>(y + i) = out;
    }} else {{
        for (int j = i; j < N; ++j)
{swiglu_element(dtype, "j", " " * 12)}    }}
}}
"""


def swiglu_two_kernels_code(dtype: str, scratch: str) -> str:
    """silu(a) goes through memory in `scratch` precision between two launches."""
    t, s = CUDA_TYPES[dtype], CUDA_TYPES[scratch]
    product_value = f"{cuda_load_as_float(scratch, 'tmp[i]')} * {cuda_load_as_float(dtype, 'b[i]')}"
    return f"""{CUDA_HEADER}
{silu_function("expf")}
extern "C" __global__ void silu_kernel(const {t}* __restrict__ a, {s}* __restrict__ tmp, int N) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) tmp[i] = {cuda_store_from_float(scratch, f"silu({cuda_load_as_float(dtype, 'a[i]')})")};
}}

extern "C" __global__ void mul_kernel(const {s}* __restrict__ tmp, const {t}* __restrict__ b, {t}* __restrict__ y, int N) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i] = {cuda_store_from_float(dtype, product_value)};
}}
"""


SWIGLU_TRITON = f"""{TRITON_HEADER}

@triton.jit
def swiglu(a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = a * tl.sigmoid(a) * b
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
"""


def _swiglu_launch(grid: int, block: int, sizes: Sizes) -> Launch:
    return Launch("swiglu", grid1(grid), ("a", "b", "y", i32(sizes["n"])), block1(block))


def swiglu_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16", "bf16"):
        full = dtype != "bf16"  # bf16 gets a sample of each family
        scalar = [
            *product(
                {
                    "block": [128, 256, 1024] if full else [256],
                    "per_thread": [1, 4],
                    "grid_stride": [False, True],
                    "strided": [False],
                    "restrict": [True],
                }
            ),
            *product({"block": [256], "per_thread": [4], "grid_stride": [False, True], "strided": [True], "restrict": [True]}),
            *product({"block": [256], "per_thread": [1, 4], "grid_stride": [False], "strided": [False], "restrict": [False]}),
        ]
        for params in scalar:
            yield _swiglu_scalar_variant(dtype, params)
        for params in product({"vector": list(VECTORS[dtype]), "block": [128, 256] if full else [256], "math": ["expf", "__expf"]}):
            code = swiglu_vector_code(dtype, params["vector"], params["math"])
            launches = lambda s, p=params: [_swiglu_launch(cdiv(s["n"], p["block"] * p["vector"]), p["block"], s)]
            yield Variant("cuda-vector", "cuda", {"dtype": dtype, **params}, code, launches, unsupported=unsupported(dtype))
        for params in product({"block": [256, 1024], "scratch": sorted({dtype, "f32"})}):
            yield _swiglu_two_kernels_variant(dtype, params)
        for params in product({"BLOCK": [256, 1024, 4096] if full else [1024], "num_warps": [2, 4, 8]}):
            launches = lambda s, p=params: [
                Launch(
                    "swiglu",
                    grid1(cdiv(s["n"], p["BLOCK"])),
                    ("a", "b", "y", i32(s["n"])),
                    constexprs={"BLOCK": p["BLOCK"]},
                    num_warps=p["num_warps"],
                )
            ]
            yield Variant("triton-block", "triton", {"dtype": dtype, **params}, SWIGLU_TRITON, launches, unsupported=unsupported(dtype))


def _swiglu_scalar_variant(dtype: str, params: dict[str, Any]) -> Variant:
    block, per_thread = params["block"], params["per_thread"]

    def launches(sizes: Sizes) -> list[Launch]:
        blocks = cdiv(sizes["n"], block * per_thread)
        # A grid-stride loop launches a persistent grid: as many blocks as the SMs hold at once.
        return [_swiglu_launch(resident_blocks(blocks, THREADS_PER_SM // block) if params["grid_stride"] else blocks, block, sizes)]

    code = swiglu_scalar_code(dtype, per_thread, params["grid_stride"], params["strided"], params["restrict"])
    return Variant("cuda-scalar", "cuda", {"dtype": dtype, **params}, code, launches, unsupported=unsupported(dtype))


def _swiglu_two_kernels_variant(dtype: str, params: dict[str, Any]) -> Variant:
    block = params["block"]

    def launches(sizes: Sizes) -> list[Launch]:
        n, grid = sizes["n"], grid1(cdiv(sizes["n"], block))
        return [
            Launch("silu_kernel", grid, ("a", "tmp", i32(n)), block1(block)),
            Launch("mul_kernel", grid, ("tmp", "b", "y", i32(n)), block1(block)),
        ]

    return Variant(
        "cuda-two-kernels",
        "cuda",
        {"dtype": dtype, **params},
        swiglu_two_kernels_code(dtype, params["scratch"]),
        launches,
        scratch=lambda s: {"tmp": TensorSpec((s["n"],), params["scratch"])},
        unsupported=unsupported(dtype),
    )


SWIGLU = Op(
    name="swiglu",
    bound="memory",
    sizes=SWIGLU_SIZES,
    inputs=lambda s: {"a": TensorSpec((s["n"],), s["dtype"]), "b": TensorSpec((s["n"],), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["n"],), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": torch.nn.functional.silu(inputs["a"]) * inputs["b"]},
    reference_code=SWIGLU_REFERENCE,
    variants=swiglu_variants,
)

# --- broadcast_add -------------------------------------------------------------------------------------

BROADCAST_SIZES = [
    {"rows": 37, "cols": 200, "dtype": "f32"},
    {"rows": 60000, "cols": 64, "dtype": "f32"},
    {"rows": 8192, "cols": 4096, "dtype": "f32"},
    {"rows": 4096, "cols": 1024, "dtype": "f16"},
    {"rows": 8192, "cols": 8192, "dtype": "f16"},
]

BROADCAST_REFERENCE = """\
def reference(x, bias):
    return x + bias
"""


def add(dtype: str, a: str, b: str) -> str:
    """a + b in the element type: one rounding, as torch does it."""
    return f"{a} + {b}" if dtype == "f32" else f"__hadd({a}, {b})"


def broadcast_signature(dtype: str, restrict: bool) -> str:
    t, r = CUDA_TYPES[dtype], RESTRICT[restrict]
    return f'extern "C" __global__ void broadcast_add(const {t}*{r} x, const {t}*{r} bias, {t}*{r} y, int rows, int cols)'


def broadcast_elementwise_code(dtype: str, indexing: str, walk: str, restrict: bool) -> str:
    """One element per thread; `walk` says whether neighbouring threads take neighbouring columns or rows."""
    if indexing == "flat":
        coords = (
            "    int col = idx % cols;\n    int row = idx / cols;\n"
            if walk == "cols"
            else "    int row = idx % rows;\n    int col = idx / rows;\n"
        )
        body = f"    int idx = blockIdx.x * blockDim.x + threadIdx.x;\n    if (idx >= rows * cols) return;\n{coords}"
    elif walk == "cols":
        body = "    int col = blockIdx.x * blockDim.x + threadIdx.x;\n    int row = blockIdx.y;\n    if (col >= cols) return;\n"
    else:
        body = "    int row = blockIdx.x * blockDim.x + threadIdx.x;\n    int col = blockIdx.y;\n    if (row >= rows) return;\n"
    return f"""{CUDA_HEADER}
{broadcast_signature(dtype, restrict)} {{
{body}    y[row * cols + col] = {add(dtype, "x[row * cols + col]", "bias[col]")};
}}
"""


def broadcast_tile_code(dtype: str, block_x: int, block_y: int, rows_per_block: int, cache: str, restrict: bool) -> str:
    """A (TX, TY) block covers TX columns and a band of ROWS rows; thread (tx, ty) takes every TY-th row of the band."""
    t = CUDA_TYPES[dtype]
    if cache == "shared":
        setup = (
            f"    __shared__ {t} sbias[TX];\n    if (threadIdx.y == 0 && col < cols) sbias[threadIdx.x] = bias[col];\n"
            "    __syncthreads();\n    if (col >= cols) return;\n"
        )
        b = "sbias[threadIdx.x]"
    elif cache == "register":
        setup = f"    if (col >= cols) return;\n    {t} b = bias[col];\n"
        b = "b"
    else:
        setup = "    if (col >= cols) return;\n"
        b = "bias[col]"
    return f"""{CUDA_HEADER}
#define TX {block_x}
#define TY {block_y}
#define ROWS {rows_per_block}

{broadcast_signature(dtype, restrict)} {{
    int col = blockIdx.x * TX + threadIdx.x;
    int first = blockIdx.y * ROWS;
    int last = min(first + ROWS, rows);
{setup}    for (int row = first + threadIdx.y; row < last; row += TY)
        y[row * cols + col] = {add(dtype, "x[row * cols + col]", b)};
}}
"""


def broadcast_vector_code(dtype: str, width: int) -> str:
    """2D grid over (column vectors, rows): thread j adds bias[j*W .. j*W + W) to its row's vector j."""
    declaration, vtype = vector_type(dtype, width)
    if vtype == "__half2":
        compute = "        v = __hadd2(v, bv);\n"
    else:
        compute = lanewise(dtype, width, f"v.{{l}} = {add(dtype, 'v.{l}', 'bv.{l}')};", " " * 8)
    return f"""{CUDA_HEADER}{declaration}
{broadcast_signature(dtype, True)} {{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (j < cols / {width}) {{
        const {vtype}* xrow = reinterpret_cast<const {vtype}*>(x + row * cols);
        {vtype} v = xrow[j];
        {vtype} bv = reinterpret_cast<const {vtype}*>(bias)[j];
{compute}        reinterpret_cast<{vtype}*>(y + row * cols)[j] = v;
    }}
}}
"""


BROADCAST_TRITON_2D = f"""{TRITON_HEADER}

@triton.jit
def broadcast_add(x_ptr, bias_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    offsets = r[:, None] * cols + c[None, :]
    x = tl.load(x_ptr + offsets, mask=mask)
    b = tl.load(bias_ptr + c, mask=c < cols)
    tl.store(y_ptr + offsets, x + b[None, :], mask=mask)
"""

BROADCAST_TRITON_ROW = f"""{TRITON_HEADER}

@triton.jit
def broadcast_add(x_ptr, bias_ptr, y_ptr, rows, cols, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, cols, BLOCK_C):
        c = start + tl.arange(0, BLOCK_C)
        mask = c < cols
        x = tl.load(x_ptr + row * cols + c, mask=mask)
        b = tl.load(bias_ptr + c, mask=mask)
        tl.store(y_ptr + row * cols + c, x + b, mask=mask)
"""


def _broadcast_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "bias", "y", i32(sizes["rows"]), i32(sizes["cols"]))


def broadcast_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        yield from _broadcast_elementwise(dtype)
        yield from _broadcast_tiles(dtype)
        for params in product({"vector": list(VECTORS[dtype]), "block": [128, 256]}):
            launches = lambda s, p=params: [
                Launch("broadcast_add", (cdiv(s["cols"] // p["vector"], p["block"]), s["rows"], 1), _broadcast_args(s), block1(p["block"]))
            ]
            yield Variant(
                "cuda-vector",
                "cuda",
                {"dtype": dtype, **params},
                broadcast_vector_code(dtype, params["vector"]),
                launches,
                unsupported=unsupported(
                    dtype, divisible("cols", params["vector"]), at_most("rows", MAX_GRID_Y, "one grid row per matrix row")
                ),
            )
        for (block_r, block_c), warps in ((tile, warps) for tile in [(1, 1024), (8, 256), (32, 64)] for warps in (4, 8)):
            params = {"dtype": dtype, "BLOCK_R": block_r, "BLOCK_C": block_c, "num_warps": warps}
            launches = lambda s, p=params: [
                Launch(
                    "broadcast_add",
                    (cdiv(s["rows"], p["BLOCK_R"]), cdiv(s["cols"], p["BLOCK_C"]), 1),
                    _broadcast_args(s),
                    constexprs={"BLOCK_R": p["BLOCK_R"], "BLOCK_C": p["BLOCK_C"]},
                    num_warps=p["num_warps"],
                )
            ]
            yield Variant("triton-2d", "triton", params, BROADCAST_TRITON_2D, launches, unsupported=unsupported(dtype))
        for params in product({"dtype": [dtype], "BLOCK_C": [512, 2048], "num_warps": [2, 8]}):
            launches = lambda s, p=params: [
                Launch(
                    "broadcast_add", grid1(s["rows"]), _broadcast_args(s), constexprs={"BLOCK_C": p["BLOCK_C"]}, num_warps=p["num_warps"]
                )
            ]
            yield Variant("triton-row", "triton", params, BROADCAST_TRITON_ROW, launches, unsupported=unsupported(dtype))


def _broadcast_elementwise(dtype: str) -> Iterable[Variant]:
    variants = [
        *product({"indexing": ["flat", "grid2d"], "walk": ["cols", "rows"], "block": [128, 1024], "restrict": [True]}),
        *product({"indexing": ["flat", "grid2d"], "walk": ["cols"], "block": [128], "restrict": [False]}),
    ]
    for params in variants:
        block = params["block"]
        if params["indexing"] == "flat":
            launches = lambda s, b=block: [Launch("broadcast_add", grid1(cdiv(s["rows"] * s["cols"], b)), _broadcast_args(s), block1(b))]
            only = unsupported(dtype)
        else:
            along, across = ("cols", "rows") if params["walk"] == "cols" else ("rows", "cols")
            launches = lambda s, b=block, along=along, across=across: [
                Launch("broadcast_add", (cdiv(s[along], b), s[across], 1), _broadcast_args(s), block1(b))
            ]
            only = unsupported(dtype, at_most(across, MAX_GRID_Y, "gridDim.y"))
        code = broadcast_elementwise_code(dtype, params["indexing"], params["walk"], params["restrict"])
        yield Variant("cuda-elementwise", "cuda", {"dtype": dtype, **params}, code, launches, unsupported=only)


def _broadcast_tiles(dtype: str) -> Iterable[Variant]:
    full = dtype == "f32"
    variants = [
        *product(
            {
                "block": ["32x8", "256x1"],
                "rows_per_block": [16, 64] if full else [64],
                "cache": ["shared", "register", "global"],
                "restrict": [True],
            }
        ),
        *product({"block": ["256x1"], "rows_per_block": [64], "cache": ["shared", "register", "global"], "restrict": [False]}),
    ]
    for params in variants:
        block_x, block_y = (int(extent) for extent in params["block"].split("x"))
        rows_per_block = params["rows_per_block"]
        launches = lambda s, bx=block_x, by=block_y, r=rows_per_block: [
            Launch("broadcast_add", (cdiv(s["cols"], bx), cdiv(s["rows"], r), 1), _broadcast_args(s), (bx, by, 1))
        ]
        code = broadcast_tile_code(dtype, block_x, block_y, rows_per_block, params["cache"], params["restrict"])
        yield Variant("cuda-tile", "cuda", {"dtype": dtype, **params}, code, launches, unsupported=unsupported(dtype))


BROADCAST_ADD = Op(
    name="broadcast_add",
    bound="memory",
    sizes=BROADCAST_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["rows"], s["cols"]), s["dtype"]), "bias": TensorSpec((s["cols"],), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["rows"], s["cols"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": inputs["x"] + inputs["bias"]},
    reference_code=BROADCAST_REFERENCE,
    variants=broadcast_variants,
)

OPS = [SWIGLU, BROADCAST_ADD]
