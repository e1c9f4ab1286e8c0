"""Masked attention, the neighbours of attention (the operation forecast worst on edit pairs):
softmax(Q Kᵀ · scale + mask) V over q, k, v [B·H, S, d], d 64 (128 at one size), fp16 (fp32
accumulation) and fp32. The knobs are attention's (unfused scores/softmax/P V against one
fused online-softmax pass, query and key tiles, warps, fp16 or fp32, Triton BLOCK_M/BLOCK_N/
num_warps/num_stages/input_precision) plus the ones a mask adds: whether the fully masked
key tiles are skipped (about half the work for causal, all but W/S of it for a window),
whether the mask is an index test (where) or an additive 0/-inf tensor read from memory, and
how wide the unit working on one query row is.

- causal_attention: query i sees keys j <= i. `masking`: "skip" (loops and tiles stop at the
  diagonal: j < min(S, end of the query tile)), "where" (every key, the masked scores set to
  -inf by an index test), "tensor" (every key, an additive [S, S] 0/-inf mask built by a
  first kernel and read back per score, as torch users pass attn_mask); Triton also
  "diagonal" (the tutorial's split: the tiles left of the diagonal unmasked, the diagonal
  tile masked).
- sliding_attention: query i sees keys i - W < j <= i (window W a size). `masking`:
  "window" (only the key tiles that meet the window: from the tile holding i0 - W + 1 to
  the diagonal) or "where" (every key tile, masked by index). CUDA flash-row also `align`:
  the window's first tile starts at a multiple of BKV ("tile") or exactly at i0 - W + 1
  ("exact": unaligned tiles and a guarded tail).

Families (both operations): cuda-unfused (scores into an fp32 [B·H, S, S] scratch, naive
(a thread per score) or 16x16 shared-memory tiles; a warp-per-row softmax; a thread per
output for P V; restrict), cuda-flash-row (a thread per query row, K/V tiles of BKV rows in
shared memory, online softmax; BQ, BKV), cuda-row (the whole row of scores in shared memory
and an exact softmax: a warp per query row (warps per block) or a block per row (threads);
head dimension a runtime argument, so it also runs d = 128; restrict), triton-flash
(FlashAttention forward with the masking above; BLOCK_M, BLOCK_N, num_warps, num_stages and,
for fp32, input_precision) and triton-unfused (tl.dot scores, a row-softmax kernel, tl.dot
P V, masked tiles left out or computed).

Every row sees at least itself, but a tile (or a thread's share of keys) may see nothing:
the online softmaxes start their running max at a finite -1e30, so exp(m_old - m_new) and
exp(-inf - m) are 0 or 1 and never inf - inf = NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.gemm import cuda_prelude
from workshop.corpus.ops.rowkit import NEG_INF, TRITON_HEADER, Check, at_most, cuda_reductions, unsupported
from workshop.corpus.spec import Launch, Op, Sizes, TensorSpec, Variant, around, cdiv, cuda_pointer, f32, i32, product

CAUSAL, SLIDING = "causal", "sliding"
FIXED_HEAD_DIM = 64  # the CUDA kernels with #define D; cuda-row and Triton take it from the sizes
# Running max before any key: finite, so a tile that sees no key rescales by 1, not NaN.
NO_SCORE = "-1e30f"
LOG2E = "1.4426950408889634"
TOLERANCE = {"f32": 5e-3, "f16": 1e-2}  # TF32 dots in the fp32 Triton variants, as for attention

# What query i sees, as C and Triton (i a [BLOCK_M] and j a [BLOCK_N] vector) expressions.
C_VISIBLE = {CAUSAL: "{j} <= {i}", SLIDING: "{j} <= {i} && {j} > {i} - W"}
C_FIRST_KEY = {CAUSAL: "0", SLIDING: "max(0, {i} - W + 1)"}
TRITON_VISIBLE = {CAUSAL: "{j}[None, :] <= {i}[:, None]", SLIDING: "({j}[None, :] <= {i}[:, None]) & ({j}[None, :] > {i}[:, None] - W)"}
# The same for the keys `offs` of row i (a softmax program's row).
TRITON_ROW_VISIBLE = {CAUSAL: "offs <= i", SLIDING: "(offs <= i) & (offs > i - W)"}
# The window as a kernel parameter (C, Triton) and as a launch argument.
C_WINDOW = {CAUSAL: "", SLIDING: "int W, "}
TRITON_WINDOW = {CAUSAL: "", SLIDING: "W, "}
# Key loops over the visible keys only (against every key with masking).
SKIPPING = ("skip", "window")


def _window_args(kind: str, s: Sizes) -> tuple[Any, ...]:
    return (i32(s["window"]),) if kind == SLIDING else ()


def _c_visible(kind: str, i: str, j: str) -> str:
    return C_VISIBLE[kind].format(i=i, j=j)


def _c_key_range(kind: str, skipping: bool, i: str, first: str = "first", last: str = "last", length: str = "S") -> str:
    """`first` and `last` (exclusive) of the keys row `i` loops over: its visible ones, or all."""
    if not skipping:
        return f"const int {first} = 0, {last} = {length};"
    return f"const int {first} = {C_FIRST_KEY[kind].format(i=i)}, {last} = {i} + 1;"


def _c_mask(kind: str, masking: str, score: str, i: str, j: str, length: str = "S", indent: str = "    ") -> str:
    """The statement masking `score`: -inf by index test, or the mask tensor's entry added."""
    if masking == "tensor":
        return f"{indent}{score} += bias[(size_t){i} * {length} + {j}];\n"
    return f"{indent}if (!({_c_visible(kind, i, j)})) {score} = NEG_INF;\n"


def _c_bias_param(masking: str, restrict: bool = True) -> str:
    return cuda_pointer("float", "bias", restrict) + ", " if masking == "tensor" else ""


def _prelude(dtype: str, defines: dict[str, Any]) -> str:
    lines = "".join(f"#define {name} {value}\n" for name, value in defines.items())
    return f"{cuda_prelude(dtype)}#define NEG_INF {NEG_INF}\n{lines}"


BUILD_MASK = """
// The additive causal mask a torch user passes as attn_mask: 0 on and below the diagonal, -inf above.
extern "C" __global__ void build_mask(float* bias, int S) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= S * S) return;
    int row = idx / S, col = idx % S;
    bias[idx] = col <= row ? 0.0f : NEG_INF;
}
"""


def _build_mask(masking: str) -> str:
    return BUILD_MASK if masking == "tensor" else ""


def _mask_launch(s: Sizes) -> Launch:
    return Launch("build_mask", (cdiv(s["s"] * s["s"], 256), 1, 1), ("bias", i32(s["s"])), (256, 1, 1))


def _mask_scratch(masking: str) -> Callable[[Sizes], dict[str, TensorSpec]]:
    return lambda s: {"bias": TensorSpec((s["s"], s["s"]), "f32")} if masking == "tensor" else {}


def _supports(dtype: str, rows: int, keys: int = 1, fixed_head: bool = True, *checks: Check) -> Check:
    """Its precision, S a multiple of its query and key tiles, and (unless it reads d at run time) d = 64."""

    def tiles(s: Sizes) -> str | None:
        if fixed_head and s["d"] != FIXED_HEAD_DIM:
            return f"head dimension compiled in as {FIXED_HEAD_DIM}"
        return f"needs S a multiple of {rows} and {keys}" if s["s"] % rows or s["s"] % keys else None

    return unsupported(dtype, tiles, *checks)


# Unfused variants keep an fp32 [B·H, S, S] score matrix: S = 4096 would need over half a GB.
SCORES_FIT = at_most("s", 2048, "the [B·H, S, S] fp32 scores scratch")


# --- CUDA, unfused --------------------------------------------------------------------------------


def _unfused_scores(kind: str, style: str, masking: str, restrict: bool) -> str:
    skipping = masking in SKIPPING
    head = (
        f'extern "C" __global__ void scores({cuda_pointer("T", "Q", restrict)}, {cuda_pointer("T", "Km", restrict)}, '
        f"{_c_bias_param(masking, restrict)}{cuda_pointer('float', 'P', restrict, const=False)}, int S, {C_WINDOW[kind]}float scale)"
    )
    mask = "" if skipping else _c_mask(kind, masking, "s", "i", "j")
    if style == "naive":
        skip = f"    if (!({_c_visible(kind, 'i', 'j')})) return;  // never read: softmax and P V stop at the mask\n" if skipping else ""
        return f"""{head} {{
    const size_t bh = blockIdx.z;
    const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= S || j >= S) return;
{skip}    const T* q = Q + (bh * S + i) * D;
    const T* k = Km + (bh * S + j) * D;
    float s = 0.0f;
    #pragma unroll 16
    for (int d = 0; d < D; ++d) s += ld(q[d]) * ld(k[d]);
    s *= scale;
{mask}    P[(bh * S + i) * S + j] = s;
}}
"""
    if skipping:
        whole_tile = {CAUSAL: "j0 > i0 + TILE - 1", SLIDING: "j0 > i0 + TILE - 1 || j0 + TILE - 1 <= i0 - W"}[kind]
        skip = f"    if ({whole_tile}) return;  // the whole tile is masked\n"
        mask = _c_mask(kind, "where", "s", "i", "j")  # the diagonal's tiles still hold masked scores
    else:
        skip = ""
    return f"""#define TILE 16
{head} {{
    __shared__ float Qs[TILE][D + 1], Ks[TILE][D + 1];
    const size_t bh = blockIdx.z;
    const int tx = threadIdx.x, ty = threadIdx.y, i0 = blockIdx.y * TILE, j0 = blockIdx.x * TILE;
{skip}    for (int e = ty * TILE + tx; e < TILE * D; e += TILE * TILE) {{
        const int r = e / D, c = e % D;
        Qs[r][c] = i0 + r < S ? ld(Q[(bh * S + i0 + r) * D + c]) : 0.0f;
        Ks[r][c] = j0 + r < S ? ld(Km[(bh * S + j0 + r) * D + c]) : 0.0f;
    }}
    __syncthreads();
    const int i = i0 + ty, j = j0 + tx;
    float s = 0.0f;
    #pragma unroll
    for (int d = 0; d < D; ++d) s += Qs[ty][d] * Ks[tx][d];
    s *= scale;
{mask}    if (i < S && j < S) P[(bh * S + i) * S + j] = s;
}}
"""


def _unfused_softmax(kind: str, skipping: bool) -> str:
    return f"""extern "C" __global__ void softmax(float* P, int rows, int S{", int W" if kind == SLIDING else ""}) {{
    const size_t r = (size_t)blockIdx.x * 8 + threadIdx.x / 32;  // a warp per row, 8 rows per block
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const int i = r % S;
    float* row = P + r * S;
    {_c_key_range(kind, skipping, "i")}
    float m = NEG_INF;
    for (int j = first + lane; j < last; j += 32) m = fmaxf(m, row[j]);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
    for (int j = first + lane; j < last; j += 32) sum += __expf(row[j] - m);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = 1.0f / sum;
    for (int j = first + lane; j < last; j += 32) row[j] = __expf(row[j] - m) * inv;
}}
"""


def _unfused_pv(kind: str, skipping: bool) -> str:
    return f"""extern "C" __global__ void pv(const float* P, const T* V, T* O, int S{", int W" if kind == SLIDING else ""}) {{
    const size_t bh = blockIdx.y;
    const int i = blockIdx.x * blockDim.y + threadIdx.y, d = threadIdx.x;  // a thread per output, threadIdx.x along d
    if (i >= S) return;
    const float* p = P + (bh * S + i) * S;
    const T* v = V + bh * S * D + d;
    {_c_key_range(kind, skipping, "i")}
    float acc = 0.0f;
    for (int j = first; j < last; ++j) acc += p[j] * ld(v[(size_t)j * D]);
    O[(bh * S + i) * D + d] = st(acc);
}}
"""


def unfused_variant(kind: str, dtype: str, p: dict[str, Any]) -> Variant:
    masking, skipping = p["masking"], p["masking"] in SKIPPING
    code = "\n".join(
        [
            _prelude(dtype, {"D": FIXED_HEAD_DIM}) + _build_mask(masking),
            _unfused_scores(kind, p["scores"], masking, p["restrict"]),
            _unfused_softmax(kind, skipping),
            _unfused_pv(kind, skipping),
        ]
    )

    def launches(s: Sizes) -> list[Launch]:
        bh, n, window = s["bh"], s["s"], _window_args(kind, s)
        bias = ("bias",) if masking == "tensor" else ()
        return [
            *([_mask_launch(s)] if masking == "tensor" else []),
            Launch("scores", (cdiv(n, 16), cdiv(n, 16), bh), ("q", "k", *bias, "scores", i32(n), *window, f32(_scale(s))), (16, 16, 1)),
            Launch("softmax", (cdiv(bh * n, 8), 1, 1), ("scores", i32(bh * n), i32(n), *window), (256, 1, 1)),
            Launch("pv", (cdiv(n, 4), bh, 1), ("scores", "v", "o", i32(n), *window), (FIXED_HEAD_DIM, 4, 1)),
        ]

    def scratch(s: Sizes) -> dict[str, TensorSpec]:
        return {"scores": TensorSpec((s["bh"], s["s"], s["s"]), "f32"), **_mask_scratch(masking)(s)}

    return Variant(
        "cuda-unfused", "cuda", {"dtype": dtype, **p}, code, launches, scratch=scratch, unsupported=_supports(dtype, 1, 1, True, SCORES_FIT)
    )


# --- CUDA, fused: a thread per query row ----------------------------------------------------------


def _flash_row_range(kind: str, masking: str, align: str) -> str:
    if masking not in SKIPPING:
        return "const int first = 0, last = S;"
    if kind == CAUSAL:
        return "const int first = 0, last = i0 + BQ;  // tiles right of the block's diagonal see nothing"
    start = "max(0, i0 - W + 1)"
    return f"const int first = {start if align == 'exact' else f'{start} / BKV * BKV'}, last = i0 + BQ;"


def flash_row_code(kind: str, dtype: str, p: dict[str, Any]) -> str:
    masking = p["masking"]
    # An unaligned window start can run the last tile past S: those keys load as zeros and are masked.
    guarded = p.get("align") == "exact"
    zero = "st(0.0f)"
    k_load = f"j0 + e / D < S ? K[(bh * S + j0) * D + e] : {zero}" if guarded else "K[(bh * S + j0) * D + e]"
    v_load = f"j0 + e / D < S ? V[(bh * S + j0) * D + e] : {zero}" if guarded else "V[(bh * S + j0) * D + e]"
    return f"""{_prelude(dtype, {"D": FIXED_HEAD_DIM, "BQ": p["BQ"], "BKV": p["BKV"]})}{_build_mask(masking)}
extern "C" __global__ void __launch_bounds__(BQ) {kind}_attention(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
        {_c_bias_param(masking)}T* __restrict__ O, int S, {C_WINDOW[kind]}float scale) {{
    extern __shared__ __align__(16) unsigned char smem[];
    T* Ks = reinterpret_cast<T*>(smem);  // [BKV][D]
    T* Vs = Ks + BKV * D;                // [BKV][D]
    const size_t bh = blockIdx.y;
    const int i0 = blockIdx.x * BQ, i = i0 + threadIdx.x;  // this thread's query row
    const float c = scale * {LOG2E}f;  // exp2 of scaled scores
    float q[D], o[D], m = {NO_SCORE}, l = 0.0f;
    #pragma unroll
    for (int d = 0; d < D; ++d) {{
        q[d] = ld(Q[(bh * S + i) * D + d]) * c;
        o[d] = 0.0f;
    }}
    {_flash_row_range(kind, masking, p.get("align", "tile"))}
    for (int j0 = first; j0 < last; j0 += BKV) {{
        __syncthreads();
        for (int e = threadIdx.x; e < BKV * D; e += BQ) {{
            Ks[e] = {k_load};
            Vs[e] = {v_load};
        }}
        __syncthreads();
        for (int jj = 0; jj < BKV; ++jj) {{
            const int j = j0 + jj;
            float s = 0.0f;
            #pragma unroll
            for (int d = 0; d < D; ++d) s += q[d] * ld(Ks[jj * D + d]);
{_c_mask(kind, masking, "s", "i", "j", indent="            ")}            if (s > m) {{  // the running max grows: rescale what was summed so far
                const float alpha = exp2f(m - s);
                l *= alpha;
                #pragma unroll
                for (int d = 0; d < D; ++d) o[d] *= alpha;
                m = s;
            }}
            const float p = exp2f(s - m);
            l += p;
            #pragma unroll
            for (int d = 0; d < D; ++d) o[d] += p * ld(Vs[jj * D + d]);
        }}
    }}
    const float inv = 1.0f / l;
    #pragma unroll
    for (int d = 0; d < D; ++d) O[(bh * S + i) * D + d] = st(o[d] * inv);
}}
"""


def flash_row_variant(kind: str, dtype: str, p: dict[str, Any]) -> Variant:
    masking = p["masking"]
    shared = 2 * p["BKV"] * FIXED_HEAD_DIM * (4 if dtype == "f32" else 2)

    def launches(s: Sizes) -> list[Launch]:
        bias = ("bias",) if masking == "tensor" else ()
        args = ("q", "k", "v", *bias, "o", i32(s["s"]), *_window_args(kind, s), f32(_scale(s)))
        main = Launch(f"{kind}_attention", (s["s"] // p["BQ"], s["bh"], 1), args, (p["BQ"], 1, 1), shared_bytes=shared)
        return [_mask_launch(s), main] if masking == "tensor" else [main]

    return Variant(
        "cuda-flash-row",
        "cuda",
        {"dtype": dtype, **p},
        flash_row_code(kind, dtype, p),
        launches,
        scratch=_mask_scratch(masking),
        unsupported=_supports(dtype, p["BQ"], p["BKV"]),
    )


# --- CUDA, a warp or a block per query row, the row's scores in shared memory ---------------------


def row_code(kind: str, dtype: str, p: dict[str, Any]) -> str:
    """q (pre-scaled) and the row's seq_len scores in shared memory; max, exponentials and sum, then P V."""
    masking, restrict = p["masking"], p["restrict"]
    if p["unit"] == "warp":
        defines = {"WARPS": p["warps"]}
        who = """    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int row = blockIdx.x * WARPS + warp;
    float* qs = smem + warp * (head_dim + seq_len);  // this warp's slice"""
        tid, threads, sync, reduce = "lane", "32", "__syncwarp()", "warp"
        reductions = cuda_reductions(("max", "sum"))
    else:
        defines = {"BLOCK": p["threads"]}
        who = """    const int row = blockIdx.x;
    float* qs = smem;"""
        tid, threads, sync, reduce = "threadIdx.x", "BLOCK", "__syncthreads()", "block"
        reductions = cuda_reductions(("max", "sum"), block_style="shuffle")
    skipping = masking in SKIPPING
    mask = "" if skipping else _c_mask(kind, masking, "s", "row", "j", "seq_len", indent="        ")
    pointers = ", ".join([cuda_pointer("T", "q", restrict), cuda_pointer("T", "k", restrict), cuda_pointer("T", "v", restrict)])
    return f"""{_prelude(dtype, defines)}{_build_mask(masking)}{reductions}
extern "C" __global__ void {kind}_attention({pointers}, {_c_bias_param(masking, restrict)}{cuda_pointer("T", "out", restrict, const=False)},
        int seq_len, {C_WINDOW[kind]}int head_dim, float scale) {{
    extern __shared__ float smem[];
{who}
    float* ps = qs + head_dim;
    const size_t base = (size_t)blockIdx.y * seq_len;
    for (int d = {tid}; d < head_dim; d += {threads}) qs[d] = ld(q[(base + row) * head_dim + d]) * scale;
    {sync};
    {_c_key_range(kind, skipping, "row", length="seq_len")}
    float mx = NEG_INF;
    for (int j = first + {tid}; j < last; j += {threads}) {{
        const T* key = k + (base + j) * head_dim;
        float s = 0.0f;
        for (int d = 0; d < head_dim; ++d) s += qs[d] * ld(key[d]);
{mask}        ps[j] = s;
        mx = fmaxf(mx, s);
    }}
    mx = {reduce}_max(mx);
    float sum = 0.0f;
    for (int j = first + {tid}; j < last; j += {threads}) {{
        const float e = __expf(ps[j] - mx);
        ps[j] = e;
        sum += e;
    }}
    sum = {reduce}_sum(sum);
    {sync};
    const float inv = 1.0f / sum;
    for (int d = {tid}; d < head_dim; d += {threads}) {{
        float acc = 0.0f;
        for (int j = first; j < last; ++j) acc += ps[j] * ld(v[(base + j) * head_dim + d]);
        out[(base + row) * head_dim + d] = st(acc * inv);
    }}
}}
"""


def row_variant(kind: str, dtype: str, p: dict[str, Any]) -> Variant:
    masking = p["masking"]
    rows, threads = (p["warps"], 32 * p["warps"]) if p["unit"] == "warp" else (1, p["threads"])

    def launches(s: Sizes) -> list[Launch]:
        bias = ("bias",) if masking == "tensor" else ()
        args = ("q", "k", "v", *bias, "o", i32(s["s"]), *_window_args(kind, s), i32(s["d"]), f32(_scale(s)))
        main = Launch(f"{kind}_attention", (s["s"] // rows, s["bh"], 1), args, (threads, 1, 1), shared_bytes=rows * (s["d"] + s["s"]) * 4)
        return [_mask_launch(s), main] if masking == "tensor" else [main]

    return Variant(
        "cuda-row",
        "cuda",
        {"dtype": dtype, **p},
        row_code(kind, dtype, p),
        launches,
        scratch=_mask_scratch(masking),
        unsupported=_supports(dtype, rows, 1, False),
    )


# --- Triton, fused ------------------------------------------------------------------------------


def _triton_mask_line(kind: str, masking: str) -> str:
    if masking == "tensor":
        return "qk += tl.load(bias_ptr + offs_m[:, None] * S + keys[None, :])"
    return f'qk = tl.where({TRITON_VISIBLE[kind].format(i="offs_m", j="keys")}, qk, float("-inf"))'


def _triton_loops(kind: str, masking: str) -> str:
    """The calls of _attend: which key tiles, and which of them masked."""

    def attend(lo: str, hi: str, masked: bool) -> str:
        return (
            f"    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_ptr, v_ptr, {bias_arg}base, offs_m, S, {TRITON_WINDOW[kind]}{lo}, {hi}, qk_scale,\n"
            f"                            HEAD_DIM, BLOCK_N, {masked}, INPUT_PRECISION)\n"
        )

    bias_arg = "bias_ptr, " if masking == "tensor" else ""
    if masking == "skip":
        return attend("0", "(start_m + 1) * BLOCK_M", True)
    if masking == "diagonal":
        return (
            "    # left of the diagonal every key is visible: no mask; then the diagonal tile(s), masked\n"
            + attend("0", "start_m * BLOCK_M", False)
            + attend("start_m * BLOCK_M", "(start_m + 1) * BLOCK_M", True)
        )
    if masking == "window":
        return (
            "    lo = tl.maximum(start_m * BLOCK_M - W + 1, 0) // BLOCK_N * BLOCK_N  # the tile holding the window's first key\n"
            + attend("lo", "(start_m + 1) * BLOCK_M", True)
        )
    return attend("0", "S", True)


def triton_flash_code(kind: str, masking: str) -> str:
    bias = "bias_ptr, " if masking == "tensor" else ""
    window = TRITON_WINDOW[kind]
    build = (
        ""
        if masking != "tensor"
        else """

@triton.jit
def build_mask(bias_ptr, S, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    row = offs // S
    col = offs % S
    tl.store(bias_ptr + offs, tl.where(col <= row, 0.0, float("-inf")), mask=offs < S * S)
"""
    )
    return f"""{TRITON_HEADER}

@triton.jit
def _attend(acc, l_i, m_i, q, k_ptr, v_ptr, {bias}base, offs_m, S, {window}lo, hi, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
            MASKED: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        keys = start_n + offs_n
        k = tl.load(k_ptr + base + keys[None, :] * HEAD_DIM + offs_d[:, None])  # [HEAD_DIM, BLOCK_N]: Kᵀ
        qk = tl.dot(q, k, input_precision=INPUT_PRECISION) * qk_scale
        if MASKED:
            {_triton_mask_line(kind, masking)}
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + base + keys[:, None] * HEAD_DIM + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def {kind}_attention(q_ptr, k_ptr, v_ptr, {bias}o_ptr, S, {window}scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     INPUT_PRECISION: tl.constexpr):
    start_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * S * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
    m_i = tl.full((BLOCK_M,), -1.0e30, dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    qk_scale = scale * {LOG2E}  # exp2 of scaled scores
{_triton_loops(kind, masking)}    acc = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(o_ptr.dtype.element_ty))
{build}"""


TRITON_MASK_BLOCK = 1024


def _triton_mask_launch(s: Sizes) -> Launch:
    return Launch(
        "build_mask",
        (cdiv(s["s"] * s["s"], TRITON_MASK_BLOCK), 1, 1),
        ("bias", i32(s["s"])),
        constexprs={"BLOCK": TRITON_MASK_BLOCK},
        num_warps=4,
    )


def triton_flash_variant(kind: str, dtype: str, p: dict[str, Any]) -> Variant:
    masking = p["masking"]

    def launches(s: Sizes) -> list[Launch]:
        bias = ("bias",) if masking == "tensor" else ()
        constexprs = {"HEAD_DIM": s["d"], "BLOCK_M": p["BLOCK_M"], "BLOCK_N": p["BLOCK_N"], "INPUT_PRECISION": p["input_precision"]}
        main = Launch(
            f"{kind}_attention",
            (s["s"] // p["BLOCK_M"], s["bh"], 1),
            ("q", "k", "v", *bias, "o", i32(s["s"]), *_window_args(kind, s), f32(_scale(s))),
            constexprs=constexprs,
            num_warps=p["num_warps"],
            num_stages=p["num_stages"],
        )
        return [_triton_mask_launch(s), main] if masking == "tensor" else [main]

    return Variant(
        "triton-flash",
        "triton",
        {"dtype": dtype, **p},
        triton_flash_code(kind, masking),
        launches,
        scratch=_mask_scratch(masking),
        unsupported=_supports(dtype, p["BLOCK_M"], p["BLOCK_N"], False),
    )


# --- Triton, unfused ----------------------------------------------------------------------------


def triton_unfused_code(kind: str, masking: str) -> str:
    """Scores, softmax and P V kernels; with `masking` "where" every tile is computed and every
    score read, otherwise the tiles past the mask are left out and every load is masked."""
    window = TRITON_WINDOW[kind]
    visible = TRITON_VISIBLE[kind]
    skipping = masking in SKIPPING
    score_tile = f"""    q = tl.load(q_ptr + bh * S * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
    k = tl.load(k_ptr + bh * S * HEAD_DIM + offs_n[None, :] * HEAD_DIM + offs_d[:, None])
    s = tl.dot(q, k, input_precision=INPUT_PRECISION) * scale
    s = tl.where({visible.format(i="offs_m", j="offs_n")}, s, float("-inf"))
    tl.store(p_ptr + bh * S * S + offs_m[:, None] * S + offs_n[None, :], s)
"""
    if skipping:
        touched = {CAUSAL: "n0 <= m0 + BLOCK_M - 1", SLIDING: "(n0 <= m0 + BLOCK_M - 1) & (n0 + BLOCK_N - 1 > m0 - W)"}[kind]
        score_tile = f"    if {touched}:  # a tile wholly past the mask is never read\n" + "".join(
            "    " + line + "\n" for line in score_tile.splitlines()
        )
        row_live = TRITON_ROW_VISIBLE[kind]
        lo = {CAUSAL: "0", SLIDING: "tl.maximum(m0 - W + 1, 0) // BLOCK_N * BLOCK_N"}[kind]
        pv_range = f"{lo}, m0 + BLOCK_M"
        p_load = f"p_ptr + bh * S * S + offs_m[:, None] * S + keys[None, :], mask={visible.format(i='offs_m', j='keys')}, other=0.0"
    else:
        row_live = "offs < S"
        pv_range = "0, S"
        p_load = "p_ptr + bh * S * S + offs_m[:, None] * S + keys[None, :]"
    return f"""{TRITON_HEADER}

@triton.jit
def scores(q_ptr, k_ptr, p_ptr, S, {window}scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
           INPUT_PRECISION: tl.constexpr):
    bh = tl.program_id(2).to(tl.int64)
    m0 = tl.program_id(0) * BLOCK_M
    n0 = tl.program_id(1) * BLOCK_N
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
{score_tile}

@triton.jit
def softmax(p_ptr, S, {window}BLOCK: tl.constexpr):
    r = tl.program_id(0)
    i = r % S
    row = p_ptr + r.to(tl.int64) * S
    offs = tl.arange(0, BLOCK)
    live = {row_live}
    x = tl.load(row + offs, mask=live, other=float("-inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(row + offs, e / tl.sum(e, 0), mask=live)


@triton.jit
def pv(p_ptr, v_ptr, o_ptr, S, {window}HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    bh = tl.program_id(1).to(tl.int64)
    m0 = tl.program_id(0) * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    for start_n in range({pv_range}, BLOCK_N):
        keys = start_n + offs_n
        p = tl.load({p_load})
        v = tl.load(v_ptr + bh * S * HEAD_DIM + keys[:, None] * HEAD_DIM + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=INPUT_PRECISION)
    tl.store(o_ptr + bh * S * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(o_ptr.dtype.element_ty))
"""


def triton_unfused_variant(kind: str, dtype: str, p: dict[str, Any]) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        bh, n, window = s["bh"], s["s"], _window_args(kind, s)
        tiles = {"HEAD_DIM": s["d"], "BLOCK_M": p["BLOCK_M"], "BLOCK_N": p["BLOCK_N"], "INPUT_PRECISION": p["input_precision"]}
        return [
            Launch(
                "scores",
                (n // p["BLOCK_M"], n // p["BLOCK_N"], bh),
                ("q", "k", "scores", i32(n), *window, f32(_scale(s))),
                constexprs=tiles,
                num_warps=p["num_warps"],
            ),
            Launch("softmax", (bh * n, 1, 1), ("scores", i32(n), *window), constexprs={"BLOCK": n}, num_warps=p["softmax_warps"]),
            Launch("pv", (n // p["BLOCK_M"], bh, 1), ("scores", "v", "o", i32(n), *window), constexprs=tiles, num_warps=p["num_warps"]),
        ]

    return Variant(
        "triton-unfused",
        "triton",
        {"dtype": dtype, **p},
        triton_unfused_code(kind, p["masking"]),
        launches,
        scratch=lambda s: {"scores": TensorSpec((s["bh"], s["s"], s["s"]), "f32")},
        unsupported=_supports(dtype, p["BLOCK_M"], p["BLOCK_N"], False, SCORES_FIT),
    )


# --- the operations -------------------------------------------------------------------------------


def _scale(s: Sizes) -> float:
    return s["d"] ** -0.5


def _qkv(s: Sizes) -> dict[str, TensorSpec]:
    return {name: TensorSpec((s["bh"], s["s"], s["d"]), s["dtype"]) for name in ("q", "k", "v")}


def _output(s: Sizes) -> dict[str, TensorSpec]:
    return {"o": TensorSpec((s["bh"], s["s"], s["d"]), s["dtype"])}


def _variants(kind: str, cuda_maskings: tuple[str, ...], triton_maskings: tuple[str, ...]) -> Iterable[Variant]:
    """The same star of settings for both operations; the first masking of each tuple is the base."""
    skip = cuda_maskings[0]
    for dtype in ("f16", "f32"):
        for p in [
            *product({"scores": ["naive", "tiled"], "masking": list(cuda_maskings[:2]), "restrict": [True]}),
            *({"scores": "tiled", "masking": masking, "restrict": True} for masking in cuda_maskings[2:]),
            {"scores": "tiled", "masking": skip, "restrict": False},
        ]:
            yield unfused_variant(kind, dtype, p)
        flash_base = {"BQ": 64, "BKV": 32, "masking": skip, **({"align": "tile"} if kind == SLIDING else {})}
        flash_settings = around(
            flash_base, BQ=[128], BKV=[64], masking=cuda_maskings[1:], **({"align": ["exact"]} if kind == SLIDING else {})
        )
        flash_settings.append({**flash_base, "BQ": 128, "masking": cuda_maskings[1]})
        for p in flash_settings:
            yield flash_row_variant(kind, dtype, p)
        row_base = {"unit": "warp", "warps": 4, "threads": None, "masking": skip, "restrict": True}
        for p in around(row_base, warps=[8], masking=cuda_maskings[1:], restrict=[False]):
            yield row_variant(kind, dtype, p)
        for threads in (128, 256):
            for masking in cuda_maskings[:2]:
                yield row_variant(kind, dtype, {**row_base, "unit": "block", "warps": None, "threads": threads, "masking": masking})
        precision = "ieee"
        flash = {
            "BLOCK_M": 128,
            "BLOCK_N": 64,
            "num_warps": 4,
            "num_stages": 2,
            "input_precision": precision,
            "masking": triton_maskings[0],
        }
        settings = [
            *(dict(flash, masking=masking) for masking in triton_maskings),
            *around(flash, BLOCK_N=[32, 128], num_warps=[8], num_stages=[3])[1:],
            *(dict(flash, BLOCK_M=64, masking=masking) for masking in triton_maskings[:2]),
        ]
        if dtype == "f32":
            settings = [
                *(dict(flash, masking=masking, BLOCK_N=32) for masking in triton_maskings[:2]),
                dict(flash, BLOCK_N=32, input_precision="tf32"),
            ]
        for p in settings:
            yield triton_flash_variant(kind, dtype, p)
        for masking in (skip, "where"):
            yield triton_unfused_variant(
                kind,
                dtype,
                {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "softmax_warps": 8, "input_precision": precision, "masking": masking},
            )


CAUSAL_SIZES = [
    *({"bh": bh, "s": s, "d": d, "dtype": "f16"} for bh, s, d in ((8, 128, 64), (32, 512, 64), (16, 1024, 128), (16, 2048, 64))),
    *({"bh": bh, "s": s, "d": 64, "dtype": "f32"} for bh, s in ((8, 128), (16, 1024), (8, 2048))),
]

CAUSAL_REFERENCE_CODE = """\
def reference(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
"""

CAUSAL_ATTENTION = Op(
    name="causal_attention",
    bound="compute",
    sizes=CAUSAL_SIZES,
    inputs=_qkv,
    outputs=_output,
    reference=lambda torch, inputs, sizes: {
        "o": torch.nn.functional.scaled_dot_product_attention(inputs["q"], inputs["k"], inputs["v"], is_causal=True)
    },
    reference_code=CAUSAL_REFERENCE_CODE,
    variants=lambda: _variants(CAUSAL, ("skip", "where", "tensor"), ("skip", "where", "diagonal", "tensor")),
    tolerance=TOLERANCE,
)

SLIDING_SIZES = [
    *(
        {"bh": bh, "s": s, "d": d, "window": w, "dtype": "f16"}
        for bh, s, d, w in ((8, 128, 64, 64), (32, 512, 64, 128), (16, 1024, 128, 256), (16, 2048, 64, 512), (8, 4096, 64, 256))
    ),
    *({"bh": bh, "s": s, "d": 64, "window": w, "dtype": "f32"} for bh, s, w in ((8, 128, 64), (16, 1024, 128), (8, 4096, 512))),
]

SLIDING_REFERENCE_CODE = """\
def reference(q, k, v, window):
    i = torch.arange(q.shape[-2], device=q.device)
    visible = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible)
"""


def _sliding_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    q = inputs["q"]
    i = torch.arange(q.shape[-2], device=q.device)
    visible = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - sizes["window"])
    return {"o": torch.nn.functional.scaled_dot_product_attention(q, inputs["k"], inputs["v"], attn_mask=visible)}


SLIDING_ATTENTION = Op(
    name="sliding_attention",
    bound="compute",
    sizes=SLIDING_SIZES,
    inputs=_qkv,
    outputs=_output,
    reference=_sliding_reference,
    reference_code=SLIDING_REFERENCE_CODE,
    variants=lambda: _variants(SLIDING, ("window", "where"), ("window", "where")),
    tolerance=TOLERANCE,
)

OPS = [CAUSAL_ATTENTION, SLIDING_ATTENTION]
