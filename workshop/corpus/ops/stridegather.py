"""Gathers whose source address is arithmetic in the output index: hashed_take and blockperm_rows.

Neighbours of gather, flat_take and pick_columns, but here no index array is read: each kernel
computes where it reads from (a multiply and a modulo, or a divide and a remainder), so the
spread of a warp's reads is a function of a size entry (`stride`, `G`) that a reader of the
address expression can evaluate for neighbouring threads. Both size entries reach the kernels
as by-value launch arguments, never as compile-time constants.

- hashed_take: out[i] = x[(i * stride) % n] for i < m, x [n] fp32 (randn), out [m] fp32;
  stride 1 (a plain copy of x's head), 33 (every lane a new 32-byte sector), 4097 (every lane
  a new 16 KB page) and 1000003 (neighbours ~4 MB apart), all odd so with n a power of two the
  walk visits every element of x. n 4096 to 64M, m 4096 to 16M; i * stride passes 2^31, so the
  product is taken in 64 bits (stride is an i64 argument). CUDA families:
  - cuda-thread: one output per thread, the modulo per element; block, load (plain, __ldg,
    __ldcs: streaming, evict first);
  - cuda-items: ITEMS outputs per thread, all loads issued before the first store; order
    ("consecutive": a thread's outputs are neighbours, "strided": blockDim apart so a warp's
    stores coalesce), index ("mod": a 64-bit modulo per element, "step": one modulo per thread,
    then the address advances by a precomputed step and wraps with one compare); items, order,
    index;
  - cuda-grid-stride: a resident grid of blocks_per_sm blocks per SM loops over the output;
    blocks_per_sm, index (as above, the step being the grid's width), load (plain, __ldcs).
  Triton: triton-take (BLOCK outputs per program, int64 address arithmetic; BLOCK, num_warps,
  cache_modifier "" or ".cg").
- blockperm_rows: out[r, :] = x[perm(r), :] with perm(r) = (r % G) * (rows / G) + r / G, the
  transpose of a G x (rows / G) grid of rows: consecutive output rows read source rows rows / G
  apart. x [rows, d] fp32 or fp16 (the `dtype` size entry, randn), G in {2, 64, 1024} dividing
  rows; rows 1024 to 1M, d 16 (a 64-byte row: two sectors per gathered row) to 1024. fp16 gets
  every warp-row and block-row variant and a sample of the other two families. CUDA families:
  - cuda-thread: a thread per element from a flat index (`r = e / d`); block, load (plain,
    __ldcs);
  - cuda-warp-row: a warp per row, lanes over the columns, scalar or 16-byte loads (float4, or
    8 halves), each warp taking rows_per_warp neighbouring output rows; warps per block,
    vector, rows_per_warp;
  - cuda-block-row: a block per row, threads over the columns (most idle when d is short);
    block, vector, load (plain, __ldg).
  Triton: triton-tile (a program copies ROWS output rows x BLOCK_D columns, BLOCK_D capped at
  d's next power of two; ROWS, BLOCK_D, num_warps).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import one_launch
from workshop.corpus.ops.rowkit import TRITON_HEADER, divisible, next_pow2, resident_blocks, unsupported, vector_width
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
    Launch,
    Op,
    Scalar,
    Sizes,
    TensorSpec,
    Variant,
    cdiv,
    grid1,
    i32,
    product,
)

# A copy: every output is some input element, bit for bit.
EXACT = {"f32": 0.0, "f16": 0.0}
# How a CUDA kernel reads element `j` of `base` (the same builtins exist for __half and float4).
LOADS = {"plain": "{base}[{j}]", "ldg": "__ldg({base} + {j})", "ldcs": "__ldcs({base} + {j})"}


def _load(load: str, j: str, base: str = "x") -> str:
    return LOADS[load].format(base=base, j=j)


# --- hashed_take ---------------------------------------------------------------------------------

# A launch-bound walk, an L2-resident one, then 16M outputs from a 256 MB x at four strides.
HASHED_SIZES = [
    {"n": 4096, "m": 4096, "stride": 33},
    {"n": 1 << 20, "m": 1 << 20, "stride": 4097},
    {"n": 1 << 26, "m": 1 << 24, "stride": 1},
    {"n": 1 << 26, "m": 1 << 24, "stride": 33},
    {"n": 1 << 26, "m": 1 << 24, "stride": 4097},
    {"n": 1 << 26, "m": 1 << 24, "stride": 1000003},
]
HASHED_BLOCK = 256  # threads per block where the block size is not an axis
HASHED_SIGNATURE = (
    'extern "C" __global__ void hashed_take(const float* __restrict__ x, float* __restrict__ out, int n, int m, long long stride)'
)


def _hashed_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "out", i32(sizes["n"]), i32(sizes["m"]), Scalar("i64", sizes["stride"]))


def _hashed_thread(load: str) -> str:
    return f"""{CUDA_HEADER}
{HASHED_SIGNATURE} {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m) out[i] = {_load(load, "(long long)i * stride % n")};
}}
"""


def _hashed_items(items: int, order: str, index: str) -> str:
    if order == "consecutive":
        first, delta, offset = "blockIdx.x * blockDim.x * ITEMS + threadIdx.x * ITEMS", "1", "k"
    else:
        first, delta, offset = "blockIdx.x * blockDim.x * ITEMS + threadIdx.x", "blockDim.x", "k * blockDim.x"
    if index == "mod":
        setup = ""
        address = "        long long j = (long long)i * stride % n;\n"
        advance = ""
    else:
        # one 64-bit modulo per thread; afterwards j < n and step < n, so one subtraction wraps it
        setup = f"""    long long j = (long long)first * stride % n;
    const long long step = (long long){delta} * stride % n;
"""
        address = ""
        advance = "        j += step;\n        if (j >= n) j -= n;\n"
    return f"""{CUDA_HEADER}#define ITEMS {items}

{HASHED_SIGNATURE} {{
    const int first = {first};
{setup}    float v[ITEMS];
    // every load of the thread before the first store: ITEMS reads in flight
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) {{
        int i = first + {offset};
{address}        v[k] = i < m ? x[j] : 0.0f;
{advance}    }}
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) {{
        int i = first + {offset};
        if (i < m) out[i] = v[k];
    }}
}}
"""


def _hashed_grid_stride(index: str, load: str) -> str:
    if index == "mod":
        setup = ""
        body = f"out[i] = {_load(load, '(long long)i * stride % n')};"
    else:
        setup = """    long long j = (long long)i * stride % n;
    const long long step = (long long)width * stride % n;  // how far the source moves per lap
"""
        body = f"""{{
        out[i] = {_load(load, "j")};
        j += step;
        if (j >= n) j -= n;
    }}"""
    return f"""{CUDA_HEADER}
{HASHED_SIGNATURE} {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int width = gridDim.x * blockDim.x;
{setup}    for (; i < m; i += width) {body}
}}
"""


def _hashed_triton(cache: str) -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def hashed_take(x_ptr, out_ptr, n, m, stride, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < m
    # int64: i * stride passes 2^31 at the large sizes
    j = i.to(tl.int64) * stride % n
    values = tl.load(x_ptr + j, mask=mask, cache_modifier="{cache}")
    tl.store(out_ptr + i, values, mask=mask)
"""


def hashed_take_variants() -> Iterable[Variant]:
    for params in product({"block": [128, 512], "load": ["plain", "ldg", "ldcs"]}):
        block = params["block"]
        yield Variant(
            "cuda-thread",
            "cuda",
            params,
            _hashed_thread(params["load"]),
            one_launch("hashed_take", _hashed_args, lambda s, block=block: cdiv(s["m"], block), block),
        )
    for params in product({"items": [2, 4, 8], "order": ["consecutive", "strided"], "index": ["mod", "step"]}):
        items = params["items"]
        yield Variant(
            "cuda-items",
            "cuda",
            params,
            _hashed_items(items, params["order"], params["index"]),
            one_launch("hashed_take", _hashed_args, lambda s, items=items: cdiv(s["m"], HASHED_BLOCK * items), HASHED_BLOCK),
        )
    for params in product({"blocks_per_sm": [2, 8], "index": ["mod", "step"], "load": ["plain", "ldcs"]}):
        per_sm = params["blocks_per_sm"]
        yield Variant(
            "cuda-grid-stride",
            "cuda",
            params,
            _hashed_grid_stride(params["index"], params["load"]),
            one_launch(
                "hashed_take", _hashed_args, lambda s, per_sm=per_sm: resident_blocks(cdiv(s["m"], HASHED_BLOCK), per_sm), HASHED_BLOCK
            ),
        )
    for params in product({"BLOCK": [1024, 4096], "num_warps": [4, 8], "cache_modifier": ["", ".cg"]}):
        block, warps = params["BLOCK"], params["num_warps"]
        yield Variant(
            "triton-take",
            "triton",
            params,
            _hashed_triton(params["cache_modifier"]),
            lambda s, block=block, warps=warps: [
                Launch("hashed_take", grid1(cdiv(s["m"], block)), _hashed_args(s), constexprs={"BLOCK": block}, num_warps=warps)
            ],
        )


def _hashed_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    x = inputs["x"]
    i = torch.arange(sizes["m"], device=x.device, dtype=torch.int64)
    return {"out": x[(i * sizes["stride"]) % x.numel()]}


HASHED_TAKE = Op(
    name="hashed_take",
    bound="memory",
    sizes=HASHED_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],))},
    outputs=lambda s: {"out": TensorSpec((s["m"],))},
    reference=_hashed_reference,
    reference_code=(
        "def reference(x, m, stride):\n"
        "    i = torch.arange(m, device=x.device, dtype=torch.int64)\n"
        "    return x[(i * stride) % x.numel()]\n"
    ),
    variants=hashed_take_variants,
    tolerance=EXACT,
)

# --- blockperm_rows ------------------------------------------------------------------------------

# fp32: launch-bound, two halves interleaved (G 2), 1M 64-byte rows from 1024 groups, 4 KB rows;
# fp16: 256-byte rows from 1024 groups, 1 KB rows from 64. The large ones move 64 or 32 MB each way.
BLOCKPERM_SIZES = [
    {"rows": 1024, "d": 64, "G": 64, "dtype": "f32"},
    {"rows": 65536, "d": 256, "G": 2, "dtype": "f32"},
    {"rows": 1 << 20, "d": 16, "G": 1024, "dtype": "f32"},
    {"rows": 16384, "d": 1024, "G": 64, "dtype": "f32"},
    {"rows": 1 << 18, "d": 128, "G": 1024, "dtype": "f16"},
    {"rows": 32768, "d": 512, "G": 64, "dtype": "f16"},
]


def _perm_signature(dtype: str) -> str:
    ctype = CUDA_TYPES[dtype]
    return f'extern "C" __global__ void blockperm_rows(const {ctype}* __restrict__ x, {ctype}* __restrict__ out, int rows, int d, int G)'


def _perm_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "out", i32(sizes["rows"]), i32(sizes["d"]), i32(sizes["G"]))


# The source row of output row r: row (r % G, r / G) of the G x (rows / G) grid, read transposed.
SOURCE_ROW = "(long long)(r % G) * (rows / G) + r / G"


def _perm_thread(dtype: str, load: str) -> str:
    return f"""{CUDA_HEADER}
{_perm_signature(dtype)} {{
    int e = blockIdx.x * blockDim.x + threadIdx.x;  // rows * d < 2^31 at every size
    if (e >= rows * d) return;
    int r = e / d, c = e % d;
    long long src = {SOURCE_ROW};
    out[e] = {_load(load, "src * d + c")};
}}
"""


def _vec_define(vector: int) -> str:
    return f"#define VEC {vector}\n" if vector > 1 else ""


def _perm_row_copy(dtype: str, vector: int, load: str, first: str, step: str, pad: str) -> str:
    """Statements copying row `src` of x to row `r` of out, columns (or 16-byte packs) first, first + step, ..."""
    if vector == 1:
        return f"""{pad}const {CUDA_TYPES[dtype]}* line = x + src * d;
{pad}{CUDA_TYPES[dtype]}* dst = out + (long long)r * d;
{pad}for (int c = {first}; c < d; c += {step}) dst[c] = {_load(load, "c", "line")};
"""
    # VEC elements are one float4 whatever the dtype; d is a multiple of VEC, so rows start 16-byte aligned
    ctype, count = "float4", "d / VEC"
    return f"""{pad}const {ctype}* line = reinterpret_cast<const {ctype}*>(x + src * d);
{pad}{ctype}* dst = reinterpret_cast<{ctype}*>(out + (long long)r * d);
{pad}for (int c = {first}; c < {count}; c += {step}) dst[c] = {_load(load, "c", "line")};
"""


def _perm_warp(dtype: str, warps: int, vector: int, rows_per_warp: int) -> str:
    return f"""{CUDA_HEADER}#define WARPS {warps}
#define ROWS_PER_WARP {rows_per_warp}
{_vec_define(vector)}
{_perm_signature(dtype)} {{
    int lane = threadIdx.x % 32;
    int row0 = (blockIdx.x * WARPS + threadIdx.x / 32) * ROWS_PER_WARP;
    for (int r = row0; r < row0 + ROWS_PER_WARP && r < rows; ++r) {{
        long long src = {SOURCE_ROW};
{_perm_row_copy(dtype, vector, "plain", "lane", "32", "        ")}    }}
}}
"""


def _perm_block(dtype: str, vector: int, load: str) -> str:
    return f"""{CUDA_HEADER}{_vec_define(vector)}
{_perm_signature(dtype)} {{
    int r = blockIdx.x;
    long long src = {SOURCE_ROW};
{_perm_row_copy(dtype, vector, load, "threadIdx.x", "blockDim.x", "    ")}}}
"""


PERM_TRITON = f"""{TRITON_HEADER}

@triton.jit
def blockperm_rows(x_ptr, out_ptr, rows, d, G, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    c = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    src = (r % G) * (rows // G) + r // G
    mask = (r < rows)[:, None] & (c < d)[None, :]
    values = tl.load(x_ptr + src.to(tl.int64)[:, None] * d + c[None, :], mask=mask)
    tl.store(out_ptr + r.to(tl.int64)[:, None] * d + c[None, :], values, mask=mask)
"""


def _perm_cuda(family: str, params: dict[str, Any], code: str, blocks, block: int) -> Variant:
    checks = (divisible("d", params["vector"]),) if params.get("vector", 1) > 1 else ()
    return Variant(
        family,
        "cuda",
        params,
        code,
        one_launch("blockperm_rows", _perm_args, blocks, block),
        unsupported=unsupported(params["dtype"], *checks),
    )


def _perm_triton(params: dict[str, Any]) -> Variant:
    rows_per, block_d, warps = params["ROWS"], params["BLOCK_D"], params["num_warps"]

    def launches(s: Sizes) -> list[Launch]:
        width = min(block_d, next_pow2(s["d"]))  # no tile wider than the row
        return [
            Launch(
                "blockperm_rows",
                (cdiv(s["rows"], rows_per), cdiv(s["d"], width), 1),
                _perm_args(s),
                constexprs={"ROWS": rows_per, "BLOCK_D": width},
                num_warps=warps,
            )
        ]

    return Variant("triton-tile", "triton", params, PERM_TRITON, launches, unsupported=unsupported(params["dtype"]))


def blockperm_rows_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"  # fp16 gets a sample of each family
        wide = vector_width(dtype)
        for params in product({"dtype": [dtype], "block": [128, 256, 512] if full else [128, 512], "load": ["plain", "ldcs"]}):
            block = params["block"]
            yield _perm_cuda(
                "cuda-thread", params, _perm_thread(dtype, params["load"]), lambda s, block=block: cdiv(s["rows"] * s["d"], block), block
            )
        for params in product({"dtype": [dtype], "warps": [2, 8], "vector": [1, wide], "rows_per_warp": [1, 4]}):
            warps, per_block = params["warps"], params["warps"] * params["rows_per_warp"]
            yield _perm_cuda(
                "cuda-warp-row",
                params,
                _perm_warp(dtype, warps, params["vector"], params["rows_per_warp"]),
                lambda s, per_block=per_block: cdiv(s["rows"], per_block),
                32 * warps,
            )
        for params in product({"dtype": [dtype], "block": [64, 256], "vector": [1, wide], "load": ["plain", "ldg"]}):
            yield _perm_cuda(
                "cuda-block-row", params, _perm_block(dtype, params["vector"], params["load"]), lambda s: s["rows"], params["block"]
            )
        for params in product({"dtype": [dtype], "ROWS": [1, 4, 16], "BLOCK_D": [64, 256], "num_warps": [4, 8] if full else [4]}):
            yield _perm_triton(params)


def _perm_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    x, groups = inputs["x"], sizes["G"]
    r = torch.arange(x.shape[0], device=x.device, dtype=torch.int64)
    return {"out": x[(r % groups) * (x.shape[0] // groups) + r // groups]}


BLOCKPERM_ROWS = Op(
    name="blockperm_rows",
    bound="memory",
    sizes=BLOCKPERM_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["rows"], s["d"]), s["dtype"])},
    outputs=lambda s: {"out": TensorSpec((s["rows"], s["d"]), s["dtype"])},
    reference=_perm_reference,
    reference_code=(
        "def reference(x, G):\n"
        "    rows = x.shape[0]\n"
        "    r = torch.arange(rows, device=x.device)\n"
        "    return x[(r % G) * (rows // G) + r // G]\n"
    ),
    variants=blockperm_rows_variants,
    tolerance=EXACT,
)

OPS = [HASHED_TAKE, BLOCKPERM_ROWS]
