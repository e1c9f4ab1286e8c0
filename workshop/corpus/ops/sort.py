"""Sorting: sort each row (N a power of two up to 2048) and top-k values per row.

- row_sort: bitonic sort of a row in shared memory (threads per block; __syncwarp instead of
  __syncthreads for the steps that stay inside a warp's 64 elements); bitonic with E
  consecutive elements per thread in registers (the steps with j < E need no barrier);
  one launch per bitonic step over global memory (launch-bound, many passes); Triton tl.sort
  over ROWS rows per program (num_warps). fp32 and fp16 problems.
- topk: per-thread sorted top-K lists in registers merged by K rounds of block (or warp)
  argmax; a full bitonic sort of the row in shared memory, keeping the first k; k passes over
  the row, each taking the next (value, index) in order (no list, re-reads the row); Triton
  tl.sort of the whole row, or chunks merged into a running top list with the bitonic
  half-cleaner (max of a descending and an ascending list). k = 8 and 32 are problems;
  outputs are compared as sorted multisets.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import MAX_SHARED_BYTES
from workshop.corpus.ops.rowkit import TRITON_HEADER, unsupported
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
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

FULL = "0xffffffffu"


def _bitonic_smem(warp_sync: bool) -> str:
    """Bitonic sort of s[0..n) (n a power of two) by the whole block; pairs strided over the threads.

    A step with j <= 32 only touches the 64-element run that one warp's 32 pairs cover, so
    between two such steps a __syncwarp is enough (when warp_sync); any other step needs the block.
    """
    barrier = "if (j <= 32 && next <= 32) __syncwarp(); else __syncthreads();" if warp_sync else "__syncthreads();"
    return f"""
__device__ __forceinline__ void bitonic_smem(float* s, int n, bool descending) {{
    for (int k = 2; k <= n; k <<= 1) {{
        for (int j = k >> 1; j > 0; j >>= 1) {{
            for (int p = threadIdx.x; p < (n >> 1); p += blockDim.x) {{
                int i = ((p & ~(j - 1)) << 1) | (p & (j - 1));
                bool up = ((i & k) == 0) != descending;
                float a = s[i], b = s[i + j];
                if ((a > b) == up) {{
                    s[i] = b;
                    s[i + j] = a;
                }}
            }}
            int next = j > 1 ? j >> 1 : k;
            {barrier}
        }}
    }}
}}
"""


# --- row_sort -----------------------------------------------------------------------------------

SORT_SIZES = [
    {"m": 8, "n": 64, "dtype": "f32"},
    {"m": 65536, "n": 128, "dtype": "f32"},
    {"m": 4096, "n": 512, "dtype": "f32"},
    {"m": 16384, "n": 1024, "dtype": "f32"},
    {"m": 8192, "n": 2048, "dtype": "f32"},
    {"m": 16384, "n": 1024, "dtype": "f16"},
    {"m": 8192, "n": 2048, "dtype": "f16"},
]


def _sort_signature(dtype: str, name: str = "row_sort") -> str:
    ctype = CUDA_TYPES[dtype]
    return f'extern "C" __global__ void {name}(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int m, int n)'


def _sort_smem(dtype: str, warp_sync: bool) -> str:
    """One block per row, the row in dynamic shared memory as floats."""
    return f"""{CUDA_HEADER}{_bitonic_smem(warp_sync)}
{_sort_signature(dtype)} {{
    extern __shared__ float s[];
    long long offset = (long long)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = {cuda_load_as_float(dtype, "x[offset + i]")};
    __syncthreads();
    bitonic_smem(s, n, false);
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[offset + i] = {cuda_store_from_float(dtype, "s[i]")};
}}
"""


def _sort_registers(dtype: str, per_thread: int) -> str:
    """n/E threads per row, each holding E consecutive elements in registers.

    Steps with j >= E exchange through shared memory (one barrier each); the steps with j < E
    of every stage run inside the thread's registers.
    """
    return f"""{CUDA_HEADER}#define E {per_thread}

__device__ __forceinline__ void compare_swap(float& a, float& b, bool up) {{
    if ((a > b) == up) {{
        float t = a;
        a = b;
        b = t;
    }}
}}

{_sort_signature(dtype)} {{
    extern __shared__ float s[];
    long long offset = (long long)blockIdx.x * n;
    int base = threadIdx.x * E;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = {cuda_load_as_float(dtype, "x[offset + i]")};
    __syncthreads();
    float r[E];
    #pragma unroll
    for (int a = 0; a < E; ++a) r[a] = s[base + a];
    for (int k = 2; k <= n; k <<= 1) {{
        if ((k >> 1) >= E) {{
            __syncthreads();
            #pragma unroll
            for (int a = 0; a < E; ++a) s[base + a] = r[a];
            for (int j = k >> 1; j >= E; j >>= 1) {{
                __syncthreads();
                for (int p = threadIdx.x; p < (n >> 1); p += blockDim.x) {{
                    int i = ((p & ~(j - 1)) << 1) | (p & (j - 1));
                    float a = s[i], b = s[i + j];
                    if ((a > b) == ((i & k) == 0)) {{
                        s[i] = b;
                        s[i + j] = a;
                    }}
                }}
            }}
            __syncthreads();
            #pragma unroll
            for (int a = 0; a < E; ++a) r[a] = s[base + a];
        }}
        #pragma unroll
        for (int j = E >> 1; j > 0; j >>= 1) {{
            if (j < k) {{
                #pragma unroll
                for (int a = 0; a < E; ++a) {{
                    if ((a & j) == 0) compare_swap(r[a], r[a + j], ((base + a) & k) == 0);
                }}
            }}
        }}
    }}
    #pragma unroll
    for (int a = 0; a < E; ++a) y[offset + base + a] = {cuda_store_from_float(dtype, "r[a]")};
}}
"""


def _sort_global(dtype: str) -> str:
    """A copy, then one launch per bitonic (k, j) step, a thread per compare-exchange, in place on y."""
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}
extern "C" __global__ void copy_rows(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int total) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) y[i] = x[i];
}}

extern "C" __global__ void bitonic_step({ctype}* __restrict__ y, int m, int n, int k, int j) {{
    long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int half = n >> 1;
    if (p >= (long long)m * half) return;
    long long row = p / half;
    int q = (int)(p - row * half);
    int i = ((q & ~(j - 1)) << 1) | (q & (j - 1));
    {ctype}* r = y + row * n;
    {ctype} a = r[i], b = r[i + j];
    if (({cuda_load_as_float(dtype, "a")} > {cuda_load_as_float(dtype, "b")}) == ((i & k) == 0)) {{
        r[i] = b;
        r[i + j] = a;
    }}
}}
"""


SORT_TRITON = f"""{TRITON_HEADER}

@triton.jit
def row_sort(x_ptr, y_ptr, m, n, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < m) & (cols[None, :] < n)
    offsets = rows[:, None].to(tl.int64) * n + cols[None, :]
    values = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(y_ptr + offsets, tl.sort(values, dim=1), mask=mask)
"""


def _sort_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "y", i32(sizes["m"]), i32(sizes["n"]))


def sort_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        only = unsupported(dtype)
        for params in product({"dtype": [dtype], "threads": [64, 128, 256, 512, 1024], "warp_sync": [False, True]}):
            threads = params["threads"]
            launches = lambda s, threads=threads: [
                Launch("row_sort", grid1(s["m"]), _sort_args(s), block1(threads), shared_bytes=4 * s["n"])
            ]
            yield Variant("cuda-bitonic-smem", "cuda", params, _sort_smem(dtype, params["warp_sync"]), launches, unsupported=only)
        for per_thread in (2, 4, 8, 16):
            yield _sort_registers_variant(dtype, per_thread)
        for block in (128, 256, 512, 1024):
            yield Variant(
                "cuda-bitonic-global",
                "cuda",
                {"dtype": dtype, "block": block},
                _sort_global(dtype),
                _global_launches(block),
                unsupported=only,
            )
        for params in product({"dtype": [dtype], "ROWS": [1, 2, 4, 8], "num_warps": [1, 2, 4, 8]}):
            variant = _sort_triton_variant(params)
            if any(variant.unsupported(sizes) is None for sizes in SORT_SIZES):  # else too big for every row length
                yield variant


def _sort_registers_variant(dtype: str, per_thread: int) -> Variant:
    def launches(sizes: Sizes) -> list[Launch]:
        return [Launch("row_sort", grid1(sizes["m"]), _sort_args(sizes), block1(sizes["n"] // per_thread), shared_bytes=4 * sizes["n"])]

    def shape(sizes: Sizes) -> str | None:
        threads = sizes["n"] // per_thread
        return None if 8 <= threads <= 1024 else f"{threads} threads per row"

    return Variant(
        "cuda-bitonic-registers",
        "cuda",
        {"dtype": dtype, "per_thread": per_thread},
        _sort_registers(dtype, per_thread),
        launches,
        unsupported=unsupported(dtype, shape),
    )


def _global_launches(block: int):
    def launches(sizes: Sizes) -> list[Launch]:
        m, n = sizes["m"], sizes["n"]
        steps = [Launch("copy_rows", grid1(cdiv(m * n, block)), ("x", "y", i32(m * n)), block1(block))]
        k = 2
        while k <= n:
            j = k // 2
            while j > 0:
                steps.append(Launch("bitonic_step", grid1(cdiv(m * n // 2, block)), ("y", i32(m), i32(n), i32(k), i32(j)), block1(block)))
                j //= 2
            k *= 2
        return steps

    return launches


def _sort_triton_variant(params: dict[str, Any]) -> Variant:
    rows, warps = params["ROWS"], params["num_warps"]

    def launches(sizes: Sizes) -> list[Launch]:
        return [
            Launch(
                "row_sort",
                grid1(cdiv(sizes["m"], rows)),
                _sort_args(sizes),
                constexprs={"ROWS": rows, "BLOCK_N": sizes["n"]},
                num_warps=warps,
            )
        ]

    def too_big(sizes: Sizes) -> str | None:
        return "more than 64 elements per thread" if rows * sizes["n"] > 64 * 32 * warps else None

    return Variant("triton-sort", "triton", params, SORT_TRITON, launches, unsupported=unsupported(params["dtype"], too_big))


ROW_SORT = Op(
    name="row_sort",
    bound="compute",
    sizes=SORT_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["m"], s["n"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["m"], s["n"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": torch.sort(inputs["x"], dim=1).values},
    reference_code="def reference(x):\n    return torch.sort(x, dim=1).values\n",
    variants=sort_variants,
)

# --- topk ---------------------------------------------------------------------------------------

TOPK_SIZES = [
    {"m": 8, "n": 1024, "k": 8},
    {"m": 4096, "n": 1024, "k": 8},
    {"m": 4096, "n": 1024, "k": 32},
    {"m": 16384, "n": 4096, "k": 8},
    {"m": 16384, "n": 4096, "k": 32},
    {"m": 128, "n": 65536, "k": 32},
]

# Reduce (value, index) pairs across a warp: larger value wins, ties go to the smaller index.
ARGMAX_WARP = f"""
__device__ __forceinline__ void argmax_warp(float& v, int& i) {{
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) {{
        float ov = __shfl_xor_sync({FULL}, v, off);
        int oi = __shfl_xor_sync({FULL}, i, off);
        if (ov > v || (ov == v && oi < i)) {{
            v = ov;
            i = oi;
        }}
    }}
}}
"""

# A thread's descending top-K list in registers: insert v, dropping the smallest.
INSERT_TOP = """
__device__ __forceinline__ void insert_top(float* top, float v) {
    if (v > top[K - 1]) {
        #pragma unroll
        for (int a = K - 1; a > 0; --a) top[a] = top[a] >= v ? top[a] : (top[a - 1] < v ? top[a - 1] : v);
        top[0] = top[0] >= v ? top[0] : v;
    }
}

__device__ __forceinline__ void pop_top(float* top) {
    #pragma unroll
    for (int a = 0; a < K - 1; ++a) top[a] = top[a + 1];
    top[K - 1] = __int_as_float(0xff800000);
}
"""

TOPK_SIGNATURE = 'extern "C" __global__ void topk(const float* __restrict__ x, float* __restrict__ out, int m, int n, int k)'


def _topk_block_lists(top_k: int, threads: int) -> str:
    """One block per row: per-thread lists, then K rounds of a block argmax over the list heads."""
    return f"""{CUDA_HEADER}#define K {top_k}
#define THREADS {threads}
#define WARPS (THREADS / 32)
{ARGMAX_WARP}{INSERT_TOP}
{TOPK_SIGNATURE} {{
    __shared__ float warp_v[WARPS];
    __shared__ int warp_i[WARPS];
    __shared__ int winner;
    const float* row = x + (long long)blockIdx.x * n;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float top[K];
    #pragma unroll
    for (int a = 0; a < K; ++a) top[a] = __int_as_float(0xff800000);
    for (int j = threadIdx.x; j < n; j += THREADS) insert_top(top, row[j]);
    for (int r = 0; r < K; ++r) {{
        float v = top[0];
        int t = threadIdx.x;
        argmax_warp(v, t);
        if (lane == 0) {{
            warp_v[warp] = v;
            warp_i[warp] = t;
        }}
        __syncthreads();
        if (warp == 0) {{
            v = lane < WARPS ? warp_v[lane] : __int_as_float(0xff800000);
            t = lane < WARPS ? warp_i[lane] : THREADS;
            argmax_warp(v, t);
            if (lane == 0) {{
                winner = t;
                out[(long long)blockIdx.x * K + r] = v;
            }}
        }}
        __syncthreads();
        if (threadIdx.x == winner) pop_top(top);
    }}
}}
"""


def _topk_warp_lists(top_k: int, warps: int) -> str:
    """One warp per row (WARPS rows per block): per-lane lists, K rounds of a warp argmax, no barriers."""
    return f"""{CUDA_HEADER}#define K {top_k}
#define WARPS {warps}
{ARGMAX_WARP}{INSERT_TOP}
{TOPK_SIGNATURE} {{
    int lane = threadIdx.x & 31;
    long long row = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (row >= m) return;
    const float* values = x + row * n;
    float top[K];
    #pragma unroll
    for (int a = 0; a < K; ++a) top[a] = __int_as_float(0xff800000);
    for (int j = lane; j < n; j += 32) insert_top(top, values[j]);
    for (int r = 0; r < K; ++r) {{
        float v = top[0];
        int t = lane;
        argmax_warp(v, t);
        if (lane == 0) out[row * K + r] = v;
        if (lane == t) pop_top(top);
    }}
}}
"""


def _topk_passes() -> str:
    """k passes over the row; pass r takes the largest (value, index) ordered after pass r-1's."""
    return f"""{CUDA_HEADER}{ARGMAX_WARP}
{TOPK_SIGNATURE} {{
    __shared__ float warp_v[32];
    __shared__ int warp_i[32];
    __shared__ float last_v;
    __shared__ int last_i;
    const float* row = x + (long long)blockIdx.x * n;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float pv = __int_as_float(0x7f800000);
    int pi = -1;
    for (int r = 0; r < k; ++r) {{
        float bv = __int_as_float(0xff800000);
        int bi = 0x7fffffff;
        for (int j = threadIdx.x; j < n; j += blockDim.x) {{
            float v = row[j];
            bool after = v < pv || (v == pv && j > pi);
            if (after && (v > bv || (v == bv && j < bi))) {{
                bv = v;
                bi = j;
            }}
        }}
        argmax_warp(bv, bi);
        if (lane == 0) {{
            warp_v[warp] = bv;
            warp_i[warp] = bi;
        }}
        __syncthreads();
        if (warp == 0) {{
            bv = lane < warps ? warp_v[lane] : __int_as_float(0xff800000);
            bi = lane < warps ? warp_i[lane] : 0x7fffffff;
            argmax_warp(bv, bi);
            if (lane == 0) {{
                last_v = bv;
                last_i = bi;
                out[(long long)blockIdx.x * k + r] = bv;
            }}
        }}
        __syncthreads();
        pv = last_v;
        pi = last_i;
    }}
}}
"""


def _topk_sort_select() -> str:
    """The whole row sorted descending in shared memory; the first k written."""
    return f"""{CUDA_HEADER}{_bitonic_smem(True)}
{TOPK_SIGNATURE} {{
    extern __shared__ float s[];
    const float* row = x + (long long)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = row[i];
    __syncthreads();
    bitonic_smem(s, n, true);
    __syncthreads();
    for (int i = threadIdx.x; i < k; i += blockDim.x) out[(long long)blockIdx.x * k + i] = s[i];
}}
"""


TOPK_TRITON_SORT = f"""{TRITON_HEADER}

@triton.jit
def topk(x_ptr, out_ptr, m, n, k, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    values = tl.load(x_ptr + row * n + cols, mask=cols < n, other=float("-inf"))
    tl.store(out_ptr + row * k + cols, tl.sort(values, descending=True), mask=cols < k)
"""

TOPK_TRITON_CHUNKED = f"""{TRITON_HEADER}

@triton.jit
def topk(x_ptr, out_ptr, m, n, k, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    best = tl.full([CHUNK], float("-inf"), tl.float32)
    for start in range(0, n, CHUNK):
        values = tl.load(x_ptr + row * n + start + cols, mask=start + cols < n, other=float("-inf"))
        # best is descending, the chunk ascending: their elementwise max holds the CHUNK largest.
        best = tl.sort(tl.maximum(best, tl.sort(values)), descending=True)
    tl.store(out_ptr + row * k + cols, best, mask=cols < k)
"""


def _topk_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "out", i32(sizes["m"]), i32(sizes["n"]), i32(sizes["k"]))


def _k_is(top_k: int):
    return lambda sizes: None if sizes["k"] == top_k else f"written for k={top_k}"


def _row_in_shared(sizes: Sizes) -> str | None:
    if sizes["n"] & (sizes["n"] - 1):
        return "bitonic sort needs n a power of two"
    return "row exceeds shared memory" if 4 * sizes["n"] > MAX_SHARED_BYTES else None


def topk_variants() -> Iterable[Variant]:
    for params in product({"K": [8, 32], "threads": [64, 128, 256, 512, 1024]}):
        threads = params["threads"]
        launches = lambda s, threads=threads: [Launch("topk", grid1(s["m"]), _topk_args(s), block1(threads))]
        yield Variant(
            "cuda-block-lists",
            "cuda",
            params,
            _topk_block_lists(params["K"], threads),
            launches,
            unsupported=unsupported(None, _k_is(params["K"])),
        )
    for params in product({"K": [8, 32], "warps": [1, 4, 8]}):
        warps = params["warps"]
        launches = lambda s, warps=warps: [Launch("topk", grid1(cdiv(s["m"], warps)), _topk_args(s), block1(32 * warps))]
        yield Variant(
            "cuda-warp-lists",
            "cuda",
            params,
            _topk_warp_lists(params["K"], warps),
            launches,
            unsupported=unsupported(None, _k_is(params["K"])),
        )
    for threads in (64, 128, 256, 512, 1024):
        launches = lambda s, threads=threads: [Launch("topk", grid1(s["m"]), _topk_args(s), block1(threads))]
        yield Variant("cuda-k-passes", "cuda", {"threads": threads}, _topk_passes(), launches)
    for threads in (256, 512, 1024):
        launches = lambda s, threads=threads: [Launch("topk", grid1(s["m"]), _topk_args(s), block1(threads), shared_bytes=4 * s["n"])]
        yield Variant(
            "cuda-sort-select", "cuda", {"threads": threads}, _topk_sort_select(), launches, unsupported=unsupported(None, _row_in_shared)
        )
    for warps in (2, 4, 8, 16):
        launches = lambda s, warps=warps: [Launch("topk", grid1(s["m"]), _topk_args(s), constexprs={"BLOCK_N": s["n"]}, num_warps=warps)]
        fits = lambda s, warps=warps: "more than 64 elements per thread" if s["n"] > 64 * 32 * warps else None
        yield Variant("triton-sort", "triton", {"num_warps": warps}, TOPK_TRITON_SORT, launches, unsupported=unsupported(None, fits))
    for params in product({"CHUNK": [64, 128, 256, 512, 1024], "num_warps": [2, 4, 8]}):
        chunk, warps = params["CHUNK"], params["num_warps"]
        launches = lambda s, chunk=chunk, warps=warps: [
            Launch("topk", grid1(s["m"]), _topk_args(s), constexprs={"CHUNK": chunk}, num_warps=warps)
        ]
        yield Variant("triton-chunked", "triton", params, TOPK_TRITON_CHUNKED, launches)


TOPK = Op(
    name="topk",
    bound="memory",
    sizes=TOPK_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["m"], s["n"]))},
    outputs=lambda s: {"out": TensorSpec((s["m"], s["k"]))},
    reference=lambda torch, inputs, sizes: {"out": torch.topk(inputs["x"], sizes["k"], dim=1).values},
    reference_code="def reference(x, k):\n    return torch.topk(x, k, dim=1).values\n",
    variants=topk_variants,
    compare_sorted=True,
)

OPS = [ROW_SORT, TOPK]
