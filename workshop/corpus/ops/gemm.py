"""Dense matrix products: `gemm` (C = A @ B) and `gemm_bias_relu` (C = relu(A @ B + bias)).

The compute-bound core of the corpus, where cuBLAS (the PyTorch reference) is hard to beat.
CUDA families, one code skeleton each, and the axes that matter for their speed:

- cuda-naive: a thread per output; block shape, coalesced (threadIdx.x along N) or
  uncoalesced (threadIdx.x along M) order, unroll of the K loop.
- cuda-smem-tiled: TILE x TILE tiles of A and B in shared memory, a thread per output;
  tile 16/32, B stored k-major or n-major (n-major reads are 32-way bank conflicts
  unless padded by one element), unroll of the inner loop.
- cuda-register-tiled: a BM x BN block tile, BK deep, each thread a TM x TN micro-tile
  in registers; tile sizes, vector width of the global loads, unroll of the BK loop and
  __launch_bounds__ min blocks (3 or 4 blocks of 256 threads cap registers at 80 or 64:
  the 8x8 micro-tile spills on purpose).
- cuda-mma: tensor cores (fp16/bf16 in, fp32 accumulate) through PTX mma.sync m16n8k16,
  fragments loaded straight from global memory; m16 x n8 tiles per warp (FM x FN) and
  warps per block. (Inline PTX rather than mma.h: the GPU machine's NVRTC headers, from
  the CUDA pip wheels, lack crt/mma.h.)
- cuda-mma-smem: block tiles staged in shared memory, fragments by ldmatrix; tile
  sizes, skew (row padding: without it ldmatrix rows collide in banks), stages (1: plain
  loads; 2-3: a cp.async ring) and tensor_cores (False: the same warp tiles computed with
  fp32 FMAs from half inputs, so tensor cores vs none is one edit).

Triton (triton-dot): tl.dot with BLOCK_M/N/K, GROUP_M (1: row-major program order, 8:
grouped for L2 reuse), num_warps, num_stages and, for fp32, input_precision (ieee,
tf32, tf32x3). Half-precision inputs ignore input_precision ("ieee" is recorded).

Precision is a property of the problem (fp32, fp16, bf16 sizes). gemm's inputs are
uniform in [0, 1): every output is a sum of K positive terms, so a TF32 product
(operands cut to 10 mantissa bits, ~1e-3 relative, truncation bias included) stays
within an fp32 tolerance of 2e-3 at every K, while a wrong row, column or K-tile still
misses it by far. With zero-mean inputs an honest TF32 tolerance would be ~5e-2
(relative to |C| ~ sqrt(K)), too loose to check the exact fp32 variants. gemm_bias_relu
has no TF32 variants and uses zero-mean inputs, so that relu clips half the outputs.

Slow variants are limited (Variant.unsupported) to the sizes they run in under ~20 ms.
The generators take `batched` (blockIdx.z / program_id(1) selects a matrix of a batch)
so ops.batched reuses them for bmm, and conv2d its CUDA GEMMs after im2col.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.rowkit import ELEMENT_BYTES
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
    Launch,
    Op,
    Scalar,
    Sizes,
    TensorSpec,
    Variant,
    block1,
    cdiv,
    cuda_load_as_float,
    cuda_store_from_float,
    grid1,
    i32,
)

HALF = ("f16", "bf16")
# What a variant may do in 20 ms, in GFLOP (2*M*N*K*batch), measured on an H100.
NAIVE_GFLOP, UNCOALESCED_GFLOP, TILED_GFLOP = 18.0, 2.5, 18.0

GEMM_SIZES = [
    *({"m": n, "n": n, "k": n, "dtype": "f32"} for n in (128, 1024, 2048)),
    *({"m": n, "n": n, "k": n, "dtype": "f16"} for n in (128, 1024, 2048, 4096)),
    *({"m": n, "n": n, "k": n, "dtype": "bf16"} for n in (128, 1024, 4096)),
]

BIAS_RELU_SIZES = [
    *({"m": n, "n": n, "k": n, "dtype": "f32"} for n in (128, 512, 1024, 2048)),
    *({"m": n, "n": n, "k": n, "dtype": "f16"} for n in (128, 512, 1024, 4096)),
]


# --- CUDA sources ------------------------------------------------------------------------------


def cuda_prelude(dtype: str) -> str:
    """Element type T with ld (to float) and st (from float), shared by every CUDA source."""
    return f"""{CUDA_HEADER}
typedef {CUDA_TYPES[dtype]} T;
__device__ __forceinline__ float ld(T x) {{ return {cuda_load_as_float(dtype, "x")}; }}
__device__ __forceinline__ T st(float x) {{ return {cuda_store_from_float(dtype, "x")}; }}
"""


def _signature(bias: bool, launch_bounds: str = "") -> str:
    bias_arg = "const T* __restrict__ bias, " if bias else ""
    return (
        f'extern "C" __global__ void {launch_bounds}gemm(const T* __restrict__ A, const T* __restrict__ B, {bias_arg}'
        "T* __restrict__ C, int M, int N, int K)"
    )


def _batch_offsets(batched: str) -> str:
    """`batched` names the matrices (of "abc") that advance by one per grid z: "abc" for bmm, "bc" when A is shared."""
    if not batched:
        return ""
    steps = {"a": "A += z * M * K;", "b": "B += z * K * N;", "c": "C += z * M * N;"}
    return f"""    const size_t z = blockIdx.z;  // one problem of the batch per grid z
    {" ".join(steps[matrix] for matrix in batched)}
"""


def _store(bias: bool, value: str, col: str) -> str:
    """The stored element: the accumulator, or relu(accumulator + bias[col]) when fused."""
    return f"st(fmaxf({value} + ld(bias[{col}]), 0.0f))" if bias else f"st({value})"


def naive_code(dtype: str, coalesced: bool, unroll: int, batched: str = "", bias: bool = False) -> str:
    if coalesced:
        index = """    const int col = blockIdx.x * blockDim.x + threadIdx.x;  // neighbouring threads: neighbouring columns
    const int row = blockIdx.y * blockDim.y + threadIdx.y;"""
    else:
        index = """    const int row = blockIdx.x * blockDim.x + threadIdx.x;  // neighbouring threads: rows K apart
    const int col = blockIdx.y * blockDim.y + threadIdx.y;"""
    return f"""{cuda_prelude(dtype)}
{_signature(bias)} {{
{_batch_offsets(batched)}{index}
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    #pragma unroll {unroll}
    for (int k = 0; k < K; ++k)
        acc += ld(A[(size_t)row * K + k]) * ld(B[(size_t)k * N + col]);
    C[(size_t)row * N + col] = {_store(bias, "acc", "col")};
}}
"""


def smem_tiled_code(dtype: str, tile: int, b_layout: str, pad: int, unroll: bool, batched: str = "", bias: bool = False) -> str:
    # "kn": Bs[k][n], a warp reads one row; "nk": Bs[n][k], a warp reads a column (TILE+PAD apart).
    b_store, b_read = ("Bs[ty][tx]", "Bs[k][tx]") if b_layout == "kn" else ("Bs[tx][ty]", "Bs[tx][k]")
    return f"""{cuda_prelude(dtype)}
#define TILE {tile}
#define PAD {pad}

{_signature(bias)} {{
{_batch_offsets(batched)}    __shared__ T As[TILE][TILE];
    __shared__ T Bs[TILE][TILE + PAD];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {{
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : st(0.0f);
        {b_store} = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : st(0.0f);
        __syncthreads();
        #pragma unroll {"" if unroll else "1"}
        for (int k = 0; k < TILE; ++k)
            acc += ld(As[ty][k]) * ld({b_read});
        __syncthreads();
    }}
    if (row < M && col < N) C[(size_t)row * N + col] = {_store(bias, "acc", "col")};
}}
"""


def register_tile_step(unroll: str = "") -> str:
    """One BK-deep slice of the shared tiles As[BK][BM], Bs[BK][BN] into each thread's TM x TN accumulators
    `acc` (thread tile tRow, tCol), its loop under `#pragma unroll{unroll}`."""
    return f"""        #pragma unroll{unroll}
        for (int k = 0; k < BK; ++k) {{
            float ra[TM], rb[TN];
            #pragma unroll
            for (int i = 0; i < TM; ++i) ra[i] = As[k][tRow * TM + i];
            #pragma unroll
            for (int j = 0; j < TN; ++j) rb[j] = Bs[k][tCol * TN + j];
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
        }}
"""


def register_tiled_code(dtype: str, p: dict[str, Any], batched: str = "", bias: bool = False) -> str:
    """Block tile BM x BN x BK in shared memory (A transposed, both as float), TM x TN outputs per thread."""
    vec_bytes = p["vec"] * ELEMENT_BYTES[dtype]
    return f"""{cuda_prelude(dtype)}
#define BM {p["BM"]}
#define BN {p["BN"]}
#define BK {p["BK"]}
#define TM {p["TM"]}
#define TN {p["TN"]}
#define VEC {p["vec"]}
#define MIN_BLOCKS {p["min_blocks"]}
#define THREADS ((BM / TM) * (BN / TN))

struct __align__({vec_bytes}) Vec {{ T v[VEC]; }};

{_signature(bias, "__launch_bounds__(THREADS, MIN_BLOCKS) ")} {{
{_batch_offsets(batched)}    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tRow = tid / (BN / TN), tCol = tid % (BN / TN);
    const int bRow = blockIdx.y * BM, bCol = blockIdx.x * BN;
{_zeroed("acc[TM][TN]", (("i", "TM"), ("j", "TN")))}    for (int k0 = 0; k0 < K; k0 += BK) {{
        for (int i = tid; i < BM * BK / VEC; i += THREADS) {{
            const int r = i / (BK / VEC), c = (i % (BK / VEC)) * VEC;
            const Vec p = *reinterpret_cast<const Vec*>(A + (size_t)(bRow + r) * K + k0 + c);
            #pragma unroll
            for (int v = 0; v < VEC; ++v) As[c + v][r] = ld(p.v[v]);
        }}
        for (int i = tid; i < BK * BN / VEC; i += THREADS) {{
            const int r = i / (BN / VEC), c = (i % (BN / VEC)) * VEC;
            const Vec p = *reinterpret_cast<const Vec*>(B + (size_t)(k0 + r) * N + bCol + c);
            #pragma unroll
            for (int v = 0; v < VEC; ++v) Bs[r][c + v] = ld(p.v[v]);
        }}
        __syncthreads();
{register_tile_step(" " if p["unroll_k"] else " 1")}        __syncthreads();
    }}
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) {{
            const int r = bRow + tRow * TM + i, c = bCol + tCol * TN + j;
            C[(size_t)r * N + c] = {_store(bias, "acc[i][j]", "c")};
        }}
}}
"""


def _mma_helpers(dtype: str) -> str:
    """PTX tensor-core helpers: D (16x8 f32) += A (16x16, row) * B (16x8, col); ldmatrix loads fragments from shared memory."""
    kind = "f16" if dtype == "f16" else "bf16"
    return f"""
__device__ __forceinline__ void mma16816(float* c, const unsigned* a, const unsigned* b) {{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}}

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const T* p) {{
    const unsigned address = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%0,%1,%2,%3}}, [%4];\\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const T* p) {{
    const unsigned address = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{%0,%1,%2,%3}}, [%4];\\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}}
"""


def _zeroed(declaration: str, loops: tuple[tuple[str, str], ...]) -> str:
    """A float register array declared and zeroed by fully unrolled loops, e.g. acc[FM][FN][4]."""
    name = declaration.split("[")[0]
    text = f"    float {declaration};\n"
    for depth, (index, bound) in enumerate(loops, start=1):
        text += "    " * depth + "#pragma unroll\n" + "    " * depth + f"for (int {index} = 0; {index} < {bound}; ++{index})\n"
    return text + "    " * (len(loops) + 1) + name + "".join(f"[{index}]" for index, _ in loops) + " = 0.0f;\n"


MMA_ACCUMULATORS = _zeroed("acc[FM][FN][4]", (("i", "FM"), ("j", "FN"), ("e", "4")))


def _mma_epilogue(bias: bool) -> str:
    """Accumulator fragment layout: lane (g = lane/4, q = lane%4) holds rows g and g+8, columns 2q and 2q+1."""
    return f"""    #pragma unroll
    for (int i = 0; i < FM; ++i)
        #pragma unroll
        for (int j = 0; j < FN; ++j)
            #pragma unroll
            for (int e = 0; e < 4; ++e) {{
                const int r = row0 + i * 16 + lane / 4 + (e / 2) * 8, c = col0 + j * 8 + (lane % 4) * 2 + e % 2;
                C[(size_t)r * N + c] = {_store(bias, "acc[i][j][e]", "c")};
            }}
"""


MMA_COMPUTE = """        #pragma unroll
        for (int i = 0; i < FM; ++i)
            #pragma unroll
            for (int j = 0; j < FN; ++j) mma16816(acc[i][j], a[i], b[j]);"""


def mma_code(dtype: str, p: dict[str, Any], batched: str = "", bias: bool = False) -> str:
    """Tensor cores (mma.sync m16n8k16), fragments loaded straight from global memory: no shared-memory staging."""
    return f"""{cuda_prelude(dtype)}{_mma_helpers(dtype)}
#define FM {p["FM"]}
#define FN {p["FN"]}
#define WARPS_M {p["WARPS_M"]}
#define WARPS_N {p["WARPS_N"]}
#define BM (WARPS_M * FM * 16)
#define BN (WARPS_N * FN * 8)

{_signature(bias, "__launch_bounds__(WARPS_M * WARPS_N * 32) ")} {{
{_batch_offsets(batched)}    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const int row0 = blockIdx.y * BM + (warp / WARPS_N) * FM * 16;
    const int col0 = blockIdx.x * BN + (warp % WARPS_N) * FN * 8;
    const unsigned short* Bbits = reinterpret_cast<const unsigned short*>(B);
{MMA_ACCUMULATORS}    for (int k = 0; k < K; k += 16) {{
        unsigned a[FM][4], b[FN][2];
        #pragma unroll
        for (int i = 0; i < FM; ++i) {{  // rows g, g+8; columns 2q, 2q+1 and 8 further
            const unsigned* p = reinterpret_cast<const unsigned*>(A + (size_t)(row0 + i * 16 + g) * K + k + q * 2);
            a[i][0] = p[0]; a[i][1] = p[4 * K]; a[i][2] = p[4]; a[i][3] = p[4 * K + 4];
        }}
        #pragma unroll
        for (int j = 0; j < FN; ++j) {{  // column g; rows 2q, 2q+1 and 8 further, packed in pairs
            const unsigned short* p = Bbits + (size_t)(k + q * 2) * N + col0 + j * 8 + g;
            b[j][0] = p[0] | ((unsigned)p[N] << 16);
            b[j][1] = p[8 * N] | ((unsigned)p[9 * N] << 16);
        }}
{MMA_COMPUTE}
    }}
{_mma_epilogue(bias)}}}
"""


def mma_smem_shared_bytes(dtype: str, p: dict[str, Any]) -> int:
    return p["stages"] * (p["BM"] * (p["BK"] + p["skew"]) + p["BK"] * (p["BN"] + p["skew"])) * ELEMENT_BYTES[dtype]


def mma_smem_code(dtype: str, p: dict[str, Any], batched: str = "", bias: bool = False) -> str:
    """Block tiles in (dynamic) shared memory, each warp a WM x WN tile: tensor cores (ldmatrix + mma.sync) or fp32 FMAs."""
    stages = p["stages"]
    if stages == 1:
        copy = "*reinterpret_cast<Vec8*>(dst) = *reinterpret_cast<const Vec8*>(src);"
        main_loop = """    for (int t = 0; t < K / BK; ++t) {
        load_tile(As, Bs, A, B, N, K, row_block, col_block, t * BK);
        __syncthreads();
        compute(As, Bs);
        __syncthreads();
    }"""
    else:
        copy = """const unsigned address = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n" :: "r"(address), "l"(src));"""
        main_loop = """    const int tiles = K / BK;
    for (int s = 0; s < STAGES - 1; ++s) {  // prologue: the first STAGES-1 tiles in flight
        if (s < tiles) load_tile(As + s * BM * LDA, Bs + s * BK * LDB, A, B, N, K, row_block, col_block, s * BK);
        asm volatile("cp.async.commit_group;\\n" ::);
    }
    for (int t = 0; t < tiles; ++t) {
        asm volatile("cp.async.wait_group %0;\\n" :: "n"(STAGES - 2));  // tile t has landed
        __syncthreads();  // ... for every thread, and slot (t-1) % STAGES is free again
        const int next = t + STAGES - 1;
        if (next < tiles) load_tile(As + (next % STAGES) * BM * LDA, Bs + (next % STAGES) * BK * LDB, A, B, N, K, row_block, col_block, next * BK);
        asm volatile("cp.async.commit_group;\\n" ::);
        compute(As + (t % STAGES) * BM * LDA, Bs + (t % STAGES) * BK * LDB);
    }"""
    if p["tensor_cores"]:
        compute = f"""    #pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {{
        unsigned a[FM][4], b[FN][2];
        #pragma unroll
        for (int i = 0; i < FM; ++i)  // 8x8 matrices: rows 0-7 / 8-15, then columns 8-15
            ldmatrix_x4(a[i], as + (i * 16 + lane % 16) * LDA + kk + (lane / 16) * 8);
        #pragma unroll
        for (int j = 0; j < FN; j += 2)  // two n8 tiles at once: k rows 0-7 / 8-15, transposed
            ldmatrix_x4_trans(&b[j][0], bs + (kk + lane % 16) * LDB + j * 8 + (lane / 16) * 8);
{MMA_COMPUTE}
    }}"""
        accumulators, epilogue, helpers = MMA_ACCUMULATORS, _mma_epilogue(bias), _mma_helpers(dtype)
    else:
        # Lanes as 4 (along M) x 8 (along N), each a TM x TN register tile of the warp's tile.
        compute = """    #pragma unroll 4
    for (int k = 0; k < BK; ++k) {
        float ra[TM], rb[TN];
        #pragma unroll
        for (int i = 0; i < TM; ++i) ra[i] = ld(as[(lm * TM + i) * LDA + k]);
        #pragma unroll
        for (int j = 0; j < TN; ++j) rb[j] = ld(bs[k * LDB + ln * TN + j]);
        #pragma unroll
        for (int i = 0; i < TM; ++i)
            #pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
    }"""
        accumulators = "    const int lm = lane / 8, ln = lane % 8;\n" + _zeroed("acc[TM][TN]", (("i", "TM"), ("j", "TN")))
        epilogue = f"""    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) {{
            const int r = row0 + lm * TM + i, c = col0 + ln * TN + j;
            C[(size_t)r * N + c] = {_store(bias, "acc[i][j]", "c")};
        }}
"""
        helpers = ""
    bias_arg = "const T* __restrict__ bias, " if bias else ""
    return f"""{cuda_prelude(dtype)}{helpers}
#define BM {p["BM"]}
#define BN {p["BN"]}
#define BK {p["BK"]}
#define WARPS_M {p["WARPS_M"]}
#define WARPS_N {p["WARPS_N"]}
#define SKEW {p["skew"]}
#define STAGES {stages}
#define WM (BM / WARPS_M)
#define WN (BN / WARPS_N)
#define FM (WM / 16)
#define FN (WN / 8)
#define TM (WM / 4)
#define TN (WN / 8)
#define THREADS (WARPS_M * WARPS_N * 32)
#define LDA (BK + SKEW)
#define LDB (BN + SKEW)

struct __align__(16) Vec8 {{ T v[8]; }};

__device__ __forceinline__ void copy16(T* dst, const T* src) {{
    {copy}
}}

// One BM x BK tile of A and BK x BN tile of B into shared memory, 16 bytes per copy.
__device__ __forceinline__ void load_tile(T* as, T* bs, const T* A, const T* B, int N, int K, int row_block, int col_block, int k0) {{
    for (int i = threadIdx.x; i < BM * BK / 8; i += THREADS) {{
        const int r = i / (BK / 8), c = (i % (BK / 8)) * 8;
        copy16(as + r * LDA + c, A + (size_t)(row_block + r) * K + k0 + c);
    }}
    for (int i = threadIdx.x; i < BK * BN / 8; i += THREADS) {{
        const int r = i / (BN / 8), c = (i % (BN / 8)) * 8;
        copy16(bs + r * LDB + c, B + (size_t)(k0 + r) * N + col_block + c);
    }}
}}

extern "C" __global__ void __launch_bounds__(THREADS) gemm(const T* __restrict__ A, const T* __restrict__ B, {bias_arg}T* __restrict__ C, int M, int N, int K) {{
{_batch_offsets(batched)}    extern __shared__ __align__(128) unsigned char smem[];
    T* As = reinterpret_cast<T*>(smem);  // [STAGES][BM][LDA]
    T* Bs = As + STAGES * BM * LDA;      // [STAGES][BK][LDB]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int row_block = blockIdx.y * BM, col_block = blockIdx.x * BN;
    const int row0 = row_block + wm * WM, col0 = col_block + wn * WN;
{accumulators}
    auto compute = [&](const T* as_tile, const T* bs_tile) {{
        const T* as = as_tile + wm * WM * LDA;
        const T* bs = bs_tile + wn * WN;
{compute}
    }};
{main_loop}
{epilogue}}}
"""


def bias_relu_code() -> str:
    """The unfused epilogue: C = relu(C + bias) in place, a thread per element."""
    return """extern "C" __global__ void bias_relu(const T* __restrict__ bias, T* __restrict__ C, int M, int N) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)M * N) C[i] = st(fmaxf(ld(C[i]) + ld(bias[i % N]), 0.0f));
}
"""


# --- Triton source -----------------------------------------------------------------------------


def triton_code(batched: bool = False, bias: str | None = None) -> str:
    """tl.dot GEMM, grouped program order; `bias` None, "fused" (epilogue) or "unfused" (a second kernel)."""
    bias_arg = "bias_ptr, " if bias == "fused" else ""
    batch = (
        """    batch = tl.program_id(1).to(tl.int64)  # one matrix of the batch per grid axis 1
    a_ptr += batch * M * K
    b_ptr += batch * K * N
    c_ptr += batch * M * N
"""
        if batched
        else ""
    )
    epilogue = (
        """    bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    acc = tl.maximum(acc + bias[None, :], 0.0)
"""
        if bias == "fused"
        else ""
    )
    second = (
        """

@triton.jit
def bias_relu(bias_ptr, c_ptr, M, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < M * N
    c = tl.load(c_ptr + offsets, mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + offsets % N, mask=mask).to(tl.float32)
    tl.store(c_ptr + offsets, tl.maximum(c + bias, 0.0).to(c_ptr.dtype.element_ty), mask=mask)
"""
        if bias == "unfused"
        else ""
    )
    return f"""import triton
import triton.language as tl


@triton.jit
def gemm(a_ptr, b_ptr, {bias_arg}c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
         GROUP_M: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    pid = tl.program_id(0)
{batch}    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # GROUP_M rows of tiles are walked column by column, so neighbouring programs share B tiles in L2.
    width = GROUP_M * num_pid_n
    first_m = (pid // width) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % group_m
    pid_n = (pid % width) // group_m
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
{epilogue}    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + cm[:, None] * N + cn[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(cm[:, None] < M) & (cn[None, :] < N))
{second}"""


# --- variants ----------------------------------------------------------------------------------


# Launch args of the GEMM kernel; a fused bias comes between B and C.
def gemm_args(s: Sizes, bias: bool = False, a: str = "a", b: str = "b", c: str = "c") -> tuple[str | Scalar, ...]:
    return (a, b, *(("bias",) if bias else ()), c, i32(s["m"]), i32(s["n"]), i32(s["k"]))


def supports(dtype: str, multiple: tuple[int, int, int] = (1, 1, 1), max_gflop: float | None = None) -> Callable[[Sizes], str | None]:
    """A variant's unsupported(): its precision only, M/N/K multiples of its tiles, under its time cap."""

    def unsupported(s: Sizes) -> str | None:
        if s["dtype"] != dtype:
            return f"written for {dtype}"
        if s["m"] % multiple[0] or s["n"] % multiple[1] or s["k"] % multiple[2]:
            return f"needs M, N, K multiples of {multiple}"
        if max_gflop is not None and 2e-9 * s["m"] * s["n"] * s["k"] * s.get("batch", 1) > max_gflop:
            return f"over the 20 ms cap beyond {max_gflop:g} GFLOP"
        return None

    return unsupported


def with_bias_relu(launches: Callable[[Sizes], list[Launch]], fused: bool) -> Callable[[Sizes], list[Launch]]:
    """Unfused: the GEMM launches, then bias_relu over C in place."""
    if fused:
        return launches

    def both(s: Sizes) -> list[Launch]:
        count = s["m"] * s["n"]
        return [*launches(s), Launch("bias_relu", grid1(cdiv(count, 256)), ("bias", "c", i32(s["m"]), i32(s["n"])), block1(256))]

    return both


def naive_variant(dtype: str, p: dict[str, Any], batched: bool = False, bias: bool | None = None) -> Variant:
    bx, by, coalesced = p["block_x"], p["block_y"], p["order"] == "coalesced"

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["n"], bx), cdiv(s["m"], by)) if coalesced else (cdiv(s["m"], bx), cdiv(s["n"], by))
        return [Launch("gemm", (*grid, s.get("batch", 1)), gemm_args(s, bool(bias)), (bx, by, 1))]

    code = naive_code(dtype, coalesced, p["unroll"], _matrices_batched(batched), bool(bias))
    cap = NAIVE_GFLOP if coalesced else UNCOALESCED_GFLOP
    return _variant("cuda-naive", dtype, p, code, launches, supports(dtype, max_gflop=cap), bias)


def smem_tiled_variant(dtype: str, p: dict[str, Any], batched: bool = False, bias: bool | None = None) -> Variant:
    tile = p["tile"]

    def launches(s: Sizes) -> list[Launch]:
        return [Launch("gemm", (cdiv(s["n"], tile), cdiv(s["m"], tile), s.get("batch", 1)), gemm_args(s, bool(bias)), (tile, tile, 1))]

    code = smem_tiled_code(dtype, tile, p["b_layout"], p["pad"], p["unroll"], _matrices_batched(batched), bool(bias))
    return _variant("cuda-smem-tiled", dtype, p, code, launches, supports(dtype, max_gflop=TILED_GFLOP), bias)


def register_tiled_variant(
    dtype: str, p: dict[str, Any], batched: bool = False, bias: bool | None = None, max_gflop: float | None = None
) -> Variant:
    threads = (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])

    def launches(s: Sizes) -> list[Launch]:
        return [Launch("gemm", (s["n"] // p["BN"], s["m"] // p["BM"], s.get("batch", 1)), gemm_args(s, bool(bias)), block1(threads))]

    code = register_tiled_code(dtype, p, _matrices_batched(batched), bool(bias))
    return _variant("cuda-register-tiled", dtype, p, code, launches, supports(dtype, (p["BM"], p["BN"], p["BK"]), max_gflop), bias)


def mma_variant(dtype: str, p: dict[str, Any], batched: bool = False, bias: bool | None = None) -> Variant:
    bm, bn = p["WARPS_M"] * p["FM"] * 16, p["WARPS_N"] * p["FN"] * 8

    def launches(s: Sizes) -> list[Launch]:
        return [
            Launch(
                "gemm", (s["n"] // bn, s["m"] // bm, s.get("batch", 1)), gemm_args(s, bool(bias)), block1(p["WARPS_M"] * p["WARPS_N"] * 32)
            )
        ]

    return _variant(
        "cuda-mma", dtype, p, mma_code(dtype, p, _matrices_batched(batched), bool(bias)), launches, supports(dtype, (bm, bn, 16)), bias
    )


def mma_smem_variant(dtype: str, p: dict[str, Any], batched: bool = False, bias: bool | None = None) -> Variant:
    shared = mma_smem_shared_bytes(dtype, p)

    def launches(s: Sizes) -> list[Launch]:
        return [
            Launch(
                "gemm",
                (s["n"] // p["BN"], s["m"] // p["BM"], s.get("batch", 1)),
                gemm_args(s, bool(bias)),
                block1(p["WARPS_M"] * p["WARPS_N"] * 32),
                shared_bytes=shared,
            )
        ]

    code = mma_smem_code(dtype, p, _matrices_batched(batched), bool(bias))
    return _variant("cuda-mma-smem", dtype, p, code, launches, supports(dtype, (p["BM"], p["BN"], p["BK"])), bias)


def triton_variant(dtype: str, p: dict[str, Any], batched: bool = False, bias: bool | None = None) -> Variant:
    constexprs = {name: p[name] for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")} | {"INPUT_PRECISION": p["input_precision"]}

    def launches(s: Sizes) -> list[Launch]:
        tiles = cdiv(s["m"], p["BLOCK_M"]) * cdiv(s["n"], p["BLOCK_N"])
        gemm = Launch(
            "gemm",
            (tiles, s.get("batch", 1), 1),
            gemm_args(s, bool(bias)),
            constexprs=constexprs,
            num_warps=p["num_warps"],
            num_stages=p["num_stages"],
        )
        if bias is False:
            count = s["m"] * s["n"]
            return [
                gemm,
                Launch(
                    "bias_relu", grid1(cdiv(count, 1024)), ("bias", "c", i32(s["m"]), i32(s["n"])), constexprs={"BLOCK": 1024}, num_warps=4
                ),
            ]
        return [gemm]

    code = triton_code(batched, None if bias is None else ("fused" if bias else "unfused"))
    return Variant("triton-dot", "triton", {"dtype": dtype, **p, **_fused(bias)}, code, launches, unsupported=supports(dtype))


def _matrices_batched(batched: bool) -> str:
    return "abc" if batched else ""


def _fused(bias: bool | None) -> dict[str, Any]:
    return {} if bias is None else {"fused": bias}


def _variant(
    family: str,
    dtype: str,
    p: dict[str, Any],
    code: str,
    launches: Callable[[Sizes], list[Launch]],
    unsupported: Callable[[Sizes], str | None],
    bias: bool | None,
) -> Variant:
    """A CUDA variant; with `bias` set (gemm_bias_relu) the source gains the unfused bias_relu kernel when not fused."""
    if bias is False:
        code += "\n" + bias_relu_code()
    return Variant(
        family, "cuda", {"dtype": dtype, **p, **_fused(bias)}, code, with_bias_relu(launches, bias is not False), unsupported=unsupported
    )


# --- the two operations ------------------------------------------------------------------------

NAIVE_BLOCKS = ((8, 32), (16, 16), (32, 8), (32, 32))
# (BM, BN, BK, TM, TN); the first is the base that single-axis edits start from.
REGISTER_TILES = (
    (128, 128, 8, 8, 8),
    (128, 128, 16, 8, 8),
    (64, 64, 8, 4, 4),
    (64, 64, 16, 4, 4),
    (128, 64, 8, 8, 4),
    (64, 64, 8, 8, 8),
    (32, 32, 8, 4, 4),
)
MMA_TILES = ((1, 2, 2, 2), (2, 4, 2, 2), (2, 4, 4, 2), (4, 4, 2, 2), (4, 8, 2, 2))  # (FM, FN, WARPS_M, WARPS_N): m16 x n8 tiles per warp
# (BM, BN, WARPS_M, WARPS_N), BK = 32
MMA_SMEM_TILES = ((128, 128, 2, 4), (64, 64, 2, 2), (128, 128, 2, 2), (128, 64, 2, 2), (256, 128, 4, 2))
TRITON_HALF = (
    (128, 128, 64, 4, 4),
    (128, 256, 64, 8, 3),
    (128, 128, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (128, 64, 32, 4, 4),
    (64, 256, 32, 4, 4),
    (64, 64, 32, 2, 5),
    (32, 64, 32, 2, 5),
)
TRITON_F32 = ((128, 128, 32, 8, 3), (64, 64, 32, 4, 4), (128, 64, 32, 4, 3), (32, 32, 32, 4, 2))


def register_params(tile: tuple[int, ...], vec: int = 4, unroll_k: bool = True, min_blocks: int = 1) -> dict[str, Any]:
    return {**dict(zip(("BM", "BN", "BK", "TM", "TN"), tile)), "vec": vec, "unroll_k": unroll_k, "min_blocks": min_blocks}


def mma_smem_params(tile: tuple[int, ...], stages: int = 3, skew: int = 8, tensor_cores: bool = True) -> dict[str, Any]:
    bm, bn, warps_m, warps_n = tile
    return {
        "BM": bm,
        "BN": bn,
        "BK": 32,
        "WARPS_M": warps_m,
        "WARPS_N": warps_n,
        "skew": skew,
        "stages": stages,
        "tensor_cores": tensor_cores,
    }


def triton_params(config: tuple[int, ...], group_m: int = 8, input_precision: str = "ieee", **edits: int) -> dict[str, Any]:
    names = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
    return {**dict(zip(names, config)), "GROUP_M": group_m, "input_precision": input_precision, **edits}


def gemm_variants() -> Iterable[Variant]:
    """Every family for fp32 and fp16 with its single-axis edits; bf16 with fewer CUDA-core edits."""
    for dtype in ("f32", "f16", "bf16"):
        edits = dtype != "bf16"
        for bx, by in NAIVE_BLOCKS if edits else NAIVE_BLOCKS[1:3]:
            for order in ("coalesced", "uncoalesced"):
                yield naive_variant(dtype, {"block_x": bx, "block_y": by, "order": order, "unroll": 1})
        for bx, by in NAIVE_BLOCKS[1:3] if edits else ():
            yield naive_variant(dtype, {"block_x": bx, "block_y": by, "order": "coalesced", "unroll": 8})
        for tile in (16, 32):
            for b_layout, pad, unroll in (("kn", 0, True), ("nk", 0, True), ("nk", 1, True), ("kn", 0, False))[: None if edits else 2]:
                yield smem_tiled_variant(dtype, {"tile": tile, "b_layout": b_layout, "pad": pad, "unroll": unroll})
        base = REGISTER_TILES[0]
        register = [register_params(tile) for tile in REGISTER_TILES]
        if edits:
            register += [
                register_params(base, vec=1),
                register_params(base, unroll_k=False),
                register_params(base, min_blocks=3),
                register_params(base, min_blocks=4),
                register_params(REGISTER_TILES[2], vec=1),
            ]
        for params in register:
            # 64 registers (256 threads x 4 blocks) make the 8x8 micro-tile spill: slow, so capped.
            yield register_tiled_variant(dtype, params, max_gflop=TILED_GFLOP if params["min_blocks"] == 4 else None)
        if dtype in HALF:
            for fm, fn, warps_m, warps_n in MMA_TILES:
                yield mma_variant(dtype, {"FM": fm, "FN": fn, "WARPS_M": warps_m, "WARPS_N": warps_n})
            base = MMA_SMEM_TILES[0]
            for params in (
                *(mma_smem_params(tile) for tile in MMA_SMEM_TILES),
                mma_smem_params(base, stages=1),
                mma_smem_params(base, stages=2),
                mma_smem_params(base, skew=0),
                mma_smem_params(MMA_SMEM_TILES[2], stages=1),
                *(mma_smem_params(tile, tensor_cores=False) for tile in MMA_SMEM_TILES[:2] + MMA_SMEM_TILES[3:4]),
            ):
                yield mma_smem_variant(dtype, params)
            base = TRITON_HALF[0]
            for params in (
                *(triton_params(config) for config in TRITON_HALF),
                triton_params(base, group_m=1),
                triton_params(base, num_warps=8),
                triton_params(base, num_stages=2),
                triton_params(base, num_stages=3),
            ):
                yield triton_variant(dtype, params)
        else:
            for config in TRITON_F32:
                for precision in ("ieee", "tf32", "tf32x3"):
                    yield triton_variant(dtype, triton_params(config, input_precision=precision))
            yield triton_variant(dtype, triton_params(TRITON_F32[0], group_m=1, input_precision="tf32"))
            yield triton_variant(dtype, triton_params(TRITON_F32[0], input_precision="tf32", num_stages=2))


def bias_relu_variants() -> Iterable[Variant]:
    """Each kernel fused (epilogue in the GEMM) and unfused (GEMM, then a bias_relu launch)."""
    for dtype in ("f32", "f16"):
        for fused in (True, False):
            yield naive_variant(dtype, {"block_x": 16, "block_y": 16, "order": "coalesced", "unroll": 1}, bias=fused)
            for tile in (16, 32):
                yield smem_tiled_variant(dtype, {"tile": tile, "b_layout": "kn", "pad": 0, "unroll": True}, bias=fused)
            for tile in REGISTER_TILES[:3]:
                yield register_tiled_variant(dtype, register_params(tile), bias=fused)
            if dtype in HALF:
                for fm, fn, warps_m, warps_n in MMA_TILES[3:]:
                    yield mma_variant(dtype, {"FM": fm, "FN": fn, "WARPS_M": warps_m, "WARPS_N": warps_n}, bias=fused)
                for tile in MMA_SMEM_TILES[:3]:
                    yield mma_smem_variant(dtype, mma_smem_params(tile), bias=fused)
            for config in TRITON_HALF[:5] if dtype in HALF else TRITON_F32:
                yield triton_variant(dtype, triton_params(config), bias=fused)


def _matrices(s: Sizes, init: str) -> dict[str, TensorSpec]:
    return {"a": TensorSpec((s["m"], s["k"]), s["dtype"], init), "b": TensorSpec((s["k"], s["n"]), s["dtype"], init)}


OPS = [
    Op(
        name="gemm",
        bound="compute",
        sizes=GEMM_SIZES,
        inputs=lambda s: _matrices(s, "rand"),
        outputs=lambda s: {"c": TensorSpec((s["m"], s["n"]), s["dtype"])},
        reference=lambda torch, inputs, sizes: {"c": torch.matmul(inputs["a"], inputs["b"])},
        reference_code="def reference(a, b):\n    return torch.matmul(a, b)\n",
        variants=gemm_variants,
        tolerance={"f32": 2e-3, "f16": 1e-2, "bf16": 2e-2},
    ),
    Op(
        name="gemm_bias_relu",
        bound="compute",
        sizes=BIAS_RELU_SIZES,
        inputs=lambda s: {**_matrices(s, "randn"), "bias": TensorSpec((s["n"],), s["dtype"])},
        outputs=lambda s: {"c": TensorSpec((s["m"], s["n"]), s["dtype"])},
        reference=lambda torch, inputs, sizes: {"c": torch.relu(torch.matmul(inputs["a"], inputs["b"]) + inputs["bias"])},
        reference_code="def reference(a, b, bias):\n    return torch.relu(torch.matmul(a, b) + bias)\n",
        variants=bias_relu_variants,
        # fp32: K-term sums of zero-mean products in another order (~5e-5 of |C| ~ sqrt(K) at K=2048).
        tolerance={"f32": 5e-4, "f16": 1e-2},
    ),
]
