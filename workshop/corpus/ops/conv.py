"""Convolutions: `conv1d` (NCL), `conv2d` (NCHW, 3x3) and `depthwise_conv2d` (3x3, groups = C).

Stride 1, "same" zero padding, no bias; references are torch.nn.functional.conv1d/conv2d
(cuDNN). Families and the axes that matter for their speed:

- cuda-direct: a thread per output, every input read from global memory (caches do the
  reuse); block shape, and coalesced (threadIdx.x along the contiguous L / W) or not
  (along output channels, or along H).
- cuda-smem-tiled (conv1d, conv2d): an input tile with its halo and the weights of a
  group of output channels in shared memory, each thread a column of CO_TILE output
  channels in registers; tile sizes, channels per thread, input channels per stage.
- cuda-smem-tiled (depthwise): a tile plus halo per channel in shared memory, each
  thread ROWS outputs down a column (rows of the window reused from registers).
- cuda-im2col-gemm (conv2d): two launches, im2col into a [N, Cin*9, H*W] scratch, then a
  GEMM kernel of ops.gemm (shared-memory tiles, register micro-tiles, or mma.sync tensor
  cores for fp16) with the weights shared across the batch.
- triton-implicit-gemm (conv1d, conv2d): tl.dot over the Cin*K reduction with the
  im2col gather done in the loads; BLOCK sizes, num_warps, num_stages and, for fp32,
  input_precision (ieee or tf32).
- triton-direct (conv1d, depthwise): outer-product / shifted-window FMAs without tl.dot.

fp32 references go through cuDNN with TF32 allowed (PyTorch's default for convolutions),
so inputs are uniform in [0, 1) as in ops.gemm: sums of positive terms keep TF32 within
1e-3 relative, and 2e-3 checks exact and TF32 kernels alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.gemm import (
    cuda_prelude,
    mma_smem_code,
    mma_smem_params,
    mma_smem_shared_bytes,
    register_params,
    register_tiled_code,
    smem_tiled_code,
)
from workshop.corpus.spec import Launch, Op, Sizes, TensorSpec, Variant, block1, cdiv, grid1, i32

TOLERANCE = {"f32": 2e-3, "f16": 1e-2}


def _supports(dtype: str, check: Callable[[Sizes], str | None] = lambda s: None) -> Callable[[Sizes], str | None]:
    def unsupported(s: Sizes) -> str | None:
        return f"written for {dtype}" if s["dtype"] != dtype else check(s)

    return unsupported


def _precisions(dtype: str) -> tuple[str, ...]:
    """tl.dot input precision: an axis for fp32, "ieee" recorded (and ignored) for fp16."""
    return ("ieee", "tf32") if dtype == "f32" else ("ieee",)


# --- conv1d ------------------------------------------------------------------------------------

CONV1D_SIZES = [
    {"n": n, "cin": cin, "cout": cout, "l": length, "k": k, "dtype": dtype}
    for dtype in ("f32", "f16")
    for n, cin, cout, length, k in ((1, 16, 16, 1024, 3), (8, 64, 64, 4096, 7), (4, 256, 256, 2048, 3), (8, 128, 128, 8192, 5))
]
CONV1D_ARGS = ("x", "w", "y")
MAX_K = 8  # shared tiles hold halos and weight rows of kernels up to this width


def _conv1d_scalars(s: Sizes) -> tuple[Any, ...]:
    return (i32(s["cin"]), i32(s["cout"]), i32(s["l"]), i32(s["k"]))


def conv1d_direct_variant(dtype: str, p: dict[str, Any]) -> Variant:
    if p["order"] == "coalesced":
        index = "    const int l = blockIdx.x * blockDim.x + threadIdx.x, co = blockIdx.y;  // neighbours: neighbouring positions"
    else:
        index = "    const int co = blockIdx.x * blockDim.x + threadIdx.x, l = blockIdx.y;  // neighbours: other output channels"
    code = f"""{cuda_prelude(dtype)}
extern "C" __global__ void conv1d(const T* __restrict__ X, const T* __restrict__ Wt, T* __restrict__ Y, int Cin, int Cout, int L, int K) {{
{index}
    const size_t n = blockIdx.z;
    if (l >= L || co >= Cout) return;
    const int pad = K / 2;
    float acc = 0.0f;
    for (int ci = 0; ci < Cin; ++ci) {{
        const T* x = X + (n * Cin + ci) * L;
        const T* w = Wt + ((size_t)co * Cin + ci) * K;
        for (int k = 0; k < K; ++k) {{
            const int q = l + k - pad;
            if (q >= 0 && q < L) acc += ld(x[q]) * ld(w[k]);
        }}
    }}
    Y[(n * Cout + co) * L + l] = st(acc);
}}
"""
    block = p["block"]

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["l"], block), s["cout"], s["n"]) if p["order"] == "coalesced" else (cdiv(s["cout"], block), s["l"], s["n"])
        return [Launch("conv1d", grid, (*CONV1D_ARGS, *_conv1d_scalars(s)), block1(block))]

    # Threads along output channels read weights K*Cin apart and write rows L apart: slow, so capped.
    def cap(s: Sizes) -> str | None:
        macs = s["n"] * s["cout"] * s["l"] * s["cin"] * s["k"]
        return "over the 20 ms cap beyond 3e9 MACs" if p["order"] == "strided" and macs > 3e9 else None

    return Variant("cuda-direct", "cuda", {"dtype": dtype, **p}, code, launches, unsupported=_supports(dtype, cap))


def conv1d_smem_variant(dtype: str, p: dict[str, Any]) -> Variant:
    code = f"""{cuda_prelude(dtype)}
#define L_TILE {p["L_TILE"]}
#define CO_TILE {p["CO_TILE"]}
#define CI_CHUNK {p["CI_CHUNK"]}
#define MAX_K {MAX_K}

extern "C" __global__ void __launch_bounds__(L_TILE) conv1d(const T* __restrict__ X, const T* __restrict__ Wt, T* __restrict__ Y, int Cin, int Cout, int L, int K) {{
    __shared__ float xs[CI_CHUNK][L_TILE + MAX_K];  // positions l0-pad .. l0+L_TILE+pad
    __shared__ float ws[CO_TILE][CI_CHUNK][MAX_K];
    const int t = threadIdx.x, l0 = blockIdx.x * L_TILE, co0 = blockIdx.y * CO_TILE, pad = K / 2, span = L_TILE + K - 1;
    const size_t n = blockIdx.z;
    float acc[CO_TILE];
    #pragma unroll
    for (int o = 0; o < CO_TILE; ++o) acc[o] = 0.0f;
    for (int ci0 = 0; ci0 < Cin; ci0 += CI_CHUNK) {{
        for (int e = t; e < CI_CHUNK * span; e += L_TILE) {{
            const int c = e / span, q = l0 + e % span - pad;
            xs[c][e % span] = ci0 + c < Cin && q >= 0 && q < L ? ld(X[(n * Cin + ci0 + c) * L + q]) : 0.0f;
        }}
        for (int e = t; e < CO_TILE * CI_CHUNK * K; e += L_TILE) {{
            const int o = e / (CI_CHUNK * K), c = e / K % CI_CHUNK, k = e % K;
            ws[o][c][k] = co0 + o < Cout && ci0 + c < Cin ? ld(Wt[((size_t)(co0 + o) * Cin + ci0 + c) * K + k]) : 0.0f;
        }}
        __syncthreads();
        for (int c = 0; c < CI_CHUNK; ++c)
            for (int k = 0; k < K; ++k) {{
                const float xv = xs[c][t + k];
                #pragma unroll
                for (int o = 0; o < CO_TILE; ++o) acc[o] += ws[o][c][k] * xv;  // one weight for the whole block: broadcast
            }}
        __syncthreads();
    }}
    #pragma unroll
    for (int o = 0; o < CO_TILE; ++o)
        if (co0 + o < Cout && l0 + t < L) Y[(n * Cout + co0 + o) * L + l0 + t] = st(acc[o]);
}}
"""

    def launches(s: Sizes) -> list[Launch]:
        return [
            Launch(
                "conv1d",
                (cdiv(s["l"], p["L_TILE"]), cdiv(s["cout"], p["CO_TILE"]), s["n"]),
                (*CONV1D_ARGS, *_conv1d_scalars(s)),
                block1(p["L_TILE"]),
            )
        ]

    check = lambda s: f"kernel width over {MAX_K}" if s["k"] > MAX_K else None  # noqa: E731
    return Variant("cuda-smem-tiled", "cuda", {"dtype": dtype, **p}, code, launches, unsupported=_supports(dtype, check))


TRITON_CONV1D = """import triton
import triton.language as tl


@triton.jit
def conv1d(x_ptr, w_ptr, y_ptr, Cin, Cout, L, K, BLOCK_CO: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_R: tl.constexpr,
           INPUT_PRECISION: tl.constexpr):
    n = tl.program_id(2).to(tl.int64)
    co = tl.program_id(1) * BLOCK_CO + tl.arange(0, BLOCK_CO)
    pos = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    R = Cin * K  # the reduction: input channels x taps, gathered im2col-style in the loads
    acc = tl.zeros((BLOCK_CO, BLOCK_L), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        w = tl.load(w_ptr + co[:, None] * R + r[None, :], mask=(co[:, None] < Cout) & (r[None, :] < R), other=0.0)
        q = pos[None, :] + (r % K)[:, None] - K // 2
        x = tl.load(x_ptr + n * Cin * L + (r // K)[:, None] * L + q, mask=(r[:, None] < R) & (q >= 0) & (q < L), other=0.0)
        acc = tl.dot(w, x, acc, input_precision=INPUT_PRECISION)
    y = y_ptr + n * Cout * L + co[:, None] * L + pos[None, :]
    tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=(co[:, None] < Cout) & (pos[None, :] < L))
"""

TRITON_CONV1D_DIRECT = """import triton
import triton.language as tl


@triton.jit
def conv1d(x_ptr, w_ptr, y_ptr, Cin, Cout, L, K, BLOCK_CO: tl.constexpr, BLOCK_L: tl.constexpr):
    n = tl.program_id(2).to(tl.int64)
    co = tl.program_id(1) * BLOCK_CO + tl.arange(0, BLOCK_CO)
    pos = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    acc = tl.zeros((BLOCK_CO, BLOCK_L), dtype=tl.float32)
    for ci in range(0, Cin):
        for k in range(0, K):
            w = tl.load(w_ptr + (co * Cin + ci) * K + k, mask=co < Cout, other=0.0).to(tl.float32)
            q = pos + k - K // 2
            x = tl.load(x_ptr + (n * Cin + ci) * L + q, mask=(q >= 0) & (q < L), other=0.0).to(tl.float32)
            acc += w[:, None] * x[None, :]  # outer product on CUDA cores, no tl.dot
    y = y_ptr + n * Cout * L + co[:, None] * L + pos[None, :]
    tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=(co[:, None] < Cout) & (pos[None, :] < L))
"""


def conv1d_triton_variant(dtype: str, p: dict[str, Any]) -> Variant:
    direct = "BLOCK_R" not in p
    names = ("BLOCK_CO", "BLOCK_L") if direct else ("BLOCK_CO", "BLOCK_L", "BLOCK_R")
    constexprs = {name: p[name] for name in names} | ({} if direct else {"INPUT_PRECISION": p["input_precision"]})

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["l"], p["BLOCK_L"]), cdiv(s["cout"], p["BLOCK_CO"]), s["n"])
        return [
            Launch(
                "conv1d",
                grid,
                (*CONV1D_ARGS, *_conv1d_scalars(s)),
                constexprs=constexprs,
                num_warps=p["num_warps"],
                num_stages=p.get("num_stages"),
            )
        ]

    family, code = ("triton-direct", TRITON_CONV1D_DIRECT) if direct else ("triton-implicit-gemm", TRITON_CONV1D)
    return Variant(family, "triton", {"dtype": dtype, **p}, code, launches, unsupported=_supports(dtype))


def conv1d_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        for block in (64, 128, 256, 512):
            for order in ("coalesced", "strided"):
                yield conv1d_direct_variant(dtype, {"block": block, "order": order})
        for l_tile, co_tile, ci_chunk in (
            (128, 8, 8),
            (128, 16, 8),
            (256, 8, 8),
            (256, 16, 16),
            (128, 4, 16),
            (256, 32, 8),
            (64, 8, 8),
            (128, 32, 8),
        ):
            yield conv1d_smem_variant(dtype, {"L_TILE": l_tile, "CO_TILE": co_tile, "CI_CHUNK": ci_chunk})
        for precision in _precisions(dtype):
            for block_co, block_l, block_r, warps, stages in (
                (64, 128, 32, 4, 3),
                (32, 128, 32, 4, 3),
                (64, 64, 16, 4, 2),
                (128, 128, 32, 8, 3),
                (64, 256, 32, 8, 3),
            ):
                yield conv1d_triton_variant(
                    dtype,
                    {
                        "BLOCK_CO": block_co,
                        "BLOCK_L": block_l,
                        "BLOCK_R": block_r,
                        "num_warps": warps,
                        "num_stages": stages,
                        "input_precision": precision,
                    },
                )
        for block_co, block_l, warps in ((16, 128, 4), (32, 256, 8)):
            yield conv1d_triton_variant(dtype, {"BLOCK_CO": block_co, "BLOCK_L": block_l, "num_warps": warps})


# --- conv2d ------------------------------------------------------------------------------------

CONV2D_SIZES = [
    {"n": n, "cin": cin, "cout": cout, "h": hw, "w": hw, "dtype": dtype}
    for dtype in ("f32", "f16")
    for n, cin, cout, hw in ((1, 16, 16, 32), (8, 64, 64, 56), (16, 256, 256, 28), (8, 128, 128, 64))
]
CONV2D_ARGS = ("x", "w", "y")


def _conv2d_scalars(s: Sizes) -> tuple[Any, ...]:
    return (i32(s["cin"]), i32(s["cout"]), i32(s["h"]), i32(s["w"]))


def conv2d_direct_variant(dtype: str, p: dict[str, Any]) -> Variant:
    along_w = p["order"] == "coalesced"
    x_index, y_index = ("x", "y") if along_w else ("y", "x")
    code = f"""{cuda_prelude(dtype)}
extern "C" __global__ void conv2d(const T* __restrict__ X, const T* __restrict__ Wt, T* __restrict__ Y, int Cin, int Cout, int H, int W) {{
    const int ow = blockIdx.{x_index} * blockDim.{x_index} + threadIdx.{x_index};  // threadIdx.x along {"W (contiguous)" if along_w else "H: neighbours W apart"}
    const int oh = blockIdx.{y_index} * blockDim.{y_index} + threadIdx.{y_index};
    const size_t n = blockIdx.z / Cout;
    const int co = blockIdx.z % Cout;
    if (oh >= H || ow >= W) return;
    float acc = 0.0f;
    for (int ci = 0; ci < Cin; ++ci) {{
        const T* x = X + (n * Cin + ci) * H * W;
        const T* w = Wt + ((size_t)co * Cin + ci) * 9;
        #pragma unroll
        for (int kh = 0; kh < 3; ++kh)
            #pragma unroll
            for (int kw = 0; kw < 3; ++kw) {{
                const int ih = oh + kh - 1, iw = ow + kw - 1;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W) acc += ld(x[ih * W + iw]) * ld(w[kh * 3 + kw]);
            }}
    }}
    Y[((n * Cout + co) * H + oh) * W + ow] = st(acc);
}}
"""
    bx, by = p["block_x"], p["block_y"]

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["w"], bx), cdiv(s["h"], by)) if along_w else (cdiv(s["h"], bx), cdiv(s["w"], by))
        return [Launch("conv2d", (*grid, s["n"] * s["cout"]), (*CONV2D_ARGS, *_conv2d_scalars(s)), (bx, by, 1))]

    # Threads along H read and write W apart: ~20 ms on 64x64 images, so capped below that.
    cap = lambda s: "over the 20 ms cap from 64x64 images" if not along_w and s["h"] * s["w"] >= 4096 else None  # noqa: E731
    return Variant("cuda-direct", "cuda", {"dtype": dtype, **p}, code, launches, unsupported=_supports(dtype, cap))


def conv2d_smem_variant(dtype: str, p: dict[str, Any]) -> Variant:
    code = f"""{cuda_prelude(dtype)}
#define TW {p["TW"]}
#define TH {p["TH"]}
#define CO_TILE {p["CO_TILE"]}
#define CI_CHUNK {p["CI_CHUNK"]}

extern "C" __global__ void __launch_bounds__(TW * TH) conv2d(const T* __restrict__ X, const T* __restrict__ Wt, T* __restrict__ Y, int Cin, int Cout, int H, int W) {{
    __shared__ float xs[CI_CHUNK][TH + 2][TW + 2];  // the tile and its 1-pixel halo
    __shared__ float ws[CO_TILE][CI_CHUNK][9];
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * TW + tx;
    const int w0 = blockIdx.x * TW, h0 = blockIdx.y * TH;
    const int groups = (Cout + CO_TILE - 1) / CO_TILE;
    const size_t n = blockIdx.z / groups;
    const int co0 = blockIdx.z % groups * CO_TILE;
    float acc[CO_TILE];
    #pragma unroll
    for (int o = 0; o < CO_TILE; ++o) acc[o] = 0.0f;
    for (int ci0 = 0; ci0 < Cin; ci0 += CI_CHUNK) {{
        for (int e = t; e < CI_CHUNK * (TH + 2) * (TW + 2); e += TW * TH) {{
            const int c = e / ((TH + 2) * (TW + 2)), r = e / (TW + 2) % (TH + 2), q = e % (TW + 2);
            const int ih = h0 + r - 1, iw = w0 + q - 1;
            xs[c][r][q] = ci0 + c < Cin && ih >= 0 && ih < H && iw >= 0 && iw < W ? ld(X[((n * Cin + ci0 + c) * H + ih) * W + iw]) : 0.0f;
        }}
        for (int e = t; e < CO_TILE * CI_CHUNK * 9; e += TW * TH) {{
            const int o = e / (CI_CHUNK * 9), c = e / 9 % CI_CHUNK;
            ws[o][c][e % 9] = co0 + o < Cout && ci0 + c < Cin ? ld(Wt[((size_t)(co0 + o) * Cin + ci0 + c) * 9 + e % 9]) : 0.0f;
        }}
        __syncthreads();
        for (int c = 0; c < CI_CHUNK; ++c) {{
            float win[9];
            #pragma unroll
            for (int k = 0; k < 9; ++k) win[k] = xs[c][ty + k / 3][tx + k % 3];
            #pragma unroll
            for (int o = 0; o < CO_TILE; ++o)
                #pragma unroll
                for (int k = 0; k < 9; ++k) acc[o] += ws[o][c][k] * win[k];
        }}
        __syncthreads();
    }}
    const int oh = h0 + ty, ow = w0 + tx;
    if (oh < H && ow < W) {{
        #pragma unroll
        for (int o = 0; o < CO_TILE; ++o)
            if (co0 + o < Cout) Y[((n * Cout + co0 + o) * H + oh) * W + ow] = st(acc[o]);
    }}
}}
"""

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["w"], p["TW"]), cdiv(s["h"], p["TH"]), s["n"] * cdiv(s["cout"], p["CO_TILE"]))
        return [Launch("conv2d", grid, (*CONV2D_ARGS, *_conv2d_scalars(s)), (p["TW"], p["TH"], 1))]

    return Variant("cuda-smem-tiled", "cuda", {"dtype": dtype, **p}, code, launches, unsupported=_supports(dtype))


# Appended to a GEMM source of ops.gemm, whose prelude defines T and st.
IM2COL = """
// Col[n][ci*9 + kh*3 + kw][h*W + w] = X[n][ci][h+kh-1][w+kw-1], zero outside the image.
extern "C" __global__ void im2col(const T* __restrict__ X, T* __restrict__ Col, int Cin, int H, int W, int total) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int hw = H * W, p = i % hw, r = i / hw % (Cin * 9), n = i / hw / (Cin * 9);
    const int ci = r / 9, ih = p / W + r % 9 / 3 - 1, iw = p % W + r % 3 - 1;
    Col[i] = ih >= 0 && ih < H && iw >= 0 && iw < W ? X[(((size_t)n * Cin + ci) * H + ih) * W + iw] : st(0.0f);
}
"""


# GEMM kernels of ops.gemm for Y[n] (Cout x HW) = W (Cout x Cin*9) @ Col[n] (Cin*9 x HW).
IM2COL_GEMMS = {
    "smem-tiled-16": {"tile": 16, "b_layout": "kn", "pad": 0, "unroll": True},
    "smem-tiled-32": {"tile": 32, "b_layout": "kn", "pad": 0, "unroll": True},
    "register-64x64": register_params((64, 64, 8, 4, 4)),
    "register-128x128": register_params((128, 128, 8, 8, 8)),
    "mma-64x64": mma_smem_params((64, 64, 2, 2)),
    "mma-128x128": mma_smem_params((128, 128, 2, 4)),
}


def conv2d_im2col_variant(dtype: str, gemm: str) -> Variant:
    p = IM2COL_GEMMS[gemm]
    if gemm.startswith("smem"):
        gemm_code, tile, shared = smem_tiled_code(dtype, p["tile"], "kn", 0, True, "bc"), (p["tile"], p["tile"], 1), 0
        threads, multiple = (p["tile"], p["tile"], 1), (1, 1, 1)
    elif gemm.startswith("register"):
        gemm_code, tile, shared = register_tiled_code(dtype, p, "bc"), (p["BM"], p["BN"], p["BK"]), 0
        threads, multiple = block1((p["BM"] // p["TM"]) * (p["BN"] // p["TN"])), tile
    else:
        gemm_code, tile, shared = mma_smem_code(dtype, p, "bc"), (p["BM"], p["BN"], p["BK"]), mma_smem_shared_bytes(dtype, p)
        threads, multiple = block1(p["WARPS_M"] * p["WARPS_N"] * 32), tile
    code = gemm_code + IM2COL

    def launches(s: Sizes) -> list[Launch]:
        hw, reduction = s["h"] * s["w"], s["cin"] * 9
        total = s["n"] * reduction * hw
        return [
            Launch("im2col", grid1(cdiv(total, 256)), ("x", "col", i32(s["cin"]), i32(s["h"]), i32(s["w"]), i32(total)), block1(256)),
            Launch(
                "gemm",
                (cdiv(hw, tile[1]), cdiv(s["cout"], tile[0]), s["n"]),
                ("w", "col", "y", i32(s["cout"]), i32(hw), i32(reduction)),
                threads,
                shared_bytes=shared,
            ),
        ]

    def check(s: Sizes) -> str | None:
        dims = (s["cout"], s["h"] * s["w"], s["cin"] * 9)
        return None if all(d % m == 0 for d, m in zip(dims, multiple)) else f"GEMM dims {dims} not multiples of its tile {multiple}"

    return Variant(
        "cuda-im2col-gemm",
        "cuda",
        {"dtype": dtype, "gemm": gemm},
        code,
        launches,
        scratch=lambda s: {"col": TensorSpec((s["n"], s["cin"] * 9, s["h"] * s["w"]), s["dtype"])},
        unsupported=_supports(dtype, check),
    )


TRITON_CONV2D = """import triton
import triton.language as tl


@triton.jit
def conv2d(x_ptr, w_ptr, y_ptr, N, Cin, Cout, H, W, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           INPUT_PRECISION: tl.constexpr):
    # Implicit GEMM: rows are output pixels (n, h, w), columns output channels, reduction Cin x 3 x 3.
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    co = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    hw = m % (H * W)
    nb = m // (H * W)
    oh = hw // W
    ow = hw % W
    R = Cin * 9
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_K):
        r = r0 + tl.arange(0, BLOCK_K)
        ih = oh[:, None] + ((r % 9) // 3)[None, :] - 1
        iw = ow[:, None] + (r % 3)[None, :] - 1
        inside = (m[:, None] < N * H * W) & (r[None, :] < R) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load(x_ptr + ((nb[:, None] * Cin + (r // 9)[None, :]) * H + ih) * W + iw, mask=inside, other=0.0)
        b = tl.load(w_ptr + co[None, :] * R + r[:, None], mask=(r[:, None] < R) & (co[None, :] < Cout), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    y = y_ptr + (nb[:, None] * Cout + co[None, :]) * (H * W) + hw[:, None]
    tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=(m[:, None] < N * H * W) & (co[None, :] < Cout))
"""


def conv2d_triton_variant(dtype: str, p: dict[str, Any]) -> Variant:
    constexprs = {"BLOCK_M": p["BLOCK_M"], "BLOCK_N": p["BLOCK_N"], "BLOCK_K": p["BLOCK_K"], "INPUT_PRECISION": p["input_precision"]}

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["n"] * s["h"] * s["w"], p["BLOCK_M"]), cdiv(s["cout"], p["BLOCK_N"]), 1)
        return [
            Launch(
                "conv2d",
                grid,
                (*CONV2D_ARGS, i32(s["n"]), *_conv2d_scalars(s)),
                constexprs=constexprs,
                num_warps=p["num_warps"],
                num_stages=p["num_stages"],
            )
        ]

    return Variant("triton-implicit-gemm", "triton", {"dtype": dtype, **p}, TRITON_CONV2D, launches, unsupported=_supports(dtype))


def conv2d_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        for bx, by in ((32, 8), (16, 16), (8, 8), (64, 4)):
            yield conv2d_direct_variant(dtype, {"block_x": bx, "block_y": by, "order": "coalesced"})
        yield conv2d_direct_variant(dtype, {"block_x": 32, "block_y": 8, "order": "transposed"})
        for tw, th, co_tile, ci_chunk in (
            (16, 16, 4, 8),
            (16, 16, 8, 8),
            (32, 8, 8, 8),
            (32, 8, 16, 4),
            (16, 8, 16, 8),
            (8, 8, 8, 8),
            (32, 4, 8, 8),
        ):
            yield conv2d_smem_variant(dtype, {"TW": tw, "TH": th, "CO_TILE": co_tile, "CI_CHUNK": ci_chunk})
        for gemm in IM2COL_GEMMS:
            if dtype == "f16" or not gemm.startswith("mma"):
                yield conv2d_im2col_variant(dtype, gemm)
        for precision in _precisions(dtype):
            for block_m, block_n, block_k, warps, stages in (
                (128, 64, 32, 4, 3),
                (64, 64, 32, 4, 3),
                (128, 128, 32, 8, 3),
                (64, 32, 16, 4, 2),
                (128, 32, 32, 4, 3),
            ):
                yield conv2d_triton_variant(
                    dtype,
                    {
                        "BLOCK_M": block_m,
                        "BLOCK_N": block_n,
                        "BLOCK_K": block_k,
                        "num_warps": warps,
                        "num_stages": stages,
                        "input_precision": precision,
                    },
                )


# --- depthwise conv2d --------------------------------------------------------------------------

DEPTHWISE_SIZES = [
    {"n": n, "c": c, "h": hw, "w": hw, "dtype": dtype}
    for dtype in ("f32", "f16")
    for n, c, hw in ((1, 32, 64), (8, 128, 112), (16, 256, 56), (32, 512, 28))
]
DEPTHWISE_ARGS = ("x", "w", "y")


def _depthwise_scalars(s: Sizes) -> tuple[Any, ...]:
    return (i32(s["c"]), i32(s["h"]), i32(s["w"]))


def depthwise_direct_variant(dtype: str, p: dict[str, Any]) -> Variant:
    along_w = p["order"] == "coalesced"
    x_index, y_index = ("x", "y") if along_w else ("y", "x")
    code = f"""{cuda_prelude(dtype)}
extern "C" __global__ void depthwise(const T* __restrict__ X, const T* __restrict__ Wt, T* __restrict__ Y, int C, int H, int W) {{
    const int ow = blockIdx.{x_index} * blockDim.{x_index} + threadIdx.{x_index};  // threadIdx.x along {"W (contiguous)" if along_w else "H: neighbours W apart"}
    const int oh = blockIdx.{y_index} * blockDim.{y_index} + threadIdx.{y_index};
    const size_t plane = blockIdx.z;  // n * C + c
    if (oh >= H || ow >= W) return;
    const T* x = X + plane * H * W;
    const T* w = Wt + (plane % C) * 9;
    float acc = 0.0f;
    #pragma unroll
    for (int kh = 0; kh < 3; ++kh)
        #pragma unroll
        for (int kw = 0; kw < 3; ++kw) {{
            const int ih = oh + kh - 1, iw = ow + kw - 1;
            if (ih >= 0 && ih < H && iw >= 0 && iw < W) acc += ld(x[ih * W + iw]) * ld(w[kh * 3 + kw]);
        }}
    Y[plane * H * W + oh * W + ow] = st(acc);
}}
"""
    bx, by = p["block_x"], p["block_y"]

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["w"], bx), cdiv(s["h"], by)) if along_w else (cdiv(s["h"], bx), cdiv(s["w"], by))
        return [Launch("depthwise", (*grid, s["n"] * s["c"]), (*DEPTHWISE_ARGS, *_depthwise_scalars(s)), (bx, by, 1))]

    return Variant("cuda-direct", "cuda", {"dtype": dtype, **p}, code, launches, unsupported=_supports(dtype))


def depthwise_smem_variant(dtype: str, p: dict[str, Any]) -> Variant:
    code = f"""{cuda_prelude(dtype)}
#define TW {p["TW"]}
#define TH {p["TH"]}
#define ROWS {p["ROWS"]}

extern "C" __global__ void __launch_bounds__(TW * TH / ROWS) depthwise(const T* __restrict__ X, const T* __restrict__ Wt, T* __restrict__ Y, int C, int H, int W) {{
    __shared__ float xs[TH + 2][TW + 2];  // the tile and its halo
    const size_t plane = blockIdx.z;
    const int tx = threadIdx.x, ty = threadIdx.y, w0 = blockIdx.x * TW, h0 = blockIdx.y * TH;
    const T* x = X + plane * H * W;
    for (int e = ty * TW + tx; e < (TH + 2) * (TW + 2); e += TW * TH / ROWS) {{
        const int ih = h0 + e / (TW + 2) - 1, iw = w0 + e % (TW + 2) - 1;
        xs[e / (TW + 2)][e % (TW + 2)] = ih >= 0 && ih < H && iw >= 0 && iw < W ? ld(x[ih * W + iw]) : 0.0f;
    }}
    float w[9];
    #pragma unroll
    for (int k = 0; k < 9; ++k) w[k] = ld(Wt[(plane % C) * 9 + k]);
    __syncthreads();
    // ROWS outputs down a column: each new output row reads one new row of the window.
    const int r0 = ty * ROWS;
    float a0 = xs[r0][tx], a1 = xs[r0][tx + 1], a2 = xs[r0][tx + 2];
    float b0 = xs[r0 + 1][tx], b1 = xs[r0 + 1][tx + 1], b2 = xs[r0 + 1][tx + 2];
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {{
        const float c0 = xs[r0 + r + 2][tx], c1 = xs[r0 + r + 2][tx + 1], c2 = xs[r0 + r + 2][tx + 2];
        const float acc = w[0] * a0 + w[1] * a1 + w[2] * a2 + w[3] * b0 + w[4] * b1 + w[5] * b2 + w[6] * c0 + w[7] * c1 + w[8] * c2;
        const int oh = h0 + r0 + r, ow = w0 + tx;
        if (oh < H && ow < W) Y[plane * H * W + oh * W + ow] = st(acc);
        a0 = b0; a1 = b1; a2 = b2;
        b0 = c0; b1 = c1; b2 = c2;
    }}
}}
"""

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["w"], p["TW"]), cdiv(s["h"], p["TH"]), s["n"] * s["c"])
        return [Launch("depthwise", grid, (*DEPTHWISE_ARGS, *_depthwise_scalars(s)), (p["TW"], p["TH"] // p["ROWS"], 1))]

    return Variant("cuda-smem-tiled", "cuda", {"dtype": dtype, **p}, code, launches, unsupported=_supports(dtype))


TRITON_DEPTHWISE = """import triton
import triton.language as tl


@triton.jit
def depthwise(x_ptr, w_ptr, y_ptr, C, H, W, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    plane = tl.program_id(2).to(tl.int64)
    oh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ow = tl.program_id(0) * BLOCK_W + tl.arange(0, BLOCK_W)
    x = x_ptr + plane * H * W
    acc = tl.zeros((BLOCK_H, BLOCK_W), dtype=tl.float32)
    for k in tl.static_range(9):
        ih = oh[:, None] + k // 3 - 1
        iw = ow[None, :] + k % 3 - 1
        v = tl.load(x + ih * W + iw, mask=(ih >= 0) & (ih < H) & (iw >= 0) & (iw < W), other=0.0).to(tl.float32)
        acc += v * tl.load(w_ptr + (plane % C) * 9 + k).to(tl.float32)
    tl.store(y_ptr + plane * H * W + oh[:, None] * W + ow[None, :], acc.to(y_ptr.dtype.element_ty), mask=(oh[:, None] < H) & (ow[None, :] < W))
"""


def depthwise_triton_variant(dtype: str, p: dict[str, Any]) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["w"], p["BLOCK_W"]), cdiv(s["h"], p["BLOCK_H"]), s["n"] * s["c"])
        return [
            Launch(
                "depthwise",
                grid,
                (*DEPTHWISE_ARGS, *_depthwise_scalars(s)),
                constexprs={"BLOCK_H": p["BLOCK_H"], "BLOCK_W": p["BLOCK_W"]},
                num_warps=p["num_warps"],
            )
        ]

    return Variant("triton-direct", "triton", {"dtype": dtype, **p}, TRITON_DEPTHWISE, launches, unsupported=_supports(dtype))


def depthwise_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        for bx, by in ((32, 8), (16, 16), (64, 4), (128, 1), (8, 32), (256, 1)):
            yield depthwise_direct_variant(dtype, {"block_x": bx, "block_y": by, "order": "coalesced"})
        yield depthwise_direct_variant(dtype, {"block_x": 32, "block_y": 8, "order": "transposed"})
        for tw, th, rows in ((32, 8, 1), (32, 16, 2), (32, 32, 4), (64, 16, 4), (32, 32, 8), (64, 8, 2), (16, 16, 1), (128, 8, 4)):
            yield depthwise_smem_variant(dtype, {"TW": tw, "TH": th, "ROWS": rows})
        for block_h, block_w, warps in (
            (8, 32, 2),
            (8, 64, 4),
            (16, 64, 4),
            (4, 128, 4),
            (32, 32, 8),
            (16, 32, 4),
            (2, 256, 4),
            (8, 128, 8),
        ):
            yield depthwise_triton_variant(dtype, {"BLOCK_H": block_h, "BLOCK_W": block_w, "num_warps": warps})


# --- the operations ----------------------------------------------------------------------------

OPS = [
    Op(
        name="conv1d",
        bound="compute",
        sizes=CONV1D_SIZES,
        inputs=lambda s: {
            "x": TensorSpec((s["n"], s["cin"], s["l"]), s["dtype"], "rand"),
            "w": TensorSpec((s["cout"], s["cin"], s["k"]), s["dtype"], "rand"),
        },
        outputs=lambda s: {"y": TensorSpec((s["n"], s["cout"], s["l"]), s["dtype"])},
        reference=lambda torch, inputs, s: {"y": torch.nn.functional.conv1d(inputs["x"], inputs["w"], padding=s["k"] // 2)},
        reference_code="def reference(x, w):\n    return torch.nn.functional.conv1d(x, w, padding=w.shape[-1] // 2)\n",
        variants=conv1d_variants,
        tolerance=TOLERANCE,
    ),
    Op(
        name="conv2d",
        bound="compute",
        sizes=CONV2D_SIZES,
        inputs=lambda s: {
            "x": TensorSpec((s["n"], s["cin"], s["h"], s["w"]), s["dtype"], "rand"),
            "w": TensorSpec((s["cout"], s["cin"], 3, 3), s["dtype"], "rand"),
        },
        outputs=lambda s: {"y": TensorSpec((s["n"], s["cout"], s["h"], s["w"]), s["dtype"])},
        reference=lambda torch, inputs, s: {"y": torch.nn.functional.conv2d(inputs["x"], inputs["w"], padding=1)},
        reference_code="def reference(x, w):\n    return torch.nn.functional.conv2d(x, w, padding=1)\n",
        variants=conv2d_variants,
        tolerance=TOLERANCE,
    ),
    Op(
        name="depthwise_conv2d",
        bound="memory",
        sizes=DEPTHWISE_SIZES,
        inputs=lambda s: {
            "x": TensorSpec((s["n"], s["c"], s["h"], s["w"]), s["dtype"], "rand"),
            "w": TensorSpec((s["c"], 1, 3, 3), s["dtype"], "rand"),
        },
        outputs=lambda s: {"y": TensorSpec((s["n"], s["c"], s["h"], s["w"]), s["dtype"])},
        reference=lambda torch, inputs, s: {"y": torch.nn.functional.conv2d(inputs["x"], inputs["w"], padding=1, groups=s["c"])},
        reference_code="def reference(x, w):\n    return torch.nn.functional.conv2d(x, w, padding=1, groups=x.shape[1])\n",
        variants=depthwise_variants,
        tolerance=TOLERANCE,
    ),
]
