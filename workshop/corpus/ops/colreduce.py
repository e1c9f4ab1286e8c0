"""Column sums and the L2 norm: reductions whose speed is decided by which thread reads which
address and by how partial sums from many blocks are brought together.

- column_sum: y[c] = sum over rows of x[r, c] for a row-major x (rows x cols), fp32 and fp16
  (fp32 accumulation, fp32 output: an fp16 sum of a million rows would overflow). Shapes:
  tiny (1000 x 100), tall-skinny (1M x 32), square (4096²), wide (64 x 256K). The trap is the
  opposite of row reductions: a thread per column walking down the rows is coalesced across
  the warp, a warp per column is not. CUDA: cuda-thread-per-column (the textbook
  `row * cols + col` loop; block, unroll = independent partial sums, vector = 2/4/8
  neighbouring columns per thread in one load, restrict); cuda-warp-per-column (lanes on 32
  different rows: every load touches 32 rows; warps per block, restrict); cuda-block-tile (TX
  columns x TY row-slices per block, partials combined in a shared `partial[TX][TY + PAD]`
  whose column-major layout makes PAD = 0 a TY-way bank conflict; tile shape, pad, split =
  rows cut into 1024-row chunks over grid.y folded with atomicAdd after a ZERO launch);
  cuda-split-rows (a thread per column over CHUNK rows, grid.y over the chunks; finish =
  atomicAdd into y after a ZERO launch, or partials to a scratch and a second launch; block,
  chunk, restrict). Kernels that walk all rows in one block (thread, warp, unsplit tile)
  skip the 1M-row matrix: 32 threads walking a million rows take a fraction of a second.
  Triton: triton-column-block (a program per BLOCK_C columns looping over all rows in
  BLOCK_R tiles; num_warps) and triton-split-rows (a program per [TILES * BLOCK_R, BLOCK_C]
  slab; finish = tl.atomic_add or a scratch reduced by the column-block kernel).
- l2norm: y = sqrt(sum x²) over n elements (1001 to 2^27; fp32 and fp16 in, fp32 out).
  CUDA: cuda-single-block (one block walks everything: one launch, one SM; block, vector,
  unroll, block reduction shuffle or shared-memory tree; n <= 2^23), cuda-atomic (block
  partials atomically added into y after a ZERO launch, then a one-thread sqrt kernel;
  block, items per thread, one pass over a full grid vs a grid-stride loop over a
  persistent grid, vector, reduction, restrict), cuda-two-pass (block partials to a
  scratch, a second one-block launch adds them and takes the root; blocks, block, vector),
  cuda-last-block (one launch: a ticket counter elects the last block to finish the sum;
  blocks, block, vector). Vector kernels read 16-byte packs and add the n % VEC tail
  element by element. Triton: triton-atomic (a tile per program, tl.atomic_add, then a
  sqrt kernel), triton-two-pass (partials, then one program sums them), triton-persistent
  (a fixed grid striding over the vector; programs). BLOCK and num_warps throughout.
  Inputs are uniform [0, 1) in both operations, so every summation order is within fp32's
  tolerance (see L2NORM_TOLERANCE).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.memkit import pack_struct
from workshop.corpus.ops.rowkit import (
    THREADS_PER_SM,
    TRITON_HEADER,
    Check,
    at_most,
    cuda_accumulate,
    cuda_prelude,
    cuda_reductions,
    divisible,
    resident_blocks,
    unsupported,
    vector_width,
)
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
)

# --- column_sum -----------------------------------------------------------------------------------

COLUMN_SIZES = [
    {"rows": 1000, "cols": 100, "dtype": "f32"},
    {"rows": 1 << 20, "cols": 32, "dtype": "f32"},
    {"rows": 4096, "cols": 4096, "dtype": "f32"},
    {"rows": 64, "cols": 1 << 18, "dtype": "f32"},
    {"rows": 1 << 20, "cols": 32, "dtype": "f16"},
    {"rows": 4096, "cols": 4096, "dtype": "f16"},
    {"rows": 64, "cols": 1 << 18, "dtype": "f16"},
]
WALK_MAX_ROWS = 65536  # one block walking every row of its columns: the 1M-row matrix takes too long
TILE_SPLIT_ROWS = 1024  # rows per block of a split block tile


def _column_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "y", i32(sizes["rows"]), i32(sizes["cols"]))


def _walks_all_rows(dtype: str, *checks: Check) -> Check:
    return unsupported(dtype, at_most("rows", WALK_MAX_ROWS, "one block walks every row"), *checks)


def _thread_per_column(dtype: str, unroll: int, vector: int, restrict: bool) -> str:
    """Consecutive threads on consecutive columns (or groups of `vector` columns): coalesced."""
    ctype = CUDA_TYPES[dtype]
    signature = f'extern "C" __global__ void column_sum({cuda_pointer(ctype, "x", restrict)}, {cuda_pointer("float", "y", restrict, const=False)}, int rows, int cols)'
    if vector == 1 and unroll == 1:
        return f"""{CUDA_HEADER}
{signature} {{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < cols) {{
        float sum = 0.0f;
        for (int row = 0; row < rows; row++) sum += {cuda_load_as_float(dtype, "x[row * cols + col]")};
        y[col] = sum;
    }}
}}
"""
    if vector == 1:
        return f"""{CUDA_HEADER}
#define UNROLL {unroll}

// UNROLL independent partial sums keep UNROLL loads in flight per thread
{signature} {{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    float part[UNROLL] = {{0.0f}};
    int row = 0;
    for (; row + UNROLL <= rows; row += UNROLL) {{
        #pragma unroll
        for (int u = 0; u < UNROLL; u++) part[u] += {cuda_load_as_float(dtype, "x[(row + u) * cols + col]")};
    }}
    for (; row < rows; row++) part[0] += {cuda_load_as_float(dtype, "x[row * cols + col]")};
    float sum = 0.0f;
    #pragma unroll
    for (int u = 0; u < UNROLL; u++) sum += part[u];
    y[col] = sum;
}}
"""
    return f"""{CUDA_HEADER}
#define VEC {vector}
#define UNROLL {unroll}
{pack_struct(dtype, vector)}
// a thread owns VEC neighbouring columns and reads them with one load per row
{signature} {{
    int group = blockIdx.x * blockDim.x + threadIdx.x;
    int groups = cols / VEC;
    if (group >= groups) return;
    const Pack* xp = reinterpret_cast<const Pack*>(x);
    float acc[UNROLL][VEC] = {{}};
    int row = 0;
    for (; row + UNROLL <= rows; row += UNROLL) {{
        #pragma unroll
        for (int u = 0; u < UNROLL; u++) {{
            Pack p = xp[(row + u) * groups + group];
            #pragma unroll
            for (int k = 0; k < VEC; k++) acc[u][k] += {cuda_load_as_float(dtype, "p.v[k]")};
        }}
    }}
    for (; row < rows; row++) {{
        Pack p = xp[row * groups + group];
        #pragma unroll
        for (int k = 0; k < VEC; k++) acc[0][k] += {cuda_load_as_float(dtype, "p.v[k]")};
    }}
    #pragma unroll
    for (int k = 0; k < VEC; k++) {{
        float sum = 0.0f;
        #pragma unroll
        for (int u = 0; u < UNROLL; u++) sum += acc[u][k];
        y[group * VEC + k] = sum;
    }}
}}
"""


def _warp_per_column(dtype: str, warps: int, restrict: bool) -> str:
    return f"""{CUDA_HEADER}
#define WARPS {warps}

// one warp per column: lane i reads rows i, i + 32, ... so one load touches 32 rows (uncoalesced)
extern "C" __global__ void column_sum({cuda_pointer(CUDA_TYPES[dtype], "x", restrict)}, {cuda_pointer("float", "y", restrict, const=False)}, int rows, int cols) {{
    int col = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (col >= cols) return;
    float sum = 0.0f;
    for (int row = lane; row < rows; row += 32) sum += {cuda_load_as_float(dtype, "x[row * cols + col]")};
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_down_sync(0xffffffff, sum, offset);
    if (lane == 0) y[col] = sum;
}}
"""


def _block_tile(dtype: str, tx: int, ty: int, pad: int, split: bool) -> str:
    """partial[tx][ty] is written and read by lanes with consecutive tx: a stride of TY + PAD words."""
    if split:
        rows_of_block = """    int begin = blockIdx.y * CHUNK;
    int end = min(rows, begin + CHUNK);
"""
        define, finish = f"#define CHUNK {TILE_SPLIT_ROWS}\n", "atomicAdd(&y[col], total)"
    else:
        rows_of_block, define, finish = "    int begin = 0, end = rows;\n", "", "y[col] = total"
    return f"""{CUDA_HEADER}
#define TX {tx}
#define TY {ty}
#define PAD {pad}
{define}
// a block of TX x TY threads: TY threads walk the rows of each of its TX columns
extern "C" __global__ void column_sum(const {CUDA_TYPES[dtype]}* __restrict__ x, float* __restrict__ y, int rows, int cols) {{
    __shared__ float partial[TX][TY + PAD];
    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * TX + tx;
{rows_of_block}    float sum = 0.0f;
    if (col < cols)
        for (int row = begin + ty; row < end; row += TY) sum += {cuda_load_as_float(dtype, "x[row * cols + col]")};
    partial[tx][ty] = sum;
    __syncthreads();
    if (ty == 0 && col < cols) {{
        float total = 0.0f;
        for (int k = 0; k < TY; k++) total += partial[tx][k];
        {finish};
    }}
}}
"""


def _split_rows(dtype: str, chunk: int, finish: str, restrict: bool) -> str:
    """A thread per column over CHUNK rows; the chunk's sum goes to y atomically or to its scratch row."""
    ctype = CUDA_TYPES[dtype]
    if finish == "atomic":
        out, store = cuda_pointer("float", "y", restrict, const=False), "atomicAdd(&y[col], sum);"
        second = ""
    else:
        out, store = cuda_pointer("float", "partial", restrict, const=False), "partial[blockIdx.y * cols + col] = sum;"
        second = f"""
// second launch: a thread per column adds its chunks' partials
extern "C" __global__ void column_sum_finish({cuda_pointer("float", "partial", restrict)}, {cuda_pointer("float", "y", restrict, const=False)}, int chunks, int cols) {{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    float sum = 0.0f;
    for (int c = 0; c < chunks; c++) sum += partial[c * cols + col];
    y[col] = sum;
}}
"""
    return f"""{CUDA_HEADER}
#define CHUNK {chunk}

// grid (column blocks, row chunks): each thread sums one column over CHUNK rows
extern "C" __global__ void column_sum({cuda_pointer(ctype, "x", restrict)}, {out}, int rows, int cols) {{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int begin = blockIdx.y * CHUNK;
    int end = min(rows, begin + CHUNK);
    if (col >= cols) return;
    float sum = 0.0f;
    for (int row = begin; row < end; row++) sum += {cuda_load_as_float(dtype, "x[row * cols + col]")};
    {store}
}}
{second}"""


COLUMN_TRITON_BLOCK = f"""{TRITON_HEADER}

@triton.jit
def column_sum(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # a program owns BLOCK_C columns and walks down every row in BLOCK_R-row tiles
    col = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    for start in range(0, rows, BLOCK_R):
        row = start + tl.arange(0, BLOCK_R)
        mask = (row[:, None] < rows) & (col[None, :] < cols)
        acc += tl.load(x_ptr + row[:, None] * cols + col[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + col, tl.sum(acc, axis=0), mask=col < cols)
"""


def _column_triton_split(finish: str) -> str:
    """A [TILES * BLOCK_R, BLOCK_C] slab per program; its column sums added atomically or stored as a scratch row."""
    if finish == "atomic":
        out, store, second = "y_ptr", "    tl.atomic_add(y_ptr + col, tl.sum(acc, axis=0), mask=col < cols)\n", ""
    else:
        out = "partial_ptr"
        store = "    tl.store(partial_ptr + tl.program_id(1) * cols + col, tl.sum(acc, axis=0), mask=col < cols)\n"
        second = COLUMN_TRITON_BLOCK.removeprefix(TRITON_HEADER)
    return f"""{TRITON_HEADER}

@triton.jit
def column_sum_slab(x_ptr, {out}, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, TILES: tl.constexpr):
    col = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    first = tl.program_id(1) * TILES * BLOCK_R
    acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    for t in range(TILES):
        row = first + t * BLOCK_R + tl.arange(0, BLOCK_R)
        mask = (row[:, None] < rows) & (col[None, :] < cols)
        acc += tl.load(x_ptr + row[:, None] * cols + col[None, :], mask=mask, other=0.0).to(tl.float32)
{store}{second}"""


def column_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        yield from _column_cuda_variants(dtype)
        yield from _column_triton_variants(dtype)


def _column_cuda_variants(dtype: str) -> Iterable[Variant]:
    """fp32 gets every edit around each family's base; fp16 the base and its main knobs."""
    full = dtype == "f32"
    wide = vector_width(dtype)  # 16-byte loads
    thread_base = {"block": 256, "unroll": 1, "vector": 1, "restrict": False}
    if full:
        thread_settings = around(thread_base, block=[128], unroll=[4, 8], vector=[2, 4], restrict=[True]) + [
            {**thread_base, "unroll": 4, "vector": 4},
            {**thread_base, "unroll": 4, "vector": 4, "restrict": True},
        ]
    else:
        thread_settings = around(thread_base, unroll=[4], vector=[2, wide], restrict=[True])
    for p in thread_settings:
        yield Variant(
            "cuda-thread-per-column",
            "cuda",
            {"dtype": dtype, **p},
            _thread_per_column(dtype, p["unroll"], p["vector"], p["restrict"]),
            lambda s, p=p: [Launch("column_sum", grid1(cdiv(s["cols"] // p["vector"], p["block"])), _column_args(s), block1(p["block"]))],
            unsupported=_walks_all_rows(dtype, divisible("cols", p["vector"])),
        )
    for p in around({"warps": 4, "restrict": False}, warps=[1, 8], restrict=[True]) if full else [{"warps": 4, "restrict": False}]:
        yield Variant(
            "cuda-warp-per-column",
            "cuda",
            {"dtype": dtype, **p},
            _warp_per_column(dtype, p["warps"], p["restrict"]),
            lambda s, p=p: [Launch("column_sum", grid1(cdiv(s["cols"], p["warps"])), _column_args(s), block1(32 * p["warps"]))],
            unsupported=_walks_all_rows(dtype),
        )
    tiles = [(32, 8), (32, 32), (64, 4)] if full else [(32, 8)]
    tile_settings = [{"tx": tx, "ty": ty, "pad": pad, "split": False} for tx, ty in tiles for pad in (0, 1)]
    tile_settings += [{"tx": 32, "ty": 8, "pad": pad, "split": True} for pad in (0, 1)] + (
        [{"tx": 32, "ty": 32, "pad": 1, "split": True}] if full else []
    )
    for p in tile_settings:
        yield Variant(
            "cuda-block-tile",
            "cuda",
            {"dtype": dtype, **p},
            _block_tile(dtype, p["tx"], p["ty"], p["pad"], p["split"]),
            _tile_launch(p),
            unsupported=unsupported(dtype) if p["split"] else _walks_all_rows(dtype),
        )
    split_base = {"finish": "atomic", "block": 256, "chunk": 256, "restrict": True}
    split_settings = around(split_base, finish=["scratch"], block=[32], chunk=[64, 1024, 4096], restrict=[False]) + [
        {**split_base, "finish": "scratch", "chunk": 64},
        {**split_base, "block": 32, "chunk": 1024},
    ]
    if not full:
        split_settings = around(split_base, finish=["scratch"], block=[32], chunk=[1024])
    for p in split_settings:
        yield Variant(
            "cuda-split-rows",
            "cuda",
            {"dtype": dtype, **p},
            _split_rows(dtype, p["chunk"], p["finish"], p["restrict"]),
            _split_launch(p),
            scratch=_split_scratch(p["chunk"], p["finish"]),
            unsupported=unsupported(dtype),
        )


def _tile_launch(p: dict[str, Any]) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        chunks = cdiv(s["rows"], TILE_SPLIT_ROWS) if p["split"] else 1
        kernel = Launch("column_sum", (cdiv(s["cols"], p["tx"]), chunks, 1), _column_args(s), (p["tx"], p["ty"], 1))
        return [Launch(ZERO, grid1(1), ("y",)), kernel] if p["split"] else [kernel]

    return launches


def _split_scratch(chunk: int, finish: str) -> Callable[[Sizes], dict[str, TensorSpec]]:
    if finish == "atomic":
        return lambda s: {}
    return lambda s: {"partial": TensorSpec((cdiv(s["rows"], chunk), s["cols"]), "f32")}


def _split_launch(p: dict[str, Any]) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        chunks = cdiv(s["rows"], p["chunk"])
        grid = (cdiv(s["cols"], p["block"]), chunks, 1)
        if p["finish"] == "atomic":
            return [Launch(ZERO, grid1(1), ("y",)), Launch("column_sum", grid, _column_args(s), block1(p["block"]))]
        return [
            Launch("column_sum", grid, ("x", "partial", i32(s["rows"]), i32(s["cols"])), block1(p["block"])),
            Launch(
                "column_sum_finish", grid1(cdiv(s["cols"], p["block"])), ("partial", "y", i32(chunks), i32(s["cols"])), block1(p["block"])
            ),
        ]

    return launches


def _column_triton_variants(dtype: str) -> Iterable[Variant]:
    full = dtype == "f32"
    blocks = [(32, 64, 4), (64, 64, 4), (16, 128, 4), (128, 32, 4), (32, 256, 8)] if full else [(32, 64, 4), (32, 256, 8)]
    for block_r, block_c, warps in blocks:
        p = {"dtype": dtype, "BLOCK_R": block_r, "BLOCK_C": block_c, "num_warps": warps}
        yield Variant(
            "triton-column-block",
            "triton",
            p,
            COLUMN_TRITON_BLOCK,
            lambda s, p=p: [
                Launch(
                    "column_sum",
                    grid1(cdiv(s["cols"], p["BLOCK_C"])),
                    _column_args(s),
                    constexprs={"BLOCK_R": p["BLOCK_R"], "BLOCK_C": p["BLOCK_C"]},
                    num_warps=p["num_warps"],
                )
            ],
            unsupported=_walks_all_rows(dtype),
        )
    split_base = {"finish": "atomic", "BLOCK_R": 64, "BLOCK_C": 64, "TILES": 16, "num_warps": 4}
    split_settings = around(split_base, finish=["scratch"], BLOCK_C=[32, 128], TILES=[1, 64], num_warps=[8]) + [
        {**split_base, "finish": "scratch", "TILES": 64}
    ]
    if not full:
        split_settings = around(split_base, finish=["scratch"], BLOCK_C=[32])
    for p in split_settings:
        yield Variant(
            "triton-split-rows",
            "triton",
            {"dtype": dtype, **p},
            _column_triton_split(p["finish"]),
            _triton_split_launch(p),
            scratch=_split_scratch(p["TILES"] * p["BLOCK_R"], p["finish"]),
            unsupported=unsupported(dtype),
        )


def _triton_split_launch(p: dict[str, Any]) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        chunks = cdiv(s["rows"], p["TILES"] * p["BLOCK_R"])
        tile = {"BLOCK_R": p["BLOCK_R"], "BLOCK_C": p["BLOCK_C"]}
        grid = (cdiv(s["cols"], p["BLOCK_C"]), chunks, 1)
        if p["finish"] == "atomic":
            return [
                Launch(ZERO, grid1(1), ("y",)),
                Launch("column_sum_slab", grid, _column_args(s), constexprs={**tile, "TILES": p["TILES"]}, num_warps=p["num_warps"]),
            ]
        return [
            Launch(
                "column_sum_slab",
                grid,
                ("x", "partial", i32(s["rows"]), i32(s["cols"])),
                constexprs={**tile, "TILES": p["TILES"]},
                num_warps=p["num_warps"],
            ),
            Launch("column_sum", grid1(grid[0]), ("partial", "y", i32(chunks), i32(s["cols"])), constexprs=tile, num_warps=p["num_warps"]),
        ]

    return launches


COLUMN_SUM = Op(
    name="column_sum",
    bound="memory",
    sizes=COLUMN_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["rows"], s["cols"]), s["dtype"], "rand")},
    outputs=lambda s: {"y": TensorSpec((s["cols"],), "f32")},
    reference=lambda torch, inputs, sizes: {"y": inputs["x"].sum(dim=0, dtype=torch.float32)},
    reference_code="def reference(x):\n    return x.sum(dim=0, dtype=torch.float32)\n",
    variants=column_variants,
)

# --- l2norm -----------------------------------------------------------------------------------------

L2NORM_SIZES = [
    {"n": 1001, "dtype": "f32"},
    {"n": 1 << 18, "dtype": "f32"},
    {"n": 1 << 22, "dtype": "f32"},
    {"n": 1 << 26, "dtype": "f32"},
    {"n": (1 << 22) + 3, "dtype": "f16"},
    {"n": 1 << 27, "dtype": "f16"},
]
SINGLE_BLOCK_MAX_N = 1 << 23  # one SM reading 256 MB takes tens of milliseconds
# fp32's 1e-4 (atol = rtol) holds for every order these kernels sum in: simulated on uniform [0, 1)
# inputs, a chain of a million block partials added one after another (the atomics at n = 2^27,
# 128 threads a block) is off by 1.4e-5 of the norm, per-thread serial sums of 131072 squares by
# 9e-6; a missed tail element at n = 1001 moves the norm by 5e-4 on average and fails it.
L2NORM_TOLERANCE = {"f32": 1e-4}


def _l2_signature(dtype: str, name: str, out: str, restrict: bool = True, extra: str = "") -> str:
    return f'extern "C" __global__ void {name}({cuda_pointer(CUDA_TYPES[dtype], "x", restrict)}, {cuda_pointer("float", out, restrict, const=False)}, int n{extra})'


def _square_into_sum(dtype: str, vector: int, index: str, pad: str) -> str:
    """Statements adding the squares of element (vector == 1) or pack `index` to `sum`."""
    if vector == 1:
        return f"{pad}float v = {cuda_load_as_float(dtype, f'x[{index}]')};\n{pad}sum += v * v;\n"
    return (
        f"{pad}Pack p = packs[{index}];\n{pad}#pragma unroll\n"
        f"{pad}for (int k = 0; k < VEC; k++) {{ float v = {cuda_load_as_float(dtype, 'p.v[k]')}; sum += v * v; }}\n"
    )


def _vector_tail(dtype: str, vector: int, first: str, stride: str) -> str:
    """The n % VEC elements after the last pack, one per thread from `first` on."""
    if vector == 1:
        return ""
    return f"    for (int i = n / VEC * VEC + {first}; i < n; i += {stride}) {{ float v = {cuda_load_as_float(dtype, 'x[i]')}; sum += v * v; }}\n"


def _thread_squares(dtype: str, vector: int, items: int, loop: str) -> str:
    """This thread's sum of squares: ITEMS elements (or packs) BLOCK apart, once over a grid that
    covers the vector or in a grid-stride loop over a persistent grid, then the vector tail."""
    count = "n" if vector == 1 else "n / VEC"
    lines = ["    float sum = 0.0f;\n"]
    if vector > 1:
        lines.append("    const Pack* packs = reinterpret_cast<const Pack*>(x);\n")
    step = f"""        #pragma unroll
        for (int t = 0; t < ITEMS; t++) {{
            int i = base + t * BLOCK;
            if (i >= {count}) break;
{_square_into_sum(dtype, vector, "i", "            ")}        }}
"""
    if loop == "one-pass":
        lines.append(f"    {{\n        int base = blockIdx.x * BLOCK * ITEMS + threadIdx.x;\n{step}    }}\n")
    else:
        lines.append(
            f"    for (int base = blockIdx.x * BLOCK * ITEMS + threadIdx.x; base < {count}; base += gridDim.x * BLOCK * ITEMS) {{\n{step}    }}\n"
        )
    lines.append(_vector_tail(dtype, vector, "blockIdx.x * BLOCK + threadIdx.x", "gridDim.x * BLOCK"))
    return "".join(lines)


def _l2_defines(block: int, vector: int, items: int | None = None) -> dict[str, int]:
    defines = {"BLOCK": block, **({"VEC": vector} if vector > 1 else {})}
    return {**defines, "ITEMS": items} if items is not None else defines


def _single_block(dtype: str, block: int, vector: int, unroll: int, reduction: str) -> str:
    src = "x" if vector == 1 else "packs"
    packs = "" if vector == 1 else "    const Pack* packs = reinterpret_cast<const Pack*>(x);\n"
    accumulate = cuda_accumulate(
        dtype, "sum", src, "threadIdx.x", "BLOCK", "n" if vector == 1 else "n / VEC", vector, unroll, acc="sum", value="v * v"
    )
    return f"""{cuda_prelude(dtype, _l2_defines(block, vector), vector)}{cuda_reductions(("sum",), reduction)}
// one block walks the whole vector: a single launch and no atomics, but a single SM
{_l2_signature(dtype, "l2norm", "y")} {{
{packs}{accumulate}{_vector_tail(dtype, vector, "threadIdx.x", "BLOCK")}    sum = block_sum(sum);
    if (threadIdx.x == 0) y[0] = sqrtf(sum);
}}
"""


def _atomic(dtype: str, block: int, items: int, loop: str, vector: int, reduction: str, restrict: bool) -> str:
    return f"""{cuda_prelude(dtype, _l2_defines(block, vector, items), vector)}{cuda_reductions(("sum",), reduction)}
// each block adds its sum of squares to y (zeroed before), then one thread takes the root
{_l2_signature(dtype, "l2norm_partial", "y", restrict)} {{
{_thread_squares(dtype, vector, items, loop)}    sum = block_sum(sum);
    if (threadIdx.x == 0) atomicAdd(y, sum);
}}

extern "C" __global__ void l2norm_sqrt(float* y) {{
    y[0] = sqrtf(y[0]);
}}
"""


def _two_pass(dtype: str, block: int, vector: int) -> str:
    return f"""{cuda_prelude(dtype, _l2_defines(block, vector, 1), vector)}{cuda_reductions(("sum",), "shuffle")}
// pass 1: a grid-stride sum of squares per block into scratch
{_l2_signature(dtype, "l2norm_partial", "partial")} {{
{_thread_squares(dtype, vector, 1, "grid-stride")}    sum = block_sum(sum);
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}}

// pass 2: one block adds the partials and takes the root
extern "C" __global__ void l2norm_finish(const float* __restrict__ partial, float* __restrict__ y, int count) {{
    float sum = 0.0f;
    for (int i = threadIdx.x; i < count; i += BLOCK) sum += partial[i];
    sum = block_sum(sum);
    if (threadIdx.x == 0) y[0] = sqrtf(sum);
}}
"""


def _last_block(dtype: str, block: int, vector: int) -> str:
    extra = ", float* __restrict__ partial, unsigned int* __restrict__ counter"
    return f"""{cuda_prelude(dtype, _l2_defines(block, vector, 1), vector)}{cuda_reductions(("sum",), "shuffle")}
// one launch: blocks write partials, the last block to take a ticket adds them and takes the root
{_l2_signature(dtype, "l2norm", "y", extra=extra)} {{
    __shared__ bool last;
{_thread_squares(dtype, vector, 1, "grid-stride")}    sum = block_sum(sum);
    if (threadIdx.x == 0) {{
        partial[blockIdx.x] = sum;
        __threadfence();
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }}
    __syncthreads();
    if (!last) return;
    float total = 0.0f;
    for (int i = threadIdx.x; i < gridDim.x; i += BLOCK) total += __ldcg(partial + i);
    total = block_sum(total);
    if (threadIdx.x == 0) y[0] = sqrtf(total);
}}
"""


L2_TRITON_ATOMIC = f"""{TRITON_HEADER}

@triton.jit
def l2norm_partial(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0).to(tl.float32)
    tl.atomic_add(y_ptr, tl.sum(v * v, axis=0))


@triton.jit
def l2norm_sqrt(y_ptr):
    tl.store(y_ptr, tl.sqrt(tl.load(y_ptr)))
"""

L2_TRITON_TWO_PASS = f"""{TRITON_HEADER}

@triton.jit
def l2norm_partial(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0).to(tl.float32)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(v * v, axis=0))


@triton.jit
def l2norm_finish(partial_ptr, y_ptr, count, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, count, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        acc += tl.load(partial_ptr + offsets, mask=offsets < count, other=0.0)
    tl.store(y_ptr, tl.sqrt(tl.sum(acc, axis=0)))
"""

L2_TRITON_PERSISTENT = f"""{TRITON_HEADER}

@triton.jit
def l2norm_partial(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # a fixed grid of programs strides over the vector, one atomic each
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0).to(tl.float32)
        acc += v * v
    tl.atomic_add(y_ptr, tl.sum(acc, axis=0))


@triton.jit
def l2norm_sqrt(y_ptr):
    tl.store(y_ptr, tl.sqrt(tl.load(y_ptr)))
"""

FINISH_BLOCK = 1024  # Triton's second pass of the partials


def _l2_packs(n: int, vector: int) -> int:
    return n // vector if vector > 1 else n


def _atomic_blocks(s: Sizes, p: dict[str, Any]) -> int:
    """Enough blocks for one pass over the vector (at least one, for the tail), capped at a wave for grid-stride."""
    blocks = max(1, cdiv(_l2_packs(s["n"], p["vector"]), p["block"] * p["items"]))
    return resident_blocks(blocks, THREADS_PER_SM // p["block"]) if p["loop"] == "grid-stride" else blocks


def l2norm_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        yield from _l2_cuda_variants(dtype)
        yield from _l2_triton_variants(dtype)


def _l2_cuda_variants(dtype: str) -> Iterable[Variant]:
    full = dtype == "f32"
    wide = vector_width(dtype)
    single_base = {"block": 1024, "vector": wide, "unroll": 1, "reduction": "shuffle"}
    single_settings = (
        around(single_base, block=[256, 512], vector=[1], unroll=[4], reduction=["smem"]) + [{**single_base, "block": 256, "vector": 1}]
        if full
        else (around(single_base, vector=[1]))
    )
    for p in single_settings:
        yield Variant(
            "cuda-single-block",
            "cuda",
            {"dtype": dtype, **p},
            _single_block(dtype, p["block"], p["vector"], p["unroll"], p["reduction"]),
            lambda s, p=p: [Launch("l2norm", grid1(1), ("x", "y", i32(s["n"])), block1(p["block"]))],
            unsupported=unsupported(dtype, at_most("n", SINGLE_BLOCK_MAX_N, "one block on one SM")),
        )
    atomic_base = {"block": 256, "items": 4, "loop": "one-pass", "vector": 1, "reduction": "shuffle", "restrict": False}
    if full:
        atomic_settings = around(
            atomic_base, block=[128, 512, 1024], items=[1, 16], loop=["grid-stride"], vector=[wide], reduction=["smem"], restrict=[True]
        ) + [
            {**atomic_base, "vector": wide, "restrict": True},
            {**atomic_base, "loop": "grid-stride", "vector": wide},
            {**atomic_base, "items": 1, "reduction": "smem"},
        ]
    else:
        atomic_settings = around(atomic_base, loop=["grid-stride"], vector=[wide], restrict=[True])
    for p in atomic_settings:
        yield Variant(
            "cuda-atomic",
            "cuda",
            {"dtype": dtype, **p},
            _atomic(dtype, p["block"], p["items"], p["loop"], p["vector"], p["reduction"], p["restrict"]),
            lambda s, p=p: [
                Launch(ZERO, grid1(1), ("y",)),
                Launch("l2norm_partial", grid1(_atomic_blocks(s, p)), ("x", "y", i32(s["n"])), block1(p["block"])),
                Launch("l2norm_sqrt", grid1(1), ("y",), block1(1)),
            ],
            unsupported=unsupported(dtype),
        )
    two_pass = [
        {"blocks": blocks, "block": block, "vector": wide}
        for blocks in ([132, 528, 2112] if full else [528])
        for block in ([256, 1024] if full else [256])
    ]
    if full:
        two_pass += [{"blocks": 528, "block": 256, "vector": 1}, {"blocks": 2112, "block": 256, "vector": 1}]
    for p in two_pass:
        yield Variant(
            "cuda-two-pass",
            "cuda",
            {"dtype": dtype, **p},
            _two_pass(dtype, p["block"], p["vector"]),
            lambda s, p=p: [
                Launch("l2norm_partial", grid1(p["blocks"]), ("x", "partial", i32(s["n"])), block1(p["block"])),
                Launch("l2norm_finish", grid1(1), ("partial", "y", i32(p["blocks"])), block1(p["block"])),
            ],
            scratch=lambda s, p=p: {"partial": TensorSpec((p["blocks"],), "f32")},
            unsupported=unsupported(dtype),
        )
    last = (
        [{"blocks": blocks, "block": block, "vector": wide} for blocks in [264, 1056] for block in [256, 1024]]
        if full
        else [{"blocks": 1056, "block": 256, "vector": wide}]
    )
    for p in last:
        yield Variant(
            "cuda-last-block",
            "cuda",
            {"dtype": dtype, **p},
            _last_block(dtype, p["block"], p["vector"]),
            lambda s, p=p: [
                Launch(ZERO, grid1(1), ("counter",)),
                Launch("l2norm", grid1(p["blocks"]), ("x", "y", i32(s["n"]), "partial", "counter"), block1(p["block"])),
            ],
            scratch=lambda s, p=p: {"partial": TensorSpec((p["blocks"],), "f32"), "counter": TensorSpec((1,), "i32")},
            unsupported=unsupported(dtype),
        )


def _l2_triton_variants(dtype: str) -> Iterable[Variant]:
    full = dtype == "f32"
    tiles = [(1024, 4), (4096, 4), (4096, 8), (16384, 8)] if full else [(4096, 8)]
    for block, warps in tiles:
        p = {"dtype": dtype, "BLOCK": block, "num_warps": warps}
        yield Variant(
            "triton-atomic",
            "triton",
            p,
            L2_TRITON_ATOMIC,
            lambda s, p=p: [
                Launch(ZERO, grid1(1), ("y",)),
                Launch(
                    "l2norm_partial",
                    grid1(cdiv(s["n"], p["BLOCK"])),
                    ("x", "y", i32(s["n"])),
                    constexprs={"BLOCK": p["BLOCK"]},
                    num_warps=p["num_warps"],
                ),
                Launch("l2norm_sqrt", grid1(1), ("y",), num_warps=1),
            ],
            unsupported=unsupported(dtype),
        )
        yield Variant(
            "triton-two-pass",
            "triton",
            p,
            L2_TRITON_TWO_PASS,
            lambda s, p=p: [
                Launch(
                    "l2norm_partial",
                    grid1(cdiv(s["n"], p["BLOCK"])),
                    ("x", "partial", i32(s["n"])),
                    constexprs={"BLOCK": p["BLOCK"]},
                    num_warps=p["num_warps"],
                ),
                Launch(
                    "l2norm_finish",
                    grid1(1),
                    ("partial", "y", i32(cdiv(s["n"], p["BLOCK"]))),
                    constexprs={"BLOCK": FINISH_BLOCK},
                    num_warps=4,
                ),
            ],
            scratch=lambda s, p=p: {"partial": TensorSpec((cdiv(s["n"], p["BLOCK"]),), "f32")},
            unsupported=unsupported(dtype),
        )
    persistent = [(132, 4096, 8), (528, 4096, 8), (528, 1024, 4), (528, 4096, 4)] if full else [(528, 4096, 8)]
    for programs, block, warps in persistent:
        p = {"dtype": dtype, "programs": programs, "BLOCK": block, "num_warps": warps}
        yield Variant(
            "triton-persistent",
            "triton",
            p,
            L2_TRITON_PERSISTENT,
            lambda s, p=p: [
                Launch(ZERO, grid1(1), ("y",)),
                Launch(
                    "l2norm_partial",
                    grid1(min(p["programs"], cdiv(s["n"], p["BLOCK"]))),
                    ("x", "y", i32(s["n"])),
                    constexprs={"BLOCK": p["BLOCK"]},
                    num_warps=p["num_warps"],
                ),
                Launch("l2norm_sqrt", grid1(1), ("y",), num_warps=1),
            ],
            unsupported=unsupported(dtype),
        )


L2NORM = Op(
    name="l2norm",
    bound="memory",
    sizes=L2NORM_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],), s["dtype"], "rand")},
    outputs=lambda s: {"y": TensorSpec((1,), "f32")},
    # CUDA reduces like sum (a tree: exact to ~1e-6); CPU torch adds sequentially, 4e-3 off at 2^26.
    reference=lambda torch, inputs, sizes: {"y": torch.linalg.vector_norm(inputs["x"], dtype=torch.float32).reshape(1)},
    reference_code="def reference(x):\n    return torch.linalg.vector_norm(x, dtype=torch.float32).reshape(1)\n",
    variants=l2norm_variants,
    tolerance=L2NORM_TOLERANCE,
)

OPS = [COLUMN_SUM, L2NORM]
