"""Scaled dot-product attention, softmax(Q Kᵀ / √d) V per head: [B·H, S, d=64], fp16 and fp32.

The reference is torch's scaled_dot_product_attention (flash / memory-efficient kernels),
the "hard to beat" side. Variants span the fused vs unfused axis and, within each, the
choices that decide speed:

- cuda-unfused: three launches through an fp32 [B·H, S, S] scratch: scores (naive dot
  per thread, or 16x16 tiles of Q and K in shared memory), an in-place row softmax (a
  block per row with a shared-memory tree, or a warp per row with __shfl_xor), and P V
  (naive, or tiles of P and V in shared memory).
- cuda-flash-row: fused, a thread per query row (q and the output row in registers),
  K/V tiles of BKV rows in shared memory; online softmax rescaled per key (a divergent
  branch whenever the running max grows) or once per 32 keys.
- cuda-flash-warp: fused, a warp per query row; lanes split the keys (a lane's full dot
  product, then a shuffle max/sum per 32 keys and p broadcast by __shfl_sync) or the head
  dimension (two dims a lane, a 5-step shuffle reduction per key).
- cuda-flash-mma: fused on tensor cores (fp16): per warp 16 query rows, S = Q Kᵀ and
  O += P V by mma.sync m16n8k16 with ldmatrix from skewed shared-memory tiles, P kept in
  registers as the A operand (FlashAttention-2 style); warps per block, BKV.
- triton-flash: FlashAttention-style forward with BLOCK_M, BLOCK_N, num_warps,
  num_stages and, for fp32, input_precision (ieee or tf32) of both tl.dot calls.
- triton-unfused: tl.dot scores into scratch, a row-softmax kernel, tl.dot P V.

The fp32 tolerance (5e-3) covers TF32 products in both dots: on an H100 the TF32
variants were off by up to 2.7e-3 (scores off by ~1e-3 move p, and p and v are cut to
10 mantissa bits again for P V); exact fp32 variants land near 1e-6.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.gemm import cuda_prelude
from workshop.corpus.ops.rowkit import NEG_INF
from workshop.corpus.spec import Launch, Op, Sizes, TensorSpec, Variant, cdiv, f32, i32

HEAD_DIM = 64
SIZES = [
    *({"bh": bh, "s": s, "d": HEAD_DIM, "dtype": "f16"} for bh, s in ((8, 128), (32, 512), (16, 1024), (16, 2048))),
    *({"bh": bh, "s": s, "d": HEAD_DIM, "dtype": "f32"} for bh, s in ((8, 128), (32, 512), (16, 1024), (8, 2048))),
]
SCALE = HEAD_DIM**-0.5

REFERENCE_CODE = """\
def reference(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
"""


def _prelude(dtype: str) -> str:
    return f"{cuda_prelude(dtype)}\n#define D {HEAD_DIM}\n#define NEG_INF {NEG_INF}\n"


# --- CUDA, unfused -----------------------------------------------------------------------------

SCORES = {
    "naive": """extern "C" __global__ void scores(const T* __restrict__ Q, const T* __restrict__ Km, float* __restrict__ P, int S, float scale) {
    const size_t bh = blockIdx.z;
    const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= S || j >= S) return;
    const T* q = Q + (bh * S + i) * D;
    const T* k = Km + (bh * S + j) * D;  // neighbouring threads: rows D apart
    float s = 0.0f;
    #pragma unroll 16
    for (int d = 0; d < D; ++d) s += ld(q[d]) * ld(k[d]);
    P[(bh * S + i) * S + j] = s * scale;
}
""",
    "tiled": """#define TILE 16
extern "C" __global__ void scores(const T* __restrict__ Q, const T* __restrict__ Km, float* __restrict__ P, int S, float scale) {
    __shared__ float Qs[TILE][D + 1], Ks[TILE][D + 1];  // +1: threads of a warp read Ks rows conflict-free
    const size_t bh = blockIdx.z;
    const int tx = threadIdx.x, ty = threadIdx.y, i0 = blockIdx.y * TILE, j0 = blockIdx.x * TILE;
    for (int e = ty * TILE + tx; e < TILE * D; e += TILE * TILE) {
        const int r = e / D, c = e % D;
        Qs[r][c] = i0 + r < S ? ld(Q[(bh * S + i0 + r) * D + c]) : 0.0f;
        Ks[r][c] = j0 + r < S ? ld(Km[(bh * S + j0 + r) * D + c]) : 0.0f;
    }
    __syncthreads();
    float s = 0.0f;
    #pragma unroll
    for (int d = 0; d < D; ++d) s += Qs[ty][d] * Ks[tx][d];
    if (i0 + ty < S && j0 + tx < S) P[(bh * S + i0 + ty) * S + j0 + tx] = s * scale;
}
""",
}

SOFTMAX = {
    "block": """extern "C" __global__ void softmax(float* __restrict__ P, int rows, int S) {
    __shared__ float red[256];
    float* row = P + (size_t)blockIdx.x * S;  // a block of 256 threads per row
    const int t = threadIdx.x;
    float m = NEG_INF;
    for (int j = t; j < S; j += 256) m = fmaxf(m, row[j]);
    red[t] = m;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (t < s) red[t] = fmaxf(red[t], red[t + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int j = t; j < S; j += 256) sum += __expf(row[j] - m);
    red[t] = sum;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        __syncthreads();
    }
    const float inv = 1.0f / red[0];
    for (int j = t; j < S; j += 256) row[j] = __expf(row[j] - m) * inv;
}
""",
    "warp": """extern "C" __global__ void softmax(float* __restrict__ P, int rows, int S) {
    const size_t r = (size_t)blockIdx.x * 8 + threadIdx.x / 32;  // a warp per row, 8 rows per block
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    float* row = P + r * S;
    float m = NEG_INF;
    for (int j = lane; j < S; j += 32) m = fmaxf(m, row[j]);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
    for (int j = lane; j < S; j += 32) sum += __expf(row[j] - m);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = 1.0f / sum;
    for (int j = lane; j < S; j += 32) row[j] = __expf(row[j] - m) * inv;
}
""",
}

PV = {
    "naive": """extern "C" __global__ void pv(const float* __restrict__ P, const T* __restrict__ V, T* __restrict__ O, int S) {
    const size_t bh = blockIdx.y;
    const int i = blockIdx.x * blockDim.y + threadIdx.y, d = threadIdx.x;  // a thread per output, threadIdx.x along d
    if (i >= S) return;
    const float* p = P + (bh * S + i) * S;
    const T* v = V + bh * S * D + d;
    float acc = 0.0f;
    for (int j = 0; j < S; ++j) acc += p[j] * ld(v[(size_t)j * D]);
    O[(bh * S + i) * D + d] = st(acc);
}
""",
    "tiled": """#define ROWS 32
extern "C" __global__ void pv(const float* __restrict__ P, const T* __restrict__ V, T* __restrict__ O, int S) {
    __shared__ float Ps[ROWS][ROWS + 1], Vs[ROWS][D];
    const size_t bh = blockIdx.y;
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * D + tx, i0 = blockIdx.x * ROWS;  // 64 x 8 threads, 4 rows each
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j0 = 0; j0 < S; j0 += ROWS) {
        for (int e = t; e < ROWS * ROWS; e += D * 8) {
            const int r = e / ROWS, c = e % ROWS;
            Ps[r][c] = i0 + r < S && j0 + c < S ? P[(bh * S + i0 + r) * S + j0 + c] : 0.0f;
        }
        for (int e = t; e < ROWS * D; e += D * 8) {
            const int r = e / D, c = e % D;
            Vs[r][c] = j0 + r < S ? ld(V[(bh * S + j0 + r) * D + c]) : 0.0f;
        }
        __syncthreads();
        #pragma unroll 8
        for (int jj = 0; jj < ROWS; ++jj) {
            const float v = Vs[jj][tx];
            #pragma unroll
            for (int r = 0; r < 4; ++r) acc[r] += Ps[ty * 4 + r][jj] * v;
        }
        __syncthreads();
    }
    #pragma unroll
    for (int r = 0; r < 4; ++r)
        if (i0 + ty * 4 + r < S) O[(bh * S + i0 + ty * 4 + r) * D + tx] = st(acc[r]);
}
""",
}


def unfused_variant(dtype: str, p: dict[str, Any]) -> Variant:
    code = _prelude(dtype) + "\n" + SCORES[p["scores"]] + "\n" + SOFTMAX[p["softmax"]] + "\n" + PV[p["pv"]]

    def launches(s: Sizes) -> list[Launch]:
        bh, n = s["bh"], s["s"]
        rows = bh * n
        softmax = (rows, 256) if p["softmax"] == "block" else (cdiv(rows, 8), 256)
        pv = ((cdiv(n, 4), bh, 1), (HEAD_DIM, 4, 1)) if p["pv"] == "naive" else ((cdiv(n, 32), bh, 1), (HEAD_DIM, 8, 1))
        return [
            Launch("scores", (cdiv(n, 16), cdiv(n, 16), bh), ("q", "k", "scores", i32(n), f32(SCALE)), (16, 16, 1)),
            Launch("softmax", (softmax[0], 1, 1), ("scores", i32(rows), i32(n)), (softmax[1], 1, 1)),
            Launch("pv", pv[0], ("scores", "v", "o", i32(n)), pv[1]),
        ]

    return Variant("cuda-unfused", "cuda", {"dtype": dtype, **p}, code, launches, scratch=_scores_scratch, unsupported=_supports(dtype))


def _scores_scratch(s: Sizes) -> dict[str, TensorSpec]:
    return {"scores": TensorSpec((s["bh"], s["s"], s["s"]), "f32")}


# --- CUDA, fused on CUDA cores -----------------------------------------------------------------

ROW_UPDATE = {
    # Online softmax per key: rescale o only when the running max grows (divergent across threads).
    "per_key": """        for (int jj = 0; jj < BKV; ++jj) {
            float s = 0.0f;
            #pragma unroll
            for (int d = 0; d < D; ++d) s += q[d] * ld(Ks[jj * D + d]);
            if (s > m) {
                const float alpha = exp2f(m - s);
                l *= alpha;
                #pragma unroll
                for (int d = 0; d < D; ++d) o[d] *= alpha;
                m = s;
            }
            const float p = exp2f(s - m);
            l += p;
            #pragma unroll
            for (int d = 0; d < D; ++d) o[d] += p * ld(Vs[jj * D + d]);
        }""",
    # 32 scores in registers first, then one rescale for all of them.
    "per_32_keys": """        for (int c0 = 0; c0 < BKV; c0 += 32) {
            float s[32], mt = m;
            #pragma unroll
            for (int jj = 0; jj < 32; ++jj) {
                float acc = 0.0f;
                #pragma unroll
                for (int d = 0; d < D; ++d) acc += q[d] * ld(Ks[(c0 + jj) * D + d]);
                s[jj] = acc;
                mt = fmaxf(mt, acc);
            }
            const float alpha = exp2f(m - mt);
            l *= alpha;
            #pragma unroll
            for (int d = 0; d < D; ++d) o[d] *= alpha;
            m = mt;
            #pragma unroll
            for (int jj = 0; jj < 32; ++jj) {
                const float p = exp2f(s[jj] - m);
                l += p;
                #pragma unroll
                for (int d = 0; d < D; ++d) o[d] += p * ld(Vs[(c0 + jj) * D + d]);
            }
        }""",
}

ATTENTION_SIGNATURE = (
    "attention(const T* __restrict__ Q, const T* __restrict__ Km, const T* __restrict__ V, T* __restrict__ O, int S, float scale)"
)


def flash_row_code(dtype: str, p: dict[str, Any]) -> str:
    return f"""{_prelude(dtype)}#define BQ {p["BQ"]}
#define BKV {p["BKV"]}

extern "C" __global__ void __launch_bounds__(BQ) {ATTENTION_SIGNATURE} {{
    extern __shared__ __align__(16) unsigned char smem[];
    T* Ks = reinterpret_cast<T*>(smem);  // [BKV][D]
    T* Vs = Ks + BKV * D;                // [BKV][D]
    const size_t bh = blockIdx.y;
    const int i = blockIdx.x * BQ + threadIdx.x;  // this thread's query row
    const float c = scale * 1.4426950408889634f;  // exp2 of scaled scores
    float q[D], o[D], m = NEG_INF, l = 0.0f;
    #pragma unroll
    for (int d = 0; d < D; ++d) {{
        q[d] = ld(Q[(bh * S + i) * D + d]) * c;
        o[d] = 0.0f;
    }}
    for (int j0 = 0; j0 < S; j0 += BKV) {{
        __syncthreads();
        for (int e = threadIdx.x; e < BKV * D; e += BQ) {{
            Ks[e] = Km[(bh * S + j0) * D + e];
            Vs[e] = V[(bh * S + j0) * D + e];
        }}
        __syncthreads();
{ROW_UPDATE[p["rescale"]]}
    }}
    const float inv = 1.0f / l;
    #pragma unroll
    for (int d = 0; d < D; ++d) O[(bh * S + i) * D + d] = st(o[d] * inv);
}}
"""


def flash_row_variant(dtype: str, p: dict[str, Any]) -> Variant:
    shared = 2 * p["BKV"] * HEAD_DIM * (4 if dtype == "f32" else 2)

    def launches(s: Sizes) -> list[Launch]:
        return [Launch("attention", (s["s"] // p["BQ"], s["bh"], 1), _attention_args(s), (p["BQ"], 1, 1), shared_bytes=shared)]

    return Variant(
        "cuda-flash-row", "cuda", {"dtype": dtype, **p}, flash_row_code(dtype, p), launches, unsupported=_supports(dtype, p["BQ"], p["BKV"])
    )


WARP_UPDATE = {
    # Lane j scores key j of 32 with its own full dot product; max and sum by shuffles; p_j broadcast for P V.
    "keys": """        for (int c0 = 0; c0 < BKV; c0 += 32) {
            float s = 0.0f;
            #pragma unroll
            for (int d = 0; d < D; ++d) s += q[d] * Ks[c0 + lane][d];
            float mt = s;
            #pragma unroll
            for (int x = 16; x > 0; x >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, x));
            mt = fmaxf(mt, m);
            const float alpha = exp2f(m - mt), p = exp2f(s - mt);
            float sum = p;
            #pragma unroll
            for (int x = 16; x > 0; x >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
            l = l * alpha + sum;
            o0 *= alpha;
            o1 *= alpha;
            m = mt;
            #pragma unroll
            for (int jj = 0; jj < 32; ++jj) {
                const float pj = __shfl_sync(0xffffffffu, p, jj);
                o0 += pj * Vs[c0 + jj][lane];
                o1 += pj * Vs[c0 + jj][lane + 32];
            }
        }""",
    # Lanes hold dims lane and lane+32: partial dot products summed by a 5-step butterfly per key.
    "dims": """        for (int jj = 0; jj < BKV; ++jj) {
            float s = q0 * Ks[jj][lane] + q1 * Ks[jj][lane + 32];
            #pragma unroll
            for (int x = 16; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
            const float mt = fmaxf(m, s), alpha = exp2f(m - mt), p = exp2f(s - mt);
            l = l * alpha + p;
            o0 = o0 * alpha + p * Vs[jj][lane];
            o1 = o1 * alpha + p * Vs[jj][lane + 32];
            m = mt;
        }""",
}


def flash_warp_code(dtype: str, p: dict[str, Any]) -> str:
    if p["lanes"] == "keys":
        query = """    float q[D];
    #pragma unroll
    for (int d = 0; d < D; ++d) q[d] = ld(Q[(bh * S + i) * D + d]) * c;"""
    else:
        query = "    const float q0 = ld(Q[(bh * S + i) * D + lane]) * c, q1 = ld(Q[(bh * S + i) * D + lane + 32]) * c;"
    return f"""{_prelude(dtype)}#define WARPS {p["warps"]}
#define BKV {p["BKV"]}

extern "C" __global__ void __launch_bounds__(WARPS * 32) {ATTENTION_SIGNATURE} {{
    __shared__ float Ks[BKV][D + 1], Vs[BKV][D];  // +1: lanes reading different key rows hit different banks
    const size_t bh = blockIdx.y;
    const int lane = threadIdx.x % 32, i = blockIdx.x * WARPS + threadIdx.x / 32;  // a warp per query row
    const float c = scale * 1.4426950408889634f;
{query}
    float m = NEG_INF, l = 0.0f, o0 = 0.0f, o1 = 0.0f;
    for (int j0 = 0; j0 < S; j0 += BKV) {{
        __syncthreads();
        for (int e = threadIdx.x; e < BKV * D; e += WARPS * 32) {{
            Ks[e / D][e % D] = ld(Km[(bh * S + j0) * D + e]);
            Vs[e / D][e % D] = ld(V[(bh * S + j0) * D + e]);
        }}
        __syncthreads();
{WARP_UPDATE[p["lanes"]]}
    }}
    O[(bh * S + i) * D + lane] = st(o0 / l);
    O[(bh * S + i) * D + lane + 32] = st(o1 / l);
}}
"""


def flash_warp_variant(dtype: str, p: dict[str, Any]) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        return [Launch("attention", (s["s"] // p["warps"], s["bh"], 1), _attention_args(s), (p["warps"] * 32, 1, 1))]

    return Variant(
        "cuda-flash-warp",
        "cuda",
        {"dtype": dtype, **p},
        flash_warp_code(dtype, p),
        launches,
        unsupported=_supports(dtype, p["warps"], p["BKV"]),
    )


# --- CUDA, fused on tensor cores ---------------------------------------------------------------

MMA_HELPERS = r"""
__device__ __forceinline__ void mma16816(float* c, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const T* p, bool trans) {
    const unsigned address = (unsigned)__cvta_generic_to_shared(p);
    if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}

__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
}

struct __align__(16) Vec8 { T v[8]; };

// rows x D elements from global (row-major, D apart) into a skewed shared tile, 16 bytes per copy.
__device__ __forceinline__ void load_rows(T* tile, const T* src, int rows) {
    for (int e = threadIdx.x; e < rows * D / 8; e += blockDim.x) {
        const int r = e / (D / 8), c = (e % (D / 8)) * 8;
        *reinterpret_cast<Vec8*>(tile + r * LDS + c) = *reinterpret_cast<const Vec8*>(src + r * D + c);
    }
}
"""


def flash_mma_code(p: dict[str, Any]) -> str:
    return f"""{_prelude("f16")}#define WARPS {p["warps"]}
#define BQ (16 * WARPS)
#define BKV {p["BKV"]}
#define LDS (D + 8)  // skewed rows: 144 bytes, 16-byte aligned, ldmatrix rows in distinct banks
{MMA_HELPERS}
extern "C" __global__ void __launch_bounds__(WARPS * 32) {ATTENTION_SIGNATURE} {{
    __shared__ __align__(16) T Qs[BQ * LDS];
    __shared__ __align__(16) T Ks[BKV * LDS];
    __shared__ __align__(16) T Vs[BKV * LDS];
    const size_t bh = blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float c = scale * 1.4426950408889634f;
    load_rows(Qs, Q + (bh * S + blockIdx.x * BQ) * D, BQ);
    __syncthreads();
    unsigned qa[D / 16][4];  // this warp's 16 query rows as A fragments, one per 16 dims
    #pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) ldmatrix_x4(qa[ks], Qs + (warp * 16 + lane % 16) * LDS + ks * 16 + (lane / 16) * 8, false);
    float o[D / 8][4];
    #pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) o[dt][e] = 0.0f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0f, l1 = 0.0f;  // rows lane/4 and lane/4 + 8
    for (int j0 = 0; j0 < S; j0 += BKV) {{
        __syncthreads();
        load_rows(Ks, Km + (bh * S + j0) * D, BKV);
        load_rows(Vs, V + (bh * S + j0) * D, BKV);
        __syncthreads();
        float s[BKV / 8][4];  // S = Q Kᵀ: K rows are B columns, no transpose needed
        #pragma unroll
        for (int nt = 0; nt < BKV / 8; ++nt) {{
            #pragma unroll
            for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
            #pragma unroll
            for (int kp = 0; kp < D / 32; ++kp) {{
                unsigned kb[4];  // dims kp*32 + 0-7, 8-15 (one k16 step), 16-23, 24-31 (the next)
                ldmatrix_x4(kb, Ks + (nt * 8 + lane % 8) * LDS + kp * 32 + (lane / 8) * 8, false);
                mma16816(s[nt], qa[kp * 2], kb);
                mma16816(s[nt], qa[kp * 2 + 1], kb + 2);
            }}
        }}
        float mx0 = m0, mx1 = m1;
        #pragma unroll
        for (int nt = 0; nt < BKV / 8; ++nt) {{
            #pragma unroll
            for (int e = 0; e < 4; ++e) s[nt][e] *= c;
            mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
            mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
        }}
        #pragma unroll
        for (int x = 1; x < 4; x <<= 1) {{  // a row's values sit in the 4 lanes of a quad
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));
        }}
        const float a0 = exp2f(m0 - mx0), a1 = exp2f(m1 - mx1);
        m0 = mx0;
        m1 = mx1;
        float r0 = 0.0f, r1 = 0.0f;
        #pragma unroll
        for (int nt = 0; nt < BKV / 8; ++nt) {{
            s[nt][0] = exp2f(s[nt][0] - m0);
            s[nt][1] = exp2f(s[nt][1] - m0);
            s[nt][2] = exp2f(s[nt][2] - m1);
            s[nt][3] = exp2f(s[nt][3] - m1);
            r0 += s[nt][0] + s[nt][1];
            r1 += s[nt][2] + s[nt][3];
        }}
        l0 = l0 * a0 + r0;  // this lane's columns only: the quad is summed at the end
        l1 = l1 * a1 + r1;
        #pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {{
            o[dt][0] *= a0;
            o[dt][1] *= a0;
            o[dt][2] *= a1;
            o[dt][3] *= a1;
        }}
        #pragma unroll
        for (int kt = 0; kt < BKV / 16; ++kt) {{  // O += P V, P's accumulators reused as A fragments
            const unsigned pa[4] = {{pack_half2(s[2 * kt][0], s[2 * kt][1]), pack_half2(s[2 * kt][2], s[2 * kt][3]),
                                    pack_half2(s[2 * kt + 1][0], s[2 * kt + 1][1]), pack_half2(s[2 * kt + 1][2], s[2 * kt + 1][3])}};
            #pragma unroll
            for (int dt = 0; dt < D / 8; dt += 2) {{
                unsigned vb[4];
                ldmatrix_x4(vb, Vs + (kt * 16 + lane % 16) * LDS + dt * 8 + (lane / 16) * 8, true);
                mma16816(o[dt], pa, vb);
                mma16816(o[dt + 1], pa, vb + 2);
            }}
        }}
    }}
    #pragma unroll
    for (int x = 1; x < 4; x <<= 1) {{
        l0 += __shfl_xor_sync(0xffffffffu, l0, x);
        l1 += __shfl_xor_sync(0xffffffffu, l1, x);
    }}
    const int row = blockIdx.x * BQ + warp * 16 + lane / 4;
    #pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) {{
            const int r = row + (e / 2) * 8, d = dt * 8 + (lane % 4) * 2 + e % 2;
            O[(bh * S + r) * D + d] = st(o[dt][e] / (e < 2 ? l0 : l1));
        }}
}}
"""


def flash_mma_variant(p: dict[str, Any]) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        return [Launch("attention", (s["s"] // (16 * p["warps"]), s["bh"], 1), _attention_args(s), (p["warps"] * 32, 1, 1))]

    return Variant(
        "cuda-flash-mma",
        "cuda",
        {"dtype": "f16", **p},
        flash_mma_code(p),
        launches,
        unsupported=_supports("f16", 16 * p["warps"], p["BKV"]),
    )


# --- Triton ------------------------------------------------------------------------------------

TRITON_FLASH = """import triton
import triton.language as tl


@triton.jit
def attention(q_ptr, k_ptr, v_ptr, o_ptr, S, scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              INPUT_PRECISION: tl.constexpr):
    start_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * S * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    qk_scale = scale * 1.4426950408889634  # exp2 of scaled scores
    for start_n in range(0, S, BLOCK_N):
        keys = start_n + offs_n
        k = tl.load(k_ptr + base + keys[None, :] * HEAD_DIM + offs_d[:, None])  # [HEAD_DIM, BLOCK_N]: Kᵀ
        qk = tl.dot(q, k, input_precision=INPUT_PRECISION) * qk_scale
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + base + keys[:, None] * HEAD_DIM + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(o_ptr.dtype.element_ty))
"""

TRITON_UNFUSED = """import triton
import triton.language as tl


@triton.jit
def scores(q_ptr, k_ptr, p_ptr, S, scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
           INPUT_PRECISION: tl.constexpr):
    bh = tl.program_id(2).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + bh * S * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
    k = tl.load(k_ptr + bh * S * HEAD_DIM + offs_n[None, :] * HEAD_DIM + offs_d[:, None])
    s = tl.dot(q, k, input_precision=INPUT_PRECISION) * scale
    tl.store(p_ptr + bh * S * S + offs_m[:, None] * S + offs_n[None, :], s)


@triton.jit
def softmax(p_ptr, S, BLOCK: tl.constexpr):
    row = p_ptr + tl.program_id(0).to(tl.int64) * S
    offs = tl.arange(0, BLOCK)
    x = tl.load(row + offs, mask=offs < S, other=float("-inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(row + offs, e / tl.sum(e, 0), mask=offs < S)


@triton.jit
def pv(p_ptr, v_ptr, o_ptr, S, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    bh = tl.program_id(1).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    for start_n in range(0, S, BLOCK_N):
        keys = start_n + offs_n
        p = tl.load(p_ptr + bh * S * S + offs_m[:, None] * S + keys[None, :])
        v = tl.load(v_ptr + bh * S * HEAD_DIM + keys[:, None] * HEAD_DIM + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=INPUT_PRECISION)
    tl.store(o_ptr + bh * S * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(o_ptr.dtype.element_ty))
"""


def triton_flash_variant(dtype: str, p: dict[str, Any]) -> Variant:
    constexprs = {"HEAD_DIM": HEAD_DIM, "BLOCK_M": p["BLOCK_M"], "BLOCK_N": p["BLOCK_N"], "INPUT_PRECISION": p["input_precision"]}

    def launches(s: Sizes) -> list[Launch]:
        return [
            Launch(
                "attention",
                (s["s"] // p["BLOCK_M"], s["bh"], 1),
                _attention_args(s),
                constexprs=constexprs,
                num_warps=p["num_warps"],
                num_stages=p["num_stages"],
            )
        ]

    return Variant(
        "triton-flash", "triton", {"dtype": dtype, **p}, TRITON_FLASH, launches, unsupported=_supports(dtype, p["BLOCK_M"], p["BLOCK_N"])
    )


def triton_unfused_variant(dtype: str, p: dict[str, Any]) -> Variant:
    tiles = {"HEAD_DIM": HEAD_DIM, "BLOCK_M": p["BLOCK_M"], "BLOCK_N": p["BLOCK_N"], "INPUT_PRECISION": p["input_precision"]}

    def launches(s: Sizes) -> list[Launch]:
        bh, n = s["bh"], s["s"]
        return [
            Launch(
                "scores",
                (n // p["BLOCK_M"], n // p["BLOCK_N"], bh),
                ("q", "k", "scores", i32(n), f32(SCALE)),
                constexprs=tiles,
                num_warps=p["num_warps"],
            ),
            Launch("softmax", (bh * n, 1, 1), ("scores", i32(n)), constexprs={"BLOCK": n}, num_warps=p["softmax_warps"]),
            Launch("pv", (n // p["BLOCK_M"], bh, 1), ("scores", "v", "o", i32(n)), constexprs=tiles, num_warps=p["num_warps"]),
        ]

    return Variant(
        "triton-unfused",
        "triton",
        {"dtype": dtype, **p},
        TRITON_UNFUSED,
        launches,
        scratch=_scores_scratch,
        unsupported=_supports(dtype, p["BLOCK_M"], p["BLOCK_N"]),
    )


# --- the operation -----------------------------------------------------------------------------


def _attention_args(s: Sizes) -> tuple[Any, ...]:
    return ("q", "k", "v", "o", i32(s["s"]), f32(SCALE))


def _supports(dtype: str, rows: int = 1, keys: int = 1) -> Callable[[Sizes], str | None]:
    """Its precision only, and S a multiple of its query-row and key tiles."""

    def unsupported(s: Sizes) -> str | None:
        if s["dtype"] != dtype:
            return f"written for {dtype}"
        if s["d"] != HEAD_DIM:
            return f"head dimension fixed at {HEAD_DIM}"
        if s["s"] % rows or s["s"] % keys:
            return f"needs S a multiple of {rows} and {keys}"
        return None

    return unsupported


def variants() -> Iterable[Variant]:
    for dtype in ("f16", "f32"):
        for scores in ("naive", "tiled"):
            for softmax in ("block", "warp"):
                for pv in ("naive", "tiled"):
                    yield unfused_variant(dtype, {"scores": scores, "softmax": softmax, "pv": pv})
        for bq in (64, 128):
            for bkv in (32, 64):
                for rescale in ("per_key", "per_32_keys"):
                    yield flash_row_variant(dtype, {"BQ": bq, "BKV": bkv, "rescale": rescale})
        for warps in (4, 8):
            for lanes in ("keys", "dims"):
                yield flash_warp_variant(dtype, {"warps": warps, "BKV": 32, "lanes": lanes})
        yield flash_warp_variant(dtype, {"warps": 4, "BKV": 64, "lanes": "keys"})
        precisions = ("ieee",) if dtype == "f16" else ("ieee", "tf32")
        for precision in precisions:
            for block_m, block_n in ((64, 32), (64, 64), (128, 32), (128, 64), (128, 128)):
                yield triton_flash_variant(
                    dtype, {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": 4, "num_stages": 2, "input_precision": precision}
                )
            yield triton_flash_variant(
                dtype, {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "input_precision": precision}
            )
            yield triton_flash_variant(dtype, {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1, "input_precision": precision})
            yield triton_flash_variant(dtype, {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "input_precision": precision})
            for block_m, block_n, num_warps in ((64, 64, 4), (128, 64, 8)):
                yield triton_unfused_variant(
                    dtype,
                    {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": num_warps, "softmax_warps": 8, "input_precision": precision},
                )
        if dtype == "f16":
            for warps in (4, 8):
                for bkv in (32, 64):
                    yield flash_mma_variant({"warps": warps, "BKV": bkv})


def _reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    return {"o": torch.nn.functional.scaled_dot_product_attention(inputs["q"], inputs["k"], inputs["v"])}


def _qkv(s: Sizes) -> dict[str, TensorSpec]:
    return {name: TensorSpec((s["bh"], s["s"], s["d"]), s["dtype"]) for name in ("q", "k", "v")}


OP = Op(
    name="attention",
    bound="compute",
    sizes=SIZES,
    inputs=_qkv,
    outputs=lambda s: {"o": TensorSpec((s["bh"], s["s"], s["d"]), s["dtype"])},
    reference=_reference,
    reference_code=REFERENCE_CODE,
    variants=variants,
    tolerance={"f32": 5e-3, "f16": 1e-2},
)
