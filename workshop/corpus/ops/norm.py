"""Row-wise normalizations: softmax, layernorm, rmsnorm, cross_entropy (per-row loss).

Each operation is a short row program: reductions in order (max, sum of exponentials;
mean, squared deviation; mean square), row scalars derived after each, then an
elementwise write (or, for cross-entropy, one value per row). One generator turns a
program into every kernel shape, so families differ only in what matters for speed:

CUDA: which threads own a row (one thread: serial and uncoalesced; one warp: shuffles;
one block: shuffle / shared-memory tree reductions), where the row lives between passes
(re-read from global memory, cached in dynamic shared memory: an occupancy limiter, or in
registers for rows up to a compile-time MAX_N), 16-byte vector loads, fused vs unfused
(one launch per reduction plus an apply launch, or a stats launch plus an apply launch,
through a scratch of row scalars), online softmax (max and sum in one pass), accurate
expf vs __expf, and a vocabulary split across blocks for long cross-entropy rows.
Triton: the whole row in one tile (spills for wide rows on few warps), looped tiles,
online looped, several rows per program; num_warps and tile sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from workshop.corpus.ops.rowkit import (
    ELEMENT_BYTES,
    IDENTITY,
    NEG_INF,
    TRITON_HEADER,
    TRITON_REDUCE,
    at_most,
    cuda_accumulate,
    cuda_prelude,
    cuda_reductions,
    divisible,
    next_pow2,
    unsupported,
    vector_width,
)
from workshop.corpus.spec import (
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
    f32,
    grid1,
    i32,
    product,
)

EPS = 1e-5
NORM_SIZES = [
    {"m": 64, "n": 1024, "dtype": "f32"},
    {"m": 4096, "n": 1024, "dtype": "f32"},
    {"m": 131072, "n": 128, "dtype": "f32"},
    {"m": 8192, "n": 4096, "dtype": "f32"},
    {"m": 1024, "n": 32768, "dtype": "f32"},
    {"m": 8192, "n": 4096, "dtype": "f16"},
    {"m": 8192, "n": 4096, "dtype": "bf16"},
]
# Vocabularies: 32000 (Llama 2) is no power of two; 128256 (Llama 3) rows are 500 KB in fp32.
CE_SIZES = [
    {"m": 64, "n": 1024, "dtype": "f32"},
    {"m": 4096, "n": 4096, "dtype": "f32"},
    {"m": 2048, "n": 32000, "dtype": "f32"},
    {"m": 512, "n": 128256, "dtype": "f32"},
    {"m": 4096, "n": 32000, "dtype": "f16"},
    {"m": 4096, "n": 32000, "dtype": "bf16"},
]
SERIAL_MAX_N = 4096  # one thread per row: longer rows take too long
SMEM_MAX_N = 49152  # the row cached as fp32 in at most 192 KB of shared memory
MANY_ROWS_MAX_N = 1024
PER_THREAD_TILE = 128  # Triton whole-row tiles: at most this many elements per thread


# --- row programs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pass:
    """One reduction over the row, then the row scalars derived from it."""

    name: str  # the partial, reduced across the row's threads
    kind: str  # "sum" | "max"
    value: str  # C: what element `v` contributes (may use earlier row scalars)
    then: str  # C statements after the reduction ("" when the partial is the scalar)
    defines: tuple[str, ...]  # row scalars known after this pass
    triton_value: str
    triton_then: str


@dataclass(frozen=True)
class RowProgram:
    op: str
    dtype: str
    passes: tuple[Pass, ...]
    out_params: str  # C parameters after x (outputs and per-column inputs)
    out_args: tuple[str, ...]
    triton_params: str
    eps: bool  # takes `float eps` after m, n
    write: Callable[[str], str] | None = None  # C: output element from `v` at column c (elementwise ops)
    triton_write: str | None = None
    columns: tuple[str, ...] = ()  # per-column inputs the write reads (Triton loads them as tiles)
    finish: str | None = None  # C statement writing a per-row result (after the write, if any)
    triton_finish: Callable[[str, str | None], str] | None = None  # from the row index (tile) and its mask
    out: str = "y"  # the elementwise output
    out_dtype: str | None = None  # when it differs from the input's
    triton_imports: str = ""

    @property
    def odtype(self) -> str:
        return self.out_dtype or self.dtype

    @property
    def out_pack(self) -> str:
        return "Pack" if self.odtype == self.dtype else "OutPack"

    @property
    def scalars(self) -> tuple[str, ...]:
        return tuple(name for p in self.passes for name in p.defines)

    def load(self, expr: str) -> str:
        return cuda_load_as_float(self.dtype, expr)

    def store(self, expr: str) -> str:
        return f"(signed char)({expr})" if self.odtype == "i8" else cuda_store_from_float(self.odtype, expr)

    def args(self, sizes: Sizes) -> tuple[Any, ...]:
        return ("x", *self.out_args, i32(sizes["m"]), i32(sizes["n"]), *((f32(EPS),) if self.eps else ()))

    def tail(self) -> str:
        return ", int m, int n" + (", float eps" if self.eps else "")


def softmax_program(dtype: str, exp: str = "__expf") -> RowProgram:
    t = CUDA_TYPES[dtype]
    return RowProgram(
        "softmax",
        dtype,
        (
            Pass("mx", "max", "v", "", ("mx",), "v", ""),
            Pass("total", "sum", f"{exp}(v - mx)", "float inv = 1.0f / total;", ("inv",), "tl.exp(v - mx)", "inv = 1.0 / total"),
        ),
        f"{t}* __restrict__ y",
        ("y",),
        "y_ptr",
        False,
        write=lambda c: f"{exp}(v - mx) * inv",
        triton_write="tl.exp(v - mx) * inv",
    )


def layernorm_program(dtype: str) -> RowProgram:
    t = CUDA_TYPES[dtype]
    load = lambda e: cuda_load_as_float(dtype, e)  # noqa: E731
    return RowProgram(
        "layernorm",
        dtype,
        (
            Pass("total", "sum", "v", "float mean = total / n;", ("mean",), "v", "mean = total / n"),
            Pass(
                "dev",
                "sum",
                "(v - mean) * (v - mean)",
                "float rstd = rsqrtf(dev / n + eps);",
                ("rstd",),
                "(v - mean) * (v - mean)",
                "rstd = tl.rsqrt(dev / n + eps)",
            ),
        ),
        f"{t}* __restrict__ y, const {t}* __restrict__ w, const {t}* __restrict__ b",
        ("y", "w", "b"),
        "y_ptr, w_ptr, b_ptr",
        True,
        write=lambda c: f"(v - mean) * rstd * {load(f'w[{c}]')} + {load(f'b[{c}]')}",
        triton_write="(v - mean) * rstd * w + b",
        columns=("w", "b"),
    )


def rmsnorm_program(dtype: str) -> RowProgram:
    t = CUDA_TYPES[dtype]
    return RowProgram(
        "rmsnorm",
        dtype,
        (Pass("ss", "sum", "v * v", "float rstd = rsqrtf(ss / n + eps);", ("rstd",), "v * v", "rstd = tl.rsqrt(ss / n + eps)"),),
        f"{t}* __restrict__ y, const {t}* __restrict__ w",
        ("y", "w"),
        "y_ptr, w_ptr",
        True,
        write=lambda c: f"v * rstd * {cuda_load_as_float(dtype, f'w[{c}]')}",
        triton_write="v * rstd * w",
        columns=("w",),
    )


def cross_entropy_program(dtype: str) -> RowProgram:
    return RowProgram(
        "cross_entropy",
        dtype,
        (Pass("mx", "max", "v", "", ("mx",), "v", ""), Pass("total", "sum", "__expf(v - mx)", "", ("total",), "tl.exp(v - mx)", "")),
        "const long long* __restrict__ target, float* __restrict__ loss",
        ("target", "loss"),
        "target_ptr, loss_ptr",
        False,
        finish=f"loss[row] = logf(total) + mx - {cuda_load_as_float(dtype, 'x[(size_t)row * n + target[row]]')};",
        triton_finish=lambda row, mask: (
            f"tl.store(loss_ptr + {row}, tl.log(total) + mx - tl.load(x_ptr + {row} * n + tl.load(target_ptr + {row})).to(tl.float32))"
        ),
    )


# --- CUDA: one generator for every kernel shape ----------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """Who owns a row and where it lives between passes."""

    mapping: str  # "thread" | "warp" | "block"
    vector: int = 1
    threads: int = 256  # block size (thread, block) or warps per block (warp)
    reduction: str = "shuffle"  # block reductions
    source: str = "global"  # "global" | "smem" (block) | "registers" (warp)
    max_n: int = 0  # registers: the longest row

    def defines(self) -> dict[str, int]:
        if self.mapping == "warp":
            return {"WARPS": self.threads, **({"MAX_N": self.max_n, "PER_LANE": self.max_n // 32} if self.source == "registers" else {})}
        return {"BLOCK": self.threads}

    def start(self) -> str:
        return {"thread": "0", "warp": "lane", "block": "threadIdx.x"}[self.mapping]

    def stride(self) -> str:
        return {"thread": "1", "warp": "32", "block": "BLOCK"}[self.mapping]

    def leader(self) -> str | None:
        return {"thread": None, "warp": "lane == 0", "block": "threadIdx.x == 0"}[self.mapping]

    def row_lines(self) -> str:
        if self.mapping == "thread":
            return "    int row = blockIdx.x * BLOCK + threadIdx.x;\n    if (row >= m) return;\n"
        if self.mapping == "warp":
            return "    int row = blockIdx.x * WARPS + threadIdx.x / 32;\n    int lane = threadIdx.x % 32;\n    if (row >= m) return;\n"
        return "    int row = blockIdx.x;\n"

    def describe(self) -> str:
        owner = {
            "thread": "one thread per row (neighbouring threads n elements apart)",
            "warp": "one warp per row",
            "block": "one block per row",
        }[self.mapping]
        where = {
            "global": "re-read from global memory each pass",
            "smem": "cached in shared memory as fp32",
            "registers": "held in registers (rows up to MAX_N)",
        }[self.source]
        return f"// {owner}, the row {where}"

    def reduce(self, kind: str, name: str) -> str:
        if self.mapping == "thread":
            return ""
        return f"    {name} = {self.mapping}_{kind}({name});\n"


def _packs(extent: str, vector: int) -> str:
    return extent if vector == 1 else f"{extent} / {vector}"


def _pointers(prog: RowProgram, vector: int, write: bool) -> str:
    if vector == 1:
        lines = f"    const {CUDA_TYPES[prog.dtype]}* src = x + (size_t)row * n;\n"
        return lines + (f"    {CUDA_TYPES[prog.odtype]}* dst = {prog.out} + (size_t)row * n;\n" if write else "")
    lines = "    const Pack* src = reinterpret_cast<const Pack*>(x + (size_t)row * n);\n"
    return lines + (f"    {prog.out_pack}* dst = reinterpret_cast<{prog.out_pack}*>({prog.out} + (size_t)row * n);\n" if write else "")


def _guard(condition: str | None, statement: str) -> str:
    return f"    if ({condition}) {statement}\n" if condition else f"    {statement}\n"


def _pass_code(prog: RowProgram, shape: Shape, p: Pass, first: bool) -> str:
    """One reduction over the row, reduced across its threads, then its `then`."""
    w = shape.vector
    if shape.source == "global":
        code = cuda_accumulate(prog.dtype, p.kind, "src", shape.start(), shape.stride(), _packs("n", w), w, acc=p.name, value=p.value)
    elif shape.source == "smem" and not first:
        code = cuda_accumulate("f32", p.kind, "cache", shape.start(), shape.stride(), "n", acc=p.name, value=p.value)
    elif shape.source == "smem":
        # the first pass also fills the cache; the reduction's barrier publishes it
        fill = f"        cache[{_column(w)}] = v;\n        {p.name} = combine_{p.kind}({p.name}, {p.value});"
        code = f"""    float {p.name} = {IDENTITY[p.kind]};
    for (int j = {shape.start()}; j < {_packs("n", w)}; j += {shape.stride()}) {{
{_element_loop(prog, w, fill, "        ")}    }}
"""
    else:
        code = (
            f"""    float {p.name} = {IDENTITY[p.kind]};
    #pragma unroll
    for (int i = 0; i < PER_LANE / {w}; ++i) {{
        if (i * 32 + lane < {_packs("n", w)}) {{
            #pragma unroll
            for (int k = 0; k < {w}; ++k) {{
                float v = r[i * {w} + k];
                {p.name} = combine_{p.kind}({p.name}, {p.value});
            }}
        }}
    }}
"""
            if w > 1
            else f"""    float {p.name} = {IDENTITY[p.kind]};
    #pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {{
        float v = r[i];
        if (i * 32 + lane < n) {p.name} = combine_{p.kind}({p.name}, {p.value});
    }}
"""
        )
    return code + shape.reduce(p.kind, p.name) + (f"    {p.then}\n" if p.then else "")


def _column(vector: int) -> str:
    return "j" if vector == 1 else f"j * {vector} + k"


def _element_loop(prog: RowProgram, vector: int, body: str, pad: str) -> str:
    """Binds `v` to each element of global index j (a Pack when vector > 1), then `body`."""
    if vector == 1:
        return f"{pad}float v = {prog.load('src[j]')};\n{body}\n"
    inner = "\n".join("    " + line for line in body.split("\n"))
    return f"""{pad}Pack p = src[j];
{pad}#pragma unroll
{pad}for (int k = 0; k < {vector}; ++k) {{
{pad}    float v = {prog.load("p.v[k]")};
{inner}
{pad}}}
"""


def _write_code(prog: RowProgram, shape: Shape) -> str:
    """The elementwise write of the row, reading it from where it lives."""
    w = shape.vector
    element = {"global": None, "smem": "cache[{c}]", "registers": "r[{i}]"}[shape.source]
    if shape.source == "registers":
        lines = f"""    #pragma unroll
    for (int i = 0; i < {_packs("PER_LANE", w)}; ++i) {{
        int j = i * 32 + lane;
        if (j < {_packs("n", w)}) {{
"""
        if w == 1:
            lines += f"            float v = r[i];\n            dst[j] = {prog.store(prog.write('j'))};\n"
        else:
            lines += f"""            {prog.out_pack} o;
            #pragma unroll
            for (int k = 0; k < {w}; ++k) {{
                float v = r[i * {w} + k];
                o.v[k] = {prog.store(prog.write(f"j * {w} + k"))};
            }}
            dst[j] = o;
"""
        return lines + "        }\n    }\n"
    head = f"    for (int j = {shape.start()}; j < {_packs('n', w)}; j += {shape.stride()}) {{\n"
    if w == 1:
        load = prog.load("src[j]") if element is None else "cache[j]"
        return head + f"        float v = {load};\n        dst[j] = {prog.store(prog.write('j'))};\n    }}\n"
    fetch = (
        f"        {prog.out_pack} o;\n"
        if element is not None
        else ("        Pack p = src[j], o;\n" if prog.out_pack == "Pack" else f"        Pack p = src[j];\n        {prog.out_pack} o;\n")
    )
    load = prog.load("p.v[k]") if element is None else f"cache[j * {w} + k]"
    return (
        head
        + fetch
        + f"""        #pragma unroll
        for (int k = 0; k < {w}; ++k) {{
            float v = {load};
            o.v[k] = {prog.store(prog.write(f"j * {w} + k"))};
        }}
        dst[j] = o;
    }}
"""
    )


def _registers_load(prog: RowProgram, w: int) -> str:
    if w == 1:
        return f"""    float r[PER_LANE];
    #pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {{
        int j = i * 32 + lane;
        if (j < n) r[i] = {prog.load("src[j]")};
    }}
"""
    return f"""    float r[PER_LANE];
    #pragma unroll
    for (int i = 0; i < PER_LANE / {w}; ++i) {{
        int j = i * 32 + lane;
        if (j < n / {w}) {{
            Pack p = src[j];
            #pragma unroll
            for (int k = 0; k < {w}; ++k) r[i * {w} + k] = {prog.load("p.v[k]")};
        }}
    }}
"""


def _head(prog: RowProgram, shape: Shape, online: bool = False) -> str:
    kinds = tuple(dict.fromkeys(p.kind for p in prog.passes))
    style = shape.reduction if shape.mapping == "block" else None
    head = cuda_prelude(prog.dtype, shape.defines(), shape.vector) + _out_pack(prog, shape.vector)
    if online:
        return head + _ONLINE_WARP + (_ONLINE_BLOCK if shape.mapping == "block" else "")
    return head + cuda_reductions(kinds, style, warp=shape.mapping != "thread")


def _out_pack(prog: RowProgram, vector: int) -> str:
    if vector == 1 or prog.out_pack == "Pack":
        return ""
    return f"struct __align__({vector * ELEMENT_BYTES[prog.odtype]}) OutPack {{ {CUDA_TYPES[prog.odtype]} v[{vector}]; }};\n"


def _tail_code(prog: RowProgram, shape: Shape) -> str:
    """The elementwise write, then the per-row result from the row's leader."""
    return (_write_code(prog, shape) if prog.write else "") + (_guard(shape.leader(), prog.finish) if prog.finish else "")


def fused_code(prog: RowProgram, shape: Shape) -> str:
    """The whole operation in one kernel."""
    smem = "    extern __shared__ float cache[];  // the row, as fp32\n" if shape.source == "smem" else ""
    body = shape.row_lines() + smem + _pointers(prog, shape.vector, prog.write is not None)
    if shape.source == "registers":
        body += _registers_load(prog, shape.vector)
    for index, p in enumerate(prog.passes):
        body += _pass_code(prog, shape, p, index == 0)
    body += _tail_code(prog, shape)
    return f"""{_head(prog, shape)}
{shape.describe()}
extern "C" __global__ void {prog.op}(const {CUDA_TYPES[prog.dtype]}* __restrict__ x, {prog.out_params}{prog.tail()}) {{
{body}}}
"""


def online_code(prog: RowProgram, shape: Shape) -> str:
    """Max and sum of exponentials in one pass (running rescale), merged as (max, sum) pairs."""
    w = shape.vector
    body = (
        shape.row_lines()
        + _pointers(prog, w, prog.write is not None)
        + f"""    float mx = {NEG_INF}, total = 0.0f;
    for (int j = {shape.start()}; j < {_packs("n", w)}; j += {shape.stride()}) {{
{_element_loop(prog, w, _ONLINE_UPDATE, "        ")}    }}
    {shape.mapping}_online(mx, total);
"""
    )
    last = prog.passes[-1]
    body += f"    {last.then}\n" if last.then else ""
    body += _tail_code(prog, shape)
    return f"""{_head(prog, shape, online=True)}
// online softmax: one read for the max and the sum
extern "C" __global__ void {prog.op}(const {CUDA_TYPES[prog.dtype]}* __restrict__ x, {prog.out_params}{prog.tail()}) {{
{body}}}
"""


_ONLINE_UPDATE = "        if (v > mx) { total = total * __expf(mx - v) + 1.0f; mx = v; } else { total += __expf(v - mx); }"
_ONLINE_WARP = f"""
// (max, sum of exp(x - max)) pairs merge by rescaling the smaller side
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {{
    float mx = fmaxf(m, m2);
    if (mx == {NEG_INF}) return;  // both empty
    s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
    m = mx;
}}

__device__ __forceinline__ void warp_online(float& m, float& s) {{
    #pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {{
        float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
        float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
        merge(m, s, m2, s2);
    }}
}}
"""

_ONLINE_BLOCK = f"""
__device__ __forceinline__ void block_online(float& m, float& s) {{
    __shared__ float ms[BLOCK / 32], ss[BLOCK / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    warp_online(m, s);
    if (lane == 0) {{ ms[warp] = m; ss[warp] = s; }}
    __syncthreads();
    m = lane < BLOCK / 32 ? ms[lane] : {NEG_INF};
    s = lane < BLOCK / 32 ? ss[lane] : 0.0f;
    warp_online(m, s);
    __syncthreads();
}}
"""


def _stats_store(prog: RowProgram, names: tuple[str, ...], leader: str | None) -> str:
    count = len(prog.scalars)
    stores = " ".join(f"stats[(size_t)row * {count} + {prog.scalars.index(name)}] = {name};" for name in names)
    return _guard(leader, f"{{ {stores} }}" if len(names) > 1 else stores)


def _stats_load(prog: RowProgram, names: tuple[str, ...]) -> str:
    count = len(prog.scalars)
    return "".join(f"    float {name} = stats[(size_t)row * {count} + {prog.scalars.index(name)}];\n" for name in names)


def per_pass_code(prog: RowProgram, shape: Shape) -> str:
    """Unfused: one launch per reduction (block per row), row scalars through a scratch, then an apply launch."""
    kernels = []
    known: tuple[str, ...] = ()
    for index, p in enumerate(prog.passes):
        body = shape.row_lines() + _stats_load(prog, known) + _pointers(prog, shape.vector, False) + _pass_code(prog, shape, p, index == 0)
        body += _stats_store(prog, p.defines, shape.leader())
        kernels.append(f"""
extern "C" __global__ void {prog.op}_pass{index + 1}(const {CUDA_TYPES[prog.dtype]}* __restrict__ x, float* __restrict__ stats{prog.tail()}) {{
{body}}}
""")
        known += p.defines
    return _head(prog, shape) + "".join(kernels) + _apply_code(prog, shape.vector)


def stats_apply_code(prog: RowProgram, shape: Shape) -> str:
    """Unfused in two: all reductions in a warp-per-row stats launch, then an apply launch."""
    body = shape.row_lines() + _pointers(prog, shape.vector, False)
    for index, p in enumerate(prog.passes):
        body += _pass_code(prog, shape, p, index == 0)
    body += _stats_store(prog, prog.scalars, shape.leader())
    return f"""{_head(prog, shape)}
extern "C" __global__ void {prog.op}_stats(const {CUDA_TYPES[prog.dtype]}* __restrict__ x, float* __restrict__ stats{prog.tail()}) {{
{body}}}
{_apply_code(prog, shape.vector)}"""


APPLY_BLOCK = 256


def _apply_code(prog: RowProgram, w: int) -> str:
    t = CUDA_TYPES[prog.dtype]
    if prog.write is None:  # one result per row
        return f"""
extern "C" __global__ void {prog.op}_finish(const {t}* __restrict__ x, {prog.out_params}, const float* __restrict__ stats, int m, int n) {{
    int row = blockIdx.x * {APPLY_BLOCK} + threadIdx.x;
    if (row >= m) return;
{_stats_load(prog, prog.scalars)}    {prog.finish}
}}
"""
    if w == 1:
        element = f"    float v = {prog.load('x[i]')};\n    {prog.out}[i] = {prog.store(prog.write('j'))};\n"
    else:
        element = f"""    Pack p = reinterpret_cast<const Pack*>(x)[i];
    {prog.out_pack} o;
    #pragma unroll
    for (int k = 0; k < {w}; ++k) {{
        float v = {prog.load("p.v[k]")};
        o.v[k] = {prog.store(prog.write(f"j * {w} + k"))};
    }}
    reinterpret_cast<{prog.out_pack}*>({prog.out})[i] = o;
"""
    if prog.finish:
        element += f"    if (j == 0) {prog.finish}  // the row's first thread\n"
    return f"""
// elementwise: one thread per {"element" if w == 1 else f"{w} elements"}, row scalars from the scratch
extern "C" __global__ void {prog.op}_apply(const {t}* __restrict__ x, {prog.out_params}, const float* __restrict__ stats, int m, int n) {{
    size_t i = (size_t)blockIdx.x * {APPLY_BLOCK} + threadIdx.x;
    if (i >= (size_t)m * {_packs("n", w)}) return;
    int row = i / ({_packs("n", w)});
    int j = i % ({_packs("n", w)});
{_stats_load(prog, prog.scalars)}{element}}}
"""


def split_rows_code(prog: RowProgram, vector: int, chunk: int) -> str:
    """Cross-entropy over long rows: (max, sum) per chunk of the row from a grid (rows, chunks), merged per row."""
    t = CUDA_TYPES[prog.dtype]
    shape = Shape("block", vector, 256)
    return f"""{_head(prog, shape, online=True)}#define CHUNK {chunk}

// pass 1, grid (rows, chunks): online (max, sum) of one chunk into scratch
extern "C" __global__ void {prog.op}_partials(const {t}* __restrict__ x, float* __restrict__ part_max, float* __restrict__ part_sum, int m, int n) {{
    int row = blockIdx.x;
{_pointers(prog, vector, False)}    int begin = blockIdx.y * ({_packs("CHUNK", vector)});
    int end = min({_packs("n", vector)}, begin + {_packs("CHUNK", vector)});
    float mx = {NEG_INF}, total = 0.0f;
    for (int j = begin + threadIdx.x; j < end; j += BLOCK) {{
{_element_loop(prog, vector, _ONLINE_UPDATE, "        ")}    }}
    block_online(mx, total);
    if (threadIdx.x == 0) {{ part_max[(size_t)row * gridDim.y + blockIdx.y] = mx; part_sum[(size_t)row * gridDim.y + blockIdx.y] = total; }}
}}

// pass 2: one warp per row merges its chunks
extern "C" __global__ void {prog.op}_finish(const {t}* __restrict__ x, {prog.out_params}, const float* __restrict__ part_max,
                                            const float* __restrict__ part_sum, int m, int n, int chunks) {{
    int row = blockIdx.x * (BLOCK / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= m) return;
    float mx = {NEG_INF}, total = 0.0f;
    for (int j = lane; j < chunks; j += 32) merge(mx, total, part_max[(size_t)row * chunks + j], part_sum[(size_t)row * chunks + j]);
    warp_online(mx, total);
    if (lane == 0) {prog.finish}
}}
"""


# --- Triton -------------------------------------------------------------------------------------

_TRITON_IDENTITY = {"sum": "0.0", "max": 'float("-inf")'}


def _triton_signature(prog: RowProgram, rows: bool, constexprs: str) -> str:
    return f"x_ptr, {prog.triton_params}, {'m, ' if rows else ''}n, {'eps, ' if prog.eps else ''}{constexprs}"


def _triton_masked(p: Pass) -> str:
    if p.kind == "sum" and p.triton_value == "v":
        return "v"  # masked lanes were loaded as 0
    return f"tl.where(mask, {p.triton_value}, {_TRITON_IDENTITY[p.kind]})"


def _triton_columns(prog: RowProgram, pad: str) -> str:
    return "".join(f"{pad}{name} = tl.load({name}_ptr + cols, mask=cols < n, other=0.0).to(tl.float32)\n" for name in prog.columns)


def _triton_write(prog: RowProgram, pad: str, rows: bool) -> str:
    """The write of the tile `v` at `cols`."""
    base = "rows * n + cols" if rows else "row * n + cols"
    out = f"{prog.out}_ptr"
    return _triton_columns(prog, pad) + f"{pad}tl.store({out} + {base}, ({prog.triton_write}).to({out}.dtype.element_ty), mask=mask)\n"


def _triton_finish(prog: RowProgram, rows: bool) -> str:
    if prog.triton_finish is None:
        return ""
    return f"    {prog.triton_finish('rows', 'rows < m') if rows else prog.triton_finish('row', None)}\n"


def _triton_tail(prog: RowProgram, rows: bool) -> str:
    """The write of the whole-row tile(s), then the per-row result."""
    return (_triton_write(prog, "    ", rows) if prog.write else "") + _triton_finish(prog, rows)


def _triton_looped_tail(prog: RowProgram) -> str:
    """A write pass over the tiles, then the per-row result."""
    return (_triton_tile_loop(_triton_write(prog, "        ", False)) if prog.write else "") + _triton_finish(prog, False)


def triton_whole_row(prog: RowProgram) -> str:
    lines = ""
    for p in prog.passes:
        lines += f"    {p.name} = {TRITON_REDUCE[p.kind]}({_triton_masked(p)}, axis=0)\n" + (
            f"    {p.triton_then}\n" if p.triton_then else ""
        )
    return f"""{TRITON_HEADER}{prog.triton_imports}

@triton.jit
def {prog.op}({_triton_signature(prog, False, "BLOCK_N: tl.constexpr")}):
    # the whole row in one tile (BLOCK_N: the next power of two >= n)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n
    v = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
{lines}{_triton_tail(prog, False)}"""


def _triton_tile_loop(body: str) -> str:
    return f"""    for start in range(0, n, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < n
        v = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
{body}"""


def triton_looped(prog: RowProgram) -> str:
    lines = ""
    for p in prog.passes:
        start = "tl.zeros([BLOCK_N], dtype=tl.float32)" if p.kind == "sum" else 'tl.full([BLOCK_N], float("-inf"), tl.float32)'
        fold = f"acc + {_triton_masked(p)}" if p.kind == "sum" else f"tl.maximum(acc, {_triton_masked(p)})"
        lines += f"    acc = {start}\n" + _triton_tile_loop(f"        acc = {fold}\n")
        lines += f"    {p.name} = {TRITON_REDUCE[p.kind]}(acc, axis=0)\n" + (f"    {p.triton_then}\n" if p.triton_then else "")
    tail = _triton_looped_tail(prog)
    return f"""{TRITON_HEADER}{prog.triton_imports}

@triton.jit
def {prog.op}({_triton_signature(prog, False, "BLOCK_N: tl.constexpr")}):
    # one program per row: a pass over BLOCK_N-wide tiles per reduction, then the write
    row = tl.program_id(0)
{lines}{tail}"""


def triton_online(prog: RowProgram) -> str:
    last = prog.passes[-1]
    then = f"    {last.triton_then}\n" if last.triton_then else ""
    tail = _triton_looped_tail(prog)
    return f"""{TRITON_HEADER}{prog.triton_imports}

@triton.jit
def {prog.op}({_triton_signature(prog, False, "BLOCK_N: tl.constexpr")}):
    # online softmax over tiles: running max and rescaled sum per lane, one read for both
    row = tl.program_id(0)
    m_acc = tl.full([BLOCK_N], float("-inf"), tl.float32)
    s_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        v = tl.load(x_ptr + row * n + cols, mask=cols < n, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m_acc, v)
        safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # lanes that saw nothing yet
        s_acc = s_acc * tl.exp(m_acc - safe) + tl.exp(v - safe)
        m_acc = m_new
    mx = tl.max(m_acc, axis=0)
    total = tl.sum(s_acc * tl.exp(m_acc - mx), axis=0)
{then}{tail}"""


def triton_many_rows(prog: RowProgram) -> str:
    lines = ""
    for p in prog.passes:
        lines += f"    {p.name} = {TRITON_REDUCE[p.kind]}({_triton_masked(p)}, axis=1, keep_dims=True)\n" + (
            f"    {p.triton_then}\n" if p.triton_then else ""
        )
    return f"""{TRITON_HEADER}{prog.triton_imports}

@triton.jit
def {prog.op}({_triton_signature(prog, True, "ROWS: tl.constexpr, BLOCK_N: tl.constexpr")}):
    # ROWS whole rows per program
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS))[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < m) & (cols < n)
    v = tl.load(x_ptr + rows * n + cols, mask=mask, other=0.0).to(tl.float32)
{lines}{_triton_tail(prog, True)}"""


def triton_split_rows(prog: RowProgram) -> str:
    return f"""{TRITON_HEADER}{prog.triton_imports}

@triton.jit
def {prog.op}_partials(x_ptr, part_max_ptr, part_sum_ptr, n, BLOCK_N: tl.constexpr):
    # grid (rows, chunks): (max, sum of exp) of one BLOCK_N-wide chunk
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    v = tl.load(x_ptr + row * n + cols, mask=cols < n, other=float("-inf")).to(tl.float32)
    mx = tl.max(v, axis=0)
    slot = row * tl.num_programs(1) + tl.program_id(1)
    tl.store(part_max_ptr + slot, mx)
    tl.store(part_sum_ptr + slot, tl.sum(tl.exp(v - mx), axis=0))


@triton.jit
def {prog.op}_finish(x_ptr, {prog.triton_params}, part_max_ptr, part_sum_ptr, n, chunks, CHUNKS: tl.constexpr):
    row = tl.program_id(0)
    slots = tl.arange(0, CHUNKS)
    part_max = tl.load(part_max_ptr + row * chunks + slots, mask=slots < chunks, other=float("-inf"))
    part_sum = tl.load(part_sum_ptr + row * chunks + slots, mask=slots < chunks, other=0.0)
    mx = tl.max(part_max, axis=0)
    total = tl.sum(part_sum * tl.exp(part_max - mx), axis=0)
    {prog.triton_finish("row", None)}
"""


# --- variants -------------------------------------------------------------------------------------


def _launch_fused(prog: RowProgram, shape: Shape, sizes: Sizes) -> list[Launch]:
    m, n = sizes["m"], sizes["n"]
    if shape.mapping == "warp":
        grid, block = cdiv(m, shape.threads), 32 * shape.threads
    elif shape.mapping == "thread":
        grid, block = cdiv(m, shape.threads), shape.threads
    else:
        grid, block = m, shape.threads
    smem = 4 * n if shape.source == "smem" else 0
    return [Launch(prog.op, grid1(grid), prog.args(sizes), block1(block), shared_bytes=smem)]


def _launch_apply(prog: RowProgram, vector: int, sizes: Sizes) -> Launch:
    m, n = sizes["m"], sizes["n"]
    if prog.write is None:
        return Launch(f"{prog.op}_finish", grid1(cdiv(m, APPLY_BLOCK)), ("x", *prog.out_args, "stats", i32(m), i32(n)), block1(APPLY_BLOCK))
    return Launch(
        f"{prog.op}_apply", grid1(cdiv(m * n // vector, APPLY_BLOCK)), ("x", *prog.out_args, "stats", i32(m), i32(n)), block1(APPLY_BLOCK)
    )


def _stats_args(prog: RowProgram, sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "stats", i32(sizes["m"]), i32(sizes["n"]), *((f32(EPS),) if prog.eps else ()))


def _per_pass_launches(prog: RowProgram, shape: Shape) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        passes = [
            Launch(f"{prog.op}_pass{i + 1}", grid1(s["m"]), _stats_args(prog, s), block1(shape.threads)) for i in range(len(prog.passes))
        ]
        return [*passes, _launch_apply(prog, shape.vector, s)]

    return launches


def _stats_apply_launches(prog: RowProgram, shape: Shape) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        return [
            Launch(f"{prog.op}_stats", grid1(cdiv(s["m"], shape.threads)), _stats_args(prog, s), block1(32 * shape.threads)),
            _launch_apply(prog, shape.vector, s),
        ]

    return launches


def _stats_scratch(prog: RowProgram) -> Callable[[Sizes], dict[str, TensorSpec]]:
    return lambda s: {"stats": TensorSpec((s["m"] * len(prog.scalars),), "f32")}


def _checks(prog: RowProgram, shape: Shape) -> list:
    checks = [divisible("n", shape.vector)]
    if shape.mapping == "thread":
        checks.append(at_most("n", SERIAL_MAX_N, "a serial row is too slow"))
    if shape.source == "smem":
        checks.append(at_most("n", SMEM_MAX_N, "the row does not fit shared memory"))
    if shape.source == "registers":
        checks.append(at_most("n", shape.max_n, "longer than the registers hold"))
    return checks


def _cuda(prog: RowProgram, family: str, params: dict[str, Any], code: str, launches, shape: Shape, scratch=None) -> Variant:
    return Variant(
        family,
        "cuda",
        {"dtype": prog.dtype, **params},
        code,
        launches,
        scratch or (lambda s: {}),
        unsupported=unsupported(prog.dtype, *_checks(prog, shape)),
    )


def _fused(prog: RowProgram, family: str, params: dict[str, Any], shape: Shape, online: bool = False) -> Variant:
    code = online_code(prog, shape) if online else fused_code(prog, shape)
    return _cuda(prog, family, params, code, lambda s: _launch_fused(prog, shape, s), shape)


def _triton(prog: RowProgram, family: str, params: dict[str, Any], code: str, launches, *checks) -> Variant:
    return Variant(family, "triton", {"dtype": prog.dtype, **params}, code, launches, unsupported=unsupported(prog.dtype, *checks))


def _triton_args(prog: RowProgram, sizes: Sizes, rows: bool) -> tuple[Any, ...]:
    m, n = sizes["m"], sizes["n"]
    return ("x", *prog.out_args, *((i32(m),) if rows else ()), i32(n), *((f32(EPS),) if prog.eps else ()))


def _whole_row_fits(warps: int):
    limit = PER_THREAD_TILE * 32 * warps
    return lambda s: (
        None if next_pow2(s["n"]) <= limit else f"a {next_pow2(s['n'])}-wide tile is over {PER_THREAD_TILE} elements per thread"
    )


def row_variants(factory: Callable[[str], RowProgram], sizes: list[dict[str, Any]], online: bool, exp_axis: bool = False) -> list[Variant]:
    """Every family for one row program that runs at least one of `sizes`."""
    return [v for v in _row_variants(factory, online, exp_axis) if any(v.unsupported(s) is None for s in sizes)]


def _row_variants(factory: Callable[[str], RowProgram], online: bool, exp_axis: bool) -> Iterable[Variant]:
    """fp32 in full, a sample of each family per half type."""
    for dtype in ("f32", "f16", "bf16"):
        full = dtype == "f32"
        prog = factory(dtype)
        width = vector_width(dtype)
        vectors = [1, width] if full else [width]
        if full:
            for block in (64, 256):
                yield _fused(prog, "cuda-thread-per-row", {"block": block}, Shape("thread", 1, block))
        for p in product({"warps": [1, 4, 8] if full else [4], "vector": [1, width]}):
            yield _fused(prog, "cuda-warp-per-row", p, Shape("warp", p["vector"], p["warps"]))
        if full:
            for p in product({"max_n": [1024, 4096], "vector": vectors, "warps": [4]}):
                yield _fused(prog, "cuda-warp-registers", p, Shape("warp", p["vector"], 4, source="registers", max_n=p["max_n"]))
        combos = list(
            product(
                {
                    "block": [128, 256, 512, 1024] if full else [256, 1024],
                    "vector": vectors,
                    "reduction": ["smem", "shuffle"] if full else ["shuffle"],
                }
            )
        )
        for p in combos:
            shape = Shape("block", p["vector"], p["block"], p["reduction"])
            yield _fused(prog, "cuda-block-per-row", {**p, "exp": "__expf"} if exp_axis else p, shape)
        if exp_axis and full:
            accurate = factory(dtype, "expf")  # type: ignore[call-arg]
            for p in product({"block": [256, 1024], "vector": vectors, "reduction": ["shuffle"]}):
                yield _fused(accurate, "cuda-block-per-row", {**p, "exp": "expf"}, Shape("block", p["vector"], p["block"], p["reduction"]))
        for p in product({"block": [256, 1024] if full else [1024], "vector": vectors}):
            yield _fused(prog, "cuda-block-smem-row", p, Shape("block", p["vector"], p["block"], source="smem"))
        if online:
            for p in product({"block": [256, 1024] if full else [1024], "vector": vectors}):
                yield _fused(prog, "cuda-block-online", p, Shape("block", p["vector"], p["block"]), online=True)
            if full:
                for p in product({"warps": [4], "vector": vectors}):
                    yield _fused(prog, "cuda-warp-online", p, Shape("warp", p["vector"], 4), online=True)
        if full:
            for block in (128, 256, 512):
                shape = Shape("block", width, block)
                yield _cuda(
                    prog,
                    "cuda-kernel-per-pass",
                    {"block": block, "vector": width},
                    per_pass_code(prog, shape),
                    _per_pass_launches(prog, shape),
                    shape,
                    _stats_scratch(prog),
                )
            for vector in vectors:
                shape = Shape("warp", vector, 4)
                yield _cuda(
                    prog,
                    "cuda-stats-apply",
                    {"warps": 4, "vector": vector},
                    stats_apply_code(prog, shape),
                    _stats_apply_launches(prog, shape),
                    shape,
                    _stats_scratch(prog),
                )
        yield from _triton_variants(prog, full, online)


def _triton_variants(prog: RowProgram, full: bool, online: bool) -> Iterable[Variant]:
    for warps in [2, 4, 8, 16] if full else [4, 8]:
        yield _triton(
            prog,
            "triton-whole-row",
            {"num_warps": warps},
            triton_whole_row(prog),
            lambda s, w=warps: [
                Launch(prog.op, grid1(s["m"]), _triton_args(prog, s, False), constexprs={"BLOCK_N": next_pow2(s["n"])}, num_warps=w)
            ],
            _whole_row_fits(warps),
        )
    looped = product({"BLOCK_N": [512, 2048, 8192] if full else [2048], "num_warps": [4, 8]})
    for p in looped:
        yield _triton(
            prog,
            "triton-looped",
            p,
            triton_looped(prog),
            lambda s, p=p: [
                Launch(prog.op, grid1(s["m"]), _triton_args(prog, s, False), constexprs={"BLOCK_N": p["BLOCK_N"]}, num_warps=p["num_warps"])
            ],
        )
    if online:
        for p in product({"BLOCK_N": [512, 2048, 8192] if full else [2048, 8192], "num_warps": [4, 8] if full else [8]}):
            yield _triton(
                prog,
                "triton-online",
                p,
                triton_online(prog),
                lambda s, p=p: [
                    Launch(
                        prog.op, grid1(s["m"]), _triton_args(prog, s, False), constexprs={"BLOCK_N": p["BLOCK_N"]}, num_warps=p["num_warps"]
                    )
                ],
            )
    if full and prog.write is not None:
        for rows in (4, 16):
            yield _triton(
                prog,
                "triton-many-rows",
                {"ROWS": rows, "num_warps": 4},
                triton_many_rows(prog),
                lambda s, r=rows: [
                    Launch(
                        prog.op,
                        grid1(cdiv(s["m"], r)),
                        _triton_args(prog, s, True),
                        constexprs={"ROWS": r, "BLOCK_N": next_pow2(s["n"])},
                        num_warps=4,
                    )
                ],
                at_most("n", MANY_ROWS_MAX_N, "meant for short rows"),
            )


def _split_variants() -> Iterable[Variant]:
    """Cross-entropy only: long rows split over blocks (CUDA) or programs (Triton)."""
    for dtype in ("f32", "f16", "bf16"):
        full = dtype == "f32"
        prog = cross_entropy_program(dtype)
        for chunk in (4096, 16384) if full else (16384,):
            yield _split_cuda(prog, chunk)
        for p in product({"BLOCK_N": [4096, 8192] if full else [8192], "num_warps": [4, 8] if full else [8]}):
            yield _split_triton(prog, p)


def _split_cuda(prog: RowProgram, chunk: int) -> Variant:
    width = vector_width(prog.dtype)

    def launches(s: Sizes) -> list[Launch]:
        m, n, chunks = s["m"], s["n"], cdiv(s["n"], chunk)
        return [
            Launch(f"{prog.op}_partials", (m, chunks, 1), ("x", "part_max", "part_sum", i32(m), i32(n)), block1(256)),
            Launch(
                f"{prog.op}_finish",
                grid1(cdiv(m, 8)),
                ("x", *prog.out_args, "part_max", "part_sum", i32(m), i32(n), i32(chunks)),
                block1(256),
            ),
        ]

    return Variant(
        "cuda-split-row",
        "cuda",
        {"dtype": prog.dtype, "chunk": chunk, "vector": width, "block": 256},
        split_rows_code(prog, width, chunk),
        launches,
        _split_scratch(chunk),
        unsupported=unsupported(prog.dtype, divisible("n", width), _longer_than(chunk)),
    )


def _split_triton(prog: RowProgram, p: dict[str, Any]) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        m, n, chunks = s["m"], s["n"], cdiv(s["n"], p["BLOCK_N"])
        return [
            Launch(
                f"{prog.op}_partials",
                (m, chunks, 1),
                ("x", "part_max", "part_sum", i32(n)),
                constexprs={"BLOCK_N": p["BLOCK_N"]},
                num_warps=p["num_warps"],
            ),
            Launch(
                f"{prog.op}_finish",
                grid1(m),
                ("x", *prog.out_args, "part_max", "part_sum", i32(n), i32(chunks)),
                constexprs={"CHUNKS": next_pow2(chunks)},
                num_warps=1,
            ),
        ]

    return Variant(
        "triton-split-row",
        "triton",
        {"dtype": prog.dtype, **p},
        triton_split_rows(prog),
        launches,
        _split_scratch(p["BLOCK_N"]),
        unsupported=unsupported(prog.dtype, _longer_than(p["BLOCK_N"])),
    )


def _split_scratch(chunk: int) -> Callable[[Sizes], dict[str, TensorSpec]]:
    return lambda s: {name: TensorSpec((s["m"] * cdiv(s["n"], chunk),), "f32") for name in ("part_max", "part_sum")}


def _longer_than(chunk: int):
    return lambda s: None if s["n"] > chunk else f"a row of at most one chunk of {chunk}"


# --- operations -------------------------------------------------------------------------------------


def _rms_reference(torch: Any, x: Any, w: Any) -> Any:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + EPS) * w.float()).to(x.dtype)


def _rows(s: Sizes, init: str = "randn") -> TensorSpec:
    return TensorSpec((s["m"], s["n"]), s["dtype"], init)


OPS = [
    Op(
        name="softmax",
        bound="memory",
        sizes=NORM_SIZES,
        inputs=lambda s: {"x": _rows(s)},
        outputs=lambda s: {"y": _rows(s)},
        reference=lambda torch, inputs, sizes: {"y": torch.softmax(inputs["x"], dim=-1)},
        reference_code="def reference(x):\n    return torch.softmax(x, dim=-1)\n",
        variants=lambda: row_variants(softmax_program, NORM_SIZES, online=True, exp_axis=True),
    ),
    Op(
        name="layernorm",
        bound="memory",
        sizes=NORM_SIZES,
        inputs=lambda s: {"x": _rows(s), "w": TensorSpec((s["n"],), s["dtype"]), "b": TensorSpec((s["n"],), s["dtype"])},
        outputs=lambda s: {"y": _rows(s)},
        reference=lambda torch, inputs, sizes: {
            "y": torch.nn.functional.layer_norm(inputs["x"], (sizes["n"],), inputs["w"], inputs["b"], EPS)
        },
        reference_code=f"def reference(x, w, b):\n    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps={EPS})\n",
        variants=lambda: row_variants(layernorm_program, NORM_SIZES, online=False),
    ),
    Op(
        name="rmsnorm",
        bound="memory",
        sizes=NORM_SIZES,
        inputs=lambda s: {"x": _rows(s), "w": TensorSpec((s["n"],), s["dtype"])},
        outputs=lambda s: {"y": _rows(s)},
        reference=lambda torch, inputs, sizes: {"y": _rms_reference(torch, inputs["x"], inputs["w"])},
        reference_code=(
            f"def reference(x, w):\n    x32 = x.float()\n"
            f"    return (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + {EPS}) * w.float()).to(x.dtype)\n"
        ),
        variants=lambda: row_variants(rmsnorm_program, NORM_SIZES, online=False),
    ),
    Op(
        name="cross_entropy",
        bound="memory",
        sizes=CE_SIZES,
        inputs=lambda s: {"x": _rows(s), "target": TensorSpec((s["m"],), "i64", f"randint:0:{s['n']}")},
        outputs=lambda s: {"loss": TensorSpec((s["m"],), "f32")},
        reference=lambda torch, inputs, sizes: {
            "loss": torch.nn.functional.cross_entropy(inputs["x"].float(), inputs["target"], reduction="none")
        },
        reference_code='def reference(x, target):\n    return torch.nn.functional.cross_entropy(x.float(), target, reduction="none")\n',
        variants=lambda: [*row_variants(cross_entropy_program, CE_SIZES, online=True), *_split_variants()],
    ),
]
