"""Gram matrices of one matrix with itself: gram_matrix (xᵀx, tall-skinny) and outer_gram (x xᵀ, short-wide).

Neighbours of covariance and pairwise_distance (ops.reuse), the operations the forecaster
gets most confidently wrong: the same products without centering or norms, so what differs
is where the parallelism comes from. xᵀx of a tall-skinny x has only d² outputs, each a sum
over n rows, so a kernel without split-K runs a few blocks for milliseconds; x xᵀ of a
short-wide x has m² outputs and a long inner dimension read along rows, so its naive thread
mapping puts the loads of a warp d floats apart. Knobs are turned one at a time (`around`).

- gram_matrix: G = xᵀx for x (n, d), fp32 out, x fp32 or fp16 (fp32 accumulation); n
  1024…131072, d 16…256. CUDA: cuda-naive (a thread per output walking all n rows; block
  shape, `order` ij (threadIdx.x along j: coalesced store) or ji (store d-strided),
  `symmetric` (threads with i > j return, the rest mirror), restrict); cuda-splitk (the same
  thread per output over `chunk` rows per grid z; `combine` atomic (atomicAdd into a zeroed
  G) or scratch (partials per chunk, then a second launch sums them); block shape,
  restrict); cuda-smem-tiled (TILE rows x TILE features of both column blocks per step; tile
  8/16/32, `layout` rows ([row][feature], conflict-free) or columns ([feature][row]: TILE-way
  bank conflicts unless `pad` 1), `chunk` "all" or rows per grid z with atomics, symmetric
  (blocks below the diagonal skipped), restrict); cuda-register-tiled (BD x BD block tile BK
  rows deep, TM x TN outputs per thread; chunk, symmetric). Triton: triton-dot (tl.dot of
  [BLOCK_D, BLOCK_N] x [BLOCK_N, BLOCK_D], ieee; `chunk` "all" (one program per output tile)
  or rows per program with tl.atomic_add; BLOCK_D, BLOCK_N, num_warps, symmetric).
- outer_gram: G = x xᵀ for x (m, d), fp32 out, x fp32 or fp16; m 128…4096, d 64…4096.
  CUDA: cuda-naive (a thread per output looping over d: both loads are rows, d floats apart
  across a warp; block shape, order, symmetric, restrict); cuda-warp-per-output (lanes
  stride along d: coalesced, a shuffle reduction; warps per block, `vector` 4 (float4 loads,
  fp32, d % 4 == 0), symmetric, restrict); cuda-smem-tiled (TILE rows of both row blocks,
  TILE features per step; tile, `b_layout` rows (reads Bs[tx][k] TILE + PAD apart: bank
  conflicts unless padded) or features (the stores conflict instead, once per step), pad,
  symmetric, restrict); cuda-register-tiled (BD x BD outputs per block, BK features deep,
  TM x TN per thread, vector 1 or 4 for the global loads, symmetric). Triton: triton-dot
  (BLOCK_M, BLOCK_K, num_warps, symmetric; ieee) and triton-broadcast (a [BLOCK_M, BLOCK_M,
  BLOCK_K] product summed over features, no tl.dot).

Tolerances (relative to 1 + |expected|) from a numpy emulation of the worst summation order,
one fp32 running sum (fused multiply-add: one rounding per step) over all terms: gram_matrix
at n = 131072, d = 32 is off by up to 8.2e-4 on off-diagonal elements (their running sums
wander ~sqrt(n) away from a small result), 7.0e-4 at n = 65536 with fp16 inputs (exact
products), so 3e-3; a dropped row still moves a near-zero element by ~|x_ki x_kj|, a dropped
chunk by ~sqrt(chunk). outer_gram at d = 4096 is off by 1.8e-4 (products rounded apart), so
1e-3. fp16 inputs are exact when multiplied in fp32.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.gemm import cuda_prelude
from workshop.corpus.ops.rowkit import TRITON_HEADER, Check, at_most, divisible, unsupported
from workshop.corpus.spec import (
    ZERO,
    Launch,
    Op,
    Sizes,
    TensorSpec,
    Variant,
    around,
    cdiv,
    cuda_pointer,
    grid1,
    i32,
)

GRAM_SIZES = [
    {"n": 1024, "d": 16, "dtype": "f32"},
    {"n": 16384, "d": 64, "dtype": "f32"},
    {"n": 131072, "d": 32, "dtype": "f32"},
    {"n": 65536, "d": 256, "dtype": "f32"},
    {"n": 16384, "d": 64, "dtype": "f16"},
    {"n": 65536, "d": 256, "dtype": "f16"},
]
OUTER_SIZES = [
    {"m": 128, "d": 64, "dtype": "f32"},
    {"m": 1024, "d": 1024, "dtype": "f32"},
    {"m": 1024, "d": 4096, "dtype": "f32"},
    {"m": 4096, "d": 256, "dtype": "f32"},
    {"m": 1024, "d": 1024, "dtype": "f16"},
    {"m": 4096, "d": 256, "dtype": "f16"},
]
ALL_ROWS = "all"  # `chunk` of a kernel whose blocks walk every row (no split-K)
REDUCE_BLOCK = 256  # threads per block of the scratch split-K's second launch
# Unsplit register tiles: one block steps through n / BK row slabs at ~1.8 µs each (covariance's H100 records).
UNSPLIT_MAX_STEPS = 4096
# A thread per output of x xᵀ with loads d apart: ~9 ms at 4.3e9 multiply-adds in 16 x 16 blocks, twice that in 32 x 8.
NAIVE_MAX_MACS, NAIVE_WIDE_MAX_MACS = 4.5e9, 1.1e9


def _work_at_most(limit: float, *extents: str) -> Check:
    """Slow variants run only the problems whose product of `extents` (squares: name twice) stays under `limit`."""

    def reason(sizes: Sizes) -> str | None:
        work = 1
        for name in extents:
            work *= sizes[name]
        return None if work <= limit else f"{'·'.join(extents)} > {limit:g}: too slow"

    return reason


def _prelude(dtype: str, **defines: int) -> str:
    """T, ld and st for the element type, then the variant's compile-time constants."""
    return cuda_prelude(dtype) + "".join(f"#define {name} {value}\n" for name, value in defines.items()) + "\n"


def _signature(op: str, restrict: bool, sizes: str, out: str = "G", launch_bounds: str = "") -> str:
    return (
        f'extern "C" __global__ void {launch_bounds}{op}({cuda_pointer("T", "x", restrict)}, '
        f"{cuda_pointer('float', out, restrict, const=False)}, {sizes})"
    )


def _store(out: str, width: str, i: str, j: str, value: str, mirror: str | None, atomic: bool, pad: str) -> str:
    """Write (or atomically add) one output, and its mirror image (j, i) when `mirror` holds."""

    def put(row: str, col: str) -> str:
        return f"atomicAdd(&{out}[{row} * {width} + {col}], {value});" if atomic else f"{out}[{row} * {width} + {col}] = {value};"

    lines = f"{pad}{put(i, j)}\n"
    if mirror:
        lines += f"{pad}if ({mirror}) {put(j, i)}\n"
    return lines


def _thread_coords(order: str, fast_ij: tuple[str, str]) -> str:
    """Which output coordinate threadIdx.x runs along: `order` "ij" puts it on the second (the row of G: coalesced store)."""
    first, second = fast_ij
    fast, slow = (second, first) if order == "ij" else (first, second)
    return f"""    int {fast} = blockIdx.x * blockDim.x + threadIdx.x;
    int {slow} = blockIdx.y * blockDim.y + threadIdx.y;
"""


# Register tiles shared by both operations: As and Bs hold [BK][BD] slabs, each thread TM x TN outputs.
REGISTER_SETUP = """    const int tid = threadIdx.x;
    const int tr = tid / (BD / TN), tc = tid % (BD / TN);
    const int i0 = blockIdx.y * BD, j0 = blockIdx.x * BD;
    float acc[TM][TN];
    #pragma unroll
    for (int a = 0; a < TM; ++a)
        #pragma unroll
        for (int b = 0; b < TN; ++b) acc[a][b] = 0.0f;
"""
REGISTER_PRODUCT = """        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            float ra[TM], rb[TN];
            #pragma unroll
            for (int a = 0; a < TM; ++a) ra[a] = As[k][tr * TM + a];
            #pragma unroll
            for (int b = 0; b < TN; ++b) rb[b] = Bs[k][tc * TN + b];
            #pragma unroll
            for (int a = 0; a < TM; ++a)
                #pragma unroll
                for (int b = 0; b < TN; ++b) acc[a][b] += ra[a] * rb[b];
        }
        __syncthreads();
    }
"""


def _register_store(width: str, symmetric: bool, atomic: bool) -> str:
    mirror = "blockIdx.x != blockIdx.y" if symmetric else None
    return f"""    #pragma unroll
    for (int a = 0; a < TM; ++a)
        #pragma unroll
        for (int b = 0; b < TN; ++b) {{
            const int i = i0 + tr * TM + a, j = j0 + tc * TN + b;
            if (i < {width} && j < {width}) {{
{_store("G", width, "i", "j", "acc[a][b]", mirror, atomic, "                ")}            }}
        }}
"""


BLOCK_SKIP = "    if (blockIdx.y > blockIdx.x) return;  // blocks below the diagonal: mirrored by those above\n"


# --- gram_matrix: CUDA --------------------------------------------------------------------------

SUM_CHUNKS = """
// G[idx] = the sum of every chunk's partial Gram matrix, a thread per output
extern "C" __global__ void sum_chunks(const float* part, float* G, int chunks, int count) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= count) return;
    float s = 0.0f;
    for (int c = 0; c < chunks; ++c) s += part[(size_t)c * count + idx];
    G[idx] = s;
}
"""


def gram_naive_code(dtype: str, p: dict[str, Any]) -> str:
    """A thread per output walking all N rows: columns i and j re-read from global memory for every output."""
    skip = "    if (i > j) return;  // the lower triangle is mirrored from the upper\n" if p["symmetric"] else ""
    return f"""{_prelude(dtype)}{_signature("gram_matrix", p["restrict"], "int N, int D")} {{
{_thread_coords(p["order"], ("i", "j"))}    if (i >= D || j >= D) return;
{skip}    float sum = 0.0f;
    for (int row = 0; row < N; ++row)
        sum += ld(x[row * D + i]) * ld(x[row * D + j]);
{_store("G", "D", "i", "j", "sum", "i != j" if p["symmetric"] else None, False, "    ")}}}
"""


def gram_splitk_code(dtype: str, p: dict[str, Any]) -> str:
    """A thread per output and chunk of CHUNK rows (grid z): d² threads alone cannot fill an H100."""
    atomic = p["combine"] == "atomic"
    out = "G" if atomic else "part"
    result = (
        "    atomicAdd(&G[i * cols + j], sum);  // G was zeroed first\n"
        if atomic
        else "    part[(size_t)blockIdx.z * cols * cols + i * cols + j] = sum;\n"
    )
    return f"""{_prelude(dtype, CHUNK=p["chunk"])}{_signature("gram_matrix", p["restrict"], "int rows, int cols", out)} {{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= cols || j >= cols) return;
    int first = blockIdx.z * CHUNK;
    int last = min(rows, first + CHUNK);
    float sum = 0.0f;
    for (int r = first; r < last; ++r)
        sum += ld(x[r * cols + i]) * ld(x[r * cols + j]);
{result}}}
{"" if atomic else SUM_CHUNKS}"""


def _row_range(chunk: Any) -> tuple[str, str, str]:
    """(declaration, first row, end row) of the rows a block sums: all of them, or its chunk of grid z."""
    if chunk == ALL_ROWS:
        return "", "0", "n"
    return "    int first = blockIdx.z * CHUNK, last = min(n, first + CHUNK);\n", "first", "last"


def gram_smem_code(dtype: str, p: dict[str, Any]) -> str:
    """TILE rows of feature blocks i0.. and j0.. staged in shared memory: each loaded value used TILE times."""
    rows = p["layout"] == "rows"
    store, read_a, read_b = ("[ty][tx]", "Xi[k][ty]", "Xj[k][tx]") if rows else ("[tx][ty]", "Xi[ty][k]", "Xj[tx][k]")
    split = p["chunk"] != ALL_ROWS
    declare, first, end = _row_range(p["chunk"])
    defines = {"TILE": p["tile"], "PAD": p["pad"], **({"CHUNK": p["chunk"]} if split else {})}
    return f"""{_prelude(dtype, **defines)}{_signature("gram_matrix", p["restrict"], "int n, int d")} {{
    __shared__ float Xi[TILE][TILE + PAD];
    __shared__ float Xj[TILE][TILE + PAD];
{BLOCK_SKIP if p["symmetric"] else ""}    int tx = threadIdx.x, ty = threadIdx.y;
    int i0 = blockIdx.y * TILE, j0 = blockIdx.x * TILE;
{declare}    float acc = 0.0f;
    for (int k0 = {first}; k0 < {end}; k0 += TILE) {{
        int row = k0 + ty;
        Xi{store} = (row < {end} && i0 + tx < d) ? ld(x[row * d + i0 + tx]) : 0.0f;
        Xj{store} = (row < {end} && j0 + tx < d) ? ld(x[row * d + j0 + tx]) : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k)
            acc += {read_a} * {read_b};
        __syncthreads();
    }}
    int i = i0 + ty, j = j0 + tx;
    if (i < d && j < d) {{
{_store("G", "d", "i", "j", "acc", "blockIdx.x != blockIdx.y" if p["symmetric"] else None, split, "        ")}    }}
}}
"""


def gram_register_code(dtype: str, p: dict[str, Any]) -> str:
    """BK rows of two BD-feature blocks in shared memory; each thread keeps TM x TN outputs in registers."""
    split = p["chunk"] != ALL_ROWS
    declare, first, end = _row_range(p["chunk"])
    defines = {"BD": p["BD"], "BK": p["BK"], "TM": p["TM"], "TN": p["TN"], **({"CHUNK": p["chunk"]} if split else {})}
    return f"""{_prelude(dtype, **defines)}#define THREADS ((BD / TM) * (BD / TN))

{_signature("gram_matrix", True, "int n, int d", launch_bounds="__launch_bounds__(THREADS) ")} {{
    __shared__ float As[BK][BD];  // rows k0.. of features i0..
    __shared__ float Bs[BK][BD];  // rows k0.. of features j0..
{BLOCK_SKIP if p["symmetric"] else ""}{REGISTER_SETUP}{declare}    for (int k0 = {first}; k0 < {end}; k0 += BK) {{
        for (int e = tid; e < BK * BD; e += THREADS) {{  // features fastest: coalesced along each row
            const int r = e / BD, c = e % BD, row = k0 + r;
            As[r][c] = (row < {end} && i0 + c < d) ? ld(x[(size_t)row * d + i0 + c]) : 0.0f;
            Bs[r][c] = (row < {end} && j0 + c < d) ? ld(x[(size_t)row * d + j0 + c]) : 0.0f;
        }}
{REGISTER_PRODUCT}{_register_store("d", p["symmetric"], split)}}}
"""


# --- gram_matrix: Triton ------------------------------------------------------------------------

GRAM_TRITON = f"""{TRITON_HEADER}

@triton.jit
def gram_matrix(x_ptr, g_ptr, n, d, chunk, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
                SYMMETRIC: tl.constexpr):
    pid_i = tl.program_id(0)
    pid_j = tl.program_id(1)
    if SYMMETRIC:
        if pid_i > pid_j:  # below the diagonal: mirrored by the program above it
            return
    ci = pid_i * BLOCK_D + tl.arange(0, BLOCK_D)
    cj = pid_j * BLOCK_D + tl.arange(0, BLOCK_D)
    offs = tl.arange(0, BLOCK_N)
    first = tl.program_id(2) * chunk
    last = tl.minimum(first + chunk, n)
    acc = tl.zeros((BLOCK_D, BLOCK_D), dtype=tl.float32)
    for k0 in range(first, last, BLOCK_N):
        rows = k0 + offs
        a = tl.load(x_ptr + rows[None, :] * d + ci[:, None], mask=(ci[:, None] < d) & (rows[None, :] < last), other=0.0)  # [BLOCK_D, BLOCK_N]
        b = tl.load(x_ptr + rows[:, None] * d + cj[None, :], mask=(rows[:, None] < last) & (cj[None, :] < d), other=0.0)  # [BLOCK_N, BLOCK_D]
        acc = tl.dot(a, b, acc, input_precision="ieee")
    mask = (ci[:, None] < d) & (cj[None, :] < d)
    here = g_ptr + ci[:, None] * d + cj[None, :]
    mirror = g_ptr + cj[None, :] * d + ci[:, None]
    if SPLIT:
        tl.atomic_add(here, acc, mask=mask)
        if SYMMETRIC:
            if pid_i != pid_j:
                tl.atomic_add(mirror, acc, mask=mask)
    else:
        tl.store(here, acc, mask=mask)
        if SYMMETRIC:
            if pid_i != pid_j:
                tl.store(mirror, acc, mask=mask)
"""


# --- gram_matrix: variants ----------------------------------------------------------------------


def _gram_args(s: Sizes, out: str = "G") -> tuple[Any, ...]:
    return ("x", out, i32(s["n"]), i32(s["d"]))


def _chunks(s: Sizes, chunk: Any) -> int:
    return 1 if chunk == ALL_ROWS else cdiv(s["n"], chunk)


def _zeroed_first(split: bool, launch: Callable[[Sizes], Launch]) -> Callable[[Sizes], list[Launch]]:
    """Split-K partials are added atomically into G, which must be cleared on every call."""
    return lambda s: [Launch(ZERO, grid1(1), ("G",)), launch(s)] if split else [launch(s)]


def gram_naive_variant(dtype: str, p: dict[str, Any]) -> Variant:
    bx, by = p["block_x"], p["block_y"]
    return Variant(
        "cuda-naive",
        "cuda",
        {"dtype": dtype, **p},
        gram_naive_code(dtype, p),
        lambda s: [Launch("gram_matrix", (cdiv(s["d"], bx), cdiv(s["d"], by), 1), _gram_args(s), (bx, by, 1))],
        unsupported=unsupported(dtype),
    )


def gram_splitk_variant(dtype: str, p: dict[str, Any]) -> Variant:
    bx, by, chunk = p["block_x"], p["block_y"], p["chunk"]
    atomic = p["combine"] == "atomic"

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["d"], bx), cdiv(s["d"], by), _chunks(s, chunk))
        if atomic:
            return [Launch(ZERO, grid1(1), ("G",)), Launch("gram_matrix", grid, _gram_args(s), (bx, by, 1))]
        count = s["d"] * s["d"]
        return [
            Launch("gram_matrix", grid, _gram_args(s, "part"), (bx, by, 1)),
            Launch("sum_chunks", grid1(cdiv(count, REDUCE_BLOCK)), ("part", "G", i32(_chunks(s, chunk)), i32(count)), (REDUCE_BLOCK, 1, 1)),
        ]

    scratch = (lambda s: {}) if atomic else (lambda s: {"part": TensorSpec((_chunks(s, chunk), s["d"], s["d"]), "f32")})
    return Variant(
        "cuda-splitk", "cuda", {"dtype": dtype, **p}, gram_splitk_code(dtype, p), launches, scratch=scratch, unsupported=unsupported(dtype)
    )


def gram_smem_variant(dtype: str, p: dict[str, Any]) -> Variant:
    tile, chunk = p["tile"], p["chunk"]

    def launch(s: Sizes) -> Launch:
        return Launch("gram_matrix", (cdiv(s["d"], tile), cdiv(s["d"], tile), _chunks(s, chunk)), _gram_args(s), (tile, tile, 1))

    # 32-way bank conflicts in one block per output tile walking 131072 rows: past 20 ms.
    slow = chunk == ALL_ROWS and tile == 32 and p["layout"] == "columns" and p["pad"] == 0
    checks = (at_most("n", 65536, "one conflicted block walks every row"),) if slow else ()
    return Variant(
        "cuda-smem-tiled",
        "cuda",
        {"dtype": dtype, **p},
        gram_smem_code(dtype, p),
        _zeroed_first(chunk != ALL_ROWS, launch),
        unsupported=unsupported(dtype, *checks),
    )


def gram_register_variant(dtype: str, p: dict[str, Any]) -> Variant:
    bd, chunk, threads = p["BD"], p["chunk"], (p["BD"] // p["TM"]) * (p["BD"] // p["TN"])

    def launch(s: Sizes) -> Launch:
        return Launch("gram_matrix", (cdiv(s["d"], bd), cdiv(s["d"], bd), _chunks(s, chunk)), _gram_args(s), (threads, 1, 1))

    checks = (at_most("n", UNSPLIT_MAX_STEPS * p["BK"], "one block per tile steps through every row"),) if chunk == ALL_ROWS else ()
    return Variant(
        "cuda-register-tiled",
        "cuda",
        {"dtype": dtype, **p},
        gram_register_code(dtype, p),
        _zeroed_first(chunk != ALL_ROWS, launch),
        unsupported=unsupported(dtype, *checks),
    )


def gram_triton_variant(dtype: str, p: dict[str, Any]) -> Variant:
    chunk, split = p["chunk"], p["chunk"] != ALL_ROWS
    constexprs = {"BLOCK_D": p["BLOCK_D"], "BLOCK_N": p["BLOCK_N"], "SPLIT": split, "SYMMETRIC": p["symmetric"]}

    def launch(s: Sizes) -> Launch:
        tiles = cdiv(s["d"], p["BLOCK_D"])
        rows = s["n"] if chunk == ALL_ROWS else chunk
        return Launch(
            "gram_matrix", (tiles, tiles, _chunks(s, chunk)), (*_gram_args(s), i32(rows)), constexprs=constexprs, num_warps=p["num_warps"]
        )

    return Variant("triton-dot", "triton", {"dtype": dtype, **p}, GRAM_TRITON, _zeroed_first(split, launch), unsupported=unsupported(dtype))


def gram_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"
        naive = {"block_x": 16, "block_y": 16, "order": "ij", "symmetric": False, "restrict": True}
        naive_edits = (
            around(naive, order=["ji"], symmetric=[True], restrict=[False])
            + [{**naive, "block_x": 32, "block_y": 8}, {**naive, "block_x": 8, "block_y": 8}]
            if full
            else [naive]
        )
        for p in naive_edits:
            yield gram_naive_variant(dtype, p)
        splitk = {"block_x": 16, "block_y": 16, "chunk": 4096, "combine": "atomic", "restrict": True}
        splitk_edits = (
            around(splitk, chunk=[1024, 16384], combine=["scratch"], restrict=[False])
            + [{**splitk, "combine": "scratch", "chunk": 1024}, {**splitk, "block_x": 32, "block_y": 8}]
            if full
            else around(splitk, combine=["scratch"])
        )
        for p in splitk_edits:
            yield gram_splitk_variant(dtype, p)
        tiled = {"tile": 16, "layout": "rows", "pad": 0, "chunk": ALL_ROWS, "symmetric": False, "restrict": True}
        columns = {**tiled, "layout": "columns"}
        if full:
            tiled_edits = [
                *around(tiled, tile=[8, 32], layout=["columns"], chunk=[4096], symmetric=[True], restrict=[False]),
                *around(columns, tile=[32], pad=[1])[1:],
                {**columns, "tile": 32, "pad": 1},
                {**tiled, "chunk": 1024},
                {**tiled, "tile": 32, "chunk": 4096},
            ]
        else:
            tiled_edits = around(tiled, tile=[32], chunk=[4096])
        for p in tiled_edits:
            yield gram_smem_variant(dtype, p)
        base = {"BD": 64, "BK": 16, "TM": 4, "TN": 4, "chunk": 4096, "symmetric": False}
        tiles = [(64, 8, 4, 4), (128, 8, 8, 8), (64, 16, 8, 8), (32, 16, 4, 4)] if full else []
        register_edits = [
            *(around(base, chunk=[ALL_ROWS, 16384], symmetric=[True]) if full else around(base, chunk=[ALL_ROWS])),
            *({**base, **dict(zip(("BD", "BK", "TM", "TN"), tile))} for tile in tiles),
        ]
        for p in register_edits:
            yield gram_register_variant(dtype, p)
        dot = {"BLOCK_D": 64, "BLOCK_N": 32, "num_warps": 4, "chunk": 4096, "symmetric": False}
        dot_edits = (
            around(dot, BLOCK_D=[32], BLOCK_N=[16, 64], num_warps=[8], chunk=[ALL_ROWS, 16384], symmetric=[True])
            + [{**dot, "BLOCK_D": 32, "chunk": ALL_ROWS}]
            if full
            else around(dot, BLOCK_N=[64], chunk=[ALL_ROWS])
        )
        for p in dot_edits:
            yield gram_triton_variant(dtype, p)


def _gram_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    x = inputs["x"].float()
    return {"G": x.T @ x}


GRAM = Op(
    name="gram_matrix",
    bound="compute",
    sizes=GRAM_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"], s["d"]), s["dtype"])},
    outputs=lambda s: {"G": TensorSpec((s["d"], s["d"]), "f32")},
    reference=_gram_reference,
    reference_code="def reference(x):\n    x = x.float()\n    return x.T @ x\n",
    variants=gram_variants,
    tolerance={"f32": 3e-3},
)


# --- outer_gram: CUDA ---------------------------------------------------------------------------


def outer_naive_code(dtype: str, p: dict[str, Any]) -> str:
    """A thread per output looping over d: a warp's loads of x[col * d + k] are d floats apart."""
    skip = "    if (row > col) return;  // the lower triangle is mirrored from the upper\n" if p["symmetric"] else ""
    return f"""{_prelude(dtype)}{_signature("outer_gram", p["restrict"], "int m, int d")} {{
{_thread_coords(p["order"], ("row", "col"))}    if (row >= m || col >= m) return;
{skip}    float acc = 0.0f;
    for (int k = 0; k < d; ++k)
        acc += ld(x[row * d + k]) * ld(x[col * d + k]);
{_store("G", "m", "row", "col", "acc", "row != col" if p["symmetric"] else None, False, "    ")}}}
"""


def outer_warp_code(dtype: str, p: dict[str, Any]) -> str:
    """A warp per output, lanes striding along d: coalesced row reads, a shuffle reduction at the end."""
    skip = "    if (i > j) return;  // whole warps: the lower triangle is mirrored from the upper\n" if p["symmetric"] else ""
    if p["vector"] == 4:
        loop = """    const float4* a = reinterpret_cast<const float4*>(x + i * d);
    const float4* b = reinterpret_cast<const float4*>(x + j * d);
    for (int k = lane; k < d / 4; k += 32) {
        float4 p = a[k], q = b[k];
        acc += p.x * q.x + p.y * q.y + p.z * q.z + p.w * q.w;
    }
"""
    else:
        loop = """    for (int k = lane; k < d; k += 32)
        acc += ld(x[i * d + k]) * ld(x[j * d + k]);
"""
    return f"""{_prelude(dtype, WARPS=p["warps"])}{_signature("outer_gram", p["restrict"], "int m, int d")} {{
    int idx = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (idx >= m * m) return;
    int i = idx / m, j = idx % m;
{skip}    float acc = 0.0f;
{loop}    for (int offset = 16; offset > 0; offset >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (lane == 0) {{
{_store("G", "m", "i", "j", "acc", "i != j" if p["symmetric"] else None, False, "        ")}    }}
}}
"""


def outer_smem_code(dtype: str, p: dict[str, Any]) -> str:
    """TILE rows of each row block, TILE features per step; the B tile is read across rows (row-major) or stored so (feature-major)."""
    store_b, read_b = ("Bs[ty][tx]", "Bs[tx][k]") if p["b_layout"] == "rows" else ("Bs[tx][ty]", "Bs[k][tx]")
    return f"""{_prelude(dtype, TILE=p["tile"], PAD=p["pad"])}{_signature("outer_gram", p["restrict"], "int m, int d")} {{
    __shared__ float As[TILE][TILE + PAD];
    __shared__ float Bs[TILE][TILE + PAD];
{BLOCK_SKIP if p["symmetric"] else ""}    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    int brow = blockIdx.x * TILE + ty;  // the row of the column block this thread stages
    float acc = 0.0f;
    for (int k0 = 0; k0 < d; k0 += TILE) {{
        As[ty][tx] = (row < m && k0 + tx < d) ? ld(x[row * d + k0 + tx]) : 0.0f;
        {store_b} = (brow < m && k0 + tx < d) ? ld(x[brow * d + k0 + tx]) : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k)
            acc += As[ty][k] * {read_b};
        __syncthreads();
    }}
    if (row < m && col < m) {{
{_store("G", "m", "row", "col", "acc", "blockIdx.x != blockIdx.y" if p["symmetric"] else None, False, "        ")}    }}
}}
"""


def outer_register_code(dtype: str, p: dict[str, Any]) -> str:
    """BD rows of x per block side, BK features deep, stored feature-major; TM x TN outputs per thread."""
    if p["vector"] == 4:
        load = """        for (int e = tid; e < BD * BK / 4; e += THREADS) {  // a float4 of 4 features per step
            const int r = e / (BK / 4), c = (e % (BK / 4)) * 4;
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
            if (i0 + r < m && k0 + c < d) a = *reinterpret_cast<const float4*>(x + (size_t)(i0 + r) * d + k0 + c);
            if (j0 + r < m && k0 + c < d) b = *reinterpret_cast<const float4*>(x + (size_t)(j0 + r) * d + k0 + c);
            As[c][r] = a.x; As[c + 1][r] = a.y; As[c + 2][r] = a.z; As[c + 3][r] = a.w;
            Bs[c][r] = b.x; Bs[c + 1][r] = b.y; Bs[c + 2][r] = b.z; Bs[c + 3][r] = b.w;
        }
"""
    else:
        load = """        for (int e = tid; e < BD * BK; e += THREADS) {  // features fastest: coalesced along each row
            const int r = e / BK, c = e % BK;
            As[c][r] = (i0 + r < m && k0 + c < d) ? ld(x[(size_t)(i0 + r) * d + k0 + c]) : 0.0f;
            Bs[c][r] = (j0 + r < m && k0 + c < d) ? ld(x[(size_t)(j0 + r) * d + k0 + c]) : 0.0f;
        }
"""
    return f"""{_prelude(dtype, BD=p["BD"], BK=p["BK"], TM=p["TM"], TN=p["TN"])}#define THREADS ((BD / TM) * (BD / TN))

{_signature("outer_gram", True, "int m, int d", launch_bounds="__launch_bounds__(THREADS) ")} {{
    __shared__ float As[BK][BD];  // features k0.. of rows i0..
    __shared__ float Bs[BK][BD];  // features k0.. of rows j0..
{BLOCK_SKIP if p["symmetric"] else ""}{REGISTER_SETUP}    for (int k0 = 0; k0 < d; k0 += BK) {{
{load}{REGISTER_PRODUCT}{_register_store("m", p["symmetric"], False)}}}
"""


# --- outer_gram: Triton -------------------------------------------------------------------------


def outer_triton_code(product: str) -> str:
    """`product`: "dot" (tl.dot of [BLOCK_M, BLOCK_K] by the other rows' [BLOCK_K, BLOCK_M]) or "broadcast" (a 3-d product summed over features)."""
    if product == "dot":
        load_b = "tl.load(x_ptr + rj[None, :] * d + k[:, None], mask=(k[:, None] < d) & (rj[None, :] < m), other=0.0)  # [BLOCK_K, BLOCK_M]"
        accumulate = 'acc = tl.dot(a, b, acc, input_precision="ieee")'
    else:
        load_b = "tl.load(x_ptr + rj[:, None] * d + k[None, :], mask=(rj[:, None] < m) & (k[None, :] < d), other=0.0).to(tl.float32)"
        accumulate = "acc += tl.sum(a.to(tl.float32)[:, None, :] * b[None, :, :], axis=2)"
    return f"""{TRITON_HEADER}

@triton.jit
def outer_gram(x_ptr, g_ptr, m, d, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, SYMMETRIC: tl.constexpr):
    pid_i = tl.program_id(0)
    pid_j = tl.program_id(1)
    if SYMMETRIC:
        if pid_i > pid_j:  # below the diagonal: mirrored by the program above it
            return
    ri = pid_i * BLOCK_M + tl.arange(0, BLOCK_M)
    rj = pid_j * BLOCK_M + tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_M), dtype=tl.float32)
    for k0 in range(0, d, BLOCK_K):
        k = k0 + rk
        a = tl.load(x_ptr + ri[:, None] * d + k[None, :], mask=(ri[:, None] < m) & (k[None, :] < d), other=0.0)
        b = {load_b}
        {accumulate}
    mask = (ri[:, None] < m) & (rj[None, :] < m)
    tl.store(g_ptr + ri[:, None] * m + rj[None, :], acc, mask=mask)
    if SYMMETRIC:
        if pid_i != pid_j:
            tl.store(g_ptr + rj[None, :] * m + ri[:, None], acc, mask=mask)
"""


# --- outer_gram: variants -----------------------------------------------------------------------


def _outer_args(s: Sizes) -> tuple[Any, ...]:
    return ("x", "G", i32(s["m"]), i32(s["d"]))


def _outer_cuda_variant(
    family: str,
    dtype: str,
    p: dict[str, Any],
    code: str,
    grid: Callable[[Sizes], tuple[int, int, int]],
    block: tuple[int, int, int],
    *checks: Check,
) -> Variant:
    return Variant(
        family,
        "cuda",
        {"dtype": dtype, **p},
        code,
        lambda s: [Launch("outer_gram", grid(s), _outer_args(s), block)],
        unsupported=unsupported(dtype, *checks),
    )


def outer_naive_variant(dtype: str, p: dict[str, Any]) -> Variant:
    bx, by = p["block_x"], p["block_y"]
    wide = p["order"] == "ji" or bx > 16  # 32 rows d apart per warp, or the store strided by m
    limit = NAIVE_WIDE_MAX_MACS if wide else NAIVE_MAX_MACS
    return _outer_cuda_variant(
        "cuda-naive",
        dtype,
        p,
        outer_naive_code(dtype, p),
        lambda s: (cdiv(s["m"], bx), cdiv(s["m"], by), 1),
        (bx, by, 1),
        _work_at_most(limit, "m", "m", "d"),
    )


def outer_warp_variant(dtype: str, p: dict[str, Any]) -> Variant:
    checks = (divisible("d", 4),) if p["vector"] == 4 else ()
    return _outer_cuda_variant(
        "cuda-warp-per-output",
        dtype,
        p,
        outer_warp_code(dtype, p),
        lambda s: grid1(cdiv(s["m"] * s["m"], p["warps"])),
        (32 * p["warps"], 1, 1),
        *checks,
    )


def outer_smem_variant(dtype: str, p: dict[str, Any]) -> Variant:
    tile = p["tile"]
    return _outer_cuda_variant(
        "cuda-smem-tiled", dtype, p, outer_smem_code(dtype, p), lambda s: (cdiv(s["m"], tile), cdiv(s["m"], tile), 1), (tile, tile, 1)
    )


def outer_register_variant(dtype: str, p: dict[str, Any]) -> Variant:
    bd, threads = p["BD"], (p["BD"] // p["TM"]) * (p["BD"] // p["TN"])
    checks = (divisible("d", 4),) if p["vector"] == 4 else ()
    return _outer_cuda_variant(
        "cuda-register-tiled",
        dtype,
        p,
        outer_register_code(dtype, p),
        lambda s: (cdiv(s["m"], bd), cdiv(s["m"], bd), 1),
        (threads, 1, 1),
        *checks,
    )


def outer_triton_variant(product: str, dtype: str, p: dict[str, Any]) -> Variant:
    constexprs = {"BLOCK_M": p["BLOCK_M"], "BLOCK_K": p["BLOCK_K"], "SYMMETRIC": p["symmetric"]}

    def launches(s: Sizes) -> list[Launch]:
        tiles = cdiv(s["m"], p["BLOCK_M"])
        return [Launch("outer_gram", (tiles, tiles, 1), _outer_args(s), constexprs=constexprs, num_warps=p["num_warps"])]

    return Variant(
        f"triton-{product}", "triton", {"dtype": dtype, **p}, outer_triton_code(product), launches, unsupported=unsupported(dtype)
    )


def outer_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"
        naive = {"block_x": 16, "block_y": 16, "order": "ij", "symmetric": False, "restrict": True}
        naive_edits = (
            around(naive, order=["ji"], symmetric=[True], restrict=[False])
            + [{**naive, "block_x": 32, "block_y": 8}, {**naive, "block_x": 8, "block_y": 8}]
            if full
            else around(naive, symmetric=[True])
        )
        for p in naive_edits:
            yield outer_naive_variant(dtype, p)
        warp = {"warps": 4, "vector": 1, "symmetric": False, "restrict": True}
        for p in around(warp, warps=[8], vector=[4], symmetric=[True], restrict=[False]) if full else [warp]:
            yield outer_warp_variant(dtype, p)
        tiled = {"tile": 16, "b_layout": "rows", "pad": 0, "symmetric": False, "restrict": True}
        if full:
            tiled_edits = [
                *around(tiled, tile=[8, 32], b_layout=["features"], pad=[1], symmetric=[True], restrict=[False]),
                {**tiled, "tile": 32, "pad": 1},
                {**tiled, "b_layout": "features", "pad": 1},
            ]
        else:
            tiled_edits = around(tiled, pad=[1])
        for p in tiled_edits:
            yield outer_smem_variant(dtype, p)
        base = {"BD": 64, "BK": 8, "TM": 4, "TN": 4, "vector": 1, "symmetric": False}
        tiles = [(64, 16, 4, 4), (128, 8, 8, 8), (32, 8, 4, 4), (64, 8, 8, 8)] if full else [(128, 8, 8, 8)]
        register_edits = [
            *(around(base, vector=[4], symmetric=[True]) if full else [base]),
            *({**base, **dict(zip(("BD", "BK", "TM", "TN"), tile))} for tile in tiles),
        ]
        if full:
            register_edits.append({**base, **dict(zip(("BD", "BK", "TM", "TN"), tiles[1])), "vector": 4})
        for p in register_edits:
            yield outer_register_variant(dtype, p)
        dot = {"BLOCK_M": 64, "BLOCK_K": 32, "num_warps": 4, "symmetric": False}
        dot_edits = (
            around(dot, BLOCK_M=[32, 128], BLOCK_K=[16, 64], num_warps=[8], symmetric=[True])
            if full
            else around(dot, BLOCK_M=[128], symmetric=[True])
        )
        for p in dot_edits:
            yield outer_triton_variant("dot", dtype, p)
        broadcast = {"BLOCK_M": 16, "BLOCK_K": 16, "num_warps": 4, "symmetric": False}
        broadcast_edits = (
            around(broadcast, BLOCK_K=[8], num_warps=[8], symmetric=[True]) + [{**broadcast, "BLOCK_M": 32, "BLOCK_K": 8}]
            if full
            else [broadcast]
        )
        for p in broadcast_edits:
            yield outer_triton_variant("broadcast", dtype, p)


def _outer_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    x = inputs["x"].float()
    return {"G": x @ x.T}


OUTER = Op(
    name="outer_gram",
    bound="compute",
    sizes=OUTER_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["m"], s["d"]), s["dtype"])},
    outputs=lambda s: {"G": TensorSpec((s["m"], s["m"]), "f32")},
    reference=_outer_reference,
    reference_code="def reference(x):\n    x = x.float()\n    return x @ x.T\n",
    variants=outer_variants,
    tolerance={"f32": 1e-3},
)

OPS = [GRAM, OUTER]
