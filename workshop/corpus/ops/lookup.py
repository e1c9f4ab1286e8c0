"""Lookups by index inside rows and bags: take_along_rows (torch.gather along dim 1) and bag_sum.

take_along_rows: out[r, j] = x[r, idx[r, j]] for x [rows, cols] (fp32, fp16) and idx
[rows, k] int64, uniform over the row. A neighbour of `gather` (whole rows) and
`index_select_rows`: here the random reads stay inside one row, so the row's sectors are
reused through L1/L2 when k is large against cols (the "dense" problems, k = 8 cols) and
are touched once or not at all when k is small (the "sparse" ones). CUDA families:
- cuda-flat: a thread per output from a flat index (`row = i / k`); block size, items per
  thread (their indices loaded before their gathers: that many reads in flight), one pass
  or a grid-stride loop over a persistent grid, the column read as int64 or cast to int32
  (32-bit address arithmetic), and `__restrict__` or not;
- cuda-2d: a 2D grid, blockIdx.y the row and threads along k (no division; a 512-wide
  block wastes most of its threads when k = 16); block size, `__restrict__`;
- cuda-warp-per-row: a warp walks one row's k indices; warps per block, int64/int32
  column, `__restrict__` (without it the compiler cannot move a load past the last store);
- cuda-staged-row: a block per row copies x's row into shared memory (scalar or 16-byte
  vector loads, coalesced) and gathers from there: good when k >> cols, a waste when the
  row is long and k small; block size, vector width.
Triton: triton-flat (BLOCK elements of the flat output per program; BLOCK, num_warps, the
column cast to int32 or not) and triton-2d (BLOCK_R rows x BLOCK_K picks per program).

bag_sum: an embedding bag with equal bags (nn.EmbeddingBag(mode="sum")): out[b] = sum of
table[indices[b * bag_len + l]] for l < bag_len, table [num_embeddings, dim] fp32/fp16,
accumulated in fp32. Narrow rows (dim 32: 128 bytes) to wide ones (dim 512), bags of 8 to
64 rows. CUDA families:
- cuda-thread-per-output: a thread per (bag, column) sums its bag's rows; block size,
  `__restrict__`, the bag loop unrolled 4x or not, and consecutive threads on consecutive
  columns or on consecutive bags (uncoalesced: the bad user version);
- cuda-group-per-bag: GROUP threads per bag (4 to 32 of a 256-thread block) with scalar or
  16-byte vector loads; the bag's indices read by every lane (a broadcast load per row) or
  loaded once, GROUP at a time, and passed round with __shfl_sync;
- cuda-block-per-bag: a block per bag, threads over the columns with vector loads (half2
  or 16-byte packs for fp16); block size (idle threads on narrow rows), the indices staged
  in shared memory or read from global memory, bag loop unroll, `__restrict__`;
- cuda-atomic (fp32): a thread per (index, column) adds its element into out with
  atomicAdd after a ZERO launch (scatter style: bag_len atomics per output element).
Triton: triton-bags (BAGS bags x BLOCK_D columns per program, a loop over the bag) and
triton-tile (a program per bag and column tile, [BLOCK_L, BLOCK_D] rows per step summed
at the end); num_warps.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import ELEMENT_BYTES, one_launch, pack_struct
from workshop.corpus.ops.rowkit import TRITON_HEADER, divisible, resident_blocks, unsupported, vector_width
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
    product,
)

GRID_STRIDE_BLOCKS_PER_SM = 4

# --- take_along_rows -----------------------------------------------------------------------------

# Sparse picks from long rows (k = cols / 16 or cols / 8) and dense ones from short rows (k = 8 cols);
# 60 x 16 outputs and k = 768 leave partial blocks.
TAKE_SIZES = [
    {"rows": 60, "cols": 1000, "k": 16, "dtype": "f32"},
    {"rows": 4096, "cols": 2048, "k": 128, "dtype": "f32"},
    {"rows": 16384, "cols": 2048, "k": 256, "dtype": "f32"},
    {"rows": 16384, "cols": 96, "k": 768, "dtype": "f32"},
    {"rows": 8192, "cols": 2048, "k": 256, "dtype": "f16"},
    {"rows": 16384, "cols": 96, "k": 768, "dtype": "f16"},
]


def _take_signature(dtype: str, restrict: bool = True) -> str:
    ctype = CUDA_TYPES[dtype]
    return (
        f'extern "C" __global__ void take_along_rows({cuda_pointer(ctype, "x", restrict)}, {cuda_pointer("long long", "idx", restrict)}, '
        f"{cuda_pointer(ctype, 'out', restrict, False)}, int rows, int cols, int k)"
    )


def _take_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "idx", "out", i32(sizes["rows"]), i32(sizes["cols"]), i32(sizes["k"]))


def _pick(row: str, position: str, int32: bool) -> str:
    """x's element that output `position` of `row` takes: 32-bit or 64-bit address arithmetic."""
    if int32:
        return f"x[{row} * cols + (int)idx[{position}]]"
    return f"x[(long long){row} * cols + idx[{position}]]"


def _take_flat(dtype: str, items: int, grid_stride: bool, int32: bool, restrict: bool) -> str:
    if items == 1 and not grid_stride:
        body = f"""    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {{
        int row = i / k;
        out[i] = {_pick("row", "i", int32)};
    }}"""
    elif items == 1:
        body = f"""    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) {{
        int row = i / k;
        out[i] = {_pick("row", "i", int32)};
    }}"""
    else:
        # ITEMS outputs blockDim.x apart: their indices are read before any gather is issued.
        column = "int" if int32 else "long long"
        address = "row * cols + col[it]" if int32 else "(long long)row * cols + col[it]"
        pad = "        " if grid_stride else "    "
        body = f"""{pad}{column} col[ITEMS];
{pad}#pragma unroll
{pad}for (int it = 0; it < ITEMS; ++it) {{
{pad}    int i = base + it * blockDim.x;
{pad}    col[it] = i < N ? {"(int)" if int32 else ""}idx[i] : 0;
{pad}}}
{pad}#pragma unroll
{pad}for (int it = 0; it < ITEMS; ++it) {{
{pad}    int i = base + it * blockDim.x;
{pad}    if (i < N) {{
{pad}        int row = i / k;
{pad}        out[i] = x[{address}];
{pad}    }}
{pad}}}"""
        first = "blockIdx.x * blockDim.x * ITEMS + threadIdx.x"
        if grid_stride:
            body = f"    for (int base = {first}; base < N; base += gridDim.x * blockDim.x * ITEMS) {{\n{body}\n    }}"
        else:
            body = f"    int base = {first};\n{body}"
    define = f"#define ITEMS {items}\n\n" if items > 1 else ""
    return f"""{CUDA_HEADER}
{define}{_take_signature(dtype, restrict)} {{
    int N = rows * k;
{body}
}}
"""


def _take_2d(dtype: str, restrict: bool) -> str:
    return f"""{CUDA_HEADER}
{_take_signature(dtype, restrict)} {{
    int row = blockIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < k) out[row * k + j] = x[row * cols + idx[row * k + j]];
}}
"""


def _take_warp(dtype: str, warps: int, int32: bool, restrict: bool) -> str:
    return f"""{CUDA_HEADER}
#define WARPS {warps}

{_take_signature(dtype, restrict)} {{
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    for (int j = lane; j < k; j += 32) out[row * k + j] = {_pick("row", "row * k + j", int32)};
}}
"""


def _take_staged(dtype: str, vector: int) -> str:
    """The row goes to shared memory first (cols elements of dynamic shared memory)."""
    ctype = CUDA_TYPES[dtype]
    if vector == 1:
        copy = "    for (int c = threadIdx.x; c < cols; c += blockDim.x) line[c] = src[c];\n"
        pack = ""
    else:
        copy = """    for (int c = threadIdx.x; c < cols / VEC; c += blockDim.x)
        reinterpret_cast<Pack*>(line)[c] = reinterpret_cast<const Pack*>(src)[c];
"""
        pack = f"#define VEC {vector}\n{pack_struct(dtype, vector)}"
    return f"""{CUDA_HEADER}{pack}
{_take_signature(dtype)} {{
    extern __shared__ __align__(16) unsigned char smem[];
    {ctype}* line = reinterpret_cast<{ctype}*>(smem);
    int row = blockIdx.x;
    const {ctype}* src = x + (long long)row * cols;
{copy}    __syncthreads();
    for (int j = threadIdx.x; j < k; j += blockDim.x) out[(long long)row * k + j] = line[idx[(long long)row * k + j]];
}}
"""


TAKE_TRITON_FLAT = f"""{TRITON_HEADER}

@triton.jit
def take_along_rows(x_ptr, idx_ptr, out_ptr, rows, cols, k, BLOCK: tl.constexpr, INT32: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < rows * k
    col = tl.load(idx_ptr + offsets, mask=mask, other=0)
    if INT32:
        col = col.to(tl.int32)
    row = offsets // k
    tl.store(out_ptr + offsets, tl.load(x_ptr + row * cols + col, mask=mask), mask=mask)
"""

TAKE_TRITON_2D = f"""{TRITON_HEADER}

@triton.jit
def take_along_rows(x_ptr, idx_ptr, out_ptr, rows, cols, k, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    j = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (r[:, None] < rows) & (j[None, :] < k)
    col = tl.load(idx_ptr + r[:, None] * k + j[None, :], mask=mask, other=0)
    values = tl.load(x_ptr + r[:, None] * cols + col, mask=mask)
    tl.store(out_ptr + r[:, None] * k + j[None, :], values, mask=mask)
"""


def _flat_blocks(block: int, items: int, grid_stride: bool):
    def blocks(sizes: Sizes) -> int:
        needed = cdiv(sizes["rows"] * sizes["k"], block * items)
        return resident_blocks(needed, GRID_STRIDE_BLOCKS_PER_SM) if grid_stride else needed

    return blocks


def _take_launch(grid, block: tuple[int, int, int], shared=lambda sizes: 0):
    """One launch of take_along_rows: grid(sizes) blocks of `block` threads."""
    return lambda s: [Launch("take_along_rows", grid(s), _take_args(s), block, shared_bytes=shared(s))]


def take_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"  # fp16 gets a sample of each family
        only = unsupported(dtype)
        flat_base = {"dtype": dtype, "block": 256, "items": 1, "grid_stride": False, "int32": False, "restrict": True}
        flat = around(
            flat_base,
            block=[128, 512, 1024] if full else [],
            items=[2, 4, 8] if full else [4],
            grid_stride=[True],
            int32=[True],
            restrict=[False],
        )
        if full:
            flat += around({**flat_base, "items": 4}, block=[128, 512], grid_stride=[True], int32=[True])[1:]
        for params in flat:
            block, items, grid_stride = params["block"], params["items"], params["grid_stride"]
            yield Variant(
                "cuda-flat",
                "cuda",
                params,
                _take_flat(dtype, items, grid_stride, params["int32"], params["restrict"]),
                one_launch("take_along_rows", _take_args, _flat_blocks(block, items, grid_stride), block),
                unsupported=only,
            )
        for params in product({"dtype": [dtype], "block": [32, 128, 512] if full else [128], "restrict": [True, False]}):
            block = params["block"]
            yield Variant(
                "cuda-2d",
                "cuda",
                params,
                _take_2d(dtype, params["restrict"]),
                _take_launch(lambda s, block=block: (cdiv(s["k"], block), s["rows"], 1), block1(block)),
                unsupported=only,
            )
        warp_base = {"dtype": dtype, "warps": 4, "int32": False, "restrict": True}
        for params in around(warp_base, warps=[1, 8] if full else [], int32=[True], restrict=[False]):
            warps = params["warps"]
            yield Variant(
                "cuda-warp-per-row",
                "cuda",
                params,
                _take_warp(dtype, warps, params["int32"], params["restrict"]),
                one_launch("take_along_rows", _take_args, lambda s, warps=warps: cdiv(s["rows"], warps), 32 * warps),
                unsupported=only,
            )
        for params in product({"dtype": [dtype], "block": [128, 512] if full else [256], "vector": [1, vector_width(dtype)]}):
            vector = params["vector"]
            yield Variant(
                "cuda-staged-row",
                "cuda",
                params,
                _take_staged(dtype, vector),
                _take_launch(lambda s: grid1(s["rows"]), block1(params["block"]), lambda s, size=ELEMENT_BYTES[dtype]: s["cols"] * size),
                unsupported=unsupported(dtype, divisible("cols", vector)),
            )
        yield from _take_triton_variants(dtype, full)


def _take_triton_variants(dtype: str, full: bool) -> Iterable[Variant]:
    flat_base = {"dtype": dtype, "BLOCK": 1024, "INT32": False, "num_warps": 4}
    flat = around(flat_base, BLOCK=[256, 4096] if full else [], INT32=[True], num_warps=[8] if full else [])
    tile_base = {"dtype": dtype, "BLOCK_R": 4, "BLOCK_K": 128, "num_warps": 4}
    tiles = around(tile_base, BLOCK_R=[1, 16] if full else [1], BLOCK_K=[32, 512] if full else [], num_warps=[2, 8] if full else [])
    for family, settings, code in (("triton-flat", flat, TAKE_TRITON_FLAT), ("triton-2d", tiles, TAKE_TRITON_2D)):
        for params in settings:
            yield Variant(family, "triton", params, code, _take_triton_launches(params), unsupported=unsupported(dtype))


def _take_triton_launches(params: dict[str, Any]):
    meta = {name: value for name, value in params.items() if name.isupper()}

    def launches(sizes: Sizes) -> list[Launch]:
        if "BLOCK" in meta:
            grid = grid1(cdiv(sizes["rows"] * sizes["k"], meta["BLOCK"]))
        else:
            grid = (cdiv(sizes["rows"], meta["BLOCK_R"]), cdiv(sizes["k"], meta["BLOCK_K"]), 1)
        return [Launch("take_along_rows", grid, _take_args(sizes), constexprs=meta, num_warps=params["num_warps"])]

    return launches


TAKE_ALONG_ROWS = Op(
    name="take_along_rows",
    bound="memory",
    sizes=TAKE_SIZES,
    inputs=lambda s: {
        "x": TensorSpec((s["rows"], s["cols"]), s["dtype"]),
        "idx": TensorSpec((s["rows"], s["k"]), "i64", f"randint:0:{s['cols']}"),
    },
    outputs=lambda s: {"out": TensorSpec((s["rows"], s["k"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"out": torch.gather(inputs["x"], 1, inputs["idx"])},
    reference_code="def reference(x, idx):\n    return torch.gather(x, 1, idx)\n",
    variants=take_variants,
)

# --- bag_sum -------------------------------------------------------------------------------------

# Narrow rows in many short bags (dim 32: a warp per bag idles) to wide rows in long bags;
# dim = 100 takes float4 (25 packs) but leaves idle threads in any block over the columns.
BAG_SIZES = [
    {"num_embeddings": 1000, "dim": 64, "bags": 32, "bag_len": 8, "dtype": "f32"},
    {"num_embeddings": 100000, "dim": 100, "bags": 4096, "bag_len": 32, "dtype": "f32"},
    {"num_embeddings": 1 << 20, "dim": 32, "bags": 65536, "bag_len": 16, "dtype": "f32"},
    {"num_embeddings": 131072, "dim": 512, "bags": 8192, "bag_len": 64, "dtype": "f32"},
    {"num_embeddings": 100000, "dim": 128, "bags": 4096, "bag_len": 32, "dtype": "f16"},
    {"num_embeddings": 131072, "dim": 512, "bags": 8192, "bag_len": 64, "dtype": "f16"},
]
GROUP_BLOCK = 256  # threads per block of cuda-group-per-bag


def _bag_signature(dtype: str, restrict: bool = True) -> str:
    ctype = CUDA_TYPES[dtype]
    return (
        f'extern "C" __global__ void bag_sum({cuda_pointer(ctype, "table", restrict)}, {cuda_pointer("long long", "indices", restrict)}, '
        f"{cuda_pointer(ctype, 'out', restrict, False)}, int bags, int bag_len, int dim)"
    )


def _bag_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("table", "indices", "out", i32(sizes["bags"]), i32(sizes["bag_len"]), i32(sizes["dim"]))


def _unroll(unroll: int, pad: str) -> str:
    return f"{pad}#pragma unroll {unroll}\n" if unroll > 1 else ""


class BagColumns:
    """A thread's share of a bag: one column (vector 1) or a Pack of VEC columns, summed in fp32."""

    def __init__(self, dtype: str, vector: int) -> None:
        self.dtype, self.vector = dtype, vector

    def prelude(self) -> str:
        return "" if self.vector == 1 else f"#define VEC {self.vector}\n{pack_struct(self.dtype, self.vector)}"

    def packs(self) -> str:
        return "dim" if self.vector == 1 else "dim / VEC"

    def clear(self, pad: str) -> str:
        if self.vector == 1:
            return f"{pad}float acc = 0.0f;\n"
        return f"{pad}float acc[VEC];\n{pad}#pragma unroll\n{pad}for (int e = 0; e < VEC; ++e) acc[e] = 0.0f;\n"

    def add_row(self, row: str, column: str, pad: str) -> str:
        """Add table row `row` at `column` (a column or a Pack index)."""
        if self.vector == 1:
            return f"{pad}acc += {cuda_load_as_float(self.dtype, f'table[{row} * dim + {column}]')};\n"
        return (
            f"{pad}Pack p = reinterpret_cast<const Pack*>(table + {row} * dim)[{column}];\n{pad}#pragma unroll\n"
            f"{pad}for (int e = 0; e < VEC; ++e) acc[e] += {cuda_load_as_float(self.dtype, 'p.v[e]')};\n"
        )

    def store(self, bag: str, column: str, pad: str) -> str:
        if self.vector == 1:
            return f"{pad}out[(long long){bag} * dim + {column}] = {cuda_store_from_float(self.dtype, 'acc')};\n"
        return (
            f"{pad}Pack o;\n{pad}#pragma unroll\n{pad}for (int e = 0; e < VEC; ++e) o.v[e] = {cuda_store_from_float(self.dtype, 'acc[e]')};\n"
            f"{pad}reinterpret_cast<Pack*>(out + (long long){bag} * dim)[{column}] = o;\n"
        )


def _bag_thread(dtype: str, restrict: bool, bag_fastest: bool, unroll: int) -> str:
    if bag_fastest:
        coords = "    int bag = idx % bags;\n    int col = idx / bags;  // neighbours read rows of different bags\n"
    else:
        coords = "    int bag = idx / dim;\n    int col = idx % dim;\n"
    columns = BagColumns(dtype, 1)
    return f"""{CUDA_HEADER}
{_bag_signature(dtype, restrict)} {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= bags * dim) return;
{coords}    const long long* ids = indices + bag * bag_len;
{columns.clear("    ")}{_unroll(unroll, "    ")}    for (int l = 0; l < bag_len; ++l)
{columns.add_row("ids[l]", "col", "        ")}{columns.store("bag", "col", "    ")}}}
"""


def _bag_group(dtype: str, group: int, vector: int, shuffle: bool) -> str:
    """GROUP threads per bag; with `shuffle`, lane t of the group loads index l0 + t and broadcasts it.

    The shuffles need every lane of the warp, so that version keeps finished lanes in the
    loops (`live`, `active`) instead of returning; bag_len is the same for all groups.
    """
    columns = BagColumns(dtype, vector)
    if shuffle:
        body = f"""    bool live = bag < bags;
    for (int c0 = 0; c0 < {columns.packs()}; c0 += GROUP) {{
        int c = c0 + lane;
        bool active = live && c < {columns.packs()};
{columns.clear("        ")}        for (int l0 = 0; l0 < bag_len; l0 += GROUP) {{
            long long mine = (live && l0 + lane < bag_len) ? ids[l0 + lane] : 0;
            int count = min(GROUP, bag_len - l0);
            for (int t = 0; t < count; ++t) {{
                long long row = __shfl_sync(0xffffffffu, mine, t, GROUP);
                if (active) {{
{columns.add_row("row", "c", "                    ")}                }}
            }}
        }}
        if (active) {{
{columns.store("bag", "c", "            ")}        }}
    }}"""
    else:
        body = f"""    if (bag >= bags) return;
    for (int c = lane; c < {columns.packs()}; c += GROUP) {{
{columns.clear("        ")}        for (int l = 0; l < bag_len; ++l) {{
{columns.add_row("ids[l]", "c", "            ")}        }}
{columns.store("bag", "c", "        ")}    }}"""
    return f"""{CUDA_HEADER}
#define GROUP {group}
{columns.prelude()}
{_bag_signature(dtype)} {{
    int lane = threadIdx.x % GROUP;
    int bag = blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
    const long long* ids = indices + (long long)bag * bag_len;
{body}
}}
"""


def _bag_block(dtype: str, vector: int, stage: bool, unroll: int, restrict: bool) -> str:
    """A block per bag; staged, the bag's indices are read once into bag_len * 8 bytes of shared memory."""
    columns = BagColumns(dtype, vector)
    if stage:
        ids = """    extern __shared__ long long ids[];
    for (int l = threadIdx.x; l < bag_len; l += blockDim.x) ids[l] = indices[(long long)bag * bag_len + l];
    __syncthreads();
"""
    else:
        ids = "    const long long* ids = indices + (long long)bag * bag_len;\n"
    return f"""{CUDA_HEADER}{columns.prelude()}
{_bag_signature(dtype, restrict)} {{
    int bag = blockIdx.x;
{ids}    for (int c = threadIdx.x; c < {columns.packs()}; c += blockDim.x) {{
{columns.clear("        ")}{_unroll(unroll, "        ")}        for (int l = 0; l < bag_len; ++l) {{
{columns.add_row("ids[l]", "c", "            ")}        }}
{columns.store("bag", "c", "        ")}    }}
}}
"""


def _bag_atomic(restrict: bool) -> str:
    return f"""{CUDA_HEADER}
{_bag_signature("f32", restrict)} {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= bags * bag_len * dim) return;
    int pos = i / dim;
    int col = i % dim;
    atomicAdd(&out[(pos / bag_len) * dim + col], table[indices[pos] * dim + col]);
}}
"""


BAG_TRITON_BAGS = f"""{TRITON_HEADER}

@triton.jit
def bag_sum(table_ptr, indices_ptr, out_ptr, bags, bag_len, dim, BAGS: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0) * BAGS + tl.arange(0, BAGS)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    live = b < bags
    mask = live[:, None] & (cols[None, :] < dim)
    acc = tl.zeros([BAGS, BLOCK_D], dtype=tl.float32)
    for l in range(0, bag_len):
        row = tl.load(indices_ptr + b * bag_len + l, mask=live, other=0)
        acc += tl.load(table_ptr + row[:, None] * dim + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + b[:, None] * dim + cols[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)
"""

BAG_TRITON_TILE = f"""{TRITON_HEADER}

@triton.jit
def bag_sum(table_ptr, indices_ptr, out_ptr, bags, bag_len, dim, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr):
    bag = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    acc = tl.zeros([BLOCK_L, BLOCK_D], dtype=tl.float32)
    for start in range(0, bag_len, BLOCK_L):
        l = start + tl.arange(0, BLOCK_L)
        rows = tl.load(indices_ptr + bag * bag_len + l, mask=l < bag_len, other=0)
        mask = (l[:, None] < bag_len) & (cols[None, :] < dim)
        acc += tl.load(table_ptr + rows[:, None] * dim + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + bag * dim + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=cols < dim)
"""

# fp16 vectors: half2 (4 bytes) and a 16-byte pack.
BAG_VECTORS = {"f32": (4,), "f16": (2, 8)}


def bag_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"  # fp16 gets a sample of each family
        only = unsupported(dtype)
        wide = vector_width(dtype)
        packs_fit = lambda vector, dtype=dtype: unsupported(dtype, divisible("dim", vector))
        thread_base = {"dtype": dtype, "block": 256, "restrict": True, "bag_fastest": False, "unroll": 1}
        for params in around(thread_base, block=[128, 512] if full else [], restrict=[False], bag_fastest=[True], unroll=[4]):
            block = params["block"]
            yield Variant(
                "cuda-thread-per-output",
                "cuda",
                params,
                _bag_thread(dtype, params["restrict"], params["bag_fastest"], params["unroll"]),
                one_launch("bag_sum", _bag_args, lambda s, block=block: cdiv(s["bags"] * s["dim"], block), block),
                unsupported=only,
            )
        groups = (
            product({"group": [8, 32], "vector": [1, wide], "index_load": ["direct", "shuffle"]})
            if full
            else product({"group": [8, 32], "vector": [wide], "index_load": ["direct", "shuffle"]})
        )
        groups += [{"group": group, "vector": wide, "index_load": "direct"} for group in ((4, 16) if full else (4,))]
        for params in groups:
            params = {"dtype": dtype, **params}
            group, vector = params["group"], params["vector"]
            yield Variant(
                "cuda-group-per-bag",
                "cuda",
                params,
                _bag_group(dtype, group, vector, params["index_load"] == "shuffle"),
                one_launch("bag_sum", _bag_args, lambda s, group=group: cdiv(s["bags"], GROUP_BLOCK // group), GROUP_BLOCK),
                unsupported=packs_fit(vector),
            )
        block_base = {"dtype": dtype, "block": 64, "vector": wide, "stage_indices": False, "unroll": 1, "restrict": True}
        settings = around(
            block_base,
            block=[32, 128, 256] if full else [128],
            vector=[1, *BAG_VECTORS[dtype]],
            stage_indices=[True],
            unroll=[4],
            restrict=[False] if full else [],
        )
        for params in settings:
            block = params["block"]
            yield Variant(
                "cuda-block-per-bag",
                "cuda",
                params,
                _bag_block(dtype, params["vector"], params["stage_indices"], params["unroll"], params["restrict"]),
                lambda s, block=block, stage=params["stage_indices"]: [
                    Launch("bag_sum", grid1(s["bags"]), _bag_args(s), block1(block), shared_bytes=s["bag_len"] * 8 if stage else 0)
                ],
                unsupported=packs_fit(params["vector"]),
            )
        if full:
            for params in product({"dtype": ["f32"], "block": [128, 512], "restrict": [True, False]}):
                block = params["block"]
                yield Variant(
                    "cuda-atomic",
                    "cuda",
                    params,
                    _bag_atomic(params["restrict"]),
                    lambda s, block=block: [
                        Launch(ZERO, grid1(1), ("out",)),
                        Launch("bag_sum", grid1(cdiv(s["bags"] * s["bag_len"] * s["dim"], block)), _bag_args(s), block1(block)),
                    ],
                    unsupported=only,
                )
        yield from _bag_triton_variants(dtype, full)


def _bag_triton_variants(dtype: str, full: bool) -> Iterable[Variant]:
    if full:
        bags = [
            *product({"BAGS": [1, 4, 16], "BLOCK_D": [32, 128], "num_warps": [4]}),
            *product({"BAGS": [4], "BLOCK_D": [128], "num_warps": [1, 8]}),
        ]
        tiles = around({"BLOCK_L": 8, "BLOCK_D": 128, "num_warps": 4}, BLOCK_L=[32], BLOCK_D=[32, 512], num_warps=[8])
    else:
        bags = product({"BAGS": [1, 4], "BLOCK_D": [128], "num_warps": [4]})
        tiles = around({"BLOCK_L": 8, "BLOCK_D": 128, "num_warps": 4}, BLOCK_L=[32])
    for family, settings, code in (("triton-bags", bags, BAG_TRITON_BAGS), ("triton-tile", tiles, BAG_TRITON_TILE)):
        for params in settings:
            params = {"dtype": dtype, **params}
            yield Variant(family, "triton", params, code, _bag_triton_launches(params), unsupported=unsupported(dtype))


def _bag_triton_launches(params: dict[str, Any]):
    meta = {name: value for name, value in params.items() if name.isupper()}
    bags_per_program = meta.get("BAGS", 1)

    def launches(sizes: Sizes) -> list[Launch]:
        grid = (cdiv(sizes["bags"], bags_per_program), cdiv(sizes["dim"], meta["BLOCK_D"]), 1)
        return [Launch("bag_sum", grid, _bag_args(sizes), constexprs=meta, num_warps=params["num_warps"])]

    return launches


BAG_SUM = Op(
    name="bag_sum",
    bound="memory",
    sizes=BAG_SIZES,
    inputs=lambda s: {
        "table": TensorSpec((s["num_embeddings"], s["dim"]), s["dtype"]),
        "indices": TensorSpec((s["bags"] * s["bag_len"],), "i64", f"randint:0:{s['num_embeddings']}"),
    },
    outputs=lambda s: {"out": TensorSpec((s["bags"], s["dim"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {
        "out": torch.nn.functional.embedding_bag(inputs["indices"].view(-1, sizes["bag_len"]), inputs["table"], mode="sum")
    },
    reference_code='def reference(table, indices, bag_len):\n    return torch.nn.functional.embedding_bag(indices.view(-1, bag_len), table, mode="sum")\n',
    variants=bag_variants,
)

OPS = [TAKE_ALONG_ROWS, BAG_SUM]
