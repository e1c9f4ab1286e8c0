"""Scans and counting: row-wise inclusive prefix sum (cumsum) and histogram.

- cumsum: one thread per row serially (uncoalesced, the bad case); one block per row that
  scans chunks of BLOCK*VEC elements with a carry, with the block scan done by Hillis-Steele
  (double-buffered shared memory), Blelloch (work-efficient up/down sweep, bank conflicts
  included) or warp shuffles (__shfl_up_sync, then a scan of warp totals); one warp per
  row; Triton tl.cumsum or tl.associative_scan over whole rows, or chunked with a carry.
  Vector width (elements per thread scanned in registers), block size, num_warps; fp32 and
  fp16 problems (fp32 accumulation), many short rows and fewer long ones.
- histogram: global atomics per element; grid-stride kernels whose atomics go to global
  memory, to a shared-memory histogram per block or per warp, each with or without warp
  aggregation (__match_any_sync: one atomic per distinct value in a warp); Triton global
  atomics (acq_rel/relaxed) and tl.histogram per block. Bins (64/256/4096) and how many of
  them are hit (a skewed, highly contended problem) are part of the problem; every variant
  clears the counts first (a ZERO launch).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import MAX_SHARED_BYTES, pack_struct
from workshop.corpus.ops.rowkit import TRITON_HEADER, divisible, next_pow2, resident_blocks, unsupported
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
    cuda_store_from_float,
    grid1,
    i32,
    product,
)

# --- cumsum -------------------------------------------------------------------------------------

CUMSUM_SIZES = [
    {"m": 4, "n": 256, "dtype": "f32"},
    {"m": 1024, "n": 1000, "dtype": "f32"},
    {"m": 65536, "n": 256, "dtype": "f32"},
    {"m": 8192, "n": 4096, "dtype": "f32"},
    {"m": 1024, "n": 1000, "dtype": "f16"},
    {"m": 8192, "n": 4096, "dtype": "f16"},
]
CUMSUM_VECTORS = {"f32": (1, 2, 4), "f16": (2, 4, 8)}
FULL = "0xffffffffu"

# Block-wide exclusive scan of one float per thread (BLOCK threads); `total` gets the block's sum.
BLOCK_SCANS = {
    "hillis-steele": """
__device__ __forceinline__ float block_exclusive(float v, float& total) {
    __shared__ float s[2][BLOCK];
    int t = threadIdx.x, cur = 0;
    s[0][t] = v;
    __syncthreads();
    for (int off = 1; off < BLOCK; off <<= 1) {
        float sum = s[cur][t] + (t >= off ? s[cur][t - off] : 0.0f);
        s[cur ^ 1][t] = sum;
        cur ^= 1;
        __syncthreads();
    }
    float excl = t > 0 ? s[cur][t - 1] : 0.0f;
    total = s[cur][BLOCK - 1];
    __syncthreads();
    return excl;
}
""",
    "blelloch": """
__device__ __forceinline__ float block_exclusive(float v, float& total) {
    __shared__ float s[BLOCK];
    __shared__ float sum;
    int t = threadIdx.x;
    s[t] = v;
    for (int d = 1; d < BLOCK; d <<= 1) {
        __syncthreads();
        int i = (t + 1) * 2 * d - 1;
        if (i < BLOCK) s[i] += s[i - d];
    }
    __syncthreads();
    if (t == 0) {
        sum = s[BLOCK - 1];
        s[BLOCK - 1] = 0.0f;
    }
    for (int d = BLOCK / 2; d >= 1; d >>= 1) {
        __syncthreads();
        int i = (t + 1) * 2 * d - 1;
        if (i < BLOCK) {
            float left = s[i - d];
            s[i - d] = s[i];
            s[i] += left;
        }
    }
    __syncthreads();
    float excl = s[t];
    total = sum;
    __syncthreads();
    return excl;
}
""",
    "shuffle": f"""
__device__ __forceinline__ float warp_inclusive(float v) {{
    int lane = threadIdx.x & 31;
    #pragma unroll
    for (int off = 1; off < 32; off <<= 1) {{
        float other = __shfl_up_sync({FULL}, v, off);
        if (lane >= off) v += other;
    }}
    return v;
}}

__device__ __forceinline__ float block_exclusive(float v, float& total) {{
    __shared__ float warp_sums[BLOCK / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float incl = warp_inclusive(v);
    float excl = __shfl_up_sync({FULL}, incl, 1);
    if (lane == 0) excl = 0.0f;
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {{
        float w = warp_inclusive(lane < BLOCK / 32 ? warp_sums[lane] : 0.0f);
        if (lane < BLOCK / 32) warp_sums[lane] = w;
    }}
    __syncthreads();
    if (warp > 0) excl += warp_sums[warp - 1];
    total = warp_sums[BLOCK / 32 - 1];
    __syncthreads();
    return excl;
}}
""",
}


def _load_pack(dtype: str, vector: int, source: str, condition: str) -> str:
    """Loads VEC elements at `source` as floats into v[], zeros where `condition` fails."""
    return f"""        float v[VEC];
        if ({condition}) {{
            Pack p = *reinterpret_cast<const Pack*>({source});
            #pragma unroll
            for (int e = 0; e < VEC; ++e) v[e] = {cuda_load_as_float(dtype, "p.v[e]")};
        }} else {{
            #pragma unroll
            for (int e = 0; e < VEC; ++e) v[e] = 0.0f;
        }}
        #pragma unroll
        for (int e = 1; e < VEC; ++e) v[e] += v[e - 1];
"""


def _store_pack(dtype: str, target: str, condition: str, offset: str) -> str:
    return f"""        if ({condition}) {{
            Pack p;
            #pragma unroll
            for (int e = 0; e < VEC; ++e) p.v[e] = {cuda_store_from_float(dtype, f"v[e] + {offset}")};
            *reinterpret_cast<Pack*>({target}) = p;
        }}
"""


def _cumsum_block(dtype: str, algo: str, block: int, vector: int) -> str:
    """One block per row: chunks of BLOCK*VEC, each thread scans VEC in registers, then the block scan."""
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}
#define BLOCK {block}
#define VEC {vector}
{pack_struct(dtype, vector)}{BLOCK_SCANS[algo]}
extern "C" __global__ void __launch_bounds__(BLOCK) cumsum(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int m, int n) {{
    const {ctype}* xr = x + (long long)blockIdx.x * n;
    {ctype}* yr = y + (long long)blockIdx.x * n;
    float carry = 0.0f;
    for (int base = 0; base < n; base += BLOCK * VEC) {{
        int i = base + threadIdx.x * VEC;
{_load_pack(dtype, vector, "xr + i", "i < n")}        float total;
        float offset = block_exclusive(v[VEC - 1], total) + carry;
{_store_pack(dtype, "yr + i", "i < n", "offset")}        carry += total;
    }}
}}
"""


def _cumsum_warp_rows(dtype: str, warps: int, vector: int) -> str:
    """One warp per row: chunks of 32*VEC, shuffle scan of the per-thread totals, carry by shuffle."""
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}
#define WARPS {warps}
#define VEC {vector}
{pack_struct(dtype, vector)}
extern "C" __global__ void cumsum(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int m, int n) {{
    int lane = threadIdx.x & 31;
    long long row = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (row >= m) return;
    const {ctype}* xr = x + row * n;
    {ctype}* yr = y + row * n;
    float carry = 0.0f;
    for (int base = 0; base < n; base += 32 * VEC) {{
        int i = base + lane * VEC;
{_load_pack(dtype, vector, "xr + i", "i < n")}        float incl = v[VEC - 1];
        #pragma unroll
        for (int off = 1; off < 32; off <<= 1) {{
            float other = __shfl_up_sync({FULL}, incl, off);
            if (lane >= off) incl += other;
        }}
        float excl = __shfl_up_sync({FULL}, incl, 1);
        if (lane == 0) excl = 0.0f;
        excl += carry;
{_store_pack(dtype, "yr + i", "i < n", "excl")}        carry += __shfl_sync({FULL}, incl, 31);
    }}
}}
"""


def _cumsum_serial(dtype: str) -> str:
    ctype = CUDA_TYPES[dtype]
    return f"""{CUDA_HEADER}
extern "C" __global__ void cumsum(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, int m, int n) {{
    long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m) return;
    const {ctype}* xr = x + row * n;
    {ctype}* yr = y + row * n;
    float acc = 0.0f;
    for (int j = 0; j < n; ++j) {{
        acc += {cuda_load_as_float(dtype, "xr[j]")};
        yr[j] = {cuda_store_from_float(dtype, "acc")};
    }}
}}
"""


def _cumsum_triton_rows(scan: str) -> str:
    """ROWS whole rows per program (BLOCK_N = n rounded up to a power of two)."""
    combine = "\n\n@triton.jit\ndef add(a, b):\n    return a + b\n" if scan == "associative_scan" else ""
    call = "tl.associative_scan(v, 1, add)" if scan == "associative_scan" else "tl.cumsum(v, axis=1)"
    return f"""{TRITON_HEADER}{combine}

@triton.jit
def cumsum(x_ptr, y_ptr, m, n, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < m) & (cols[None, :] < n)
    offsets = rows[:, None].to(tl.int64) * n + cols[None, :]
    v = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offsets, {call}.to(y_ptr.dtype.element_ty), mask=mask)
"""


CUMSUM_TRITON_CHUNKED = f"""{TRITON_HEADER}

@triton.jit
def cumsum(x_ptr, y_ptr, m, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    carry = 0.0
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n
        v = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * n + cols, (tl.cumsum(v, axis=0) + carry).to(y_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(v, axis=0)
"""


def _cumsum_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "y", i32(sizes["m"]), i32(sizes["n"]))


def cumsum_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        only = unsupported(dtype)
        for block in (32, 128, 256):
            launches = lambda s, block=block: [Launch("cumsum", grid1(cdiv(s["m"], block)), _cumsum_args(s), block1(block))]
            yield Variant("cuda-serial", "cuda", {"dtype": dtype, "block": block}, _cumsum_serial(dtype), launches, unsupported=only)
        for params in product(
            {"dtype": [dtype], "algo": list(BLOCK_SCANS), "block": [128, 256, 512, 1024], "vector": list(CUMSUM_VECTORS[dtype])}
        ):
            block, vector = params["block"], params["vector"]
            launches = lambda s, block=block: [Launch("cumsum", grid1(s["m"]), _cumsum_args(s), block1(block))]
            code = _cumsum_block(dtype, params["algo"], block, vector)
            yield Variant("cuda-block-scan", "cuda", params, code, launches, unsupported=unsupported(dtype, divisible("n", vector)))
        for params in product({"dtype": [dtype], "warps": [4, 8], "vector": list(CUMSUM_VECTORS[dtype])}):
            warps, vector = params["warps"], params["vector"]
            launches = lambda s, warps=warps: [Launch("cumsum", grid1(cdiv(s["m"], warps)), _cumsum_args(s), block1(32 * warps))]
            code = _cumsum_warp_rows(dtype, warps, vector)
            yield Variant("cuda-warp-rows", "cuda", params, code, launches, unsupported=unsupported(dtype, divisible("n", vector)))
        for params in product({"dtype": [dtype], "scan": ["cumsum", "associative_scan"], "ROWS": [1, 4], "num_warps": [1, 2, 4, 8]}):
            yield _cumsum_triton_rows_variant(params)
        for params in product({"dtype": [dtype], "BLOCK": [256, 1024], "num_warps": [2, 4, 8]}):
            block, warps = params["BLOCK"], params["num_warps"]
            launches = lambda s, block=block, warps=warps: [
                Launch("cumsum", grid1(s["m"]), _cumsum_args(s), constexprs={"BLOCK": block}, num_warps=warps)
            ]
            yield Variant("triton-chunked", "triton", params, CUMSUM_TRITON_CHUNKED, launches, unsupported=only)


def _cumsum_triton_rows_variant(params: dict[str, Any]) -> Variant:
    rows, warps = params["ROWS"], params["num_warps"]

    def launches(sizes: Sizes) -> list[Launch]:
        constexprs = {"ROWS": rows, "BLOCK_N": next_pow2(sizes["n"])}
        return [Launch("cumsum", grid1(cdiv(sizes["m"], rows)), _cumsum_args(sizes), constexprs=constexprs, num_warps=warps)]

    def too_big(sizes: Sizes) -> str | None:
        elements = rows * next_pow2(sizes["n"])
        return "more than 128 elements per thread" if elements > 128 * 32 * warps else None

    return Variant(
        "triton-rows", "triton", params, _cumsum_triton_rows(params["scan"]), launches, unsupported=unsupported(params["dtype"], too_big)
    )


CUMSUM = Op(
    name="cumsum",
    bound="memory",
    sizes=CUMSUM_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["m"], s["n"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["m"], s["n"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": torch.cumsum(inputs["x"], dim=1, dtype=torch.float32).to(inputs["x"].dtype)},
    reference_code="def reference(x):\n    return torch.cumsum(x, dim=1, dtype=torch.float32).to(x.dtype)\n",
    variants=cumsum_variants,
    # Partial sums of up to 4096 normals reach ~±150; fp32 rounding along a different
    # summation order differs by ~sqrt(n)·eps·|partial| ≈ 2e-4 where the sum crosses zero.
    tolerance={"f32": 1e-3, "f16": 1e-2},
)

# --- histogram ----------------------------------------------------------------------------------

# Values uniform in [0, range): range < bins concentrates every count on a few hot bins. That
# one is smaller: same-address global atomics serialize (16M onto 64 bins took ~5 ms on an H100).
HISTOGRAM_SIZES = [
    {"n": 4096, "bins": 256, "range": 256},
    {"n": 1 << 24, "bins": 64, "range": 64},
    {"n": 1 << 24, "bins": 256, "range": 256},
    {"n": 1 << 24, "bins": 4096, "range": 4096},
    {"n": 1 << 20, "bins": 256, "range": 4},
    {"n": 1 << 26, "bins": 256, "range": 256},
]
# (threads per block, resident blocks per SM the grid is sized for)
GRID_SHAPES = [(256, 8), (256, 32), (1024, 2)]


def _histogram_global(vector: int) -> str:
    return f"""{CUDA_HEADER}
#define VEC {vector}
{pack_struct("i32", vector)}
extern "C" __global__ void histogram(const int* __restrict__ x, int* __restrict__ counts, int n, int bins) {{
    long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i >= n) return;
    Pack p = *reinterpret_cast<const Pack*>(x + i);
    #pragma unroll
    for (int e = 0; e < VEC; ++e) atomicAdd(counts + p.v[e], 1);
}}
"""


def _histogram_grid_stride(private: str, aggregate: bool, vector: int) -> str:
    """Grid-stride loop over warp-uniform chunks (so every lane of a warp takes part in __match_any_sync).

    `private`: "none" counts straight into global memory, "block" into one shared histogram per
    block, "warp" into one per warp; the private histograms are added to the global one at the end.
    """
    target = {"none": "counts", "block": "hist", "warp": "hist + (threadIdx.x >> 5) * bins"}[private]
    if aggregate:
        count = f"""            unsigned peers = __match_any_sync(0xffffffffu, value);
            if (value >= 0 && lane == __ffs(peers) - 1) atomicAdd({target} + value, __popc(peers));"""
    else:
        count = f"            if (value >= 0) atomicAdd({target} + value, 1);"
    setup, flush = "", ""
    if private != "none":
        copies = "(blockDim.x >> 5)" if private == "warp" else "1"
        setup = f"""    extern __shared__ int hist[];
    for (int b = threadIdx.x; b < {copies} * bins; b += blockDim.x) hist[b] = 0;
    __syncthreads();
"""
        flush = f"""    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {{
        int sum = 0;
        for (int c = 0; c < {copies}; ++c) sum += hist[c * bins + b];
        if (sum) atomicAdd(counts + b, sum);
    }}
"""
    return f"""{CUDA_HEADER}
#define VEC {vector}
{pack_struct("i32", vector)}
extern "C" __global__ void histogram(const int* __restrict__ x, int* __restrict__ counts, int n, int bins) {{
{setup}    int lane = threadIdx.x & 31;
    long long stride = (long long)gridDim.x * blockDim.x * VEC;
    for (long long base = ((long long)blockIdx.x * blockDim.x + (threadIdx.x & ~31)) * VEC; base < n; base += stride) {{
        long long i = base + lane * VEC;
        Pack p;
        if (i < n) p = *reinterpret_cast<const Pack*>(x + i);
        #pragma unroll
        for (int e = 0; e < VEC; ++e) {{
            int value = i < n ? p.v[e] : -1;
{count}
        }}
    }}
{flush}}}
"""


def _histogram_triton(kind: str) -> str:
    if kind == "atomic-relaxed" or kind == "atomic-acq_rel":
        sem = kind.split("-", 1)[1]
        body = f'    tl.atomic_add(counts_ptr + values, tl.full([BLOCK], 1, tl.int32), mask=mask, sem="{sem}")'
    else:
        # Masked lanes count as value 0; take them off bin 0 again.
        body = """    hist = tl.histogram(values, BINS)
    bins = tl.arange(0, BINS)
    hist -= tl.where(bins == 0, BLOCK - tl.sum(mask.to(tl.int32), axis=0), 0)
    tl.atomic_add(counts_ptr + bins, hist, mask=hist != 0, sem="relaxed")"""
    return f"""{TRITON_HEADER}

@triton.jit
def histogram(x_ptr, counts_ptr, n, bins, BLOCK: tl.constexpr, BINS: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    values = tl.load(x_ptr + offsets, mask=mask, other=0)
{body}
"""


def _histogram_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "counts", i32(sizes["n"]), i32(sizes["bins"]))


def histogram_variants() -> Iterable[Variant]:
    for params in product({"block": [128, 256, 512, 1024], "vector": [1, 4]}):
        block, vector = params["block"], params["vector"]
        launches = lambda s, block=block, vector=vector: [
            Launch(ZERO, grid1(1), ("counts",)),
            Launch("histogram", grid1(cdiv(s["n"], block * vector)), _histogram_args(s), block1(block)),
        ]
        yield Variant(
            "cuda-global-atomic", "cuda", params, _histogram_global(vector), launches, unsupported=unsupported(None, divisible("n", vector))
        )
    for params in product({"private": ["none", "block", "warp"], "aggregate": [False, True], "vector": [1, 4], "grid": GRID_SHAPES}):
        yield _grid_stride_variant(params)
    for params in product({"kind": ["atomic-acq_rel", "atomic-relaxed"], "BLOCK": [1024, 4096], "num_warps": [4, 8]}):
        yield _histogram_triton_variant(params)
    for params in product({"kind": ["tl.histogram"], "BLOCK": [1024, 4096, 16384], "num_warps": [4, 8]}):
        yield _histogram_triton_variant(params)


def _grid_stride_variant(params: dict[str, Any]) -> Variant:
    (block, per_sm), vector, private = params["grid"], params["vector"], params["private"]
    copies = block // 32 if private == "warp" else 1

    def launches(sizes: Sizes) -> list[Launch]:
        blocks = resident_blocks(cdiv(sizes["n"], block * vector), per_sm)
        shared = copies * sizes["bins"] * 4 if private != "none" else 0
        return [
            Launch(ZERO, grid1(1), ("counts",)),
            Launch("histogram", grid1(blocks), _histogram_args(sizes), block1(block), shared_bytes=shared),
        ]

    def too_much_shared(sizes: Sizes) -> str | None:
        return "private histograms exceed shared memory" if private != "none" and copies * sizes["bins"] * 4 > MAX_SHARED_BYTES else None

    flat = {"private": private, "aggregate": params["aggregate"], "vector": vector, "block": block, "blocks_per_sm": per_sm}
    return Variant(
        "cuda-grid-stride",
        "cuda",
        flat,
        _histogram_grid_stride(private, params["aggregate"], vector),
        launches,
        unsupported=unsupported(None, divisible("n", vector), too_much_shared),
    )


def _histogram_triton_variant(params: dict[str, Any]) -> Variant:
    block, warps = params["BLOCK"], params["num_warps"]

    def launches(sizes: Sizes) -> list[Launch]:
        constexprs = {"BLOCK": block, "BINS": sizes["bins"]}
        return [
            Launch(ZERO, grid1(1), ("counts",)),
            Launch("histogram", grid1(cdiv(sizes["n"], block)), _histogram_args(sizes), constexprs=constexprs, num_warps=warps),
        ]

    def too_wide(sizes: Sizes) -> str | None:
        # tl.histogram of 16384 values into 4096 bins hung an H100 run (no progress for 120 s).
        return "BLOCK x BINS above 2**25" if params["kind"] == "tl.histogram" and block * sizes["bins"] > 1 << 25 else None

    family = "triton-histogram" if params["kind"] == "tl.histogram" else "triton-atomic"
    return Variant(family, "triton", params, _histogram_triton(params["kind"]), launches, unsupported=too_wide)


HISTOGRAM = Op(
    name="histogram",
    bound="memory",
    sizes=HISTOGRAM_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],), "i32", f"randint:0:{s['range']}")},
    outputs=lambda s: {"counts": TensorSpec((s["bins"],), "i32")},
    reference=lambda torch, inputs, sizes: {"counts": torch.bincount(inputs["x"], minlength=sizes["bins"]).to(torch.int32)},
    reference_code="def reference(x, bins):\n    return torch.bincount(x, minlength=bins).to(torch.int32)\n",
    variants=histogram_variants,
)

OPS = [CUMSUM, HISTOGRAM]
