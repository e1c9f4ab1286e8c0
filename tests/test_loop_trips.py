"""Loop iterations and memory accesses per thread or program, read from kernel text and launch (models/loop_trips.py)."""

from __future__ import annotations

import math
import time

import pytest

from kernelcast.forecast import ForecastRequest, KernelSide
from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.kernels_runtime.launch_spec import parse_launch_pragma
from kernelcast.models.features import FEATURE_NAMES, pair_features
from kernelcast.models.loop_trips import NO_WORK, ThreadWork, thread_work

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
    return {"kernel": kernel, "grid": grid, "block": block, "args": ["x", "y", *({"ctype": "i32", "value": v} for v in scalars)],
            "constexprs": constexprs or None}


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


@pytest.mark.parametrize(("language", "code", "pragma", "corpus_launch"), [
    ("cuda", GRID_STRIDE, "// kernelcast: launch kernel=scale grid=(528) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)",
     launch("scale", [528, 1, 1], [256, 1, 1], 1 << 24)),
    ("triton", TRITON, "# kernelcast: launch kernel=row_max grid=(64, 4) args=(x:f32[N*64], out:f32[64]:out, N:i32=65536) BLOCK=1024",
     {"kernel": "row_max", "grid": [64, 4, 1], "args": ["x", "out", {"ctype": "i32", "value": 65536}], "constexprs": {"BLOCK": 1024}}),
])
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
    sizes = {"kernel": "matmul", "grid": [8, 8, 1], "args": ["a", "b", "c", *({"ctype": "i32", "value": 1024} for _ in range(3))],
             "constexprs": {"BM": 128, "BN": 64, "BK": 32}}
    # K / BK = 32 trips of a 128 × 32 and a 32 × 64 block, one 128 × 64 store, an atomic on 128 rows (global, as all Triton's are).
    assert thread_work(TRITON_MATMUL, "triton", sizes) == ThreadWork(32.0, 32 * (128 * 32 + 32 * 64) + 128 * 64 + 128, 0.0, 0.0, 0.0, 128.0, 0.0)


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
    sizes = {"kernel": "top", "grid": [128, 1, 1], "args": ["x", "y", {"ctype": "i32", "value": 4096}], "constexprs": {"CHUNK": chunk},
             "num_warps": warps}
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
    header = "".join(f"for (long long {v} = 1; {v} < {bound}; {v} <<= 1) " for v, bound in zip("abcde", ["(1LL << 48)", "a", "b", "c", "d"]))
    code = f"__global__ void nest(float* x) {{ {header}x[e] += 1.0f; }}"
    started = time.process_time()
    work = thread_work(code, "cuda", launch("nest", [1, 1, 1], [32, 1, 1]))
    assert time.process_time() - started < 5.0  # a hang guard, not a speed goal
    assert work.iterations > 48 and work.global_accesses > 0


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
    triton = 'tl.atomic_add(out_ptr + keys, v, mask=m, sem="relaxed")\ntl.load(x_ptr + j, cache_modifier=".cg", eviction_policy="evict_first")'
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
    rows = [dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(side, side, hardware))[0]))
            for side in (KernelSide(f"__device__ float fetch(const float* p) {{ return {load}; }}", "cuda") for load in loads)]
    assert [row["code_cache_hints"] for row in rows] == [1.0, 1.0, 1.0, 0.0]
    assert [row["code_streaming_hints"] for row in rows] == [1.0, 0.0, 0.0, 0.0]
    assert [row["code_l1_bypass_hints"] for row in rows] == [0.0, 0.0, 1.0, 0.0]
    triton = KernelSide('tl.load(x_ptr + j, cache_modifier=".cv", eviction_policy="evict_first")', "triton")
    row = dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(triton, triton, hardware))[0]))
    assert (row["code_streaming_hints"], row["code_l1_bypass_hints"]) == (1.0, 1.0)
