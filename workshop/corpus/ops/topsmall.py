"""Small top-k per row and a transposed-A matrix product: rowtop_k and matmul_tn.

Neighbours of topk and gemm, where the forecaster's held-out direction is weakest: the same
knobs (threads per row, list length in registers, tile sizes, warps, stages) but problem
shapes that turn their effect around — many short rows against few long ones, a small or a
large k; square products against a tall-skinny one (K = 65536, 128 x 128 outputs) and a wide
one (K = 128).

- rowtop_k: out = torch.topk(x, k, dim=1).values for x (rows, n) fp32 randn: the k largest of
  each row, descending; rows 64…65536, n 64…4096, k 1…32; outputs compared as sorted
  multisets. A CUDA list of K values lives in registers only with K known at compile time, so
  the list kernels are templates on K that the kernel selects by a switch over k. CUDA:
  cuda-thread-row (a thread per row keeps a descending register list, each element sinking
  through it by fmaxf/fminf; the rows are n floats apart across a warp; block, vector (one
  float or a float4 per load), guard (skip the list when the element loses to its last entry:
  a branch against a branch-free network); k <= 8 only), cuda-warp-row (a warp per row, lanes
  striding along it, each lane a register list, then k rounds of a __shfl_xor max over the
  lanes' heads, the lowest holding lane popping its head; warps per block, unroll (loads in
  flight per lane), guard), cuda-block-bitonic (a block sorts its row, padded with -inf to a
  power of two, in shared memory and writes the first k; block, vector of the row load).
  Triton: triton-rounds (ROWS rows per program as a [ROWS, BLOCK_N] tile, k rounds of tl.max
  with its index, each masking the winner to -inf; ROWS, num_warps, unroll: a runtime loop
  over k or tl.static_range over a K constexpr) and triton-sort (tl.sort of the tile,
  descending, first k columns stored; ROWS, num_warps). Triton tiles of more than 64 elements
  per thread are left out (they spill).
- matmul_tn: C = Aᵀ B with A stored (K, M) and B (K, N), both row-major — the layout of a
  weight gradient; fp32 accumulation, C in the input precision; uniform [0, 1) inputs and
  gemm's tolerances (see ops.gemm: a TF32 product stays inside the fp32 one). fp32 sizes
  64³, 1024³, 4096 x 4096 x 1024 and tall-skinny 128 x 128 x 65536; fp16 4096 x 4096 x 1024
  and wide 4096 x 4096 x 128. Both operands are read along rows of K, so A's tile comes in
  coalesced along M with no transposition. CUDA: cuda-naive (a thread per output; block
  shape, order: threadIdx.x along N (B's loads and C's stores coalesced, A's broadcast) or
  along M (A's loads coalesced, C's stores N apart); unroll of the K loop), cuda-smem-tiled
  (TILE x TILE tiles of A and B per step, a thread per output; tile 16/32, a_layout: km keeps
  A's tile as read ([k][m], conflict-free) or mk transposes it on the store ([m][k]:
  TILE-way bank conflicts unless pad 1), pad, split: 1 stores C, 2/4/8 cut K into that many
  ranges over grid z, added into a zeroed C with fp32 atomicAdd (fp32 only)),
  cuda-register-tiled (BM x BN block tiles BK deep in shared memory as float, TM x TN outputs
  per thread; tile (64x64 with 4x4 or 128x128 with 8x8, BK 8/16) and vector width of the
  global loads). Triton: triton-dot (tl.dot of tl.trans of a [BLOCK_K, BLOCK_M] tile of A with
  a [BLOCK_K, BLOCK_N] tile of B; BLOCK_M/N/K, num_warps, num_stages, GROUP_M 1/8 (program
  order grouped for L2 reuse or not), input_precision ieee/tf32 for fp32, and split_k (1, or
  K ranges over program_id(1) added by tl.atomic_add into a zeroed fp32 C)).

Slow variants are capped as in ops.gemm (about 20 ms): the naive and shared-memory-tiled
kernels stay under its GFLOP limits, so at 4096 x 4096 x 1024 only the register tiles and
Triton's tl.dot run. rowtop_k's values are copied, never computed: compared exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.gemm import (
    NAIVE_GFLOP,
    TILED_GFLOP,
    TRITON_F32,
    TRITON_HALF,
    cuda_prelude,
    gemm_args,
    register_tile_step,
    supports,
    triton_params,
)
from workshop.corpus.ops.memkit import pack_struct
from workshop.corpus.ops.rowkit import FULL_MASK, NEG_INF, TRITON_HEADER, Check, divisible, next_pow2, unsupported
from workshop.corpus.ops.sort import TOPK
from workshop.corpus.spec import (
    CUDA_HEADER,
    ZERO,
    Launch,
    Op,
    Sizes,
    TensorSpec,
    Variant,
    around,
    block1,
    cdiv,
    grid1,
    i32,
    product,
)

# --- rowtop_k --------------------------------------------------------------------------------------

# Many short rows (a thread per row has work enough) to few long ones (a warp or block per row);
# k from an argmax (1) to 32, beyond a thread's register list.
ROWTOP_SIZES = [
    {"rows": 64, "n": 64, "k": 4},
    {"rows": 65536, "n": 64, "k": 1},
    {"rows": 65536, "n": 256, "k": 8},
    {"rows": 4096, "n": 1024, "k": 8},
    {"rows": 16384, "n": 512, "k": 32},
    {"rows": 2048, "n": 4096, "k": 4},
]
THREAD_KS = (1, 2, 4, 8)  # a thread's list stays small: K fmaxf/fminf per element
WARP_KS = (1, 2, 4, 8, 16, 32)
MAX_TRITON_PER_THREAD = 64  # elements of a Triton tile per thread before it spills

ROWTOP_SIGNATURE = 'extern "C" __global__ void rowtop_k(const float* __restrict__ x, float* __restrict__ out, int rows, int n, int k)'


def _insert(guard: bool) -> str:
    """insert<K>(top, v): v sinks through the descending list, the smallest entry falls off."""
    skip = "    if (v <= top[K - 1]) return;  // most elements lose to the last entry: skip the network\n" if guard else ""
    return f"""
template <int K>
__device__ __forceinline__ void insert(float (&top)[K], float v) {{
{skip}    #pragma unroll
    for (int i = 0; i < K; ++i) {{
        const float hi = fmaxf(top[i], v);
        v = fminf(top[i], v);
        top[i] = hi;
    }}
}}
"""


def _dispatch(worker: str, ks: tuple[int, ...]) -> str:
    """The kernel: a switch over k picks the template whose list length is k."""
    cases = "\n".join(f"        case {k}: {worker}<{k}>(x, out, rows, n); break;" for k in ks)
    return f"""{ROWTOP_SIGNATURE} {{
    switch (k) {{  // the list must have a compile-time length to stay in registers
{cases}
    }}
}}
"""


def _thread_row(vector: int, guard: bool) -> str:
    if vector == 4:
        walk = """    const float4* src = reinterpret_cast<const float4*>(x + (size_t)row * n);  // n % 4 == 0
    for (int j = 0; j < n / 4; ++j) {
        const float4 p = src[j];
        insert<K>(top, p.x);
        insert<K>(top, p.y);
        insert<K>(top, p.z);
        insert<K>(top, p.w);
    }"""
    else:
        walk = """    const float* src = x + (size_t)row * n;
    for (int j = 0; j < n; ++j) insert<K>(top, src[j]);"""
    return f"""{CUDA_HEADER}{_insert(guard)}
template <int K>
__device__ __forceinline__ void thread_row(const float* __restrict__ x, float* __restrict__ out, int rows, int n) {{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float top[K];
    #pragma unroll
    for (int i = 0; i < K; ++i) top[i] = {NEG_INF};
{walk}
    #pragma unroll
    for (int i = 0; i < K; ++i) out[(size_t)row * K + i] = top[i];
}}

{_dispatch("thread_row", THREAD_KS)}"""


def _warp_row(warps: int, unroll: int, guard: bool) -> str:
    return f"""{CUDA_HEADER}
#define WARPS {warps}
#define UNROLL {unroll}
{_insert(guard)}
template <int K>
__device__ __forceinline__ void warp_row(const float* __restrict__ x, float* __restrict__ out, int rows, int n) {{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= rows) return;  // the same for the whole warp: the shuffles below see all lanes
    const float* src = x + (size_t)row * n;
    float top[K];
    #pragma unroll
    for (int i = 0; i < K; ++i) top[i] = {NEG_INF};
    int j = lane;
    for (; j + (UNROLL - 1) * 32 < n; j += UNROLL * 32) {{
        float v[UNROLL];  // UNROLL loads in flight before the list takes them
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = src[j + u * 32];
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) insert<K>(top, v[u]);
    }}
    for (; j < n; j += 32) insert<K>(top, src[j]);
    // K rounds: the largest head over the lanes is the next value; its lowest holder pops it
    #pragma unroll
    for (int r = 0; r < K; ++r) {{
        float best = top[0];
        #pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) best = fmaxf(best, __shfl_xor_sync({FULL_MASK}, best, offset));
        const unsigned holders = __ballot_sync({FULL_MASK}, top[0] == best);
        if (lane == __ffs(holders) - 1) {{
            #pragma unroll
            for (int i = 0; i < K - 1; ++i) top[i] = top[i + 1];
            top[K - 1] = {NEG_INF};
        }}
        if (lane == 0) out[(size_t)row * K + r] = best;
    }}
}}

{_dispatch("warp_row", WARP_KS)}"""


def _block_bitonic(vector: int) -> str:
    if vector == 4:
        load = """    const float4* src = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * n);  // n % 4 == 0
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
        const float4 p = src[i];
        s[4 * i] = p.x; s[4 * i + 1] = p.y; s[4 * i + 2] = p.z; s[4 * i + 3] = p.w;
    }"""
    else:
        load = """    const float* src = x + (size_t)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = src[i];"""
    return f"""{CUDA_HEADER}
{ROWTOP_SIGNATURE} {{
    extern __shared__ float s[];  // the row, padded to a power of two
    int np = 1;
    while (np < n) np <<= 1;
{load}
    for (int i = n + threadIdx.x; i < np; i += blockDim.x) s[i] = {NEG_INF};
    __syncthreads();
    for (int size = 2; size <= np; size <<= 1) {{
        for (int stride = size / 2; stride > 0; stride >>= 1) {{
            for (int t = threadIdx.x; t < np / 2; t += blockDim.x) {{
                const int i = 2 * t - (t & (stride - 1));  // the lower element of pair t
                const float a = s[i], b = s[i + stride];
                const bool descending = (i & size) == 0;  // the last merge (size == np) is all descending
                if ((a < b) == descending) {{
                    s[i] = b;
                    s[i + stride] = a;
                }}
            }}
            __syncthreads();
        }}
    }}
    for (int i = threadIdx.x; i < k; i += blockDim.x) out[(size_t)blockIdx.x * k + i] = s[i];
}}
"""


def _triton_rounds(unroll: bool) -> str:
    extra, loop = (", K: tl.constexpr", "tl.static_range(K)") if unroll else ("", "range(k)")
    return f"""{TRITON_HEADER}

@triton.jit
def rowtop_k(x_ptr, out_ptr, rows, n, k, ROWS: tl.constexpr, BLOCK_N: tl.constexpr{extra}):
    row_ids = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_ok = row_ids < rows
    values = tl.load(x_ptr + row_ids[:, None] * n + cols[None, :], mask=row_ok[:, None] & (cols[None, :] < n), other=float("-inf"))
    for r in {loop}:
        best, where = tl.max(values, axis=1, return_indices=True)
        tl.store(out_ptr + row_ids * k + r, best, mask=row_ok)
        # only the one winning position drops out, so equal values each count once
        values = tl.where(cols[None, :] == where[:, None], float("-inf"), values)
"""


ROWTOP_TRITON_SORT = f"""{TRITON_HEADER}

@triton.jit
def rowtop_k(x_ptr, out_ptr, rows, n, k, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    row_ids = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_ok = row_ids < rows
    values = tl.load(x_ptr + row_ids[:, None] * n + cols[None, :], mask=row_ok[:, None] & (cols[None, :] < n), other=float("-inf"))
    ordered = tl.sort(values, dim=1, descending=True)
    tl.store(out_ptr + row_ids[:, None] * k + cols[None, :], ordered, mask=row_ok[:, None] & (cols[None, :] < k))
"""


def _rowtop_args(s: Sizes) -> tuple[Any, ...]:
    return ("x", "out", i32(s["rows"]), i32(s["n"]), i32(s["k"]))


def _k_in(ks: tuple[int, ...]) -> Check:
    return lambda s: None if s["k"] in ks else f"k = {s['k']} has no register list here (k in {ks})"


def _tile_fits(rows: int, warps: int) -> Check:
    return lambda s: (
        None if rows * next_pow2(s["n"]) <= MAX_TRITON_PER_THREAD * 32 * warps else f"over {MAX_TRITON_PER_THREAD} elements per thread"
    )


def _rowtop_cuda(
    family: str,
    params: dict[str, Any],
    code: str,
    blocks: Callable[[Sizes], int],
    threads: int,
    shared: bool = False,
    checks: tuple[Check, ...] = (),
) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        return [Launch("rowtop_k", grid1(blocks(s)), _rowtop_args(s), block1(threads), shared_bytes=4 * next_pow2(s["n"]) if shared else 0)]

    return Variant(family, "cuda", params, code, launches, unsupported=unsupported(None, *checks))


def _rowtop_triton(family: str, params: dict[str, Any], code: str, with_k: bool = False) -> Variant:
    rows, warps = params["ROWS"], params["num_warps"]

    def launches(s: Sizes) -> list[Launch]:
        constexprs = {"ROWS": rows, "BLOCK_N": next_pow2(s["n"])} | ({"K": s["k"]} if with_k else {})
        return [Launch("rowtop_k", grid1(cdiv(s["rows"], rows)), _rowtop_args(s), constexprs=constexprs, num_warps=warps)]

    return Variant(family, "triton", params, code, launches, unsupported=unsupported(None, _tile_fits(rows, warps)))


def rowtop_variants() -> Iterable[Variant]:
    for p in product({"block": [64, 256], "vector": [1, 4], "guard": [True, False]}):
        block = p["block"]
        yield _rowtop_cuda(
            "cuda-thread-row",
            p,
            _thread_row(p["vector"], p["guard"]),
            lambda s, block=block: cdiv(s["rows"], block),
            block,
            checks=(_k_in(THREAD_KS), divisible("n", p["vector"])),
        )
    for p in product({"warps": [2, 8], "unroll": [1, 4], "guard": [True, False]}):
        warps = p["warps"]
        yield _rowtop_cuda(
            "cuda-warp-row",
            p,
            _warp_row(warps, p["unroll"], p["guard"]),
            lambda s, warps=warps: cdiv(s["rows"], warps),
            32 * warps,
            checks=(_k_in(WARP_KS),),
        )
    for p in product({"block": [128, 256, 512], "vector": [1, 4]}):
        yield _rowtop_cuda(
            "cuda-block-bitonic",
            p,
            _block_bitonic(p["vector"]),
            lambda s: s["rows"],
            p["block"],
            shared=True,
            checks=(divisible("n", p["vector"]),),
        )
    for p in product({"ROWS": [1, 4], "num_warps": [2, 8], "unroll": [False, True]}):
        yield _rowtop_triton("triton-rounds", p, _triton_rounds(p["unroll"]), with_k=p["unroll"])
    for p in product({"ROWS": [1, 4], "num_warps": [4, 8]}):
        yield _rowtop_triton("triton-sort", p, ROWTOP_TRITON_SORT)


ROWTOP_K = Op(
    name="rowtop_k",
    bound="memory",
    sizes=ROWTOP_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["rows"], s["n"]))},
    outputs=lambda s: {"out": TensorSpec((s["rows"], s["k"]))},
    reference=TOPK.reference,  # the same call: the k largest values of each row
    reference_code=TOPK.reference_code,
    variants=rowtop_variants,
    compare_sorted=True,
    tolerance={"f32": 0.0},  # values are copied, never computed
)

# --- matmul_tn ---------------------------------------------------------------------------------------

MATMUL_TN_SIZES = [
    {"m": 64, "n": 64, "k": 64, "dtype": "f32"},
    {"m": 1024, "n": 1024, "k": 1024, "dtype": "f32"},
    {"m": 128, "n": 128, "k": 65536, "dtype": "f32"},  # tall-skinny: 16384 outputs, each a 65536-term sum
    {"m": 4096, "n": 4096, "k": 1024, "dtype": "f32"},
    {"m": 4096, "n": 4096, "k": 1024, "dtype": "f16"},
    {"m": 4096, "n": 4096, "k": 128, "dtype": "f16"},  # wide: 16M outputs, short sums
]
TN_SIGNATURE = (
    'extern "C" __global__ void {bounds}matmul_tn(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K)'
)
# (BM, BN, BK, TM, TN): 256 threads each
TN_REGISTER_TILES = ((64, 64, 8, 4, 4), (64, 64, 16, 4, 4), (128, 128, 8, 8, 8), (128, 128, 16, 8, 8))


def tn_naive_code(dtype: str, order: str, unroll: int) -> str:
    if order == "n":
        index = """    const int col = blockIdx.x * blockDim.x + threadIdx.x;  // a warp: neighbouring columns, one A element
    const int row = blockIdx.y * blockDim.y + threadIdx.y;"""
    else:
        index = """    const int row = blockIdx.x * blockDim.x + threadIdx.x;  // a warp: neighbouring rows, C stored N apart
    const int col = blockIdx.y * blockDim.y + threadIdx.y;"""
    return f"""{cuda_prelude(dtype)}
{TN_SIGNATURE.format(bounds="")} {{
{index}
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    #pragma unroll {unroll}
    for (int k = 0; k < K; ++k)
        acc += ld(A[(size_t)k * M + row]) * ld(B[(size_t)k * N + col]);
    C[(size_t)row * N + col] = st(acc);
}}
"""


def tn_smem_code(dtype: str, tile: int, a_layout: str, pad: int, split: int) -> str:
    """A's tile is read along M (threadIdx.x walks m); "km" stores it as read, "mk" transposed."""
    a_store, a_read = ("As[ty][tx]", "As[k][ty]") if a_layout == "km" else ("As[tx][ty]", "As[ty][k]")
    if split > 1:
        bounds = """    const int chunk = (K + SPLIT - 1) / SPLIT;  // grid z takes K range [z * chunk, z * chunk + chunk)
    const int k_begin = blockIdx.z * chunk, k_end = min(K, k_begin + chunk);"""
        store = "atomicAdd(&C[(size_t)row * N + col], acc);  // C zeroed first; fp32 only"
    else:
        bounds = "    const int k_begin = 0, k_end = K;"
        store = "C[(size_t)row * N + col] = st(acc);"
    return f"""{cuda_prelude(dtype)}
#define TILE {tile}
#define PAD {pad}
#define SPLIT {split}

{TN_SIGNATURE.format(bounds="")} {{
    __shared__ T As[TILE][TILE + PAD];
    __shared__ T Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    const int a_col = blockIdx.y * TILE + tx;  // the m this thread loads: coalesced along A's rows
{bounds}
    float acc = 0.0f;
    for (int k0 = k_begin; k0 < k_end; k0 += TILE) {{
        const bool k_ok = k0 + ty < k_end;
        {a_store} = (k_ok && a_col < M) ? A[(size_t)(k0 + ty) * M + a_col] : st(0.0f);
        Bs[ty][tx] = (k_ok && col < N) ? B[(size_t)(k0 + ty) * N + col] : st(0.0f);
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k)
            acc += ld({a_read}) * ld(Bs[k][tx]);
        __syncthreads();
    }}
    if (row < M && col < N) {store}
}}
"""


def tn_register_code(dtype: str, p: dict[str, Any]) -> str:
    """BM x BN x BK tiles of A (k-major, as stored) and B in shared memory as float, TM x TN outputs per thread."""
    return f"""{cuda_prelude(dtype)}
#define BM {p["BM"]}
#define BN {p["BN"]}
#define BK {p["BK"]}
#define TM {p["TM"]}
#define TN {p["TN"]}
#define VEC {p["vec"]}
#define THREADS ((BM / TM) * (BN / TN))

{pack_struct(dtype, p["vec"], "Vec")}
{TN_SIGNATURE.format(bounds="__launch_bounds__(THREADS) ")} {{
    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tRow = tid / (BN / TN), tCol = tid % (BN / TN);
    const int bRow = blockIdx.y * BM, bCol = blockIdx.x * BN;
    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BK) {{
        // both tiles are rows of K: VEC neighbouring elements per load, no transposition
        for (int i = tid; i < BK * BM / VEC; i += THREADS) {{
            const int r = i / (BM / VEC), c = (i % (BM / VEC)) * VEC;
            const Vec v = *reinterpret_cast<const Vec*>(A + (size_t)(k0 + r) * M + bRow + c);
            #pragma unroll
            for (int e = 0; e < VEC; ++e) As[r][c + e] = ld(v.v[e]);
        }}
        for (int i = tid; i < BK * BN / VEC; i += THREADS) {{
            const int r = i / (BN / VEC), c = (i % (BN / VEC)) * VEC;
            const Vec v = *reinterpret_cast<const Vec*>(B + (size_t)(k0 + r) * N + bCol + c);
            #pragma unroll
            for (int e = 0; e < VEC; ++e) Bs[r][c + e] = ld(v.v[e]);
        }}
        __syncthreads();
{register_tile_step()}        __syncthreads();
    }}
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) C[(size_t)(bRow + tRow * TM + i) * N + bCol + tCol * TN + j] = st(acc[i][j]);
}}
"""


def tn_triton_code(split: bool) -> str:
    """One program per output tile (swizzled by GROUP_M); split: K ranges over program_id(1), atomically added."""
    if split:
        head = ", SPLIT_K: tl.constexpr"
        k_range = """    # whole BLOCK_K steps per split; the last splits may get a short or empty range
    chunk = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_begin = tl.program_id(1) * chunk
    k_end = tl.minimum(k_begin + chunk, K)"""
        store = '    tl.atomic_add(c_ptrs, acc, mask=c_mask, sem="relaxed")  # C zeroed first; fp32 only'
    else:
        head, k_range = "", "    k_begin = 0\n    k_end = K"
        store = "    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)"
    return f"""{TRITON_HEADER}

@triton.jit
def matmul_tn(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              GROUP_M: tl.constexpr, INPUT_PRECISION: tl.constexpr{head}):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # GROUP_M rows of tiles walked column by column: neighbouring programs share B's tiles in L2
    width = GROUP_M * num_pid_n
    first_m = (pid // width) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % group_m
    pid_n = (pid % width) // group_m
{k_range}
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    # both operands are [BLOCK_K, *] tiles, contiguous along M and N
    a_ptrs = a_ptr + (k_begin + rk[:, None]) * M + rm[None, :]
    b_ptrs = b_ptr + (k_begin + rk[:, None]) * N + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_begin, k_end, BLOCK_K):
        a = tl.load(a_ptrs, mask=rk[:, None] < k_end - k0, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < k_end - k0, other=0.0)
        acc = tl.dot(tl.trans(a), b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * M
        b_ptrs += BLOCK_K * N
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + cm[:, None] * N + cn[None, :]
    c_mask = (cm[:, None] < M) & (cn[None, :] < N)
{store}
"""


def _zeroed_first(split: int, launch: Launch) -> list[Launch]:
    """Split-K adds its partial products into C, so C is cleared first."""
    return [Launch(ZERO, grid1(1), ("c",)), launch] if split > 1 else [launch]


def _only_f32(split: int) -> Check:
    return lambda s: "atomic split-K adds into an fp32 C" if split > 1 and s["dtype"] != "f32" else None


def tn_naive_variant(dtype: str, p: dict[str, Any]) -> Variant:
    bx, by, order = p["block_x"], p["block_y"], p["order"]

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["n"], bx), cdiv(s["m"], by)) if order == "n" else (cdiv(s["m"], bx), cdiv(s["n"], by))
        return [Launch("matmul_tn", (*grid, 1), gemm_args(s), (bx, by, 1))]

    return Variant(
        "cuda-naive",
        "cuda",
        {"dtype": dtype, **p},
        tn_naive_code(dtype, order, p["unroll"]),
        launches,
        unsupported=supports(dtype, max_gflop=NAIVE_GFLOP),
    )


def tn_smem_variant(dtype: str, p: dict[str, Any]) -> Variant:
    tile, split = p["tile"], p["split"]

    def launches(s: Sizes) -> list[Launch]:
        return _zeroed_first(split, Launch("matmul_tn", (cdiv(s["n"], tile), cdiv(s["m"], tile), split), gemm_args(s), (tile, tile, 1)))

    code = tn_smem_code(dtype, tile, p["a_layout"], p["pad"], split)
    return Variant(
        "cuda-smem-tiled",
        "cuda",
        {"dtype": dtype, **p},
        code,
        launches,
        unsupported=unsupported(None, supports(dtype, max_gflop=TILED_GFLOP), _only_f32(split)),
    )


def tn_register_variant(dtype: str, p: dict[str, Any]) -> Variant:
    threads = (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])

    def launches(s: Sizes) -> list[Launch]:
        return [Launch("matmul_tn", (s["n"] // p["BN"], s["m"] // p["BM"], 1), gemm_args(s), block1(threads))]

    return Variant(
        "cuda-register-tiled",
        "cuda",
        {"dtype": dtype, **p},
        tn_register_code(dtype, p),
        launches,
        unsupported=supports(dtype, (p["BM"], p["BN"], p["BK"])),
    )


def tn_triton_variant(dtype: str, p: dict[str, Any]) -> Variant:
    split = p["split_k"]
    constexprs = {name: p[name] for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")} | {"INPUT_PRECISION": p["input_precision"]}
    if split > 1:
        constexprs["SPLIT_K"] = split

    def launches(s: Sizes) -> list[Launch]:
        tiles = cdiv(s["m"], p["BLOCK_M"]) * cdiv(s["n"], p["BLOCK_N"])
        return _zeroed_first(
            split,
            Launch(
                "matmul_tn", (tiles, split, 1), gemm_args(s), constexprs=constexprs, num_warps=p["num_warps"], num_stages=p["num_stages"]
            ),
        )

    return Variant(
        "triton-dot",
        "triton",
        {"dtype": dtype, **p},
        tn_triton_code(split > 1),
        launches,
        unsupported=unsupported(None, supports(dtype), _only_f32(split)),
    )


def matmul_tn_variants() -> Iterable[Variant]:
    """fp32: every family with its single-axis edits; fp16: fewer CUDA-core edits, more Triton tiles."""
    for dtype in ("f32", "f16"):
        full = dtype == "f32"
        naive = product({"block_x": [16, 32], "block_y": [16, 8], "order": ["n", "m"], "unroll": [1, 4]})
        for p in naive if full else naive[::2]:
            if (p["block_x"], p["block_y"]) in ((16, 16), (32, 8)):
                yield tn_naive_variant(dtype, p)
        smem = product({"tile": [16, 32], "a_layout": ["km", "mk"], "pad": [0, 1], "split": [1]})
        if full:
            smem += product({"tile": [16, 32], "a_layout": ["km"], "pad": [0], "split": [2, 4, 8]})
        for p in smem if full else smem[::2]:
            yield tn_smem_variant(dtype, p)
        for tile in TN_REGISTER_TILES:
            for vec in (4, 1) if full or tile[2] == 8 else (4,):
                yield tn_register_variant(dtype, dict(zip(("BM", "BN", "BK", "TM", "TN"), tile)) | {"vec": vec})
        if full:
            configs = [
                {**triton_params(config, input_precision=precision), "split_k": 1}
                for config in TRITON_F32
                for precision in ("ieee", "tf32")
            ]
            base = {**triton_params(TRITON_F32[0], input_precision="tf32"), "split_k": 1}
            configs += around(base, GROUP_M=[1], num_warps=[4], num_stages=[2, 4])[1:]
            small = {**triton_params(TRITON_F32[1], input_precision="tf32"), "split_k": 4}
            configs += around(small, split_k=[16], BLOCK_M=[32])
        else:
            configs = [{**triton_params(config), "split_k": 1} for config in TRITON_HALF[:4]]
            configs += around(configs[0], GROUP_M=[1], num_warps=[8], num_stages=[2, 3])[1:]
        for p in configs:
            yield tn_triton_variant(dtype, p)


MATMUL_TN = Op(
    name="matmul_tn",
    bound="compute",
    sizes=MATMUL_TN_SIZES,
    inputs=lambda s: {"a": TensorSpec((s["k"], s["m"]), s["dtype"], "rand"), "b": TensorSpec((s["k"], s["n"]), s["dtype"], "rand")},
    outputs=lambda s: {"c": TensorSpec((s["m"], s["n"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"c": torch.matmul(inputs["a"].t(), inputs["b"])},
    reference_code="def reference(a, b):\n    return torch.matmul(a.t(), b)\n",
    variants=matmul_tn_variants,
    tolerance={"f32": 2e-3, "f16": 1e-2},  # ops.gemm's: uniform inputs keep TF32 inside the fp32 one
)

OPS = [ROWTOP_K, MATMUL_TN]
