"""Data reuse in products of a matrix with itself or another: covariance and pairwise_distance.

Neighbours of gemm and attention's unfused scores kernels: every output reads a whole column
(covariance) or a whole row pair (distances), so a naive kernel re-reads global memory for
each output while shared-memory and register tiles reuse every load many times. The question
the forecaster gets wrong is by how much tiling wins, per size; the knobs below are turned one
at a time (`around`: a base and its single-axis edits).

- covariance: cov = (x - x.mean(0))ᵀ (x - x.mean(0)) / (n - 1) for x (n, d), fp32 out, x in
  fp32 or fp16 (fp32 accumulation); n 256…65536, d 16…512. Every family has `passes`: "two"
  (a column-means launch first, atomics over row chunks, then the product of centered
  values) or "one" (sums of x_i, x_j and x_i·x_j in one launch: cov = (sxy - sx·sy/n)/(n-1)),
  and `symmetric`: every output block computed, or only blocks with i <= j, each result
  mirrored to (j, i). CUDA: cuda-naive (a thread per output walking all n rows; block shape,
  `order` ij (threadIdx.x along j: coalesced store) or ji (the store strided by d), restrict);
  cuda-warp-per-output (lanes split the rows: loads d apart, uncoalesced, but 32x the
  parallelism for small d; warps per block, restrict); cuda-smem-tiled (TILE x TILE outputs,
  TILE rows of both column blocks staged per step; tile 8/16/32, `layout` rows ([k][feature],
  conflict-free) or columns ([feature][k]: TILE-way bank conflicts unless `pad` 1), restrict);
  cuda-register-tiled (BD x BD block tile BK rows deep, TM x TN outputs per thread). Triton:
  triton-dot (tl.dot of BLOCK_D x BLOCK_N by BLOCK_N x BLOCK_D tiles; num_warps, fp32
  input_precision ieee or tf32; fp16 two-pass rounds the centered values to fp16, one-pass
  multiplies the raw fp16 values exactly) and triton-broadcast (a [BLOCK_D, BLOCK_N, BLOCK_D]
  product summed over rows, no tl.dot).
- pairwise_distance: out[i, j] = ||x_i - y_j||² for x (m, d), y (n, d), fp32 out, inputs fp32
  or fp16; m, n 256…8192, d 16…256. CUDA families carry `formula`: "diff" (sum of squared
  differences) or "norms" (||x||² + ||y||² - 2 x·y: one FMA per element instead of two, the
  row norms from a first launch per matrix): cuda-naive (a thread per output looping over d;
  block shape, `order` ij (y rows d apart across a warp) or ji (x rows d apart, the store
  strided), restrict); cuda-smem-tiled (TILE rows of x and of y, TILE features per step; tile,
  `pad` (reads of Ys[tx][k] are TILE floats apart: bank conflicts unless padded), restrict);
  cuda-register-tiled (BM x BN outputs, BK features deep, TM x TN per thread). Triton:
  triton-dot (norms accumulated beside tl.dot in the same loop; BLOCK_M/N/D, num_warps; ieee
  only: its tf32 variant was wrong on the H100) and triton-broadcast (a [BLOCK_M, BLOCK_N, BLOCK_D] difference tensor).

Tolerance 1e-3 for both (fp32 outputs; relative to 1 + |expected|), set by the TF32 variants
(operands cut to 10 mantissa bits). Emulated in numpy with truncated operands: covariance
two-pass at n = 65536 is off by 3.5e-4 (a diagonal variance, a sum of positive terms, comes out
low). A tf32 pairwise distance was not: truncation alone put x·y 3e-4 off at d = 256, but on
the H100 the tensor cores' tf32 with the norms trick missed by up to 30 of ~512 (three of four
sizes wrong), so pairwise_distance has no tf32 variant. The exact fp32
variants stay near 1e-6, the norms trick included (x and y are independent: distances ~2d,
no cancellation), and one-pass sums at n = 65536 near 5e-6.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.gemm import cuda_prelude
from workshop.corpus.ops.rowkit import TRITON_HEADER, Check, unsupported
from workshop.corpus.spec import (
    ZERO,
    Launch,
    Op,
    Sizes,
    TensorSpec,
    Variant,
    around,
    cdiv,
    cuda_pointer,
    grid1,
    i32,
)

COV_SIZES = [
    {"n": 256, "d": 16, "dtype": "f32"},
    {"n": 5000, "d": 100, "dtype": "f32"},
    {"n": 65536, "d": 64, "dtype": "f32"},
    {"n": 16384, "d": 512, "dtype": "f32"},
    {"n": 5000, "d": 100, "dtype": "f16"},
    {"n": 16384, "d": 512, "dtype": "f16"},
]
PAIRWISE_SIZES = [
    {"m": 256, "n": 256, "d": 16, "dtype": "f32"},
    {"m": 1000, "n": 3000, "d": 100, "dtype": "f32"},
    {"m": 8192, "n": 4096, "d": 32, "dtype": "f32"},
    {"m": 4096, "n": 4096, "d": 256, "dtype": "f32"},
    {"m": 1000, "n": 3000, "d": 100, "dtype": "f16"},
    {"m": 4096, "n": 4096, "d": 256, "dtype": "f16"},
]
MEAN_ROWS = 1024  # rows of x one column-means block (or Triton program) sums before its atomicAdd
WARP_MAX_MACS = 3e8  # warp-per-output covariance: its d-strided loads take over 20 ms beyond n·d²
NAIVE_JI_MAX_MACS = 1.1e9  # pairwise naive with x rows d apart across a warp: capped at m·n·d


def _at_most_macs(limit: float, *extents: str) -> Check:
    """Slow variants run only the problems whose product of `extents` stays under `limit`."""

    def reason(sizes: Sizes) -> str | None:
        work = 1
        for name in extents:
            work *= sizes[name]
        return None if work <= limit else f"{'·'.join(extents)} > {limit:g}: too slow"

    return reason


def _restrict_ptr(restrict: bool) -> Callable[[str, str, bool], str]:
    """cuda_pointer with this variant's `__restrict__` choice; `const` for inputs."""
    return lambda ctype, name, const=True: cuda_pointer(ctype, name, restrict, const)


# --- covariance: CUDA ---------------------------------------------------------------------------

COLUMN_MEANS = """
// mean[c] += (sum of MEAN_ROWS rows of column c) / n: blocks of 32 columns x 8 row strides, one atomic per column
extern "C" __global__ void column_means(const T* x, float* mean, int n, int d) {
    __shared__ float part[8][33];
    int col = blockIdx.x * 32 + threadIdx.x;
    int first = blockIdx.y * MEAN_ROWS, end = min(n, first + MEAN_ROWS);
    float s = 0.0f;
    if (col < d)
        for (int r = first + threadIdx.y; r < end; r += 8) s += ld(x[(size_t)r * d + col]);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < d) {
        for (int k = 1; k < 8; ++k) s += part[k][threadIdx.x];
        atomicAdd(&mean[col], s / n);
    }
}
"""


def _cov_prelude(dtype: str, two_pass: bool, defines: dict[str, int]) -> str:
    lines = "".join(f"#define {name} {value}\n" for name, value in defines.items())
    means = f"#define MEAN_ROWS {MEAN_ROWS}\n{COLUMN_MEANS}" if two_pass else ""
    return f"{cuda_prelude(dtype)}{lines}{means}\n"


def _cov_signature(two_pass: bool, restrict: bool, launch_bounds: str = "") -> str:
    ptr = _restrict_ptr(restrict)
    mean = f"{ptr('float', 'mean')}, " if two_pass else ""
    return f'extern "C" __global__ void {launch_bounds}covariance({ptr("T", "x")}, {mean}{ptr("float", "cov", False)}, int n, int d)'


def _cov_result(two_pass: bool, acc: str, si: str, sj: str) -> str:
    """The covariance from the accumulators: centered products, or raw products and the two column sums."""
    return f"{acc} / (n - 1)" if two_pass else f"({acc} - {si} * {sj} / n) / (n - 1)"


def _cov_store(symmetric: bool, i: str, j: str, value: str, pad: str) -> str:
    mirror = f"\n{pad}cov[{j} * d + {i}] = c;" if symmetric else ""
    return f"{pad}float c = {value};\n{pad}cov[{i} * d + {j}] = c;{mirror}\n"


def cov_naive_code(dtype: str, p: dict[str, Any]) -> str:
    """A thread per output (i, j) walking every row: columns i and j re-read from global memory per output."""
    two = p["passes"] == "two"
    fast, slow = ("j", "i") if p["order"] == "ij" else ("i", "j")
    skip = "    if (i > j) return;  // the lower triangle mirrors the upper\n" if p["symmetric"] else ""
    if two:
        loop = """    float mi = mean[i], mj = mean[j], acc = 0.0f;
    for (int k = 0; k < n; ++k)
        acc += (ld(x[k * d + i]) - mi) * (ld(x[k * d + j]) - mj);
"""
    else:
        loop = """    float si = 0.0f, sj = 0.0f, acc = 0.0f;
    for (int k = 0; k < n; ++k) {
        float a = ld(x[k * d + i]), b = ld(x[k * d + j]);
        si += a;
        sj += b;
        acc += a * b;
    }
"""
    return f"""{_cov_prelude(dtype, two, {})}{_cov_signature(two, p["restrict"])} {{
    int {fast} = blockIdx.x * blockDim.x + threadIdx.x;
    int {slow} = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= d || j >= d) return;
{skip}{loop}{_cov_store(p["symmetric"], "i", "j", _cov_result(two, "acc", "si", "sj"), "    ")}}}
"""


def cov_warp_code(dtype: str, p: dict[str, Any]) -> str:
    """A warp per output: lanes take every 32nd row, so one load instruction touches 32 rows d floats apart."""
    two = p["passes"] == "two"
    skip = "    if (i > j) return;  // whole warps: the lower triangle mirrors the upper\n" if p["symmetric"] else ""
    if two:
        loop = """    float mi = mean[i], mj = mean[j], acc = 0.0f;
    for (int k = lane; k < n; k += 32)
        acc += (ld(x[k * d + i]) - mi) * (ld(x[k * d + j]) - mj);
"""
        reduce_vars = ("acc",)
    else:
        loop = """    float si = 0.0f, sj = 0.0f, acc = 0.0f;
    for (int k = lane; k < n; k += 32) {
        float a = ld(x[k * d + i]), b = ld(x[k * d + j]);
        si += a;
        sj += b;
        acc += a * b;
    }
"""
        reduce_vars = ("acc", "si", "sj")
    shuffles = "".join(f"        {v} += __shfl_xor_sync(0xffffffffu, {v}, offset);\n" for v in reduce_vars)
    return f"""{_cov_prelude(dtype, two, {"WARPS": p["warps"]})}{_cov_signature(two, p["restrict"])} {{
    int output = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (output >= d * d) return;
    int i = output / d, j = output % d;
{skip}{loop}    for (int offset = 16; offset > 0; offset >>= 1) {{
{shuffles}    }}
    if (lane == 0) {{
{_cov_store(p["symmetric"], "i", "j", _cov_result(two, "acc", "si", "sj"), "        ")}    }}
}}
"""


def cov_smem_code(dtype: str, p: dict[str, Any]) -> str:
    """TILE rows of column blocks i0.. and j0.. in shared memory; each loaded value is used TILE times."""
    two = p["passes"] == "two"
    rows = p["layout"] == "rows"
    store, read_a, read_b = ("[ty][tx]", "Xi[k][ty]", "Xj[k][tx]") if rows else ("[tx][ty]", "Xi[ty][k]", "Xj[tx][k]")
    center_i, center_j = (" - mi", " - mj") if two else ("", "")
    means = (
        """    float mi = i0 + tx < d ? mean[i0 + tx] : 0.0f;  // this thread loads columns i0 + tx and j0 + tx
    float mj = j0 + tx < d ? mean[j0 + tx] : 0.0f;
"""
        if two
        else ""
    )
    sums = "" if two else "\n            si += a;\n            sj += b;"
    skip = "    if (blockIdx.y > blockIdx.x) return;  // blocks below the diagonal: mirrored by those above\n" if p["symmetric"] else ""
    return f"""{_cov_prelude(dtype, two, {"TILE": p["tile"], "PAD": p["pad"]})}{_cov_signature(two, p["restrict"])} {{
    __shared__ float Xi[TILE][TILE + PAD];
    __shared__ float Xj[TILE][TILE + PAD];
{skip}    int tx = threadIdx.x, ty = threadIdx.y;
    int i0 = blockIdx.y * TILE, j0 = blockIdx.x * TILE;
    int i = i0 + ty, j = j0 + tx;
{means}    float acc = 0.0f{"" if two else ", si = 0.0f, sj = 0.0f"};
    for (int k0 = 0; k0 < n; k0 += TILE) {{
        int row = k0 + ty;
        Xi{store} = (row < n && i0 + tx < d) ? ld(x[row * d + i0 + tx]){center_i} : 0.0f;
        Xj{store} = (row < n && j0 + tx < d) ? ld(x[row * d + j0 + tx]){center_j} : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) {{
            float a = {read_a}, b = {read_b};
            acc += a * b;{sums}
        }}
        __syncthreads();
    }}
    if (i < d && j < d) {{
{_cov_store(p["symmetric"], "i", "j", _cov_result(two, "acc", "si", "sj"), "        ")}    }}
}}
"""


def cov_register_code(dtype: str, p: dict[str, Any]) -> str:
    """BK rows of two BD-column blocks in shared memory; each thread keeps TM x TN outputs in registers."""
    two = p["passes"] == "two"
    center_i, center_j = (" - mean[i0 + c]", " - mean[j0 + c]") if two else ("", "")
    skip = "    if (blockIdx.y > blockIdx.x) return;  // blocks below the diagonal: mirrored by those above\n" if p["symmetric"] else ""
    sums = (
        ""
        if two
        else """            #pragma unroll
            for (int a = 0; a < TM; ++a) si[a] += ra[a];
            #pragma unroll
            for (int b = 0; b < TN; ++b) sj[b] += rb[b];
"""
    )
    zero_sums = (
        ""
        if two
        else """    float si[TM], sj[TN];
    #pragma unroll
    for (int a = 0; a < TM; ++a) si[a] = 0.0f;
    #pragma unroll
    for (int b = 0; b < TN; ++b) sj[b] = 0.0f;
"""
    )
    return f"""{_cov_prelude(dtype, two, {"BD": p["BD"], "BK": p["BK"], "TM": p["TM"], "TN": p["TN"]})}#define THREADS ((BD / TM) * (BD / TN))

{_cov_signature(two, True, "__launch_bounds__(THREADS) ")} {{
    __shared__ float As[BK][BD];  // rows k0.. of columns i0..
    __shared__ float Bs[BK][BD];  // rows k0.. of columns j0..
{skip}    const int tid = threadIdx.x;
    const int tr = tid / (BD / TN), tc = tid % (BD / TN);
    const int i0 = blockIdx.y * BD, j0 = blockIdx.x * BD;
    float acc[TM][TN];
    #pragma unroll
    for (int a = 0; a < TM; ++a)
        #pragma unroll
        for (int b = 0; b < TN; ++b) acc[a][b] = 0.0f;
{zero_sums}    for (int k0 = 0; k0 < n; k0 += BK) {{
        for (int e = tid; e < BK * BD; e += THREADS) {{
            const int r = e / BD, c = e % BD, row = k0 + r;
            As[r][c] = (row < n && i0 + c < d) ? ld(x[(size_t)row * d + i0 + c]){center_i} : 0.0f;
            Bs[r][c] = (row < n && j0 + c < d) ? ld(x[(size_t)row * d + j0 + c]){center_j} : 0.0f;
        }}
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {{
            float ra[TM], rb[TN];
            #pragma unroll
            for (int a = 0; a < TM; ++a) ra[a] = As[k][tr * TM + a];
            #pragma unroll
            for (int b = 0; b < TN; ++b) rb[b] = Bs[k][tc * TN + b];
            #pragma unroll
            for (int a = 0; a < TM; ++a)
                #pragma unroll
                for (int b = 0; b < TN; ++b) acc[a][b] += ra[a] * rb[b];
{sums}        }}
        __syncthreads();
    }}
    #pragma unroll
    for (int a = 0; a < TM; ++a)
        #pragma unroll
        for (int b = 0; b < TN; ++b) {{
            const int i = i0 + tr * TM + a, j = j0 + tc * TN + b;
            if (i < d && j < d) {{
{_cov_store(p["symmetric"], "i", "j", _cov_result(two, "acc[a][b]", "si[a]", "sj[b]"), "                ")}            }}
        }}
}}
"""


# --- covariance: Triton -------------------------------------------------------------------------

TRITON_COLUMN_MEANS = """

@triton.jit
def column_means(x_ptr, mean_ptr, n, d, BLOCK_D: tl.constexpr, ROWS: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_D + tl.arange(0, BLOCK_D)
    rows = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    mask = (rows[:, None] < n) & (cols[None, :] < d)
    v = tl.load(x_ptr + rows[:, None] * d + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.atomic_add(mean_ptr + cols, tl.sum(v, axis=0) / n, mask=cols < d)
"""


def cov_triton_code(product: str, two_pass: bool) -> str:
    """`product`: "dot" (tl.dot, tensor cores) or "broadcast" (a 3-d product summed over rows)."""
    mean_arg = "mean_ptr, " if two_pass else ""
    if two_pass:
        setup = """    mi = tl.load(mean_ptr + ci, mask=ci < d, other=0.0)
    mj = tl.load(mean_ptr + cj, mask=cj < d, other=0.0)
"""
        prepare = """        a = tl.where(mask_a, a.to(tl.float32) - mi[:, None], 0.0)
        b = tl.where(mask_b, b.to(tl.float32) - mj[None, :], 0.0)
"""
        result = "acc / (n - 1)"
    else:
        setup = """    si = tl.zeros((BLOCK_D,), dtype=tl.float32)
    sj = tl.zeros((BLOCK_D,), dtype=tl.float32)
"""
        prepare = """        si += tl.sum(a.to(tl.float32), axis=1)
        sj += tl.sum(b.to(tl.float32), axis=0)
"""
        result = "(acc - si[:, None] * sj[None, :] / n) / (n - 1)"
    if product == "dot":
        # two-pass: centered values back in the input type (fp16 rounds them) for the tensor cores
        cast = ".to(x_ptr.dtype.element_ty)" if two_pass else ""
        accumulate = f"        acc = tl.dot(a{cast}, b{cast}, acc, input_precision=INPUT_PRECISION)\n"
        extra = ", INPUT_PRECISION: tl.constexpr"
    else:
        accumulate = "        acc += tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)\n"
        extra = ""
    return f"""{TRITON_HEADER}

@triton.jit
def covariance(x_ptr, {mean_arg}cov_ptr, n, d, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, SYMMETRIC: tl.constexpr{extra}):
    pid_i = tl.program_id(0)
    pid_j = tl.program_id(1)
    if SYMMETRIC:
        if pid_i > pid_j:  # below the diagonal: mirrored by the program above it
            return
    ci = pid_i * BLOCK_D + tl.arange(0, BLOCK_D)
    cj = pid_j * BLOCK_D + tl.arange(0, BLOCK_D)
    offs = tl.arange(0, BLOCK_N)
{setup}    acc = tl.zeros((BLOCK_D, BLOCK_D), dtype=tl.float32)
    for k0 in range(0, n, BLOCK_N):
        rows = k0 + offs
        mask_a = (ci[:, None] < d) & (rows[None, :] < n)
        mask_b = (rows[:, None] < n) & (cj[None, :] < d)
        a = tl.load(x_ptr + rows[None, :] * d + ci[:, None], mask=mask_a, other=0.0)  # [BLOCK_D, BLOCK_N]: columns i as rows
        b = tl.load(x_ptr + rows[:, None] * d + cj[None, :], mask=mask_b, other=0.0)  # [BLOCK_N, BLOCK_D]
{prepare}{accumulate}    c = {result}
    mask = (ci[:, None] < d) & (cj[None, :] < d)
    tl.store(cov_ptr + ci[:, None] * d + cj[None, :], c, mask=mask)
    if SYMMETRIC:
        tl.store(cov_ptr + cj[None, :] * d + ci[:, None], c, mask=mask)
{TRITON_COLUMN_MEANS if two_pass else ""}"""


# --- covariance: variants -----------------------------------------------------------------------


def _cov_scratch(two_pass: bool) -> Callable[[Sizes], dict[str, TensorSpec]]:
    return (lambda s: {"mean": TensorSpec((s["d"],), "f32")}) if two_pass else (lambda s: {})


def _cov_launches(two_pass: bool, triton: bool, product: Callable[[Sizes, tuple[Any, ...]], Launch]) -> Callable[[Sizes], list[Launch]]:
    """Two-pass: zero the means, sum MEAN_ROWS-row chunks of 32 columns into them, then the product."""

    def launches(s: Sizes) -> list[Launch]:
        args = ("x", *(("mean",) if two_pass else ()), "cov", i32(s["n"]), i32(s["d"]))
        if not two_pass:
            return [product(s, args)]
        grid = (cdiv(s["d"], 32), cdiv(s["n"], MEAN_ROWS), 1)
        means_args = ("x", "mean", i32(s["n"]), i32(s["d"]))
        means = (
            Launch("column_means", grid, means_args, constexprs={"BLOCK_D": 32, "ROWS": MEAN_ROWS}, num_warps=8)
            if triton
            else Launch("column_means", grid, means_args, (32, 8, 1))
        )
        return [Launch(ZERO, grid1(1), ("mean",)), means, product(s, args)]

    return launches


def _cov_variant(
    family: str,
    dtype: str,
    p: dict[str, Any],
    code: str,
    product: Callable[[Sizes, tuple[Any, ...]], Launch],
    *checks: Check,
    language: str = "cuda",
) -> Variant:
    two = p["passes"] == "two"
    return Variant(
        family,
        language,
        {"dtype": dtype, **p},
        code,
        _cov_launches(two, language == "triton", product),
        scratch=_cov_scratch(two),
        unsupported=unsupported(dtype, *checks),
    )


def cov_naive_variant(dtype: str, p: dict[str, Any]) -> Variant:
    bx, by = p["block_x"], p["block_y"]
    return _cov_variant(
        "cuda-naive",
        dtype,
        p,
        cov_naive_code(dtype, p),
        lambda s, args: Launch("covariance", (cdiv(s["d"], bx), cdiv(s["d"], by), 1), args, (bx, by, 1)),
    )


def cov_warp_variant(dtype: str, p: dict[str, Any]) -> Variant:
    return _cov_variant(
        "cuda-warp-per-output",
        dtype,
        p,
        cov_warp_code(dtype, p),
        lambda s, args: Launch("covariance", grid1(cdiv(s["d"] * s["d"], p["warps"])), args, (32 * p["warps"], 1, 1)),
        _at_most_macs(WARP_MAX_MACS, "n", "d", "d"),
    )


def cov_smem_variant(dtype: str, p: dict[str, Any]) -> Variant:
    tile = p["tile"]
    return _cov_variant(
        "cuda-smem-tiled",
        dtype,
        p,
        cov_smem_code(dtype, p),
        lambda s, args: Launch("covariance", (cdiv(s["d"], tile), cdiv(s["d"], tile), 1), args, (tile, tile, 1)),
    )


def cov_register_variant(dtype: str, p: dict[str, Any]) -> Variant:
    bd, threads = p["BD"], (p["BD"] // p["TM"]) * (p["BD"] // p["TN"])
    return _cov_variant(
        "cuda-register-tiled",
        dtype,
        p,
        cov_register_code(dtype, p),
        lambda s, args: Launch("covariance", (cdiv(s["d"], bd), cdiv(s["d"], bd), 1), args, (threads, 1, 1)),
    )


def cov_triton_variant(product: str, dtype: str, p: dict[str, Any]) -> Variant:
    constexprs = {"BLOCK_D": p["BLOCK_D"], "BLOCK_N": p["BLOCK_N"], "SYMMETRIC": p["symmetric"]}
    if product == "dot":
        constexprs["INPUT_PRECISION"] = p["input_precision"]

    def launch(s: Sizes, args: tuple[Any, ...]) -> Launch:
        tiles = cdiv(s["d"], p["BLOCK_D"])
        return Launch("covariance", (tiles, tiles, 1), args, constexprs=constexprs, num_warps=p["num_warps"])

    return _cov_variant(f"triton-{product}", dtype, p, cov_triton_code(product, p["passes"] == "two"), launch, language="triton")


def covariance_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"
        naive = {"block_x": 16, "block_y": 16, "order": "ij", "passes": "two", "symmetric": False, "restrict": True}
        naive_edits = around(naive, passes=["one"], symmetric=[True])
        if full:
            naive_edits += [{**naive, "block_x": 32, "block_y": 8}, *around(naive, order=["ji"], restrict=[False])[1:]]
        for p in naive_edits:
            yield cov_naive_variant(dtype, p)
        warp = {"warps": 4, "passes": "two", "symmetric": False, "restrict": True}
        for p in around(warp, warps=[8], passes=["one"], restrict=[False]) if full else around(warp, symmetric=[True]):
            yield cov_warp_variant(dtype, p)
        tiled = {"tile": 16, "layout": "rows", "pad": 0, "passes": "two", "symmetric": False, "restrict": True}
        columns = {**tiled, "layout": "columns"}
        if full:
            tiled_edits = [
                *around(tiled, tile=[8, 32], layout=["columns"], passes=["one"], symmetric=[True], restrict=[False]),
                *around(columns, tile=[32], pad=[1])[1:],
                {**columns, "tile": 32, "pad": 1},
            ]
        else:
            tiled_edits = [*around(tiled, tile=[32], layout=["columns"], symmetric=[True]), {**columns, "pad": 1}]
        for p in tiled_edits:
            yield cov_smem_variant(dtype, p)
        base = {"BD": 64, "BK": 16, "TM": 4, "TN": 4, "passes": "two", "symmetric": False}
        tiles = [(64, 8, 4, 4), (128, 8, 8, 8), (64, 16, 8, 8), (32, 16, 4, 4)] if full else [(128, 8, 8, 8)]
        register_edits = [
            *(around(base, passes=["one"], symmetric=[True]) if full else around(base, symmetric=[True])),
            *({**base, **dict(zip(("BD", "BK", "TM", "TN"), tile))} for tile in tiles),
        ]
        for p in register_edits:
            yield cov_register_variant(dtype, p)
        dot = {"BLOCK_D": 64, "BLOCK_N": 32 if full else 64, "num_warps": 4, "passes": "two", "symmetric": False, "input_precision": "ieee"}
        dot_edits = around(dot, passes=["one"], symmetric=[True])
        if full:
            dot_edits += [*around(dot, BLOCK_D=[32, 128], BLOCK_N=[64], num_warps=[8], input_precision=["tf32"])[1:]]
        else:
            dot_edits += [{**dot, "BLOCK_D": 128, "num_warps": 8}, {**dot, "BLOCK_D": 32}]
        for p in dot_edits:
            yield cov_triton_variant("dot", dtype, p)
        broadcast = {"BLOCK_D": 16, "BLOCK_N": 16, "num_warps": 4, "passes": "two", "symmetric": False}
        broadcast_edits = around(broadcast, passes=["one"], symmetric=[True])
        if full:
            broadcast_edits += [{**broadcast, "BLOCK_D": 32, "BLOCK_N": 8}, {**broadcast, "BLOCK_N": 32}]
        for p in broadcast_edits if full else broadcast_edits[:2]:
            yield cov_triton_variant("broadcast", dtype, p)


COVARIANCE = Op(
    name="covariance",
    bound="compute",
    sizes=COV_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"], s["d"]), s["dtype"])},
    outputs=lambda s: {"cov": TensorSpec((s["d"], s["d"]), "f32")},
    reference=lambda torch, inputs, sizes: {"cov": torch.cov(inputs["x"].float().T)},
    reference_code="def reference(x):\n    return torch.cov(x.float().T)\n",
    variants=covariance_variants,
    tolerance={"f32": 1e-3},
)


# --- pairwise_distance: CUDA --------------------------------------------------------------------

ROW_NORMS = """
// norms[r] = ||v_r||^2, a thread per row
extern "C" __global__ void row_norms(const T* v, float* norms, int rows, int d) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int k = 0; k < d; ++k) {
        float e = ld(v[(size_t)r * d + k]);
        s += e * e;
    }
    norms[r] = s;
}
"""


def _pair_prelude(dtype: str, norms: bool, defines: dict[str, int]) -> str:
    lines = "".join(f"#define {name} {value}\n" for name, value in defines.items())
    return f"{cuda_prelude(dtype)}{lines}{ROW_NORMS if norms else ''}\n"


def _pair_signature(norms: bool, restrict: bool, launch_bounds: str = "") -> str:
    ptr = _restrict_ptr(restrict)
    norm_args = f"{ptr('float', 'xn')}, {ptr('float', 'yn')}, " if norms else ""
    return (
        f'extern "C" __global__ void {launch_bounds}pairwise_distance({ptr("T", "x")}, {ptr("T", "y")}, {norm_args}'
        f"{ptr('float', 'out', False)}, int m, int n, int d)"
    )


def _pair_term(norms: bool, acc: str, a: str, b: str) -> str:
    """One feature's contribution: a squared difference, or a product for the norms trick."""
    return f"{acc} += {a} * {b};" if norms else f"{{ float t = {a} - {b}; {acc} += t * t; }}"


def _pair_value(norms: bool, acc: str, i: str, j: str) -> str:
    return f"xn[{i}] + yn[{j}] - 2.0f * {acc}" if norms else acc


def pair_naive_code(dtype: str, p: dict[str, Any]) -> str:
    """A thread per output reading both rows from global memory: every x row read n times, every y row m times."""
    norms = p["formula"] == "norms"
    fast, slow = ("col", "row") if p["order"] == "ij" else ("row", "col")
    return f"""{_pair_prelude(dtype, norms, {})}{_pair_signature(norms, p["restrict"])} {{
    int {fast} = blockIdx.x * blockDim.x + threadIdx.x;
    int {slow} = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n) return;
    float acc = 0.0f;
    for (int k = 0; k < d; ++k)
        {_pair_term(norms, "acc", "ld(x[row * d + k])", "ld(y[col * d + k])")}
    out[row * n + col] = {_pair_value(norms, "acc", "row", "col")};
}}
"""


def pair_smem_code(dtype: str, p: dict[str, Any]) -> str:
    """TILE rows of x and of y, TILE features at a time, in shared memory; Ys[tx][k] is TILE + PAD floats apart across a warp."""
    norms = p["formula"] == "norms"
    return f"""{_pair_prelude(dtype, norms, {"TILE": p["tile"], "PAD": p["pad"]})}{_pair_signature(norms, p["restrict"])} {{
    __shared__ float Xs[TILE][TILE + PAD];
    __shared__ float Ys[TILE][TILE + PAD];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    int yrow = blockIdx.x * TILE + ty;  // the y row this thread stages
    float acc = 0.0f;
    for (int k0 = 0; k0 < d; k0 += TILE) {{
        Xs[ty][tx] = (row < m && k0 + tx < d) ? ld(x[row * d + k0 + tx]) : 0.0f;
        Ys[ty][tx] = (yrow < n && k0 + tx < d) ? ld(y[yrow * d + k0 + tx]) : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k)
            {_pair_term(norms, "acc", "Xs[ty][k]", "Ys[tx][k]")}
        __syncthreads();
    }}
    if (row < m && col < n) out[row * n + col] = {_pair_value(norms, "acc", "row", "col")};
}}
"""


def pair_register_code(dtype: str, p: dict[str, Any]) -> str:
    """BM x BN outputs per block, BK features deep, stored feature-major; TM x TN outputs per thread."""
    norms = p["formula"] == "norms"
    defines = {"BM": p["BM"], "BN": p["BN"], "BK": p["BK"], "TM": p["TM"], "TN": p["TN"]}
    return f"""{_pair_prelude(dtype, norms, defines)}#define THREADS ((BM / TM) * (BN / TN))

{_pair_signature(norms, True, "__launch_bounds__(THREADS) ")} {{
    __shared__ float Xs[BK][BM];
    __shared__ float Ys[BK][BN];
    const int tid = threadIdx.x;
    const int tr = tid / (BN / TN), tc = tid % (BN / TN);
    const int i0 = blockIdx.y * BM, j0 = blockIdx.x * BN;
    float acc[TM][TN];
    #pragma unroll
    for (int a = 0; a < TM; ++a)
        #pragma unroll
        for (int b = 0; b < TN; ++b) acc[a][b] = 0.0f;
    for (int k0 = 0; k0 < d; k0 += BK) {{
        for (int e = tid; e < BM * BK; e += THREADS) {{  // features fastest: coalesced along each row
            const int r = e / BK, c = e % BK;
            Xs[c][r] = (i0 + r < m && k0 + c < d) ? ld(x[(size_t)(i0 + r) * d + k0 + c]) : 0.0f;
        }}
        for (int e = tid; e < BN * BK; e += THREADS) {{
            const int r = e / BK, c = e % BK;
            Ys[c][r] = (j0 + r < n && k0 + c < d) ? ld(y[(size_t)(j0 + r) * d + k0 + c]) : 0.0f;
        }}
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {{
            float ra[TM], rb[TN];
            #pragma unroll
            for (int a = 0; a < TM; ++a) ra[a] = Xs[k][tr * TM + a];
            #pragma unroll
            for (int b = 0; b < TN; ++b) rb[b] = Ys[k][tc * TN + b];
            #pragma unroll
            for (int a = 0; a < TM; ++a)
                #pragma unroll
                for (int b = 0; b < TN; ++b) {_pair_term(norms, "acc[a][b]", "ra[a]", "rb[b]")}
        }}
        __syncthreads();
    }}
    #pragma unroll
    for (int a = 0; a < TM; ++a)
        #pragma unroll
        for (int b = 0; b < TN; ++b) {{
            const int i = i0 + tr * TM + a, j = j0 + tc * TN + b;
            if (i < m && j < n) out[(size_t)i * n + j] = {_pair_value(norms, "acc[a][b]", "i", "j")};
        }}
}}
"""


# --- pairwise_distance: Triton ------------------------------------------------------------------

PAIR_TRITON_DOT = f"""{TRITON_HEADER}

@triton.jit
def pairwise_distance(x_ptr, y_ptr, out_ptr, m, n, d, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                      INPUT_PRECISION: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_D)
    dot = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    xs = tl.zeros((BLOCK_M,), dtype=tl.float32)
    ys = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, d, BLOCK_D):
        k = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * d + k[None, :], mask=(rm[:, None] < m) & (k[None, :] < d), other=0.0)  # [BLOCK_M, BLOCK_D]
        b = tl.load(y_ptr + rn[None, :] * d + k[:, None], mask=(k[:, None] < d) & (rn[None, :] < n), other=0.0)  # [BLOCK_D, BLOCK_N]: yᵀ
        dot = tl.dot(a, b, dot, input_precision=INPUT_PRECISION)
        af = a.to(tl.float32)
        bf = b.to(tl.float32)
        xs += tl.sum(af * af, axis=1)
        ys += tl.sum(bf * bf, axis=0)
    out = xs[:, None] + ys[None, :] - 2.0 * dot
    tl.store(out_ptr + rm[:, None] * n + rn[None, :], out, mask=(rm[:, None] < m) & (rn[None, :] < n))
"""

PAIR_TRITON_BROADCAST = f"""{TRITON_HEADER}

@triton.jit
def pairwise_distance(x_ptr, y_ptr, out_ptr, m, n, d, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_D)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, d, BLOCK_D):
        k = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * d + k[None, :], mask=(rm[:, None] < m) & (k[None, :] < d), other=0.0).to(tl.float32)
        b = tl.load(y_ptr + rn[:, None] * d + k[None, :], mask=(rn[:, None] < n) & (k[None, :] < d), other=0.0).to(tl.float32)
        diff = a[:, None, :] - b[None, :, :]  # [BLOCK_M, BLOCK_N, BLOCK_D]
        acc += tl.sum(diff * diff, axis=2)
    tl.store(out_ptr + rm[:, None] * n + rn[None, :], acc, mask=(rm[:, None] < m) & (rn[None, :] < n))
"""


# --- pairwise_distance: variants ----------------------------------------------------------------


def _pair_launches(norms: bool, kernel: Callable[[Sizes, tuple[Any, ...]], Launch]) -> Callable[[Sizes], list[Launch]]:
    """The norms trick: ||x_i||² and ||y_j||² by a first launch per matrix (256-thread blocks), then the kernel."""

    def launches(s: Sizes) -> list[Launch]:
        args = ("x", "y", *(("xn", "yn") if norms else ()), "out", i32(s["m"]), i32(s["n"]), i32(s["d"]))
        if not norms:
            return [kernel(s, args)]
        return [
            Launch("row_norms", grid1(cdiv(s["m"], 256)), ("x", "xn", i32(s["m"]), i32(s["d"])), (256, 1, 1)),
            Launch("row_norms", grid1(cdiv(s["n"], 256)), ("y", "yn", i32(s["n"]), i32(s["d"])), (256, 1, 1)),
            kernel(s, args),
        ]

    return launches


def _pair_cuda_variant(
    family: str, dtype: str, p: dict[str, Any], code: str, kernel: Callable[[Sizes, tuple[Any, ...]], Launch], *checks: Check
) -> Variant:
    norms = p["formula"] == "norms"
    scratch = (lambda s: {"xn": TensorSpec((s["m"],), "f32"), "yn": TensorSpec((s["n"],), "f32")}) if norms else (lambda s: {})
    return Variant(
        family, "cuda", {"dtype": dtype, **p}, code, _pair_launches(norms, kernel), scratch=scratch, unsupported=unsupported(dtype, *checks)
    )


def pair_naive_variant(dtype: str, p: dict[str, Any]) -> Variant:
    bx, by = p["block_x"], p["block_y"]
    ij = p["order"] == "ij"

    def kernel(s: Sizes, args: tuple[Any, ...]) -> Launch:
        grid = (cdiv(s["n"], bx), cdiv(s["m"], by), 1) if ij else (cdiv(s["m"], bx), cdiv(s["n"], by), 1)
        return Launch("pairwise_distance", grid, args, (bx, by, 1))

    checks = () if ij else (_at_most_macs(NAIVE_JI_MAX_MACS, "m", "n", "d"),)
    return _pair_cuda_variant("cuda-naive", dtype, p, pair_naive_code(dtype, p), kernel, *checks)


def pair_smem_variant(dtype: str, p: dict[str, Any]) -> Variant:
    tile = p["tile"]
    return _pair_cuda_variant(
        "cuda-smem-tiled",
        dtype,
        p,
        pair_smem_code(dtype, p),
        lambda s, args: Launch("pairwise_distance", (cdiv(s["n"], tile), cdiv(s["m"], tile), 1), args, (tile, tile, 1)),
    )


def pair_register_variant(dtype: str, p: dict[str, Any]) -> Variant:
    threads = (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])
    return _pair_cuda_variant(
        "cuda-register-tiled",
        dtype,
        p,
        pair_register_code(dtype, p),
        lambda s, args: Launch("pairwise_distance", (cdiv(s["n"], p["BN"]), cdiv(s["m"], p["BM"]), 1), args, (threads, 1, 1)),
    )


def pair_triton_variant(product: str, dtype: str, p: dict[str, Any]) -> Variant:
    constexprs = {"BLOCK_M": p["BLOCK_M"], "BLOCK_N": p["BLOCK_N"], "BLOCK_D": p["BLOCK_D"]}
    if product == "dot":
        constexprs["INPUT_PRECISION"] = p["input_precision"]

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["m"], p["BLOCK_M"]), cdiv(s["n"], p["BLOCK_N"]), 1)
        return [
            Launch(
                "pairwise_distance",
                grid,
                ("x", "y", "out", i32(s["m"]), i32(s["n"]), i32(s["d"])),
                constexprs=constexprs,
                num_warps=p["num_warps"],
            )
        ]

    code = PAIR_TRITON_DOT if product == "dot" else PAIR_TRITON_BROADCAST
    return Variant(f"triton-{product}", "triton", {"dtype": dtype, **p}, code, launches, unsupported=unsupported(dtype))


def pairwise_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"
        naive = {"block_x": 16, "block_y": 16, "order": "ij", "formula": "diff", "restrict": True}
        naive_edits = (
            around(naive, order=["ji"], formula=["norms"], restrict=[False])
            + [{**naive, "block_x": 32, "block_y": 8}, {**naive, "block_x": 256, "block_y": 1}]
            if full
            else around(naive, formula=["norms"])
        )
        for p in naive_edits:
            yield pair_naive_variant(dtype, p)
        tiled = {"tile": 16, "pad": 0, "formula": "diff", "restrict": True}
        if full:
            tiled_edits = [
                *around(tiled, tile=[8, 32], pad=[1], formula=["norms"], restrict=[False]),
                {**tiled, "tile": 32, "pad": 1},
                {**tiled, "tile": 32, "formula": "norms"},
                {**tiled, "pad": 1, "formula": "norms"},
            ]
        else:
            tiled_edits = around(tiled, tile=[32], pad=[1], formula=["norms"])
        for p in tiled_edits:
            yield pair_smem_variant(dtype, p)
        base = {"BM": 64, "BN": 64, "BK": 8, "TM": 4, "TN": 4, "formula": "diff"}
        names = ("BM", "BN", "BK", "TM", "TN")
        tiles = [(64, 64, 16, 4, 4), (128, 128, 8, 8, 8), (64, 64, 8, 8, 8), (32, 32, 8, 4, 4)] if full else []
        register_edits = [*around(base, formula=["norms"]), *({**base, **dict(zip(names, tile))} for tile in tiles)]
        if full:
            register_edits.append({**base, **dict(zip(names, tiles[1])), "formula": "norms"})
        for p in register_edits:
            yield pair_register_variant(dtype, p)
        dot = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_D": 32, "num_warps": 4, "input_precision": "ieee"}
        names = ("BLOCK_M", "BLOCK_N", "BLOCK_D", "num_warps")
        shapes = [(128, 64, 32, 4), (128, 128, 32, 8), (32, 32, 32, 4), (64, 64, 16, 4)] if full else [(128, 128, 32, 8), (128, 64, 64, 4)]
        # No tf32 here: with the norms trick (|x|² + |y|² − 2x·y) its 10-bit products lose up to
        # 6% of a distance, which the H100 run found wrong at three of four sizes.
        dot_edits = [*around(dot, num_warps=[8] if full else []), *({**dot, **dict(zip(names, shape))} for shape in shapes)]
        for p in dot_edits:
            yield pair_triton_variant("dot", dtype, p)
        broadcast = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_D": 16, "num_warps": 4}
        shapes = [(32, 32, 8, 4), (16, 64, 8, 4), (32, 32, 16, 8), (32, 32, 8, 8)] if full else [(32, 32, 8, 4)]
        for p in [broadcast, *({**broadcast, **dict(zip(names, shape))} for shape in shapes)]:
            yield pair_triton_variant("broadcast", dtype, p)


def _pairwise_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    return {"out": torch.cdist(inputs["x"].float(), inputs["y"].float()) ** 2}


PAIRWISE = Op(
    name="pairwise_distance",
    bound="compute",
    sizes=PAIRWISE_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["m"], s["d"]), s["dtype"]), "y": TensorSpec((s["n"], s["d"]), s["dtype"])},
    outputs=lambda s: {"out": TensorSpec((s["m"], s["n"]), "f32")},
    reference=_pairwise_reference,
    reference_code="def reference(x, y):\n    return torch.cdist(x.float(), y.float()) ** 2\n",
    variants=pairwise_variants,
    tolerance={"f32": 1e-3},
)

OPS = [COVARIANCE, PAIRWISE]
