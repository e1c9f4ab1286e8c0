"""Reductions: row_sum, row_max, row_mean over [M, N], and full_sum of a long vector.

Which threads own a row decides speed, and the best choice flips with the shape (many
short rows, few long ones), so the sizes include a tall-skinny and a short-wide matrix.

Row reductions, CUDA: one thread per row (serial, uncoalesced), one warp per row
(__shfl_xor), one block per row with three block-reduction styles (warp shuffles,
shared-memory tree, the interleaved tree with divergence and bank conflicts), and a row
split over several blocks combined either by atomics (after a clearing launch) or by a
second launch over a scratch of partials. Axes: block/warps per block, 16-byte vector
loads, unrolled independent accumulators, chunk size. Triton: whole row in one tile,
looped tiles, several rows per program, split rows with atomics; num_warps, tile sizes.

full_sum, CUDA: an atomic per element (bad), one atomic per block or per warp, two
launches through a scratch of block partials, and the single-launch last-block pattern
(threadfence + ticket counter); full or persistent grids, block size, vector loads,
reduction style. Triton: atomics per tile, two launches, persistent programs.
"""

from __future__ import annotations

from collections.abc import Iterable

from workshop.corpus.ops.rowkit import (
    ATOMIC_MAX_FLOAT,
    IDENTITY,
    THREADS_PER_SM,
    TRITON_HEADER,
    TRITON_OTHER,
    TRITON_REDUCE,
    at_least,
    at_most,
    cuda_accumulate,
    cuda_prelude,
    cuda_reductions,
    divisible,
    next_pow2,
    resident_blocks,
    unsupported,
    vector_width,
)
from workshop.corpus.spec import (
    CUDA_TYPES,
    ZERO,
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

ROW_SIZES = [
    {"m": 64, "n": 1024, "dtype": "f32"},
    {"m": 4096, "n": 1024, "dtype": "f32"},
    {"m": 262144, "n": 128, "dtype": "f32"},
    {"m": 8192, "n": 8192, "dtype": "f32"},
    {"m": 256, "n": 262144, "dtype": "f32"},
    {"m": 8192, "n": 8192, "dtype": "f16"},
    {"m": 8192, "n": 8192, "dtype": "bf16"},
]
FULL_SIZES = [
    {"n": 4096, "dtype": "f32"},
    {"n": 1 << 18, "dtype": "f32"},
    {"n": 1 << 22, "dtype": "f32"},
    {"n": 1 << 26, "dtype": "f32"},
    {"n": 1 << 26, "dtype": "f16"},
]

SERIAL_MAX_N = 8192  # one thread walking a longer row alone takes too long
WHOLE_ROW_MAX_N = 16384  # one Triton tile per row: registers run out beyond this
MANY_ROWS_MAX_N = 8192  # several rows per Triton program: meant for short rows


class RowReduction:
    """What differs between row_sum, row_max and row_mean: the combine and the final scale."""

    def __init__(self, name: str, kind: str, mean: bool, method: str) -> None:
        self.name, self.kind, self.mean, self.method = name, kind, mean, method  # method: the torch.Tensor one

    def final(self, acc: str) -> str:
        return f"{acc} / (float)n" if self.mean else acc

    def triton_final(self, acc: str) -> str:
        return f"{acc} / n" if self.mean else acc

    def atomic(self, address: str, value: str) -> str:
        """CUDA: fold a block's partial into the output."""
        if self.kind == "max":
            return f"atomic_max_float({address}, {value})"
        return f"atomicAdd({address}, {self.final(value)})"


ROW_KINDS = [
    RowReduction("row_sum", "sum", False, "sum"),
    RowReduction("row_max", "max", False, "amax"),
    RowReduction("row_mean", "sum", True, "mean"),
]


# --- row reductions, CUDA ---------------------------------------------------------------------


def _packs(extent: str, vector: int) -> str:
    """An element count in loads of `vector` elements."""
    return extent if vector == 1 else f"{extent} / {vector}"


def _row_pointer(dtype: str, vector: int, row: str) -> str:
    ctype = CUDA_TYPES[dtype]
    if vector == 1:
        return f"    const {ctype}* src = x + (size_t){row} * n;\n"
    return f"    const Pack* src = reinterpret_cast<const Pack*>(x + (size_t){row} * n);\n"


def _row_signature(op: RowReduction, dtype: str) -> str:
    ctype = CUDA_TYPES[dtype]
    return f'extern "C" __global__ void {op.name}(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int m, int n)'


def _serial_code(op: RowReduction, dtype: str, block: int, unroll: int) -> str:
    store = cuda_store_from_float(dtype, op.final("acc"))
    return f"""{cuda_prelude(dtype, {"BLOCK": block})}{cuda_reductions((op.kind,), warp=False)}
// one thread per row: neighbouring threads read addresses n elements apart
{_row_signature(op, dtype)} {{
    int row = blockIdx.x * BLOCK + threadIdx.x;
    if (row >= m) return;
{_row_pointer(dtype, 1, "row")}{cuda_accumulate(dtype, op.kind, "src", "0", "1", "n", unroll=unroll)}    y[row] = {store};
}}
"""


def _warp_code(op: RowReduction, dtype: str, warps: int, vector: int, unroll: int) -> str:
    store = cuda_store_from_float(dtype, op.final("acc"))
    return f"""{cuda_prelude(dtype, {"WARPS": warps}, vector)}{cuda_reductions((op.kind,))}
// one warp per row, lanes stride over the row, shuffles combine
{_row_signature(op, dtype)} {{
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= m) return;
{_row_pointer(dtype, vector, "row")}{cuda_accumulate(dtype, op.kind, "src", "lane", "32", _packs("n", vector), vector, unroll)}    acc = warp_{op.kind}(acc);
    if (lane == 0) y[row] = {store};
}}
"""


def _block_code(op: RowReduction, dtype: str, block: int, vector: int, reduction: str) -> str:
    store = cuda_store_from_float(dtype, op.final("acc"))
    return f"""{cuda_prelude(dtype, {"BLOCK": block}, vector)}{cuda_reductions((op.kind,), reduction)}
// one block per row
{_row_signature(op, dtype)} {{
{_row_pointer(dtype, vector, "blockIdx.x")}{cuda_accumulate(dtype, op.kind, "src", "threadIdx.x", "BLOCK", _packs("n", vector), vector)}    acc = block_{op.kind}(acc);
    if (threadIdx.x == 0) y[blockIdx.x] = {store};
}}
"""


def _chunk_body(op: RowReduction, dtype: str, vector: int) -> str:
    """A block's partial over columns [blockIdx.y * CHUNK, +CHUNK) of row blockIdx.x."""
    return f"""{_row_pointer(dtype, vector, "blockIdx.x")}    int begin = blockIdx.y * ({_packs("CHUNK", vector)});
    int end = min({_packs("n", vector)}, begin + {_packs("CHUNK", vector)});
{cuda_accumulate(dtype, op.kind, "src", "begin + threadIdx.x", "BLOCK", "end", vector)}    acc = block_{op.kind}(acc);
"""


def _split_atomic_code(op: RowReduction, vector: int, chunk: int) -> str:
    fill = (
        f"""
extern "C" __global__ void fill_neg_inf(float* __restrict__ y, int m) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m) y[i] = {IDENTITY["max"]};
}}
"""
        if op.kind == "max"
        else ""
    )
    return f"""{cuda_prelude("f32", {"BLOCK": 256, "CHUNK": chunk}, vector)}{cuda_reductions((op.kind,), "shuffle")}{ATOMIC_MAX_FLOAT if op.kind == "max" else ""}{fill}
// grid (rows, chunks): each block folds its chunk's partial into y[row] atomically
{_row_signature(op, "f32")} {{
{_chunk_body(op, "f32", vector)}    if (threadIdx.x == 0) {op.atomic("y + blockIdx.x", "acc")};
}}
"""


def _two_pass_code(op: RowReduction, dtype: str, vector: int, chunk: int) -> str:
    ctype = CUDA_TYPES[dtype]
    store = cuda_store_from_float(dtype, op.final("acc"))
    return f"""{cuda_prelude(dtype, {"BLOCK": 256, "CHUNK": chunk}, vector)}{cuda_reductions((op.kind,), "shuffle")}
// pass 1, grid (rows, chunks): one partial per chunk into scratch
extern "C" __global__ void {op.name}_partials(const {ctype}* __restrict__ x, float* __restrict__ partial, int m, int n) {{
{_chunk_body(op, dtype, vector)}    if (threadIdx.x == 0) partial[(size_t)blockIdx.x * gridDim.y + blockIdx.y] = acc;
}}

// pass 2: one warp per row combines its partials
extern "C" __global__ void {op.name}_finish(const float* __restrict__ partial, {ctype}* __restrict__ y, int m, int n, int chunks) {{
    int row = blockIdx.x * (BLOCK / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= m) return;
    const float* mine = partial + (size_t)row * chunks;
{cuda_accumulate("f32", op.kind, "mine", "lane", "32", "chunks")}    acc = warp_{op.kind}(acc);
    if (lane == 0) y[row] = {store};
}}
"""


# --- row reductions, Triton -------------------------------------------------------------------


def _triton_load(mask: str, offsets: str, kind: str) -> str:
    return f"tl.load(x_ptr + {offsets}, mask={mask}, other={TRITON_OTHER[kind]}).to(tl.float32)"


def _triton_fold(kind: str, acc: str, value: str) -> str:
    return f"{acc} + {value}" if kind == "sum" else f"tl.maximum({acc}, {value})"


def _triton_start(kind: str, shape: str) -> str:
    return f"tl.zeros({shape}, dtype=tl.float32)" if kind == "sum" else f'tl.full({shape}, float("-inf"), tl.float32)'


def _triton_whole_row(op: RowReduction) -> str:
    total = op.triton_final(f"{TRITON_REDUCE[op.kind]}(v, axis=0)")
    return f"""{TRITON_HEADER}

@triton.jit
def {op.name}(x_ptr, y_ptr, n, BLOCK_N: tl.constexpr):
    # the whole row in one tile (BLOCK_N = next power of two >= n)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    v = {_triton_load("cols < n", "row * n + cols", op.kind)}
    tl.store(y_ptr + row, ({total}).to(y_ptr.dtype.element_ty))
"""


def _triton_looped(op: RowReduction) -> str:
    total = op.triton_final(f"{TRITON_REDUCE[op.kind]}(acc, axis=0)")
    return f"""{TRITON_HEADER}

@triton.jit
def {op.name}(x_ptr, y_ptr, n, BLOCK_N: tl.constexpr):
    # one program per row, a running tile over BLOCK_N-wide slices
    row = tl.program_id(0)
    acc = {_triton_start(op.kind, "[BLOCK_N]")}
    for start in range(0, n, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        v = {_triton_load("cols < n", "row * n + cols", op.kind)}
        acc = {_triton_fold(op.kind, "acc", "v")}
    tl.store(y_ptr + row, ({total}).to(y_ptr.dtype.element_ty))
"""


def _triton_many_rows(op: RowReduction) -> str:
    total = op.triton_final(f"{TRITON_REDUCE[op.kind]}(acc, axis=1)")
    return f"""{TRITON_HEADER}

@triton.jit
def {op.name}(x_ptr, y_ptr, m, n, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    # ROWS rows per program, a running [ROWS, BLOCK_N] tile
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    acc = {_triton_start(op.kind, "[ROWS, BLOCK_N]")}
    for start in range(0, n, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < m) & (cols[None, :] < n)
        v = {_triton_load("mask", "rows[:, None] * n + cols[None, :]", op.kind)}
        acc = {_triton_fold(op.kind, "acc", "v")}
    tl.store(y_ptr + rows, ({total}).to(y_ptr.dtype.element_ty), mask=rows < m)
"""


def _triton_split_atomic(op: RowReduction) -> str:
    partial = op.triton_final(f"{TRITON_REDUCE[op.kind]}(v, axis=0)")
    atomic = "tl.atomic_max" if op.kind == "max" else "tl.atomic_add"
    fill = (
        """

@triton.jit
def fill_neg_inf(y_ptr, m, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.full([BLOCK], float("-inf"), tl.float32), mask=offsets < m)
"""
        if op.kind == "max"
        else ""
    )
    return f"""{TRITON_HEADER}{fill}

@triton.jit
def {op.name}(x_ptr, y_ptr, n, BLOCK_N: tl.constexpr):
    # grid (rows, chunks): each program folds its chunk into y[row] atomically
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    v = {_triton_load("cols < n", "row * n + cols", op.kind)}
    {atomic}(y_ptr + row, {partial})
"""


# --- row reductions, variants -----------------------------------------------------------------


def _clear_launch(op: RowReduction, backend: str, sizes: Sizes) -> Launch:
    """What atomics start from: zeros for sums, -inf for max (a launch of the variant's own)."""
    m = sizes["m"]
    if op.kind != "max":
        return Launch(ZERO, grid1(1), ("y",))
    if backend == "cuda":
        return Launch("fill_neg_inf", grid1(cdiv(m, 256)), ("y", i32(m)), block1(256))
    return Launch("fill_neg_inf", grid1(cdiv(m, 1024)), ("y", i32(m)), constexprs={"BLOCK": 1024}, num_warps=4)


def _row_variants(op: RowReduction) -> Iterable[Variant]:
    for dtype in ("f32", "f16", "bf16"):
        full = dtype == "f32"  # the half types get a sample of each family
        width = vector_width(dtype)
        vec_ok = divisible("n", width)
        for p in product({"block": [64, 256] if full else [256], "unroll": [1, 4]}):
            yield Variant(
                "cuda-thread-per-row",
                "cuda",
                {"dtype": dtype, **p},
                _serial_code(op, dtype, p["block"], p["unroll"]),
                lambda s, b=p["block"]: [Launch(op.name, grid1(cdiv(s["m"], b)), ("x", "y", i32(s["m"]), i32(s["n"])), block1(b))],
                unsupported=unsupported(dtype, at_most("n", SERIAL_MAX_N, "a serial row is too slow")),
            )
        for p in product({"warps": [1, 4, 8] if full else [4], "vector": [1, width], "unroll": [1, 4]}):
            yield Variant(
                "cuda-warp-per-row",
                "cuda",
                {"dtype": dtype, **p},
                _warp_code(op, dtype, p["warps"], p["vector"], p["unroll"]),
                lambda s, w=p["warps"]: [Launch(op.name, grid1(cdiv(s["m"], w)), ("x", "y", i32(s["m"]), i32(s["n"])), block1(32 * w))],
                unsupported=unsupported(dtype, vec_ok),
            )
        styles = ["interleaved", "smem", "shuffle"] if full else ["smem", "shuffle"]
        for p in product({"block": [128, 256, 512, 1024] if full else [256, 1024], "vector": [1, width], "reduction": styles}):
            yield Variant(
                "cuda-block-per-row",
                "cuda",
                {"dtype": dtype, **p},
                _block_code(op, dtype, p["block"], p["vector"], p["reduction"]),
                lambda s, b=p["block"]: [Launch(op.name, grid1(s["m"]), ("x", "y", i32(s["m"]), i32(s["n"])), block1(b))],
                unsupported=unsupported(dtype, vec_ok),
            )
        for p in product({"chunk": [2048, 8192, 32768] if full else [2048, 8192], "vector": [width], "block": [256]}):
            yield Variant(
                "cuda-split-two-pass",
                "cuda",
                {"dtype": dtype, **p},
                _two_pass_code(op, dtype, p["vector"], p["chunk"]),
                lambda s, c=p["chunk"]: [
                    Launch(f"{op.name}_partials", (s["m"], cdiv(s["n"], c), 1), ("x", "partial", i32(s["m"]), i32(s["n"])), block1(256)),
                    Launch(
                        f"{op.name}_finish",
                        grid1(cdiv(s["m"], 8)),
                        ("partial", "y", i32(s["m"]), i32(s["n"]), i32(cdiv(s["n"], c))),
                        block1(256),
                    ),
                ],
                scratch=lambda s, c=p["chunk"]: {"partial": TensorSpec((s["m"] * cdiv(s["n"], c),), "f32")},
                unsupported=unsupported(dtype, vec_ok, at_least("n", p["chunk"], "a row shorter than one chunk")),
            )
        if full:
            for p in product({"chunk": [2048, 8192, 32768], "vector": [1, width], "block": [256]}):
                yield Variant(
                    "cuda-split-atomic",
                    "cuda",
                    {"dtype": dtype, **p},
                    _split_atomic_code(op, p["vector"], p["chunk"]),
                    lambda s, c=p["chunk"]: [
                        _clear_launch(op, "cuda", s),
                        Launch(op.name, (s["m"], cdiv(s["n"], c), 1), ("x", "y", i32(s["m"]), i32(s["n"])), block1(256)),
                    ],
                    unsupported=unsupported(dtype, vec_ok, at_least("n", p["chunk"], "a row shorter than one chunk")),
                )
        yield from _row_triton_variants(op, dtype, full)


def _row_triton_variants(op: RowReduction, dtype: str, full: bool) -> Iterable[Variant]:
    for warps in [1, 2, 4, 8, 16] if full else [4, 8]:
        yield Variant(
            "triton-whole-row",
            "triton",
            {"dtype": dtype, "num_warps": warps},
            _triton_whole_row(op),
            lambda s, w=warps: [
                Launch(op.name, grid1(s["m"]), ("x", "y", i32(s["n"])), constexprs={"BLOCK_N": next_pow2(s["n"])}, num_warps=w)
            ],
            unsupported=unsupported(dtype, at_most("n", WHOLE_ROW_MAX_N, "the row does not fit one tile")),
        )
    for p in product({"BLOCK_N": [256, 1024, 4096] if full else [1024, 4096], "num_warps": [2, 4, 8] if full else [4, 8]}):
        yield Variant(
            "triton-looped-row",
            "triton",
            {"dtype": dtype, **p},
            _triton_looped(op),
            lambda s, p=p: [
                Launch(op.name, grid1(s["m"]), ("x", "y", i32(s["n"])), constexprs={"BLOCK_N": p["BLOCK_N"]}, num_warps=p["num_warps"])
            ],
            unsupported=unsupported(dtype),
        )
    if not full:
        return
    for p in product({"ROWS": [2, 8, 32], "BLOCK_N": [128, 256], "num_warps": [4]}):
        yield Variant(
            "triton-many-rows",
            "triton",
            {"dtype": dtype, **p},
            _triton_many_rows(op),
            lambda s, p=p: [
                Launch(
                    op.name,
                    grid1(cdiv(s["m"], p["ROWS"])),
                    ("x", "y", i32(s["m"]), i32(s["n"])),
                    constexprs={"ROWS": p["ROWS"], "BLOCK_N": p["BLOCK_N"]},
                    num_warps=p["num_warps"],
                )
            ],
            unsupported=unsupported(dtype, at_most("n", MANY_ROWS_MAX_N, "few rows: too few programs")),
        )
    for p in product({"BLOCK_N": [1024, 4096, 16384], "num_warps": [4, 8]}):
        yield Variant(
            "triton-split-atomic",
            "triton",
            {"dtype": dtype, **p},
            _triton_split_atomic(op),
            lambda s, p=p: [
                _clear_launch(op, "triton", s),
                Launch(
                    op.name,
                    (s["m"], cdiv(s["n"], p["BLOCK_N"]), 1),
                    ("x", "y", i32(s["n"])),
                    constexprs={"BLOCK_N": p["BLOCK_N"]},
                    num_warps=p["num_warps"],
                ),
            ],
            unsupported=unsupported(dtype, at_least("n", p["BLOCK_N"], "a row shorter than one chunk")),
        )


def _row_op(op: RowReduction) -> Op:
    # Sums of uniform [0, 1) values: every order of summation agrees to fp32's rtol.
    init = "randn" if op.kind == "max" else "rand"
    return Op(
        name=op.name,
        bound="memory",
        sizes=ROW_SIZES,
        inputs=lambda s: {"x": TensorSpec((s["m"], s["n"]), s["dtype"], init)},
        outputs=lambda s: {"y": TensorSpec((s["m"],), s["dtype"])},
        reference=lambda torch, inputs, sizes: {"y": getattr(inputs["x"], op.method)(dim=1)},
        reference_code=f"def reference(x):\n    return x.{op.method}(dim=1)\n",
        variants=lambda: _row_variants(op),
    )


# --- full_sum ---------------------------------------------------------------------------------


def _full_signature(dtype: str, name: str, out: str = "y") -> str:
    return f'extern "C" __global__ void {name}(const {CUDA_TYPES[dtype]}* __restrict__ x, float* __restrict__ {out}, int n)'


def _grid_stride_partial(dtype: str, vector: int, acc_reduce: str) -> str:
    """Each thread's grid-stride partial (in Packs when vector > 1), then `acc_reduce`."""
    src = "x" if vector == 1 else "reinterpret_cast<const Pack*>(x)"
    pointer = f"    const Pack* src = {src};\n" if vector > 1 else ""
    return (
        pointer
        + cuda_accumulate(
            dtype, "sum", "src" if vector > 1 else "x", "blockIdx.x * BLOCK + threadIdx.x", "gridDim.x * BLOCK", _packs("n", vector), vector
        )
        + acc_reduce
    )


def _full_atomic_element_code(dtype: str, block: int) -> str:
    return f"""{cuda_prelude(dtype, {"BLOCK": block})}
// every element is its own atomic on one address: the serialized baseline
{_full_signature(dtype, "full_sum")} {{
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) atomicAdd(y, {cuda_load_as_float(dtype, "x[i]")});
}}
"""


def _full_atomic_block_code(dtype: str, block: int, vector: int, reduction: str) -> str:
    body = _grid_stride_partial(dtype, vector, "    acc = block_sum(acc);\n    if (threadIdx.x == 0) atomicAdd(y, acc);\n")
    return f"""{cuda_prelude(dtype, {"BLOCK": block}, vector)}{cuda_reductions(("sum",), reduction)}
// a block reduction, then one atomic per block
{_full_signature(dtype, "full_sum")} {{
{body}}}
"""


def _full_atomic_warp_code(dtype: str, block: int, vector: int) -> str:
    body = _grid_stride_partial(dtype, vector, "    acc = warp_sum(acc);\n    if (threadIdx.x % 32 == 0) atomicAdd(y, acc);\n")
    return f"""{cuda_prelude(dtype, {"BLOCK": block}, vector)}{cuda_reductions(("sum",))}
// warp shuffles, then one atomic per warp: no shared memory, no barrier
{_full_signature(dtype, "full_sum")} {{
{body}}}
"""


FINISH_BLOCK = 1024


def _full_two_pass_code(dtype: str, block: int, vector: int) -> str:
    body = _grid_stride_partial(dtype, vector, "    acc = block_sum(acc);\n    if (threadIdx.x == 0) partial[blockIdx.x] = acc;\n")
    return f"""{cuda_prelude(dtype, {"BLOCK": block}, vector)}{cuda_reductions(("sum",), "shuffle")}
// pass 1: one partial per block into scratch
{_full_signature(dtype, "full_sum_partials", "partial")} {{
{body}}}
{_full_finish()}"""


def _full_finish() -> str:
    return f"""
// pass 2: one block of {FINISH_BLOCK} threads sums the partials
extern "C" __global__ void full_sum_finish(const float* __restrict__ partial, float* __restrict__ y, int count) {{
    __shared__ float s[32];
{cuda_accumulate("f32", "sum", "partial", "threadIdx.x", str(FINISH_BLOCK), "count")}    acc = warp_sum(acc);
    if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {{
        acc = warp_sum(s[threadIdx.x]);
        if (threadIdx.x == 0) y[0] = acc;
    }}
}}
"""


def _full_last_block_code(dtype: str, block: int, vector: int) -> str:
    body = _grid_stride_partial(dtype, vector, "    acc = block_sum(acc);\n")
    return f"""{cuda_prelude(dtype, {"BLOCK": block}, vector)}{cuda_reductions(("sum",), "shuffle")}
// one launch: each block writes its partial, the last block to finish (ticket counter) sums them
extern "C" __global__ void full_sum(const {CUDA_TYPES[dtype]}* __restrict__ x, float* __restrict__ y, int n,
                                    float* __restrict__ partial, unsigned int* __restrict__ counter) {{
    __shared__ bool last;
{body}    if (threadIdx.x == 0) {{
        partial[blockIdx.x] = acc;
        __threadfence();
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }}
    __syncthreads();
    if (!last) return;
    float total = 0.0f;
    for (int j = threadIdx.x; j < gridDim.x; j += BLOCK) total += __ldcg(partial + j);
    total = block_sum(total);
    if (threadIdx.x == 0) y[0] = total;
}}
"""


def _full_blocks(grid: str, n: int, block: int, vector: int) -> int:
    blocks = cdiv(n, block * vector)
    return resident_blocks(blocks, THREADS_PER_SM // block) if grid == "persistent" else blocks


def _full_triton_atomic() -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def full_sum(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0).to(tl.float32)
    tl.atomic_add(y_ptr, tl.sum(v, axis=0))
"""


def _full_triton_two_pass() -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def full_sum_partials(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0).to(tl.float32)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(v, axis=0))


@triton.jit
def full_sum_finish(partial_ptr, y_ptr, count, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, count, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        acc += tl.load(partial_ptr + offsets, mask=offsets < count, other=0.0)
    tl.store(y_ptr, tl.sum(acc, axis=0))
"""


def _full_triton_persistent() -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def full_sum(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # a fixed grid of programs strides over the vector, one atomic each
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offsets, mask=offsets < n, other=0.0).to(tl.float32)
    tl.atomic_add(y_ptr, tl.sum(acc, axis=0))
"""


def _full_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"
        width = vector_width(dtype)
        vec_ok = divisible("n", width)
        if full:
            for block in (256, 1024):
                yield Variant(
                    "cuda-atomic-per-element",
                    "cuda",
                    {"dtype": dtype, "block": block},
                    _full_atomic_element_code(dtype, block),
                    lambda s, b=block: [
                        Launch(ZERO, grid1(1), ("y",)),
                        Launch("full_sum", grid1(cdiv(s["n"], b)), ("x", "y", i32(s["n"])), block1(b)),
                    ],
                    unsupported=unsupported(dtype, at_most("n", 1 << 18, "serialized atomics: too slow and too inexact")),
                )
        axes = {"block": [128, 256, 512, 1024], "vector": [1, width], "reduction": ["smem", "shuffle"], "grid": ["full", "persistent"]}
        if not full:
            axes = {"block": [256, 1024], "vector": [1, width], "reduction": ["shuffle"], "grid": ["full", "persistent"]}
        combos = list(product(axes))
        if full:
            combos += product({"block": [256, 1024], "vector": [1, width], "reduction": ["interleaved"], "grid": ["persistent"]})
        for p in combos:
            yield Variant(
                "cuda-atomic-per-block",
                "cuda",
                {"dtype": dtype, **p},
                _full_atomic_block_code(dtype, p["block"], p["vector"], p["reduction"]),
                lambda s, p=p: [
                    Launch(ZERO, grid1(1), ("y",)),
                    Launch(
                        "full_sum",
                        grid1(_full_blocks(p["grid"], s["n"], p["block"], p["vector"])),
                        ("x", "y", i32(s["n"])),
                        block1(p["block"]),
                    ),
                ],
                unsupported=unsupported(dtype, vec_ok),
            )
        if full:
            for p in product({"block": [256, 1024], "vector": [1, width], "grid": ["full", "persistent"]}):
                yield Variant(
                    "cuda-atomic-per-warp",
                    "cuda",
                    {"dtype": dtype, **p},
                    _full_atomic_warp_code(dtype, p["block"], p["vector"]),
                    lambda s, p=p: [
                        Launch(ZERO, grid1(1), ("y",)),
                        Launch(
                            "full_sum",
                            grid1(_full_blocks(p["grid"], s["n"], p["block"], p["vector"])),
                            ("x", "y", i32(s["n"])),
                            block1(p["block"]),
                        ),
                    ],
                    unsupported=unsupported(dtype, vec_ok),
                )
        for p in product({"blocks": [132, 528, 2112] if full else [528], "block": [256, 1024], "vector": [1, width] if full else [width]}):
            yield Variant(
                "cuda-two-pass",
                "cuda",
                {"dtype": dtype, **p},
                _full_two_pass_code(dtype, p["block"], p["vector"]),
                lambda s, p=p: [
                    Launch("full_sum_partials", grid1(p["blocks"]), ("x", "partial", i32(s["n"])), block1(p["block"])),
                    Launch("full_sum_finish", grid1(1), ("partial", "y", i32(p["blocks"])), block1(FINISH_BLOCK)),
                ],
                scratch=lambda s, p=p: {"partial": TensorSpec((p["blocks"],), "f32")},
                unsupported=unsupported(dtype, vec_ok),
            )
        if full:
            for p in product({"blocks": [528, 2112], "block": [256, 1024], "vector": [width]}):
                yield Variant(
                    "cuda-last-block",
                    "cuda",
                    {"dtype": dtype, **p},
                    _full_last_block_code(dtype, p["block"], p["vector"]),
                    lambda s, p=p: [
                        Launch(ZERO, grid1(1), ("counter",)),
                        Launch("full_sum", grid1(p["blocks"]), ("x", "y", i32(s["n"]), "partial", "counter"), block1(p["block"])),
                    ],
                    scratch=lambda s, p=p: {"partial": TensorSpec((p["blocks"],), "f32"), "counter": TensorSpec((1,), "i32")},
                    unsupported=unsupported(dtype, vec_ok),
                )
        yield from _full_triton_variants(dtype, full)


def _full_triton_variants(dtype: str, full: bool) -> Iterable[Variant]:
    warps = [4, 8] if full else [8]
    for p in product({"BLOCK": [1024, 4096, 16384], "num_warps": warps}):
        yield Variant(
            "triton-atomic-per-tile",
            "triton",
            {"dtype": dtype, **p},
            _full_triton_atomic(),
            lambda s, p=p: [
                Launch(ZERO, grid1(1), ("y",)),
                Launch(
                    "full_sum",
                    grid1(cdiv(s["n"], p["BLOCK"])),
                    ("x", "y", i32(s["n"])),
                    constexprs={"BLOCK": p["BLOCK"]},
                    num_warps=p["num_warps"],
                ),
            ],
            unsupported=unsupported(dtype),
        )
    for p in product({"BLOCK": [1024, 4096, 16384], "num_warps": warps}):
        yield Variant(
            "triton-two-pass",
            "triton",
            {"dtype": dtype, **p},
            _full_triton_two_pass(),
            lambda s, p=p: [
                Launch(
                    "full_sum_partials",
                    grid1(cdiv(s["n"], p["BLOCK"])),
                    ("x", "partial", i32(s["n"])),
                    constexprs={"BLOCK": p["BLOCK"]},
                    num_warps=p["num_warps"],
                ),
                Launch(
                    "full_sum_finish", grid1(1), ("partial", "y", i32(cdiv(s["n"], p["BLOCK"]))), constexprs={"BLOCK": 1024}, num_warps=4
                ),
            ],
            scratch=lambda s, p=p: {"partial": TensorSpec((cdiv(s["n"], p["BLOCK"]),), "f32")},
            unsupported=unsupported(dtype),
        )
    for p in product({"programs": [132, 528] if full else [528], "BLOCK": [1024, 4096], "num_warps": warps}):
        yield Variant(
            "triton-persistent",
            "triton",
            {"dtype": dtype, **p},
            _full_triton_persistent(),
            lambda s, p=p: [
                Launch(ZERO, grid1(1), ("y",)),
                Launch(
                    "full_sum",
                    grid1(min(p["programs"], cdiv(s["n"], p["BLOCK"]))),
                    ("x", "y", i32(s["n"])),
                    constexprs={"BLOCK": p["BLOCK"]},
                    num_warps=p["num_warps"],
                ),
            ],
            unsupported=unsupported(dtype),
        )


FULL_SUM = Op(
    name="full_sum",
    bound="memory",
    sizes=FULL_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],), s["dtype"], "rand")},
    outputs=lambda s: {"y": TensorSpec((1,), "f32")},
    reference=lambda torch, inputs, sizes: {"y": inputs["x"].sum(dtype=torch.float32).reshape(1)},
    reference_code="def reference(x):\n    return x.sum(dtype=torch.float32).reshape(1)\n",
    variants=_full_variants,
)

OPS = [*(_row_op(op) for op in ROW_KINDS), FULL_SUM]
