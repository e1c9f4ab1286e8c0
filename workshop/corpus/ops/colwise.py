"""Column statistics of a row-major matrix: var_dim0 and amax_dim0, neighbours of column_sum
and mean_dim0 (colreduce, channels) with a state richer than a sum and a combine that is no
addition, written in more user styles (`rows, cols` and `R, C`; `idx` and `row * cols + col`;
`#define TILE_C` tiles; a `restrict` axis).

Shapes for both: tiny 1001 x 100, tall-skinny 1M x 16, square 4096², short-wide 64 x 1M,
fp32 and fp16 (fp16 without the tiny one). Kernels that walk every row of a column in one
block (thread, warp, unsplit tile, Triton column block) skip the 1M-row matrix: 16 columns
give 16 threads a million rows each.

- var_dim0: y = torch.var(x, dim=0, unbiased=False), fp32 output. The method is the axis
  that is new here: two passes (mean, then squared deviations: x read twice), one pass of
  sum and sum of squares (var = E[x²] - mean²), or Welford (a division per element).
  CUDA: cuda-thread-per-column (consecutive threads on consecutive columns: coalesced;
  method, block, `#pragma unroll` of the row loop, one pass over a full grid vs a
  grid-stride loop over a one-wave grid, restrict); cuda-warp-per-column (lanes on 32
  different rows: uncoalesced, the deliberate mistake; states merged by shuffles; method,
  warps, restrict); cuda-block-tile (TILE_C columns x TILE_R row walkers, states merged
  from a shared `s[TILE_C][TILE_R + PAD]` whose PAD = 0 is a TILE_R-way bank conflict;
  tile, pad, method); cuda-split-rows (grid (column blocks, CHUNK-row chunks); finish =
  atomicAdd of sum and sum of squares into a zeroed scratch, or each chunk's state to a
  scratch, merged (Chan's formula for Welford) by a second kernel; method, chunk, block,
  restrict). Triton: triton-column-block (a program per BLOCK_C columns walking all rows
  in BLOCK_R tiles; method sumsq, two passes, or Welford merging each tile's statistics;
  BLOCK_R, BLOCK_C, num_warps), triton-split-rows (a program per [TILES * BLOCK_R,
  BLOCK_C] slab; finish = tl.atomic_add into a zeroed scratch or per-slab partials, then a
  finishing kernel; tile, TILES, num_warps).
- amax_dim0: y = torch.amax(x, dim=0), output in x's dtype. CUDA: cuda-thread-per-column
  (block, unroll, vector = 2/4/8 neighbouring columns in one 16-byte-or-less load, one pass
  vs grid-stride over column strips, restrict), cuda-warp-per-column (warps, restrict),
  cuda-block-tile (tile, pad), cuda-split-rows (finish = atomicMax on order-preserving
  unsigned keys in a zeroed scratch then a decoding kernel, the signed/unsigned split
  atomic on floats after a kernel fills y with -inf (fp32 only), or chunk maxima to a
  scratch and a second kernel; chunk, block, restrict). Triton: triton-column-block
  (BLOCK_R, BLOCK_C, num_warps), triton-split-rows (finish = tl.atomic_max after a -inf
  fill (fp32) or partials reduced by the column-block kernel; tile, TILES, num_warps).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from workshop.corpus.ops.memkit import pack_struct
from workshop.corpus.ops.rowkit import (
    ATOMIC_MAX_FLOAT,
    NEG_INF,
    THREADS_PER_SM,
    TRITON_HEADER,
    Check,
    at_most,
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
    cuda_store_from_float,
    grid1,
    i32,
)

SIZES = [
    {"rows": 1001, "cols": 100, "dtype": "f32"},
    {"rows": 1 << 20, "cols": 16, "dtype": "f32"},
    {"rows": 4096, "cols": 4096, "dtype": "f32"},
    {"rows": 64, "cols": 1 << 20, "dtype": "f32"},
    {"rows": 1 << 20, "cols": 16, "dtype": "f16"},
    {"rows": 4096, "cols": 4096, "dtype": "f16"},
    {"rows": 64, "cols": 1 << 20, "dtype": "f16"},
]
WALK_MAX_ROWS = 65536  # one block walking every row of its columns: the 1M-row matrix takes too long
FINISH_BLOCK = 256  # threads of the second (finishing, decoding, filling) CUDA kernels


def _walks_all_rows(dtype: str, *checks: Check) -> Check:
    return unsupported(dtype, at_most("rows", WALK_MAX_ROWS, "one block walks every row"), *checks)


def _args(sizes: Sizes, x: str = "x", y: str = "y") -> tuple[Any, ...]:
    return (x, y, i32(sizes["rows"]), i32(sizes["cols"]))


# --- what a thread keeps while it walks a column ----------------------------------------------------

WELFORD_MERGE = """
// Chan et al.: fold the statistics (nb, meanb, m2b) of other rows into (n, mean, m2)
__device__ __forceinline__ void welford_merge(float& n, float& mean, float& m2, float nb, float meanb, float m2b) {
    float total = n + nb;
    if (total == 0.0f) return;
    float delta = meanb - mean;
    float wb = nb / total;
    mean += delta * wb;
    m2 += m2b + delta * delta * n * wb;
    n = total;
}
"""


@dataclass(frozen=True)
class Stat:
    """A column statistic as CUDA statements: its float fields, how an element v updates them,
    how the fields of other rows (named o_<field>) merge in, and the answer from `count` rows."""

    fields: tuple[str, ...]
    start: str
    update: str
    merge: str
    result: Callable[[str], str]
    helper: str = ""

    def declare(self) -> str:
        return "float " + ", ".join(f"{name} = {self.start}" for name in self.fields) + ";"

    def fold(self, other: Callable[[str], str], pad: str) -> str:
        """Statements merging the state whose field f is the expression other(f)."""
        lines = [f"{pad}float o_{name} = {other(name)};\n" for name in self.fields]
        return "".join(lines) + f"{pad}{self.merge}\n"


STATS = {
    "sumsq": Stat(
        ("sum", "sq"),
        "0.0f",
        "sum += v; sq += v * v;",
        "sum += o_sum; sq += o_sq;",
        lambda count: f"sq / {count} - (sum / {count}) * (sum / {count})",
    ),
    "welford": Stat(
        ("cnt", "mean", "m2"),
        "0.0f",
        "cnt += 1.0f; float d = v - mean; mean += d / cnt; m2 += d * (v - mean);",
        "welford_merge(cnt, mean, m2, o_cnt, o_mean, o_m2);",
        lambda count: "m2 / cnt",
        WELFORD_MERGE,
    ),
    "max": Stat(("m",), NEG_INF, "m = fmaxf(m, v);", "m = fmaxf(m, o_m);", lambda count: "m"),
}


@dataclass(frozen=True)
class Column:
    """One operation's side of the shared skeletons: its kernel name, output type and statistic."""

    name: str
    dtype: str
    stat: str  # a key of STATS, or "two-pass" (var only: mean first, then squared deviations)

    @property
    def ctype(self) -> str:
        return CUDA_TYPES[self.dtype]

    @property
    def out_type(self) -> str:
        return self.ctype if self.stat == "max" else "float"  # variances in fp32, maxima in x's type

    def store(self, expr: str) -> str:
        return expr if self.out_type == "float" else cuda_store_from_float(self.dtype, expr)

    def load(self, index: str) -> str:
        return cuda_load_as_float(self.dtype, f"x[{index}]")

    def signature(self, kernel: str, restrict: bool, sizes: str = "int rows, int cols", out: str = "y", out_type: str | None = None) -> str:
        return (
            f'extern "C" __global__ void {kernel}({cuda_pointer(self.ctype, "x", restrict)}, '
            f"{cuda_pointer(out_type or self.out_type, out, restrict, const=False)}, {sizes})"
        )


def _pragma(unroll: int, pad: str) -> str:
    return f"{pad}#pragma unroll {unroll}\n" if unroll > 1 else ""


def _column_walk(column: Column, unroll: int, pad: str) -> str:
    """Statements folding rows 0..rows-1 of column `col` and storing the answer to y[col]."""
    inner = pad + "    "
    if column.stat == "two-pass":
        return (
            f"{pad}float sum = 0.0f;\n{_pragma(unroll, pad)}{pad}for (int row = 0; row < rows; row++) sum += {column.load('row * cols + col')};\n"
            f"{pad}float mean = sum / rows;\n"
            f"{pad}// second pass over the column: squared deviations from its mean\n"
            f"{pad}float sq = 0.0f;\n{_pragma(unroll, pad)}{pad}for (int row = 0; row < rows; row++) {{\n"
            f"{inner}float d = {column.load('row * cols + col')} - mean;\n{inner}sq += d * d;\n{pad}}}\n"
            f"{pad}y[col] = sq / rows;\n"
        )
    stat = STATS[column.stat]
    return (
        f"{pad}{stat.declare()}\n{_pragma(unroll, pad)}{pad}for (int row = 0; row < rows; row++) {{\n"
        f"{inner}float v = {column.load('row * cols + col')};\n{inner}{stat.update}\n{pad}}}\n"
        f"{pad}y[col] = {column.store(stat.result('rows'))};\n"
    )


def _helper(column: Column) -> str:
    return STATS[column.stat].helper if column.stat in STATS else ""


def _thread_per_column(column: Column, unroll: int, loop: str, restrict: bool) -> str:
    """Consecutive threads on consecutive columns: a warp reads 32 neighbouring elements of a row."""
    if loop == "one-pass":
        body = f"""    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
{_column_walk(column, unroll, "    ")}"""
    else:
        body = f"""    // a one-wave grid strides over strips of blockDim.x columns
    for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < cols; col += blockDim.x * gridDim.x) {{
{_column_walk(column, unroll, "        ")}    }}
"""
    return f"""{CUDA_HEADER}{_helper(column)}
{column.signature(column.name, restrict)} {{
{body}}}
"""


def _amax_vector(column: Column, vector: int, unroll: int, restrict: bool) -> str:
    """A thread owns VEC neighbouring columns and reads them with one load per row."""
    return f"""{CUDA_HEADER}#define VEC {vector}
{pack_struct(column.dtype, vector)}
{column.signature(column.name, restrict)} {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int packs = cols / VEC;
    if (idx >= packs) return;
    const Pack* xp = reinterpret_cast<const Pack*>(x);
    float m[VEC];
    #pragma unroll
    for (int k = 0; k < VEC; k++) m[k] = {NEG_INF};
{_pragma(unroll, "    ")}    for (int row = 0; row < rows; row++) {{
        Pack p = xp[row * packs + idx];
        #pragma unroll
        for (int k = 0; k < VEC; k++) m[k] = fmaxf(m[k], {cuda_load_as_float(column.dtype, "p.v[k]")});
    }}
    Pack out;
    #pragma unroll
    for (int k = 0; k < VEC; k++) out.v[k] = {column.store("m[k]")};
    reinterpret_cast<Pack*>(y)[idx] = out;
}}
"""


def _warp_per_column(column: Column, warps: int, restrict: bool) -> str:
    stat = STATS[column.stat]
    return f"""{CUDA_HEADER}{stat.helper}
#define WARPS {warps}

// a warp per column: lane i reads rows i, i + 32, ... so every load touches 32 rows (uncoalesced)
{column.signature(column.name, restrict, "int R, int C")} {{
    int c = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (c >= C) return;
    {stat.declare()}
    for (int r = lane; r < R; r += 32) {{
        float v = {column.load("r * C + c")};
        {stat.update}
    }}
    for (int offset = 16; offset > 0; offset >>= 1) {{
{stat.fold(lambda name: f"__shfl_down_sync(0xffffffff, {name}, offset)", "        ")}    }}
    if (lane == 0) y[c] = {column.store(stat.result("R"))};
}}
"""


def _block_tile(column: Column, tile_c: int, tile_r: int, pad: int) -> str:
    """s[tx][ty] puts the lanes of a warp (consecutive tx) TILE_R + PAD words apart."""
    stat = STATS[column.stat]
    shared = "".join(f"    __shared__ float s_{name}[TILE_C][TILE_R + PAD];\n" for name in stat.fields)
    keep = "".join(f"    s_{name}[tx][ty] = {name};\n" for name in stat.fields)
    return f"""{CUDA_HEADER}{stat.helper}
#define TILE_C {tile_c}
#define TILE_R {tile_r}
#define PAD {pad}

// a block of TILE_C x TILE_R threads: TILE_R threads walk the rows of each of its columns
{column.signature(column.name, True)} {{
{shared}    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * TILE_C + tx;
    {stat.declare()}
    if (col < cols)
        for (int row = ty; row < rows; row += TILE_R) {{
            float v = {column.load("row * cols + col")};
            {stat.update}
        }}
{keep}    __syncthreads();
    if (ty == 0 && col < cols) {{
        for (int k = 1; k < TILE_R; k++) {{
{stat.fold(lambda name: f"s_{name}[tx][k]", "            ")}        }}
        y[col] = {column.store(stat.result("rows"))};
    }}
}}
"""


ORDERED_KEYS = """
// floats as unsigned keys that order like the floats: negatives get every bit flipped, the rest
// the sign bit set, so a zeroed key is below every float and atomicMax on keys is a float max
__device__ __forceinline__ unsigned int ordered_key(float f) {
    unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_value(unsigned int k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
"""


def _partial_index(chunk: str, stat: Stat, field: int) -> str:
    """Where field `field` of column col's state for chunk `chunk` lives: the scratch holds a row per chunk and field."""
    fields = len(stat.fields)
    row = chunk if fields == 1 else str(field) if chunk == "0" else f"({chunk} * {fields} + {field})"
    return "col" if row == "0" else f"{row} * cols + col"


def _split_rows(column: Column, chunk: int, finish: str, restrict: bool) -> str:
    """grid (column blocks, row chunks): a thread folds its column over CHUNK rows, then `finish`
    brings the chunks together: "partials" (each chunk's fields to a scratch, a second kernel
    merges them), "atomic" (fields atomically added to a zeroed scratch; sums only),
    "ordered" (atomicMax on unsigned keys, then decoded) or "signsplit" (float atomics on y)."""
    stat = STATS[column.stat]
    if finish == "partials":
        out, out_type = "partial", "float"
        store = "".join(f"    partial[{_partial_index('blockIdx.y', stat, i)}] = {name};\n" for i, name in enumerate(stat.fields))
    elif finish == "atomic":
        out, out_type = "stats", "float"
        store = "".join(f"    atomicAdd(&stats[{_partial_index('0', stat, i)}], {name});\n" for i, name in enumerate(stat.fields))
    elif finish == "ordered":
        out, out_type, store = "keys", "unsigned int", "    atomicMax(&keys[col], ordered_key(m));\n"
    else:
        out, out_type, store = "y", "float", "    atomic_max_float(&y[col], m);\n"
    helper = {"ordered": ORDERED_KEYS, "signsplit": ATOMIC_MAX_FLOAT}.get(finish, stat.helper)
    return f"""{CUDA_HEADER}{helper}
#define CHUNK {chunk}

{column.signature(column.name + "_partial", restrict, out=out, out_type=out_type)} {{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int begin = blockIdx.y * CHUNK;
    int end = min(rows, begin + CHUNK);
    if (col >= cols) return;
    {stat.declare()}
    for (int row = begin; row < end; row++) {{
        float v = {column.load("row * cols + col")};
        {stat.update}
    }}
{store}}}
{_split_second(column, finish, restrict)}"""


def _split_second(column: Column, finish: str, restrict: bool) -> str:
    """The launch after the chunks: merge partials, decode keys, or (signsplit) the -inf fill before them."""
    stat = STATS[column.stat]
    out = cuda_pointer(column.out_type, "y", restrict, const=False)
    if finish == "ordered":
        return f"""
extern "C" __global__ void {column.name}_decode({cuda_pointer("unsigned int", "keys", restrict)}, {out}, int cols) {{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < cols) y[col] = {column.store("key_value(keys[col])")};
}}
"""
    if finish == "signsplit":
        return f"""
extern "C" __global__ void {column.name}_fill({out}, int cols) {{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < cols) y[col] = {NEG_INF};
}}
"""
    first = "".join(f"    float {name} = partial[{_partial_index('0', stat, i)}];\n" for i, name in enumerate(stat.fields))
    return f"""
// a thread per column merges its chunks' states (one chunk after atomics)
extern "C" __global__ void {column.name}_finish({cuda_pointer("float", "partial", restrict)}, {out}, int chunks, int rows, int cols) {{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
{first}    for (int c = 1; c < chunks; c++) {{
{stat.fold(lambda name: f"partial[{_partial_index('c', stat, stat.fields.index(name))}]", "        ")}    }}
    y[col] = {column.store(stat.result("rows"))};
}}
"""


def _split_launches(column: Column, p: dict[str, Any]) -> Callable[[Sizes], list[Launch]]:
    def launches(s: Sizes) -> list[Launch]:
        rows, cols = s["rows"], s["cols"]
        chunks = cdiv(rows, p["chunk"])
        grid, threads = (cdiv(cols, p["block"]), chunks, 1), block1(p["block"])
        second = grid1(cdiv(cols, FINISH_BLOCK))
        name, finish = column.name, p["finish"]
        if finish == "partials":
            return [
                Launch(f"{name}_partial", grid, _args(s, y="partial"), threads),
                Launch(f"{name}_finish", second, ("partial", "y", i32(chunks), i32(rows), i32(cols)), block1(FINISH_BLOCK)),
            ]
        if finish == "atomic":
            return [
                Launch(ZERO, grid1(1), ("stats",)),
                Launch(f"{name}_partial", grid, _args(s, y="stats"), threads),
                Launch(f"{name}_finish", second, ("stats", "y", i32(1), i32(rows), i32(cols)), block1(FINISH_BLOCK)),
            ]
        if finish == "ordered":
            return [
                Launch(ZERO, grid1(1), ("keys",)),
                Launch(f"{name}_partial", grid, _args(s, y="keys"), threads),
                Launch(f"{name}_decode", second, ("keys", "y", i32(cols)), block1(FINISH_BLOCK)),
            ]
        return [Launch(f"{name}_fill", second, ("y", i32(cols)), block1(FINISH_BLOCK)), Launch(f"{name}_partial", grid, _args(s), threads)]

    return launches


def _split_scratch(column: Column, chunk: int, finish: str) -> Callable[[Sizes], dict[str, TensorSpec]]:
    fields = len(STATS[column.stat].fields)
    if finish == "partials":
        return lambda s: {"partial": TensorSpec((cdiv(s["rows"], chunk) * fields, s["cols"]), "f32")}
    if finish == "atomic":
        return lambda s: {"stats": TensorSpec((fields, s["cols"]), "f32")}
    if finish == "ordered":
        return lambda s: {"keys": TensorSpec((s["cols"],), "i32")}
    return lambda s: {}


def _cuda_variants(name: str, dtype: str, settings: dict[str, list[dict[str, Any]]]) -> Iterable[Variant]:
    """The four CUDA families of one operation and dtype, from each family's list of params."""
    for p in settings["cuda-thread-per-column"]:
        column = Column(name, dtype, p.get("method", "max"))
        vector = p.get("vector", 1)
        code = (
            _thread_per_column(column, p["unroll"], p["loop"], p["restrict"])
            if vector == 1
            else _amax_vector(column, vector, p["unroll"], p["restrict"])
        )

        def blocks(s: Sizes, p: dict[str, Any] = p, vector: int = vector) -> int:
            needed = cdiv(s["cols"] // vector, p["block"])
            return needed if p["loop"] == "one-pass" else resident_blocks(needed, THREADS_PER_SM // p["block"])

        yield Variant(
            "cuda-thread-per-column",
            "cuda",
            {"dtype": dtype, **p},
            code,
            lambda s, p=p, blocks=blocks: [Launch(name, grid1(blocks(s)), _args(s), block1(p["block"]))],
            unsupported=_walks_all_rows(dtype, divisible("cols", vector)),
        )
    for p in settings["cuda-warp-per-column"]:
        yield Variant(
            "cuda-warp-per-column",
            "cuda",
            {"dtype": dtype, **p},
            _warp_per_column(Column(name, dtype, p.get("method", "max")), p["warps"], p["restrict"]),
            lambda s, p=p: [Launch(name, grid1(cdiv(s["cols"], p["warps"])), _args(s), block1(32 * p["warps"]))],
            unsupported=_walks_all_rows(dtype),
        )
    for p in settings["cuda-block-tile"]:
        yield Variant(
            "cuda-block-tile",
            "cuda",
            {"dtype": dtype, **p},
            _block_tile(Column(name, dtype, p.get("method", "max")), p["tile_c"], p["tile_r"], p["pad"]),
            lambda s, p=p: [Launch(name, grid1(cdiv(s["cols"], p["tile_c"])), _args(s), (p["tile_c"], p["tile_r"], 1))],
            unsupported=_walks_all_rows(dtype),
        )
    for p in settings["cuda-split-rows"]:
        column = Column(name, dtype, p.get("method", "max"))
        yield Variant(
            "cuda-split-rows",
            "cuda",
            {"dtype": dtype, **p},
            _split_rows(column, p["chunk"], p["finish"], p["restrict"]),
            _split_launches(column, p),
            scratch=_split_scratch(column, p["chunk"], p["finish"]),
            unsupported=unsupported(dtype),
        )


def _tiles(tiles: list[tuple[int, int]], pads: tuple[int, ...], **extra: Any) -> list[dict[str, Any]]:
    return [{**extra, "tile_c": tile_c, "tile_r": tile_r, "pad": pad} for tile_c, tile_r in tiles for pad in pads]


# --- Triton -----------------------------------------------------------------------------------------

TRITON_COLUMNS = "    col = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)\n"


def _tile_loop(other: str, body: str, first: str = "0", last: str = "rows") -> str:
    """The loop over [BLOCK_R, BLOCK_C] tiles v of rows [first, last) every Triton kernel here walks, running `body` on each."""
    head = f"""    for start in range({first}, {last}, BLOCK_R):
        row = start + tl.arange(0, BLOCK_R)
        mask = (row[:, None] < rows) & (col[None, :] < cols)
        v = tl.load(x_ptr + row[:, None] * cols + col[None, :], mask=mask, other={other}).to(tl.float32)
"""
    return head + "".join(f"        {line}\n" for line in body.splitlines())


VAR_TRITON_BODY = {
    "sumsq": (
        """    acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    acc_sq = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
""",
        "acc += v\nacc_sq += v * v",
        """    mean = tl.sum(acc, axis=0) / rows
    var = tl.sum(acc_sq, axis=0) / rows - mean * mean
""",
    ),
    "welford": (
        """    # each tile's mean and squared deviations merged into the running ones (Chan et al.)
    mean = tl.zeros([BLOCK_C], dtype=tl.float32)
    m2 = tl.zeros([BLOCK_C], dtype=tl.float32)
""",
        """count = tl.minimum(rows - start, BLOCK_R).to(tl.float32)
tile_mean = tl.sum(v, axis=0) / count
d = tl.where(mask, v - tile_mean[None, :], 0.0)
seen = start * 1.0
delta = tile_mean - mean
mean += delta * count / (seen + count)
m2 += tl.sum(d * d, axis=0) + delta * delta * seen * count / (seen + count)""",
        "    var = m2 / rows\n",
    ),
}


def _var_triton_block(method: str) -> str:
    if method == "two-pass":
        deviations = "d = tl.where(mask, v - mean[None, :], 0.0)\nacc += d * d"
        walk = f"""    acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
{_tile_loop("0.0", "acc += v")}    mean = tl.sum(acc, axis=0) / rows
    # second pass: squared deviations from the mean
    acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
{_tile_loop("0.0", deviations)}    var = tl.sum(acc, axis=0) / rows
"""
    else:
        setup, body, final = VAR_TRITON_BODY[method]
        walk = setup + _tile_loop("0.0", body) + final
    return f"""{TRITON_HEADER}

@triton.jit
def var_dim0(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # a program owns BLOCK_C columns and walks down every row in BLOCK_R-row tiles
{TRITON_COLUMNS}{walk}    tl.store(y_ptr + col, var, mask=col < cols)
"""


def _var_triton_split(finish: str) -> str:
    """A slab's column sums and sums of squares, added atomically or stored as its two scratch rows."""
    if finish == "atomic":
        store = """    tl.atomic_add(stats_ptr + col, tl.sum(acc, axis=0), mask=col < cols)
    tl.atomic_add(stats_ptr + cols + col, tl.sum(acc_sq, axis=0), mask=col < cols)
"""
    else:
        store = """    slab = tl.program_id(1) * 2 * cols
    tl.store(stats_ptr + slab + col, tl.sum(acc, axis=0), mask=col < cols)
    tl.store(stats_ptr + slab + cols + col, tl.sum(acc_sq, axis=0), mask=col < cols)
"""
    setup, body, _ = VAR_TRITON_BODY["sumsq"]
    return f"""{TRITON_HEADER}

@triton.jit
def var_dim0_slab(x_ptr, stats_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, TILES: tl.constexpr):
    first = tl.program_id(1) * TILES * BLOCK_R
{TRITON_COLUMNS}{setup}{_tile_loop("0.0", body, "first", "first + TILES * BLOCK_R")}{store}

@triton.jit
def var_dim0_finish(stats_ptr, y_ptr, slabs, rows, cols, BLOCK_C: tl.constexpr):
    col = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    total = tl.zeros([BLOCK_C], dtype=tl.float32)
    total_sq = tl.zeros([BLOCK_C], dtype=tl.float32)
    for s in range(0, slabs):
        total += tl.load(stats_ptr + s * 2 * cols + col, mask=col < cols, other=0.0)
        total_sq += tl.load(stats_ptr + (s * 2 + 1) * cols + col, mask=col < cols, other=0.0)
    mean = total / rows
    tl.store(y_ptr + col, total_sq / rows - mean * mean, mask=col < cols)
"""


AMAX_TRITON_BLOCK = f"""{TRITON_HEADER}

@triton.jit
def amax_dim0(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # a program owns BLOCK_C columns and walks down every row in BLOCK_R-row tiles
{TRITON_COLUMNS}    acc = tl.full([BLOCK_R, BLOCK_C], float("-inf"), dtype=tl.float32)
{_tile_loop('float("-inf")', "acc = tl.maximum(acc, v)")}    tl.store(y_ptr + col, tl.max(acc, axis=0).to(y_ptr.dtype.element_ty), mask=col < cols)
"""


def _amax_triton_split(finish: str) -> str:
    """A slab's column maxima, atomically into y (filled with -inf first) or as its scratch row."""
    if finish == "atomic":
        out = "y_ptr"
        store = "    tl.atomic_max(y_ptr + col, tl.max(acc, axis=0), mask=col < cols)\n"
        second = """

@triton.jit
def amax_dim0_fill(y_ptr, cols, BLOCK_C: tl.constexpr):
    col = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    tl.store(y_ptr + col, tl.full([BLOCK_C], float("-inf"), dtype=tl.float32), mask=col < cols)
"""
    else:
        out = "partial_ptr"
        store = "    tl.store(partial_ptr + tl.program_id(1) * cols + col, tl.max(acc, axis=0), mask=col < cols)\n"
        second = AMAX_TRITON_BLOCK.removeprefix(TRITON_HEADER)
    return f"""{TRITON_HEADER}

@triton.jit
def amax_dim0_slab(x_ptr, {out}, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, TILES: tl.constexpr):
    first = tl.program_id(1) * TILES * BLOCK_R
{TRITON_COLUMNS}    acc = tl.full([BLOCK_R, BLOCK_C], float("-inf"), dtype=tl.float32)
{_tile_loop('float("-inf")', "acc = tl.maximum(acc, v)", "first", "first + TILES * BLOCK_R")}{store}{second}"""


def _triton_block_variant(name: str, dtype: str, p: dict[str, Any], code: str) -> Variant:
    return Variant(
        "triton-column-block",
        "triton",
        {"dtype": dtype, **p},
        code,
        lambda s: [
            Launch(
                name,
                grid1(cdiv(s["cols"], p["BLOCK_C"])),
                _args(s),
                constexprs={"BLOCK_R": p["BLOCK_R"], "BLOCK_C": p["BLOCK_C"]},
                num_warps=p["num_warps"],
            )
        ],
        unsupported=_walks_all_rows(dtype),
    )


def _slabs(s: Sizes, p: dict[str, Any]) -> int:
    return cdiv(s["rows"], p["TILES"] * p["BLOCK_R"])


def _triton_split_variant(name: str, dtype: str, p: dict[str, Any], code: str, scratch_rows: int) -> Variant:
    """Slab programs, then (partials) a finishing kernel over the scratch or (atomic) a fill/finish kernel around them."""
    scratch = "stats" if name == "var_dim0" else "partial"

    def launches(s: Sizes) -> list[Launch]:
        rows, cols = s["rows"], s["cols"]
        columns = cdiv(cols, p["BLOCK_C"])
        tile = {"BLOCK_R": p["BLOCK_R"], "BLOCK_C": p["BLOCK_C"]}
        atomic = p["finish"] == "atomic"
        slab_out = "y" if atomic and name == "amax_dim0" else scratch
        slab = Launch(
            f"{name}_slab",
            (columns, _slabs(s, p), 1),
            _args(s, y=slab_out),
            constexprs={**tile, "TILES": p["TILES"]},
            num_warps=p["num_warps"],
        )
        if name == "amax_dim0":
            if atomic:
                return [Launch("amax_dim0_fill", grid1(columns), ("y", i32(cols)), constexprs={"BLOCK_C": p["BLOCK_C"]}, num_warps=4), slab]
            return [
                slab,
                Launch(name, grid1(columns), ("partial", "y", i32(_slabs(s, p)), i32(cols)), constexprs=tile, num_warps=p["num_warps"]),
            ]
        finish = Launch(
            "var_dim0_finish",
            grid1(columns),
            ("stats", "y", i32(1 if atomic else _slabs(s, p)), i32(rows), i32(cols)),
            constexprs={"BLOCK_C": p["BLOCK_C"]},
            num_warps=4,
        )
        return [Launch(ZERO, grid1(1), ("stats",)), slab, finish] if atomic else [slab, finish]

    def scratch_of(s: Sizes) -> dict[str, TensorSpec]:
        if p["finish"] == "atomic":
            return {"stats": TensorSpec((scratch_rows, s["cols"]), "f32")} if name == "var_dim0" else {}
        return {scratch: TensorSpec((_slabs(s, p) * scratch_rows, s["cols"]), "f32")}

    return Variant("triton-split-rows", "triton", {"dtype": dtype, **p}, code, launches, scratch=scratch_of, unsupported=unsupported(dtype))


TRITON_SPLIT_BASE = {"finish": "atomic", "BLOCK_R": 64, "BLOCK_C": 64, "TILES": 16, "num_warps": 4}


def _triton_split_settings(full: bool, atomics: bool) -> list[dict[str, Any]]:
    """fp32: every edit around the base; otherwise the base and the other finish (partials alone without atomics)."""
    base = TRITON_SPLIT_BASE if atomics else {**TRITON_SPLIT_BASE, "finish": "partials"}
    if full:
        return around(base, finish=["partials"], BLOCK_C=[32, 128], TILES=[1, 64], num_warps=[8])
    return around(base, finish=["partials"]) if atomics else around(base, BLOCK_C=[32])


# --- var_dim0 ---------------------------------------------------------------------------------------

VAR_REFERENCE = """\
def reference(x):
    return torch.var(x.float(), dim=0, unbiased=False)
"""


def var_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"
        thread_base = {"method": "sumsq", "block": 256, "unroll": 1, "loop": "one-pass", "restrict": False}
        warp_base = {"method": "sumsq", "warps": 4, "restrict": False}
        split_base = {"method": "sumsq", "finish": "atomic", "chunk": 256, "block": 256, "restrict": True}
        welford_split = {**split_base, "method": "welford", "finish": "partials"}
        if full:
            settings = {
                "cuda-thread-per-column": around(
                    thread_base, method=["two-pass", "welford"], block=[64, 1024], unroll=[4], loop=["grid-stride"], restrict=[True]
                )
                + [{**thread_base, "method": "welford", "restrict": True}, {**thread_base, "method": "two-pass", "unroll": 4}],
                "cuda-warp-per-column": around(warp_base, method=["welford"], warps=[1, 8], restrict=[True]),
                "cuda-block-tile": _tiles([(32, 8), (32, 32), (16, 16)], (0, 1), method="sumsq")
                + _tiles([(32, 8)], (0, 1), method="welford"),
                "cuda-split-rows": around(split_base, finish=["partials"], chunk=[64, 1024, 4096], block=[64], restrict=[False])
                + [welford_split, {**welford_split, "chunk": 1024}],
            }
        else:
            settings = {
                "cuda-thread-per-column": around(thread_base, method=["two-pass", "welford"]),
                "cuda-warp-per-column": [warp_base],
                "cuda-block-tile": _tiles([(32, 8)], (0, 1), method="sumsq"),
                "cuda-split-rows": around(split_base, finish=["partials"]) + [welford_split],
            }
        yield from _cuda_variants("var_dim0", dtype, settings)
        blocks = (
            [
                ("sumsq", 32, 64, 4),
                ("sumsq", 64, 64, 4),
                ("sumsq", 16, 128, 4),
                ("sumsq", 32, 256, 8),
                ("sumsq", 32, 64, 8),
                ("welford", 32, 64, 4),
                ("two-pass", 32, 64, 4),
            ]
            if full
            else [("sumsq", 32, 64, 4), ("sumsq", 32, 256, 8)]
        )
        for method, block_r, block_c, warps in blocks:
            p = {"method": method, "BLOCK_R": block_r, "BLOCK_C": block_c, "num_warps": warps}
            yield _triton_block_variant("var_dim0", dtype, p, _var_triton_block(method))
        for p in _triton_split_settings(full, atomics=True):
            yield _triton_split_variant("var_dim0", dtype, p, _var_triton_split(p["finish"]), 2)


VAR_DIM0 = Op(
    name="var_dim0",
    bound="memory",
    sizes=SIZES,
    inputs=lambda s: {"x": TensorSpec((s["rows"], s["cols"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["cols"],), "f32")},
    reference=lambda torch, inputs, sizes: {"y": torch.var(inputs["x"].float(), dim=0, unbiased=False)},
    reference_code=VAR_REFERENCE,
    variants=var_variants,
)


# --- amax_dim0 --------------------------------------------------------------------------------------

AMAX_REFERENCE = """\
def reference(x):
    return torch.amax(x, dim=0)
"""


def amax_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"
        wide = vector_width(dtype)
        thread_base = {"block": 256, "unroll": 1, "vector": 1, "loop": "one-pass", "restrict": False}
        split_base = {"finish": "ordered", "chunk": 256, "block": 256, "restrict": True}
        if full:
            settings = {
                "cuda-thread-per-column": around(
                    thread_base, block=[64, 1024], unroll=[4, 8], vector=[2, wide], loop=["grid-stride"], restrict=[True]
                )
                + [{**thread_base, "vector": wide, "unroll": 4}, {**thread_base, "vector": wide, "restrict": True}],
                "cuda-warp-per-column": around({"warps": 4, "restrict": False}, warps=[1, 8], restrict=[True]),
                "cuda-block-tile": _tiles([(32, 8), (32, 32), (16, 16)], (0, 1)),
                "cuda-split-rows": around(
                    split_base, finish=["signsplit", "partials"], chunk=[64, 1024, 4096], block=[64], restrict=[False]
                )
                + [{**split_base, "finish": "partials", "chunk": 64}],
            }
        else:
            settings = {
                "cuda-thread-per-column": around(thread_base, vector=[2, wide], restrict=[True]),
                "cuda-warp-per-column": [{"warps": 4, "restrict": False}],
                "cuda-block-tile": _tiles([(32, 8)], (0, 1)),
                "cuda-split-rows": around(split_base, finish=["partials"], chunk=[1024]),
            }
        yield from _cuda_variants("amax_dim0", dtype, settings)
        blocks = [(32, 64, 4), (64, 64, 4), (16, 128, 4), (32, 256, 8), (32, 64, 8)] if full else [(32, 64, 4), (32, 256, 8)]
        for block_r, block_c, warps in blocks:
            yield _triton_block_variant("amax_dim0", dtype, {"BLOCK_R": block_r, "BLOCK_C": block_c, "num_warps": warps}, AMAX_TRITON_BLOCK)
        for p in _triton_split_settings(full, atomics=full):  # tl.atomic_max on fp32 only
            yield _triton_split_variant("amax_dim0", dtype, p, _amax_triton_split(p["finish"]), 1)


AMAX_DIM0 = Op(
    name="amax_dim0",
    bound="memory",
    sizes=SIZES,
    inputs=lambda s: {"x": TensorSpec((s["rows"], s["cols"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["cols"],), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": torch.amax(inputs["x"], dim=0)},
    reference_code=AMAX_REFERENCE,
    variants=amax_variants,
)

OPS = [VAR_DIM0, AMAX_DIM0]
