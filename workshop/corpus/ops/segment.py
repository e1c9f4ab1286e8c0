"""Segmented rows: segment_sum (a CSR-style reduction of rows by sorted segment id) and argmax_rows.

segment_sum adds the rows of x [rows, d] into out [segments, d], row r belonging to segment
r // seg_len. Inputs can only be random, and sorted ids cannot be drawn at random, so the
segments are regular: seg_len is a by-value argument (every kernel computes the id or the
segment's row range from it, as a CSR kernel would from its offsets) and the last segment
may be short. What wins depends on the segment length, so the sizes go from 2 to 1024 rows
per segment. CUDA: an atomic per element (after a ZERO launch) with and without
`__restrict__`; a thread per column that sums a run of rows in registers and flushes one
atomic whenever the id changes (run length 1 = an atomic per element); a 32x32 tile staged
in shared memory where each warp does a segmented shuffle sum and only the first lane of a
run issues the atomic (aggregate on/off); a thread per (segment, column) looping over the
segment's rows, consecutive threads on consecutive columns or on consecutive segments
(uncoalesced), with and without `__restrict__`; a block per segment with vector loads and
TY row-threads combined in shared memory. Triton: atomic_add per [BLOCK_R, BLOCK_D] tile,
and a program per (segment, column tile) looping over the segment's rows.

argmax_rows returns the index of each row's largest element (the first on ties; fp16 inputs
do tie) as int64. CUDA: a thread per row (uncoalesced) with and without `__restrict__`, a
warp per row with (value, index) shuffles, a block per row with a shuffle or shared-memory
tree reduction, all with 16-byte vector loads, and a split over column chunks with a second
launch for very long rows. Triton: rows in one tile with tl.argmax (ROWS rows per
program) and a loop over column tiles keeping a running best per lane; BLOCK, num_warps.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from workshop.corpus.ops.memkit import one_launch, pack_struct
from workshop.corpus.ops.rowkit import NEG_INF, TRITON_HEADER, at_least, at_most, divisible, next_pow2, unsupported, vector_width
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
    cuda_load_as_float,
    cuda_pointer,
    grid1,
    i32,
    product,
)

# --- segment_sum ---------------------------------------------------------------------------------

# Short segments (2-8 rows: many outputs, contention-free atomics) to long ones (512-1024: few
# outputs, a block per segment runs out of parallelism); d = 96 and seg_len = 7 leave tails.
SEGMENT_SIZES = [
    {"rows": 1000, "d": 32, "seg_len": 4},
    {"rows": 50000, "d": 96, "seg_len": 7},
    {"rows": 262144, "d": 128, "seg_len": 2},
    {"rows": 262144, "d": 128, "seg_len": 512},
    {"rows": 100000, "d": 256, "seg_len": 1024},
]


def _segments(sizes: Sizes) -> int:
    return cdiv(sizes["rows"], sizes["seg_len"])


def _segment_signature(restrict: bool = True) -> str:
    return f'extern "C" __global__ void segment_sum({cuda_pointer("float", "x", restrict)}, {cuda_pointer("float", "out", restrict, False)}, int rows, int d, int seg_len)'


def _segment_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "out", i32(sizes["rows"]), i32(sizes["d"]), i32(sizes["seg_len"]))


def _segment_atomic(restrict: bool) -> str:
    return f"""{CUDA_HEADER}
{_segment_signature(restrict)} {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * d) return;
    int row = idx / d;
    int col = idx % d;
    atomicAdd(&out[(row / seg_len) * d + col], x[idx]);
}}
"""


def _segment_runs(run: int) -> str:
    """A thread sums RUN consecutive rows of one column, one atomic per run of equal ids."""
    return f"""{CUDA_HEADER}
#define RUN {run}

{_segment_signature()} {{
    int first = (blockIdx.x * blockDim.y + threadIdx.y) * RUN;
    int col = blockIdx.y * blockDim.x + threadIdx.x;
    if (first >= rows || col >= d) return;
    int last = min(first + RUN, rows);
    int seg = first / seg_len;
    float acc = 0.0f;
    for (int row = first; row < last; ++row) {{
        int s = row / seg_len;
        if (s != seg) {{
            atomicAdd(&out[seg * d + col], acc);
            seg = s;
            acc = 0.0f;
        }}
        acc += x[row * d + col];
    }}
    atomicAdd(&out[seg * d + col], acc);
}}
"""


def _segment_warp_tile(warps: int, aggregate: bool) -> str:
    """A 32-row x 32-column tile through shared memory; a warp takes a column, lane = row.

    With aggregation, a segmented suffix sum over the lanes (ids are sorted, so a segment is
    a contiguous run of lanes) leaves each run's total in its first lane, the only one that
    issues the atomic; without it every lane adds its own element.
    """
    if aggregate:
        joins = """    // bit k: the lane 2^k below belongs to the same segment
    unsigned joins = 0;
    #pragma unroll
    for (int k = 0; k < 5; ++k) {
        int other = __shfl_down_sync(FULL, seg, 1 << k);
        if (lane + (1 << k) < 32 && other == seg) joins |= 1u << k;
    }
    bool head = __shfl_up_sync(FULL, seg, 1) != seg || lane == 0;
"""
        update = """        #pragma unroll
        for (int k = 0; k < 5; ++k) {
            float other = __shfl_down_sync(FULL, v, 1 << k);
            if ((joins >> k) & 1u) v += other;
        }
        if (head && seg >= 0 && col < d) atomicAdd(&out[seg * d + col], v);"""
    else:
        joins = ""
        update = "        if (seg >= 0 && col < d) atomicAdd(&out[seg * d + col], v);"
    return f"""{CUDA_HEADER}
#define WARPS {warps}
#define FULL 0xffffffffu

{_segment_signature()} {{
    __shared__ float tile[32][33];
    int lane = threadIdx.x, warp = threadIdx.y;
    int r0 = blockIdx.x * 32, c0 = blockIdx.y * 32;
    for (int r = warp; r < 32; r += WARPS) {{
        int row = r0 + r, col = c0 + lane;
        tile[r][lane] = (row < rows && col < d) ? x[row * d + col] : 0.0f;
    }}
    __syncthreads();
    int seg = r0 + lane < rows ? (r0 + lane) / seg_len : -1;
{joins}    for (int c = warp; c < 32; c += WARPS) {{
        int col = c0 + c;
        float v = tile[lane][c];
{update}
    }}
}}
"""


def _segment_thread(restrict: bool, column_fastest: bool) -> str:
    """A thread per (segment, column) walks the segment's rows: no atomics, no ZERO launch."""
    if column_fastest:
        coords = "    int seg = idx / d, col = idx % d;\n"
    else:
        coords = "    int col = idx / segments, seg = idx % segments;  // neighbours are seg_len rows apart\n"
    return f"""{CUDA_HEADER}
{_segment_signature(restrict)} {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int segments = (rows + seg_len - 1) / seg_len;
    if (idx >= segments * d) return;
{coords}    int end = min((seg + 1) * seg_len, rows);
    float sum = 0.0f;
    for (int row = seg * seg_len; row < end; ++row) sum += x[row * d + col];
    out[seg * d + col] = sum;
}}
"""


def _segment_block(tx: int, ty: int, vector: int) -> str:
    """Block (TX, TY) per (segment, TX*VEC columns): TY threads stride the segment's rows."""
    combine = (
        """    __shared__ float partial[TY][VEC][TX];
    #pragma unroll
    for (int k = 0; k < VEC; ++k) partial[threadIdx.y][k][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0) {
        for (int t = 1; t < TY; ++t) {
            #pragma unroll
            for (int k = 0; k < VEC; ++k) acc[k] += partial[t][k][threadIdx.x];
        }
    }
"""
        if ty > 1
        else ""
    )
    return f"""{CUDA_HEADER}
#define TX {tx}
#define TY {ty}
#define VEC {vector}
{pack_struct("f32", vector)}
{_segment_signature()} {{
    int seg = blockIdx.x;
    int c = blockIdx.y * TX + threadIdx.x;  // a Pack of VEC columns
    int begin = seg * seg_len, end = min(begin + seg_len, rows);
    float acc[VEC];
    #pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] = 0.0f;
    if (c < d / VEC) {{
        for (int row = begin + threadIdx.y; row < end; row += TY) {{
            Pack p = reinterpret_cast<const Pack*>(x + row * d)[c];
            #pragma unroll
            for (int k = 0; k < VEC; ++k) acc[k] += p.v[k];
        }}
    }}
{combine}    if (threadIdx.y == 0 && c < d / VEC) {{
        Pack p;
        #pragma unroll
        for (int k = 0; k < VEC; ++k) p.v[k] = acc[k];
        reinterpret_cast<Pack*>(out + seg * d)[c] = p;
    }}
}}
"""


SEGMENT_TRITON_ATOMIC = f"""{TRITON_HEADER}

@triton.jit
def segment_sum(x_ptr, out_ptr, rows, d, seg_len, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (r[:, None] < rows) & (c[None, :] < d)
    v = tl.load(x_ptr + r[:, None] * d + c[None, :], mask=mask, other=0.0)
    seg = r // seg_len
    tl.atomic_add(out_ptr + seg[:, None] * d + c[None, :], v, mask=mask)
"""

SEGMENT_TRITON_LOOP = f"""{TRITON_HEADER}

@triton.jit
def segment_sum(x_ptr, out_ptr, rows, d, seg_len, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    # one program per (segment, column tile): a running [BLOCK_R, BLOCK_D] tile over its rows
    seg = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    begin = seg * seg_len
    end = tl.minimum(begin + seg_len, rows)
    acc = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
    for start in range(begin, end, BLOCK_R):
        r = start + tl.arange(0, BLOCK_R)
        mask = (r[:, None] < end) & (c[None, :] < d)
        acc += tl.load(x_ptr + r[:, None] * d + c[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + seg * d + c, tl.sum(acc, axis=0), mask=c < d)
"""


def _cleared(launch: Launch) -> list[Launch]:
    """Atomics add into out, so each call clears it first."""
    return [Launch(ZERO, grid1(1), ("out",)), launch]


def segment_variants() -> Iterable[Variant]:
    for params in product({"block": [128, 512], "restrict": [True, False]}):
        block = params["block"]
        yield Variant(
            "cuda-atomic",
            "cuda",
            params,
            _segment_atomic(params["restrict"]),
            lambda s, block=block: _cleared(Launch("segment_sum", grid1(cdiv(s["rows"] * s["d"], block)), _segment_args(s), block1(block))),
        )
    for params in product({"run": [1, 4, 16, 64], "block_y": [4, 16]}):
        run, block_y = params["run"], params["block_y"]
        yield Variant(
            "cuda-atomic-runs",
            "cuda",
            params,
            _segment_runs(run),
            lambda s, run=run, block_y=block_y: _cleared(
                Launch("segment_sum", (cdiv(cdiv(s["rows"], run), block_y), cdiv(s["d"], 32), 1), _segment_args(s), (32, block_y, 1))
            ),
        )
    for params in product({"warps": [4, 8], "aggregate": [False, True]}):
        warps = params["warps"]
        yield Variant(
            "cuda-warp-tile",
            "cuda",
            params,
            _segment_warp_tile(warps, params["aggregate"]),
            lambda s, warps=warps: _cleared(
                Launch("segment_sum", (cdiv(s["rows"], 32), cdiv(s["d"], 32), 1), _segment_args(s), (32, warps, 1))
            ),
        )
    for params in product({"block": [64, 256], "column_fastest": [True, False], "restrict": [True, False]}):
        block = params["block"]
        yield Variant(
            "cuda-thread-per-column",
            "cuda",
            params,
            _segment_thread(params["restrict"], params["column_fastest"]),
            lambda s, block=block: [Launch("segment_sum", grid1(cdiv(_segments(s) * s["d"], block)), _segment_args(s), block1(block))],
        )
    for params in product({"tx": [32, 128], "ty": [1, 8], "vector": [1, 4]}):
        tx, ty, vector = params["tx"], params["ty"], params["vector"]
        yield Variant(
            "cuda-block-per-segment",
            "cuda",
            params,
            _segment_block(tx, ty, vector),
            lambda s, tx=tx, ty=ty, vector=vector: [
                Launch("segment_sum", (_segments(s), cdiv(s["d"] // vector, tx), 1), _segment_args(s), (tx, ty, 1))
            ],
            unsupported=unsupported(None, divisible("d", vector)),
        )
    for params in product({"BLOCK_R": [8, 64], "BLOCK_D": [32, 128], "num_warps": [4]}):
        yield _segment_triton_variant("triton-atomic-tile", params)
    for params in product({"BLOCK_R": [1, 8, 32], "BLOCK_D": [32, 128], "num_warps": [4]}):
        yield _segment_triton_variant("triton-segment-loop", params)


def _segment_triton_variant(family: str, params: dict[str, Any]) -> Variant:
    block_r, block_d = params["BLOCK_R"], params["BLOCK_D"]
    atomic = family == "triton-atomic-tile"

    def launches(sizes: Sizes) -> list[Launch]:
        programs = cdiv(sizes["rows"], block_r) if atomic else _segments(sizes)
        launch = Launch(
            "segment_sum",
            (programs, cdiv(sizes["d"], block_d), 1),
            _segment_args(sizes),
            constexprs={"BLOCK_R": block_r, "BLOCK_D": block_d},
            num_warps=params["num_warps"],
        )
        return _cleared(launch) if atomic else [launch]

    return Variant(family, "triton", params, SEGMENT_TRITON_ATOMIC if atomic else SEGMENT_TRITON_LOOP, launches)


def _segment_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    x = inputs["x"]
    ids = torch.arange(x.shape[0], device=x.device) // sizes["seg_len"]
    return {"out": torch.zeros((_segments(sizes), x.shape[1]), dtype=x.dtype, device=x.device).index_add_(0, ids, x)}


SEGMENT_SUM = Op(
    name="segment_sum",
    bound="memory",
    sizes=SEGMENT_SIZES,
    # Uniform [0, 1) values: sums of up to 1024 of them agree to fp32's rtol in any order.
    inputs=lambda s: {"x": TensorSpec((s["rows"], s["d"]), "f32", "rand")},
    outputs=lambda s: {"out": TensorSpec((_segments(s), s["d"]))},
    reference=_segment_reference,
    reference_code=(
        "def reference(x, seg_len):\n"
        "    ids = torch.arange(x.shape[0], device=x.device) // seg_len\n"
        "    return torch.zeros(int(ids[-1]) + 1, x.shape[1], device=x.device).index_add_(0, ids, x)\n"
    ),
    variants=segment_variants,
)

# --- argmax_rows ---------------------------------------------------------------------------------

ARGMAX_SIZES = [
    {"rows": 64, "cols": 1000, "dtype": "f32"},
    {"rows": 8192, "cols": 1024, "dtype": "f32"},
    {"rows": 262144, "cols": 64, "dtype": "f32"},
    {"rows": 256, "cols": 131072, "dtype": "f32"},
    {"rows": 16384, "cols": 4096, "dtype": "f16"},
    {"rows": 262144, "cols": 64, "dtype": "f16"},
]
SERIAL_MAX_COLS = 8192  # one thread walking a longer row alone takes too long
TILE_MAX_ELEMENTS = 16384  # rows x next_pow2(cols) in one Triton tile: registers run out beyond this

# The order that decides a tie: the larger value, then the smaller index.
KEEP_MAX = """
__device__ __forceinline__ void keep_max(float& best, int& arg, float v, int i) {
    if (v > best || (v == best && i < arg)) { best = v; arg = i; }
}
"""
WARP_ARGMAX = """
__device__ __forceinline__ void warp_argmax(float& best, int& arg) {
    #pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, best, offset);
        int i = __shfl_xor_sync(0xffffffffu, arg, offset);
        keep_max(best, arg, v, i);
    }
}
"""
NO_INDEX = "2147483647"  # loses every tie, so an all -inf row still answers its first index


def _argmax_prelude(dtype: str, vector: int, defines: dict[str, int], warp: bool = True) -> str:
    defines = {**defines, "NEG_INF": NEG_INF, "NO_INDEX": NO_INDEX}
    lines = [CUDA_HEADER] + [f"#define {name} {value}" for name, value in defines.items()]
    if vector > 1:
        lines.append(pack_struct(dtype, vector))
    return "\n".join(lines) + "\n" + KEEP_MAX + (WARP_ARGMAX if warp else "")


def _argmax_scan(dtype: str, vector: int, src: str, start: str, stride: str, end: str) -> str:
    """Statements leaving in (best, arg) the first max of src[start], src[start + stride], ... < end (element indices)."""
    if vector == 1:
        return f"""    float best = NEG_INF;
    int arg = NO_INDEX;
    for (int j = {start}; j < {end}; {"++j" if stride == "1" else f"j += {stride}"}) keep_max(best, arg, {cuda_load_as_float(dtype, f"{src}[j]")}, j);
"""
    packs = end if end.isidentifier() else f"({end})"
    return f"""    float best = NEG_INF;
    int arg = NO_INDEX;
    const Pack* packs = reinterpret_cast<const Pack*>({src});
    for (int j = {start}; j < {packs} / {vector}; j += {stride}) {{
        Pack p = packs[j];
        #pragma unroll
        for (int k = 0; k < {vector}; ++k) keep_max(best, arg, {cuda_load_as_float(dtype, "p.v[k]")}, j * {vector} + k);
    }}
"""


def _argmax_signature(dtype: str, restrict: bool = True, name: str = "argmax_rows") -> str:
    return f'extern "C" __global__ void {name}({cuda_pointer(CUDA_TYPES[dtype], "x", restrict)}, {cuda_pointer("long long", "out", restrict, False)}, int rows, int cols)'


def _argmax_thread(dtype: str, restrict: bool) -> str:
    return f"""{_argmax_prelude(dtype, 1, {}, warp=False)}
// one thread per row: neighbouring threads read addresses a row apart
{_argmax_signature(dtype, restrict)} {{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const {CUDA_TYPES[dtype]}* src = x + (size_t)row * cols;
{_argmax_scan(dtype, 1, "src", "0", "1", "cols")}    out[row] = arg;
}}
"""


def _argmax_warp(dtype: str, warps: int, vector: int, restrict: bool) -> str:
    return f"""{_argmax_prelude(dtype, vector, {"WARPS": warps})}
// one warp per row: lanes stride over the row, (value, index) shuffles combine
{_argmax_signature(dtype, restrict)} {{
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const {CUDA_TYPES[dtype]}* src = x + (size_t)row * cols;
{_argmax_scan(dtype, vector, "src", "lane", "32", "cols")}    warp_argmax(best, arg);
    if (lane == 0) out[row] = arg;
}}
"""


def _block_argmax(style: str) -> str:
    """block_argmax leaves the block's (best, arg) in thread 0."""
    if style == "shuffle":
        body = """    __shared__ float s_best[BLOCK / 32];
    __shared__ int s_arg[BLOCK / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    warp_argmax(best, arg);
    if (lane == 0) { s_best[warp] = best; s_arg[warp] = arg; }
    __syncthreads();
    if (warp == 0) {
        best = lane < BLOCK / 32 ? s_best[lane] : NEG_INF;
        arg = lane < BLOCK / 32 ? s_arg[lane] : NO_INDEX;
        warp_argmax(best, arg);
    }"""
    else:
        body = """    __shared__ float s_best[BLOCK];
    __shared__ int s_arg[BLOCK];
    s_best[threadIdx.x] = best;
    s_arg[threadIdx.x] = arg;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            keep_max(best, arg, s_best[threadIdx.x + stride], s_arg[threadIdx.x + stride]);
            s_best[threadIdx.x] = best;
            s_arg[threadIdx.x] = arg;
        }
        __syncthreads();
    }"""
    return f"""
__device__ __forceinline__ void block_argmax(float& best, int& arg) {{
{body}
}}
"""


def _argmax_block(dtype: str, block: int, vector: int, style: str) -> str:
    return f"""{_argmax_prelude(dtype, vector, {"BLOCK": block})}{_block_argmax(style)}
// one block per row
{_argmax_signature(dtype)} {{
    const {CUDA_TYPES[dtype]}* src = x + (size_t)blockIdx.x * cols;
{_argmax_scan(dtype, vector, "src", "threadIdx.x", "BLOCK", "cols")}    block_argmax(best, arg);
    if (threadIdx.x == 0) out[blockIdx.x] = arg;
}}
"""


def _argmax_split(dtype: str, vector: int, chunk: int) -> str:
    """Pass 1, grid (rows, chunks): each block's (best, arg) of its chunk; pass 2: a warp per row."""
    ctype = CUDA_TYPES[dtype]
    return f"""{_argmax_prelude(dtype, vector, {"BLOCK": 256, "CHUNK": chunk})}{_block_argmax("shuffle")}
extern "C" __global__ void argmax_partials(const {ctype}* __restrict__ x, float* __restrict__ part_best, int* __restrict__ part_arg, int rows, int cols) {{
    const {ctype}* src = x + (size_t)blockIdx.x * cols + (size_t)blockIdx.y * CHUNK;
    int len = min(CHUNK, cols - (int)blockIdx.y * CHUNK);
{_argmax_scan(dtype, vector, "src", "threadIdx.x", "BLOCK", "len")}    block_argmax(best, arg);
    if (threadIdx.x == 0) {{
        part_best[blockIdx.x * gridDim.y + blockIdx.y] = best;
        part_arg[blockIdx.x * gridDim.y + blockIdx.y] = (int)blockIdx.y * CHUNK + arg;
    }}
}}

extern "C" __global__ void argmax_finish(const float* __restrict__ part_best, const int* __restrict__ part_arg, long long* __restrict__ out, int rows, int chunks) {{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    float best = NEG_INF;
    int arg = NO_INDEX;
    for (int j = lane; j < chunks; j += 32) keep_max(best, arg, part_best[row * chunks + j], part_arg[row * chunks + j]);
    warp_argmax(best, arg);
    if (lane == 0) out[row] = arg;
}}
"""


ARGMAX_TRITON_TILE = f"""{TRITON_HEADER}

@triton.jit
def argmax_rows(x_ptr, out_ptr, rows, cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # ROWS whole rows in one tile (BLOCK = next power of two >= cols)
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    c = tl.arange(0, BLOCK)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    v = tl.load(x_ptr + r[:, None] * cols + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
    tl.store(out_ptr + r, tl.argmax(v, axis=1).to(tl.int64), mask=r < rows)
"""

ARGMAX_TRITON_LOOP = f"""{TRITON_HEADER}

@triton.jit
def argmax_rows(x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    # a running best per lane over BLOCK-wide column tiles; ties keep the earlier tile
    row = tl.program_id(0)
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    arg = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * cols + c, mask=c < cols, other=float("-inf")).to(tl.float32)
        take = v > best
        best = tl.where(take, v, best)
        arg = tl.where(take, c, arg)
    top = tl.max(best, axis=0)
    first = tl.min(tl.where(best == top, arg, cols), axis=0)
    tl.store(out_ptr + row, first.to(tl.int64))
"""


def _argmax_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "out", i32(sizes["rows"]), i32(sizes["cols"]))


# One launch of argmax_rows: _row_launch(blocks, threads) gives `blocks(sizes)` blocks of `threads`.
_row_launch = partial(one_launch, "argmax_rows", _argmax_args)


def argmax_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"  # fp16 gets a sample of each family
        width = vector_width(dtype)
        vec_ok = divisible("cols", width)
        for params in product({"dtype": [dtype], "block": [64, 256] if full else [256], "restrict": [True, False]}):
            block = params["block"]
            yield Variant(
                "cuda-thread-per-row",
                "cuda",
                params,
                _argmax_thread(dtype, params["restrict"]),
                _row_launch(lambda s, block=block: cdiv(s["rows"], block), block),
                unsupported=unsupported(dtype, at_most("cols", SERIAL_MAX_COLS, "a serial row is too slow")),
            )
        for params in product(
            {"dtype": [dtype], "warps": [1, 4, 8] if full else [4], "vector": [1, width], "restrict": [True, False] if full else [True]}
        ):
            warps = params["warps"]
            yield Variant(
                "cuda-warp-per-row",
                "cuda",
                params,
                _argmax_warp(dtype, warps, params["vector"], params["restrict"]),
                _row_launch(lambda s, warps=warps: cdiv(s["rows"], warps), 32 * warps),
                unsupported=unsupported(dtype, vec_ok),
            )
        for params in product(
            {"dtype": [dtype], "block": [128, 256, 1024] if full else [256, 1024], "vector": [1, width], "reduction": ["smem", "shuffle"]}
        ):
            yield Variant(
                "cuda-block-per-row",
                "cuda",
                params,
                _argmax_block(dtype, params["block"], params["vector"], params["reduction"]),
                _row_launch(lambda s: s["rows"], params["block"]),
                unsupported=unsupported(dtype, vec_ok),
            )
        for params in product({"dtype": [dtype], "chunk": [2048, 8192] if full else [2048], "vector": [width], "block": [256]}):
            chunk = params["chunk"]
            yield Variant(
                "cuda-split-two-pass",
                "cuda",
                params,
                _argmax_split(dtype, width, chunk),
                lambda s, chunk=chunk: [
                    Launch(
                        "argmax_partials",
                        (s["rows"], cdiv(s["cols"], chunk), 1),
                        ("x", "part_best", "part_arg", i32(s["rows"]), i32(s["cols"])),
                        block1(256),
                    ),
                    Launch(
                        "argmax_finish",
                        grid1(cdiv(s["rows"], 8)),
                        ("part_best", "part_arg", "out", i32(s["rows"]), i32(cdiv(s["cols"], chunk))),
                        block1(256),
                    ),
                ],
                scratch=lambda s, chunk=chunk: {
                    "part_best": TensorSpec((s["rows"] * cdiv(s["cols"], chunk),), "f32"),
                    "part_arg": TensorSpec((s["rows"] * cdiv(s["cols"], chunk),), "i32"),
                },
                unsupported=unsupported(dtype, vec_ok, at_least("cols", 2 * chunk, "a row shorter than two chunks")),
            )
        yield from _argmax_triton_variants(dtype, full)


def _argmax_triton_variants(dtype: str, full: bool) -> Iterable[Variant]:
    for params in product({"dtype": [dtype], "ROWS": [1, 4, 32], "num_warps": [4, 8] if full else [4]}):
        rows = params["ROWS"]
        fits = lambda s, rows=rows: None if rows * next_pow2(s["cols"]) <= TILE_MAX_ELEMENTS else f"{rows} rows do not fit one tile"
        yield Variant(
            "triton-rows-tile",
            "triton",
            params,
            ARGMAX_TRITON_TILE,
            lambda s, p=params: [
                Launch(
                    "argmax_rows",
                    grid1(cdiv(s["rows"], p["ROWS"])),
                    _argmax_args(s),
                    constexprs={"ROWS": p["ROWS"], "BLOCK": next_pow2(s["cols"])},
                    num_warps=p["num_warps"],
                )
            ],
            unsupported=unsupported(dtype, fits),
        )
    for params in product({"dtype": [dtype], "BLOCK": [256, 1024, 4096], "num_warps": [4, 8] if full else [4]}):
        yield Variant(
            "triton-looped-row",
            "triton",
            params,
            ARGMAX_TRITON_LOOP,
            lambda s, p=params: [
                Launch("argmax_rows", grid1(s["rows"]), _argmax_args(s), constexprs={"BLOCK": p["BLOCK"]}, num_warps=p["num_warps"])
            ],
            unsupported=unsupported(dtype),
        )


ARGMAX_ROWS = Op(
    name="argmax_rows",
    bound="memory",
    sizes=ARGMAX_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["rows"], s["cols"]), s["dtype"])},
    outputs=lambda s: {"out": TensorSpec((s["rows"],), "i64")},
    reference=lambda torch, inputs, sizes: {"out": inputs["x"].argmax(dim=1)},
    reference_code="def reference(x):\n    return x.argmax(dim=1)\n",
    variants=argmax_variants,
)

OPS = [SEGMENT_SUM, ARGMAX_ROWS]
