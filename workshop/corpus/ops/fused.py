"""Fused elementwise-with-broadcast kernels: bias_gelu, quantize_int8, dequantize_int8, rotary.

bias_gelu (x[M, N] + bias[N], then tanh-GELU) and dequantize_int8 (int8 q[M, N] times a
per-row scale, to fp32 or fp16) share one generator whose axes are how an element finds
its broadcast operand and how threads walk the matrix: a flat index with a modulo or
division per element (full or persistent grid), 16-byte vector packs, a 2D grid (row from
blockIdx.y, no division), several rows per thread reusing a column's bias from a
register, and a column-major walk (uncoalesced, deliberately bad); bias_gelu also comes
unfused (an add-bias launch, then a GELU launch through a scratch tensor) and with the
GELU written as tanhf or as an __expf sigmoid. Triton: flat tiles with a modulo, 2D
tiles, unfused; tile sizes and num_warps.

quantize_int8 (per-row absmax scale, then round-to-nearest-even int8) is a row program of
norm.py's generator: one reduction (max |x|), then an elementwise write to int8 plus the
row's scale, in every row shape that module has (thread/warp/block per row, shared-memory
or register-cached rows, unfused launches).

rotary (rotate-half RoPE on x[T, H, D] with cos/sin[T, D/2]): one thread per rotated
pair with the pair or the head index fastest (coalesced vs strided), vector packs of
pairs, one block per token with cos/sin staged in shared memory or read from global
memory, a block per (token, heads); Triton flat and per-token tiles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from workshop.corpus.ops.norm import NORM_SIZES, Pass, RowProgram, row_variants
from workshop.corpus.ops.rowkit import (
    ELEMENT_BYTES,
    THREADS_PER_SM,
    TRITON_HEADER,
    divisible,
    resident_blocks,
    unsupported,
    vector_width,
)
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


def load_float(dtype: str, expr: str) -> str:
    return f"(float){expr}" if dtype == "i8" else cuda_load_as_float(dtype, expr)


def _pack(name: str, dtype: str, width: int) -> str:
    return f"struct __align__({width * ELEMENT_BYTES[dtype]}) {name} {{ {CUDA_TYPES[dtype]} v[{width}]; }};\n"


# --- elementwise with a broadcast operand ------------------------------------------------------------


@dataclass(frozen=True)
class Broadcast:
    """y = f(x, b) over [M, N], b a vector broadcast along rows (per column) or columns (per row)."""

    op: str
    dtype: str  # of x
    out_dtype: str
    vec: str  # the broadcast operand's name
    vec_dtype: str
    per: str  # "col": b[col] | "row": b[row]
    out: str  # C: y as a float expression of floats v, b (and what `pre` defines)
    triton_body: str  # Triton: statements from tiles v, b to tile y
    pre: tuple[str, ...] = ()  # C statements before `out`

    def signature(self) -> str:
        return (
            f'extern "C" __global__ void {self.op}(const {CUDA_TYPES[self.dtype]}* __restrict__ x, '
            f"const {CUDA_TYPES[self.vec_dtype]}* __restrict__ {self.vec}, {CUDA_TYPES[self.out_dtype]}* __restrict__ y, int m, int n)"
        )

    def width(self) -> int:
        return vector_width(self.dtype)

    def packs(self, vector: int) -> str:
        """Pack (x), BPack (per-column b, when its type differs) and OutPack (y, when its type differs)."""
        if vector == 1:
            return ""
        text = _pack("Pack", self.dtype, vector)
        if self.per == "col" and self.vec_dtype != self.dtype:
            text += _pack("BPack", self.vec_dtype, vector)
        if self.out_dtype != self.dtype:
            text += _pack("OutPack", self.out_dtype, vector)
        return text

    def element(self, vector: int, index: str, col: str, row: str, pad: str) -> str:
        """Statements computing y at element (vector == 1) or pack `index` of column (pack) `col` in row `row`."""
        load = load_float
        broadcast = f"{self.vec}[{col if self.per == 'col' else row}]"
        store = cuda_store_from_float(self.out_dtype, self.out)
        if vector == 1:
            lines = [
                f"float v = {load(self.dtype, f'x[{index}]')};",
                f"float b = {load(self.vec_dtype, broadcast)};",
                *self.pre,
                f"y[{index}] = {store};",
            ]
            return "".join(f"{pad}{line}\n" for line in lines)
        bpack = "Pack" if self.vec_dtype == self.dtype else "BPack"
        opack = "Pack" if self.out_dtype == self.dtype else "OutPack"
        per_element = [f"float v = {load(self.dtype, 'p.v[k]')};"]
        if self.per == "col":
            fetch = f"{bpack} bp = reinterpret_cast<const {bpack}*>({self.vec})[{col}];"
            per_element.append(f"float b = {load(self.vec_dtype, 'bp.v[k]')};")
        else:
            fetch = f"float b = {load(self.vec_dtype, broadcast)};"
        lines = [
            f"Pack p = reinterpret_cast<const Pack*>(x)[{index}];",
            fetch,
            f"{opack} o;",
            "#pragma unroll",
            f"for (int k = 0; k < {vector}; ++k) {{",
            *(f"    {line}" for line in [*per_element, *self.pre, f"o.v[k] = {store};"]),
            "}",
            f"reinterpret_cast<{opack}*>(y)[{index}] = o;",
        ]
        return "".join(f"{pad}{line}\n" for line in lines)

    def flat_index(self, vector: int) -> tuple[str, str]:
        """(column, row) of flat index i: only the one the broadcast needs."""
        per_row = "n" if vector == 1 else f"(n / {vector})"
        return (f"i % {per_row}", "") if self.per == "col" else ("", f"i / {per_row}")


def _prelude(bc: Broadcast, defines: dict[str, int], vector: int) -> str:
    lines = "".join(f"#define {name} {value}\n" for name, value in defines.items())
    return f"{CUDA_HEADER}\n{lines}{bc.packs(vector)}"


def flat_code(bc: Broadcast, block: int, vector: int) -> str:
    col, row = bc.flat_index(vector)
    count = "m * n" if vector == 1 else f"m * n / {vector}"
    what = "one element" if vector == 1 else f"{vector} elements"
    return f"""{_prelude(bc, {"BLOCK": block}, vector)}
// flat grid-stride loop, {what} per step; the broadcast index from a {"modulo" if bc.per == "col" else "division"}
{bc.signature()} {{
    for (int i = blockIdx.x * BLOCK + threadIdx.x; i < {count}; i += gridDim.x * BLOCK) {{
{bc.element(vector, "i", col, row, "        ")}    }}
}}
"""


def grid2d_code(bc: Broadcast, block: int, vector: int) -> str:
    per_row = "n" if vector == 1 else f"n / {vector}"
    return f"""{_prelude(bc, {"BLOCK": block}, vector)}
// grid (column blocks, rows): no division per element
{bc.signature()} {{
    int row = blockIdx.y;
    int j = blockIdx.x * BLOCK + threadIdx.x;
    if (j >= {per_row}) return;
    int i = row * ({per_row}) + j;
{bc.element(vector, "i", "j", "row", "    ")}}}
"""


def rows_per_thread_code(bc: Broadcast, rows: int, vector: int) -> str:
    per_row = "n" if vector == 1 else f"n / {vector}"
    return f"""{_prelude(bc, {"BLOCK": 256, "ROWS": rows}, vector)}
// grid (column blocks, row groups): each thread walks ROWS rows of its column
{bc.signature()} {{
    int j = blockIdx.x * BLOCK + threadIdx.x;
    if (j >= {per_row}) return;
    for (int r = 0; r < ROWS; ++r) {{
        int row = blockIdx.y * ROWS + r;
        if (row >= m) return;
        int i = row * ({per_row}) + j;
{bc.element(vector, "i", "j", "row", "        ")}    }}
}}
"""


def column_major_code(bc: Broadcast, block: int) -> str:
    return f"""{_prelude(bc, {"BLOCK": block}, 1)}
// consecutive threads walk down a column: every access is n elements from its neighbour's
{bc.signature()} {{
    int t = blockIdx.x * BLOCK + threadIdx.x;
    if (t >= m * n) return;
    int row = t % m, col = t / m;
    int i = row * n + col;
{bc.element(1, "i", "col", "row", "    ")}}}
"""


def unfused_bias_gelu_code(dtype: str, block: int, vector: int) -> str:
    """Two launches through scratch t: t = x + bias, then y = gelu(t)."""
    t = CUDA_TYPES[dtype]
    count = "m * n" if vector == 1 else f"m * n / {vector}"
    load = lambda e: load_float(dtype, e)  # noqa: E731
    store = lambda e: cuda_store_from_float(dtype, e)  # noqa: E731
    gelu = store(GELU_TANH.format(u="u"))
    if vector == 1:
        add = f"    t[i] = {store(load('x[i]') + ' + ' + load('bias[i % n]'))};\n"
        act = f"    float u = {load('t[i]')};\n    y[i] = {gelu};\n"
    else:
        total = store(load("p.v[k]") + " + " + load("bp.v[k]"))
        add = f"""    Pack p = reinterpret_cast<const Pack*>(x)[i];
    Pack bp = reinterpret_cast<const Pack*>(bias)[i % (n / {vector})];
    #pragma unroll
    for (int k = 0; k < {vector}; ++k) p.v[k] = {total};
    reinterpret_cast<Pack*>(t)[i] = p;
"""
        act = f"""    Pack p = reinterpret_cast<const Pack*>(t)[i];
    #pragma unroll
    for (int k = 0; k < {vector}; ++k) {{
        float u = {load("p.v[k]")};
        p.v[k] = {gelu};
    }}
    reinterpret_cast<Pack*>(y)[i] = p;
"""
    return f"""{CUDA_HEADER}
#define BLOCK {block}
{_pack("Pack", dtype, vector) if vector > 1 else ""}
// unfused: the biased tensor goes through memory between two launches
extern "C" __global__ void add_bias(const {t}* __restrict__ x, const {t}* __restrict__ bias, {t}* __restrict__ t, int m, int n) {{
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i >= {count}) return;
{add}}}

extern "C" __global__ void gelu(const {t}* __restrict__ t, {t}* __restrict__ y, int m, int n) {{
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i >= {count}) return;
{act}}}
"""


def triton_flat(bc: Broadcast) -> str:
    index = "offsets % n" if bc.per == "col" else "offsets // n"
    return f"""{TRITON_HEADER}

@triton.jit
def {bc.op}(x_ptr, {bc.vec}_ptr, y_ptr, m, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < m * n
    v = tl.load(x_ptr + offsets, mask=mask, other=0).to(tl.float32)
    b = tl.load({bc.vec}_ptr + {index}, mask=mask, other=0).to(tl.float32)
{_triton_out(bc, "offsets")}"""


def triton_2d(bc: Broadcast) -> str:
    b = (
        f"tl.load({bc.vec}_ptr + cols, mask=cols < n, other=0)"
        if bc.per == "col"
        else f"tl.load({bc.vec}_ptr + rows, mask=rows < m, other=0)"
    )
    return f"""{TRITON_HEADER}

@triton.jit
def {bc.op}(x_ptr, {bc.vec}_ptr, y_ptr, m, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < m) & (cols < n)
    v = tl.load(x_ptr + rows * n + cols, mask=mask, other=0).to(tl.float32)
    b = {b}.to(tl.float32)
{_triton_out(bc, "rows * n + cols")}"""


def _triton_out(bc: Broadcast, offsets: str) -> str:
    return f"""{bc.triton_body}    tl.store(y_ptr + {offsets}, y.to(y_ptr.dtype.element_ty), mask=mask)
"""


TRITON_GELU = """    inner = 0.7978845608 * (u + 0.044715 * u * u * u)
    y = 0.5 * u * (1.0 + (2.0 * tl.sigmoid(2.0 * inner) - 1.0))
"""


def triton_unfused_bias_gelu() -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def add_bias(x_ptr, bias_ptr, t_ptr, m, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < m * n
    v = tl.load(x_ptr + offsets, mask=mask, other=0).to(tl.float32)
    b = tl.load(bias_ptr + offsets % n, mask=mask, other=0).to(tl.float32)
    tl.store(t_ptr + offsets, (v + b).to(t_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gelu(t_ptr, y_ptr, m, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < m * n
    u = tl.load(t_ptr + offsets, mask=mask, other=0).to(tl.float32)
{TRITON_GELU}    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
"""


GELU_TANH = "0.5f * {u} * (1.0f + tanhf(0.7978845608f * ({u} + 0.044715f * {u} * {u} * {u})))"
GELU_SIGMOID = "{u} / (1.0f + __expf(-1.5957691216f * ({u} + 0.044715f * {u} * {u} * {u})))"  # x * sigmoid(2k)


def bias_gelu_program(dtype: str, math: str = "tanhf") -> Broadcast:
    form = GELU_TANH if math == "tanhf" else GELU_SIGMOID
    return Broadcast(
        "bias_gelu", dtype, dtype, "bias", dtype, "col", form.format(u="u"), "    u = v + b\n" + TRITON_GELU, pre=("float u = v + b;",)
    )


def dequantize_program(out_dtype: str) -> Broadcast:
    return Broadcast("dequantize_int8", "i8", out_dtype, "scale", "f32", "row", "v * b", "    y = v * b\n")


def _bc_launch(bc: Broadcast, kernel: str, grid: tuple[int, int, int], block: int, sizes: Sizes) -> Launch:
    return Launch(kernel, grid, ("x", bc.vec, "y", i32(sizes["m"]), i32(sizes["n"])), block1(block))


def broadcast_variants(make: Callable[..., Broadcast], dtypes: dict[str, bool], gelu_axes: bool) -> Iterable[Variant]:
    """`dtypes`: dtype → whether it gets every family (else a sample)."""
    for dtype, full in dtypes.items():
        yield from _broadcast_variants(make, dtype, full, gelu_axes)


def _broadcast_variants(make: Callable[..., Broadcast], dtype: str, full: bool, gelu_axes: bool) -> Iterable[Variant]:
    bc = make(dtype)
    width = bc.width()
    vec_ok = divisible("n", width)
    only = unsupported(dtype)
    blocks = [128, 256, 512, 1024] if full else [256, 1024]
    for p in product({"block": blocks, "grid": ["full", "persistent"] if full else ["full"], "vector": [1]}):

        def launches(s: Sizes, p: dict[str, Any] = p) -> list[Launch]:
            blocks_needed = cdiv(s["m"] * s["n"], p["block"])
            grid = resident_blocks(blocks_needed, THREADS_PER_SM // p["block"]) if p["grid"] == "persistent" else blocks_needed
            return [_bc_launch(bc, bc.op, grid1(grid), p["block"], s)]

        yield Variant("cuda-flat", "cuda", {"dtype": dtype, **p}, flat_code(bc, p["block"], 1), launches, unsupported=only)
    for block in [128, 256, 512] if full else [256]:
        yield Variant(
            "cuda-flat-vector",
            "cuda",
            {"dtype": dtype, "block": block, "vector": width},
            flat_code(bc, block, width),
            lambda s, b=block: [_bc_launch(bc, bc.op, grid1(cdiv(s["m"] * s["n"] // width, b)), b, s)],
            unsupported=unsupported(dtype, vec_ok),
        )
    maths = ["tanhf", "sigmoid"] if gelu_axes and full else (["tanhf"] if gelu_axes else [None])
    for p in product({"block": [128, 256, 512] if full else [256], "vector": [1, width], "math": maths}):
        code = grid2d_code(make(dtype, p["math"]) if p["math"] else bc, p["block"], p["vector"])
        params = p if gelu_axes else {k: v for k, v in p.items() if k != "math"}
        yield Variant(
            "cuda-grid-2d",
            "cuda",
            {"dtype": dtype, **params},
            code,
            lambda s, p=p: [_bc_launch(bc, bc.op, (cdiv(s["n"] // p["vector"], p["block"]), s["m"], 1), p["block"], s)],
            unsupported=unsupported(dtype, divisible("n", p["vector"])),
        )
    if full:
        for rows in (4, 16, 64):
            yield Variant(
                "cuda-rows-per-thread",
                "cuda",
                {"dtype": dtype, "rows": rows, "block": 256, "vector": width},
                rows_per_thread_code(bc, rows, width),
                lambda s, r=rows: [_bc_launch(bc, bc.op, (cdiv(s["n"] // width, 256), cdiv(s["m"], r), 1), 256, s)],
                unsupported=unsupported(dtype, vec_ok),
            )
        for block in (256, 1024):
            yield Variant(
                "cuda-column-major",
                "cuda",
                {"dtype": dtype, "block": block},
                column_major_code(bc, block),
                lambda s, b=block: [_bc_launch(bc, bc.op, grid1(cdiv(s["m"] * s["n"], b)), b, s)],
                unsupported=only,
            )
    if gelu_axes:
        for p in product({"block": [256, 1024] if full else [256], "vector": [1, width] if full else [width]}):

            def launches(s: Sizes, p: dict[str, Any] = p) -> list[Launch]:
                m, n = s["m"], s["n"]
                grid = grid1(cdiv(m * n // p["vector"], p["block"]))
                return [
                    Launch("add_bias", grid, ("x", "bias", "t", i32(m), i32(n)), block1(p["block"])),
                    Launch("gelu", grid, ("t", "y", i32(m), i32(n)), block1(p["block"])),
                ]

            yield Variant(
                "cuda-unfused",
                "cuda",
                {"dtype": dtype, **p},
                unfused_bias_gelu_code(dtype, p["block"], p["vector"]),
                launches,
                scratch=lambda s: {"t": TensorSpec((s["m"], s["n"]), dtype)},
                unsupported=unsupported(dtype, divisible("n", p["vector"])),
            )
    yield from _broadcast_triton(bc, dtype, full, gelu_axes)


def _broadcast_triton(bc: Broadcast, dtype: str, full: bool, gelu_axes: bool) -> Iterable[Variant]:
    only = unsupported(dtype)
    for p in product({"BLOCK": [1024, 4096] if full else [4096], "num_warps": [4, 8]}):
        yield Variant(
            "triton-flat",
            "triton",
            {"dtype": dtype, **p},
            triton_flat(bc),
            lambda s, p=p: [
                Launch(
                    bc.op,
                    grid1(cdiv(s["m"] * s["n"], p["BLOCK"])),
                    ("x", bc.vec, "y", i32(s["m"]), i32(s["n"])),
                    constexprs={"BLOCK": p["BLOCK"]},
                    num_warps=p["num_warps"],
                )
            ],
            unsupported=only,
        )
    tiles = [(1, 1024), (8, 256), (8, 1024), (32, 256)] if full else [(8, 1024), (32, 256)]
    for (bm, bn), warps in [(tile, warps) for tile in tiles for warps in (4, 8)]:
        yield Variant(
            "triton-2d",
            "triton",
            {"dtype": dtype, "BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps},
            triton_2d(bc),
            lambda s, bm=bm, bn=bn, w=warps: [
                Launch(
                    bc.op,
                    (cdiv(s["m"], bm), cdiv(s["n"], bn), 1),
                    ("x", bc.vec, "y", i32(s["m"]), i32(s["n"])),
                    constexprs={"BLOCK_M": bm, "BLOCK_N": bn},
                    num_warps=w,
                )
            ],
            unsupported=only,
        )
    if gelu_axes:
        for block in [1024, 4096] if full else [4096]:

            def launches(s: Sizes, block: int = block) -> list[Launch]:
                m, n = s["m"], s["n"]
                grid = grid1(cdiv(m * n, block))
                return [
                    Launch("add_bias", grid, ("x", "bias", "t", i32(m), i32(n)), constexprs={"BLOCK": block}, num_warps=4),
                    Launch("gelu", grid, ("t", "y", i32(m), i32(n)), constexprs={"BLOCK": block}, num_warps=4),
                ]

            yield Variant(
                "triton-unfused",
                "triton",
                {"dtype": dtype, "BLOCK": block, "num_warps": 4},
                triton_unfused_bias_gelu(),
                launches,
                scratch=lambda s: {"t": TensorSpec((s["m"], s["n"]), dtype)},
                unsupported=only,
            )


# --- quantize_int8: a row program of norm.py --------------------------------------------------------


def quantize_program(dtype: str) -> RowProgram:
    """scale = max|x| * (1/127) per row; q = round-half-even(x / scale), clamped (an IEEE division, as torch's)."""
    return RowProgram(
        "quantize_int8",
        dtype,
        (
            Pass(
                "amax", "max", "fabsf(v)", "float scale = amax * (1.0f / 127.0f);", ("scale",), "tl.abs(v)", "scale = amax * (1.0 / 127.0)"
            ),
        ),
        "signed char* __restrict__ q, float* __restrict__ scales",
        ("q", "scales"),
        "q_ptr, scales_ptr",
        False,
        write=lambda c: "fminf(fmaxf(rintf(v / scale), -127.0f), 127.0f)",
        triton_write="tl.clamp(libdevice.rint(tl.math.div_rn(v, scale)), -127.0, 127.0)",
        finish="scales[row] = scale;",
        triton_finish=lambda row, mask: f"tl.store(scales_ptr + {row}, scale{', mask=' + mask if mask else ''})",
        out="q",
        out_dtype="i8",
        triton_imports="from triton.language.extra import libdevice\n",
    )


def _quantize_reference(torch: Any, x: Any) -> dict[str, Any]:
    # times the fp32 reciprocal, as torch computes `/ 127` on the GPU: the kernels must agree bit for bit
    scale = x.abs().amax(dim=1, keepdim=True) * (1 / 127)
    return {"q": torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8), "scales": scale.squeeze(1)}


# --- rotary ----------------------------------------------------------------------------------------------


def _rotate(dtype: str, x1: str, x2: str, c: str, s: str) -> tuple[str, str]:
    """The rotated pair as stored values."""
    return cuda_store_from_float(dtype, f"{x1} * {c} - {x2} * {s}"), cuda_store_from_float(dtype, f"{x2} * {c} + {x1} * {s}")


ROTARY_SIGNATURE = "const {t}* __restrict__ x, const float* __restrict__ cos, const float* __restrict__ sin, {t}* __restrict__ y, int tokens, int heads, int d"


def rotary_pair_code(dtype: str, block: int, order: str) -> str:
    t = CUDA_TYPES[dtype]
    load = lambda e: cuda_load_as_float(dtype, e)  # noqa: E731
    lo, hi = _rotate(dtype, "x1", "x2", "c", "s")
    if order == "pair":
        index = "    int i = p % half;          // pair within the head: fastest, so accesses coalesce\n    int th = p / half;         // token * heads + head\n"
    else:
        index = (
            "    int h = p % heads;         // head fastest: neighbours are d elements apart\n    int i = (p / heads) % half;\n"
            "    int th = (p / (heads * half)) * heads + h;\n"
        )
    return f"""{CUDA_HEADER}
#define BLOCK {block}

// one thread per rotated pair (x[i], x[i + d/2]) of one head of one token
extern "C" __global__ void rotary({ROTARY_SIGNATURE.format(t=t)}) {{
    int half = d / 2;
    int p = blockIdx.x * BLOCK + threadIdx.x;
    if (p >= tokens * heads * half) return;
{index}    int token = th / heads;
    const {t}* row = x + (size_t)th * d;
    float x1 = {load("row[i]")}, x2 = {load("row[i + half]")};
    float c = cos[token * half + i], s = sin[token * half + i];
    y[(size_t)th * d + i] = {lo};
    y[(size_t)th * d + i + half] = {hi};
}}
"""


def rotary_vector_code(dtype: str, block: int) -> str:
    t = CUDA_TYPES[dtype]
    w = vector_width(dtype)
    load = lambda e: cuda_load_as_float(dtype, e)  # noqa: E731
    lo, hi = _rotate(dtype, load("a.v[k]"), load("b.v[k]"), "c.v[k]", "s.v[k]")
    return f"""{CUDA_HEADER}
#define BLOCK {block}

{_pack("Pack", dtype, w)}{_pack("Floats", "f32", w) if dtype != "f32" else ""}
// one thread per {w} consecutive pairs: 16-byte loads of both halves, cos and sin
extern "C" __global__ void rotary({ROTARY_SIGNATURE.format(t=t)}) {{
    int packs = d / 2 / {w};  // per head
    int p = blockIdx.x * BLOCK + threadIdx.x;
    if (p >= tokens * heads * packs) return;
    int i = p % packs, th = p / packs, token = th / heads;
    const Pack* row = reinterpret_cast<const Pack*>(x + (size_t)th * d);
    Pack* out = reinterpret_cast<Pack*>(y + (size_t)th * d);
    Pack a = row[i], b = row[i + packs], lo, hi;
    {"Pack" if dtype == "f32" else "Floats"} c = reinterpret_cast<const {"Pack" if dtype == "f32" else "Floats"}*>(cos)[token * packs + i];
    {"Pack" if dtype == "f32" else "Floats"} s = reinterpret_cast<const {"Pack" if dtype == "f32" else "Floats"}*>(sin)[token * packs + i];
    #pragma unroll
    for (int k = 0; k < {w}; ++k) {{
        lo.v[k] = {lo};
        hi.v[k] = {hi};
    }}
    out[i] = lo;
    out[i + packs] = hi;
}}
"""


def rotary_token_code(dtype: str, block: int, staged: bool) -> str:
    t = CUDA_TYPES[dtype]
    load = lambda e: cuda_load_as_float(dtype, e)  # noqa: E731
    lo, hi = _rotate(dtype, "x1", "x2", "c", "s")
    if staged:
        stage = """    extern __shared__ float table[];  // cos then sin of this token
    for (int i = threadIdx.x; i < half; i += BLOCK) {
        table[i] = cos[(size_t)token * half + i];
        table[half + i] = sin[(size_t)token * half + i];
    }
    __syncthreads();
"""
        c, s = "table[i]", "table[half + i]"
    else:
        stage, c, s = "", "cos[(size_t)token * half + i]", "sin[(size_t)token * half + i]"
    return f"""{CUDA_HEADER}
#define BLOCK {block}

// one block per token; its cos/sin {"staged in shared memory" if staged else "read from global memory (cached)"} and reused by every head
extern "C" __global__ void rotary({ROTARY_SIGNATURE.format(t=t)}) {{
    int half = d / 2;
    int token = blockIdx.x;
{stage}    for (int p = threadIdx.x; p < heads * half; p += BLOCK) {{
        int h = p / half, i = p % half;
        size_t base = ((size_t)token * heads + h) * d;
        float x1 = {load("x[base + i]")}, x2 = {load("x[base + i + half]")};
        float c = {c}, s = {s};
        y[base + i] = {lo};
        y[base + i + half] = {hi};
    }}
}}
"""


def rotary_heads_code(dtype: str, heads_per_block: int) -> str:
    t = CUDA_TYPES[dtype]
    load = lambda e: cuda_load_as_float(dtype, e)  # noqa: E731
    lo, hi = _rotate(dtype, "x1", "x2", "c", "s")
    return f"""{CUDA_HEADER}
#define HEADS {heads_per_block}

// grid (head groups, tokens), block (d/2, HEADS): one thread per pair, no index division
extern "C" __global__ void rotary({ROTARY_SIGNATURE.format(t=t)}) {{
    int half = d / 2;
    int i = threadIdx.x, h = blockIdx.x * HEADS + threadIdx.y, token = blockIdx.y;
    if (h >= heads) return;
    size_t base = ((size_t)token * heads + h) * d;
    float x1 = {load("x[base + i]")}, x2 = {load("x[base + i + half]")};
    float c = cos[token * half + i], s = sin[token * half + i];
    y[base + i] = {lo};
    y[base + i + half] = {hi};
}}
"""


def triton_rotary_flat() -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def rotary(x_ptr, cos_ptr, sin_ptr, y_ptr, tokens, heads, d, BLOCK: tl.constexpr):
    # flat over pairs: pair, head and token from divisions
    half = d // 2
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = p < tokens * heads * half
    i = p % half
    th = p // half
    token = th // heads
    x1 = tl.load(x_ptr + th * d + i, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + th * d + i + half, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + token * half + i, mask=mask, other=0.0)
    s = tl.load(sin_ptr + token * half + i, mask=mask, other=0.0)
    tl.store(y_ptr + th * d + i, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + th * d + i + half, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=mask)
"""


def triton_rotary_token() -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def rotary(x_ptr, cos_ptr, sin_ptr, y_ptr, tokens, heads, d, BLOCK_H: tl.constexpr, HALF: tl.constexpr):
    # program (token, head group): a [BLOCK_H, HALF] tile, cos/sin loaded once per token
    token = tl.program_id(0)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)[:, None]
    i = tl.arange(0, HALF)[None, :]
    mask = h < heads
    base = (token * heads + h) * d
    x1 = tl.load(x_ptr + base + i, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + base + i + HALF, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + token * HALF + i)
    s = tl.load(sin_ptr + token * HALF + i)
    tl.store(y_ptr + base + i, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + base + i + HALF, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=mask)
"""


ROTARY_ARGS = ("x", "cos", "sin", "y")


def _rotary_args(sizes: Sizes) -> tuple[Any, ...]:
    return (*ROTARY_ARGS, i32(sizes["t"]), i32(sizes["h"]), i32(sizes["d"]))


def _pairs(sizes: Sizes) -> int:
    return sizes["t"] * sizes["h"] * sizes["d"] // 2


def rotary_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16", "bf16"):
        yield from _rotary_variants(dtype)


def _rotary_variants(dtype: str) -> Iterable[Variant]:
    only = unsupported(dtype)
    w = vector_width(dtype)
    combos = [{"block": b, "order": "pair"} for b in (128, 256, 512, 1024)] + [{"block": b, "order": "head"} for b in (256, 1024)]
    for p in combos:
        yield Variant(
            "cuda-thread-per-pair",
            "cuda",
            {"dtype": dtype, **p},
            rotary_pair_code(dtype, p["block"], p["order"]),
            lambda s, b=p["block"]: [Launch("rotary", grid1(cdiv(_pairs(s), b)), _rotary_args(s), block1(b))],
            unsupported=only,
        )
    for block in (64, 128, 256):
        yield Variant(
            "cuda-vector-pairs",
            "cuda",
            {"dtype": dtype, "block": block, "vector": w},
            rotary_vector_code(dtype, block),
            lambda s, b=block: [Launch("rotary", grid1(cdiv(_pairs(s) // w, b)), _rotary_args(s), block1(b))],
            unsupported=unsupported(dtype, lambda s: None if (s["d"] // 2) % w == 0 else f"d/2 not a multiple of {w}"),
        )
    for p in product({"block": [128, 256, 512], "staged": [False, True]}):
        yield Variant(
            "cuda-block-per-token",
            "cuda",
            {"dtype": dtype, **p},
            rotary_token_code(dtype, p["block"], p["staged"]),
            lambda s, p=p: [
                Launch("rotary", grid1(s["t"]), _rotary_args(s), block1(p["block"]), shared_bytes=4 * s["d"] if p["staged"] else 0)
            ],
            unsupported=only,
        )
    for heads in (1, 4):
        yield Variant(
            "cuda-heads-per-block",
            "cuda",
            {"dtype": dtype, "heads": heads},
            rotary_heads_code(dtype, heads),
            lambda s, k=heads: [Launch("rotary", (cdiv(s["h"], k), s["t"], 1), _rotary_args(s), (s["d"] // 2, k, 1))],
            unsupported=only,
        )
    for p in product({"BLOCK": [256, 1024, 4096], "num_warps": [4, 8]}):
        yield Variant(
            "triton-flat",
            "triton",
            {"dtype": dtype, **p},
            triton_rotary_flat(),
            lambda s, p=p: [
                Launch(
                    "rotary",
                    grid1(cdiv(_pairs(s), p["BLOCK"])),
                    _rotary_args(s),
                    constexprs={"BLOCK": p["BLOCK"]},
                    num_warps=p["num_warps"],
                )
            ],
            unsupported=only,
        )
    for p in product({"BLOCK_H": [1, 4, 16], "num_warps": [1, 2, 4]}):
        yield Variant(
            "triton-per-token",
            "triton",
            {"dtype": dtype, **p},
            triton_rotary_token(),
            lambda s, p=p: [
                Launch(
                    "rotary",
                    (s["t"], cdiv(s["h"], p["BLOCK_H"]), 1),
                    _rotary_args(s),
                    constexprs={"BLOCK_H": p["BLOCK_H"], "HALF": s["d"] // 2},
                    num_warps=p["num_warps"],
                )
            ],
            unsupported=only,
        )


def _rotary_reference(torch: Any, x: Any, cos: Any, sin: Any) -> Any:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


# --- operations ------------------------------------------------------------------------------------------

BIAS_GELU_SIZES = [
    {"m": 64, "n": 1024, "dtype": "f32"},
    {"m": 2048, "n": 4096, "dtype": "f32"},
    {"m": 32768, "n": 1024, "dtype": "f32"},
    {"m": 8192, "n": 8192, "dtype": "f32"},
    {"m": 8192, "n": 8192, "dtype": "f16"},
    {"m": 8192, "n": 8192, "dtype": "bf16"},
]
QUANT_SIZES = [sizes for sizes in NORM_SIZES if sizes["dtype"] == "f32"]
# The problem's dtype is the dequantized output's.
DEQUANT_SIZES = [
    {"m": 64, "n": 1024, "dtype": "f32"},
    {"m": 4096, "n": 4096, "dtype": "f32"},
    {"m": 32768, "n": 1024, "dtype": "f32"},
    {"m": 8192, "n": 8192, "dtype": "f32"},
    {"m": 64, "n": 1024, "dtype": "f16"},
    {"m": 4096, "n": 4096, "dtype": "f16"},
    {"m": 8192, "n": 8192, "dtype": "f16"},
]
ROTARY_SIZES = [
    {"t": 16, "h": 8, "d": 64, "dtype": "f32"},
    {"t": 1024, "h": 32, "d": 128, "dtype": "f32"},
    {"t": 32768, "h": 8, "d": 64, "dtype": "f32"},
    {"t": 8192, "h": 32, "d": 128, "dtype": "f32"},
    {"t": 1024, "h": 32, "d": 128, "dtype": "f16"},
    {"t": 8192, "h": 32, "d": 128, "dtype": "f16"},
    {"t": 8192, "h": 32, "d": 128, "dtype": "bf16"},
]

OPS = [
    Op(
        name="bias_gelu",
        bound="memory",
        sizes=BIAS_GELU_SIZES,
        inputs=lambda s: {"x": TensorSpec((s["m"], s["n"]), s["dtype"]), "bias": TensorSpec((s["n"],), s["dtype"])},
        outputs=lambda s: {"y": TensorSpec((s["m"], s["n"]), s["dtype"])},
        reference=lambda torch, inputs, sizes: {"y": torch.nn.functional.gelu(inputs["x"] + inputs["bias"], approximate="tanh")},
        reference_code='def reference(x, bias):\n    return torch.nn.functional.gelu(x + bias, approximate="tanh")\n',
        variants=lambda: broadcast_variants(bias_gelu_program, {"f32": True, "f16": False, "bf16": False}, gelu_axes=True),
        tolerance={"f32": 1e-4, "f16": 1e-2, "bf16": 2e-2},
    ),
    Op(
        name="quantize_int8",
        bound="memory",
        sizes=QUANT_SIZES,
        inputs=lambda s: {"x": TensorSpec((s["m"], s["n"]), "f32")},
        outputs=lambda s: {"q": TensorSpec((s["m"], s["n"]), "i8"), "scales": TensorSpec((s["m"],), "f32")},
        reference=lambda torch, inputs, sizes: _quantize_reference(torch, inputs["x"]),
        reference_code=(
            "def reference(x):\n    scale = x.abs().amax(dim=1, keepdim=True) * (1 / 127)\n"
            "    return torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8), scale.squeeze(1)\n"
        ),
        variants=lambda: row_variants(quantize_program, QUANT_SIZES, online=False),
    ),
    Op(
        name="dequantize_int8",
        bound="memory",
        sizes=DEQUANT_SIZES,
        inputs=lambda s: {"x": TensorSpec((s["m"], s["n"]), "i8", "randint:-127:128"), "scale": TensorSpec((s["m"],), "f32", "rand")},
        outputs=lambda s: {"y": TensorSpec((s["m"], s["n"]), s["dtype"])},
        reference=lambda torch, inputs, sizes: {
            "y": (inputs["x"].float() * inputs["scale"][:, None]).to(getattr(torch, {"f32": "float32", "f16": "float16"}[sizes["dtype"]]))
        },
        reference_code="def reference(x, scale, dtype):\n    return (x.float() * scale[:, None]).to(dtype)\n",
        variants=lambda: broadcast_variants(dequantize_program, {"f32": True, "f16": True}, gelu_axes=False),
    ),
    Op(
        name="rotary",
        bound="memory",
        sizes=ROTARY_SIZES,
        inputs=lambda s: {
            "x": TensorSpec((s["t"], s["h"], s["d"]), s["dtype"]),
            "cos": TensorSpec((s["t"], s["d"] // 2), "f32", "rand"),
            "sin": TensorSpec((s["t"], s["d"] // 2), "f32", "rand"),
        },
        outputs=lambda s: {"y": TensorSpec((s["t"], s["h"], s["d"]), s["dtype"])},
        reference=lambda torch, inputs, sizes: {"y": _rotary_reference(torch, inputs["x"], inputs["cos"], inputs["sin"])},
        reference_code=(
            "def reference(x, cos, sin):\n    half = x.shape[-1] // 2\n    x1, x2 = x[..., :half].float(), x[..., half:].float()\n"
            "    c, s = cos[:, None, :], sin[:, None, :]\n    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)\n"
        ),
        variants=rotary_variants,
    ),
]
