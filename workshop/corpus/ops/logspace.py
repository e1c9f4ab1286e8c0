"""Log-space row reductions: logsumexp_rows (one fp32 value per row) and log_softmax.

Both need a row's max and its sum of exp(x - max): two passes (max, then the sum) or one
online pass (a running max that rescales the sum when it grows). Rows are (rows, cols)
from 64 x 64 (launch-bound) through many short rows (65536 x 32), a few very long rows
(8 x 1M: one row per thread, warp or block leaves the GPU idle) to 8192 x 8192 in fp32,
fp16 and bf16. Kernels are written as users write them: `rows, cols`, `row * cols + j`,
`__restrict__` or not, float4 / half2 loads.

logsumexp_rows: out[row] = log(sum(exp(x[row, :]))) in fp32. CUDA families:
- thread-per-row: one thread walks a whole row (neighbouring threads cols apart: uncoalesced);
  block size, two-pass vs online, `__restrict__`;
- warp-per-row: shuffle reductions; warps per block, two-pass vs online, vector width, restrict;
- block-per-row: block reductions (warp shuffles, shared-memory tree, or the interleaved tree
  with divergence and bank conflicts); block size, two-pass vs online, vector width;
- split-row: blocks_per_row blocks share a row (partial max and sum each) and a tiny second
  kernel combines them; blocks per row, vector width — for rows too long for one block.
Triton: the whole row in one tile (num_warps), or a loop over CHUNK-wide tiles, two-pass or
online (CHUNK, num_warps).

log_softmax: y = x - logsumexp(x) per row, in the input dtype. CUDA families:
- warp-per-row: three passes (max, sum, write) vs two (online max and sum, write), the row
  re-read from global memory or held in registers (rows up to MAX_COLS), warps per block,
  vector width, accurate expf vs fast __expf, `__restrict__`;
- block-per-row: the same passes, the row re-read or cached in dynamic shared memory (an
  occupancy limiter), block size, vector width, expf vs __expf;
- unfused: a warp-per-row kernel writes each row's logsumexp, then an elementwise kernel
  (`idx / cols` per element) subtracts it; its block size, `__restrict__`.
Triton: the whole row in one tile (num_warps), or looped CHUNK-wide tiles with three or two
passes (CHUNK, num_warps, num_stages).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from workshop.corpus.ops.rowkit import (
    NEG_INF,
    TRITON_HEADER,
    at_least,
    at_most,
    cuda_prelude,
    cuda_reductions,
    divisible,
    next_pow2,
    unsupported,
)
from workshop.corpus.spec import (
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
)

SIZES = [
    {"rows": 64, "cols": 64, "dtype": "f32"},
    {"rows": 65536, "cols": 32, "dtype": "f32"},
    {"rows": 4096, "cols": 1000, "dtype": "f32"},
    {"rows": 8, "cols": 1 << 20, "dtype": "f32"},
    {"rows": 8192, "cols": 8192, "dtype": "f32"},
    {"rows": 8, "cols": 1 << 20, "dtype": "f16"},
    {"rows": 8192, "cols": 8192, "dtype": "f16"},
    {"rows": 8192, "cols": 8192, "dtype": "bf16"},
]
HALVES = ("f16", "bf16")
SERIAL_MAX_COLS = 8192  # one thread per row: longer rows take far too long
SMEM_MAX_COLS = 49152  # the row cached as fp32 in at most 192 KB of shared memory
REGISTER_MAX_COLS = 1024  # warp-per-row with the row in registers: 32 floats per lane
SPLIT_MIN_COLS = 8192  # split rows only where one row is long
PER_THREAD_TILE = 128  # Triton whole-row tiles: at most this many elements per thread
COMBINE_WARPS = 4  # split-row's second kernel: rows (warps) per block
# One vector load: float4 for fp32, the native pair types for the half types.
VECTOR = {"f32": 4, "f16": 2, "bf16": 2}
VECTOR_TYPE = {"f32": "float4", "f16": "__half2", "bf16": "__nv_bfloat162"}


# --- CUDA building blocks ----------------------------------------------------------------------------


def _unpack(dtype: str, pad: str) -> str:
    """C statements turning vector `q` into `float vals[VEC]`."""
    if dtype == "f32":
        return f"{pad}float vals[4] = {{q.x, q.y, q.z, q.w}};\n"
    to_float2 = {"f16": "__half22float2", "bf16": "__bfloat1622float2"}[dtype]
    return f"{pad}float2 f = {to_float2}(q);\n{pad}float vals[2] = {{f.x, f.y}};\n"


def _pack(dtype: str, lanes: list[str]) -> str:
    """C expression of one output vector from its float lanes."""
    if dtype == "f32":
        return f"make_float4({', '.join(lanes)})"
    return {"f16": "__floats2half2_rn", "bf16": "__floats2bfloat162_rn"}[dtype] + f"({', '.join(lanes)})"


def _indent(code: str, pad: str) -> str:
    return "".join(f"{pad}{line}\n" for line in code.split("\n"))


def online_add(exp: str) -> str:
    return f"""
// fold v into a running (max, sum of exp(x - max)): rescale the sum when the max grows
__device__ __forceinline__ void online_add(float& mx, float& sum, float v) {{
    if (v > mx) {{
        sum = sum * {exp}(mx - v) + 1.0f;
        mx = v;
    }} else {{
        sum += {exp}(v - mx);
    }}
}}
"""


@dataclass(frozen=True)
class RowWalk:
    """How a warp's lanes or a block's threads walk one row, and where the row lives between passes.

    `start`/`stride` step through vectors (VEC elements) of the row in global memory, or
    through elements of the cache. `cache`: "global" (re-read every pass), "smem" (the first
    pass fills dynamic shared memory; later passes read it after a block reduction's barrier),
    "registers" (a warp's lanes hold MAX_COLS / 32 elements each).
    """

    dtype: str
    vector: int
    start: str
    stride: str
    cache: str = "global"

    def pointers(self, write: bool) -> str:
        t = CUDA_TYPES[self.dtype]
        lines = f"    const {t}* xr = x + (size_t)row * cols;\n"
        if write:
            lines += f"    {t}* yr = y + (size_t)row * cols;\n"
        if self.vector > 1:
            vtype = VECTOR_TYPE[self.dtype]
            lines += f"    const {vtype}* xv = reinterpret_cast<const {vtype}*>(xr);\n"
            if write and self.cache == "global":
                lines += f"    {vtype}* yv = reinterpret_cast<{vtype}*>(yr);\n"
        if self.cache == "registers":
            lines += f"""    float r[MAX_COLS / 32];
    #pragma unroll
    for (int i = 0; i < MAX_COLS / 32; ++i) {{
        int j = i * 32 + lane;
        if (j < cols) r[i] = {cuda_load_as_float(self.dtype, "xr[j]")};
    }}
"""
        return lines

    def first(self, body: str) -> str:
        """A loop binding every element of the row to `float v` for `body` (filling the cache, if any)."""
        if self.cache == "registers":
            return self._registers(body)
        if self.vector == 1:
            fill = "\ncache[j] = v;" if self.cache == "smem" else ""
            element = cuda_load_as_float(self.dtype, "xr[j]")
            return f"    for (int j = {self.start}; j < cols; j += {self.stride}) {{\n        float v = {element};\n{_indent(body + fill, '        ')}    }}\n"
        fill = f"\ncache[j * {self.vector} + k] = v;" if self.cache == "smem" else ""
        return f"""    for (int j = {self.start}; j < cols / {self.vector}; j += {self.stride}) {{
        {VECTOR_TYPE[self.dtype]} q = xv[j];
{_unpack(self.dtype, "        ")}        #pragma unroll
        for (int k = 0; k < {self.vector}; ++k) {{
            float v = vals[k];
{_indent(body + fill, "            ")}        }}
    }}
"""

    def again(self, body: str) -> str:
        """A later pass over the row: from wherever it lives."""
        if self.cache == "smem":
            return f"    for (int j = {self.start}; j < cols; j += {self.stride}) {{\n        float v = cache[j];\n{_indent(body, '        ')}    }}\n"
        return self.first(body)

    def _registers(self, body: str) -> str:
        return f"""    #pragma unroll
    for (int i = 0; i < MAX_COLS / 32; ++i) {{
        if (i * 32 + lane < cols) {{
            float v = r[i];
{_indent(body, "            ")}        }}
    }}
"""

    def write(self) -> str:
        """y = x - lse over the row."""
        store = lambda e: cuda_store_from_float(self.dtype, e)  # noqa: E731
        if self.cache == "registers":
            return f"""    #pragma unroll
    for (int i = 0; i < MAX_COLS / 32; ++i) {{
        int j = i * 32 + lane;
        if (j < cols) yr[j] = {store("r[i] - lse")};
    }}
"""
        if self.cache == "smem":
            return f"    for (int j = {self.start}; j < cols; j += {self.stride}) yr[j] = {store('cache[j] - lse')};\n"
        if self.vector == 1:
            return f"    for (int j = {self.start}; j < cols; j += {self.stride}) yr[j] = {store(cuda_load_as_float(self.dtype, 'xr[j]') + ' - lse')};\n"
        lanes = [f"vals[{k}] - lse" for k in range(self.vector)]
        return f"""    for (int j = {self.start}; j < cols / {self.vector}; j += {self.stride}) {{
        {VECTOR_TYPE[self.dtype]} q = xv[j];
{_unpack(self.dtype, "        ")}        yv[j] = {_pack(self.dtype, lanes)};
    }}
"""


def row_stats(walk: RowWalk, online: bool, scope: str, exp: str) -> str:
    """Statements leaving the row's max in `mx` and its sum of exp(x - mx) in `sum`, shared by every
    thread of `scope` ("thread", "warp" or "block": the reductions it calls)."""

    def reduce(kind: str, value: str) -> str:
        return "" if scope == "thread" else f"    {value} = {scope}_{kind}({value});\n"

    if not online:
        return (
            f"    float mx = {NEG_INF};\n{walk.first('mx = fmaxf(mx, v);')}{reduce('max', 'mx')}"
            f"    float sum = 0.0f;\n{walk.again(f'sum += {exp}(v - mx);')}{reduce('sum', 'sum')}"
        )
    code = f"    float mx = {NEG_INF}, sum = 0.0f;\n{walk.first('online_add(mx, sum, v);')}"
    if scope == "thread":
        return code
    # lanes with no element keep (-inf, 0): exp(-inf) = 0 drops them from the sum
    return code + f"    float row_max = {scope}_max(mx);\n    sum = {scope}_sum(sum * {exp}(mx - row_max));\n    mx = row_max;\n"


def _signature(kernel: str, dtype: str, restrict: bool, out: str) -> str:
    """`out` is "lse" (one fp32 value per row) or "y" (the row in the input dtype)."""
    out_type = "float" if out == "lse" else CUDA_TYPES[dtype]
    return (
        f'extern "C" __global__ void {kernel}({cuda_pointer(CUDA_TYPES[dtype], "x", restrict)}, '
        f"{cuda_pointer(out_type, out, restrict, const=False)}, int rows, int cols)"
    )


def _warp_row_head() -> str:
    return "    int row = blockIdx.x * WARPS + threadIdx.x / 32;\n    int lane = threadIdx.x % 32;\n    if (row >= rows) return;\n"


# --- logsumexp_rows: CUDA -----------------------------------------------------------------------------


def lse_thread_code(p: dict[str, Any]) -> str:
    """One thread per row: each thread walks its own row, so a warp's loads are cols elements apart."""
    online = p["passes"] == "online"
    if online:
        loops = f"""    float mx = {NEG_INF}, sum = 0.0f;
    for (int col = 0; col < cols; col++) online_add(mx, sum, x[row * cols + col]);
"""
    else:
        loops = f"""    float mx = {NEG_INF};
    for (int col = 0; col < cols; col++) mx = fmaxf(mx, x[row * cols + col]);
    float sum = 0.0f;
    for (int col = 0; col < cols; col++) sum += __expf(x[row * cols + col] - mx);
"""
    return f"""{cuda_prelude("f32")}{online_add("__expf") if online else ""}
{_signature("logsumexp_rows", "f32", p["restrict"], "lse")} {{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
{loops}    lse[row] = mx + logf(sum);
}}
"""


def lse_warp_code(p: dict[str, Any]) -> str:
    online = p["passes"] == "online"
    walk = RowWalk(p["dtype"], p["vector"], "lane", "32")
    return f"""{cuda_prelude(p["dtype"], {"WARPS": p["warps"]})}{cuda_reductions(("max", "sum"))}{online_add("__expf") if online else ""}
{_signature("logsumexp_rows", p["dtype"], p["restrict"], "lse")} {{
{_warp_row_head()}{walk.pointers(False)}{row_stats(walk, online, "warp", "__expf")}    if (lane == 0) lse[row] = mx + logf(sum);
}}
"""


def lse_block_code(p: dict[str, Any]) -> str:
    online = p["passes"] == "online"
    walk = RowWalk(p["dtype"], p["vector"], "threadIdx.x", "BLOCK")
    return f"""{cuda_prelude(p["dtype"], {"BLOCK": p["block"]})}{cuda_reductions(("max", "sum"), p["reduction"])}{online_add("__expf") if online else ""}
{_signature("logsumexp_rows", p["dtype"], True, "lse")} {{
    int row = blockIdx.x;
{walk.pointers(False)}{row_stats(walk, online, "block", "__expf")}    if (threadIdx.x == 0) lse[row] = mx + logf(sum);
}}
"""


def lse_split_code(p: dict[str, Any]) -> str:
    """Grid (blocks_per_row, rows): each block folds every gridDim.x-th vector of its row; a warp per row combines."""
    dtype, vector = p["dtype"], p["vector"]
    walk = RowWalk(dtype, vector, "blockIdx.x * BLOCK + threadIdx.x", "gridDim.x * BLOCK")
    return f"""{cuda_prelude(dtype, {"BLOCK": p["block"], "WARPS": COMBINE_WARPS})}{cuda_reductions(("max", "sum"), "shuffle")}{online_add("__expf")}
extern "C" __global__ void lse_partials(const {CUDA_TYPES[dtype]}* __restrict__ x, float* __restrict__ part_max, float* __restrict__ part_sum, int rows, int cols) {{
    int row = blockIdx.y;
{walk.pointers(False)}{row_stats(walk, True, "block", "__expf")}    if (threadIdx.x == 0) {{
        part_max[row * gridDim.x + blockIdx.x] = mx;
        part_sum[row * gridDim.x + blockIdx.x] = sum;
    }}
}}

extern "C" __global__ void lse_combine(const float* __restrict__ part_max, const float* __restrict__ part_sum, float* __restrict__ lse, int rows, int parts) {{
{_warp_row_head()}    float mx = {NEG_INF}, sum = 0.0f;
    for (int i = lane; i < parts; i += 32) {{
        float m = part_max[row * parts + i], s = part_sum[row * parts + i];
        if (m == {NEG_INF}) continue;  // a block past the end of the row saw no element
        float top = fmaxf(mx, m);
        sum = sum * __expf(mx - top) + s * __expf(m - top);
        mx = top;
    }}
    float row_max = warp_max(mx);
    sum = warp_sum(sum * __expf(mx - row_max));
    if (lane == 0) lse[row] = row_max + logf(sum);
}}
"""


# --- log_softmax: CUDA --------------------------------------------------------------------------------


def log_softmax_warp_code(p: dict[str, Any]) -> str:
    online = p["passes"] == "two"
    walk = RowWalk(p["dtype"], p["vector"], "lane", "32", p["cache"])
    defines = {"WARPS": p["warps"], **({"MAX_COLS": REGISTER_MAX_COLS} if p["cache"] == "registers" else {})}
    return f"""{cuda_prelude(p["dtype"], defines)}{cuda_reductions(("max", "sum"))}{online_add(p["exp"]) if online else ""}
{_signature("log_softmax", p["dtype"], p["restrict"], "y")} {{
{_warp_row_head()}{walk.pointers(True)}{row_stats(walk, online, "warp", p["exp"])}    float lse = mx + logf(sum);
{walk.write()}}}
"""


def log_softmax_block_code(p: dict[str, Any]) -> str:
    online = p["passes"] == "two"
    walk = RowWalk(p["dtype"], p["vector"], "threadIdx.x", "BLOCK", p["cache"])
    cache = "    extern __shared__ float cache[];  // the row as fp32: cols * 4 bytes\n" if p["cache"] == "smem" else ""
    return f"""{cuda_prelude(p["dtype"], {"BLOCK": p["block"]})}{cuda_reductions(("max", "sum"), "shuffle")}{online_add(p["exp"]) if online else ""}
{_signature("log_softmax", p["dtype"], True, "y")} {{
{cache}    int row = blockIdx.x;
{walk.pointers(True)}{row_stats(walk, online, "block", p["exp"])}    float lse = mx + logf(sum);
{walk.write()}}}
"""


def log_softmax_unfused_code(p: dict[str, Any]) -> str:
    """What a user splits it into: per-row logsumexp (warp per row, online), then an elementwise subtract."""
    dtype, restrict = p["dtype"], p["restrict"]
    t = CUDA_TYPES[dtype]
    walk = RowWalk(dtype, 1, "lane", "32")
    value = cuda_store_from_float(dtype, f"{cuda_load_as_float(dtype, 'x[idx]')} - lse[idx / cols]")
    return f"""{cuda_prelude(dtype, {"WARPS": COMBINE_WARPS})}{cuda_reductions(("max", "sum"))}{online_add("__expf")}
{_signature("row_lse", dtype, restrict, "lse")} {{
{_warp_row_head()}{walk.pointers(False)}{row_stats(walk, True, "warp", "__expf")}    if (lane == 0) lse[row] = mx + logf(sum);
}}

extern "C" __global__ void subtract_lse({cuda_pointer(t, "x", restrict)}, {cuda_pointer("float", "lse", restrict)}, {cuda_pointer(t, "y", restrict, const=False)}, int rows, int cols) {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < rows * cols) y[idx] = {value};
}}
"""


# --- Triton -------------------------------------------------------------------------------------------


def triton_whole_row(op: str) -> str:
    """One program per row, the whole row in one BLOCK-wide tile (BLOCK = next power of two of cols)."""
    if op == "logsumexp_rows":
        params, finish = "x_ptr, lse_ptr, cols", "    tl.store(lse_ptr + row, mx + tl.log(total))\n"
    else:
        params = "x_ptr, y_ptr, cols"
        finish = "    lse = mx + tl.log(total)\n    tl.store(y_ptr + row * cols + offs, (v - lse).to(y_ptr.dtype.element_ty), mask=offs < cols)\n"
    return f"""{TRITON_HEADER}

@triton.jit
def {op}({params}, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=float("-inf")).to(tl.float32)
    mx = tl.max(v, axis=0)
    total = tl.sum(tl.exp(v - mx), axis=0)
{finish}"""


def triton_chunked(op: str, online: bool) -> str:
    """One program per row looping over CHUNK-wide tiles: max then sum (two loops), or one online loop
    keeping a running max and sum per tile lane (rescaled lane by lane, reduced once at the end)."""
    load = '        v = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=float("-inf")).to(tl.float32)\n'
    head = "    for start in range(0, cols, CHUNK):\n        offs = start + tl.arange(0, CHUNK)\n"
    if online:
        stats = f"""    m = tl.full([CHUNK], -1e30, tl.float32)  # finite: -inf - (-inf) would be NaN
    s = tl.zeros([CHUNK], dtype=tl.float32)
{head}{load}        m_new = tl.maximum(m, v)
        s = s * tl.exp(m - m_new) + tl.exp(v - m_new)
        m = m_new
    mx = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - mx), axis=0)
"""
    else:
        stats = f"""    m = tl.full([CHUNK], float("-inf"), tl.float32)
{head}{load}        m = tl.maximum(m, v)
    mx = tl.max(m, axis=0)
    s = tl.zeros([CHUNK], dtype=tl.float32)
{head}{load}        s += tl.exp(v - mx)
    total = tl.sum(s, axis=0)
"""
    if op == "logsumexp_rows":
        params, finish = "x_ptr, lse_ptr, cols", "    tl.store(lse_ptr + row, mx + tl.log(total))\n"
    else:
        params = "x_ptr, y_ptr, cols"
        finish = f"""    lse = mx + tl.log(total)
{head}        v = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * cols + offs, (v - lse).to(y_ptr.dtype.element_ty), mask=offs < cols)
"""
    return f"""{TRITON_HEADER}

@triton.jit
def {op}({params}, CHUNK: tl.constexpr):
    row = tl.program_id(0)
{stats}{finish}"""


# --- variants -----------------------------------------------------------------------------------------


def _args(out: str) -> Callable[[Sizes], tuple[Any, ...]]:
    return lambda s: ("x", out, i32(s["rows"]), i32(s["cols"]))


def _cuda(
    op: str, family: str, p: dict[str, Any], code: str, blocks: Callable[[Sizes], int], threads: int, out: str, *checks, smem: bool = False
) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        return [Launch(op, grid1(blocks(s)), _args(out)(s), block1(threads), shared_bytes=4 * s["cols"] if smem else 0)]

    return Variant(family, "cuda", p, code, launches, unsupported=unsupported(p["dtype"], *checks))


def _vector_checks(p: dict[str, Any]) -> list:
    return [divisible("cols", p["vector"])] if p["vector"] > 1 else []


def _whole_row_fits(warps: int):
    limit = PER_THREAD_TILE * 32 * warps
    return lambda s: (
        None if next_pow2(s["cols"]) <= limit else f"a {next_pow2(s['cols'])}-wide tile is over {PER_THREAD_TILE} elements per thread"
    )


def _triton_whole_row(op: str, out: str, p: dict[str, Any]) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        return [
            Launch(op, grid1(s["rows"]), ("x", out, i32(s["cols"])), constexprs={"BLOCK": next_pow2(s["cols"])}, num_warps=p["num_warps"])
        ]

    return Variant(
        "triton-whole-row",
        "triton",
        p,
        triton_whole_row(op),
        launches,
        unsupported=unsupported(p["dtype"], _whole_row_fits(p["num_warps"])),
    )


def _triton_chunked(op: str, out: str, p: dict[str, Any], online: bool) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        return [
            Launch(
                op,
                grid1(s["rows"]),
                ("x", out, i32(s["cols"])),
                constexprs={"CHUNK": p["CHUNK"]},
                num_warps=p["num_warps"],
                num_stages=p.get("num_stages"),
            )
        ]

    return Variant("triton-chunked", "triton", p, triton_chunked(op, online), launches, unsupported=unsupported(p["dtype"]))


def _lse_split(p: dict[str, Any]) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        rows, cols, parts = s["rows"], s["cols"], p["blocks_per_row"]
        return [
            Launch("lse_partials", (parts, rows, 1), ("x", "part_max", "part_sum", i32(rows), i32(cols)), block1(p["block"])),
            Launch(
                "lse_combine",
                grid1(cdiv(rows, COMBINE_WARPS)),
                ("part_max", "part_sum", "lse", i32(rows), i32(parts)),
                block1(32 * COMBINE_WARPS),
            ),
        ]

    def scratch(s: Sizes) -> dict[str, TensorSpec]:
        return {name: TensorSpec((s["rows"] * p["blocks_per_row"],), "f32") for name in ("part_max", "part_sum")}

    checks = [at_least("cols", SPLIT_MIN_COLS, "meant for long rows"), *_vector_checks(p)]
    return Variant("cuda-split-row", "cuda", p, lse_split_code(p), launches, scratch, unsupported=unsupported(p["dtype"], *checks))


def lse_variants() -> Iterable[Variant]:
    op, out = "logsumexp_rows", "lse"
    serial = at_most("cols", SERIAL_MAX_COLS, "a serial row is too slow")
    for p in around(
        {"dtype": "f32", "block": 128, "passes": "two", "restrict": True}, block=[32, 512], passes=["online"], restrict=[False]
    ):
        yield _cuda(op, "cuda-thread-per-row", p, lse_thread_code(p), lambda s, p=p: cdiv(s["rows"], p["block"]), p["block"], out, serial)
    for dtype in ("f32", *HALVES):
        full = dtype == "f32"
        width = VECTOR[dtype]
        warp = {"dtype": dtype, "warps": 4, "passes": "two", "vector": 1, "restrict": True}
        warp_settings = around(warp, warps=[1, 8], passes=["online"], vector=[width], restrict=[False]) if full else [warp]
        for p in [*warp_settings, {**warp, "passes": "online", "vector": width}]:
            yield _cuda(
                op,
                "cuda-warp-per-row",
                p,
                lse_warp_code(p),
                lambda s, p=p: cdiv(s["rows"], p["warps"]),
                32 * p["warps"],
                out,
                *_vector_checks(p),
            )
        block = {"dtype": dtype, "block": 256, "passes": "two", "reduction": "shuffle", "vector": 1}
        block_settings = (
            around(block, block=[128, 512, 1024], passes=["online"], reduction=["smem", "interleaved"], vector=[width]) if full else [block]
        )
        for p in [*block_settings, {**block, "passes": "online", "vector": width}]:
            yield _cuda(op, "cuda-block-per-row", p, lse_block_code(p), lambda s: s["rows"], p["block"], out, *_vector_checks(p))
        split = {"dtype": dtype, "blocks_per_row": 32, "block": 256, "vector": width}
        for p in around(split, blocks_per_row=[8, 128], vector=[1]) if full else [split]:
            yield _lse_split(p)
        for warps in [1, 2, 4, 8, 16] if full else [8]:
            yield _triton_whole_row(op, out, {"dtype": dtype, "num_warps": warps})
        chunked = {"dtype": dtype, "CHUNK": 1024, "num_warps": 4, "passes": "two"}
        chunked_settings = (
            around(chunked, CHUNK=[256, 4096], num_warps=[8], passes=["online"]) if full else around(chunked, passes=["online"])
        )
        for p in [*chunked_settings, *([{**chunked, "CHUNK": 4096, "passes": "online"}] if full else [])]:
            yield _triton_chunked(op, out, p, p["passes"] == "online")


def log_softmax_variants() -> Iterable[Variant]:
    op, out = "log_softmax", "y"
    for dtype in ("f32", *HALVES):
        full = dtype == "f32"
        width = VECTOR[dtype]
        warp = {"dtype": dtype, "warps": 4, "passes": "three", "cache": "global", "vector": 1, "exp": "__expf", "restrict": True}
        warp_settings = (
            around(warp, warps=[1, 8], passes=["two"], cache=["registers"], vector=[width], exp=["expf"], restrict=[False])
            if full
            else [warp]
        )
        for p in [*warp_settings, {**warp, "passes": "two", "vector": width}]:
            checks = [
                *_vector_checks(p),
                *([at_most("cols", REGISTER_MAX_COLS, "longer than the registers hold")] if p["cache"] == "registers" else []),
            ]
            yield _cuda(
                op,
                "cuda-warp-per-row",
                p,
                log_softmax_warp_code(p),
                lambda s, p=p: cdiv(s["rows"], p["warps"]),
                32 * p["warps"],
                out,
                *checks,
            )
        block = {"dtype": dtype, "block": 256, "passes": "three", "cache": "global", "vector": 1, "exp": "__expf"}
        block_settings = around(block, block=[128, 1024], passes=["two"], cache=["smem"], vector=[width], exp=["expf"]) if full else [block]
        for p in [*block_settings, {**block, "passes": "two", "cache": "smem", "vector": width}]:
            smem = p["cache"] == "smem"
            checks = [*_vector_checks(p), *([at_most("cols", SMEM_MAX_COLS, "the row does not fit shared memory")] if smem else [])]
            yield _cuda(op, "cuda-block-per-row", p, log_softmax_block_code(p), lambda s: s["rows"], p["block"], out, *checks, smem=smem)
        unfused = {"dtype": dtype, "block": 256, "restrict": True}
        for p in around(unfused, block=[128, 1024], restrict=[False]) if full else [unfused]:
            yield _unfused(p)
        for warps in [2, 4, 8, 16] if full else [8]:
            yield _triton_whole_row(op, out, {"dtype": dtype, "num_warps": warps})
        chunked = {"dtype": dtype, "CHUNK": 1024, "num_warps": 4, "num_stages": 2, "passes": "three"}
        chunked_settings = (
            around(chunked, CHUNK=[256, 4096], num_warps=[8], num_stages=[1, 3], passes=["two"])
            if full
            else around(chunked, passes=["two"])
        )
        for p in chunked_settings:
            yield _triton_chunked(op, out, p, p["passes"] == "two")


def _unfused(p: dict[str, Any]) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        rows, cols = s["rows"], s["cols"]
        return [
            Launch("row_lse", grid1(cdiv(rows, COMBINE_WARPS)), ("x", "lse", i32(rows), i32(cols)), block1(32 * COMBINE_WARPS)),
            Launch("subtract_lse", grid1(cdiv(rows * cols, p["block"])), ("x", "lse", "y", i32(rows), i32(cols)), block1(p["block"])),
        ]

    return Variant(
        "cuda-unfused",
        "cuda",
        p,
        log_softmax_unfused_code(p),
        launches,
        lambda s: {"lse": TensorSpec((s["rows"],), "f32")},
        unsupported=unsupported(p["dtype"]),
    )


# --- operations ---------------------------------------------------------------------------------------


def _rows(s: Sizes) -> TensorSpec:
    return TensorSpec((s["rows"], s["cols"]), s["dtype"])


OPS = [
    Op(
        name="logsumexp_rows",
        bound="memory",
        sizes=SIZES,
        inputs=lambda s: {"x": _rows(s)},
        outputs=lambda s: {"lse": TensorSpec((s["rows"],), "f32")},
        reference=lambda torch, inputs, sizes: {"lse": torch.logsumexp(inputs["x"].float(), dim=1)},
        reference_code="def reference(x):\n    return torch.logsumexp(x.float(), dim=1)\n",
        variants=lse_variants,
    ),
    Op(
        name="log_softmax",
        bound="memory",
        sizes=SIZES,
        inputs=lambda s: {"x": _rows(s)},
        outputs=lambda s: {"y": _rows(s)},
        reference=lambda torch, inputs, sizes: {"y": torch.log_softmax(inputs["x"], dim=-1)},
        reference_code="def reference(x):\n    return torch.log_softmax(x, dim=-1)\n",
        variants=log_softmax_variants,
    ),
]
