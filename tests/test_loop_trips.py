"""Loop iterations and memory accesses per thread or program, read from kernel text and launch (kernels_runtime/source/loop_trips.py)."""

from __future__ import annotations

import ast
import math
import time

import pytest

from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.kernels_runtime.source.launch_spec import parse_launch_pragma
from kernelcast.kernels_runtime.source.loop_trips import NO_WORK, ThreadWork, block_shape, thread_work
from kernelcast.models.embedded.features import FEATURE_NAMES, pair_features
from kernelcast.wire import ForecastRequest, KernelSide

GRID_STRIDE = """
extern "C" __global__ void scale(const float* __restrict__ x, float* y, int n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x)
        y[i] = 2.0f * x[i];
}
"""
ROW_SUM = """
#define BLOCK 256
__global__ void row_sum(const float* x, float* out, int rows, int cols) {
    int tid = threadIdx.x;
    float acc = 0.0f;
    for (int j = tid; j < cols; j += BLOCK) acc += x[blockIdx.x * cols + j];  // cols / BLOCK trips
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    for (int k = 2; k <= cols; k <<= 1) { for (int e = 0; e < 4; ++e) acc += 1.0f; }
    if (tid == 0) out[blockIdx.x] = acc;
}
"""
VECTOR_WITH_TAIL = """
__global__ void copy8(const float* x, float* y, int n) {
    long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i + 8 <= n) {
        for (int k = 0; k < 8; ++k) y[i + k] = x[i + k];
    } else {
        for (long long j = i; j < n; ++j) y[j] = x[j];
    }
}
"""
TRITON = """
import triton
import triton.language as tl

@triton.jit
def row_max(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, n, BLOCK):
        best = tl.maximum(best, tl.load(x_ptr + row * n + start + tl.arange(0, BLOCK), mask=start + tl.arange(0, BLOCK) < n))
    for start in range(tl.program_id(1) * BLOCK, n, tl.num_programs(1) * BLOCK):
        pass
    tl.store(out_ptr + row, tl.max(best, axis=0))
"""


def launch(kernel: str, grid: list[int], block: list[int], *scalars: int, **constexprs: int) -> dict:
    return {
        "kernel": kernel,
        "grid": grid,
        "block": block,
        "args": ["x", "y", *({"ctype": "i32", "value": v} for v in scalars)],
        "constexprs": constexprs or None,
    }


def test_a_grid_stride_loop_runs_n_over_all_threads_times() -> None:
    assert thread_work(GRID_STRIDE, "cuda", launch("scale", [528, 1, 1], [256, 1, 1], 1 << 24)).iterations == -(-(1 << 24) // (528 * 256))
    assert thread_work(GRID_STRIDE, "cuda", launch("scale", [65536, 1, 1], [256, 1, 1], 1 << 24)).iterations == 1


def test_loops_in_sequence_add_nested_ones_multiply_and_shifts_count_logarithmically() -> None:
    # cols 1024: 4 trips of the row loop, 5 of the shuffle loop, 10 × (1 + 4) of the nested pair.
    assert thread_work(ROW_SUM, "cuda", launch("row_sum", [4096, 1, 1], [256, 1, 1], 4096, 1024)).iterations == 4 + 5 + 10 * 5


def test_the_tail_path_of_an_else_branch_is_not_what_a_thread_does() -> None:
    assert thread_work(VECTOR_WITH_TAIL, "cuda", launch("copy8", [8192, 1, 1], [256, 1, 1], 1 << 24)).iterations == 8


def test_a_bound_the_text_does_not_give_counts_once_and_unknown_kernels_nothing() -> None:
    unknown = GRID_STRIDE.replace("i < n", "i < x[0]")
    assert thread_work(unknown, "cuda", launch("scale", [528, 1, 1], [256, 1, 1], 1 << 24)).iterations == 1
    assert thread_work(GRID_STRIDE, "cuda", launch("other", [1, 1, 1], [256, 1, 1])) == NO_WORK
    assert thread_work("def broken(:", "triton", launch("row_max", [1, 1, 1], [1, 1, 1])) == NO_WORK
    assert thread_work(GRID_STRIDE, "pytorch", launch("scale", [1, 1, 1], [1, 1, 1])) == NO_WORK
    assert thread_work(GRID_STRIDE, "cuda", None) == NO_WORK


def test_triton_ranges_read_constexprs_scalars_and_num_programs() -> None:
    row = {"kernel": "row_max", "grid": [64, 4, 1], "args": ["x", "out", {"ctype": "i32", "value": 65536}], "constexprs": {"BLOCK": 1024}}
    assert thread_work(TRITON, "triton", row).iterations == 64 + 16  # 65536 / 1024, then 65536 / (4 · 1024)


@pytest.mark.parametrize(
    ("language", "code", "pragma", "corpus_launch"),
    [
        (
            "cuda",
            GRID_STRIDE,
            "// kernelcast: launch kernel=scale grid=(528) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)",
            launch("scale", [528, 1, 1], [256, 1, 1], 1 << 24),
        ),
        (
            "triton",
            TRITON,
            "# kernelcast: launch kernel=row_max grid=(64, 4) args=(x:f32[N*64], out:f32[64]:out, N:i32=65536) BLOCK=1024",
            {
                "kernel": "row_max",
                "grid": [64, 4, 1],
                "args": ["x", "out", {"ctype": "i32", "value": 65536}],
                "constexprs": {"BLOCK": 1024},
            },
        ),
    ],
)
def test_an_editor_pragma_gives_the_work_a_corpus_launch_gives(language: str, code: str, pragma: str, corpus_launch: dict) -> None:
    """The editor sends its pragma's launch (LaunchSpec.as_launch), scalar arguments included: the features must read as in training."""
    hardware = SPECS["H100-SXM"].to_json()

    def work(launch_facts: dict) -> tuple[float, float]:
        side = KernelSide(code, language, facts={"launches": [launch_facts]})
        features = dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(side, side, hardware))[0]))
        return features["loop_iterations"], features["global_accesses"]

    from_pragma, from_corpus = work(parse_launch_pragma(pragma, language).as_launch()), work(corpus_launch)
    assert from_pragma == from_corpus and min(from_corpus) > 0


NAIVE_PRODUCT = """
#define D 64
__global__ void scores(const float* q, const float* k, float* p, int s) {
    const int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    #pragma unroll 16
    for (int d = 0; d < D; ++d) acc += q[i * D + d] * k[j * D + d];
    p[i * s + j] = acc;
}
"""
TILED_PRODUCT = """
#define D 64
#define TILE 16
__global__ void scores(const float* q, const float* k, float* p, int s) {
    __shared__ float qs[TILE][D + 1], ks[TILE][D + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const float4* rows = reinterpret_cast<const float4*>(q);
    for (int e = ty * TILE + tx; e < TILE * D; e += TILE * TILE) {
        qs[e / D][e % D] = q[blockIdx.y * TILE * D + e];
        ks[e / D][e % D] = *reinterpret_cast<const float*>(k + blockIdx.x * TILE * D + e) + __ldcg(k + e);
    }
    __syncthreads();
    float acc = 0.0f;
    #pragma unroll
    for (int d = 0; d < D; ++d)
        #pragma unroll
        for (int u = 0; u < 1; ++u) { acc += qs[ty][d] * ks[tx][d]; }
    p[(blockIdx.y * TILE + ty) * s + blockIdx.x * TILE + tx] = acc;
}
"""
TRITON_MATMUL = """
import triton
import triton.language as tl

@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    depth = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rows[:, None] * K + (k0 + depth)[None, :])
        b = tl.load(b_ptr + (k0 + depth)[:, None] * N + cols[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc)
    tl.atomic_add(c_ptr + tl.sum(acc, axis=1).to(tl.int32), 1.0)
"""


def test_a_tiled_kernel_reads_global_memory_once_per_tile_and_its_shared_tile_once_per_product() -> None:
    grid = [64, 64, 1]
    naive = thread_work(NAIVE_PRODUCT, "cuda", launch("scores", grid, [16, 16, 1], 1024))
    tiled = thread_work(TILED_PRODUCT, "cuda", launch("scores", grid, [16, 16, 1], 1024))
    assert naive == ThreadWork(64.0, 2 * 64 + 1, 0.0, 0.0, 0.0)  # the unrolled loop still runs D times
    # 1024 / 256 = 4 trips of the tile copy, three global reads each (through a cast pointer, an intrinsic), and the
    # product's 64 × 1 inner trips read two shared values: the `#pragma unroll` lines are not loop bodies.
    assert tiled == ThreadWork(4.0 + 64 * 2, 3 * 4 + 1, 2 * 4 + 2 * 64, 0.0, 0.0)


def test_triton_accesses_count_the_elements_of_each_loaded_and_stored_block() -> None:
    sizes = {
        "kernel": "matmul",
        "grid": [8, 8, 1],
        "args": ["a", "b", "c", *({"ctype": "i32", "value": 1024} for _ in range(3))],
        "constexprs": {"BM": 128, "BN": 64, "BK": 32},
    }
    # K / BK = 32 trips of a 128 × 32 and a 32 × 64 block, one 128 × 64 store, an atomic on 128 rows (global, as all Triton's are).
    assert thread_work(TRITON_MATMUL, "triton", sizes) == ThreadWork(
        32.0, 32 * (128 * 32 + 32 * 64) + 128 * 64 + 128, 0.0, 0.0, 0.0, 128.0, 0.0
    )


TRITON_CHUNKED_TOP = """
import triton.language as tl

@triton.jit
def top(x_ptr, out_ptr, n, CHUNK: tl.constexpr):
    cols = tl.arange(0, CHUNK)
    best = tl.full([CHUNK], float("-inf"), tl.float32)
    for start in range(0, n, CHUNK):
        values = tl.load(x_ptr + start + cols)
        best = tl.sort(tl.maximum(best, tl.sort(values)), descending=True)
    tl.store(out_ptr + cols, tl.cumsum(best, 0))
"""


@pytest.mark.parametrize(
    ("chunk", "warps", "stages", "steps"),
    [
        # 4096 / 64 = 64 trips of two sorts of 64 (6 · 7 / 2 = 21 stages each); 64 elements < 128 threads: one step a stage.
        (64, 4, 64 * 2 * 21 + 6, 64 * 2 * 21 + 6),
        # 4096 / 512 = 8 trips of two sorts of 512 (9 · 10 / 2 = 45 stages), 4 elements a thread; the scan: 9 stages.
        (512, 4, 8 * 2 * 45 + 9, 8 * 2 * 45 * 4 + 9 * 4),
        (512, 8, 8 * 2 * 45 + 9, 8 * 2 * 45 * 2 + 9 * 2),  # twice the warps, half the steps
    ],
)
def test_triton_sorts_and_scans_count_their_network_stages_and_a_threads_steps(chunk: int, warps: int, stages: int, steps: int) -> None:
    sizes = {
        "kernel": "top",
        "grid": [128, 1, 1],
        "args": ["x", "y", {"ctype": "i32", "value": 4096}],
        "constexprs": {"CHUNK": chunk},
        "num_warps": warps,
    }
    work = thread_work(TRITON_CHUNKED_TOP, "triton", sizes)
    assert (work.network_stages, work.network_steps) == (stages, steps)
    assert work.global_accesses == 4096 + chunk


def test_the_feature_sums_the_accesses_of_every_thread_of_every_launch() -> None:
    hardware = SPECS["H100-SXM"].to_json()
    first = launch("scores", [64, 64, 1], [16, 16, 1], 1024)
    twice = KernelSide(NAIVE_PRODUCT, "cuda", facts={"launches": [first, first]})
    features = dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(twice, twice, hardware))[0]))
    assert features["global_accesses"] == pytest.approx(math.log2(1 + 2 * 64 * 64 * 256 * 129))
    assert features["shared_accesses"] == 0


BITONIC_IN_A_HELPER = """
#define N 1024
__device__ __forceinline__ void bitonic(float* s, int n) {
    for (int k = 2; k <= n; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            s[threadIdx.x] = fminf(s[threadIdx.x], s[threadIdx.x ^ j]);
            __syncthreads();
        }
    }
}
extern "C" __global__ void sort_rows(const float* x, float* y, int rows) {
    __shared__ float s[N];
    s[threadIdx.x] = x[blockIdx.x * N + threadIdx.x];
    bitonic(s, N);
    for (int i = 0; i < rows; ++i)
        for (int j = i + 1; j < rows; ++j) y[j] += s[i];
}
"""


def test_inner_loops_bounded_by_the_outer_variable_and_device_helpers_count_their_work() -> None:
    work = thread_work(BITONIC_IN_A_HELPER, "cuda", launch("sort_rows", [1, 1, 1], [1024, 1, 1], 100))
    # The helper's network: 10 stages of k, 1 + 2 + … + 10 = 55 steps of j, two shared reads and a write each.
    # The triangle: 100 trips of i, read at i = 49: 50 trips of j, each with one y and one s subscript.
    assert work.iterations == 10 + 55 + 100 + 100 * 50
    assert work.shared_accesses == 1 + 3 * 55 + 100 * 50
    assert work.global_accesses == 1 + 100 * 50


def test_nested_doubling_loops_are_read_at_a_bounded_number_of_values() -> None:
    # Five nested loops of up to 48 doublings each: read at every value of every loop this is
    # ~2·10⁶ readings (half a minute); past two enumerated loops the rest are read at one value.
    header = "".join(
        f"for (long long {v} = 1; {v} < {bound}; {v} <<= 1) " for v, bound in zip("abcde", ["(1LL << 48)", "a", "b", "c", "d"])
    )
    code = f"__global__ void nest(float* x) {{ {header}x[e] += 1.0f; }}"
    started = time.process_time()
    work = thread_work(code, "cuda", launch("nest", [1, 1, 1], [32, 1, 1]))
    assert time.process_time() - started < 5.0  # a hang guard, not a speed goal
    assert work.iterations > 48 and work.global_accesses > 0


PADDED_BITONIC = """
extern "C" __global__ void top_k(const float* x, float* out, int n) {
    extern __shared__ float s[];
    int np = 1;
    while (np < n) np <<= 1;  // the row padded to a power of two
    for (int size = 2; size <= np; size <<= 1)
        for (int stride = size / 2; stride > 0; stride >>= 1)
            for (int t = threadIdx.x; t < np / 2; t += blockDim.x) s[t] = s[t + stride];
}
"""
UNROLLED_WITH_REMAINDER = """
extern "C" __global__ void row_sum(const float* x, float* out, int n) {
    int j = threadIdx.x & 31;
    float acc = 0.0f;
    for (; j + 3 * 32 < n; j += 4 * 32) acc += x[j] + x[j + 32] + x[j + 64] + x[j + 96];
    for (; j < n; j += 32) acc += x[j];
    out[0] = acc;
}
"""
CONDITIONAL_BOUNDS = """
extern "C" __global__ void merge(float* x, float* y, int k) {
    for (int base = (blockIdx.x * blockDim.x + (threadIdx.x & ~31)) * 4; base < k; base += gridDim.x * blockDim.x * 4)
        for (int j = (k >> 1) < 16 ? (k >> 1) : 16; j > 0; j >>= 1) x[j] += 1.0f;
}
"""
DATA_DEPENDENT_LOOPS = """
extern "C" __global__ void median(const unsigned* keys, unsigned* out, int n) {
    unsigned int lo = 0u, hi = 0xffffffffu;
    while (lo < hi) {  // bisection of the 32-bit key range
        unsigned int mid = lo + ((hi - lo) >> 1);
        int count = 0;
        for (int i = 0; i < n; i += 256) count += keys[i] <= mid;
        if (count > n / 2) hi = mid; else lo = mid + 1;
    }
    int old = out[0], assumed;
    do { assumed = old; old = atomicCAS((int*)out, assumed, (int)lo); } while (old != assumed);
    while (out[1] < lo) out[1] = lo;  // a bound read from memory
}
"""


@pytest.mark.parametrize(
    ("code", "kernel", "scalars", "iterations"),
    [
        # np = 1024 after 10 doublings; then sizes 2..1024 (10), strides summed over them (55), each with 512 / 256 = 2 trips.
        (PADDED_BITONIC, "top_k", (1000,), 10 + 10 + 55 * (1 + 2)),
        # n = 1000 from lane 0: the unrolled loop runs 8 times (j = 0 … 896), leaving j = 1024, so the remainder loop runs none.
        (UNROLLED_WITH_REMAINDER, "row_sum", (1000,), 8),
        (UNROLLED_WITH_REMAINDER, "row_sum", (1100,), 8 + 3),  # … and for n = 1100 three times (j = 1024, 1056, 1088).
        # base from the warp's first thread (& ~31): ⌈4096 / (2 · 256 · 4)⌉ = 2 trips; j from 16 (k >> 1 is 2048): 5 halvings.
        (CONDITIONAL_BOUNDS, "merge", (4096,), 2 * (1 + 5)),
        # 32 bisection rounds of 4 trips (n = 1000 / 256); the CAS loop is straight-line code; the last while counts once.
        (DATA_DEPENDENT_LOOPS, "median", (1000,), 32 * (1 + 4) + 1),
    ],
)
def test_while_loops_remainder_loops_and_conditional_bounds_count_what_they_run(
    code: str, kernel: str, scalars: tuple[int, ...], iterations: int
) -> None:
    assert thread_work(code, "cuda", launch(kernel, [2, 1, 1], [256, 1, 1], *scalars)).iterations == iterations


def test_triton_ranges_bounded_by_assigned_scalars_count_their_trips() -> None:
    split_k = """
import triton
import triton.language as tl

@triton.jit
def matmul_tn(a_ptr, c_ptr, K, SPLIT: tl.constexpr, BLOCK_K: tl.constexpr):
    chunk = tl.cdiv(K, SPLIT)
    k_begin = tl.program_id(1) * chunk
    k_end = tl.minimum(k_begin + chunk, K)
    for k in range(k_begin, k_end, BLOCK_K):
        tl.load(a_ptr + k + tl.arange(0, BLOCK_K))
    k_begin = tl.load(a_ptr)  # from memory: unknown from here on
    for k in range(k_begin, K, BLOCK_K):
        pass
"""
    work = thread_work(
        split_k,
        "triton",
        {
            "kernel": "matmul_tn",
            "grid": [1, 4, 1],
            "args": ["a", "c", {"ctype": "i32", "value": 4096}],
            "constexprs": {"SPLIT": 4, "BLOCK_K": 64},
        },
    )
    assert work.iterations == 4096 / 4 / 64 + 1
    assert work.global_accesses == 16 * 64 + 1


HISTOGRAMS = """
__device__ __forceinline__ void add_one(int* hist, int v) {
    unsigned peers = __match_any_sync(0xffffffffu, v);
    if ((threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(hist + v, __popc(peers));
}
extern "C" __global__ void global_bins(const int* __restrict__ x, int* counts, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) add_one(counts, x[i]);
}
extern "C" __global__ void shared_bins(const int* __restrict__ x, int* counts, int n, int bins) {
    extern __shared__ int local[];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) add_one(local, x[i]);
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) atomicAdd(&counts[b], local[b]);
}
"""


def test_atomics_count_where_they_land_also_through_a_helper() -> None:
    """A helper's atomic goes where the caller's argument points: a block's shared table or global memory."""
    global_bins = thread_work(HISTOGRAMS, "cuda", launch("global_bins", [4, 1, 1], [256, 1, 1], 4096))
    shared_bins = thread_work(HISTOGRAMS, "cuda", launch("shared_bins", [4, 1, 1], [256, 1, 1], 4096, 256))
    assert (global_bins.global_atomics, global_bins.shared_atomics) == (4.0, 0.0)  # 4096 / 1024 trips, one each
    assert (shared_bins.global_atomics, shared_bins.shared_atomics) == (1.0, 4.0)  # then one flush per bin the thread owns


def test_the_features_see_warp_aggregation_relaxed_atomics_and_cache_hints() -> None:
    hardware = SPECS["H100-SXM"].to_json()
    triton = (
        'tl.atomic_add(out_ptr + keys, v, mask=m, sem="relaxed")\ntl.load(x_ptr + j, cache_modifier=".cg", eviction_policy="evict_first")'
    )
    plain = 'tl.atomic_add(out_ptr + keys, v, mask=m)\ntl.load(x_ptr + j, cache_modifier="")'
    sides = (KernelSide(HISTOGRAMS, "cuda"), KernelSide(triton, "triton"), KernelSide(plain, "triton"))
    rows = [dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(side, side, hardware))[0])) for side in sides]
    assert [row["code_warp_match"] for row in rows] == [1.0, 0.0, 0.0]  # log2(1 + count)
    assert [row["code_relaxed_atomics"] for row in rows] == [0.0, 1.0, 0.0]
    assert [row["code_cache_hints"] for row in rows] == [0.0, math.log2(3), 0.0]


def test_cache_hints_are_told_apart_by_what_they_drop() -> None:
    """A gather re-reading its lines loses what `__ldcs` streams out and keeps what `__ldca` keeps: not one hint count."""
    hardware = SPECS["H100-SXM"].to_json()
    loads = ["__ldcs(p)", "__ldca(p)", "__ldcg(p)", "__ldg(p)"]
    rows = [
        dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(side, side, hardware))[0]))
        for side in (KernelSide(f"__device__ float fetch(const float* p) {{ return {load}; }}", "cuda") for load in loads)
    ]
    assert [row["code_cache_hints"] for row in rows] == [1.0, 1.0, 1.0, 0.0]
    assert [row["code_streaming_hints"] for row in rows] == [1.0, 0.0, 0.0, 0.0]
    assert [row["code_l1_bypass_hints"] for row in rows] == [0.0, 0.0, 1.0, 0.0]
    triton = KernelSide('tl.load(x_ptr + j, cache_modifier=".cv", eviction_policy="evict_first")', "triton")
    row = dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(triton, triton, hardware))[0]))
    assert (row["code_streaming_hints"], row["code_l1_bypass_hints"]) == (1.0, 1.0)


TRITON_HELPERS = """
import triton
import triton.language as tl

@triton.jit
def _dot_rows(x_ptr, begin, end, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(begin, end, BLOCK):
        acc += tl.load(x_ptr + start + tl.arange(0, BLOCK))
    return _scaled(acc, 2.0)

@triton.jit
def _scaled(v, factor):
    return _deeper(v * factor)

@triton.jit
def _deeper(v):
    tl.store(v, v)
    return v

@triton.jit
def split_rows(x_ptr, out_ptr, n, chunk, BLOCK: tl.constexpr):
    begin = tl.program_id(0) * chunk
    acc = _dot_rows(x_ptr, begin, tl.minimum(begin + chunk, n), BLOCK=BLOCK)
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)

def not_jitted(x):
    for i in range(1000):
        tl.load(x + tl.arange(0, 128))

@triton.jit
def calls_plain_python(x_ptr):
    not_jitted(x_ptr)
"""


def test_triton_helpers_count_their_work_with_the_calls_values_and_shapes() -> None:
    work = thread_work(
        TRITON_HELPERS,
        "triton",
        {
            "kernel": "split_rows",
            "grid": [4, 1, 1],
            "args": ["x", "out", {"ctype": "i32", "value": 4096}, {"ctype": "i32", "value": 1024}],
            "constexprs": {"BLOCK": 64},
        },
    )
    # _dot_rows runs 1024 / 64 trips of a 64-element load; _scaled is read, _deeper (a third level) is not.
    assert work.iterations == 1024 / 64
    assert work.global_accesses == 16 * 64 + 64
    plain = thread_work(TRITON_HELPERS, "triton", {"kernel": "calls_plain_python", "grid": [1, 1, 1], "args": ["x"]})
    assert plain == NO_WORK


CDIV_MACRO = """
#define CDIV(a, b) (((a) + (b) - 1) / (b))
#define TILE 32
__global__ void tiles(const float* x, float* y, int N) {
    float acc = 0.0f;
    int t;
    for (t = 0; t < CDIV(N, TILE); ++t) acc += x[t * TILE + threadIdx.x];
    y[threadIdx.x] = acc;
}
"""


def test_a_function_like_macro_in_a_loop_bound_is_expanded_as_written_out() -> None:
    written_out = CDIV_MACRO.replace("CDIV(N, TILE)", "(((N) + (TILE) - 1) / (TILE))")
    work = thread_work(CDIV_MACRO, "cuda", launch("tiles", [1, 1, 1], [32, 1, 1], 1 << 20))
    assert work.iterations == 32_768
    assert work == thread_work(written_out, "cuda", launch("tiles", [1, 1, 1], [32, 1, 1], 1 << 20))


@pytest.mark.parametrize(
    ("expression", "shape"),
    [
        ("tl.arange(0, BLOCK)", (16,)),
        ("tl.arange(4, 2 * BLOCK)", (28,)),
        ("tl.zeros((BLOCK, 64), dtype=tl.float32)", (16, 64)),
        ("tl.full([BLOCK], 0.0, tl.float32)", (16,)),
        ("tl.arange(0, BLOCK)[:, None] + tl.arange(0, 8)[None, :]", (16, 8)),
        ("tl.arange(0, N)", ()),  # a length the launch does not fix
        ("tl.program_id(0)", ()),
    ],
)
def test_block_shapes_are_read_from_the_launch_constexprs(expression: str, shape: tuple[int, ...]) -> None:
    assert block_shape(ast.parse(expression, mode="eval").body, {"BLOCK": 16}) == shape
