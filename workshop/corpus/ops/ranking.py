"""Ranking inside rows: each row's lower median, and key-value pairs sorted by key.

- median_rows: torch.median(x, dim=1).values (the lower median, the ((n - 1) // 2)-th
  smallest) of fp32 rows, n 64…16383, odd and even. CUDA: bitonic sort of the row padded to
  a power of two with +inf in shared memory, then a pick (threads; pairing: every thread
  takes an element and half of them idle on `partner > i`, or every thread takes a pair;
  padded or written for powers of two; `__restrict__` or not); quickselect by one warp per
  row, ballot-compacting the elements below and above a pivot into a second shared buffer
  (warps per block; pivot: the middle element or the median of three); bisection on the
  float's order-preserving 32-bit key, each of 32 rounds counting the keys <= mid with a
  block reduction (threads; the row re-read from global memory every round or kept in
  shared memory; shuffle or shared-memory tree reduction); every thread ranking its
  elements by counting (O(n²), deliberately slow; the row in shared or global memory).
  Triton: tl.sort of ROWS rows, the middle column picked with tl.where/tl.sum (num_warps);
  bisection with tl.sum counts over whole rows held in registers (ROWS, num_warps) or over
  CHUNKs re-read each round (num_warps, num_stages).
- sort_pairs: keys (rows, n) fp32 sorted ascending per row with int32 or fp32 values carried
  along. Random fp32 keys do tie (the birthday bound over thousands per row), so equal keys
  are ordered by value: the output is the (key, value) pairs in lexicographic order, unique.
  CUDA: bitonic sort of the pairs in shared memory (threads; padding with +inf or powers of
  two only; a barrier for every step, or the distances below 32 exchanged by warp shuffles;
  `__restrict__` or not); odd-even transposition sort (n phases with a barrier each,
  deliberately slow; threads); a warp per row holding E pairs per lane in registers, no
  shared memory (E; layout: each lane's E consecutive elements, or element a·32 + lane so
  loads coalesce; warps per block). Triton: key bits and value packed into one int64 and
  tl.sort-ed (ROWS, num_warps); tl.sort of the keys alone, then a second kernel ranking each
  element by binary search in the sorted keys and scattering its value (BLOCK_I, num_warps).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import MAX_SHARED_BYTES
from workshop.corpus.ops.rowkit import POS_INF, TRITON_HEADER, Check, at_most, cuda_reductions, next_pow2, unsupported
from workshop.corpus.ops.selection import ORDERED_KEY, TRITON_ORDERED_BITS, fits_registers, power_of_two
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
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

FULL = "0xffffffffu"


def _shared_fits(bytes_per_element: int, rows_per_block: int = 1) -> Check:
    """Rows of n elements, `rows_per_block` of them per block, all in shared memory at once."""

    def reason(sizes: Sizes) -> str | None:
        return "rows exceed shared memory" if bytes_per_element * sizes["n"] * rows_per_block > MAX_SHARED_BYTES else None

    return reason


# --- median_rows --------------------------------------------------------------------------------

MEDIAN_SIZES = [
    {"rows": 4096, "n": 64},
    {"rows": 16384, "n": 255},
    {"rows": 8192, "n": 1000},
    {"rows": 8192, "n": 2048},
    {"rows": 2048, "n": 16383},
]


def _median_signature(restrict: bool, length: str = "n", padded: bool = False) -> str:
    extra = ", int padded" if padded else ""
    return (
        f'extern "C" __global__ void median_rows({cuda_pointer("float", "x", restrict)}, {cuda_pointer("float", "out", restrict, const=False)}, '
        f"int rows, int {length}{extra})"
    )


def _median_bitonic(threads: int, pairing: str, pad: bool, restrict: bool) -> str:
    """Bitonic sort of the row in shared memory, a barrier per step, then s[(n - 1) / 2].

    "xor-partner": thread i handles element i and its partner i ^ stride only when the partner
    is above it, so half the loop's iterations do nothing; "half-pairs": iteration p handles
    the p-th compare-exchange pair, every iteration works.
    """
    length = "padded" if pad else "n"
    load = f"i < n ? row[i] : {POS_INF}" if pad else "row[i]"
    if pairing == "xor-partner":
        step = f"""            for (int i = threadIdx.x; i < {length}; i += THREADS) {{
                int partner = i ^ stride;
                if (partner > i) {{
                    float a = s[i], b = s[partner];
                    if ((a > b) == ((i & size) == 0)) {{
                        s[i] = b;
                        s[partner] = a;
                    }}
                }}
            }}"""
    else:
        step = f"""            for (int p = threadIdx.x; p < ({length} >> 1); p += THREADS) {{
                int i = ((p & ~(stride - 1)) << 1) | (p & (stride - 1));
                float a = s[i], b = s[i + stride];
                if ((a > b) == ((i & size) == 0)) {{
                    s[i] = b;
                    s[i + stride] = a;
                }}
            }}"""
    return f"""{CUDA_HEADER}#define THREADS {threads}

{_median_signature(restrict, padded=pad)} {{
    extern __shared__ float s[];
    const float* row = x + (long long)blockIdx.x * n;
    for (int i = threadIdx.x; i < {length}; i += THREADS) s[i] = {load};
    __syncthreads();
    for (int size = 2; size <= {length}; size <<= 1) {{
        for (int stride = size >> 1; stride > 0; stride >>= 1) {{
{step}
            __syncthreads();
        }}
    }}
    if (threadIdx.x == 0) out[blockIdx.x] = s[(n - 1) / 2];
}}
"""


PIVOTS = {
    "middle": "src[length >> 1]",
    "median3": "fmaxf(fminf(src[0], src[length >> 1]), fminf(fmaxf(src[0], src[length >> 1]), src[length - 1]))",
}


def _median_quickselect(warps: int, pivot: str, restrict: bool) -> str:
    """One warp per row: partition the live range around a pivot into the other buffer (smaller
    elements at its front, larger at its back, places found by ballot + popc), keep the side
    holding rank k. Every round drops at least the pivot, so the loop ends."""
    return f"""{CUDA_HEADER}#define WARPS {warps}

{_median_signature(restrict)} {{
    extern __shared__ float buffers[];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int r = blockIdx.x * WARPS + warp;
    if (r >= rows) return;
    float* src = buffers + (long long)warp * 2 * n;
    float* src_base = src;
    float* dst = src + n;
    const float* row = x + (long long)r * n;
    for (int i = lane; i < n; i += 32) src[i] = row[i];
    __syncwarp();
    unsigned int lanes_below = (1u << lane) - 1u;
    int length = n, k = (n - 1) / 2;
    while (true) {{
        float pivot = {PIVOTS[pivot]};
        int less = 0, greater = 0;
        for (int base = 0; base < length; base += 32) {{
            float v = base + lane < length ? src[base + lane] : pivot;
            unsigned int lt = __ballot_sync({FULL}, v < pivot);
            unsigned int gt = __ballot_sync({FULL}, v > pivot);
            if (v < pivot) dst[less + __popc(lt & lanes_below)] = v;
            if (v > pivot) dst[length - 1 - greater - __popc(gt & lanes_below)] = v;
            less += __popc(lt);
            greater += __popc(gt);
        }}
        __syncwarp();
        if (k < less) {{
            length = less;
            src = dst;
        }} else if (k >= length - greater) {{
            k -= length - greater;
            src = dst + (length - greater);
            length = greater;
        }} else {{
            if (lane == 0) out[r] = pivot;
            return;
        }}
        float* next_dst = src_base;
        src_base = dst;
        dst = next_dst;
    }}
}}
"""


def _median_bisect(threads: int, cache: bool, reduce: str, restrict: bool) -> str:
    """Bisection on the order-preserving key: the median's key is the smallest `mid` with more
    than (n - 1) / 2 keys <= mid; 32 rounds of a count and a block reduction.

    With `cache` the keys stay in shared memory; otherwise every round re-reads the row.
    """
    if cache:
        keys = """    extern __shared__ unsigned int keys[];
    for (int i = threadIdx.x; i < n; i += THREADS) keys[i] = ordered_key(row[i]);
    __syncthreads();
"""
        key = "keys[i]"
    else:
        keys, key = "", "ordered_key(row[i])"
    return f"""{CUDA_HEADER}#define THREADS {threads}
#define BLOCK THREADS
{ORDERED_KEY}{cuda_reductions(("sum",), reduce)}
{_median_signature(restrict)} {{
    const float* row = x + (long long)blockIdx.x * n;
{keys}    float needed = (float)((n - 1) / 2 + 1);
    unsigned int lo = 0u, hi = 0xffffffffu;
    while (lo < hi) {{
        unsigned int mid = lo + ((hi - lo) >> 1);
        int count = 0;
        for (int i = threadIdx.x; i < n; i += THREADS) count += {key} <= mid;
        if (block_sum((float)count) >= needed) hi = mid;
        else lo = mid + 1;
    }}
    if (threadIdx.x == 0) out[blockIdx.x] = key_to_float(lo);
}}
"""


def _median_counting(shared: bool, restrict: bool) -> str:
    """Each thread counts, for its elements, the elements ordered before them ((value, index)
    order, so exactly one element has rank (N - 1) / 2): O(N²) per row."""
    if shared:
        row = """    extern __shared__ float row[];
    for (int idx = threadIdx.x; idx < N; idx += blockDim.x) row[idx] = x[blockIdx.x * N + idx];
    __syncthreads();
"""
    else:
        row = "    const float* row = x + blockIdx.x * N;\n"
    return f"""{CUDA_HEADER}
{_median_signature(restrict, length="N")} {{
{row}    for (int idx = threadIdx.x; idx < N; idx += blockDim.x) {{
        float v = row[idx];
        int smaller = 0;
        for (int j = 0; j < N; j++) smaller += row[j] < v || (row[j] == v && j < idx);
        if (smaller == (N - 1) / 2) out[blockIdx.x] = v;
    }}
}}
"""


MEDIAN_TRITON_SORT = f"""{TRITON_HEADER}

@triton.jit
def median_rows(x_ptr, out_ptr, rows, n, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (row[:, None] < rows) & (cols[None, :] < n)
    values = tl.load(x_ptr + row[:, None].to(tl.int64) * n + cols[None, :], mask=mask, other=float("inf"))
    ordered = tl.sort(values, dim=1)
    median = tl.sum(tl.where(cols[None, :] == (n - 1) // 2, ordered, 0.0), axis=1)
    tl.store(out_ptr + row, median, mask=row < rows)
"""

# Triton bisection: keys are the fp32 bits in the floats' order, shifted into [0, 2^32); the
# median's key is the smallest `mid` with more than (n - 1) // 2 keys <= mid (32 halvings).
TRITON_KEYS = f"({TRITON_ORDERED_BITS}).to(tl.int64) + 2147483648"
TRITON_KEY_TO_FLOAT = f"""    bits = (lo - 2147483648).to(tl.int32)  # the same flip turns the key back into the float's bits
    median = ({TRITON_ORDERED_BITS}).to(tl.float32, bitcast=True)"""

MEDIAN_TRITON_BISECT_ROWS = f"""{TRITON_HEADER}

@triton.jit
def median_rows(x_ptr, out_ptr, rows, n, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (row[:, None] < rows) & (cols[None, :] < n)
    bits = tl.load(x_ptr + row[:, None].to(tl.int64) * n + cols[None, :], mask=mask, other=0.0).to(tl.int32, bitcast=True)
    keys = tl.where(mask, {TRITON_KEYS}, 4294967296)  # padding above every key: never counted
    needed = (n - 1) // 2 + 1
    lo = tl.zeros([ROWS], dtype=tl.int64)
    hi = tl.zeros([ROWS], dtype=tl.int64) + 4294967295
    for _ in range(32):
        mid = (lo + hi) // 2
        enough = tl.sum((keys <= mid[:, None]).to(tl.int32), axis=1) >= needed
        hi = tl.where(enough, mid, hi)
        lo = tl.where(enough, lo, mid + 1)
{TRITON_KEY_TO_FLOAT}
    tl.store(out_ptr + row, median, mask=row < rows)
"""

MEDIAN_TRITON_BISECT_CHUNKS = f"""{TRITON_HEADER}

@triton.jit
def median_rows(x_ptr, out_ptr, rows, n, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    needed = (n - 1) // 2 + 1
    lo = tl.cast(0, tl.int64)
    hi = tl.cast(4294967295, tl.int64)
    for _ in range(32):
        mid = (lo + hi) // 2
        count = 0
        for start in range(0, n, CHUNK):
            mask = start + cols < n
            bits = tl.load(x_ptr + row * n + start + cols, mask=mask, other=0.0).to(tl.int32, bitcast=True)
            count += tl.sum(((({TRITON_KEYS}) <= mid) & mask).to(tl.int32), axis=0)
        hi = tl.where(count >= needed, mid, hi)
        lo = tl.where(count >= needed, lo, mid + 1)
{TRITON_KEY_TO_FLOAT}
    tl.store(out_ptr + row, median)
"""


def _median_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "out", i32(sizes["rows"]), i32(sizes["n"]))


def _median_cuda(
    family: str,
    params: dict[str, Any],
    code: str,
    shared_bytes,
    rows_per_block: int = 1,
    padded: bool = False,
    checks: tuple[Check, ...] = (),
) -> Variant:
    """Blocks of params["threads"] (or 32 per warp) over `rows_per_block` rows; `shared_bytes(sizes)` dynamic shared memory."""
    threads = params.get("threads") or 32 * params["warps"]

    def launches(sizes: Sizes) -> list[Launch]:
        args = _median_args(sizes) + ((i32(next_pow2(sizes["n"])),) if padded else ())
        return [Launch("median_rows", grid1(cdiv(sizes["rows"], rows_per_block)), args, block1(threads), shared_bytes=shared_bytes(sizes))]

    return Variant(family, "cuda", params, code, launches, unsupported=unsupported(None, *checks))


def _median_triton(family: str, params: dict[str, Any], code: str, rows: int, constexprs, check: Check | None = None) -> Variant:
    """`rows` rows per program; `constexprs(sizes)` its meta-parameters."""

    def launches(sizes: Sizes) -> list[Launch]:
        return [
            Launch(
                "median_rows",
                grid1(cdiv(sizes["rows"], rows)),
                _median_args(sizes),
                constexprs=constexprs(sizes),
                num_warps=params["num_warps"],
                num_stages=params.get("num_stages"),
            )
        ]

    return Variant(family, "triton", params, code, launches, unsupported=unsupported(None, *([check] if check else [])))


def _runs_somewhere(variants: Iterable[Variant], sizes: list[dict[str, Any]]) -> Iterable[Variant]:
    """Drop the variants every size rules out (e.g. a tl.sort too big for each row length)."""
    return (variant for variant in variants if any(variant.unsupported(s) is None for s in sizes))


def median_variants() -> Iterable[Variant]:
    bitonic_base = {"threads": 256, "pairing": "half-pairs", "pad": True, "restrict": True}
    bitonic_settings = [
        *product({"threads": [256, 1024], "pairing": ["xor-partner", "half-pairs"], "pad": [True], "restrict": [True]}),
        *around(bitonic_base, threads=[128, 512], pad=[False], restrict=[False])[1:],
    ]
    for params in bitonic_settings:
        pad = params["pad"]
        code = _median_bitonic(params["threads"], params["pairing"], pad, params["restrict"])
        yield _median_cuda(
            "cuda-bitonic-smem", params, code, lambda s: 4 * next_pow2(s["n"]), padded=pad, checks=() if pad else (power_of_two,)
        )
    quick_settings = [
        *product({"warps": [1, 4], "pivot": ["middle", "median3"], "restrict": [True]}),
        *around({"warps": 4, "pivot": "middle", "restrict": True}, warps=[2, 8], restrict=[False])[1:],
    ]
    for params in quick_settings:
        warps = params["warps"]
        code = _median_quickselect(warps, params["pivot"], params["restrict"])
        yield _median_cuda(
            "cuda-warp-quickselect",
            params,
            code,
            lambda s, warps=warps: 8 * warps * s["n"],
            rows_per_block=warps,
            checks=(_shared_fits(8, warps),),
        )
    bisect_base = {"threads": 256, "source": "shared", "reduce": "shuffle", "restrict": True}
    bisect_settings = [
        *product({"threads": [256, 1024], "source": ["global", "shared"], "reduce": ["shuffle"], "restrict": [True]}),
        *around(bisect_base, threads=[128, 512], reduce=["smem"], restrict=[False])[1:],
    ]
    for params in bisect_settings:
        cache = params["source"] == "shared"
        code = _median_bisect(params["threads"], cache, params["reduce"], params["restrict"])
        yield _median_cuda("cuda-bisect", params, code, lambda s, cache=cache: 4 * s["n"] if cache else 0)
    quadratic = at_most("n", 2048, "O(n²) comparisons per row")
    counting_settings = [
        *product({"threads": [128, 512], "source": ["shared", "global"], "restrict": [True]}),
        {"threads": 128, "source": "global", "restrict": False},
    ]
    for params in counting_settings:
        shared = params["source"] == "shared"
        code = _median_counting(shared, params["restrict"])
        yield _median_cuda("cuda-rank-count", params, code, lambda s, shared=shared: 4 * s["n"] if shared else 0, checks=(quadratic,))
    sorts = []
    for params in product({"ROWS": [1, 4], "num_warps": [4, 8, 16]}):
        rows = params["ROWS"]
        sorts.append(
            _median_triton(
                "triton-sort",
                params,
                MEDIAN_TRITON_SORT,
                rows,
                lambda s, rows=rows: {"ROWS": rows, "BLOCK_N": next_pow2(s["n"])},
                fits_registers(64, rows, params["num_warps"]),
            )
        )
    yield from _runs_somewhere(sorts, MEDIAN_SIZES)
    for params in product({"ROWS": [1, 4], "num_warps": [4, 8]}):
        rows = params["ROWS"]
        yield _median_triton(
            "triton-bisect-rows",
            params,
            MEDIAN_TRITON_BISECT_ROWS,
            rows,
            lambda s, rows=rows: {"ROWS": rows, "BLOCK_N": next_pow2(s["n"])},
            fits_registers(64, rows, params["num_warps"]),
        )
    chunk_settings = [
        *product({"CHUNK": [1024, 4096], "num_warps": [4, 8], "num_stages": [2]}),
        *around({"CHUNK": 1024, "num_warps": 4, "num_stages": 2}, num_stages=[1, 4])[1:],
    ]
    for params in chunk_settings:
        chunk = params["CHUNK"]
        yield _median_triton("triton-bisect-chunks", params, MEDIAN_TRITON_BISECT_CHUNKS, 1, lambda s, chunk=chunk: {"CHUNK": chunk})


MEDIAN_ROWS = Op(
    name="median_rows",
    bound="compute",
    sizes=MEDIAN_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["rows"], s["n"]))},
    outputs=lambda s: {"out": TensorSpec((s["rows"],))},
    reference=lambda torch, inputs, sizes: {"out": torch.median(inputs["x"], dim=1).values},
    reference_code="def reference(x):\n    return torch.median(x, dim=1).values\n",
    variants=median_variants,
)

# --- sort_pairs ---------------------------------------------------------------------------------

# "dtype" is the values' type; keys are fp32 in [0, 1).
PAIRS_SIZES = [
    {"rows": 64, "n": 64, "dtype": "i32"},
    {"rows": 32768, "n": 100, "dtype": "i32"},
    {"rows": 16384, "n": 512, "dtype": "i32"},
    {"rows": 4096, "n": 2048, "dtype": "i32"},
    {"rows": 64, "n": 64, "dtype": "f32"},
    {"rows": 8192, "n": 1000, "dtype": "f32"},
    {"rows": 16384, "n": 512, "dtype": "f32"},
    {"rows": 4096, "n": 2048, "dtype": "f32"},
]
VALUE_INIT = {"i32": "randint:0:1000000", "f32": "rand"}
# A padding pair orders after every real pair.
PAD_VALUE = {"i32": "0x7fffffff", "f32": POS_INF}


def _pairs_signature(dtype: str, restrict: bool = True, padded: bool = False) -> str:
    value = CUDA_TYPES[dtype]
    extra = ", int padded" if padded else ""
    return (
        f'extern "C" __global__ void sort_pairs({cuda_pointer("float", "keys", restrict)}, {cuda_pointer(value, "values", restrict)}, '
        f"{cuda_pointer('float', 'keys_out', restrict, const=False)}, {cuda_pointer(value, 'values_out', restrict, const=False)}, int rows, int n{extra})"
    )


def _pair_order(dtype: str) -> str:
    """`before`: the strict (key, value) order; equal pairs are interchangeable."""
    value = CUDA_TYPES[dtype]
    return f"""
typedef {value} value_t;

__device__ __forceinline__ bool before(float ka, value_t va, float kb, value_t vb) {{
    return ka < kb || (ka == kb && va < vb);
}}
"""


# One compare-exchange step at distance j of stage k: pairs strided over the block, then a barrier.
PAIRS_BLOCK_STEP = """
__device__ __forceinline__ void block_step(float* key, value_t* val, int length, int k, int j) {
    for (int p = threadIdx.x; p < (length >> 1); p += THREADS) {
        int i = ((p & ~(j - 1)) << 1) | (p & (j - 1));
        float ka = key[i], kb = key[i + j];
        value_t va = val[i], vb = val[i + j];
        if (before(kb, vb, ka, va) == ((i & k) == 0)) {
            key[i] = kb;
            key[i + j] = ka;
            val[i] = vb;
            val[i + j] = va;
        }
    }
    __syncthreads();
}
"""

# The steps of stage k at distances 16..1: element e sits in lane e % 32 and trades with
# lane ^ j by shuffles, in registers; one shared read and write per stage (length >= 64).
PAIRS_WARP_STEPS = f"""
__device__ __forceinline__ void warp_steps(float* key, value_t* val, int length, int k) {{
    for (int e = threadIdx.x; e < length; e += THREADS) {{
        float kv = key[e];
        value_t vv = val[e];
        for (int j = (k >> 1) < 16 ? (k >> 1) : 16; j > 0; j >>= 1) {{
            float other_k = __shfl_xor_sync({FULL}, kv, j);
            value_t other_v = __shfl_xor_sync({FULL}, vv, j);
            bool keep_smaller = ((e & j) == 0) == ((e & k) == 0);
            if (before(other_k, other_v, kv, vv) == keep_smaller) {{
                kv = other_k;
                vv = other_v;
            }}
        }}
        key[e] = kv;
        val[e] = vv;
    }}
    __syncthreads();
}}
"""


def _pairs_bitonic(dtype: str, threads: int, pad: bool, shuffle: bool, restrict: bool) -> str:
    """Bitonic sort of one row's (key, value) pairs in shared memory: keys, then values."""
    length = "padded" if pad else "n"
    key_load = f"i < n ? keys[offset + i] : {POS_INF}" if pad else "keys[offset + i]"
    value_load = f"i < n ? values[offset + i] : {PAD_VALUE[dtype]}" if pad else "values[offset + i]"
    if shuffle:
        stage = f"""        int j = k >> 1;
        for (; j >= 32; j >>= 1) block_step(key, val, {length}, k, j);
        warp_steps(key, val, {length}, k);"""
    else:
        stage = f"        for (int j = k >> 1; j > 0; j >>= 1) block_step(key, val, {length}, k, j);"
    return f"""{CUDA_HEADER}#define THREADS {threads}
{_pair_order(dtype)}{PAIRS_BLOCK_STEP}{PAIRS_WARP_STEPS if shuffle else ""}
{_pairs_signature(dtype, restrict, pad)} {{
    extern __shared__ float key[];
    value_t* val = (value_t*)(key + {length});
    long long offset = (long long)blockIdx.x * n;
    for (int i = threadIdx.x; i < {length}; i += THREADS) {{
        key[i] = {key_load};
        val[i] = {value_load};
    }}
    __syncthreads();
    for (int k = 2; k <= {length}; k <<= 1) {{
{stage}
    }}
    for (int i = threadIdx.x; i < n; i += THREADS) {{
        keys_out[offset + i] = key[i];
        values_out[offset + i] = val[i];
    }}
}}
"""


def _pairs_odd_even(dtype: str) -> str:
    """Odd-even transposition sort: n phases, each comparing the neighbours (i, i + 1) for i of
    the phase's parity, a barrier between phases. O(n²) work, the textbook parallel sort."""
    return f"""{CUDA_HEADER}{_pair_order(dtype)}
{_pairs_signature(dtype)} {{
    extern __shared__ float key[];
    value_t* val = (value_t*)(key + n);
    int row = blockIdx.x;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {{
        key[i] = keys[row * n + i];
        val[i] = values[row * n + i];
    }}
    __syncthreads();
    for (int phase = 0; phase < n; phase++) {{
        for (int i = 2 * threadIdx.x + (phase & 1); i + 1 < n; i += 2 * blockDim.x) {{
            if (before(key[i + 1], val[i + 1], key[i], val[i])) {{
                float tk = key[i];
                key[i] = key[i + 1];
                key[i + 1] = tk;
                value_t tv = val[i];
                val[i] = val[i + 1];
                val[i + 1] = tv;
            }}
        }}
        __syncthreads();
    }}
    for (int i = threadIdx.x; i < n; i += blockDim.x) {{
        keys_out[row * n + i] = key[i];
        values_out[row * n + i] = val[i];
    }}
}}
"""


# Where pair a of a lane sits in the row; which distances j stay in a lane's registers and
# how far apart those registers are; how far apart the lanes are for the other distances.
LAYOUTS = {
    "blocked": ("lane * E + a", "j < E", "j", "j / E"),
    "striped": ("a * 32 + lane", "j >= 32", "(j / 32)", "j"),
}


def _pairs_registers(dtype: str, per_thread: int, layout: str, warps: int) -> str:
    """A warp per row, E pairs per lane in registers (the row padded to 32·E with +inf): each
    bitonic step either swaps two registers of a lane or trades a register with another lane."""
    position, in_lane, register_distance, lane_distance = LAYOUTS[layout]
    return f"""{CUDA_HEADER}#define E {per_thread}
#define LENGTH (32 * E)
#define WARPS {warps}
{_pair_order(dtype)}
{_pairs_signature(dtype)} {{
    int lane = threadIdx.x & 31;
    long long row = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    float key[E];
    value_t val[E];
    #pragma unroll
    for (int a = 0; a < E; ++a) {{
        int e = {position};
        key[a] = e < n ? keys[row * n + e] : {POS_INF};
        val[a] = e < n ? values[row * n + e] : {PAD_VALUE[dtype]};
    }}
    #pragma unroll
    for (int k = 2; k <= LENGTH; k <<= 1) {{
        #pragma unroll
        for (int j = k >> 1; j > 0; j >>= 1) {{
            if ({in_lane}) {{
                #pragma unroll
                for (int a = 0; a < E; ++a) {{
                    int b = a ^ {register_distance};
                    int e = {position};
                    if (b > a && before(key[b], val[b], key[a], val[a]) == ((e & k) == 0)) {{
                        float tk = key[a];
                        key[a] = key[b];
                        key[b] = tk;
                        value_t tv = val[a];
                        val[a] = val[b];
                        val[b] = tv;
                    }}
                }}
            }} else {{
                #pragma unroll
                for (int a = 0; a < E; ++a) {{
                    float other_k = __shfl_xor_sync({FULL}, key[a], {lane_distance});
                    value_t other_v = __shfl_xor_sync({FULL}, val[a], {lane_distance});
                    int e = {position};
                    bool keep_smaller = ((e & j) == 0) == ((e & k) == 0);
                    if (before(other_k, other_v, key[a], val[a]) == keep_smaller) {{
                        key[a] = other_k;
                        val[a] = other_v;
                    }}
                }}
            }}
        }}
    }}
    #pragma unroll
    for (int a = 0; a < E; ++a) {{
        int e = {position};
        if (e < n) {{
            keys_out[row * n + e] = key[a];
            values_out[row * n + e] = val[a];
        }}
    }}
}}
"""


def _triton_value_bits(dtype: str) -> tuple[str, str]:
    """Statements turning `value` into `low` (its order as an int64 in [0, 2^32)) and back into `value`."""
    if dtype == "i32":
        return ("    low = value.to(tl.int64) + 2147483648", "    value = (low - 2147483648).to(tl.int32)")
    return (
        f"""    bits = value.to(tl.int32, bitcast=True)
    low = ({TRITON_ORDERED_BITS}).to(tl.int64) + 2147483648""",
        f"""    bits = (low - 2147483648).to(tl.int32)
    value = ({TRITON_ORDERED_BITS}).to(tl.float32, bitcast=True)""",
    )


def _pairs_triton_packed(dtype: str) -> str:
    """High half: the key's bits in the floats' order; low half: the value's order. One int64 sort."""
    to_low, from_low = _triton_value_bits(dtype)
    return f"""{TRITON_HEADER}

@triton.jit
def sort_pairs(keys_ptr, values_ptr, keys_out_ptr, values_out_ptr, rows, n, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (row[:, None] < rows) & (cols[None, :] < n)
    offsets = row[:, None].to(tl.int64) * n + cols[None, :]
    bits = tl.load(keys_ptr + offsets, mask=mask, other=float("inf")).to(tl.int32, bitcast=True)
    high = ({TRITON_ORDERED_BITS}).to(tl.int64) << 32
    value = tl.load(values_ptr + offsets, mask=mask, other=0)
{to_low}
    packed = tl.sort(high | low, dim=1)
    bits = (packed >> 32).to(tl.int32)
    tl.store(keys_out_ptr + offsets, ({TRITON_ORDERED_BITS}).to(tl.float32, bitcast=True), mask=mask)
    low = packed & 0xFFFFFFFF
{from_low}
    tl.store(values_out_ptr + offsets, value, mask=mask)
"""


PAIRS_TRITON_RANK = f"""{TRITON_HEADER}

@triton.jit
def sort_keys(keys_ptr, keys_out_ptr, rows, n, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    key = tl.load(keys_ptr + row * n + cols, mask=cols < n, other=float("inf"))
    tl.store(keys_out_ptr + row * n + cols, tl.sort(key), mask=cols < n)


@triton.jit
def scatter_values(keys_ptr, values_ptr, keys_out_ptr, values_out_ptr, rows, n, BLOCK_I: tl.constexpr, STEPS: tl.constexpr):
    row = tl.program_id(1).to(tl.int64)
    i = tl.program_id(0) * BLOCK_I + tl.arange(0, BLOCK_I)
    live = i < n
    key = tl.load(keys_ptr + row * n + i, mask=live, other=0.0)
    value = tl.load(values_ptr + row * n + i, mask=live, other=0)
    sorted_keys = keys_out_ptr + row * n
    # the key's lower bound among the sorted keys is its rank, unless another element shares the key
    lo = tl.zeros([BLOCK_I], dtype=tl.int32)
    hi = tl.zeros([BLOCK_I], dtype=tl.int32) + n
    for _ in range(STEPS):
        searching = lo < hi
        mid = (lo + hi) // 2
        below = tl.load(sorted_keys + mid, mask=live & searching, other=0.0) < key
        lo = tl.where(searching & below, mid + 1, lo)
        hi = tl.where(searching & ~below, mid, hi)
    following = tl.load(sorted_keys + lo + 1, mask=live & (lo + 1 < n), other=float("inf"))
    rank = lo
    if tl.max((live & (following == key)).to(tl.int32), axis=0) > 0:
        # equal keys go by (value, column): count the row's elements with this key that come first
        for start in range(0, n, 32):
            j = start + tl.arange(0, 32)
            other_key = tl.load(keys_ptr + row * n + j, mask=j < n, other=float("nan"))
            other_value = tl.load(values_ptr + row * n + j, mask=j < n, other=0)
            first = (other_value[None, :] < value[:, None]) | ((other_value[None, :] == value[:, None]) & (j[None, :] < i[:, None]))
            rank += tl.sum(((other_key[None, :] == key[:, None]) & first).to(tl.int32), axis=1)
    tl.store(values_out_ptr + row * n + rank, value, mask=live)
"""


def _pairs_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("keys", "values", "keys_out", "values_out", i32(sizes["rows"]), i32(sizes["n"]))


def _pairs_cuda(
    family: str,
    params: dict[str, Any],
    code: str,
    threads: int,
    shared_bytes,
    rows_per_block: int = 1,
    padded: bool = False,
    checks: tuple[Check, ...] = (),
) -> Variant:
    def launches(sizes: Sizes) -> list[Launch]:
        args = _pairs_args(sizes) + ((i32(next_pow2(sizes["n"])),) if padded else ())
        return [Launch("sort_pairs", grid1(cdiv(sizes["rows"], rows_per_block)), args, block1(threads), shared_bytes=shared_bytes(sizes))]

    return Variant(family, "cuda", params, code, launches, unsupported=unsupported(params["dtype"], *checks))


def _pairs_packed_variant(params: dict[str, Any]) -> Variant:
    rows = params["ROWS"]

    def launches(sizes: Sizes) -> list[Launch]:
        return [
            Launch(
                "sort_pairs",
                grid1(cdiv(sizes["rows"], rows)),
                _pairs_args(sizes),
                constexprs={"ROWS": rows, "BLOCK_N": next_pow2(sizes["n"])},
                num_warps=params["num_warps"],
            )
        ]

    return Variant(
        "triton-packed-sort",
        "triton",
        params,
        _pairs_triton_packed(params["dtype"]),
        launches,
        unsupported=unsupported(params["dtype"], fits_registers(32, rows, params["num_warps"])),
    )


def _pairs_rank_variant(params: dict[str, Any]) -> Variant:
    block_i = params["BLOCK_I"]

    def launches(sizes: Sizes) -> list[Launch]:
        rows, n = sizes["rows"], sizes["n"]
        return [
            Launch("sort_keys", grid1(rows), ("keys", "keys_out", i32(rows), i32(n)), constexprs={"BLOCK_N": next_pow2(n)}, num_warps=4),
            Launch(
                "scatter_values",
                (cdiv(n, block_i), rows, 1),
                _pairs_args(sizes),
                constexprs={"BLOCK_I": block_i, "STEPS": n.bit_length()},
                num_warps=params["num_warps"],
            ),
        ]

    return Variant("triton-sort-then-rank", "triton", params, PAIRS_TRITON_RANK, launches, unsupported=unsupported(params["dtype"]))


def pairs_variants() -> Iterable[Variant]:
    for dtype in ("i32", "f32"):
        bitonic_base = {"dtype": dtype, "threads": 256, "pad": True, "exchange": "shuffle", "restrict": True}
        bitonic_settings = [
            *product({"dtype": [dtype], "threads": [256, 1024], "pad": [True], "exchange": ["block", "shuffle"], "restrict": [True]}),
            *around(bitonic_base, threads=[128, 512], pad=[False], restrict=[False])[1:],
        ]
        for params in bitonic_settings:
            pad = params["pad"]
            code = _pairs_bitonic(dtype, params["threads"], pad, params["exchange"] == "shuffle", params["restrict"])
            yield _pairs_cuda(
                "cuda-bitonic-pairs",
                params,
                code,
                params["threads"],
                lambda s: 8 * next_pow2(s["n"]),
                padded=pad,
                checks=() if pad else (power_of_two,),
            )
        for threads in (128, 512, 1024):
            yield _pairs_cuda("cuda-odd-even", {"dtype": dtype, "threads": threads}, _pairs_odd_even(dtype), threads, lambda s: 8 * s["n"])
        register_settings = [
            *product({"dtype": [dtype], "per_thread": [4, 16, 32], "layout": ["blocked", "striped"], "warps": [4]}),
            *around({"dtype": dtype, "per_thread": 16, "layout": "striped", "warps": 4}, warps=[1, 8])[1:],
        ]
        for params in register_settings:
            per_thread, warps = params["per_thread"], params["warps"]
            code = _pairs_registers(dtype, per_thread, params["layout"], warps)
            yield _pairs_cuda(
                "cuda-bitonic-registers",
                params,
                code,
                32 * warps,
                lambda s: 0,
                rows_per_block=warps,
                checks=(at_most("n", 32 * per_thread, "a warp holds 32·E pairs"),),
            )
        packed = [_pairs_packed_variant(params) for params in product({"dtype": [dtype], "ROWS": [1, 4], "num_warps": [2, 4, 8]})]
        yield from _runs_somewhere(packed, PAIRS_SIZES)
        for params in around({"dtype": dtype, "BLOCK_I": 128, "num_warps": 4}, BLOCK_I=[512], num_warps=[2, 8]):
            yield _pairs_rank_variant(params)


def _pairs_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    values, order = torch.sort(inputs["values"], dim=1, stable=True)
    keys_out, by_key = torch.sort(inputs["keys"].gather(1, order), dim=1, stable=True)
    return {"keys_out": keys_out, "values_out": values.gather(1, by_key)}


SORT_PAIRS = Op(
    name="sort_pairs",
    bound="compute",
    sizes=PAIRS_SIZES,
    inputs=lambda s: {
        "keys": TensorSpec((s["rows"], s["n"]), "f32", "rand"),
        "values": TensorSpec((s["rows"], s["n"]), s["dtype"], VALUE_INIT[s["dtype"]]),
    },
    outputs=lambda s: {"keys_out": TensorSpec((s["rows"], s["n"])), "values_out": TensorSpec((s["rows"], s["n"]), s["dtype"])},
    reference=_pairs_reference,
    reference_code=(
        "def reference(keys, values):\n"
        "    # equal keys keep their values in order: sort by value first, then stably by key\n"
        "    values, order = torch.sort(values, dim=1, stable=True)\n"
        "    keys, by_key = torch.sort(keys.gather(1, order), dim=1, stable=True)\n"
        "    return keys, values.gather(1, by_key)\n"
    ),
    variants=pairs_variants,
)

OPS = [MEDIAN_ROWS, SORT_PAIRS]
