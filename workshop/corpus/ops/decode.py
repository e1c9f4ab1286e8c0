"""Decode-time attention over a KV cache and a fused AdamW step: two memory-bound operations of
LLM serving and training whose speed is decided by how often each byte is read.

- decode_attention: one query per (batch·head) b against its cached keys and values:
  out[b] = softmax(q[b] · K[b]ᵀ / √d) · V[b], q [BH, d], K and V [BH, S, d], d = 64 or 128,
  fp16 (fp32 accumulation) and fp32, from 8 heads of 128 keys to one head of 32768 keys
  (the case a block per head leaves 131 SMs idle). CUDA:
  cuda-three-pass (a block per b: scores into a buffer, exponentials and their sum in place,
  then the weighted sum of V rows; the scores in global scratch or in dynamic shared memory,
  a thread per key (each reads its own K row: uncoalesced) or a warp per key (coalesced,
  shuffle sum); block, restrict);
  cuda-online (a block per b, one pass with an online softmax: GROUP lanes share a key, so a
  warp scores 32 / GROUP keys per step; warps, group, vector (scalar or 16-byte loads), passes
  (1: K and V read once; 2: a first pass over K for the max, then K read again with V, so
  the accumulator needs no rescaling), restrict through a RESTRICT macro);
  cuda-split (flash-decoding: the keys split over grid.x, each block writing its max, sum
  and weighted sum to scratch, and a combine kernel; splits, warps, vector; group 8).
  Triton: triton-loop (a program per b looping over BLOCK_S-key tiles with an online
  softmax; BLOCK_S, num_warps) and triton-split (split-S partials and a combine kernel;
  splits, BLOCK_S, num_warps). Head dimension is a runtime argument of every CUDA kernel
  (lanes past it idle) and a constexpr of the Triton ones.
- adamw_step: p, m, v <- AdamW(p, g, m, v) over n fp32 parameters, out of place (p_out, m_out,
  v_out), lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, step 10; n from 4096 to
  2^25, and 99999 (a tail past every vector width). 28 bytes moved per parameter. CUDA:
  cuda-elementwise (a thread per element or `items` per thread, neighbouring threads on
  neighbouring elements (layout "strided") or each on `items` consecutive ones
  ("contiguous"); loop: one pass or grid-stride over a persistent grid; block; fast_math
  (__fdividef, and rsqrtf in a per-thread bias correction, against / and 1 / sqrtf); bias:
  corrections from the host or recomputed by every thread with powf; restrict);
  cuda-float4 (float4 loads and stores with a scalar tail; block, vecs (float4s per
  thread), loop, fast_math, restrict); cuda-unfused (a small kernel per line of the math
  through scratch buffers, as written without fusion: chain "per_line", 8 launches, or
  "torch_like", torch's own split into decay, moments, denominator and addcdiv, 5 launches;
  block, restrict). Triton: triton-block (BLOCK, num_warps, precise: tl.sqrt_rn and
  tl.div_rn against the default sqrt and division).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.memkit import MAX_SHARED_BYTES, pack_struct
from workshop.corpus.ops.rowkit import (
    THREADS_PER_SM,
    TRITON_HEADER,
    Check,
    at_most,
    cuda_prelude,
    cuda_reductions,
    resident_blocks,
    unsupported,
    vector_width,
)
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
    Launch,
    Op,
    Sizes,
    TensorSpec,
    Variant,
    around,
    block1,
    cdiv,
    cuda_load_as_float,
    cuda_pointer,
    cuda_store_from_float,
    f32,
    grid1,
    i32,
)

# --- decode_attention -----------------------------------------------------------------------------

DECODE_SIZES = [
    {"bh": 8, "s": 128, "d": 64, "dtype": "f16"},
    {"bh": 32, "s": 1024, "d": 128, "dtype": "f16"},
    {"bh": 256, "s": 512, "d": 64, "dtype": "f16"},
    {"bh": 64, "s": 4096, "d": 128, "dtype": "f16"},
    {"bh": 4, "s": 32768, "d": 128, "dtype": "f16"},
    {"bh": 8, "s": 128, "d": 64, "dtype": "f32"},
    {"bh": 32, "s": 2048, "d": 128, "dtype": "f32"},
    {"bh": 1, "s": 32768, "d": 128, "dtype": "f32"},
]
MAX_HEAD_DIM = 128  # CUDA kernels size their per-lane and shared arrays for it
# The running max before any key: finite, so exp(m - m_new) is 0 (never inf - inf = NaN) for
# a warp or split that saw no key.
NO_SCORE = "-1e30f"
COMBINE_THREADS = 128


def _head_dim_fits(sizes: Sizes) -> str | None:
    return None if sizes["d"] <= MAX_HEAD_DIM else f"head dimension above {MAX_HEAD_DIM}"


def _three_pass_code(dtype: str, block: int, scores_in: str, score_by: str, restrict: bool) -> str:
    ctype = CUDA_TYPES[dtype]
    r = "__restrict__ " if restrict else ""
    shared = scores_in == "shared"
    buffer_param = "" if shared else f"float* {r}scores_buf, "
    scores = (
        "    extern __shared__ float scores[];  // seq_len floats\n"
        if shared
        else "    float* scores = scores_buf + (size_t)b * seq_len;\n"
    )
    if score_by == "thread":
        pass1 = f"""    // pass 1: a thread per key, each reading its own K row (a warp's loads head_dim elements apart)
    float mx = {NO_SCORE};
    for (int j = threadIdx.x; j < seq_len; j += BLOCK) {{
        const {ctype}* krow = kb + (size_t)j * head_dim;
        float s = 0.0f;
        for (int i = 0; i < head_dim; i++) s += qs[i] * {cuda_load_as_float(dtype, "krow[i]")};
        scores[j] = s;
        mx = fmaxf(mx, s);
    }}
"""
    else:
        pass1 = f"""    // pass 1: a warp per key, lanes along the row (coalesced), the dot product summed by shuffles
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float mx = {NO_SCORE};
    for (int j = warp; j < seq_len; j += BLOCK / 32) {{
        const {ctype}* krow = kb + (size_t)j * head_dim;
        float s = 0.0f;
        for (int i = lane; i < head_dim; i += 32) s += qs[i] * {cuda_load_as_float(dtype, "krow[i]")};
        s = warp_sum(s);
        if (lane == 0) scores[j] = s;
        mx = fmaxf(mx, s);
    }}
"""
    return f"""{cuda_prelude(dtype, {"BLOCK": block, "MAX_D": MAX_HEAD_DIM})}{cuda_reductions(("max", "sum"), "shuffle")}
// a block per (batch, head): scores, then softmax in place, then the weighted sum of V
extern "C" __global__ void decode_attention(const {ctype}* {r}q, const {ctype}* {r}k, const {ctype}* {r}v, {ctype}* {r}out, {buffer_param}int seq_len, int head_dim, float scale) {{
    __shared__ float qs[MAX_D];
    __shared__ float part[BLOCK];
    int b = blockIdx.x;
{scores}    const {ctype}* kb = k + (size_t)b * seq_len * head_dim;
    const {ctype}* vb = v + (size_t)b * seq_len * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += BLOCK) qs[i] = {cuda_load_as_float(dtype, "q[b * head_dim + i]")} * scale;
    __syncthreads();
{pass1}    mx = block_max(mx);
    // pass 2: exponentials in place, and their sum
    float sum = 0.0f;
    for (int j = threadIdx.x; j < seq_len; j += BLOCK) {{
        float e = __expf(scores[j] - mx);
        scores[j] = e;
        sum += e;
    }}
    sum = block_sum(sum);
    // pass 3: BLOCK / head_dim slices of the keys, a thread per (slice, dimension): V rows read coalesced
    int dim = threadIdx.x % head_dim, slice = threadIdx.x / head_dim, slices = BLOCK / head_dim;
    float acc = 0.0f;
    for (int j = slice; j < seq_len; j += slices) acc += scores[j] * {cuda_load_as_float(dtype, "vb[(size_t)j * head_dim + dim]")};
    part[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x < head_dim) {{
        float o = 0.0f;
        for (int t = 0; t < slices; t++) o += part[t * head_dim + threadIdx.x];
        out[b * head_dim + threadIdx.x] = {cuda_store_from_float(dtype, "o / sum")};
    }}
}}
"""


def _three_pass_variant(dtype: str, p: dict[str, Any]) -> Variant:
    shared = p["scores"] == "shared"

    def launches(s: Sizes) -> list[Launch]:
        buffer = () if shared else ("scores",)
        args = ("q", "k", "v", "out", *buffer, i32(s["s"]), i32(s["d"]), f32(s["d"] ** -0.5))
        return [Launch("decode_attention", grid1(s["bh"]), args, block1(p["block"]), shared_bytes=4 * s["s"] if shared else 0)]

    def scratch(s: Sizes) -> dict[str, TensorSpec]:
        return {} if shared else {"scores": TensorSpec((s["bh"], s["s"]), "f32")}

    slices_fit: Check = lambda s: None if p["block"] % s["d"] == 0 else f"block {p['block']} not a multiple of the head dimension"
    # the scores plus ~3 KB of static shared memory must fit one block
    scores_fit = at_most("s", (MAX_SHARED_BYTES - 8 * 1024) // 4, "scores do not fit in shared memory") if shared else (lambda s: None)
    return Variant(
        "cuda-three-pass",
        "cuda",
        {"dtype": dtype, **p},
        _three_pass_code(dtype, p["block"], p["scores"], p["score_by"], p["restrict"]),
        launches,
        scratch=scratch,
        unsupported=unsupported(dtype, _head_dim_fits, slices_fit, scores_fit),
    )


def _row_pieces(dtype: str, vec: int, row: str, statement: str, pad: str) -> str:
    """`statement` (in i, the lane's register index, and x, the element as float) for each element the lane owns of `row`."""
    if vec == 1:
        element = cuda_load_as_float(dtype, f"{row}[col]")
        load, body = "", statement.format(i="c", x=element)
    else:
        load = f"Pack pk = *reinterpret_cast<const Pack*>({row} + col);\n{pad}        "
        body = f"#pragma unroll\n{pad}        for (int e = 0; e < VEC; e++) {statement.format(i='c * VEC + e', x=cuda_load_as_float(dtype, 'pk.v[e]'))}"
    return f"""{pad}#pragma unroll
{pad}for (int c = 0; c < CHUNKS; c++) {{
{pad}    const int col = (c * GROUP + member) * VEC;
{pad}    if (col < d) {{
{pad}        {load}{body}
{pad}    }}
{pad}}}
"""


def _attend_device(dtype: str, passes: int, vec: int) -> str:
    """attend(): one lane's (max, sum, weighted V) over keys [begin, end) of one head."""
    ctype = CUDA_TYPES[dtype]
    pad = "        "
    score = f"""        const int j = j0 + lane / GROUP;
        const bool valid = j < end;
        float s = 0.0f;
        if (valid) {{
            const {ctype}* krow = k + (size_t)j * d;
{_row_pieces(dtype, vec, "krow", "s += qr[{i}] * {x};", pad + "    ")}        }}
        #pragma unroll
        for (int off = GROUP / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
"""
    # every lane of a warp runs the same iterations, so the group shuffles stay converged
    keys = "    for (int j0 = begin + (threadIdx.x / 32) * (32 / GROUP); j0 < end; j0 += WARPS * (32 / GROUP)) {\n"

    def weigh(statement: str) -> str:
        return f"""            const {ctype}* vrow = v + (size_t)j * d;
{_row_pieces(dtype, vec, "vrow", statement, pad + "    ")}"""

    if passes == 1:
        loops = f"""{keys}{score}        if (valid) {{
            const float m_new = fmaxf(m, s);
            const float correction = __expf(m - m_new), p = __expf(s - m_new);
            l = l * correction + p;
{weigh("acc[{i}] = acc[{i}] * correction + p * {x};")}            m = m_new;
        }}
    }}
"""
    else:
        loops = f"""    // pass 1 reads K for the running max only
{keys}{score}        if (valid) m = fmaxf(m, s);
    }}
    // pass 2 reads K again with V: every weight is exp(s - m) with the final m, so nothing is rescaled
{keys}{score}        if (valid) {{
            const float p = __expf(s - m);
            l += p;
{weigh("acc[{i}] += p * {x};")}        }}
    }}
"""
    return f"""
// This lane's part of softmax(q Kᵀ) V over keys [begin, end): max m, sum l, and acc = Σ exp(s - m) v over
// the columns (c * GROUP + member) * VEC + e it owns; lanes past the head dimension hold zeros.
__device__ __forceinline__ void attend(const {ctype}* RESTRICT q, const {ctype}* RESTRICT k, const {ctype}* RESTRICT v, int begin, int end, int d,
                                       float scale, float& m, float& l, float* acc) {{
    const int lane = threadIdx.x % 32, member = lane % GROUP;
    float qr[CHUNKS * VEC];
    #pragma unroll
    for (int i = 0; i < CHUNKS * VEC; i++) {{
        qr[i] = 0.0f;
        acc[i] = 0.0f;
    }}
{_row_pieces(dtype, vec, "q", "qr[{i}] = {x} * scale;", "    ")}    m = {NO_SCORE};
    l = 0.0f;
{loops}}}

// Folds the lanes into per-warp (wm, wl, wacc): the teams of a warp by shuffles, then to shared memory.
__device__ __forceinline__ void merge_warps(float m, float l, float* acc, int d, float* wm, float* wl, float (*wacc)[MAX_D]) {{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, member = lane % GROUP;
    #pragma unroll
    for (int off = GROUP; off < 32; off <<= 1) {{
        const float m_other = __shfl_xor_sync(0xffffffffu, m, off), l_other = __shfl_xor_sync(0xffffffffu, l, off);
        const float m_new = fmaxf(m, m_other), mine = __expf(m - m_new), theirs = __expf(m_other - m_new);
        l = l * mine + l_other * theirs;
        #pragma unroll
        for (int i = 0; i < CHUNKS * VEC; i++) acc[i] = acc[i] * mine + __shfl_xor_sync(0xffffffffu, acc[i], off) * theirs;
        m = m_new;
    }}
    if (lane == 0) {{
        wm[warp] = m;
        wl[warp] = l;
    }}
    if (lane < GROUP) {{
        #pragma unroll
        for (int c = 0; c < CHUNKS; c++)
            #pragma unroll
            for (int e = 0; e < VEC; e++)
                if ((c * GROUP + member) * VEC + e < d) wacc[warp][(c * GROUP + member) * VEC + e] = acc[c * VEC + e];
    }}
    __syncthreads();
}}
"""


def _block_result(store: str) -> str:
    """The block's max M and sum L from the warps', then `store` (in i and o, column i's weighted sum) per column."""
    return f"""    float M = {NO_SCORE}, L = 0.0f;
    for (int w = 0; w < WARPS; w++) M = fmaxf(M, wm[w]);
    for (int w = 0; w < WARPS; w++) L += wl[w] * __expf(wm[w] - M);
    for (int i = threadIdx.x; i < d; i += WARPS * 32) {{
        float o = 0.0f;
        for (int w = 0; w < WARPS; w++) o += wacc[w][i] * __expf(wm[w] - M);
        {store}
    }}
"""


def _warp_group_prelude(dtype: str, warps: int, group: int, vec: int, restrict: bool) -> str:
    chunks = max(1, MAX_HEAD_DIM // (group * vec))
    defines = {"WARPS": warps, "GROUP": group, "VEC": vec, "CHUNKS": chunks, "MAX_D": MAX_HEAD_DIM}
    pack = pack_struct(dtype, vec) if vec > 1 else ""
    return f"{cuda_prelude(dtype, defines)}#define RESTRICT{' __restrict__' if restrict else ''}\n{pack}"


def _online_code(dtype: str, warps: int, group: int, vec: int, passes: int, restrict: bool) -> str:
    ctype = CUDA_TYPES[dtype]
    return f"""{_warp_group_prelude(dtype, warps, group, vec, restrict)}{_attend_device(dtype, passes, vec)}
// a block per (batch, head); GROUP lanes per key, 32 / GROUP keys per warp and step
extern "C" __global__ void __launch_bounds__(WARPS * 32) decode_attention(const {ctype}* RESTRICT q, const {ctype}* RESTRICT k, const {ctype}* RESTRICT v,
                                                                          {ctype}* RESTRICT out, int S, int d, float scale) {{
    __shared__ float wm[WARPS], wl[WARPS], wacc[WARPS][MAX_D];
    const size_t b = blockIdx.x;
    float m, l, acc[CHUNKS * VEC];
    attend(q + b * d, k + b * S * d, v + b * S * d, 0, S, d, scale, m, l, acc);
    merge_warps(m, l, acc, d, wm, wl, wacc);
{_block_result(f"out[b * d + i] = {cuda_store_from_float(dtype, 'o / L')};")}}}
"""


def _split_code(dtype: str, warps: int, group: int, vec: int) -> str:
    ctype = CUDA_TYPES[dtype]
    return f"""{_warp_group_prelude(dtype, warps, group, vec, True)}{_attend_device(dtype, 1, vec)}
// flash-decoding: gridDim.x splits of the keys per head, each leaving its (max, sum, weighted sum)
extern "C" __global__ void __launch_bounds__(WARPS * 32) decode_split(const {ctype}* RESTRICT q, const {ctype}* RESTRICT k, const {ctype}* RESTRICT v,
                                                                      float* part_m, float* part_l, float* part_acc, int S, int d, float scale) {{
    __shared__ float wm[WARPS], wl[WARPS], wacc[WARPS][MAX_D];
    const size_t b = blockIdx.y;
    const int chunk = (S + gridDim.x - 1) / gridDim.x;
    const int begin = blockIdx.x * chunk, end = min(S, begin + chunk);
    float m, l, acc[CHUNKS * VEC];
    attend(q + b * d, k + b * S * d, v + b * S * d, begin, end, d, scale, m, l, acc);
    merge_warps(m, l, acc, d, wm, wl, wacc);
    const size_t slot = b * gridDim.x + blockIdx.x;
{_block_result("part_acc[slot * d + i] = o;")}    if (threadIdx.x == 0) {{
        part_m[slot] = M;
        part_l[slot] = L;
    }}
}}

// a block per head rescales the splits' partials to their common max and adds them up
extern "C" __global__ void decode_combine(const float* part_m, const float* part_l, const float* part_acc, {ctype}* out, int splits, int d) {{
    const size_t b = blockIdx.x;
    const float* pm = part_m + b * splits;
    const float* pl = part_l + b * splits;
    float M = {NO_SCORE}, L = 0.0f;
    for (int s = 0; s < splits; s++) M = fmaxf(M, pm[s]);
    for (int s = 0; s < splits; s++) L += pl[s] * __expf(pm[s] - M);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {{
        float o = 0.0f;
        for (int s = 0; s < splits; s++) o += part_acc[(b * splits + s) * d + i] * __expf(pm[s] - M);
        out[b * d + i] = {cuda_store_from_float(dtype, "o / L")};
    }}
}}
"""


def _vec_of(dtype: str, vector: str) -> int:
    return vector_width(dtype) if vector == "16B" else 1


def _decode_args(s: Sizes) -> tuple[Any, ...]:
    return (i32(s["s"]), i32(s["d"]), f32(s["d"] ** -0.5))


def _online_variant(dtype: str, p: dict[str, Any]) -> Variant:
    code = _online_code(dtype, p["warps"], p["group"], _vec_of(dtype, p["vector"]), p["passes"], p["restrict"])

    def launches(s: Sizes) -> list[Launch]:
        return [Launch("decode_attention", grid1(s["bh"]), ("q", "k", "v", "out", *_decode_args(s)), block1(32 * p["warps"]))]

    return Variant("cuda-online", "cuda", {"dtype": dtype, **p}, code, launches, unsupported=unsupported(dtype, _head_dim_fits))


def _partials(s: Sizes, splits: int) -> dict[str, TensorSpec]:
    return {
        "part_m": TensorSpec((s["bh"], splits), "f32"),
        "part_l": TensorSpec((s["bh"], splits), "f32"),
        "part_acc": TensorSpec((s["bh"], splits, s["d"]), "f32"),
    }


def _split_variant(dtype: str, p: dict[str, Any]) -> Variant:
    code = _split_code(dtype, p["warps"], p["group"], _vec_of(dtype, p["vector"]))

    def launches(s: Sizes) -> list[Launch]:
        return [
            Launch(
                "decode_split",
                (p["splits"], s["bh"], 1),
                ("q", "k", "v", "part_m", "part_l", "part_acc", *_decode_args(s)),
                block1(32 * p["warps"]),
            ),
            Launch(
                "decode_combine",
                grid1(s["bh"]),
                ("part_m", "part_l", "part_acc", "out", i32(p["splits"]), i32(s["d"])),
                block1(COMBINE_THREADS),
            ),
        ]

    return Variant(
        "cuda-split",
        "cuda",
        {"dtype": dtype, **p},
        code,
        launches,
        scratch=lambda s: _partials(s, p["splits"]),
        unsupported=unsupported(dtype, _head_dim_fits),
    )


TRITON_ATTEND = """

@triton.jit
def _attend(q, k_ptr, v_ptr, begin, end, D: tl.constexpr, BLOCK_S: tl.constexpr):
    # running max, sum and sum of exp(s - max) * v over keys [begin, end) of one head
    cols = tl.arange(0, D)
    m_i = tl.full((), float("-inf"), tl.float32)
    l_i = tl.zeros((), tl.float32)
    acc = tl.zeros((D,), tl.float32)
    for start in range(begin, end, BLOCK_S):
        keys = start + tl.arange(0, BLOCK_S)
        valid = keys < end
        k = tl.load(k_ptr + keys[:, None] * D + cols[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.where(valid, tl.sum(k * q[None, :], 1), float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        v = tl.load(v_ptr + keys[:, None] * D + cols[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m_i = m_new
    return m_i, l_i, acc
"""

DECODE_TRITON_LOOP = f"""{TRITON_HEADER}{TRITON_ATTEND}

@triton.jit
def decode_attention(q_ptr, k_ptr, v_ptr, out_ptr, S, scale, D: tl.constexpr, BLOCK_S: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, D)
    q = tl.load(q_ptr + b * D + cols).to(tl.float32) * scale
    m_i, l_i, acc = _attend(q, k_ptr + b * S * D, v_ptr + b * S * D, 0, S, D, BLOCK_S)
    tl.store(out_ptr + b * D + cols, (acc / l_i).to(out_ptr.dtype.element_ty))
"""

DECODE_TRITON_SPLIT = f"""{TRITON_HEADER}{TRITON_ATTEND}

@triton.jit
def decode_split(q_ptr, k_ptr, v_ptr, part_m_ptr, part_l_ptr, part_acc_ptr, S, chunk, scale, D: tl.constexpr, BLOCK_S: tl.constexpr,
                 SPLITS: tl.constexpr):
    split = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    cols = tl.arange(0, D)
    q = tl.load(q_ptr + b * D + cols).to(tl.float32) * scale
    begin = split * chunk
    end = tl.minimum(begin + chunk, S)
    m_i, l_i, acc = _attend(q, k_ptr + b * S * D, v_ptr + b * S * D, begin, end, D, BLOCK_S)
    slot = b * SPLITS + split
    tl.store(part_m_ptr + slot, m_i)
    tl.store(part_l_ptr + slot, l_i)
    tl.store(part_acc_ptr + slot * D + cols, acc)


@triton.jit
def decode_combine(part_m_ptr, part_l_ptr, part_acc_ptr, out_ptr, D: tl.constexpr, SPLITS: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    slots = b * SPLITS + tl.arange(0, SPLITS)
    cols = tl.arange(0, D)
    m = tl.load(part_m_ptr + slots)
    weight = tl.exp(m - tl.max(m, 0))  # 0 for a split that saw no key (m = -inf)
    l_total = tl.sum(tl.load(part_l_ptr + slots) * weight, 0)
    acc = tl.load(part_acc_ptr + slots[:, None] * D + cols[None, :])
    out = tl.sum(acc * weight[:, None], 0) / l_total
    tl.store(out_ptr + b * D + cols, out.to(out_ptr.dtype.element_ty))
"""


def _triton_loop_variant(dtype: str, p: dict[str, Any]) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        return [
            Launch(
                "decode_attention",
                grid1(s["bh"]),
                ("q", "k", "v", "out", i32(s["s"]), f32(s["d"] ** -0.5)),
                constexprs={"D": s["d"], "BLOCK_S": p["BLOCK_S"]},
                num_warps=p["num_warps"],
            )
        ]

    return Variant("triton-loop", "triton", {"dtype": dtype, **p}, DECODE_TRITON_LOOP, launches, unsupported=unsupported(dtype))


def _triton_split_variant(dtype: str, p: dict[str, Any]) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        tiles = {"D": s["d"], "SPLITS": p["splits"]}
        args = ("q", "k", "v", "part_m", "part_l", "part_acc", i32(s["s"]), i32(cdiv(s["s"], p["splits"])), f32(s["d"] ** -0.5))
        return [
            Launch(
                "decode_split", (p["splits"], s["bh"], 1), args, constexprs={**tiles, "BLOCK_S": p["BLOCK_S"]}, num_warps=p["num_warps"]
            ),
            Launch("decode_combine", grid1(s["bh"]), ("part_m", "part_l", "part_acc", "out"), constexprs=tiles, num_warps=4),
        ]

    return Variant(
        "triton-split",
        "triton",
        {"dtype": dtype, **p},
        DECODE_TRITON_SPLIT,
        launches,
        scratch=lambda s: _partials(s, p["splits"]),
        unsupported=unsupported(dtype),
    )


def decode_variants() -> Iterable[Variant]:
    for dtype in ("f16", "f32"):
        full = dtype == "f16"  # fp32 gets the stars' centres and the knobs that matter most
        three = {"block": 256, "scores": "shared", "score_by": "warp", "restrict": True}
        settings = (
            around(three, block=[128, 512], scores=["global"], score_by=["thread"], restrict=[False])
            + [{**three, "scores": "global", "score_by": "thread"}]
            if full
            else around(three, scores=["global"], score_by=["thread"])
        )
        for p in settings:
            yield _three_pass_variant(dtype, p)
        online = {"warps": 4, "group": 8, "vector": "16B", "passes": 1, "restrict": True}
        settings = (
            around(online, warps=[1, 8], group=[16, 32], vector=["scalar"], passes=[2], restrict=[False])
            + [{**online, "group": 32, "vector": "scalar"}]
            if full
            else around(online, group=[32], vector=["scalar"], passes=[2])
        )
        for p in settings:
            yield _online_variant(dtype, p)
        split = {"splits": 16, "warps": 4, "group": 8, "vector": "16B"}
        settings = around(split, splits=[4, 8, 32, 64], warps=[8], vector=["scalar"]) if full else around(split, splits=[4, 64])
        for p in settings:
            yield _split_variant(dtype, p)
        loop = [(32, 2), (64, 4), (128, 4), (256, 8), (128, 8)] if full else [(64, 4), (256, 8)]
        for block_s, warps in loop:
            yield _triton_loop_variant(dtype, {"BLOCK_S": block_s, "num_warps": warps})
        split = {"splits": 16, "BLOCK_S": 64, "num_warps": 4}
        settings = around(split, splits=[4, 64], BLOCK_S=[128]) if full else around(split, splits=[64])
        for p in settings:
            yield _triton_split_variant(dtype, p)


def _decode_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    # as one batch of bh heads with a single query each: SDPA's fused kernels take 4D inputs
    q, k, v = inputs["q"][None, :, None], inputs["k"][None], inputs["v"][None]
    return {"out": torch.nn.functional.scaled_dot_product_attention(q, k, v)[0, :, 0]}


DECODE = Op(
    name="decode_attention",
    bound="memory",
    sizes=DECODE_SIZES,
    inputs=lambda s: {
        "q": TensorSpec((s["bh"], s["d"]), s["dtype"]),
        "k": TensorSpec((s["bh"], s["s"], s["d"]), s["dtype"]),
        "v": TensorSpec((s["bh"], s["s"], s["d"]), s["dtype"]),
    },
    outputs=lambda s: {"out": TensorSpec((s["bh"], s["d"]), s["dtype"])},
    reference=_decode_reference,
    reference_code="def reference(q, k, v):\n    return torch.nn.functional.scaled_dot_product_attention(q[None, :, None], k[None], v[None])[0, :, 0]\n",
    variants=decode_variants,
    # Kernels keep p in fp32 and use __expf / ex2.approx; the reference (flash or
    # memory-efficient SDPA) rounds p to the input precision before P·V and sums in its own order.
    tolerance={"f32": 2e-4, "f16": 1e-2},
)

# --- adamw_step ------------------------------------------------------------------------------------

ADAMW_SIZES = [{"n": 4096}, {"n": 99_999}, {"n": 1 << 20}, {"n": 1 << 23}, {"n": 1 << 25}]
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, STEP = 1e-3, 0.9, 0.999, 1e-8, 1e-2, 10
STEP_SIZE = LR / (1 - BETA1**STEP)
INV_BC2_SQRT = 1 / math.sqrt(1 - BETA2**STEP)
HYPER = (f32(LR), f32(BETA1), f32(BETA2), f32(EPS), f32(WEIGHT_DECAY))
ADAMW_INPUTS = ("p", "g", "m", "v")
ADAMW_OUTPUTS = ("p_out", "m_out", "v_out")
ADAMW_POINTERS = ADAMW_INPUTS + ADAMW_OUTPUTS


def _adamw_device(fast_math: bool) -> str:
    divide = "__fdividef(m_new, denom)" if fast_math else "m_new / denom"
    return f"""{CUDA_HEADER}
// one parameter's AdamW update (decoupled weight decay, bias-corrected moments)
__device__ __forceinline__ void adamw(float p, float g, float m, float v, float& p_new, float& m_new, float& v_new, float lr, float beta1,
                                      float beta2, float eps, float weight_decay, float step_size, float inv_bc2_sqrt) {{
    m_new = beta1 * m + (1.0f - beta1) * g;
    v_new = beta2 * v + (1.0f - beta2) * g * g;
    float denom = sqrtf(v_new) * inv_bc2_sqrt + eps;
    p_new = p * (1.0f - lr * weight_decay) - step_size * {divide};
}}
#define HYPER lr, beta1, beta2, eps, weight_decay, step_size, inv_bc2_sqrt
"""


def _bias_params(bias: str) -> str:
    return "float step_size, float inv_bc2_sqrt" if bias == "host" else "int step"


def _bias_prologue(bias: str, fast_math: bool) -> str:
    if bias == "host":
        return ""
    if fast_math:
        return """    // bias corrections from the step count, recomputed by every thread
    float step_size = __fdividef(lr, 1.0f - powf(beta1, (float)step));
    float inv_bc2_sqrt = rsqrtf(1.0f - powf(beta2, (float)step));
"""
    return """    // bias corrections from the step count, recomputed by every thread
    float step_size = lr / (1.0f - powf(beta1, (float)step));
    float inv_bc2_sqrt = 1.0f / sqrtf(1.0f - powf(beta2, (float)step));
"""


def _adamw_signature(restrict: bool, bias: str) -> str:
    pointers = ", ".join(cuda_pointer("float", name, restrict, name in ADAMW_INPUTS) for name in ADAMW_POINTERS)
    return f'extern "C" __global__ void adamw_step({pointers}, int n, float lr, float beta1, float beta2, float eps, float weight_decay, {_bias_params(bias)})'


def _scalar_step(index: str, pad: str = "    ") -> str:
    """A block updating parameter `index`, its braces at indentation `pad`."""
    return f"""{{
{pad}    float pn, mn, vn;
{pad}    adamw(p[{index}], g[{index}], m[{index}], v[{index}], pn, mn, vn, HYPER);
{pad}    p_out[{index}] = pn;
{pad}    m_out[{index}] = mn;
{pad}    v_out[{index}] = vn;
{pad}}}"""


def _elementwise_code(p: dict[str, Any]) -> str:
    if p["loop"] == "grid_stride":
        body = f"""    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {_scalar_step("i")}
"""
    elif p["items"] == 1:
        body = f"""    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {_scalar_step("idx")}
"""
    else:
        first, offset = (
            ("blockIdx.x * blockDim.x * ITEMS + threadIdx.x", "k * blockDim.x")
            if p["layout"] == "strided"
            else ("(blockIdx.x * blockDim.x + threadIdx.x) * ITEMS", "k")
        )
        body = f"""    int base = {first};
    #pragma unroll
    for (int k = 0; k < ITEMS; k++) {{
        int i = base + {offset};
        if (i < n) {_scalar_step("i", "        ")}
    }}
"""
    items = f"#define ITEMS {p['items']}\n" if p["items"] > 1 else ""
    return f"""{_adamw_device(p["fast_math"])}{items}
{_adamw_signature(p["restrict"], p["bias"])} {{
{_bias_prologue(p["bias"], p["fast_math"])}{body}}}
"""


def _float4_code(p: dict[str, Any]) -> str:
    views = "\n".join(
        f"    {cuda_pointer('float4', name + '4', p['restrict'], name in ADAMW_INPUTS)} = "
        f"reinterpret_cast<{'const ' if name in ADAMW_INPUTS else ''}float4*>({name});"
        for name in ADAMW_POINTERS
    )

    def step(pad: str) -> str:
        lanes = "".join(f"{pad}    adamw(pv.{c}, gv.{c}, mv.{c}, vv.{c}, pn.{c}, mn.{c}, vn.{c}, HYPER);\n" for c in "xyzw")
        return f"""{{
{pad}    float4 pv = p4[j], gv = g4[j], mv = m4[j], vv = v4[j], pn, mn, vn;
{lanes}{pad}    p_out4[j] = pn;
{pad}    m_out4[j] = mn;
{pad}    v_out4[j] = vn;
{pad}}}"""

    if p["loop"] == "grid_stride":
        body = f"    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n4; j += blockDim.x * gridDim.x) {step('    ')}\n"
    else:
        body = f"""    int base = blockIdx.x * blockDim.x * VECS + threadIdx.x;
    #pragma unroll
    for (int k = 0; k < VECS; k++) {{
        int j = base + k * blockDim.x;
        if (j < n4) {step("        ")}
    }}
"""
    vecs = f"#define VECS {p['vecs']}\n" if p["loop"] == "one_pass" else ""
    return f"""{_adamw_device(p["fast_math"])}{vecs}
// float4 loads and stores; the n % 4 parameters past the last float4 are done by block 0
{_adamw_signature(p["restrict"], "host")} {{
    int n4 = n / 4;
{views}
{body}    int tail = n4 * 4 + threadIdx.x;
    if (blockIdx.x == 0 && tail < n) {_scalar_step("tail")}
}}
"""


def _fused_launch(p: dict[str, Any], per_thread: int, vector: int) -> Callable[[Sizes], list[Launch]]:
    """A launch over n // vector vectors (at least one block), per_thread of them per thread unless grid-stride."""

    def launches(s: Sizes) -> list[Launch]:
        units = max(1, s["n"] // vector)
        blocks = (
            resident_blocks(cdiv(units, p["block"]), THREADS_PER_SM // p["block"])
            if p["loop"] == "grid_stride"
            else cdiv(units, p["block"] * per_thread)
        )
        bias = (f32(STEP_SIZE), f32(INV_BC2_SQRT)) if p["bias"] == "host" else (i32(STEP),)
        return [Launch("adamw_step", grid1(blocks), (*ADAMW_POINTERS, i32(s["n"]), *HYPER, *bias), block1(p["block"]))]

    return launches


def _elementwise_variant(p: dict[str, Any]) -> Variant:
    return Variant("cuda-elementwise", "cuda", p, _elementwise_code(p), _fused_launch(p, p["items"], 1))


def _float4_variant(p: dict[str, Any]) -> Variant:
    return Variant("cuda-float4", "cuda", p, _float4_code(p), _fused_launch({**p, "bias": "host"}, p["vecs"], 4))


def _unfused_code(restrict: bool) -> str:
    r = "__restrict__ " if restrict else ""
    index = "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n)"
    return f"""// one small kernel per line of the update, as written without fusion
extern "C" __global__ void scale(const float* {r}x, float* {r}y, float a, int n) {{
    {index} y[i] = a * x[i];
}}

extern "C" __global__ void axpby(const float* {r}x, const float* {r}y, float* {r}z, float a, float b, int n) {{
    {index} z[i] = a * x[i] + b * y[i];
}}

extern "C" __global__ void axpby_square(const float* {r}x, const float* {r}y, float* {r}z, float a, float b, int n) {{
    {index} z[i] = a * x[i] + b * y[i] * y[i];
}}

extern "C" __global__ void sqrt_add(const float* {r}x, float* {r}y, float a, float eps, int n) {{
    {index} y[i] = sqrtf(x[i]) * a + eps;
}}

extern "C" __global__ void divide(const float* {r}x, const float* {r}y, float* {r}z, int n) {{
    {index} z[i] = x[i] / y[i];
}}

extern "C" __global__ void addcdiv(const float* {r}x, const float* {r}num, const float* {r}den, float* {r}z, float value, int n) {{
    {index} z[i] = x[i] + value * num[i] / den[i];
}}
"""


# Which kernels, on which buffers, in which order: a launch per line of the math, or torch's
# own split (decay, two moments, denominator, addcdiv).
UNFUSED_CHAINS: dict[str, list[tuple[str, tuple[str, ...], tuple[float, ...]]]] = {
    "per_line": [
        ("scale", ("p", "decayed"), (1 - LR * WEIGHT_DECAY,)),
        ("axpby", ("m", "g", "m_out"), (BETA1, 1 - BETA1)),
        ("axpby_square", ("v", "g", "v_out"), (BETA2, 1 - BETA2)),
        ("scale", ("m_out", "m_hat"), (1 / (1 - BETA1**STEP),)),
        ("scale", ("v_out", "v_hat"), (1 / (1 - BETA2**STEP),)),
        ("sqrt_add", ("v_hat", "denom"), (1.0, EPS)),
        ("divide", ("m_hat", "denom", "update"), ()),
        ("axpby", ("decayed", "update", "p_out"), (1.0, -LR)),
    ],
    "torch_like": [
        ("scale", ("p", "decayed"), (1 - LR * WEIGHT_DECAY,)),
        ("axpby", ("m", "g", "m_out"), (BETA1, 1 - BETA1)),
        ("axpby_square", ("v", "g", "v_out"), (BETA2, 1 - BETA2)),
        ("sqrt_add", ("v_out", "denom"), (INV_BC2_SQRT, EPS)),
        ("addcdiv", ("decayed", "m_out", "denom", "p_out"), (-STEP_SIZE,)),
    ],
}


def _unfused_variant(p: dict[str, Any]) -> Variant:
    chain = UNFUSED_CHAINS[p["chain"]]
    buffers = sorted({name for _, names, _ in chain for name in names} - set(ADAMW_POINTERS))

    def launches(s: Sizes) -> list[Launch]:
        grid = grid1(cdiv(s["n"], p["block"]))
        return [Launch(kernel, grid, (*names, *map(f32, values), i32(s["n"])), block1(p["block"])) for kernel, names, values in chain]

    return Variant(
        "cuda-unfused",
        "cuda",
        p,
        _unfused_code(p["restrict"]),
        launches,
        scratch=lambda s: {name: TensorSpec((s["n"],)) for name in buffers},
    )


ADAMW_TRITON = f"""{TRITON_HEADER}

@triton.jit
def adamw_step(p_ptr, g_ptr, m_ptr, v_ptr, p_out_ptr, m_out_ptr, v_out_ptr, n, lr, beta1, beta2, eps, weight_decay, step_size, inv_bc2_sqrt,
               BLOCK: tl.constexpr, PRECISE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask)
    g = tl.load(g_ptr + offs, mask=mask)
    m = beta1 * tl.load(m_ptr + offs, mask=mask) + (1 - beta1) * g
    v = beta2 * tl.load(v_ptr + offs, mask=mask) + (1 - beta2) * g * g
    if PRECISE:
        update = tl.div_rn(m, tl.sqrt_rn(v) * inv_bc2_sqrt + eps)
    else:
        update = m / (tl.sqrt(v) * inv_bc2_sqrt + eps)
    tl.store(p_out_ptr + offs, p * (1 - lr * weight_decay) - step_size * update, mask=mask)
    tl.store(m_out_ptr + offs, m, mask=mask)
    tl.store(v_out_ptr + offs, v, mask=mask)
"""


def _triton_adamw_variant(p: dict[str, Any]) -> Variant:
    def launches(s: Sizes) -> list[Launch]:
        return [
            Launch(
                "adamw_step",
                grid1(cdiv(s["n"], p["BLOCK"])),
                (*ADAMW_POINTERS, i32(s["n"]), *HYPER, f32(STEP_SIZE), f32(INV_BC2_SQRT)),
                constexprs={"BLOCK": p["BLOCK"], "PRECISE": p["precise"]},
                num_warps=p["num_warps"],
            )
        ]

    return Variant("triton-block", "triton", p, ADAMW_TRITON, launches)


def adamw_variants() -> Iterable[Variant]:
    base = {"block": 256, "items": 1, "layout": "strided", "loop": "one_pass", "fast_math": False, "bias": "host", "restrict": True}
    settings = around(
        base, block=[64, 128, 512, 1024], items=[2, 4, 8], loop=["grid_stride"], fast_math=[True], bias=["thread"], restrict=[False]
    )
    settings += [
        {**base, "items": 4, "layout": "contiguous"},
        {**base, "fast_math": True, "bias": "thread"},
        {**base, "loop": "grid_stride", "block": 1024},
    ]
    for p in settings:
        yield _elementwise_variant(p)
    vector = {"block": 256, "vecs": 1, "loop": "one_pass", "fast_math": False, "restrict": True}
    for p in around(vector, block=[128, 512], vecs=[2, 4], loop=["grid_stride"], fast_math=[True], restrict=[False]):
        yield _float4_variant(p)
    unfused = {"chain": "per_line", "block": 256, "restrict": True}
    for p in around(unfused, chain=["torch_like"], block=[1024], restrict=[False]) + [{**unfused, "chain": "torch_like", "block": 1024}]:
        yield _unfused_variant(p)
    triton = {"BLOCK": 1024, "num_warps": 4, "precise": False}
    for p in around(triton, BLOCK=[256, 2048, 4096, 8192], num_warps=[1, 2, 8, 16], precise=[True]):
        yield _triton_adamw_variant(p)


ADAMW_REFERENCE_CODE = """\
def reference(p, g, m, v, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2, step=10):
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    denom = v.sqrt() / math.sqrt(1 - beta2 ** step) + eps
    p = p * (1 - lr * weight_decay) - lr / (1 - beta1 ** step) * m / denom
    return p, m, v
"""


def _adamw_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    p, g, m, v = (inputs[name] for name in ADAMW_INPUTS)
    m = BETA1 * m + (1 - BETA1) * g
    v = BETA2 * v + (1 - BETA2) * g * g
    denom = v.sqrt() / math.sqrt(1 - BETA2**STEP) + EPS
    return {"p_out": p * (1 - LR * WEIGHT_DECAY) - STEP_SIZE * m / denom, "m_out": m, "v_out": v}


ADAMW = Op(
    name="adamw_step",
    bound="memory",
    sizes=ADAMW_SIZES,
    # v, a running mean of squares, is non-negative
    inputs=lambda s: {name: TensorSpec((s["n"],), "f32", "rand" if name == "v" else "randn") for name in ADAMW_INPUTS},
    outputs=lambda s: {name: TensorSpec((s["n"],)) for name in ADAMW_OUTPUTS},
    reference=_adamw_reference,
    reference_code=ADAMW_REFERENCE_CODE,
    variants=adamw_variants,
)

OPS = [DECODE, ADAMW]
