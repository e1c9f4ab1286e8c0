"""Loop iterations per thread or program, read from kernel text and launch (models/loop_trips.py)."""

from __future__ import annotations

import pytest

from kernelcast.forecast import ForecastRequest, KernelSide
from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.kernels_runtime.launch_spec import parse_launch_pragma
from kernelcast.models.features import FEATURE_NAMES, pair_features
from kernelcast.models.loop_trips import loop_iterations

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
    assert loop_iterations(GRID_STRIDE, "cuda", launch("scale", [528, 1, 1], [256, 1, 1], 1 << 24)) == -(-(1 << 24) // (528 * 256))
    assert loop_iterations(GRID_STRIDE, "cuda", launch("scale", [65536, 1, 1], [256, 1, 1], 1 << 24)) == 1


def test_loops_in_sequence_add_nested_ones_multiply_and_shifts_count_logarithmically() -> None:
    # cols 1024: 4 trips of the row loop, 5 of the shuffle loop, 10 × (1 + 4) of the nested pair.
    assert loop_iterations(ROW_SUM, "cuda", launch("row_sum", [4096, 1, 1], [256, 1, 1], 4096, 1024)) == 4 + 5 + 10 * 5


def test_the_tail_path_of_an_else_branch_is_not_what_a_thread_does() -> None:
    assert loop_iterations(VECTOR_WITH_TAIL, "cuda", launch("copy8", [8192, 1, 1], [256, 1, 1], 1 << 24)) == 8


def test_a_bound_the_text_does_not_give_counts_once_and_unknown_kernels_nothing() -> None:
    unknown = GRID_STRIDE.replace("i < n", "i < x[0]")
    assert loop_iterations(unknown, "cuda", launch("scale", [528, 1, 1], [256, 1, 1], 1 << 24)) == 1
    assert loop_iterations(GRID_STRIDE, "cuda", launch("other", [1, 1, 1], [256, 1, 1])) == 0
    assert loop_iterations("def broken(:", "triton", launch("row_max", [1, 1, 1], [1, 1, 1])) == 0
    assert loop_iterations(GRID_STRIDE, "pytorch", launch("scale", [1, 1, 1], [1, 1, 1])) == 0
    assert loop_iterations(GRID_STRIDE, "cuda", None) == 0


def test_triton_ranges_read_constexprs_scalars_and_num_programs() -> None:
    row = {"kernel": "row_max", "grid": [64, 4, 1], "args": ["x", "out", {"ctype": "i32", "value": 65536}], "constexprs": {"BLOCK": 1024}}
    assert loop_iterations(TRITON, "triton", row) == 64 + 16  # 65536 / 1024, then 65536 / (4 · 1024)


@pytest.mark.parametrize(("language", "code", "pragma", "corpus_launch"), [
    ("cuda", GRID_STRIDE, "// kernelcast: launch kernel=scale grid=(528) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)",
     launch("scale", [528, 1, 1], [256, 1, 1], 1 << 24)),
    ("triton", TRITON, "# kernelcast: launch kernel=row_max grid=(64, 4) args=(x:f32[N*64], out:f32[64]:out, N:i32=65536) BLOCK=1024",
     {"kernel": "row_max", "grid": [64, 4, 1], "args": ["x", "out", {"ctype": "i32", "value": 65536}], "constexprs": {"BLOCK": 1024}}),
])
def test_an_editor_pragma_gives_the_iterations_a_corpus_launch_gives(language: str, code: str, pragma: str, corpus_launch: dict) -> None:
    """The editor sends its pragma's launch (LaunchSpec.as_launch), scalar arguments included: the feature must read as in training."""
    hardware = SPECS["H100-SXM"].to_json()

    def iterations(launch_facts: dict) -> float:
        side = KernelSide(code, language, facts={"launches": [launch_facts]})
        return dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(side, side, hardware))[0]))["loop_iterations"]

    assert iterations(parse_launch_pragma(pragma, language).as_launch()) == iterations(corpus_launch) > 0
