"""Helpers shared by the reduction, normalization and fused modules (not an operation).

CUDA snippets for per-thread accumulation, warp-shuffle and block reductions (three
styles: shuffle, shared-memory tree, and the classic interleaved tree with divergence and
bank conflicts), vector packs, plus the small Python pieces every row-wise variant needs.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelcast.kernels_runtime.source.launch_spec import DTYPE_BYTES as ELEMENT_BYTES
from workshop.corpus.spec import CUDA_HEADER, CUDA_TYPES, Sizes, cuda_load_as_float

TRITON_HEADER = "import triton\nimport triton.language as tl\n"
SM_COUNT = 132  # H100 SXM: persistent grids are sized from it
THREADS_PER_SM = 2048  # H100: resident threads an SM holds, what a full-wave persistent grid fills
# NVRTC defines no INFINITY: ±inf as their bit patterns.
NEG_INF = "__int_as_float(0xff800000)"
POS_INF = "__int_as_float(0x7f800000)"
FULL_MASK = "0xffffffffu"  # every lane of a warp, for the *_sync intrinsics
# How two partials combine, and the partial of nothing.
COMBINE = {"sum": "a + b", "max": "fmaxf(a, b)"}
IDENTITY = {"sum": "0.0f", "max": NEG_INF}
# Triton: the masked-load filler and the accumulation of a tile into a running tile.
TRITON_OTHER = {"sum": "0.0", "max": 'float("-inf")'}
TRITON_REDUCE = {"sum": "tl.sum", "max": "tl.max"}

Check = Callable[[Sizes], "str | None"]


def resident_blocks(needed: int, per_sm: int) -> int:
    """A persistent (grid-stride) grid: `per_sm` blocks on every SM, never more than the work needs."""
    return min(needed, SM_COUNT * per_sm)


def vector_width(dtype: str) -> int:
    """Elements in one 16-byte load."""
    return 16 // ELEMENT_BYTES[dtype]


def unsupported(dtype: str | None, *checks: Check) -> Check:
    """A variant's `unsupported`: the problem's dtype must be `dtype` (when given), then every check."""

    def reason(sizes: Sizes) -> str | None:
        if dtype is not None and sizes.get("dtype", "f32") != dtype:
            return f"written for {dtype}"
        for check in checks:
            problem = check(sizes)
            if problem:
                return problem
        return None

    return reason


def at_most(name: str, limit: int, why: str) -> Check:
    return lambda sizes: None if sizes[name] <= limit else f"{name} > {limit}: {why}"


def at_least(name: str, minimum: int, why: str) -> Check:
    return lambda sizes: None if sizes[name] >= minimum else f"{name} < {minimum}: {why}"


def divisible(name: str, by: int) -> Check:
    """Vector loads and fixed tiles need the extent to be a multiple of their width."""
    return lambda sizes: None if sizes[name] % by == 0 else f"{name} not a multiple of {by}"


def next_pow2(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


def cuda_prelude(dtype: str, defines: dict[str, int] | None = None, vector: int = 1) -> str:
    """Headers, compile-time constants and (for vector > 1) the 16-byte Pack of elements."""
    lines = [CUDA_HEADER]
    for name, value in (defines or {}).items():
        lines.append(f"#define {name} {value}")
    if vector > 1:
        lines.append(f"\nstruct __align__(16) Pack {{ {CUDA_TYPES[dtype]} v[{vector}]; }};")
    return "\n".join(lines) + "\n"


def cuda_reductions(kinds: tuple[str, ...], block_style: str | None = None, warp: bool = True) -> str:
    """combine_K, warp_K (unless not `warp`) and (with a style) block_K device functions for each kind K.

    block_K returns the block's result to every thread (BLOCK must be #defined) and ends
    with a barrier, so it can be called again on the same shared memory.
    """
    parts = []
    for kind in kinds:
        parts.append(f"\n__device__ __forceinline__ float combine_{kind}(float a, float b) {{ return {COMBINE[kind]}; }}\n")
        if warp:
            parts.append(f"""
__device__ __forceinline__ float warp_{kind}(float v) {{
    #pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = combine_{kind}(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}}
""")
        if block_style:
            parts.append(_block_reduction(kind, block_style))
    return "".join(parts)


def _block_reduction(kind: str, style: str) -> str:
    combine = f"combine_{kind}"
    if style == "shuffle":
        body = f"""    __shared__ float partial[BLOCK / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_{kind}(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    // every warp reduces the per-warp partials, so all threads hold the result
    v = lane < BLOCK / 32 ? partial[lane] : {IDENTITY[kind]};
    v = warp_{kind}(v);
    __syncthreads();
    return v;"""
    elif style == "smem":
        body = f"""    __shared__ float s[BLOCK];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {{
        if (threadIdx.x < stride) s[threadIdx.x] = {combine}(s[threadIdx.x], s[threadIdx.x + stride]);
        __syncthreads();
    }}
    v = s[0];
    __syncthreads();
    return v;"""
    elif style == "interleaved":
        # Divergent warps (tid % 2s) and 2-, 4-, ...-way bank conflicts: the textbook first attempt.
        body = f"""    __shared__ float s[BLOCK];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int stride = 1; stride < BLOCK; stride <<= 1) {{
        if (threadIdx.x % (2 * stride) == 0) s[threadIdx.x] = {combine}(s[threadIdx.x], s[threadIdx.x + stride]);
        __syncthreads();
    }}
    v = s[0];
    __syncthreads();
    return v;"""
    else:
        raise ValueError(style)
    return f"""
__device__ __forceinline__ float block_{kind}(float v) {{
{body}
}}
"""


def cuda_accumulate(
    dtype: str,
    kind: str,
    src: str,
    start: str,
    stride: str,
    end: str,
    vector: int = 1,
    unroll: int = 1,
    acc: str = "acc",
    value: str | None = None,
    indent: str = "    ",
) -> str:
    """Statements leaving in float `acc` the combination of src[start], src[start + stride], ... < end.

    `src` indexes elements (vector == 1) or Packs; `unroll` > 1 keeps that many independent
    partials (more loads in flight). `value` is what an element `v` (as float) contributes,
    e.g. "v * v"; by default the element itself.
    """
    combine = f"combine_{kind}"
    step = stride if stride.isidentifier() or stride.isdigit() else f"({stride})"

    def times(count: int | str) -> str:
        return str(count) if step == "1" else f"{count} * {step}"

    def fold(element: str, target: str, pad: str) -> list[str]:
        if value is None:
            return [f"{pad}{target} = {combine}({target}, {element});"]
        return [f"{pad}float v = {element};", f"{pad}{target} = {combine}({target}, {value});"]

    def loop(header: str, index: str, target: str, pad: str) -> list[str]:
        if vector == 1:
            body = fold(cuda_load_as_float(dtype, f"{src}[{index}]"), target, pad + "    ")
            return [f"{pad}{header}", *body] if len(body) == 1 else [f"{pad}{header} {{", *body, f"{pad}}}"]
        body = fold(cuda_load_as_float(dtype, "p.v[k]"), target, pad + "        ")
        inner = (
            [f"{pad}    for (int k = 0; k < {vector}; ++k) {body[0].strip()}"]
            if len(body) == 1
            else [f"{pad}    for (int k = 0; k < {vector}; ++k) {{", *body, f"{pad}    }}"]
        )
        return [f"{pad}{header} {{", f"{pad}    Pack p = {src}[{index}];", f"{pad}    #pragma unroll", *inner, f"{pad}}}"]

    pad = indent
    if unroll == 1:
        lines = [f"{pad}float {acc} = {IDENTITY[kind]};", *loop(f"for (int j = {start}; j < {end}; j += {stride})", "j", acc, pad)]
        return "\n".join(lines) + "\n"
    lines = [
        f"{pad}float part[{unroll}];",
        f"{pad}#pragma unroll",
        f"{pad}for (int u = 0; u < {unroll}; ++u) part[u] = {IDENTITY[kind]};",
        f"{pad}int j = {start};",
        f"{pad}for (; j + {times(unroll - 1)} < {end}; j += {times(unroll)}) {{",
        f"{pad}    #pragma unroll",
        *loop(f"for (int u = 0; u < {unroll}; ++u)", f"j + {times('u')}", "part[u]", pad + "    "),
        f"{pad}}}",
        *loop(f"for (; j < {end}; j += {stride})", "j", "part[0]", pad),
        f"{pad}float {acc} = part[0];",
        f"{pad}#pragma unroll",
        f"{pad}for (int u = 1; u < {unroll}; ++u) {acc} = {combine}({acc}, part[u]);",
    ]
    return "\n".join(lines) + "\n"


ATOMIC_MAX_FLOAT = """
// float max through integer atomics: non-negative floats order like ints, negative ones reversed as unsigned
__device__ __forceinline__ void atomic_max_float(float* address, float v) {
    if (v >= 0.0f) atomicMax(reinterpret_cast<int*>(address), __float_as_int(v));
    else atomicMin(reinterpret_cast<unsigned int*>(address), __float_as_uint(v));
}
"""
