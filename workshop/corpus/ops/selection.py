"""Selection along rows: the k-th smallest value of each row, and each row's sorting permutation.

- kthvalue_rows: torch.kthvalue(x, k, dim=1).values of fp32 rows (n 256…32768; k the median
  or a small k). CUDA: the textbook bitonic sort of the row in shared memory (thread i
  compares with i ^ stride), then a pick (threads; n padded up to a power of two with +inf,
  or written for powers of two only; __syncwarp instead of __syncthreads for the steps that
  stay inside a warp); radix select on the float's order-preserving key (4- or 8-bit
  digits: 8 or 4 histogram passes with shared-memory atomics, the row re-read from global
  memory each pass or kept in shared memory; threads); every thread ranking its elements by
  counting the smaller ones (O(n²) per row, deliberately slow at large n; the row in shared
  or global memory; threads); `__restrict__` or not. Triton: tl.sort of ROWS whole rows
  (num_warps), the k-th column picked with tl.where/tl.sum; bisection on the key's 32 bits,
  each step counting the keys below the candidate in CHUNKs (32 passes over the row).
- argsort_rows: torch.argsort(x, dim=1, stable=True) (int64) of fp32 rows, n 64…4096, n a
  power of two or not. Random fp32 rows do tie (24-bit mantissas, thousands of values per
  row: the birthday bound), so the reference is the stable argsort, the one order defined
  exactly, and every kernel orders (value, column) pairs. CUDA: bitonic sort of the pairs in
  shared memory (threads; padding with (+inf, column) or powers of two only; a barrier for
  every step, or the distances below 32 exchanged by warp shuffles in registers);
  rank by counting (each thread counts the pairs before its own and writes its column at
  that rank: a block per row or a thread per element, the row in shared or global memory,
  threads); `__restrict__` or not. Triton: the value's order-preserving bits and the column
  packed into one int64 key, tl.sort (ROWS per program, num_warps); rank by counting over
  BLOCK_I × BLOCK_J tiles (num_warps) and a scattered store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.rowkit import POS_INF, TRITON_HEADER, Check, at_most, next_pow2, unsupported
from workshop.corpus.spec import (
    CUDA_HEADER,
    Launch,
    Op,
    Sizes,
    TensorSpec,
    Variant,
    around,
    block1,
    cdiv,
    cuda_pointer,
    grid1,
    i32,
    product,
)


def power_of_two(sizes: Sizes) -> str | None:
    """Check for kernels written for rows of a power-of-two length (no padding)."""
    return None if (sizes["n"] & (sizes["n"] - 1)) == 0 else "written for n a power of two"


# A tl.sort network over more elements than this per program took over two minutes to compile.
MAX_SORTED = 16384


def fits_registers(per_thread: int, rows: int, warps: int) -> Check:
    """A Triton program sorting `rows` padded rows: at most `per_thread` elements per thread, MAX_SORTED in all."""

    def reason(sizes: Sizes) -> str | None:
        elements = rows * next_pow2(sizes["n"])
        if elements > MAX_SORTED:
            return f"more than {MAX_SORTED} elements per program"
        return "too many elements per thread" if elements > per_thread * 32 * warps else None

    return reason


# Triton: fp32 bits as int32 in the floats' order (negative floats' magnitude bits flipped).
TRITON_ORDERED_BITS = "bits ^ ((bits >> 31) & 0x7FFFFFFF)"

# --- kthvalue_rows ------------------------------------------------------------------------------

KTH_SIZES = [
    {"rows": 16, "n": 256, "k": 128},
    {"rows": 8192, "n": 1000, "k": 500},
    {"rows": 4096, "n": 4096, "k": 2048},
    {"rows": 2048, "n": 8192, "k": 8},
    {"rows": 512, "n": 32768, "k": 16384},
]


def _kth_signature(restrict: bool, length: str = "n", padded: bool = False) -> str:
    extra = ", int padded" if padded else ""
    return (
        f'extern "C" __global__ void kthvalue_rows({cuda_pointer("float", "x", restrict)}, {cuda_pointer("float", "out", restrict, const=False)}, '
        f"int rows, int {length}, int k{extra})"
    )


def _kth_bitonic(threads: int, pad: bool, warp_sync: bool, restrict: bool) -> str:
    """Sort the (padded) row in shared memory with thread i exchanging with i ^ stride, then read s[k - 1].

    Thread t owns t, t + THREADS, ...: a step with stride < 32 stays inside each warp's 32
    consecutive elements, so two such steps in a row need only a __syncwarp (when warp_sync).
    """
    length = "padded" if pad else "n"
    load = f"i < n ? row[i] : {POS_INF}" if pad else "row[i]"
    if warp_sync:
        barrier = """int next = stride > 1 ? stride >> 1 : size;
            if (stride < 32 && next < 32) __syncwarp(); else __syncthreads();"""
    else:
        barrier = "__syncthreads();"
    return f"""{CUDA_HEADER}#define THREADS {threads}

{_kth_signature(restrict, padded=pad)} {{
    extern __shared__ float s[];
    const float* row = x + (long long)blockIdx.x * n;
    for (int i = threadIdx.x; i < {length}; i += THREADS) s[i] = {load};
    __syncthreads();
    for (int size = 2; size <= {length}; size <<= 1) {{
        for (int stride = size >> 1; stride > 0; stride >>= 1) {{
            for (int i = threadIdx.x; i < {length}; i += THREADS) {{
                int partner = i ^ stride;
                if (partner > i) {{
                    float a = s[i], b = s[partner];
                    bool ascending = (i & size) == 0;
                    if ((a > b) == ascending) {{
                        s[i] = b;
                        s[partner] = a;
                    }}
                }}
            }}
            {barrier}
        }}
    }}
    if (threadIdx.x == 0) out[blockIdx.x] = s[k - 1];
}}
"""


ORDERED_KEY = """
// float -> unsigned int in the same order: negative floats reversed below the positive ones
__device__ __forceinline__ unsigned int ordered_key(float v) {
    unsigned int u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_to_float(unsigned int key) {
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}
"""


def _kth_radix(threads: int, bits: int, cache: bool, restrict: bool) -> str:
    """Radix select, most significant digit first: histogram the digit of the keys that match the
    prefix chosen so far, walk the bins to the one holding the k-th key, narrow k, repeat.

    With `cache` the keys stay in shared memory; otherwise every pass re-reads the row.
    """
    if cache:
        keys = """    extern __shared__ unsigned int keys[];
    for (int i = threadIdx.x; i < n; i += THREADS) keys[i] = ordered_key(row[i]);
"""
        key = "keys[i]"
    else:
        keys, key = "", "ordered_key(row[i])"
    return f"""{CUDA_HEADER}#define THREADS {threads}
#define BITS {bits}
#define BINS (1 << BITS)
{ORDERED_KEY}
{_kth_signature(restrict)} {{
    __shared__ unsigned int hist[BINS];
    __shared__ unsigned int chosen_prefix, chosen_rank;
    const float* row = x + (long long)blockIdx.x * n;
{keys}    unsigned int prefix = 0u, mask = 0u, rank = (unsigned int)k;
    for (int shift = 32 - BITS; shift >= 0; shift -= BITS) {{
        for (int b = threadIdx.x; b < BINS; b += THREADS) hist[b] = 0u;
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += THREADS) {{
            unsigned int key = {key};
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & (BINS - 1)], 1u);
        }}
        __syncthreads();
        if (threadIdx.x == 0) {{
            unsigned int below = 0u;
            int digit = 0;
            while (below + hist[digit] < rank) below += hist[digit++];
            chosen_prefix = prefix | ((unsigned int)digit << shift);
            chosen_rank = rank - below;
        }}
        __syncthreads();
        prefix = chosen_prefix;
        rank = chosen_rank;
        mask |= (unsigned int)(BINS - 1) << shift;
    }}
    if (threadIdx.x == 0) out[blockIdx.x] = key_to_float(prefix);
}}
"""


def _kth_counting(shared: bool, restrict: bool) -> str:
    """Each thread takes elements idx, idx + blockDim.x, ... and counts the elements ordered
    before it ((value, index) order, so exactly one element has rank k - 1): O(N²) per row."""
    if shared:
        row = """    extern __shared__ float row[];
    for (int idx = threadIdx.x; idx < N; idx += blockDim.x) row[idx] = x[(long long)blockIdx.x * N + idx];
    __syncthreads();
"""
    else:
        row = "    const float* row = x + (long long)blockIdx.x * N;\n"
    return f"""{CUDA_HEADER}
{_kth_signature(restrict, length="N")} {{
{row}    for (int idx = threadIdx.x; idx < N; idx += blockDim.x) {{
        float v = row[idx];
        int smaller = 0;
        for (int j = 0; j < N; j++) {{
            float w = row[j];
            if (w < v || (w == v && j < idx)) smaller++;
        }}
        if (smaller == k - 1) out[blockIdx.x] = v;
    }}
}}
"""


KTH_TRITON_SORT = f"""{TRITON_HEADER}

@triton.jit
def kthvalue_rows(x_ptr, out_ptr, rows, n, k, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (row[:, None] < rows) & (cols[None, :] < n)
    values = tl.load(x_ptr + row[:, None].to(tl.int64) * n + cols[None, :], mask=mask, other=float("inf"))
    ordered = tl.sort(values, dim=1)
    picked = tl.sum(tl.where(cols[None, :] == k - 1, ordered, 0.0), axis=1)
    tl.store(out_ptr + row, picked, mask=row < rows)
"""

KTH_TRITON_BISECT = f"""{TRITON_HEADER}

@triton.jit
def kthvalue_rows(x_ptr, out_ptr, rows, n, k, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    # The answer's key is the largest p with fewer than k keys below p: fix its bits from the top.
    answer = tl.cast(0, tl.int64)
    step = tl.cast(2147483648, tl.int64)
    for _ in range(32):
        candidate = answer + step
        below = 0
        for start in range(0, n, CHUNK):
            mask = start + cols < n
            bits = tl.load(x_ptr + row * n + start + cols, mask=mask, other=0.0).to(tl.int32, bitcast=True)
            keys = ({TRITON_ORDERED_BITS}).to(tl.int64) + 2147483648
            below += tl.sum(((keys < candidate) & mask).to(tl.int32), axis=0)
        answer = tl.where(below < k, candidate, answer)
        step = step // 2
    bits = (answer - 2147483648).to(tl.int32)  # the same flip turns the key back into the float's bits
    tl.store(out_ptr + row, ({TRITON_ORDERED_BITS}).to(tl.float32, bitcast=True))
"""


def _kth_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "out", i32(sizes["rows"]), i32(sizes["n"]), i32(sizes["k"]))


def _kth_cuda(
    family: str, params: dict[str, Any], code: str, shared_bytes, padded: bool = False, checks: tuple[Check, ...] = ()
) -> Variant:
    """One block of params["threads"] per row; `shared_bytes(sizes)` of dynamic shared memory."""
    threads = params["threads"]

    def launches(sizes: Sizes) -> list[Launch]:
        args = _kth_args(sizes) + ((i32(next_pow2(sizes["n"])),) if padded else ())
        return [Launch("kthvalue_rows", grid1(sizes["rows"]), args, block1(threads), shared_bytes=shared_bytes(sizes))]

    return Variant(family, "cuda", params, code, launches, unsupported=unsupported(None, *checks))


def _kth_triton(family: str, params: dict[str, Any], code: str, rows: int, constexprs, check: Check | None = None) -> Variant:
    """`rows` rows per program; `constexprs(sizes)` its meta-parameters."""

    def launches(sizes: Sizes) -> list[Launch]:
        return [
            Launch(
                "kthvalue_rows",
                grid1(cdiv(sizes["rows"], rows)),
                _kth_args(sizes),
                constexprs=constexprs(sizes),
                num_warps=params["num_warps"],
            )
        ]

    return Variant(family, "triton", params, code, launches, unsupported=unsupported(None, *([check] if check else [])))


def kthvalue_variants() -> Iterable[Variant]:
    bitonic_base = {"threads": 256, "pad": True, "warp_sync": True, "restrict": True}
    bitonic_settings = [
        *product({"threads": [256, 1024], "pad": [True], "warp_sync": [False, True], "restrict": [True]}),
        *around(bitonic_base, threads=[128, 512], restrict=[False]),
        *product({"threads": [256, 1024], "pad": [False], "warp_sync": [True], "restrict": [True]}),
    ]
    for params in bitonic_settings:
        pad = params["pad"]
        code = _kth_bitonic(params["threads"], pad, params["warp_sync"], params["restrict"])
        checks = () if pad else (power_of_two,)
        yield _kth_cuda("cuda-bitonic-smem", params, code, lambda s: 4 * next_pow2(s["n"]), pad, checks)
    radix_settings = [
        *product({"threads": [256, 1024], "bits": [4, 8], "cache": [False, True], "restrict": [True]}),
        {"threads": 256, "bits": 8, "cache": False, "restrict": False},
    ]
    for params in radix_settings:
        cache = params["cache"]
        code = _kth_radix(params["threads"], params["bits"], cache, params["restrict"])
        yield _kth_cuda("cuda-radix-select", params, code, lambda s, cache=cache: 4 * s["n"] if cache else 0)
    counting_settings = [
        *product({"threads": [128, 256, 512], "source": ["shared", "global"], "restrict": [True]}),
        {"threads": 256, "source": "global", "restrict": False},
    ]
    quadratic = at_most("n", 8192, "O(n²) comparisons per row")
    for params in counting_settings:
        shared = params["source"] == "shared"
        code = _kth_counting(shared, params["restrict"])
        yield _kth_cuda("cuda-rank-count", params, code, lambda s, shared=shared: 4 * s["n"] if shared else 0, checks=(quadratic,))
    for params in product({"ROWS": [1, 2, 4], "num_warps": [2, 4, 8, 16]}):
        rows = params["ROWS"]
        variant = _kth_triton(
            "triton-sort",
            params,
            KTH_TRITON_SORT,
            rows,
            lambda s, rows=rows: {"ROWS": rows, "BLOCK_N": next_pow2(s["n"])},
            fits_registers(64, rows, params["num_warps"]),
        )
        if any(variant.unsupported(sizes) is None for sizes in KTH_SIZES):
            yield variant
    for params in product({"CHUNK": [512, 2048, 8192], "num_warps": [4, 8]}):
        chunk = params["CHUNK"]
        yield _kth_triton("triton-bisect", params, KTH_TRITON_BISECT, 1, lambda s, chunk=chunk: {"CHUNK": chunk})


KTHVALUE_ROWS = Op(
    name="kthvalue_rows",
    bound="compute",
    sizes=KTH_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["rows"], s["n"]))},
    outputs=lambda s: {"out": TensorSpec((s["rows"],))},
    reference=lambda torch, inputs, sizes: {"out": torch.kthvalue(inputs["x"], sizes["k"], dim=1).values},
    reference_code="def reference(x, k):\n    return torch.kthvalue(x, k, dim=1).values\n",
    variants=kthvalue_variants,
)

# --- argsort_rows -------------------------------------------------------------------------------

ARGSORT_SIZES = [
    {"rows": 16, "n": 64},
    {"rows": 32768, "n": 200},
    {"rows": 16384, "n": 512},
    {"rows": 8192, "n": 1000},
    {"rows": 2048, "n": 4096},
]


def _argsort_signature(restrict: bool, length: str = "n", padded: bool = False) -> str:
    extra = ", int padded" if padded else ""
    return (
        f'extern "C" __global__ void argsort_rows({cuda_pointer("float", "x", restrict)}, {cuda_pointer("long long", "out", restrict, const=False)}, '
        f"int rows, int {length}{extra})"
    )


PAIR_ORDER = """
// (value, column) pairs of a row are distinct, so this is a strict total order: ties go by column
__device__ __forceinline__ bool before(float va, int ia, float vb, int ib) {
    return va < vb || (va == vb && ia < ib);
}
"""

# One compare-exchange step at distance j of stage k: pairs strided over the block, then a barrier.
BLOCK_STEP = """
__device__ __forceinline__ void block_step(float* key, int* col, int length, int k, int j) {
    for (int p = threadIdx.x; p < (length >> 1); p += THREADS) {
        int i = ((p & ~(j - 1)) << 1) | (p & (j - 1));
        float va = key[i], vb = key[i + j];
        int ia = col[i], ib = col[i + j];
        if (before(vb, ib, va, ia) == ((i & k) == 0)) {
            key[i] = vb;
            key[i + j] = va;
            col[i] = ib;
            col[i + j] = ia;
        }
    }
    __syncthreads();
}
"""

# The steps of stage k at distances 16..1: element e lives in lane e % 32 of a warp and trades
# with lane ^ j by shuffles, in registers, one shared read and write per stage.
WARP_STEPS = """
__device__ __forceinline__ void warp_steps(float* key, int* col, int length, int k) {
    for (int e = threadIdx.x; e < length; e += THREADS) {
        float v = key[e];
        int c = col[e];
        for (int j = (k >> 1) < 16 ? (k >> 1) : 16; j > 0; j >>= 1) {
            float other_v = __shfl_xor_sync(0xffffffffu, v, j);
            int other_c = __shfl_xor_sync(0xffffffffu, c, j);
            bool keep_smaller = ((e & j) == 0) == ((e & k) == 0);
            if (before(other_v, other_c, v, c) == keep_smaller) {
                v = other_v;
                c = other_c;
            }
        }
        key[e] = v;
        col[e] = c;
    }
    __syncthreads();
}
"""


def _argsort_bitonic(threads: int, pad: bool, shuffle: bool, restrict: bool) -> str:
    """Bitonic sort of (value, column) pairs of one row in shared memory; the columns written out."""
    length = "padded" if pad else "n"
    load = f"i < n ? src[i] : {POS_INF}" if pad else "src[i]"
    if shuffle:
        stage = f"""        int j = k >> 1;
        for (; j >= 32; j >>= 1) block_step(key, col, {length}, k, j);
        warp_steps(key, col, {length}, k);"""
    else:
        stage = f"        for (int j = k >> 1; j > 0; j >>= 1) block_step(key, col, {length}, k, j);"
    return f"""{CUDA_HEADER}#define THREADS {threads}
{PAIR_ORDER}{BLOCK_STEP}{WARP_STEPS if shuffle else ""}
{_argsort_signature(restrict, padded=pad)} {{
    extern __shared__ float key[];
    int* col = (int*)(key + {length});
    const float* src = x + (long long)blockIdx.x * n;
    for (int i = threadIdx.x; i < {length}; i += THREADS) {{
        key[i] = {load};
        col[i] = i;
    }}
    __syncthreads();
    for (int k = 2; k <= {length}; k <<= 1) {{
{stage}
    }}
    for (int i = threadIdx.x; i < n; i += THREADS) out[(long long)blockIdx.x * n + i] = col[i];
}}
"""


def _argsort_counting(shared: bool, per_element: bool, restrict: bool) -> str:
    """out[row][rank of x[row][col]] = col, the rank counted over the row: O(N²) per row.

    A block per row (its threads stride over the columns) or a thread per element (grid y is the row).
    """
    if per_element:
        head = "    long long row = blockIdx.y;\n    int col = blockIdx.x * blockDim.x + threadIdx.x;\n"
        loop, close = "    if (col < N) {", "    }"
    else:
        head = "    long long row = blockIdx.x;\n"
        loop, close = "    for (int col = threadIdx.x; col < N; col += blockDim.x) {", "    }"
    if shared:
        vals = """    extern __shared__ float vals[];
    for (int j = threadIdx.x; j < N; j += blockDim.x) vals[j] = x[row * N + j];
    __syncthreads();
"""
    else:
        vals = "    const float* vals = x + row * N;\n"
    return f"""{CUDA_HEADER}
{_argsort_signature(restrict, length="N")} {{
{head}{vals}{loop}
        float v = vals[col];
        int rank = 0;
        for (int j = 0; j < N; j++) rank += vals[j] < v || (vals[j] == v && j < col);
        out[row * N + rank] = col;
{close}
}}
"""


ARGSORT_TRITON_PACKED = f"""{TRITON_HEADER}

@triton.jit
def argsort_rows(x_ptr, out_ptr, rows, n, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (row[:, None] < rows) & (cols[None, :] < n)
    offsets = row[:, None].to(tl.int64) * n + cols[None, :]
    values = tl.load(x_ptr + offsets, mask=mask, other=float("inf"))
    bits = tl.where(values == 0.0, 0.0, values).to(tl.int32, bitcast=True)  # -0.0 ties with 0.0, as in torch
    # high half: the value's bits as int32 in the floats' order; low half: the column (ties by column)
    keys = (({TRITON_ORDERED_BITS}).to(tl.int64) << 32) | cols[None, :]
    ranked = tl.sort(keys, dim=1)
    tl.store(out_ptr + offsets, ranked & 0xFFFFFFFF, mask=mask)
"""

ARGSORT_TRITON_COUNTING = f"""{TRITON_HEADER}

@triton.jit
def argsort_rows(x_ptr, out_ptr, rows, n, BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr):
    row = tl.program_id(1).to(tl.int64)
    i = tl.program_id(0) * BLOCK_I + tl.arange(0, BLOCK_I)
    xi = tl.load(x_ptr + row * n + i, mask=i < n)
    rank = tl.zeros([BLOCK_I], dtype=tl.int32)
    for start in range(0, n, BLOCK_J):
        j = start + tl.arange(0, BLOCK_J)
        xj = tl.load(x_ptr + row * n + j, mask=j < n)
        before = (xj[None, :] < xi[:, None]) | ((xj[None, :] == xi[:, None]) & (j[None, :] < i[:, None]))
        rank += tl.sum((before & (j[None, :] < n)).to(tl.int32), axis=1)
    tl.store(out_ptr + row * n + rank, i.to(tl.int64), mask=i < n)
"""


def _argsort_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "out", i32(sizes["rows"]), i32(sizes["n"]))


def _argsort_bitonic_variant(params: dict[str, Any]) -> Variant:
    threads, pad = params["threads"], params["pad"]

    def launches(sizes: Sizes) -> list[Launch]:
        length = next_pow2(sizes["n"])
        args = _argsort_args(sizes) + ((i32(length),) if pad else ())
        return [Launch("argsort_rows", grid1(sizes["rows"]), args, block1(threads), shared_bytes=8 * length)]

    code = _argsort_bitonic(threads, pad, params["sync"] == "shuffle", params["restrict"])
    return Variant("cuda-bitonic-pairs", "cuda", params, code, launches, unsupported=unsupported(None, *(() if pad else (power_of_two,))))


def _argsort_counting_variant(params: dict[str, Any]) -> Variant:
    threads, shared, per_element = params["threads"], params["source"] == "shared", params["layout"] == "thread-per-element"

    def launches(sizes: Sizes) -> list[Launch]:
        grid = (cdiv(sizes["n"], threads), sizes["rows"], 1) if per_element else grid1(sizes["rows"])
        return [Launch("argsort_rows", grid, _argsort_args(sizes), block1(threads), shared_bytes=4 * sizes["n"] if shared else 0)]

    return Variant("cuda-rank-count", "cuda", params, _argsort_counting(shared, per_element, params["restrict"]), launches)


def _argsort_triton_variant(family: str, params: dict[str, Any], code: str, grid, constexprs, check: Check | None = None) -> Variant:
    def launches(sizes: Sizes) -> list[Launch]:
        return [Launch("argsort_rows", grid(sizes), _argsort_args(sizes), constexprs=constexprs(sizes), num_warps=params["num_warps"])]

    return Variant(family, "triton", params, code, launches, unsupported=unsupported(None, *([check] if check else [])))


def argsort_variants() -> Iterable[Variant]:
    bitonic_settings = [
        *product({"threads": [128, 256, 512, 1024], "pad": [True], "sync": ["block", "shuffle"], "restrict": [True]}),
        *product({"threads": [256], "pad": [False], "sync": ["block", "shuffle"], "restrict": [True]}),
        {"threads": 256, "pad": True, "sync": "shuffle", "restrict": False},
    ]
    for params in bitonic_settings:
        yield _argsort_bitonic_variant(params)
    counting_settings = [
        *product(
            {"threads": [128, 512], "source": ["shared", "global"], "layout": ["block-per-row", "thread-per-element"], "restrict": [True]}
        ),
        *product({"threads": [128], "source": ["global"], "layout": ["block-per-row", "thread-per-element"], "restrict": [False]}),
    ]
    for params in counting_settings:
        yield _argsort_counting_variant(params)
    for params in product({"ROWS": [1, 2, 4, 8], "num_warps": [2, 4, 8]}):
        rows = params["ROWS"]
        variant = _argsort_triton_variant(
            "triton-packed-sort",
            params,
            ARGSORT_TRITON_PACKED,
            lambda s, rows=rows: grid1(cdiv(s["rows"], rows)),
            lambda s, rows=rows: {"ROWS": rows, "BLOCK_N": next_pow2(s["n"])},
            fits_registers(32, rows, params["num_warps"]),
        )
        if any(variant.unsupported(sizes) is None for sizes in ARGSORT_SIZES):
            yield variant
    counting_triton = [
        *product({"BLOCK_I": [32, 64, 128], "BLOCK_J": [32, 128], "num_warps": [4]}),
        *around({"BLOCK_I": 64, "BLOCK_J": 128, "num_warps": 4}, num_warps=[2, 8])[1:],
    ]
    for params in counting_triton:
        block_i, block_j = params["BLOCK_I"], params["BLOCK_J"]
        yield _argsort_triton_variant(
            "triton-rank-count",
            params,
            ARGSORT_TRITON_COUNTING,
            lambda s, block_i=block_i: (cdiv(s["n"], block_i), s["rows"], 1),
            lambda s, block_i=block_i, block_j=block_j: {"BLOCK_I": block_i, "BLOCK_J": block_j},
        )


ARGSORT_ROWS = Op(
    name="argsort_rows",
    bound="compute",
    sizes=ARGSORT_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["rows"], s["n"]))},
    outputs=lambda s: {"out": TensorSpec((s["rows"], s["n"]), "i64")},
    reference=lambda torch, inputs, sizes: {"out": torch.argsort(inputs["x"], dim=1, stable=True)},
    reference_code="def reference(x):\n    return torch.argsort(x, dim=1, stable=True)\n",
    variants=argsort_variants,
)

OPS = [KTHVALUE_ROWS, ARGSORT_ROWS]
