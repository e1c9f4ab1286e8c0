"""Elementwise activation (GELU, tanh form): the memory-bound baseline of the corpus.

CUDA axes: block size, elements per thread, vector width (float4/half2 loads),
grid-stride loop or one pass, and a deliberately strided access order. Triton axes:
BLOCK, num_warps. Precision comes from the problem (fp32, fp16, bf16 inputs).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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

SIZES = [
    {"n": 1 << 12, "dtype": "f32"},
    {"n": 1 << 20, "dtype": "f32"},
    {"n": 1 << 26, "dtype": "f32"},
    {"n": 1 << 24, "dtype": "f16"},
    {"n": 1 << 24, "dtype": "bf16"},
]

REFERENCE_CODE = """\
def reference(x):
    return torch.nn.functional.gelu(x, approximate="tanh")
"""

GELU_C = "0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)))"


def _cuda_code(dtype: str, per_thread: int, stride_loop: bool, strided: bool) -> str:
    ctype = CUDA_TYPES[dtype]
    load = cuda_load_as_float(dtype, "x[j]")
    store = cuda_store_from_float(dtype, "g")
    if strided:
        # Thread t of a block handles elements t*per_thread..: neighbours are per_thread apart.
        index = f"(blockIdx.x * blockDim.x * {per_thread}) + threadIdx.x * {per_thread} + k"
    else:
        index = f"(blockIdx.x * blockDim.x * {per_thread}) + k * blockDim.x + threadIdx.x"
    body = f"""
    #pragma unroll
    for (int k = 0; k < {per_thread}; ++k) {{
        long long j = base + {index};
        if (j < n) {{
            float v = {load};
            float g = {GELU_C};
            y[j] = {store};
        }}
    }}"""
    if stride_loop:
        loop = f"""    for (long long base = 0; base < n; base += (long long)gridDim.x * blockDim.x * {per_thread}) {{{body}
    }}"""
    else:
        loop = f"    long long base = 0;{body}"
    return f"""{CUDA_HEADER}
extern "C" __global__ void gelu(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int n) {{
{loop}
}}
"""


def _cuda_vector_code(dtype: str) -> str:
    """float4 loads for fp32, 8 halves (one 16-byte load) for fp16/bf16."""
    ctype = CUDA_TYPES[dtype]
    width = 4 if dtype == "f32" else 8
    return f"""{CUDA_HEADER}
struct __align__(16) Pack {{ {ctype} v[{width}]; }};

extern "C" __global__ void gelu(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int n) {{
    long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * {width};
    if (i + {width} <= n) {{
        Pack p = *reinterpret_cast<const Pack*>(x + i);
        #pragma unroll
        for (int k = 0; k < {width}; ++k) {{
            float v = {cuda_load_as_float(dtype, "p.v[k]")};
            float g = {GELU_C};
            p.v[k] = {cuda_store_from_float(dtype, "g")};
        }}
        *reinterpret_cast<Pack*>(y + i) = p;
    }} else {{
        for (long long j = i; j < n; ++j) {{
            float v = {cuda_load_as_float(dtype, "x[j]")};
            float g = {GELU_C};
            y[j] = {cuda_store_from_float(dtype, "g")};
        }}
    }}
}}
"""


def _triton_code() -> str:
    return """import triton
import triton.language as tl


@triton.jit
def gelu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    v = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    inner = 0.7978845608 * (v + 0.044715 * v * v * v)
    t = 2.0 * tl.sigmoid(2.0 * inner) - 1.0
    g = 0.5 * v * (1.0 + t)
    tl.store(y_ptr + offsets, g.to(y_ptr.dtype.element_ty), mask=mask)
"""


def variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16", "bf16"):
        for params in product(
            {"block": [64, 128, 256, 512, 1024], "per_thread": [1, 4], "grid_stride": [False, True], "strided": [False, True]}
        ):
            if params["strided"] and params["per_thread"] == 1:
                continue  # the same access pattern as not strided
            yield _scalar_variant(dtype, params)
        for block in (128, 256, 512):
            yield _vector_variant(dtype, block)
        for params in product({"BLOCK": [256, 1024, 4096], "num_warps": [2, 4, 8]}):
            yield _triton_variant(dtype, params)


def _scalar_variant(dtype: str, params: dict[str, Any]) -> Variant:
    block, per_thread, grid_stride = params["block"], params["per_thread"], params["grid_stride"]

    def launches(sizes: Sizes) -> list[Launch]:
        n = sizes["n"]
        # A grid-stride loop launches a fixed grid (4 blocks per SM on 132 SMs).
        blocks = min(cdiv(n, block * per_thread), 528) if grid_stride else cdiv(n, block * per_thread)
        return [Launch("gelu", grid1(blocks), ("x", "y", i32(n)), block1(block))]

    code = _cuda_code(dtype, per_thread, grid_stride, params["strided"])
    return Variant("cuda-scalar", "cuda", {"dtype": dtype, "vector": 1, **params}, code, launches, unsupported=_other_dtype(dtype))


def _vector_variant(dtype: str, block: int) -> Variant:
    width = 4 if dtype == "f32" else 8

    def launches(sizes: Sizes) -> list[Launch]:
        return [Launch("gelu", grid1(cdiv(sizes["n"], block * width)), ("x", "y", i32(sizes["n"])), block1(block))]

    return Variant(
        "cuda-vector",
        "cuda",
        {"dtype": dtype, "vector": width, "block": block},
        _cuda_vector_code(dtype),
        launches,
        unsupported=_other_dtype(dtype),
    )


def _triton_variant(dtype: str, params: dict[str, Any]) -> Variant:
    def launches(sizes: Sizes) -> list[Launch]:
        n = sizes["n"]
        return [
            Launch(
                "gelu",
                grid1(cdiv(n, params["BLOCK"])),
                ("x", "y", i32(n)),
                constexprs={"BLOCK": params["BLOCK"]},
                num_warps=params["num_warps"],
            )
        ]

    return Variant("triton-block", "triton", {"dtype": dtype, **params}, _triton_code(), launches, unsupported=_other_dtype(dtype))


def _other_dtype(dtype: str):
    """A variant written for one precision runs only the problems of that precision."""
    return lambda sizes: None if sizes["dtype"] == dtype else f"written for {dtype}"


OP = Op(
    name="gelu",
    bound="memory",
    sizes=SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["n"],), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": torch.nn.functional.gelu(inputs["x"], approximate="tanh")},
    reference_code=REFERENCE_CODE,
    variants=variants,
    tolerance={"f32": 1e-4, "f16": 1e-2, "bf16": 2e-2},
)
