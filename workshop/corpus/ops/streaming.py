"""Streaming elementwise kernels: axpy (out = a*x + y) and where_select (out = where(mask, a, b)).

Nothing to compute, so speed is how the stream is cut into threads and loads — the knobs
the forecaster gets most wrong on simple kernels. Grids are "one-pass" (a thread per
PER_THREAD elements, enough blocks to cover n) or "K/SM": a grid-stride loop over a
grid of K blocks per SM (132 SMs), so 1/SM is a grid far too small to fill the GPU.

axpy: out = a*x + y over n elements, fp32, fp16 and bf16 problems, BLAS-style arguments
(N, a, x, y, out); out of place, which moves the same bytes as y += a*x. CUDA families:
- scalar: block size (64..1024), elements per thread (the manual unroll of the grid-stride
  loop, or items per thread in one pass), grid (one pass or 1..32 blocks per SM), access
  (coalesced, or each thread a chunk of consecutive elements: strided warps), `__restrict__`
  or not, loads through __ldg or plain, and an `int` or `size_t` index (and N);
- vector: float2/float4, half2/bfloat162 or 16-byte packs of 8 halves, one pass or a
  grid-stride loop, block size, the N % VEC tail by scalar threads or assumed away
  (N a multiple of VEC), `__restrict__`; half2 math in fp32 or native __hfma2.
Triton: one tile per program (BLOCK, num_warps) and a persistent program loop (programs
per SM, BLOCK, num_warps).

where_select: out = mask ? a : b over n elements, mask uint8 (nonzero is true), a and b
fp32 or fp16. The mask density is part of the problem (`mask_span`: bytes uniform in
[0, span), so 1/2 or 15/16 true): loads that skip the unselected input only save traffic
when whole sectors go unselected. CUDA families:
- scalar: a thread per element (or PER_THREAD): `select` as a ternary, an if/else branch,
  or an arithmetic blend m*a + (1-m)*b that always reads both; block, grid, `__restrict__`;
- packed: four consecutive elements per thread, mask read as four bytes or one uchar4,
  data as four scalars or one 16-/8-byte pack, select per lane or skipping the unselected
  pack when all four lanes agree; block, grid, `__restrict__`.
Triton: one tile per program with both inputs loaded or each load masked by the mask;
a persistent program loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.memkit import pack_struct
from workshop.corpus.ops.rowkit import TRITON_HEADER, divisible, resident_blocks, unsupported
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
    Launch,
    Op,
    Scalar,
    Sizes,
    TensorSpec,
    Variant,
    around,
    block1,
    cdiv,
    cuda_load_as_float,
    cuda_pointer,
    cuda_store_from_float,
    f32,
    grid1,
    i32,
)

ONE_PASS = "one-pass"


def grid_blocks(grid: str, items: int, threads: int) -> int:
    """Blocks covering `items` work items in one pass, or K/SM blocks of a grid-stride loop (never more than one pass needs)."""
    cover = cdiv(items, threads)
    return cover if grid == ONE_PASS else resident_blocks(cover, int(grid.split("/")[0]))


def cuda_cover(element: Callable[[str], str], var: str, index: str, per_thread: int, grid: str, access: str, n: str) -> str:
    """Statements running `element` (a statement on index `var`, given its indent) for every index below n: one pass or a grid-stride loop.

    With PER_THREAD > 1 a thread takes PER_THREAD elements per step, blockDim.x apart
    (coalesced) or consecutive (chunked: a warp's loads are PER_THREAD elements apart).
    """
    cast = "(size_t)" if index == "size_t" else ""
    if per_thread == 1:
        first = f"{cast}blockIdx.x * blockDim.x + threadIdx.x"
        if grid == ONE_PASS:
            return f"    {index} {var} = {first};\n    if ({var} < {n}) {{\n{element('        ')}    }}\n"
        return f"    for ({index} {var} = {first}; {var} < {n}; {var} += {cast}blockDim.x * gridDim.x) {{\n{element('        ')}    }}\n"
    if access == "coalesced":
        first, step = f"{cast}blockIdx.x * blockDim.x * PER_THREAD + threadIdx.x", "k * blockDim.x"
    else:
        first, step = f"({cast}blockIdx.x * blockDim.x + threadIdx.x) * PER_THREAD", "k"

    def chunk(pad: str) -> str:
        return (
            f"{pad}#pragma unroll\n{pad}for (int k = 0; k < PER_THREAD; ++k) {{\n{pad}    {index} {var} = base + {step};\n"
            f"{pad}    if ({var} < {n}) {{\n{element(pad + '        ')}{pad}    }}\n{pad}}}\n"
        )

    if grid == ONE_PASS:
        return f"    {index} base = {first};\n{chunk('    ')}"
    return (
        f"    for ({index} base = {first}; base < {n}; base += {cast}gridDim.x * blockDim.x * PER_THREAD) {{\n{chunk('        ')}    }}\n"
    )


def per_thread_define(per_thread: int) -> str:
    return f"#define PER_THREAD {per_thread}\n" if per_thread > 1 else ""


def triton_cover(name: str, params: str, body: list[str], persistent: bool) -> str:
    """A Triton kernel running `body` on one BLOCK of `offsets`: one tile per program, or a persistent loop over tiles."""
    if persistent:
        head = [
            "    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):",
            "        offsets = start + tl.arange(0, BLOCK)",
        ]
        pad = "        "
    else:
        head = ["    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)"]
        pad = "    "
    lines = "\n".join(head + [pad + line for line in body])
    return f"{TRITON_HEADER}\n\n@triton.jit\ndef {name}({params}, BLOCK: tl.constexpr):\n{lines}\n"


def triton_launch(kernel: str, args: Callable[[Sizes], tuple[Any, ...]], params: dict[str, Any]) -> Callable[[Sizes], list[Launch]]:
    """One tile per program, or (with programs_per_sm) a persistent grid of that many programs per SM."""

    def launches(sizes: Sizes) -> list[Launch]:
        tiles = cdiv(sizes["n"], params["BLOCK"])
        programs = resident_blocks(tiles, params["programs_per_sm"]) if "programs_per_sm" in params else tiles
        return [Launch(kernel, grid1(programs), args(sizes), constexprs={"BLOCK": params["BLOCK"]}, num_warps=params["num_warps"])]

    return launches


def triton_variants(
    dtype: str,
    kernel: str,
    code: Callable[[dict[str, Any], bool], str],
    args: Callable[[Sizes], tuple[Any, ...]],
    tiles: list[dict[str, Any]],
    persistent: list[dict[str, Any]],
) -> Iterable[Variant]:
    for params in tiles:
        yield Variant(
            "triton-block",
            "triton",
            {"dtype": dtype, **params},
            code(params, False),
            triton_launch(kernel, args, params),
            unsupported=unsupported(dtype),
        )
    for params in persistent:
        yield Variant(
            "triton-persistent",
            "triton",
            {"dtype": dtype, **params},
            code(params, True),
            triton_launch(kernel, args, params),
            unsupported=unsupported(dtype),
        )


# --- axpy --------------------------------------------------------------------------------------------

AXPY_SIZES = [
    {"n": 4096, "dtype": "f32"},
    {"n": 1_000_003, "dtype": "f32"},
    {"n": 1 << 25, "dtype": "f32"},
    {"n": 1 << 22, "dtype": "f16"},
    {"n": 1 << 25, "dtype": "f16"},
    {"n": 1 << 25, "dtype": "bf16"},
]
ALPHA = 2.5
AXPY_VECTORS = {"f32": (2, 4), "f16": (2, 8), "bf16": (2, 8)}
# Native pair types, their lanes, and how a float becomes both halves of one.
PAIR_TYPES = {("f32", 2): "float2", ("f32", 4): "float4", ("f16", 2): "__half2", ("bf16", 2): "__nv_bfloat162"}
PAIR_BROADCAST = {"f16": "__float2half2_rn", "bf16": "__float2bfloat162_rn"}

AXPY_REFERENCE = """\
def reference(x, y):
    return torch.add(y, x, alpha=2.5)  # y + 2.5 * x
"""


def axpy_signature(dtype: str, index: str, restrict: bool) -> str:
    t = CUDA_TYPES[dtype]
    pointers = f"{cuda_pointer(t, 'x', restrict)}, {cuda_pointer(t, 'y', restrict)}, {cuda_pointer(t, 'out', restrict, const=False)}"
    return f'extern "C" __global__ void axpy({index} N, float a, {pointers})'


def axpy_element(dtype: str, i: str, ldg: bool = False) -> Callable[[str], str]:
    def read(name: str) -> str:
        return cuda_load_as_float(dtype, f"__ldg(&{name}[{i}])" if ldg else f"{name}[{i}]")

    value = cuda_store_from_float(dtype, f"a * {read('x')} + {read('y')}")
    return lambda pad: f"{pad}out[{i}] = {value};\n"


def axpy_scalar_code(dtype: str, p: dict[str, Any]) -> str:
    body = cuda_cover(axpy_element(dtype, "i", p["ldg"]), "i", p["index"], p["per_thread"], p["grid"], p["access"], "N")
    return f"""{CUDA_HEADER}{per_thread_define(p["per_thread"])}
{axpy_signature(dtype, p["index"], p["restrict"])} {{
{body}}}
"""


def axpy_vector_code(dtype: str, p: dict[str, Any]) -> str:
    """VEC elements per load; with tail "scalar" the first threads take the last N % VEC elements one by one."""
    width = p["vector"]
    vtype = PAIR_TYPES.get((dtype, width), "Pack")
    declaration = "" if vtype != "Pack" else pack_struct(dtype, width)
    if p["math"] == "native":
        prologue = f"    const {vtype} a2 = {PAIR_BROADCAST[dtype]}(a);\n"
        compute = f"        {vtype} r = __hfma2(a2, xv, yv);\n"
    else:
        prologue = ""
        lane = f"a * {cuda_load_as_float(dtype, 'xv.{l}')} + {cuda_load_as_float(dtype, 'yv.{l}')}"
        statement = f"r.{{l}} = {cuda_store_from_float(dtype, lane)};"
        if vtype == "Pack":
            compute = f"        {vtype} r;\n        #pragma unroll\n        for (int k = 0; k < VEC; ++k) {statement.format(l='v[k]')}\n"
        else:
            compute = f"        {vtype} r;\n" + "".join(f"        {statement.format(l=member)}\n" for member in "xyzw"[:width])
    vector_body = (
        f"        {vtype} xv = reinterpret_cast<const {vtype}*>(x)[v];\n"
        f"        {vtype} yv = reinterpret_cast<const {vtype}*>(y)[v];\n" + compute + f"        reinterpret_cast<{vtype}*>(out)[v] = r;\n"
    )
    if p["grid"] == ONE_PASS:
        loop = f"    int v = idx;\n    if (v < nvec) {{\n{vector_body}    }}\n"
    else:
        loop = f"    for (int v = idx; v < nvec; v += blockDim.x * gridDim.x) {{\n{vector_body}    }}\n"
    tail = ""
    if p["tail"] == "scalar":
        tail = f"    if (idx < N % VEC) {{\n        int i = nvec * VEC + idx;\n{axpy_element(dtype, 'i')('        ')}    }}\n"
    return f"""{CUDA_HEADER}#define VEC {width}
{declaration}
{axpy_signature(dtype, "int", p["restrict"])} {{
{prologue}    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int nvec = N / VEC;
{loop}{tail}}}
"""


def _axpy_args(index: str) -> Callable[[Sizes], tuple[Any, ...]]:
    return lambda s: (Scalar("i64" if index == "size_t" else "i32", s["n"]), f32(ALPHA), "x", "y", "out")


def _axpy_scalar_settings(dtype: str) -> list[dict[str, Any]]:
    one_pass = {"block": 256, "per_thread": 1, "grid": ONE_PASS, "access": "coalesced", "restrict": True, "ldg": False, "index": "int"}
    strided = {**one_pass, "grid": "4/SM"}
    if dtype != "f32":  # half types: the main axes only
        return [
            *around(one_pass, block=[1024], per_thread=[4], grid=["4/SM"], restrict=[False], index=["size_t"]),
            *around(strided, grid=["1/SM", "32/SM"], per_thread=[4]),
        ]
    return [
        *around(one_pass, block=[64, 128, 512, 1024], per_thread=[2, 4, 8], grid=["4/SM"], restrict=[False], ldg=[True], index=["size_t"]),
        *around(strided, block=[64, 1024], per_thread=[2, 4, 8], grid=["1/SM", "2/SM", "8/SM", "32/SM"], restrict=[False]),
        # chunked access, and restrict when there are several independent loads to reorder
        {**one_pass, "per_thread": 4, "access": "chunked"},
        {**one_pass, "per_thread": 8, "access": "chunked"},
        {**strided, "per_thread": 4, "access": "chunked"},
        {**one_pass, "per_thread": 4, "restrict": False},
        # far too few blocks, and what more work per thread or bigger blocks do about it
        {**strided, "grid": "1/SM", "block": 64},
        {**strided, "grid": "1/SM", "block": 1024},
        {**strided, "grid": "1/SM", "per_thread": 4},
        {**strided, "grid": "1/SM", "per_thread": 8},
        {**strided, "grid": "32/SM", "block": 64},
    ]


def _axpy_vector_settings(dtype: str) -> list[dict[str, Any]]:
    narrow, wide = AXPY_VECTORS[dtype]
    base = {"vector": wide, "block": 256, "grid": ONE_PASS, "tail": "scalar", "restrict": True, "math": "float"}
    settings = around(
        base, vector=[narrow], block=[128, 1024] if dtype == "f32" else [1024], grid=["4/SM", "1/SM"], tail=["none"], restrict=[False]
    )
    if dtype != "f32":
        settings.append({**base, "vector": narrow, "math": "native"})
    return settings


def axpy_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16", "bf16"):
        for p in _axpy_scalar_settings(dtype):
            launches = lambda s, p=p: [
                Launch(
                    "axpy",
                    grid1(grid_blocks(p["grid"], s["n"], p["block"] * p["per_thread"])),
                    _axpy_args(p["index"])(s),
                    block1(p["block"]),
                )
            ]
            yield Variant(
                "cuda-scalar", "cuda", {"dtype": dtype, **p}, axpy_scalar_code(dtype, p), launches, unsupported=unsupported(dtype)
            )
        for p in _axpy_vector_settings(dtype):
            launches = lambda s, p=p: [
                Launch(
                    "axpy", grid1(grid_blocks(p["grid"], cdiv(s["n"], p["vector"]), p["block"])), _axpy_args("int")(s), block1(p["block"])
                )
            ]
            only = unsupported(dtype) if p["tail"] == "scalar" else unsupported(dtype, divisible("n", p["vector"]))
            yield Variant("cuda-vector", "cuda", {"dtype": dtype, **p}, axpy_vector_code(dtype, p), launches, unsupported=only)
        tile = {"BLOCK": 1024, "num_warps": 4}
        loop = {"BLOCK": 1024, "programs_per_sm": 4, "num_warps": 4}
        if dtype == "f32":
            tiles, persistent = (
                around(tile, BLOCK=[256, 4096, 16384], num_warps=[1, 2, 8]),
                around(loop, BLOCK=[4096], programs_per_sm=[1, 16], num_warps=[8]),
            )
        else:
            tiles, persistent = around(tile, BLOCK=[4096], num_warps=[8]), [loop]
        yield from triton_variants(dtype, "axpy", lambda p, persistent: AXPY_TRITON[persistent], _axpy_triton_args, tiles, persistent)


def _axpy_triton_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "y", "out", i32(sizes["n"]), f32(ALPHA))


AXPY_TRITON_BODY = [
    "mask = offsets < n",
    "x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)",
    "y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)",
    "tl.store(out_ptr + offsets, (a * x + y).to(out_ptr.dtype.element_ty), mask=mask)",
]
AXPY_TRITON = {
    persistent: triton_cover("axpy", "x_ptr, y_ptr, out_ptr, n, a", AXPY_TRITON_BODY, persistent) for persistent in (False, True)
}

AXPY = Op(
    name="axpy",
    bound="memory",
    sizes=AXPY_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],), s["dtype"]), "y": TensorSpec((s["n"],), s["dtype"])},
    outputs=lambda s: {"out": TensorSpec((s["n"],), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"out": torch.add(inputs["y"], inputs["x"], alpha=ALPHA)},
    reference_code=AXPY_REFERENCE,
    variants=axpy_variants,
)

# --- where_select ------------------------------------------------------------------------------------

# mask bytes uniform in [0, mask_span): half of them true, or 15 in 16.
WHERE_SIZES = [
    {"n": 4096, "dtype": "f32", "mask_span": 2},
    {"n": 1_000_003, "dtype": "f32", "mask_span": 2},
    {"n": 1 << 24, "dtype": "f32", "mask_span": 2},
    {"n": 1 << 24, "dtype": "f32", "mask_span": 16},
    {"n": 1 << 20, "dtype": "f16", "mask_span": 2},
    {"n": 1 << 25, "dtype": "f16", "mask_span": 2},
]

WHERE_REFERENCE = """\
def reference(mask, a, b):
    return torch.where(mask.bool(), a, b)
"""


def where_signature(dtype: str, restrict: bool) -> str:
    t = CUDA_TYPES[dtype]
    pointers = ", ".join(
        [
            cuda_pointer("unsigned char", "mask", restrict),
            cuda_pointer(t, "a", restrict),
            cuda_pointer(t, "b", restrict),
            cuda_pointer(t, "out", restrict, const=False),
        ]
    )
    return f'extern "C" __global__ void where_select({pointers}, int n)'


def where_element(dtype: str, select: str) -> Callable[[str], str]:
    """out[idx] from mask[idx]: a ternary, an if/else, or a blend that reads both inputs."""
    if select == "ternary":
        return lambda pad: f"{pad}out[idx] = mask[idx] ? a[idx] : b[idx];\n"
    if select == "branch":
        return lambda pad: f"{pad}if (mask[idx])\n{pad}    out[idx] = a[idx];\n{pad}else\n{pad}    out[idx] = b[idx];\n"
    blend = f"m * {cuda_load_as_float(dtype, 'a[idx]')} + (1.0f - m) * {cuda_load_as_float(dtype, 'b[idx]')}"
    return lambda pad: f"{pad}float m = mask[idx] != 0;\n{pad}out[idx] = {cuda_store_from_float(dtype, blend)};\n"


def where_scalar_code(dtype: str, p: dict[str, Any]) -> str:
    body = cuda_cover(where_element(dtype, p["select"]), "idx", "int", p["per_thread"], p["grid"], "coalesced", "n")
    return f"""{CUDA_HEADER}{per_thread_define(p["per_thread"])}
{where_signature(dtype, p["restrict"])} {{
{body}}}
"""


def where_packed_code(dtype: str, p: dict[str, Any]) -> str:
    """Four consecutive elements per thread (group g = elements 4g..4g+3); the n % 4 tail by the first threads."""
    t = CUDA_TYPES[dtype]
    if p["data_load"] == "vector":
        io = (
            f"__device__ __forceinline__ Pack load4(const {t}* p, int g) {{ return reinterpret_cast<const Pack*>(p)[g]; }}\n"
            f"__device__ __forceinline__ void store4({t}* p, int g, Pack r) {{ reinterpret_cast<Pack*>(p)[g] = r; }}\n"
        )
    else:
        io = (
            f"__device__ __forceinline__ Pack load4(const {t}* p, int g) {{\n    Pack r;\n    #pragma unroll\n"
            f"    for (int k = 0; k < 4; ++k) r.v[k] = p[4 * g + k];\n    return r;\n}}\n"
            f"__device__ __forceinline__ void store4({t}* p, int g, Pack r) {{\n    #pragma unroll\n"
            f"    for (int k = 0; k < 4; ++k) p[4 * g + k] = r.v[k];\n}}\n"
        )
    if p["mask_load"] == "uchar4":
        read_mask = (
            "        uchar4 mv = reinterpret_cast<const uchar4*>(mask)[g];\n        unsigned char m[4] = {mv.x, mv.y, mv.z, mv.w};\n"
        )
    else:
        read_mask = "        unsigned char m[4] = {mask[4 * g], mask[4 * g + 1], mask[4 * g + 2], mask[4 * g + 3]};\n"
    lanes = "#pragma unroll\nfor (int k = 0; k < 4; ++k) r.v[k] = m[k] ? va.v[k] : vb.v[k];\n"
    if p["select"] == "lanes":
        choose = "        Pack va = load4(a, g), vb = load4(b, g), r;\n" + "".join("        " + line + "\n" for line in lanes.splitlines())
    else:
        # skip the pack nobody selects when all four lanes agree
        choose = (
            "        Pack r;\n        if (m[0] && m[1] && m[2] && m[3]) {\n            r = load4(a, g);\n"
            "        } else if (!(m[0] || m[1] || m[2] || m[3])) {\n            r = load4(b, g);\n        } else {\n"
            "            Pack va = load4(a, g), vb = load4(b, g);\n"
            + "".join("            " + line + "\n" for line in lanes.splitlines())
            + "        }\n"
        )
    if p["grid"] == ONE_PASS:
        loop_head = "    int g = idx;\n    if (g < groups) {\n"
    else:
        loop_head = "    for (int g = idx; g < groups; g += blockDim.x * gridDim.x) {\n"
    return f"""{CUDA_HEADER}
{pack_struct(dtype, 4)}
{io}
{where_signature(dtype, p["restrict"])} {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int groups = n / 4;
{loop_head}{read_mask}{choose}        store4(out, g, r);
    }}
    if (idx < n % 4) {{
        int i = groups * 4 + idx;
        out[i] = mask[i] ? a[i] : b[i];
    }}
}}
"""


def _where_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("mask", "a", "b", "out", i32(sizes["n"]))


def _where_scalar_settings(dtype: str) -> list[dict[str, Any]]:
    base = {"block": 256, "per_thread": 1, "grid": ONE_PASS, "select": "ternary", "restrict": True}
    if dtype != "f32":
        return around(base, per_thread=[4], grid=["4/SM"], select=["branch", "blend"], restrict=[False])
    return [
        *around(base, block=[64, 1024], per_thread=[4], grid=["4/SM", "1/SM"], select=["branch", "blend"], restrict=[False]),
        {**base, "select": "branch", "restrict": False},
        {**base, "select": "blend", "restrict": False},
        {**base, "grid": "4/SM", "per_thread": 4},
        {**base, "grid": "1/SM", "per_thread": 4},
    ]


def _where_packed_settings(dtype: str) -> list[dict[str, Any]]:
    base = {"block": 256, "grid": ONE_PASS, "mask_load": "uchar4", "data_load": "vector", "select": "lanes", "restrict": True}
    if dtype != "f32":
        return around(base, mask_load=["bytes"], data_load=["scalar"], select=["skip"])
    return [
        *around(base, block=[128, 1024], grid=["4/SM"], mask_load=["bytes"], data_load=["scalar"], select=["skip"], restrict=[False]),
        {**base, "mask_load": "bytes", "data_load": "scalar"},
        {**base, "mask_load": "bytes", "select": "skip"},
    ]


def where_triton_code(p: dict[str, Any], persistent: bool) -> str:
    if p["loads"] == "both":
        loads = ["a = tl.load(a_ptr + offsets, mask=valid)", "b = tl.load(b_ptr + offsets, mask=valid)"]
    else:  # read each element from the one input it takes
        loads = ["a = tl.load(a_ptr + offsets, mask=valid & take_a)", "b = tl.load(b_ptr + offsets, mask=valid & (m == 0))"]
    body = [
        "valid = offsets < n",
        "m = tl.load(mask_ptr + offsets, mask=valid, other=0)",
        "take_a = m != 0",
        *loads,
        "tl.store(out_ptr + offsets, tl.where(take_a, a, b), mask=valid)",
    ]
    return triton_cover("where_select", "mask_ptr, a_ptr, b_ptr, out_ptr, n", body, persistent)


def where_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        for p in _where_scalar_settings(dtype):
            launches = lambda s, p=p: [
                Launch(
                    "where_select", grid1(grid_blocks(p["grid"], s["n"], p["block"] * p["per_thread"])), _where_args(s), block1(p["block"])
                )
            ]
            yield Variant(
                "cuda-scalar", "cuda", {"dtype": dtype, **p}, where_scalar_code(dtype, p), launches, unsupported=unsupported(dtype)
            )
        for p in _where_packed_settings(dtype):
            launches = lambda s, p=p: [
                Launch("where_select", grid1(grid_blocks(p["grid"], cdiv(s["n"], 4), p["block"])), _where_args(s), block1(p["block"]))
            ]
            yield Variant(
                "cuda-packed", "cuda", {"dtype": dtype, **p}, where_packed_code(dtype, p), launches, unsupported=unsupported(dtype)
            )
        tile = {"BLOCK": 1024, "num_warps": 4, "loads": "both"}
        loop = {"BLOCK": 2048, "programs_per_sm": 4, "num_warps": 4, "loads": "both"}
        if dtype == "f32":
            tiles, persistent = (
                around(tile, BLOCK=[256, 4096], num_warps=[2, 8], loads=["masked"]),
                around(loop, programs_per_sm=[1], loads=["masked"]),
            )
        else:
            tiles, persistent = around(tile, BLOCK=[4096], loads=["masked"]), []
        yield from triton_variants(dtype, "where_select", where_triton_code, _where_args, tiles, persistent)


WHERE_SELECT = Op(
    name="where_select",
    bound="memory",
    sizes=WHERE_SIZES,
    inputs=lambda s: {
        "mask": TensorSpec((s["n"],), "u8", f"randint:0:{s['mask_span']}"),
        "a": TensorSpec((s["n"],), s["dtype"]),
        "b": TensorSpec((s["n"],), s["dtype"]),
    },
    outputs=lambda s: {"out": TensorSpec((s["n"],), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"out": torch.where(inputs["mask"].bool(), inputs["a"], inputs["b"])},
    reference_code=WHERE_REFERENCE,
    variants=where_variants,
)

OPS = [AXPY, WHERE_SELECT]
