"""A paged KV-cache copy and batched inner products: two memory-bound operations whose speed is
decided by how much of the GPU one unit of work (a page, a vector) can keep busy.

- paged_copy: gather a paged KV cache into one contiguous buffer, as a serving engine does
  before a dense attention kernel: pool [seqs * pages, page_size, heads, head_dim] fp16, the
  page table [seqs, pages] int32 (random page ids), out [seqs, pages * page_size, heads,
  head_dim]: out page s * pages + p is pool page table[s, p]. The ids are drawn independently
  (the runner fills integers uniformly), so a page may be copied twice, as a copy allows.
  Pages of 16 to 256 tokens, 16 KB to 512 KB; 128 KB to 128 MB read. CUDA:
  cuda-per-element (a thread per element of the output, `int idx = blockIdx.x * blockDim.x +
  threadIdx.x`, the page table read by every thread; block, vector = 1 (2-byte __half copies)
  or 8 (16-byte uint4), order: consecutive threads on consecutive elements of a page or on
  the same element of consecutive pages (uncoalesced), restrict); cuda-row-group (GROUP
  threads copy one token row, heads * head_dim halves: 1 = a thread per row (serial,
  uncoalesced), 8, 32 = a warp per row; block, vector 1/2/8, restrict); cuda-per-page (a block
  copies PAGES whole pages, their table entries staged once in shared memory or read by every
  thread inside the copy loop, where without `__restrict__` the compiler must reload them
  after every store; pages, block, vector, restrict). Triton: triton-flat (a program per
  BLOCK output elements, the table gathered per element; BLOCK, num_warps) and triton-page (a
  program per page, one BLOCK slice of it per program or a loop over the page; BLOCK,
  num_warps).
- inner_product: out[i] = sum_j a[i, j] * b[i, j], a and b [batch, n] fp32 or fp16 (fp32
  accumulation, fp32 out), from one vector of 4096 and 4096 vectors of 256 to 4 vectors of 4M:
  the shapes where splitting a vector over several blocks (split-K) wins or loses. CUDA:
  cuda-thread-per-vector (the textbook `a[row * N + i]` loop: neighbouring threads N elements
  apart; block, vector, restrict; n <= 16384), cuda-warp-per-vector (shuffle sum; warps per
  block, vector, restrict), cuda-block-per-vector (block, vector, block reduction by shuffles,
  a shared-memory tree or the interleaved tree), cuda-split-atomic (grid (splits, batch): each
  block sums a 1/splits slice and atomically adds it to out after a ZERO launch; splits,
  block, vector, restrict), cuda-split-two-pass (the slices' partials into a [batch, splits]
  scratch, then a combine kernel with a warp or a thread per vector; splits, vector, combine;
  block 256). Vector kernels read 16-byte packs (n is a multiple of the width). Triton:
  triton-row (a program per vector looping over BLOCK tiles; BLOCK, num_warps) and
  triton-split-atomic (grid (splits, batch), tl.atomic_add; splits, BLOCK, num_warps).
  Inputs are uniform [0, 1), so every summation order stays inside fp32's tolerance (a sum of
  randn products near zero would fail it on rounding alone).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import one_launch
from workshop.corpus.ops.rowkit import TRITON_HEADER, Check, at_most, cuda_prelude, cuda_reductions, divisible, unsupported, vector_width
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
    grid1,
    i32,
    product,
)

# --- paged_copy -----------------------------------------------------------------------------------

PAGED_SIZES = [
    {"seqs": 2, "pages": 4, "page_size": 16, "heads": 8, "head_dim": 64},  # 8 pages, 128 KB: launch-bound
    {"seqs": 16, "pages": 32, "page_size": 16, "heads": 12, "head_dim": 80},  # rows of 960 halves: lanes left over
    {"seqs": 64, "pages": 64, "page_size": 16, "heads": 8, "head_dim": 128},  # 4096 pages of 32 KB: 128 MB
    {"seqs": 8, "pages": 16, "page_size": 64, "heads": 32, "head_dim": 128},  # 128 pages of 512 KB: a block per page underfills
    {"seqs": 64, "pages": 32, "page_size": 256, "heads": 1, "head_dim": 64},  # 128-byte rows: a warp of uint4 copies is 4x too wide
]
# What one copy moves: a half, a half2, or 16 bytes.
CHUNK_TYPES = {1: "__half", 2: "__half2", 8: "uint4"}


def _total_pages(sizes: Sizes) -> int:
    return sizes["seqs"] * sizes["pages"]


def _row_elems(sizes: Sizes) -> int:
    return sizes["heads"] * sizes["head_dim"]


def _page_elems(sizes: Sizes) -> int:
    return sizes["page_size"] * _row_elems(sizes)


def _rows_divisible(vector: int) -> Check:
    """Chunked copies need every token row to be whole chunks."""
    return lambda sizes: None if _row_elems(sizes) % vector == 0 else f"heads * head_dim not a multiple of {vector}"


def _paged_head(vector: int, defines: dict[str, int]) -> str:
    lines = [CUDA_HEADER, *(f"#define {name} {value}" for name, value in {**defines, "VEC": vector}.items())]
    return "\n".join(lines) + f"\ntypedef {CHUNK_TYPES[vector]} chunk_t;  // VEC halves per copy\n"


def _paged_signature(restrict: bool, extents: str) -> str:
    pointers = f"{cuda_pointer('__half', 'pool', restrict)}, {cuda_pointer('int', 'page_table', restrict)}, {cuda_pointer('__half', 'out', restrict, const=False)}"
    return f'extern "C" __global__ void paged_copy({pointers}, {extents})'


def _per_element(vector: int, order: str, restrict: bool) -> str:
    """A thread per chunk of the output, the page table read by every thread."""
    if order == "contiguous":
        where = """    // consecutive threads copy consecutive chunks of one page
    int page = idx / per_page;
    int i = idx % per_page;
    dst[idx] = src[(size_t)page_table[page] * per_page + i];"""
    else:
        where = """    // consecutive threads copy the same chunk of consecutive pages: every access a page apart
    int page = idx % total_pages;
    int i = idx / total_pages;
    dst[(size_t)page * per_page + i] = src[(size_t)page_table[page] * per_page + i];"""
    return f"""{_paged_head(vector, {})}
{_paged_signature(restrict, "int total_pages, int page_elems")} {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int per_page = page_elems / VEC;
    if (idx >= total_pages * per_page) return;
    const chunk_t* src = reinterpret_cast<const chunk_t*>(pool);
    chunk_t* dst = reinterpret_cast<chunk_t*>(out);
{where}
}}
"""


def _row_group(group: int, vector: int, restrict: bool) -> str:
    """GROUP threads per token row; a block holds blockDim.x / GROUP rows."""
    return f"""{_paged_head(vector, {"GROUP": group})}
// GROUP threads copy one token row (heads * head_dim halves) of a page
{_paged_signature(restrict, "int total_rows, int page_size, int row_elems")} {{
    int lane = threadIdx.x % GROUP;
    int row = blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
    if (row >= total_rows) return;
    int per_row = row_elems / VEC;
    int page = row / page_size, slot = row % page_size;
    const chunk_t* from = reinterpret_cast<const chunk_t*>(pool) + ((size_t)page_table[page] * page_size + slot) * per_row;
    chunk_t* to = reinterpret_cast<chunk_t*>(out) + (size_t)row * per_row;
    for (int i = lane; i < per_row; i += GROUP) to[i] = from[i];
}}
"""


def _per_page(pages: int, vector: int, table: str, restrict: bool) -> str:
    """A block per PAGES pages; the source page comes from shared memory or from global memory in the loop."""
    if table == "shared":
        stage = """    __shared__ int src_page[PAGES];
    int t = threadIdx.x;
    if (t < PAGES && first + t < total_pages) src_page[t] = page_table[first + t];
    __syncthreads();
"""
        source, comment = "src_page[p]", "their page-table entries staged once in shared memory"
    else:
        stage, source, comment = "", "page_table[first + p]", "every thread looks the source page up for every chunk"
    return f"""{_paged_head(vector, {"PAGES": pages})}
// a block copies PAGES whole pages; {comment}
{_paged_signature(restrict, "int total_pages, int page_elems")} {{
    int first = blockIdx.x * PAGES;
{stage}    int per_page = page_elems / VEC;
    const chunk_t* src = reinterpret_cast<const chunk_t*>(pool);
    chunk_t* dst = reinterpret_cast<chunk_t*>(out);
    for (int p = 0; p < PAGES && first + p < total_pages; ++p) {{
        for (int i = threadIdx.x; i < per_page; i += blockDim.x)
            dst[(size_t)(first + p) * per_page + i] = src[(size_t){source} * per_page + i];
    }}
}}
"""


PAGED_TRITON_FLAT = f"""{TRITON_HEADER}

@triton.jit
def paged_copy(pool_ptr, table_ptr, out_ptr, total, page_elems, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < total
    src_page = tl.load(table_ptr + offsets // page_elems, mask=mask, other=0)
    values = tl.load(pool_ptr + src_page * page_elems + offsets % page_elems, mask=mask)
    tl.store(out_ptr + offsets, values, mask=mask)
"""


def _paged_triton_page(loop: bool) -> str:
    if loop:
        copy = """    for start in range(0, page_elems, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < page_elems
        tl.store(out_ptr + page * page_elems + offsets, tl.load(pool_ptr + src_page * page_elems + offsets, mask=mask), mask=mask)
"""
    else:
        copy = """    offsets = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < page_elems
    tl.store(out_ptr + page * page_elems + offsets, tl.load(pool_ptr + src_page * page_elems + offsets, mask=mask), mask=mask)
"""
    return f"""{TRITON_HEADER}

@triton.jit
def paged_copy(pool_ptr, table_ptr, out_ptr, page_elems, BLOCK: tl.constexpr):
    page = tl.program_id(0)
    src_page = tl.load(table_ptr + page)
{copy}"""


def _pages_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("pool", "page_table", "out", i32(_total_pages(sizes)), i32(_page_elems(sizes)))


def _rows_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("pool", "page_table", "out", i32(_total_pages(sizes) * sizes["page_size"]), i32(sizes["page_size"]), i32(_row_elems(sizes)))


def paged_variants() -> Iterable[Variant]:
    element_base = {"block": 256, "vector": 8, "order": "contiguous", "restrict": False}
    element_settings = around(element_base, block=[128, 512, 1024], vector=[1], order=["page-strided"], restrict=[True]) + [
        {**element_base, "vector": 1, "order": "page-strided"},
        {**element_base, "vector": 1, "restrict": True},
    ]
    for p in element_settings:
        yield Variant(
            "cuda-per-element",
            "cuda",
            p,
            _per_element(p["vector"], p["order"], p["restrict"]),
            one_launch(
                "paged_copy", _pages_args, lambda s, p=p: cdiv(_total_pages(s) * _page_elems(s) // p["vector"], p["block"]), p["block"]
            ),
            unsupported=unsupported(None, _rows_divisible(p["vector"])),
        )
    group_base = {"group": 32, "block": 128, "vector": 8, "restrict": True}
    group_settings = around(group_base, group=[1, 8], block=[256, 512], vector=[1, 2], restrict=[False]) + [
        {**group_base, "group": 1, "vector": 1}
    ]
    for p in group_settings:
        yield Variant(
            "cuda-row-group",
            "cuda",
            p,
            _row_group(p["group"], p["vector"], p["restrict"]),
            one_launch(
                "paged_copy", _rows_args, lambda s, p=p: cdiv(_total_pages(s) * s["page_size"], p["block"] // p["group"]), p["block"]
            ),
            unsupported=unsupported(None, _rows_divisible(p["vector"])),
        )
    page_base = {"pages": 1, "block": 256, "vector": 8, "table": "shared", "restrict": False}
    page_settings = around(page_base, pages=[4], block=[128, 1024], vector=[1], table=["per-thread"], restrict=[True]) + [
        {**page_base, "table": "per-thread", "restrict": True},
        {**page_base, "pages": 4, "table": "per-thread"},
        {**page_base, "vector": 1, "table": "per-thread"},
    ]
    for p in page_settings:
        yield Variant(
            "cuda-per-page",
            "cuda",
            p,
            _per_page(p["pages"], p["vector"], p["table"], p["restrict"]),
            one_launch("paged_copy", _pages_args, lambda s, p=p: cdiv(_total_pages(s), p["pages"]), p["block"]),
            unsupported=unsupported(None, _rows_divisible(p["vector"])),
        )
    for p in product({"BLOCK": [1024, 4096, 16384], "num_warps": [4, 8]}):
        yield Variant(
            "triton-flat",
            "triton",
            p,
            PAGED_TRITON_FLAT,
            lambda s, p=p: [
                Launch(
                    "paged_copy",
                    grid1(cdiv(_total_pages(s) * _page_elems(s), p["BLOCK"])),
                    ("pool", "page_table", "out", i32(_total_pages(s) * _page_elems(s)), i32(_page_elems(s))),
                    constexprs={"BLOCK": p["BLOCK"]},
                    num_warps=p["num_warps"],
                )
            ],
        )
    program_base = {"loop": False, "BLOCK": 2048, "num_warps": 4}
    for p in around(program_base, loop=[True], BLOCK=[512, 8192], num_warps=[2, 8]) + [{**program_base, "loop": True, "BLOCK": 8192}]:
        yield Variant("triton-page", "triton", p, _paged_triton_page(p["loop"]), _triton_page_launches(p))


def _triton_page_launches(p: dict[str, Any]):
    def launches(sizes: Sizes) -> list[Launch]:
        grid = (_total_pages(sizes), 1 if p["loop"] else cdiv(_page_elems(sizes), p["BLOCK"]), 1)
        return [
            Launch(
                "paged_copy",
                grid,
                ("pool", "page_table", "out", i32(_page_elems(sizes))),
                constexprs={"BLOCK": p["BLOCK"]},
                num_warps=p["num_warps"],
            )
        ]

    return launches


PAGED_COPY = Op(
    name="paged_copy",
    bound="memory",
    sizes=PAGED_SIZES,
    inputs=lambda s: {
        "pool": TensorSpec((_total_pages(s), s["page_size"], s["heads"], s["head_dim"]), "f16"),
        "page_table": TensorSpec((s["seqs"], s["pages"]), "i32", f"randint:0:{_total_pages(s)}"),
    },
    outputs=lambda s: {"out": TensorSpec((s["seqs"], s["pages"] * s["page_size"], s["heads"], s["head_dim"]), "f16")},
    reference=lambda torch, inputs, sizes: {"out": inputs["pool"][inputs["page_table"].long()].flatten(1, 2)},
    reference_code="def reference(pool, page_table):\n    return pool[page_table.long()].flatten(1, 2)\n",
    variants=paged_variants,
)

# --- inner_product --------------------------------------------------------------------------------

INNER_SIZES = [
    {"batch": 1, "n": 4096, "dtype": "f32"},  # launch-bound
    {"batch": 4096, "n": 256, "dtype": "f32"},  # many short vectors: a block per vector is mostly idle
    {"batch": 64, "n": 65536, "dtype": "f32"},
    {"batch": 4, "n": 1 << 22, "dtype": "f32"},  # four blocks per vector leave 128 SMs idle: split-K's case
    {"batch": 1024, "n": 16384, "dtype": "f16"},
    {"batch": 16, "n": 1 << 20, "dtype": "f16"},
]
SERIAL_MAX_N = 16384  # one thread walking a longer vector alone takes too long
COMBINE_WARPS = 8  # vectors per block of the warp-per-vector combine kernel


def _inner_signature(dtype: str, restrict: bool, name: str = "inner_product", out: str = "out", size: str = "n") -> str:
    ctype = CUDA_TYPES[dtype]
    pointers = (
        f"{cuda_pointer(ctype, 'a', restrict)}, {cuda_pointer(ctype, 'b', restrict)}, {cuda_pointer('float', out, restrict, const=False)}"
    )
    return f'extern "C" __global__ void {name}({pointers}, int batch, int {size})'


def _vector_pointers(dtype: str, vector: int, row: str, size: str = "n") -> str:
    """`x` and `y`: row `row` of a and b, as elements or as 16-byte packs."""
    if vector == 1:
        ctype = CUDA_TYPES[dtype]
        return f"    const {ctype}* x = a + (size_t){row} * {size};\n    const {ctype}* y = b + (size_t){row} * {size};\n"
    return (
        f"    const Pack* x = reinterpret_cast<const Pack*>(a + (size_t){row} * {size});\n"
        f"    const Pack* y = reinterpret_cast<const Pack*>(b + (size_t){row} * {size});\n"
    )


def _dot_loop(dtype: str, vector: int, start: str, stride: str, end: str) -> str:
    """`float sum` over elements (or packs) start, start + stride, ... < end of x and y."""
    header = f"    float sum = 0.0f;\n    for (int i = {start}; i < {end}; i += {stride})"
    if vector == 1:
        return f"{header} sum += {cuda_load_as_float(dtype, 'x[i]')} * {cuda_load_as_float(dtype, 'y[i]')};\n"
    return f"""{header} {{
        Pack p = x[i], q = y[i];
        #pragma unroll
        for (int k = 0; k < {vector}; ++k) sum += {cuda_load_as_float(dtype, "p.v[k]")} * {cuda_load_as_float(dtype, "q.v[k]")};
    }}
"""


def _packs(size: str, vector: int) -> str:
    return size if vector == 1 else f"{size} / {vector}"


def _thread_per_vector(dtype: str, block: int, vector: int, restrict: bool) -> str:
    if vector == 1:
        x, y = (cuda_load_as_float(dtype, f"{src}[row * N + i]") for src in ("a", "b"))
        return f"""{CUDA_HEADER}
// one thread per vector: neighbouring threads read addresses N elements apart
{_inner_signature(dtype, restrict, size="N")} {{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= batch) return;
    float sum = 0.0f;
    for (int i = 0; i < N; i++) sum += {x} * {y};
    out[row] = sum;
}}
"""
    return f"""{cuda_prelude(dtype, {"BLOCK": block}, vector)}
// one thread per vector, 16 bytes of each input per load
{_inner_signature(dtype, restrict, size="N")} {{
    int row = blockIdx.x * BLOCK + threadIdx.x;
    if (row >= batch) return;
{_vector_pointers(dtype, vector, "row", "N")}{_dot_loop(dtype, vector, "0", "1", _packs("N", vector))}    out[row] = sum;
}}
"""


def _warp_per_vector(dtype: str, warps: int, vector: int, restrict: bool) -> str:
    return f"""{cuda_prelude(dtype, {"WARPS": warps}, vector)}{cuda_reductions(("sum",))}
// one warp per vector, lanes stride over it, shuffles add the lanes' sums
{_inner_signature(dtype, restrict)} {{
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= batch) return;
{_vector_pointers(dtype, vector, "row")}{_dot_loop(dtype, vector, "lane", "32", _packs("n", vector))}    sum = warp_sum(sum);
    if (lane == 0) out[row] = sum;
}}
"""


def _block_per_vector(dtype: str, block: int, vector: int, reduction: str) -> str:
    return f"""{cuda_prelude(dtype, {"BLOCK": block}, vector)}{cuda_reductions(("sum",), reduction)}
// one block per vector
{_inner_signature(dtype, True)} {{
{_vector_pointers(dtype, vector, "blockIdx.x")}{_dot_loop(dtype, vector, "threadIdx.x", "BLOCK", _packs("n", vector))}    sum = block_sum(sum);
    if (threadIdx.x == 0) out[blockIdx.x] = sum;
}}
"""


def _split_slice(dtype: str, vector: int) -> str:
    """The block's sum over slice blockIdx.x of gridDim.x slices of vector blockIdx.y (in packs)."""
    return f"""    int row = blockIdx.y;
    int count = {_packs("n", vector)};
    int chunk = (count + gridDim.x - 1) / gridDim.x;
    int begin = blockIdx.x * chunk;
    int end = min(count, begin + chunk);
{_vector_pointers(dtype, vector, "row")}{_dot_loop(dtype, vector, "begin + threadIdx.x", "BLOCK", "end")}    sum = block_sum(sum);
"""


def _split_atomic(dtype: str, block: int, vector: int, restrict: bool) -> str:
    return f"""{cuda_prelude(dtype, {"BLOCK": block}, vector)}{cuda_reductions(("sum",), "shuffle")}
// grid (splits, batch): each block adds its slice's sum to out[row] (zeroed before)
{_inner_signature(dtype, restrict)} {{
{_split_slice(dtype, vector)}    if (threadIdx.x == 0) atomicAdd(out + row, sum);
}}
"""


def _combine(how: str) -> str:
    if how == "warp":
        return f"""
// pass 2: a warp per vector adds its partials
extern "C" __global__ void inner_product_combine(const float* __restrict__ partial, float* __restrict__ out, int batch, int splits) {{
    int row = blockIdx.x * {COMBINE_WARPS} + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= batch) return;
    float sum = 0.0f;
    for (int j = lane; j < splits; j += 32) sum += partial[row * splits + j];
    sum = warp_sum(sum);
    if (lane == 0) out[row] = sum;
}}
"""
    return """
// pass 2: a thread per vector adds its partials in order
extern "C" __global__ void inner_product_combine(const float* __restrict__ partial, float* __restrict__ out, int batch, int splits) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= batch) return;
    float sum = 0.0f;
    for (int j = 0; j < splits; j++) sum += partial[row * splits + j];
    out[row] = sum;
}
"""


def _split_two_pass(dtype: str, block: int, vector: int, combine: str) -> str:
    return f"""{cuda_prelude(dtype, {"BLOCK": block}, vector)}{cuda_reductions(("sum",), "shuffle")}
// pass 1, grid (splits, batch): each block's slice sum into partial[row][split]
{_inner_signature(dtype, True, "inner_product_partials", "partial")} {{
{_split_slice(dtype, vector)}    if (threadIdx.x == 0) partial[row * gridDim.x + blockIdx.x] = sum;
}}
{_combine(combine)}"""


INNER_TRITON_ROW = f"""{TRITON_HEADER}

@triton.jit
def inner_product(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n
        x = tl.load(a_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(b_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
        acc += x * y
    tl.store(out_ptr + row, tl.sum(acc, axis=0))
"""

INNER_TRITON_SPLIT = f"""{TRITON_HEADER}

@triton.jit
def inner_product(a_ptr, b_ptr, out_ptr, n, chunk, BLOCK: tl.constexpr):
    # grid (splits, batch): program (s, row) adds a[row, s*chunk : (s+1)*chunk] . b[...] to out[row]
    row = tl.program_id(1)
    begin = tl.program_id(0) * chunk
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(begin, begin + chunk, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n
        x = tl.load(a_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(b_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
        acc += x * y
    tl.atomic_add(out_ptr + row, tl.sum(acc, axis=0))
"""


def _inner_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("a", "b", "out", i32(sizes["batch"]), i32(sizes["n"]))


def _split_grid(sizes: Sizes, splits: int) -> tuple[int, int, int]:
    return (splits, sizes["batch"], 1)


def inner_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        yield from _inner_cuda_variants(dtype)
        yield from _inner_triton_variants(dtype)


def _inner_cuda_variants(dtype: str) -> Iterable[Variant]:
    """Each family's base and every one-axis change of it for fp32; for fp16 the base and its most telling neighbours."""
    full = dtype == "f32"
    wide = vector_width(dtype)
    vec_ok = divisible("n", wide)

    thread_base = {"block": 128, "vector": 1, "restrict": False}
    thread = (
        around(thread_base, block=[32, 256], vector=[wide], restrict=[True]) + [{**thread_base, "vector": wide, "restrict": True}]
        if full
        else (around(thread_base, vector=[wide]))
    )
    for p in thread:
        yield Variant(
            "cuda-thread-per-vector",
            "cuda",
            {"dtype": dtype, **p},
            _thread_per_vector(dtype, p["block"], p["vector"], p["restrict"]),
            one_launch("inner_product", _inner_args, lambda s, p=p: cdiv(s["batch"], p["block"]), p["block"]),
            unsupported=unsupported(dtype, at_most("n", SERIAL_MAX_N, "a serial vector is too slow"), vec_ok),
        )
    warp_base = {"warps": 4, "vector": wide, "restrict": True}
    for p in around(warp_base, warps=[1, 8], vector=[1], restrict=[False]) if full else around(warp_base, vector=[1]):
        yield Variant(
            "cuda-warp-per-vector",
            "cuda",
            {"dtype": dtype, **p},
            _warp_per_vector(dtype, p["warps"], p["vector"], p["restrict"]),
            one_launch("inner_product", _inner_args, lambda s, p=p: cdiv(s["batch"], p["warps"]), 32 * p["warps"]),
            unsupported=unsupported(dtype, vec_ok),
        )
    block_base = {"block": 256, "vector": wide, "reduction": "shuffle"}
    for p in (
        around(block_base, block=[128, 512, 1024], vector=[1], reduction=["smem", "interleaved"])
        if full
        else around(block_base, vector=[1])
    ):
        yield Variant(
            "cuda-block-per-vector",
            "cuda",
            {"dtype": dtype, **p},
            _block_per_vector(dtype, p["block"], p["vector"], p["reduction"]),
            one_launch("inner_product", _inner_args, lambda s: s["batch"], p["block"]),
            unsupported=unsupported(dtype, vec_ok),
        )
    atomic_base = {"splits": 16, "block": 256, "vector": wide, "restrict": True}
    for p in (
        around(atomic_base, splits=[4, 64, 256], block=[128, 512], vector=[1], restrict=[False])
        if full
        else around(atomic_base, splits=[4, 64])
    ):
        yield Variant(
            "cuda-split-atomic",
            "cuda",
            {"dtype": dtype, **p},
            _split_atomic(dtype, p["block"], p["vector"], p["restrict"]),
            lambda s, p=p: [
                Launch(ZERO, grid1(1), ("out",)),
                Launch("inner_product", _split_grid(s, p["splits"]), _inner_args(s), block1(p["block"])),
            ],
            unsupported=unsupported(dtype, vec_ok),
        )
    two_pass_base = {"splits": 16, "block": 256, "vector": wide, "combine": "warp"}
    for p in around(two_pass_base, splits=[4, 64, 256], vector=[1], combine=["thread"]) if full else around(two_pass_base, splits=[64]):
        yield Variant(
            "cuda-split-two-pass",
            "cuda",
            {"dtype": dtype, **p},
            _split_two_pass(dtype, p["block"], p["vector"], p["combine"]),
            _two_pass_launches(p),
            scratch=lambda s, p=p: {"partial": TensorSpec((s["batch"] * p["splits"],), "f32")},
            unsupported=unsupported(dtype, vec_ok),
        )


def _two_pass_launches(p: dict[str, Any]):
    def launches(sizes: Sizes) -> list[Launch]:
        batch = sizes["batch"]
        # the combine kernel: COMBINE_WARPS warps a block, a vector each, or 256 threads, a vector each
        grid, block = (
            (grid1(cdiv(batch, COMBINE_WARPS)), block1(32 * COMBINE_WARPS))
            if p["combine"] == "warp"
            else (grid1(cdiv(batch, 256)), block1(256))
        )
        return [
            Launch(
                "inner_product_partials",
                _split_grid(sizes, p["splits"]),
                ("a", "b", "partial", i32(batch), i32(sizes["n"])),
                block1(p["block"]),
            ),
            Launch("inner_product_combine", grid, ("partial", "out", i32(batch), i32(p["splits"])), block),
        ]

    return launches


def _inner_triton_variants(dtype: str) -> Iterable[Variant]:
    full = dtype == "f32"
    row_settings = (
        product({"BLOCK": [256, 1024, 4096], "num_warps": [4, 8]})
        if full
        else [{"BLOCK": 1024, "num_warps": 4}, {"BLOCK": 4096, "num_warps": 8}]
    )
    for p in row_settings:
        yield Variant(
            "triton-row",
            "triton",
            {"dtype": dtype, **p},
            INNER_TRITON_ROW,
            lambda s, p=p: [
                Launch(
                    "inner_product",
                    grid1(s["batch"]),
                    ("a", "b", "out", i32(s["n"])),
                    constexprs={"BLOCK": p["BLOCK"]},
                    num_warps=p["num_warps"],
                )
            ],
            unsupported=unsupported(dtype),
        )
    split_base = {"splits": 16, "BLOCK": 1024, "num_warps": 4}
    split_settings = around(split_base, splits=[4, 64, 256], BLOCK=[4096], num_warps=[8]) if full else around(split_base, splits=[64])
    for p in split_settings:
        yield Variant(
            "triton-split-atomic",
            "triton",
            {"dtype": dtype, **p},
            INNER_TRITON_SPLIT,
            lambda s, p=p: [
                Launch(ZERO, grid1(1), ("out",)),
                Launch(
                    "inner_product",
                    _split_grid(s, p["splits"]),
                    ("a", "b", "out", i32(s["n"]), i32(_triton_chunk(s["n"], p))),
                    constexprs={"BLOCK": p["BLOCK"]},
                    num_warps=p["num_warps"],
                ),
            ],
            unsupported=unsupported(dtype),
        )


def _triton_chunk(n: int, p: dict[str, Any]) -> int:
    """Elements per split, rounded up to whole BLOCK tiles."""
    return cdiv(cdiv(n, p["splits"]), p["BLOCK"]) * p["BLOCK"]


INNER_PRODUCT = Op(
    name="inner_product",
    bound="memory",
    sizes=INNER_SIZES,
    inputs=lambda s: {"a": TensorSpec((s["batch"], s["n"]), s["dtype"], "rand"), "b": TensorSpec((s["batch"], s["n"]), s["dtype"], "rand")},
    outputs=lambda s: {"out": TensorSpec((s["batch"],), "f32")},
    reference=lambda torch, inputs, sizes: {"out": (inputs["a"].float() * inputs["b"].float()).sum(dim=1)},
    reference_code="def reference(a, b):\n    return (a.float() * b.float()).sum(dim=1)\n",
    variants=inner_variants,
)

OPS = [PAGED_COPY, INNER_PRODUCT]
