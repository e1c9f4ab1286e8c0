"""Counting and row selection: bincount (an integer histogram) and index_select_rows.

- bincount: counts[v] = how many elements of an int32 x equal v, for v in [0, bins). The
  contention is part of the problem: 16 bins (every warp hits the same few addresses), 4096
  (a block's private copy fits shared memory easily) and 1<<20 (4 MB of counters: few
  collisions, no shared-memory copy possible), n from 4096 to 1<<26. Every variant clears
  the counts first (a ZERO launch). CUDA: cuda-atomic (`int idx = ...; atomicAdd(&counts[x[idx]], 1)`;
  block, restrict); cuda-items-per-thread (one pass, ITEMS elements per thread, strided so
  that a warp's loads are coalesced or a contiguous chunk per thread; warp aggregation with
  __match_any_sync: one atomic per distinct value in a warp); cuda-grid-stride (a grid of
  blocks_per_sm x 132 blocks loops over x with global atomics; aggregation, restrict);
  cuda-shared-private (a block-private histogram in dynamic shared memory, merged with one
  global atomic per bin, or per non-zero bin; block, blocks_per_sm, aggregation). Triton:
  triton-atomic (tl.atomic_add per element; BLOCK, num_warps) and triton-histogram
  (tl.histogram of a BLOCK then an atomic merge, one pass or persistent programs that keep
  the histogram in registers across blocks).
- index_select_rows: out[i, :] = table[idx[i], :] (idx int64, uniform over the table's rows),
  fp32 and fp16, rows of 16 to 1024 elements. A pure copy, so loads move raw bytes: a
  "vector" of 1 copies elements, wider ones float2/float4 packs (16 bytes). CUDA:
  cuda-thread-per-element (`tid / d`, `tid % d` on a flat id in 32- or 64-bit arithmetic;
  block, restrict), cuda-warp-per-row (warps per block, vector, __ldg or plain loads),
  cuda-block-per-row (block, vector), cuda-rows-2d (blockDim.x threads per row sized to the
  row, 256 / blockDim.x rows per block; restrict). Triton: triton-2d (BLOCK_N rows x
  BLOCK_D columns per program; num_warps) and triton-row-loop (BLOCK_N rows per program
  looping over the columns).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import ELEMENT_BYTES, MAX_SHARED_BYTES
from workshop.corpus.ops.rowkit import TRITON_HEADER, divisible, resident_blocks, unsupported
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
    ZERO,
    Launch,
    Op,
    Sizes,
    TensorSpec,
    Variant,
    block1,
    cdiv,
    cuda_pointer,
    grid1,
    i32,
    product,
)

# --- bincount ------------------------------------------------------------------------------------

# 16 bins: ~262k same-address atomics per bin at n = 1<<22 (the naive kernels take ms);
# 1<<20 bins: 4 MB of counters, beyond any shared-memory copy.
BINCOUNT_SIZES = [
    {"n": 4096, "bins": 16},
    {"n": 1 << 22, "bins": 16},
    {"n": 1 << 24, "bins": 4096},
    {"n": 1 << 26, "bins": 4096},
    {"n": 1 << 24, "bins": 1 << 20},
]
BINCOUNT_BLOCK = 256  # threads per block where the block size is not an axis
PERSISTENT_PROGRAMS_PER_SM = 4
HISTOGRAM_MAX_WORK = 1 << 24  # BLOCK x BINS of one tl.histogram: 2**26 hung an H100 run (ops.scan)


def _add_one(aggregate: bool) -> str:
    """add_one(hist, v): count v (skipped when negative, the filler of lanes past the end).

    Aggregated, every lane of the warp must call it: lanes holding the same value elect
    the first of them to add their number.
    """
    if aggregate:
        body = """    unsigned peers = __match_any_sync(0xffffffffu, v);
    if (v >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(hist + v, __popc(peers));"""
    else:
        body = "    if (v >= 0) atomicAdd(hist + v, 1);"
    return f"""
__device__ __forceinline__ void add_one(int* hist, int v) {{
{body}
}}
"""


def _bincount_signature(restrict: bool = True, with_bins: bool = False) -> str:
    bins = ", int bins" if with_bins else ""
    return f'extern "C" __global__ void bincount({cuda_pointer("int", "x", restrict)}, {cuda_pointer("int", "counts", restrict, False)}, int n{bins})'


def _bincount_atomic(restrict: bool) -> str:
    return f"""{CUDA_HEADER}
{_bincount_signature(restrict)} {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) atomicAdd(&counts[x[idx]], 1);
}}
"""


def _bincount_items(items: int, coalesced: bool, aggregate: bool) -> str:
    """One pass: a block counts blockDim.x * ITEMS elements, no thread leaves early."""
    if coalesced:
        first, step = "blockIdx.x * blockDim.x * ITEMS + threadIdx.x", "k * blockDim.x"
    else:
        first, step = "(blockIdx.x * blockDim.x + threadIdx.x) * ITEMS", "k"
    return f"""{CUDA_HEADER}
#define ITEMS {items}
{_add_one(aggregate)}
{_bincount_signature()} {{
    int first = {first};
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) {{
        int i = first + {step};
        add_one(counts, i < n ? x[i] : -1);
    }}
}}
"""


# The grid-stride loop: `base` is the same for the whole block, so every lane of a warp runs
# the same iterations (needed by __match_any_sync) and lanes past n count -1.
GRID_STRIDE_LOOP = """    for (int base = blockIdx.x * blockDim.x; base < n; base += gridDim.x * blockDim.x) {{
        int i = base + threadIdx.x;
        add_one({target}, i < n ? x[i] : -1);
    }}
"""


def _bincount_grid_stride(aggregate: bool, restrict: bool) -> str:
    return f"""{CUDA_HEADER}{_add_one(aggregate)}
{_bincount_signature(restrict)} {{
{GRID_STRIDE_LOOP.format(target="counts")}}}
"""


def _bincount_shared(aggregate: bool, skip_zero: bool) -> str:
    merge = "if (local[b] > 0) atomicAdd(&counts[b], local[b]);" if skip_zero else "atomicAdd(&counts[b], local[b]);"
    return f"""{CUDA_HEADER}{_add_one(aggregate)}
{_bincount_signature(with_bins=True)} {{
    extern __shared__ int local[];  // this block's histogram
    for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
    __syncthreads();
{GRID_STRIDE_LOOP.format(target="local")}    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {merge}
}}
"""


BINCOUNT_TRITON_ATOMIC = f"""{TRITON_HEADER}

@triton.jit
def bincount(x_ptr, counts_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    values = tl.load(x_ptr + offsets, mask=mask, other=0)
    tl.atomic_add(counts_ptr + values, 1, mask=mask)
"""

BINCOUNT_TRITON_HISTOGRAM = f"""{TRITON_HEADER}

@triton.jit
def bincount(x_ptr, counts_ptr, n, BLOCK: tl.constexpr, BINS: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    hist = tl.histogram(tl.load(x_ptr + offsets, mask=mask, other=0), BINS)
    bins = tl.arange(0, BINS)
    # lanes past n were counted as value 0
    hist -= tl.where(bins == 0, BLOCK - tl.sum(mask.to(tl.int32), axis=0), 0)
    tl.atomic_add(counts_ptr + bins, hist, mask=hist != 0)
"""

BINCOUNT_TRITON_HISTOGRAM_PERSISTENT = f"""{TRITON_HEADER}

@triton.jit
def bincount(x_ptr, counts_ptr, n, BLOCK: tl.constexpr, BINS: tl.constexpr):
    # each program walks every num_programs-th block and merges its histogram once
    hist = tl.zeros([BINS], dtype=tl.int32)
    padding = 0
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < n
        hist += tl.histogram(tl.load(x_ptr + offsets, mask=mask, other=0), BINS)
        padding += BLOCK - tl.sum(mask.to(tl.int32), axis=0)
    bins = tl.arange(0, BINS)
    hist -= tl.where(bins == 0, padding, 0)
    tl.atomic_add(counts_ptr + bins, hist, mask=hist != 0)
"""


def _cleared(*launches: Launch) -> list[Launch]:
    """Atomics add into counts, so each call clears it first."""
    return [Launch(ZERO, grid1(1), ("counts",)), *launches]


def _bincount_args(sizes: Sizes, with_bins: bool = False) -> tuple[Any, ...]:
    return ("x", "counts", i32(sizes["n"])) + ((i32(sizes["bins"]),) if with_bins else ())


def _shared_fits(sizes: Sizes) -> str | None:
    return None if sizes["bins"] * 4 <= MAX_SHARED_BYTES else "the bins do not fit shared memory"


def bincount_variants() -> Iterable[Variant]:
    for params in product({"block": [128, 512], "restrict": [True, False]}):
        block = params["block"]
        yield Variant(
            "cuda-atomic",
            "cuda",
            params,
            _bincount_atomic(params["restrict"]),
            lambda s, block=block: _cleared(Launch("bincount", grid1(cdiv(s["n"], block)), _bincount_args(s), block1(block))),
        )
    for params in product({"items": [2, 8], "coalesced": [True, False], "aggregate": [False, True]}):
        items = params["items"]
        yield Variant(
            "cuda-items-per-thread",
            "cuda",
            params,
            _bincount_items(items, params["coalesced"], params["aggregate"]),
            lambda s, items=items: _cleared(
                Launch("bincount", grid1(cdiv(s["n"], BINCOUNT_BLOCK * items)), _bincount_args(s), block1(BINCOUNT_BLOCK))
            ),
        )
    for params in product({"blocks_per_sm": [2, 8], "aggregate": [False, True], "restrict": [True, False]}):
        per_sm = params["blocks_per_sm"]
        yield Variant(
            "cuda-grid-stride",
            "cuda",
            params,
            _bincount_grid_stride(params["aggregate"], params["restrict"]),
            lambda s, per_sm=per_sm: _cleared(
                Launch("bincount", grid1(resident_blocks(cdiv(s["n"], BINCOUNT_BLOCK), per_sm)), _bincount_args(s), block1(BINCOUNT_BLOCK))
            ),
        )
    shared_settings = [
        *product({"block": [256, 1024], "blocks_per_sm": [1, 2], "aggregate": [False, True], "skip_zero": [True]}),
        *product({"block": [256], "blocks_per_sm": [8], "aggregate": [False, True], "skip_zero": [True, False]}),
    ]
    for params in shared_settings:
        block, per_sm = params["block"], params["blocks_per_sm"]
        yield Variant(
            "cuda-shared-private",
            "cuda",
            params,
            _bincount_shared(params["aggregate"], params["skip_zero"]),
            lambda s, block=block, per_sm=per_sm: _cleared(
                Launch(
                    "bincount",
                    grid1(resident_blocks(cdiv(s["n"], block), per_sm)),
                    _bincount_args(s, with_bins=True),
                    block1(block),
                    shared_bytes=s["bins"] * 4,
                )
            ),
            unsupported=_shared_fits,
        )
    for params in [*product({"BLOCK": [256, 1024, 4096], "num_warps": [4]}), *product({"BLOCK": [1024], "num_warps": [1, 8]})]:
        block, warps = params["BLOCK"], params["num_warps"]
        yield Variant(
            "triton-atomic",
            "triton",
            params,
            BINCOUNT_TRITON_ATOMIC,
            lambda s, block=block, warps=warps: _cleared(
                Launch("bincount", grid1(cdiv(s["n"], block)), _bincount_args(s), constexprs={"BLOCK": block}, num_warps=warps)
            ),
        )
    for params in product({"BLOCK": [1024, 4096], "persistent": [False, True], "num_warps": [4]}):
        yield _histogram_variant(params)


def _histogram_variant(params: dict[str, Any]) -> Variant:
    block, persistent = params["BLOCK"], params["persistent"]

    def launches(sizes: Sizes) -> list[Launch]:
        grid = grid1(resident_blocks(cdiv(sizes["n"], block), PERSISTENT_PROGRAMS_PER_SM)) if persistent else grid1(cdiv(sizes["n"], block))
        return _cleared(
            Launch(
                "bincount", grid, _bincount_args(sizes), constexprs={"BLOCK": block, "BINS": sizes["bins"]}, num_warps=params["num_warps"]
            )
        )

    def too_wide(sizes: Sizes) -> str | None:
        return "BLOCK x BINS too large for tl.histogram" if block * sizes["bins"] > HISTOGRAM_MAX_WORK else None

    code = BINCOUNT_TRITON_HISTOGRAM_PERSISTENT if persistent else BINCOUNT_TRITON_HISTOGRAM
    return Variant("triton-histogram", "triton", params, code, launches, unsupported=too_wide)


BINCOUNT = Op(
    name="bincount",
    bound="memory",
    sizes=BINCOUNT_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],), "i32", f"randint:0:{s['bins']}")},
    outputs=lambda s: {"counts": TensorSpec((s["bins"],), "i32")},
    reference=lambda torch, inputs, sizes: {"counts": torch.bincount(inputs["x"], minlength=sizes["bins"]).to(torch.int32)},
    reference_code="def reference(x, bins):\n    return torch.bincount(x, minlength=bins).to(torch.int32)\n",
    variants=bincount_variants,
)

# --- index_select_rows ---------------------------------------------------------------------------

# Narrow rows (64 bytes: a gather of sectors) to wide ones (4 KB: streaming copies); d = 100
# in fp16 (200-byte rows) takes no 8- or 16-byte packs.
INDEX_SIZES = [
    {"rows": 1000, "d": 16, "n": 512, "dtype": "f32"},
    {"rows": 1 << 20, "d": 16, "n": 1 << 21, "dtype": "f32"},
    {"rows": 100000, "d": 128, "n": 200000, "dtype": "f32"},
    {"rows": 32768, "d": 1024, "n": 32768, "dtype": "f32"},
    {"rows": 65536, "d": 256, "n": 131072, "dtype": "f16"},
    {"rows": 50000, "d": 100, "n": 100000, "dtype": "f16"},
]
RAW_TYPES = {4: "float", 8: "float2", 16: "float4"}  # what a pack of this many bytes is copied as
ROWS_2D_THREADS = 256


def _copy_type(dtype: str, vector: int) -> str:
    return CUDA_TYPES[dtype] if vector == 1 else RAW_TYPES[vector * ELEMENT_BYTES[dtype]]


def _index_signature(dtype: str, restrict: bool = True) -> str:
    ctype = CUDA_TYPES[dtype]
    return (
        f'extern "C" __global__ void index_select({cuda_pointer(ctype, "table", restrict)}, {cuda_pointer("long long", "idx", restrict)}, '
        f"{cuda_pointer(ctype, 'out', restrict, False)}, int n, int d)"
    )


def _index_elementwise(dtype: str, restrict: bool, wide_index: bool) -> str:
    index = "long long" if wide_index else "int"
    first = "(long long)blockIdx.x * blockDim.x + threadIdx.x" if wide_index else "blockIdx.x * blockDim.x + threadIdx.x"
    return f"""{CUDA_HEADER}
{_index_signature(dtype, restrict)} {{
    {index} tid = {first};
    if (tid >= ({index})n * d) return;
    {index} row = tid / d;
    {index} col = tid % d;
    out[tid] = table[idx[row] * d + col];
}}
"""


def _copy_row(dtype: str, vector: int, ldg: bool, out_row: str, lane: str, stride: str) -> str:
    """Statements copying table row idx[out_row] to out row `out_row`, lanes striding packs."""
    vtype = _copy_type(dtype, vector)
    packs = "d" if vector == 1 else f"d / {vector}"
    load = "__ldg(src + c)" if ldg else "src[c]"
    cast = (
        (lambda pointer, const: pointer)
        if vector == 1
        else (lambda pointer, const: f"reinterpret_cast<{'const ' if const else ''}{vtype}*>({pointer})")
    )
    return f"""    const {vtype}* src = {cast(f"table + idx[{out_row}] * d", True)};
    {vtype}* dst = {cast(f"out + (long long){out_row} * d", False)};
    for (int c = {lane}; c < {packs}; c += {stride}) dst[c] = {load};
"""


def _index_warp(dtype: str, warps: int, vector: int, ldg: bool) -> str:
    return f"""{CUDA_HEADER}
#define WARPS {warps}

{_index_signature(dtype)} {{
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= n) return;
{_copy_row(dtype, vector, ldg, "row", "lane", "32")}}}
"""


def _index_block(dtype: str, vector: int) -> str:
    return f"""{CUDA_HEADER}
{_index_signature(dtype)} {{
{_copy_row(dtype, vector, False, "blockIdx.x", "threadIdx.x", "blockDim.x")}}}
"""


def _index_rows_2d(dtype: str, vector: int, restrict: bool) -> str:
    return f"""{CUDA_HEADER}
{_index_signature(dtype, restrict)} {{
    int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= n) return;
{_copy_row(dtype, vector, False, "row", "threadIdx.x", "blockDim.x")}}}
"""


INDEX_TRITON_2D = f"""{TRITON_HEADER}

@triton.jit
def index_select(table_ptr, idx_ptr, out_ptr, n, d, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    src = tl.load(idx_ptr + rows, mask=rows < n, other=0)
    mask = (rows[:, None] < n) & (cols[None, :] < d)
    values = tl.load(table_ptr + src[:, None] * d + cols[None, :], mask=mask)
    tl.store(out_ptr + rows[:, None] * d + cols[None, :], values, mask=mask)
"""

INDEX_TRITON_ROW_LOOP = f"""{TRITON_HEADER}

@triton.jit
def index_select(table_ptr, idx_ptr, out_ptr, n, d, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    src = tl.load(idx_ptr + rows, mask=rows < n, other=0)
    for start in range(0, d, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = (rows[:, None] < n) & (cols[None, :] < d)
        values = tl.load(table_ptr + src[:, None] * d + cols[None, :], mask=mask)
        tl.store(out_ptr + rows[:, None] * d + cols[None, :], values, mask=mask)
"""


def _index_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("table", "idx", "out", i32(sizes["n"]), i32(sizes["d"]))


def _index_launch(grid, block):
    """One launch of index_select: grid(sizes) blocks of `block` threads."""
    return lambda s: [Launch("index_select", grid(s), _index_args(s), block)]


def index_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"  # fp16 gets a sample of each family
        wide = 16 // ELEMENT_BYTES[dtype]  # elements in a 16-byte pack
        only = unsupported(dtype)
        packs_fit = lambda vector, dtype=dtype: unsupported(dtype, divisible("d", vector))
        for params in product(
            {
                "dtype": [dtype],
                "block": [128, 512] if full else [256],
                "restrict": [True, False],
                "wide_index": [False, True] if full else [False],
            }
        ):
            block = params["block"]
            yield Variant(
                "cuda-thread-per-element",
                "cuda",
                params,
                _index_elementwise(dtype, params["restrict"], params["wide_index"]),
                _index_launch(lambda s, block=block: grid1(cdiv(s["n"] * s["d"], block)), block1(block)),
                unsupported=only,
            )
        for params in product({"dtype": [dtype], "warps": [2, 8] if full else [4], "vector": [1, wide], "ldg": [False, True]}):
            warps, vector = params["warps"], params["vector"]
            yield Variant(
                "cuda-warp-per-row",
                "cuda",
                params,
                _index_warp(dtype, warps, vector, params["ldg"]),
                _index_launch(lambda s, warps=warps: grid1(cdiv(s["n"], warps)), block1(32 * warps)),
                unsupported=packs_fit(vector),
            )
        for params in product({"dtype": [dtype], "block": [32, 128, 512] if full else [128], "vector": [1, wide]}):
            yield Variant(
                "cuda-block-per-row",
                "cuda",
                params,
                _index_block(dtype, params["vector"]),
                _index_launch(lambda s: grid1(s["n"]), block1(params["block"])),
                unsupported=packs_fit(params["vector"]),
            )
        # fp16 takes 4-byte pairs, which every even row length allows
        for params in product(
            {
                "dtype": [dtype],
                "threads_per_row": [4, 16, 64] if full else [4, 32],
                "vector": [wide if full else 2],
                "restrict": [True, False] if full else [True],
            }
        ):
            tx = params["threads_per_row"]
            yield Variant(
                "cuda-rows-2d",
                "cuda",
                params,
                _index_rows_2d(dtype, params["vector"], params["restrict"]),
                _index_launch(lambda s, tx=tx: grid1(cdiv(s["n"], ROWS_2D_THREADS // tx)), (tx, ROWS_2D_THREADS // tx, 1)),
                unsupported=packs_fit(params["vector"]),
            )
        yield from _index_triton_variants(dtype, full)


def _index_triton_variants(dtype: str, full: bool) -> Iterable[Variant]:
    if full:
        tiles = [
            *product({"BLOCK_N": [1, 8, 32], "BLOCK_D": [32, 256], "num_warps": [4]}),
            *product({"BLOCK_N": [8], "BLOCK_D": [256], "num_warps": [1, 8]}),
        ]
        loops = product({"BLOCK_N": [1, 8], "BLOCK_D": [128], "num_warps": [4]})
    else:
        tiles = product({"BLOCK_N": [4, 32], "BLOCK_D": [128], "num_warps": [4]})
        loops = product({"BLOCK_N": [8], "BLOCK_D": [128], "num_warps": [4]})
    for family, settings, code in (("triton-2d", tiles, INDEX_TRITON_2D), ("triton-row-loop", loops, INDEX_TRITON_ROW_LOOP)):
        for params in settings:
            params = {"dtype": dtype, **params}
            yield Variant(
                family, "triton", params, code, _index_triton_launches(params, family == "triton-2d"), unsupported=unsupported(dtype)
            )


def _index_triton_launches(params: dict[str, Any], column_tiles: bool):
    block_n, block_d = params["BLOCK_N"], params["BLOCK_D"]

    def launches(sizes: Sizes) -> list[Launch]:
        grid = (cdiv(sizes["n"], block_n), cdiv(sizes["d"], block_d) if column_tiles else 1, 1)
        return [
            Launch(
                "index_select", grid, _index_args(sizes), constexprs={"BLOCK_N": block_n, "BLOCK_D": block_d}, num_warps=params["num_warps"]
            )
        ]

    return launches


INDEX_SELECT_ROWS = Op(
    name="index_select_rows",
    bound="memory",
    sizes=INDEX_SIZES,
    inputs=lambda s: {"table": TensorSpec((s["rows"], s["d"]), s["dtype"]), "idx": TensorSpec((s["n"],), "i64", f"randint:0:{s['rows']}")},
    outputs=lambda s: {"out": TensorSpec((s["n"], s["d"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"out": torch.index_select(inputs["table"], 0, inputs["idx"])},
    reference_code="def reference(table, idx):\n    return torch.index_select(table, 0, idx)\n",
    variants=index_variants,
)

OPS = [BINCOUNT, INDEX_SELECT_ROWS]
