"""Binned scatters of fp32 values by int32 key: bucket_min (a keyed min) and weighted_histogram.

Neighbours of keyed_max, histogram and bincount, the operations the forecaster gets most
confidently wrong: what decides their speed is how many elements hit one address (16 buckets:
every warp collides; a million: almost never), which the code alone does not show.

- bucket_min: out[b] = min of values[i] (randn) over keys[i] == b (randint over `buckets`),
  +inf where no key is b; n 65536 to 16M, 16 to 1M buckets. Every variant fills out with +inf
  first (a launch of its own). A float atomicMin is done three ways ("atomic"): "int-order"
  (sign bit clear: atomicMin on the int bits; set, -0.0 included: atomicMax on the unsigned
  bits, where larger means more negative), "cas" (an atomicCAS loop that always swaps in
  fminf) and "cas-early-exit" (CAS only while v is below what is stored). Warp aggregation
  ("aggregate") groups a warp's equal keys with __match_any_sync and takes their min with 32
  shuffles ("shuffle") or with __reduce_min_sync on an order-preserving int ("reduce") before
  one atomic per group. CUDA: cuda-atomic (`int idx`, thread per element, size `N`; atomic,
  block, restrict), cuda-items (one pass, ITEMS per thread, strided so a warp's loads coalesce
  or a contiguous chunk per thread; items, coalesced), cuda-grid-stride (a resident grid loops
  with global atomics; aggregate, blocks_per_sm, restrict), cuda-shared-private (a block-private
  table in shared memory, then one global atomic per bucket per block, or per non-empty one;
  block, blocks_per_sm, aggregate, skip_empty; only when the buckets fit shared memory).
  Triton: triton-atomic (tl.atomic_min on the float pointer, or on its int32/uint32 views with
  the sign split written out; atomic, BLOCK, num_warps, sem) and triton-onehot-min (persistent
  programs keep a per-bucket min of [BUCKETS, BLOCK] compares in registers, no atomics until
  the end, no sort; BLOCK, programs_per_sm; few buckets only).
- weighted_histogram: hist = torch.bincount(idx, weights=w, minlength=bins) (w uniform [0, 1),
  idx randint over `bins`), n 65536 to 16M, 16 to 65536 bins; every variant clears hist first
  (a ZERO launch). CUDA: cuda-atomic (`int i`, one atomicAdd per element, size `N`; block,
  restrict), cuda-items (one pass, ITEMS per thread, loaded as int4/float4 or one by one;
  items, vector), cuda-grid-stride (warp-uniform loop over 16-byte or scalar packs with global
  atomics; vector, aggregate: __match_any_sync and a shuffle sum, one atomic per distinct bin
  of a warp; blocks_per_sm, restrict), cuda-shared-private (COPIES sub-histograms per block
  in shared memory, warp w adding into copy w % COPIES to cut same-address contention, laid
  out copy after copy or with a bin's copies side by side; then one atomicAdd per non-zero
  bin per block; copies, layout, block, blocks_per_sm, vector; only when they fit shared
  memory). Triton: triton-atomic (tl.atomic_add of the weights; BLOCK, num_warps, sem) and
  triton-onehot (a [BLOCK, BINS] one-hot tl.sum per block: compute instead of atomics, one
  pass or persistent programs that merge once; small BLOCK x BINS only).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import MAX_SHARED_BYTES, pack_struct
from workshop.corpus.ops.rowkit import FULL_MASK, POS_INF, TRITON_HEADER, divisible, next_pow2, resident_blocks, unsupported
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
    cuda_pointer,
    grid1,
    i32,
    product,
)


def _shared_fits(name: str, copies: int = 1):
    """A block-private table of `copies` x sizes[name] 4-byte entries must fit shared memory."""
    return lambda s: None if copies * s[name] * 4 <= MAX_SHARED_BYTES else f"{copies} x {name} tables do not fit shared memory"


def _resident_grid(block: int, per_sm: int, elements_per_thread: int = 1):
    """A grid-stride loop's grid: `per_sm` blocks per SM, never more than the work needs."""
    return lambda s: resident_blocks(cdiv(s["n"], block * elements_per_thread), per_sm)


# --- bucket_min ------------------------------------------------------------------------------------

# 16 buckets: a million same-address atomics each at n = 16M; 1M buckets: ~16 keys each (and
# 4 MB of minima, beyond any shared-memory table).
BUCKET_MIN_SIZES = [
    {"n": 65536, "buckets": 16},
    {"n": 1 << 20, "buckets": 4096},
    {"n": 1 << 24, "buckets": 16},
    {"n": 1 << 24, "buckets": 1024},
    {"n": 1 << 24, "buckets": 1 << 20},
]
FILL_BLOCK = 256
ONEHOT_MAX_BUCKETS = 16  # BUCKETS x BLOCK compares per step stay in registers

ATOMIC_MIN = {
    "int-order": """
// float min through integer atomics: with the sign bit clear floats order like ints; with it set
// (negatives and -0.0) they order in reverse as unsigned ints, so the larger one is the smaller float
__device__ __forceinline__ void atomic_min_float(float* address, float v) {
    if (__float_as_int(v) >= 0) atomicMin(reinterpret_cast<int*>(address), __float_as_int(v));
    else atomicMax(reinterpret_cast<unsigned int*>(address), __float_as_uint(v));
}
""",
    "cas": """
// CAS loop: always swaps in the smaller of the two, even when the stored value already wins
__device__ __forceinline__ void atomic_min_float(float* address, float v) {
    int* bits = reinterpret_cast<int*>(address);
    int old = *bits, assumed;
    do {
        assumed = old;
        old = atomicCAS(bits, assumed, __float_as_int(fminf(v, __int_as_float(assumed))));
    } while (old != assumed);
}
""",
    "cas-early-exit": """
// CAS loop that gives up as soon as the stored value is at most v (the stored value only shrinks)
__device__ __forceinline__ void atomic_min_float(float* address, float v) {
    int* bits = reinterpret_cast<int*>(address);
    int old = *bits;
    while (v < __int_as_float(old)) {
        int assumed = old;
        old = atomicCAS(bits, assumed, __float_as_int(v));
        if (old == assumed) break;
    }
}
""",
}

# How min_update(table, key, v) folds v into table[key]; every lane of the warp calls it, and a
# negative key (a lane past n) adds nothing.
MIN_UPDATE = {
    "none": "    if (key >= 0) atomic_min_float(table + key, v);",
    "shuffle": f"""    // lanes holding the same key take the min of their values; the first of them writes it
    unsigned peers = __match_any_sync({FULL_MASK}, key);
    float m = v;
    for (int src = 0; src < 32; ++src) {{
        float other = __shfl_sync({FULL_MASK}, v, src);
        if ((peers >> src) & 1u) m = fminf(m, other);
    }}
    if (key >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) atomic_min_float(table + key, m);""",
    "reduce": f"""    // an order-preserving int (negatives' magnitude bits flipped) lets the hardware reduce each group
    unsigned peers = __match_any_sync({FULL_MASK}, key);
    int ordered = __float_as_int(v);
    ordered = ordered >= 0 ? ordered : ordered ^ 0x7fffffff;
    int m = __reduce_min_sync(peers, ordered);
    m = m >= 0 ? m : m ^ 0x7fffffff;
    if (key >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) atomic_min_float(table + key, __int_as_float(m));""",
}

FILL_POS_INF = f"""
extern "C" __global__ void fill_pos_inf(float* out, int buckets) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < buckets) out[i] = {POS_INF};
}}
"""


def _min_prelude(atomic: str, aggregate: str | None = None) -> str:
    """Headers, the float atomicMin, the +inf fill kernel and (with `aggregate`) min_update."""
    update = (
        ""
        if aggregate is None
        else f"""
__device__ __forceinline__ void min_update(float* table, int key, float v) {{
{MIN_UPDATE[aggregate]}
}}
"""
    )
    return f"{CUDA_HEADER}{ATOMIC_MIN[atomic]}{FILL_POS_INF}{update}"


def _min_signature(size: str, restrict: bool = True, extra: str = "") -> str:
    return (
        f'extern "C" __global__ void bucket_min({cuda_pointer("float", "values", restrict)}, {cuda_pointer("int", "keys", restrict)}, '
        f"{cuda_pointer('float', 'out', restrict, False)}, int {size}{extra})"
    )


def _min_atomic(atomic: str, restrict: bool) -> str:
    return f"""{_min_prelude(atomic)}
{_min_signature("N", restrict)} {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) atomic_min_float(&out[keys[idx]], values[idx]);
}}
"""


def _min_items(items: int, coalesced: bool) -> str:
    """One pass: a block takes blockDim.x * ITEMS elements."""
    if coalesced:
        first, step = "blockIdx.x * blockDim.x * ITEMS + threadIdx.x", "k * blockDim.x"
    else:
        first, step = "(blockIdx.x * blockDim.x + threadIdx.x) * ITEMS", "k"
    return f"""{_min_prelude("int-order")}
#define ITEMS {items}

{_min_signature("n")} {{
    int first = {first};
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) {{
        int i = first + {step};
        if (i < n) atomic_min_float(&out[keys[i]], values[i]);
    }}
}}
"""


# `base` is the same for the whole block, so every lane of a warp runs the same iterations
# (min_update's __match_any_sync needs them all); lanes past n bring key -1.
MIN_GRID_STRIDE_LOOP = f"""    for (int base = blockIdx.x * blockDim.x; base < n; base += gridDim.x * blockDim.x) {{{{
        int i = base + threadIdx.x;
        min_update({{target}}, i < n ? keys[i] : -1, i < n ? values[i] : {POS_INF});
    }}}}
"""


def _min_grid_stride(aggregate: str, restrict: bool) -> str:
    return f"""{_min_prelude("int-order", aggregate)}
{_min_signature("n", restrict)} {{
{MIN_GRID_STRIDE_LOOP.format(target="out")}}}
"""


def _min_shared(aggregate: str, skip_empty: bool) -> str:
    merge = f"if (table[b] != {POS_INF}) atomic_min_float(&out[b], table[b]);" if skip_empty else "atomic_min_float(&out[b], table[b]);"
    return f"""{_min_prelude("int-order", aggregate)}
{_min_signature("n", extra=", int buckets")} {{
    extern __shared__ float table[];  // this block's minima
    for (int b = threadIdx.x; b < buckets; b += blockDim.x) table[b] = {POS_INF};
    __syncthreads();
{MIN_GRID_STRIDE_LOOP.format(target="table")}    __syncthreads();
    for (int b = threadIdx.x; b < buckets; b += blockDim.x) {merge}
}}
"""


MIN_TRITON_FILL = """

@triton.jit
def fill_pos_inf(out_ptr, buckets, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.full([BLOCK], float("inf"), tl.float32), mask=offsets < buckets)
"""

MIN_TRITON_UPDATE = {
    "float": '    tl.atomic_min(out_ptr + keys, vals, mask=mask, sem="{sem}")',
    "int-view": """    # sign bit clear: floats order like int32; set: in reverse as uint32, where larger is more negative
    bits = vals.to(tl.int32, bitcast=True)
    tl.atomic_min(out_ptr.to(tl.pointer_type(tl.int32)) + keys, bits, mask=mask & (bits >= 0), sem="{sem}")
    tl.atomic_max(out_ptr.to(tl.pointer_type(tl.uint32)) + keys, vals.to(tl.uint32, bitcast=True), mask=mask & (bits < 0), sem="{sem}")""",
}


def _min_triton_atomic(atomic: str, sem: str) -> str:
    return f"""{TRITON_HEADER}{MIN_TRITON_FILL}

@triton.jit
def bucket_min(values_ptr, keys_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    keys = tl.load(keys_ptr + offsets, mask=mask, other=0)
    vals = tl.load(values_ptr + offsets, mask=mask, other=0.0)
{MIN_TRITON_UPDATE[atomic].format(sem=sem)}
"""


MIN_TRITON_ONEHOT = f"""{TRITON_HEADER}{MIN_TRITON_FILL}

@triton.jit
def bucket_min(values_ptr, keys_ptr, out_ptr, n, buckets, BUCKETS: tl.constexpr, BLOCK: tl.constexpr):
    # each program walks every num_programs-th block and keeps one running min per bucket
    slots = tl.arange(0, BUCKETS)
    best = tl.full([BUCKETS], float("inf"), tl.float32)
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < n
        keys = tl.load(keys_ptr + offsets, mask=mask, other=-1)
        vals = tl.load(values_ptr + offsets, mask=mask, other=float("inf"))
        hit = slots[:, None] == keys[None, :]
        best = tl.minimum(best, tl.min(tl.where(hit, vals[None, :], float("inf")), axis=1))
    tl.atomic_min(out_ptr + slots, best, mask=(slots < buckets) & (best < float("inf")), sem="relaxed")
"""


def _min_args(sizes: Sizes, with_buckets: bool = False) -> tuple[Any, ...]:
    return ("values", "keys", "out", i32(sizes["n"])) + ((i32(sizes["buckets"]),) if with_buckets else ())


def _filled(language: str, sizes: Sizes, launch: Launch) -> list[Launch]:
    """Minima start from +inf, written by the variant's own fill kernel."""
    buckets = sizes["buckets"]
    if language == "cuda":
        fill = Launch("fill_pos_inf", grid1(cdiv(buckets, FILL_BLOCK)), ("out", i32(buckets)), block1(FILL_BLOCK))
    else:
        fill = Launch("fill_pos_inf", grid1(cdiv(buckets, 1024)), ("out", i32(buckets)), constexprs={"BLOCK": 1024}, num_warps=4)
    return [fill, launch]


def _min_cuda_variant(
    family: str,
    params: dict[str, Any],
    code: str,
    blocks,
    block: int,
    with_buckets: bool = False,
    shared: bool = False,
    unsupported_sizes=lambda s: None,
) -> Variant:
    """A one-kernel CUDA bucket_min after the fill: `blocks(sizes)` blocks of `block` threads."""

    def launches(s: Sizes) -> list[Launch]:
        launch = Launch(
            "bucket_min", grid1(blocks(s)), _min_args(s, with_buckets), block1(block), shared_bytes=s["buckets"] * 4 if shared else 0
        )
        return _filled("cuda", s, launch)

    return Variant(family, "cuda", params, code, launches, unsupported=unsupported_sizes)


def bucket_min_variants() -> Iterable[Variant]:
    atomic_settings = [
        *product({"atomic": list(ATOMIC_MIN), "block": [256], "restrict": [True, False]}),
        *product({"atomic": ["int-order"], "block": [128, 1024], "restrict": [False]}),
    ]
    for params in atomic_settings:
        block = params["block"]
        yield _min_cuda_variant(
            "cuda-atomic", params, _min_atomic(params["atomic"], params["restrict"]), lambda s, block=block: cdiv(s["n"], block), block
        )
    for params in product({"items": [4, 16], "coalesced": [True, False]}):
        items = params["items"]
        yield _min_cuda_variant(
            "cuda-items", params, _min_items(items, params["coalesced"]), lambda s, items=items: cdiv(s["n"], 256 * items), 256
        )
    for params in [
        *product({"aggregate": list(MIN_UPDATE), "blocks_per_sm": [2, 8], "restrict": [True]}),
        {"aggregate": "none", "blocks_per_sm": 2, "restrict": False},
    ]:
        yield _min_cuda_variant(
            "cuda-grid-stride",
            params,
            _min_grid_stride(params["aggregate"], params["restrict"]),
            _resident_grid(256, params["blocks_per_sm"]),
            256,
        )
    for params in [
        *product({"block": [256, 1024], "blocks_per_sm": [1, 4], "aggregate": ["none", "reduce"], "skip_empty": [True]}),
        {"block": 256, "blocks_per_sm": 4, "aggregate": "none", "skip_empty": False},
    ]:
        block = params["block"]
        yield _min_cuda_variant(
            "cuda-shared-private",
            params,
            _min_shared(params["aggregate"], params["skip_empty"]),
            _resident_grid(block, params["blocks_per_sm"]),
            block,
            with_buckets=True,
            shared=True,
            unsupported_sizes=_shared_fits("buckets"),
        )
    for params in around(
        {"atomic": "float", "BLOCK": 1024, "num_warps": 4, "sem": "relaxed"},
        atomic=["int-view"],
        BLOCK=[256, 4096],
        num_warps=[1, 8],
        sem=["acq_rel"],
    ):
        yield _min_triton_atomic_variant(params)
    yield _min_triton_atomic_variant({"atomic": "int-view", "BLOCK": 4096, "num_warps": 4, "sem": "relaxed"})
    for params in product({"BLOCK": [256, 1024], "programs_per_sm": [1, 4]}):
        yield _min_onehot_variant(params)


def _min_triton_atomic_variant(params: dict[str, Any]) -> Variant:
    block, warps = params["BLOCK"], params["num_warps"]
    return Variant(
        "triton-atomic",
        "triton",
        params,
        _min_triton_atomic(params["atomic"], params["sem"]),
        lambda s: _filled(
            "triton", s, Launch("bucket_min", grid1(cdiv(s["n"], block)), _min_args(s), constexprs={"BLOCK": block}, num_warps=warps)
        ),
    )


def _min_onehot_variant(params: dict[str, Any]) -> Variant:
    block, per_sm = params["BLOCK"], params["programs_per_sm"]

    def launches(s: Sizes) -> list[Launch]:
        constexprs = {"BUCKETS": next_pow2(s["buckets"]), "BLOCK": block}
        return _filled(
            "triton",
            s,
            Launch("bucket_min", grid1(_resident_grid(block, per_sm)(s)), _min_args(s, True), constexprs=constexprs, num_warps=4),
        )

    def too_many(s: Sizes) -> str | None:
        return (
            None if s["buckets"] <= ONEHOT_MAX_BUCKETS else f"buckets > {ONEHOT_MAX_BUCKETS}: BUCKETS x BLOCK compares leave the registers"
        )

    return Variant("triton-onehot-min", "triton", params, MIN_TRITON_ONEHOT, launches, unsupported=too_many)


def _bucket_min_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    values = inputs["values"]
    out = torch.full((sizes["buckets"],), float("inf"), dtype=values.dtype, device=values.device)
    return {"out": out.scatter_reduce_(0, inputs["keys"].long(), values, "amin")}


BUCKET_MIN = Op(
    name="bucket_min",
    bound="memory",
    sizes=BUCKET_MIN_SIZES,
    inputs=lambda s: {"values": TensorSpec((s["n"],)), "keys": TensorSpec((s["n"],), "i32", f"randint:0:{s['buckets']}")},
    outputs=lambda s: {"out": TensorSpec((s["buckets"],))},
    reference=_bucket_min_reference,
    reference_code=(
        "def reference(values, keys, buckets):\n"
        "    out = torch.full((buckets,), float('inf'), device=values.device)\n"
        "    return out.scatter_reduce_(0, keys.long(), values, 'amin')\n"
    ),
    variants=bucket_min_variants,
    tolerance={"f32": 0.0},  # a min is exact whatever the order
)

# --- weighted_histogram ------------------------------------------------------------------------------

# 16 bins: a million same-address float atomics each at n = 16M; 65536 bins: 256 KB of sums,
# beyond a block's shared memory.
WEIGHTED_SIZES = [
    {"n": 65536, "bins": 16},
    {"n": 1 << 22, "bins": 256},
    {"n": 1 << 24, "bins": 16},
    {"n": 1 << 24, "bins": 4096},
    {"n": 1 << 24, "bins": 65536},
]
WEIGHTED_BLOCK = 256  # threads per block where the block size is not an axis
ONEHOT_MAX_WORK = 1 << 14  # BLOCK x BINS one-hot elements of one step: more spills the registers
# cuda-items: how a thread reads pack p of idx and w, and the fields it adds
ITEM_LOADS = {
    1: ("int b = idx[p];", "float v = w[p];", ("",)),
    4: ("int4 b = reinterpret_cast<const int4*>(idx)[p];", "float4 v = reinterpret_cast<const float4*>(w)[p];", (".x", ".y", ".z", ".w")),
}


def _weighted_signature(size: str, restrict: bool = True, extra: str = "") -> str:
    return (
        f'extern "C" __global__ void weighted_histogram({cuda_pointer("int", "idx", restrict)}, {cuda_pointer("float", "w", restrict)}, '
        f"{cuda_pointer('float', 'hist', restrict, False)}, int {size}{extra})"
    )


def _weighted_atomic(restrict: bool) -> str:
    return f"""{CUDA_HEADER}
{_weighted_signature("N", restrict)} {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) atomicAdd(&hist[idx[i]], w[i]);
}}
"""


def _weighted_items(items: int, vector: int) -> str:
    """One pass: ITEMS elements per thread, read VEC at a time; a warp's loads of one step side by side."""
    load_bins, load_weights, fields = ITEM_LOADS[vector]
    adds = "\n".join(f"            atomicAdd(&hist[b{field}], v{field});" for field in fields)
    return f"""{CUDA_HEADER}
#define ITEMS {items}
#define VEC {vector}

{_weighted_signature("n")} {{
    int first = blockIdx.x * blockDim.x * (ITEMS / VEC) + threadIdx.x;
    #pragma unroll
    for (int k = 0; k < ITEMS / VEC; ++k) {{
        int p = first + k * blockDim.x;
        if (p * VEC < n) {{  // n is a multiple of VEC
            {load_bins}
            {load_weights}
{adds}
        }}
    }}
}}
"""


def _add_weight(aggregate: bool) -> str:
    """add_weight(hist, bin, v): every lane of the warp calls it; a negative bin adds nothing.

    Aggregated, lanes holding the same bin sum their weights with shuffles and the first of them
    adds the sum. STRIDE spaces a sub-histogram's bins (1, or COPIES when copies interleave).
    """
    if aggregate:
        body = f"""    unsigned peers = __match_any_sync({FULL_MASK}, bin);
    float sum = 0.0f;
    for (int src = 0; src < 32; ++src) {{
        float other = __shfl_sync({FULL_MASK}, v, src);
        if ((peers >> src) & 1u) sum += other;
    }}
    if (bin >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(hist + bin * STRIDE, sum);"""
    else:
        body = "    if (bin >= 0) atomicAdd(hist + bin * STRIDE, v);"
    return f"""
__device__ __forceinline__ void add_weight(float* hist, int bin, float v) {{
{body}
}}
"""


def _weighted_loop(target: str) -> str:
    """Grid-stride over warp-uniform chunks of VEC-element packs (n a multiple of VEC)."""
    return f"""    int lane = threadIdx.x & 31;
    for (int base = (blockIdx.x * blockDim.x + (threadIdx.x & ~31)) * VEC; base < n; base += gridDim.x * blockDim.x * VEC) {{
        int i = base + lane * VEC;
        Bins b;
        Weights v;
        if (i < n) {{
            b = *reinterpret_cast<const Bins*>(idx + i);
            v = *reinterpret_cast<const Weights*>(w + i);
        }}
        #pragma unroll
        for (int e = 0; e < VEC; ++e) add_weight({target}, i < n ? b.v[e] : -1, i < n ? v.v[e] : 0.0f);
    }}
"""


def _weighted_prelude(vector: int, aggregate: bool, defines: dict[str, int]) -> str:
    lines = "".join(f"#define {name} {value}\n" for name, value in {"VEC": vector, **defines}.items())
    return f"{CUDA_HEADER}{lines}{pack_struct('i32', vector, 'Bins')}{pack_struct('f32', vector, 'Weights')}{_add_weight(aggregate)}"


def _weighted_grid_stride(vector: int, aggregate: bool, restrict: bool) -> str:
    return f"""{_weighted_prelude(vector, aggregate, {"STRIDE": 1})}
{_weighted_signature("n", restrict)} {{
{_weighted_loop("hist")}}}
"""


def _weighted_shared(vector: int, copies: int, layout: str) -> str:
    """COPIES sub-histograms per block; `layout` "blocked" puts copy c at c * bins, "interleaved" bin b's copies side by side."""
    if layout == "interleaved":
        stride, mine, slot = copies, "sub + copy", "b * COPIES + c"
    else:
        stride, mine, slot = 1, "sub + copy * bins", "c * bins + b"
    return f"""{_weighted_prelude(vector, False, {"COPIES": copies, "STRIDE": stride})}
{_weighted_signature("n", extra=", int bins")} {{
    extern __shared__ float sub[];  // COPIES x bins partial sums of this block
    for (int b = threadIdx.x; b < COPIES * bins; b += blockDim.x) sub[b] = 0.0f;
    __syncthreads();
    int copy = (threadIdx.x >> 5) % COPIES;  // the warps of a block spread over the copies
    float* mine = {mine};
{_weighted_loop("mine")}    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {{
        float total = 0.0f;
        for (int c = 0; c < COPIES; ++c) total += sub[{slot}];
        if (total != 0.0f) atomicAdd(&hist[b], total);
    }}
}}
"""


def _weighted_triton_atomic(sem: str) -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def weighted_histogram(idx_ptr, w_ptr, hist_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    bins = tl.load(idx_ptr + offsets, mask=mask, other=0)
    weights = tl.load(w_ptr + offsets, mask=mask, other=0.0)
    tl.atomic_add(hist_ptr + bins, weights, mask=mask, sem="{sem}")
"""


WEIGHTED_TRITON_ONEHOT = f"""{TRITON_HEADER}

@triton.jit
def weighted_histogram(idx_ptr, w_ptr, hist_ptr, n, bins, BINS: tl.constexpr, BLOCK: tl.constexpr):
    # a [BLOCK, BINS] one-hot of each block's bins, weighted and summed down the block: no
    # atomics until the program has walked all its blocks (every num_programs-th one)
    slots = tl.arange(0, BINS)
    hist = tl.zeros([BINS], dtype=tl.float32)
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < n
        b = tl.load(idx_ptr + offsets, mask=mask, other=-1)
        weights = tl.load(w_ptr + offsets, mask=mask, other=0.0)
        hit = b[:, None] == slots[None, :]
        hist += tl.sum(tl.where(hit, weights[:, None], 0.0), axis=0)
    tl.atomic_add(hist_ptr + slots, hist, mask=slots < bins, sem="relaxed")
"""


def _weighted_args(sizes: Sizes, with_bins: bool = False) -> tuple[Any, ...]:
    return ("idx", "w", "hist", i32(sizes["n"])) + ((i32(sizes["bins"]),) if with_bins else ())


def _cleared(launch: Launch) -> list[Launch]:
    """Atomics add into hist, so each call clears it first."""
    return [Launch(ZERO, grid1(1), ("hist",)), launch]


def _weighted_cuda_variant(
    family: str, params: dict[str, Any], code: str, blocks, block: int, shared_copies: int = 0, checks=()
) -> Variant:
    """A one-kernel CUDA weighted_histogram after the clear; `shared_copies` sub-histograms of dynamic shared memory."""

    def launches(s: Sizes) -> list[Launch]:
        shared = shared_copies * s["bins"] * 4
        return _cleared(
            Launch("weighted_histogram", grid1(blocks(s)), _weighted_args(s, shared_copies > 0), block1(block), shared_bytes=shared)
        )

    return Variant(family, "cuda", params, code, launches, unsupported=unsupported(None, *checks))


def weighted_histogram_variants() -> Iterable[Variant]:
    for params in around({"block": 256, "restrict": True}, block=[128, 1024], restrict=[False]):
        block = params["block"]
        yield _weighted_cuda_variant(
            "cuda-atomic", params, _weighted_atomic(params["restrict"]), lambda s, block=block: cdiv(s["n"], block), block
        )
    for params in product({"items": [4, 16], "vector": [1, 4]}):
        items = params["items"]
        yield _weighted_cuda_variant(
            "cuda-items",
            params,
            _weighted_items(items, params["vector"]),
            lambda s, items=items: cdiv(s["n"], WEIGHTED_BLOCK * items),
            WEIGHTED_BLOCK,
            checks=(divisible("n", params["vector"]),),
        )
    for params in [
        *product({"vector": [1, 4], "aggregate": [False, True], "blocks_per_sm": [2, 8], "restrict": [True]}),
        {"vector": 1, "aggregate": False, "blocks_per_sm": 8, "restrict": False},
    ]:
        vector = params["vector"]
        yield _weighted_cuda_variant(
            "cuda-grid-stride",
            params,
            _weighted_grid_stride(vector, params["aggregate"], params["restrict"]),
            _resident_grid(WEIGHTED_BLOCK, params["blocks_per_sm"], vector),
            WEIGHTED_BLOCK,
            checks=(divisible("n", vector),),
        )
    shared_settings = [
        *product({"copies": [1, 2, 4], "layout": ["blocked"], "block": [256, 1024], "blocks_per_sm": [2], "vector": [1]}),
        *around(
            {"copies": 4, "layout": "blocked", "block": 256, "blocks_per_sm": 2, "vector": 1},
            layout=["interleaved"],
            blocks_per_sm=[8],
            vector=[4],
        ),
    ]
    for params in shared_settings:
        block, copies, vector = params["block"], params["copies"], params["vector"]
        yield _weighted_cuda_variant(
            "cuda-shared-private",
            params,
            _weighted_shared(vector, copies, params["layout"]),
            _resident_grid(block, params["blocks_per_sm"], vector),
            block,
            shared_copies=copies,
            checks=(divisible("n", vector), _shared_fits("bins", copies)),
        )
    for params in around({"BLOCK": 1024, "num_warps": 4, "sem": "relaxed"}, BLOCK=[256, 4096], num_warps=[1, 8], sem=["acq_rel"]):
        block, warps = params["BLOCK"], params["num_warps"]
        yield Variant(
            "triton-atomic",
            "triton",
            params,
            _weighted_triton_atomic(params["sem"]),
            lambda s, block=block, warps=warps: _cleared(
                Launch("weighted_histogram", grid1(cdiv(s["n"], block)), _weighted_args(s), constexprs={"BLOCK": block}, num_warps=warps)
            ),
        )
    for params in product({"BLOCK": [64, 256, 1024], "persistent": [False, True]}):
        yield _weighted_onehot_variant(params)


def _weighted_onehot_variant(params: dict[str, Any]) -> Variant:
    block, persistent = params["BLOCK"], params["persistent"]

    def launches(s: Sizes) -> list[Launch]:
        programs = _resident_grid(block, 4)(s) if persistent else cdiv(s["n"], block)
        constexprs = {"BINS": next_pow2(s["bins"]), "BLOCK": block}
        return _cleared(Launch("weighted_histogram", grid1(programs), _weighted_args(s, True), constexprs=constexprs, num_warps=4))

    def too_wide(s: Sizes) -> str | None:
        return (
            None
            if block * next_pow2(s["bins"]) <= ONEHOT_MAX_WORK
            else f"BLOCK x BINS > {ONEHOT_MAX_WORK}: the one-hot leaves the registers"
        )

    return Variant("triton-onehot", "triton", params, WEIGHTED_TRITON_ONEHOT, launches, unsupported=too_wide)


WEIGHTED_HISTOGRAM = Op(
    name="weighted_histogram",
    bound="memory",
    sizes=WEIGHTED_SIZES,
    inputs=lambda s: {"idx": TensorSpec((s["n"],), "i32", f"randint:0:{s['bins']}"), "w": TensorSpec((s["n"],), "f32", "rand")},
    outputs=lambda s: {"hist": TensorSpec((s["bins"],))},
    reference=lambda torch, inputs, sizes: {"hist": torch.bincount(inputs["idx"], weights=inputs["w"], minlength=sizes["bins"]).float()},
    reference_code="def reference(idx, w, bins):\n    return torch.bincount(idx, weights=w, minlength=bins)\n",
    variants=weighted_histogram_variants,
    # Up to a million uniform weights per bin at 16 bins, summed in an order the atomics choose:
    # a sequential fp32 sum of 2**20 of them is off by ~1.5e-5 (1 + |sum|) (CPU check), so 2e-4.
    tolerance={"f32": 2e-4},
)

OPS = [BUCKET_MIN, WEIGHTED_HISTOGRAM]
