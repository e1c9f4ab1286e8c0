"""The static access-pattern summary: neighbouring threads' address distances in CUDA text."""

from __future__ import annotations

import math
from typing import Any

import pytest

from kernelcast.kernels_runtime.source.access_pattern import ACCESS_NAMES, NEUTRAL, access_summary
from kernelcast.kernels_runtime.source.launch_spec import launch_specs


def summary(code: str, language: str = "cuda", launches: list[dict[str, Any]] | None = None) -> dict[str, float]:
    values = access_summary(code, language, launches or ())
    assert len(values) == len(ACCESS_NAMES)
    return dict(zip(ACCESS_NAMES, values))


GELU = """
__global__ void gelu(const float* __restrict__ x, float* __restrict__ y, int n) {{
    long long base = 0;
    for (int k = 0; k < 4; ++k) {{
        long long j = base + {index};
        if (j < n) {{
            float v = x[j];
            y[j] = 0.5f * v * (1.0f + tanhf(0.79788456f * (v + 0.044715f * v * v * v)));
        }}
    }}
}}
"""


def test_gelu_strided_index_is_uncoalesced_and_blocked_index_coalesced() -> None:
    coalesced = summary(GELU.format(index="blockIdx.x * blockDim.x * 4 + k * blockDim.x + threadIdx.x"))
    strided = summary(GELU.format(index="blockIdx.x * blockDim.x * 4 + threadIdx.x * 4 + k"))
    assert coalesced["access_analysed"] == strided["access_analysed"] == 1.0
    assert coalesced["global_coalesced_share"] == 1.0 and coalesced["global_uncoalesced_share"] == 0.0
    assert strided["global_uncoalesced_share"] == 1.0 and strided["store_uncoalesced_share"] == 1.0
    assert coalesced["global_stride_log2"] == pytest.approx(1.0)  # 4 bytes apart
    assert strided["global_stride_log2"] == pytest.approx(math.log2(5))  # 16 bytes apart
    assert coalesced["unresolved_share"] == strided["unresolved_share"] == 0.0


def test_float4_vector_load_is_coalesced() -> None:
    code = """
__global__ void add(const float* __restrict__ x, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 a = reinterpret_cast<const float4*>(x)[i];
    float4 b = *reinterpret_cast<const float4*>(x + 4 * i);
    float4 c = ((const float4*)x)[i];
    reinterpret_cast<float4*>(out)[i] = make_float4(a.x + b.x + c.x, a.y, a.z, a.w);
}
"""
    found = summary(code)
    assert found["global_coalesced_share"] == 1.0
    assert found["global_stride_log2"] == pytest.approx(math.log2(1 + 16 / 4))


def test_aligned_pack_struct_and_typedef_set_the_width() -> None:
    code = """
typedef __half T;
struct __align__(16) Pack { T v[8]; };
__global__ void copy(const T* __restrict__ x, T* __restrict__ y) {
    long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    *reinterpret_cast<Pack*>(y + i) = *reinterpret_cast<const Pack*>(x + i);
    y[2 * i] = x[i];
}
"""
    found = summary(code)
    # the two Pack accesses are 16 bytes apart and 16 wide; the scalar ones 32 and 16 bytes apart, 2 wide
    assert found["global_coalesced_share"] == pytest.approx(0.5)
    assert found["store_uncoalesced_share"] == pytest.approx(0.5)


def test_one_address_for_the_whole_block_is_a_broadcast() -> None:
    code = """
__global__ void scale(const float* x, const float* s, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[i] * s[blockIdx.x] * __ldg(&s[0]);
}
"""
    found = summary(code)
    assert found["global_broadcast_share"] == pytest.approx(2 / 4)
    assert found["global_coalesced_share"] == pytest.approx(2 / 4)


def test_naive_transpose_store_is_uncoalesced_and_load_coalesced() -> None:
    code = """
#define N 4096
__global__ void transpose(const float* in, float* out) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    out[x * N + y] = in[y * N + x];
}
"""
    found = summary(code)
    assert found["global_coalesced_share"] == pytest.approx(0.5)  # the load
    assert found["global_uncoalesced_share"] == pytest.approx(0.5)
    assert found["store_uncoalesced_share"] == 1.0


TILE_READ = """
__global__ void column_sums(const float* in, float* out) {{
    __shared__ float tile[32][{width}];
    for (int k = 0; k < 32; ++k) tile[k][threadIdx.x] = in[k * 32 + threadIdx.x];
    __syncthreads();
    float acc = 0.0f;
    for (int k = 0; k < 32; ++k) acc += tile[threadIdx.x][k];
    out[blockIdx.x * 32 + threadIdx.x] = acc;
}}
"""


def test_shared_tile_read_by_row_conflicts_32_ways_unless_padded() -> None:
    conflicting = summary(TILE_READ.format(width=32))
    padded = summary(TILE_READ.format(width=33))
    # one conflict-free store (log2 1 = 0) and one 32-way load (log2 32 = 5)
    assert conflicting["shared_conflict_log2"] == pytest.approx(5 / 2)
    assert padded["shared_conflict_log2"] == 0.0
    assert conflicting["global_coalesced_share"] == padded["global_coalesced_share"] == 1.0


def test_index_through_a_call_counts_as_unresolved_without_raising() -> None:
    code = """
__device__ int scramble(int v) { return (v * 2654435761u) >> 7; }
__global__ void shuffle(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[scramble(i)];
}
"""
    found = summary(code)
    assert found["unresolved_share"] == pytest.approx(0.5)
    assert found["global_coalesced_share"] == 1.0  # the one evaluated access, the store


def test_scatter_by_loaded_index_is_unresolved_but_uniform_loaded_index_resolves() -> None:
    code = """
__global__ void rows(const long long* idx, const float* w, float* out, int d) {
    int col = threadIdx.x;
    long long token = idx[blockIdx.x];
    out[blockIdx.x * d + col] = w[token * d + col];
    atomicAdd(out + idx[blockIdx.x * blockDim.x + threadIdx.x], 1.0f);
}
"""
    found = summary(code)
    assert found["unresolved_share"] == pytest.approx(1 / 5)  # the atomic's address
    assert found["global_broadcast_share"] == pytest.approx(1 / 4)  # idx[blockIdx.x]


def test_derived_pointers_and_grid_stride_loops() -> None:
    code = """
#define BLOCK 128
__global__ void row_sum(const float* __restrict__ x, float* __restrict__ y, int m, int n) {
    const float* src = x + (size_t)blockIdx.x * n;
    float acc = 0.0f;
    for (int j = threadIdx.x; j < n; j += BLOCK) acc += src[j];
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < m; row += gridDim.x * blockDim.x) acc += x[(size_t)row * n];
    y[blockIdx.x] = acc;
}
"""
    found = summary(code)
    assert found["global_coalesced_share"] == pytest.approx(1 / 3)
    assert found["global_uncoalesced_share"] == pytest.approx(1 / 3)
    assert found["global_broadcast_share"] == pytest.approx(1 / 3)


def test_launch_block_else_launch_bounds_sets_block_dim() -> None:
    code = """
__global__ void __launch_bounds__(64) k(const float* x, float* y) {
    y[threadIdx.x] = x[threadIdx.x * blockDim.x];
}
"""
    assert summary(code)["global_stride_log2"] == pytest.approx((1 + math.log2(1 + 64)) / 2)
    pragma = "// kernelcast: launch grid=(4) block=(32) args=(x:f32[4096], y:f32[128]:out)\n" + code.replace("__launch_bounds__(64) ", "")
    launches = [spec.as_launch() for spec in launch_specs(pragma, "cuda").values()]
    assert summary(pragma, launches=launches)["global_stride_log2"] == pytest.approx((1 + math.log2(1 + 32)) / 2)
    default = code.replace("__launch_bounds__(64) ", "")
    assert summary(default)["global_stride_log2"] == pytest.approx((1 + math.log2(1 + 256)) / 2)


SEGMENTS = """
__global__ void segment_sum(const float* x, float* out, int rows, int d, int seg_len) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int segments = (rows + seg_len - 1) / seg_len;
    int %s;
    float sum = 0.0f;
    for (int row = seg * seg_len; row < min((seg + 1) * seg_len, rows); ++row) sum += x[row * d + col];
    out[seg * d + col] = sum;
}
"""


def test_scalar_arguments_of_the_launch_decide_the_stride() -> None:
    """Neighbours one segment apart are seg_len rows apart: only the launch's sizes say there are many segments."""
    launch = {
        "kernel": "segment_sum",
        "grid": [64],
        "block": [256],
        "args": ["x", "out", {"ctype": "i32", "value": 65536}, {"ctype": "i32", "value": 256}, {"ctype": "i32", "value": 64}],
    }
    column_fastest = SEGMENTS % "seg = idx / d, col = idx % d"
    segment_fastest = SEGMENTS % "col = idx / segments, seg = idx % segments"
    assert summary(column_fastest, launches=[launch])["global_coalesced_share"] == 1.0
    strided = summary(segment_fastest, launches=[launch])
    assert strided["global_uncoalesced_share"] == 1.0
    # The load's neighbours are seg_len rows of d floats apart, the store's one row.
    assert strided["global_stride_log2"] == pytest.approx((math.log2(1 + 64 * 256) + math.log2(1 + 256)) / 2)
    # Without the launch, sizes are one large value each: there is one segment, and the two read alike.
    assert summary(segment_fastest)["global_coalesced_share"] == summary(column_fastest)["global_coalesced_share"] == 1.0


HALF_TILE = """
#include <cuda_fp16.h>
__global__ void transpose(const __half* x, __half* y, int n) {
    __shared__ __half tile[64][64 + PAD];
    tile[threadIdx.y][threadIdx.x] = x[blockIdx.y * 64 * n + threadIdx.y * n + threadIdx.x];
    __syncthreads();
    y[blockIdx.x * 64 * n + threadIdx.y * n + threadIdx.x] = tile[threadIdx.x][threadIdx.y];
}
"""


@pytest.mark.parametrize(("pad", "degree"), [(0, 32), (1, 2), (2, 1)])
def test_half_tile_padding_spreads_the_column_read_over_banks(pad: int, degree: int) -> None:
    """A column of a 64-wide half tile: rows 128 bytes apart share one bank; 130 apart, two rows a bank; 132, one."""
    found = summary(f"#define PAD {pad}\n" + HALF_TILE)
    assert found["shared_conflict_log2"] == pytest.approx(math.log2(degree) / 2)  # the row write is conflict-free


def test_cuda_in_a_python_string_is_read_and_triton_is_neutral() -> None:
    kernelbench = '''
import torch
from torch.utils.cpp_extension import load_inline
source = """
__global__ void relu(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // one element per thread
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
"""
'''
    found = summary(kernelbench, "pytorch")
    assert found["access_analysed"] == 1.0 and found["global_coalesced_share"] == 1.0
    triton = """
import triton
import triton.language as tl

@triton.jit
def add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)
"""
    assert access_summary(triton, "triton") == NEUTRAL
    assert access_summary("def reference(x):\n    return torch.relu(x)\n", "pytorch") == NEUTRAL


def test_truncated_and_garbled_kernels_never_raise() -> None:
    code = TILE_READ.format(width=33) + GELU.format(index="threadIdx.x * 4 + k") + "#define F(a) ((a) * 2)\n"
    for cut in range(0, len(code), 3):
        values = access_summary(code[:cut] + "\n__global__ void tail(float* p) { p[F(threadIdx.x)] = 0; }", "cuda")
        assert all(math.isfinite(value) for value in values)
    hostile = "__global__ void k(float* p) { p[" + "(" * 5000 + "1" + ")" * 5000 + "] = 0; }"
    assert summary(hostile)["unresolved_share"] == 1.0
    loop = "#define A B\n#define B A\n__global__ void k(float* p) { int i = A; p[i + threadIdx.x] = 0; }"
    assert summary(loop)["global_coalesced_share"] == 1.0


def test_c_arithmetic_truncating_division_ternary_shifts_and_min() -> None:
    code = """
constexpr int LANES = 32;
__global__ void k(const float* x, float* y, int n) {
    const int lane = threadIdx.x & (LANES - 1), warp = threadIdx.x >> 5;
    int shifted = (int)threadIdx.x - 40;
    y[shifted / 8 + 100] = x[min(n, lane << 2)];
    y[lane % 2 == 0 ? 0 : 64] = x[static_cast<int>(warp * 0.5f) + (shifted % 8)];
}
"""
    found = summary(code)
    # -40 / 8 = -5 and -39 / 8 = -4 in C (truncation): neighbours one element apart
    # lane << 2: 16 bytes; the ternary: 256 bytes; -40 % 8 = 0 and -39 % 8 = -7: 28 bytes
    assert found["global_coalesced_share"] == pytest.approx(1 / 4)
    assert found["global_stride_log2"] == pytest.approx((math.log2(2) + math.log2(1 + 4) + math.log2(1 + 64) + math.log2(1 + 7)) / 4)


def test_bounds_check_in_a_grid_stride_loop_takes_the_in_bounds_branch() -> None:
    code = """
__global__ void histogram(const int* __restrict__ x, int* __restrict__ counts, int n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int value = i < n ? x[i] : -1;
        if (value >= 0) atomicAdd(counts + value, 1);
    }
}
"""
    found = summary(code)
    # x[i] is coalesced; the atomic's address is the loaded value: per thread, unresolved
    assert found["global_coalesced_share"] == 1.0
    assert found["unresolved_share"] == pytest.approx(0.5)
