"""Row scatters with float atomics: class_sum (per-class row sums) and indexadd_rows (index_add of rows).

Neighbours of histogram, bincount, bucket_min and keyed_max, written so the forecaster can learn
when aggregating a warp's equal keys before its atomics pays: with few keys and the atomics going
to global memory, many lanes of a warp hit one address and one atomic per distinct key saves
most of them; with thousands of keys, or a row wide enough that a warp's lanes hold different
columns, the match only costs. Both also vary Triton's atomic ordering (`sem`), relaxed against
the default acq_rel.

- class_sum: out[c, :] = sum of x[i, :] over the rows i with labels[i] == c (x (n, d) randn fp32,
  labels int32 randint over `classes`). Sizes: n 4096 to 4M rows, d 1 to 32, 4 to 65536 classes
  (4 classes at d = 1: a million atomics on each of four addresses; 65536 x 4: almost no two
  alike, and 1 MB of sums, beyond any shared-memory table). Every variant clears out first (a
  ZERO launch). The warp aggregation ("aggregate" "match"): __match_any_sync over the output
  address, a 32-step shuffle sum of each group, one atomic by its first lane. CUDA: cuda-atomic
  (a thread per element of x; block, aggregate), cuda-warp-row (a warp per 32 rows, lanes over
  d; a row at a time with an atomic per element, or the rows of equal label grouped with
  __match_any_sync and summed first: aggregate; CHUNKS of 32 rows per warp, warps per block),
  cuda-grid-stride (a resident grid walks x in VEC-element packs with global atomics; vector,
  aggregate, blocks_per_sm), cuda-shared-private (a block-private classes x d table in shared
  memory, aggregated into or not, then one global atomic per non-zero entry per block; block,
  aggregate, blocks_per_sm; only when the table fits shared memory). Triton: triton-atomic
  (tl.atomic_add of BLOCK elements; BLOCK, num_warps, sem) and triton-onehot (persistent
  programs sum a [CLASSES, BLOCK, D] one-hot with tl.sum, one atomic per (class, column) at
  the end; BLOCK, num_warps; few classes and a small one-hot only).
- indexadd_rows: out = base.index_add(0, idx, src) (base (rows, d) randn, idx int64 randint over
  `rows`, src (m, d) randn). Sizes: rows 16 to 1M keys, m 4096 to 4M source rows, d 8 to 256.
  Every variant copies base into out first (a copy kernel of its own, the same in each
  language), then adds. CUDA: cuda-element (a thread per VEC columns of one source row, src
  read as float or float4; with d = 8 a warp spans 4 or 16 source rows, whose equal idx the
  "aggregate" match sums before one atomic per column; block, vector, aggregate),
  cuda-block-row (a block per source row, threads over d; block, vector), cuda-warp-segment (a
  warp walks ROWS_PER_WARP consecutive source rows, lanes over d; "presum" keeps a running sum
  while idx repeats and adds it once when idx changes, sort-free, so only a run of equal
  consecutive idx, common with few keys, merges; presum, rows_per_warp, vector). Triton:
  triton-tile ([BLOCK_M, BLOCK_D] tiles with tl.atomic_add; BLOCK_M, BLOCK_D, num_warps, sem).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from workshop.corpus.ops.memkit import MAX_SHARED_BYTES, pack_struct
from workshop.corpus.ops.rowkit import FULL_MASK, TRITON_HEADER, divisible, next_pow2, resident_blocks, unsupported
from workshop.corpus.spec import (
    CUDA_HEADER,
    ZERO,
    Launch,
    Op,
    Sizes,
    TensorSpec,
    Variant,
    block1,
    cdiv,
    grid1,
    i32,
    product,
)


def _add_to(aggregate: str) -> str:
    """add_to(table, key, v): every lane of the warp calls it; a negative key adds nothing."""
    if aggregate == "match":
        body = f"""    // lanes holding the same address sum their values with shuffles; the first of them adds the sum
    unsigned peers = __match_any_sync({FULL_MASK}, key);
    float sum = 0.0f;
    for (int src = 0; src < 32; ++src) {{
        float other = __shfl_sync({FULL_MASK}, v, src);
        if ((peers >> src) & 1u) sum += other;
    }}
    if (key >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(table + key, sum);"""
    else:
        body = "    if (key >= 0) atomicAdd(table + key, v);"
    return f"""
__device__ __forceinline__ void add_to(float* table, int key, float v) {{
{body}
}}
"""


def define_lines(values: dict[str, int]) -> str:
    return "".join(f"#define {name} {value}\n" for name, value in values.items())


# --- class_sum ---------------------------------------------------------------------------------------

# Additions per output element: 1M (4 classes, d = 1), 16K, 64K; ~64 at 65536 classes.
CLASS_SIZES = [
    {"n": 4096, "d": 16, "classes": 8},
    {"n": 1 << 22, "d": 1, "classes": 4},
    {"n": 1 << 22, "d": 1, "classes": 256},
    {"n": 1 << 20, "d": 32, "classes": 16},
    {"n": 1 << 22, "d": 4, "classes": 65536},
]
CLASS_BLOCK = 256  # threads per block where the block size is not an axis
ONEHOT_MAX_CLASSES = 16
ONEHOT_MAX_WORK = 1 << 14  # CLASSES x BLOCK x D one-hot elements of one step: more spills the registers

CLASS_SIGNATURE = (
    'extern "C" __global__ void class_sum(const float* __restrict__ x, const int* __restrict__ labels, float* __restrict__ out, '
    "int n, int d{extra})"
)


def _class_signature(extra: str = "") -> str:
    return CLASS_SIGNATURE.format(extra=extra)


def _class_atomic(aggregate: str) -> str:
    return f"""{CUDA_HEADER}{_add_to(aggregate)}
{_class_signature()} {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // every lane reaches add_to (the match needs the whole warp); lanes past the end bring key -1
    int key = -1;
    float v = 0.0f;
    if (i < n * d) {{
        int row = i / d;
        key = labels[row] * d + (i - row * d);
        v = x[i];
    }}
    add_to(out, key, v);
}}
"""


def _class_warp_row(aggregate: bool, warps: int, chunks: int) -> str:
    """A warp takes CHUNKS x 32 consecutive rows, 32 at a time with one label per lane."""
    if aggregate:
        update = f"""        // rows of equal label form a group: its lanes sum those rows' columns, then one atomic each
        unsigned peers = __match_any_sync({FULL_MASK}, label);
        unsigned pending = __ballot_sync({FULL_MASK}, label >= 0);
        while (pending) {{
            int leader = __ffs(pending) - 1;
            unsigned group = __shfl_sync({FULL_MASK}, peers, leader);
            int target = __shfl_sync({FULL_MASK}, label, leader);
            pending &= ~group;
            for (int c = lane; c < d; c += 32) {{
                float s = 0.0f;
                for (unsigned rest = group; rest; rest &= rest - 1) s += x[(long long)(base + __ffs(rest) - 1) * d + c];
                atomicAdd(out + (long long)target * d + c, s);
            }}
        }}"""
    else:
        update = f"""        int count = min(32, n - base);
        for (int r = 0; r < count; ++r) {{
            int target = __shfl_sync({FULL_MASK}, label, r);
            const float* row = x + (long long)(base + r) * d;
            for (int c = lane; c < d; c += 32) atomicAdd(out + (long long)target * d + c, row[c]);
        }}"""
    return f"""{CUDA_HEADER}{define_lines({"WARPS": warps, "CHUNKS": chunks})}
{_class_signature()} {{
    int lane = threadIdx.x & 31;
    int first = (blockIdx.x * WARPS + (threadIdx.x >> 5)) * 32 * CHUNKS;
    for (int k = 0; k < CHUNKS; ++k) {{
        int base = first + k * 32;
        if (base >= n) break;  // the same for the whole warp
        int label = base + lane < n ? labels[base + lane] : -1;
{update}
    }}
}}
"""


def _class_loop(target: str) -> str:
    """Grid-stride over warp-uniform chunks of VEC-element packs of x (n * d a multiple of VEC)."""
    return f"""    int lane = threadIdx.x & 31;
    int total = n * d;
    for (int base = (blockIdx.x * blockDim.x + (threadIdx.x & ~31)) * VEC; base < total; base += gridDim.x * blockDim.x * VEC) {{
        int i = base + lane * VEC;
        // the pack's addresses first, then its adds (lanes past the end bring key -1 and 0)
        int keys[VEC];
        Pack v;
        #pragma unroll
        for (int e = 0; e < VEC; ++e) {{
            int row = (i + e) / d;
            keys[e] = i < total ? labels[row] * d + (i + e - row * d) : -1;
            v.v[e] = 0.0f;
        }}
        if (i < total) v = *reinterpret_cast<const Pack*>(x + i);
        #pragma unroll
        for (int e = 0; e < VEC; ++e) add_to({target}, keys[e], v.v[e]);
    }}
"""


def _class_grid_stride(vector: int, aggregate: str) -> str:
    return f"""{CUDA_HEADER}{define_lines({"VEC": vector})}{pack_struct("f32", vector)}{_add_to(aggregate)}
{_class_signature()} {{
{_class_loop("out")}}}
"""


def _class_shared(aggregate: str) -> str:
    return f"""{CUDA_HEADER}{define_lines({"VEC": 1})}{pack_struct("f32", 1)}{_add_to(aggregate)}
{_class_signature(", int classes")} {{
    extern __shared__ float table[];  // this block's classes x d sums
    for (int t = threadIdx.x; t < classes * d; t += blockDim.x) table[t] = 0.0f;
    __syncthreads();
{_class_loop("table")}    __syncthreads();
    for (int t = threadIdx.x; t < classes * d; t += blockDim.x)
        if (table[t] != 0.0f) atomicAdd(&out[t], table[t]);
}}
"""


def _class_triton_atomic(sem: str) -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def class_sum(x_ptr, labels_ptr, out_ptr, n, d, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n * d
    rows = offsets // d
    labels = tl.load(labels_ptr + rows, mask=mask, other=0)
    vals = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.atomic_add(out_ptr + labels * d + (offsets - rows * d), vals, mask=mask, sem="{sem}")
"""


CLASS_TRITON_ONEHOT = f"""{TRITON_HEADER}

@triton.jit
def class_sum(x_ptr, labels_ptr, out_ptr, n, d, classes, CLASSES: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
    # each program walks every num_programs-th block of rows; hit[c, r, :] = (labels[r] == c), so
    # summing the masked rows over r gives the block's per-class sums: no atomics until the end
    slots = tl.arange(0, CLASSES)
    cols = tl.arange(0, D)
    acc = tl.zeros([CLASSES, D], dtype=tl.float32)
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        rows = start + tl.arange(0, BLOCK)
        labels = tl.load(labels_ptr + rows, mask=rows < n, other=-1)
        vals = tl.load(x_ptr + rows[:, None] * d + cols[None, :], mask=(rows[:, None] < n) & (cols[None, :] < d), other=0.0)
        hit = slots[:, None, None] == labels[None, :, None]
        acc += tl.sum(tl.where(hit, vals[None, :, :], 0.0), axis=1)
    mask = (slots[:, None] < classes) & (cols[None, :] < d)
    tl.atomic_add(out_ptr + slots[:, None] * d + cols[None, :], acc, mask=mask, sem="relaxed")
"""


def _class_args(sizes: Sizes, with_classes: bool = False) -> tuple[Any, ...]:
    return ("x", "labels", "out", i32(sizes["n"]), i32(sizes["d"])) + ((i32(sizes["classes"]),) if with_classes else ())


def cleared_first(launch: Launch) -> list[Launch]:
    """Atomics add into out, so each call clears it first."""
    return [Launch(ZERO, grid1(1), ("out",)), launch]


def _table_fits(s: Sizes) -> str | None:
    return None if s["classes"] * s["d"] * 4 <= MAX_SHARED_BYTES else "the classes x d table does not fit shared memory"


def _class_cuda_variant(family: str, params: dict[str, Any], code: str, blocks, block: int, shared: bool = False, checks=()) -> Variant:
    """A one-kernel CUDA class_sum after the clear: `blocks(sizes)` blocks of `block` threads."""

    def launches(s: Sizes) -> list[Launch]:
        shared_bytes = s["classes"] * s["d"] * 4 if shared else 0
        return cleared_first(Launch("class_sum", grid1(blocks(s)), _class_args(s, shared), block1(block), shared_bytes=shared_bytes))

    return Variant(family, "cuda", params, code, launches, unsupported=unsupported(None, *checks))


def class_sum_variants() -> Iterable[Variant]:
    for params in product({"block": [128, 256, 1024], "aggregate": ["none", "match"]}):
        block = params["block"]
        yield _class_cuda_variant(
            "cuda-atomic", params, _class_atomic(params["aggregate"]), lambda s, block=block: cdiv(s["n"] * s["d"], block), block
        )
    for params in product({"aggregate": [False, True], "warps": [2, 8], "chunks": [1, 4]}):
        rows = 32 * params["warps"] * params["chunks"]
        yield _class_cuda_variant(
            "cuda-warp-row",
            params,
            _class_warp_row(params["aggregate"], params["warps"], params["chunks"]),
            lambda s, rows=rows: cdiv(s["n"], rows),
            32 * params["warps"],
        )
    for params in product({"vector": [1, 4], "aggregate": ["none", "match"], "blocks_per_sm": [2, 8]}):
        vector, per_sm = params["vector"], params["blocks_per_sm"]
        yield _class_cuda_variant(
            "cuda-grid-stride",
            params,
            _class_grid_stride(vector, params["aggregate"]),
            lambda s, vector=vector, per_sm=per_sm: resident_blocks(cdiv(s["n"] * s["d"], CLASS_BLOCK * vector), per_sm),
            CLASS_BLOCK,
            checks=(divisible("n", vector),),
        )
    for params in product({"block": [256, 1024], "aggregate": ["none", "match"], "blocks_per_sm": [1, 2]}):
        block, per_sm = params["block"], params["blocks_per_sm"]
        yield _class_cuda_variant(
            "cuda-shared-private",
            params,
            _class_shared(params["aggregate"]),
            lambda s, block=block, per_sm=per_sm: resident_blocks(cdiv(s["n"] * s["d"], block), per_sm),
            block,
            shared=True,
            checks=(_table_fits,),
        )
    triton_settings = [
        *product({"BLOCK": [256, 1024, 4096], "num_warps": [4], "sem": ["relaxed", "acq_rel"]}),
        *product({"BLOCK": [1024], "num_warps": [1, 8], "sem": ["relaxed", "acq_rel"]}),
    ]
    for params in triton_settings:
        block, warps = params["BLOCK"], params["num_warps"]
        yield Variant(
            "triton-atomic",
            "triton",
            params,
            _class_triton_atomic(params["sem"]),
            lambda s, block=block, warps=warps: cleared_first(
                Launch("class_sum", grid1(cdiv(s["n"] * s["d"], block)), _class_args(s), constexprs={"BLOCK": block}, num_warps=warps)
            ),
        )
    for params in product({"BLOCK": [32, 128, 512], "num_warps": [2, 4, 8]}):
        yield _class_onehot_variant(params)


def _class_onehot_variant(params: dict[str, Any]) -> Variant:
    block, warps = params["BLOCK"], params["num_warps"]

    def launches(s: Sizes) -> list[Launch]:
        constexprs = {"CLASSES": next_pow2(s["classes"]), "D": next_pow2(s["d"]), "BLOCK": block}
        programs = resident_blocks(cdiv(s["n"], block), 4)
        return cleared_first(Launch("class_sum", grid1(programs), _class_args(s, True), constexprs=constexprs, num_warps=warps))

    def too_wide(s: Sizes) -> str | None:
        if s["classes"] > ONEHOT_MAX_CLASSES:
            return f"classes > {ONEHOT_MAX_CLASSES}: written for few classes"
        if next_pow2(s["classes"]) * block * next_pow2(s["d"]) > ONEHOT_MAX_WORK:
            return f"CLASSES x BLOCK x D > {ONEHOT_MAX_WORK}: the one-hot leaves the registers"
        return None

    return Variant("triton-onehot", "triton", params, CLASS_TRITON_ONEHOT, launches, unsupported=too_wide)


def _class_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    x = inputs["x"]
    out = torch.zeros((sizes["classes"], sizes["d"]), dtype=x.dtype, device=x.device)
    return {"out": out.index_add_(0, inputs["labels"].long(), x)}


CLASS_SUM = Op(
    name="class_sum",
    bound="memory",
    sizes=CLASS_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"], s["d"])), "labels": TensorSpec((s["n"],), "i32", f"randint:0:{s['classes']}")},
    outputs=lambda s: {"out": TensorSpec((s["classes"], s["d"]))},
    reference=_class_reference,
    reference_code=(
        "def reference(x, labels, classes):\n"
        "    out = torch.zeros(classes, x.shape[1], device=x.device)\n"
        "    return out.index_add_(0, labels.long(), x)\n"
    ),
    variants=class_sum_variants,
    # Up to a million randn additions per sum, in an order the atomics choose: two fp32 orders
    # of 2**20 of them differ by at most ~2e-4 (1 + |sum|) over 64 such sums (CPU check), so 2e-3.
    tolerance={"f32": 2e-3},
)

# --- indexadd_rows -----------------------------------------------------------------------------------

# Additions per output element: 256 (tiny), 262144 (16 keys, d = 8), 1024, 256, ~1 (1M keys).
INDEXADD_SIZES = [
    {"rows": 16, "m": 4096, "d": 64},
    {"rows": 16, "m": 1 << 22, "d": 8},
    {"rows": 256, "m": 1 << 18, "d": 256},
    {"rows": 4096, "m": 1 << 20, "d": 64},
    {"rows": 1 << 20, "m": 1 << 20, "d": 64},
]
COPY_BLOCK = 256
TRITON_COPY_BLOCK = 1024

COPY_BASE = """
// out starts as base (d is a multiple of 4, so float4 packs cover it)
extern "C" __global__ void copy_base(const float4* __restrict__ base, float4* __restrict__ out, int packs) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p < packs) out[p] = base[p];
}
"""

TRITON_COPY_BASE = """

@triton.jit
def copy_base(base_ptr, out_ptr, size, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < size
    tl.store(out_ptr + offsets, tl.load(base_ptr + offsets, mask=mask), mask=mask)
"""

INDEXADD_SIGNATURE = (
    'extern "C" __global__ void indexadd_rows(const float* __restrict__ src, const long long* __restrict__ idx, '
    "float* __restrict__ out, int m, int d)"
)


def pack_atomics(name: str, atomic: str, combined: tuple[str, str] | None = None) -> str:
    """`name(out, key, v)`: VEC columns from out + key on, one `atomic` each; every lane calls it, key -1 takes
    nothing. `combined`: the lines that fold the packs of a warp's lanes with the same key (`peers`) into one
    pack, and that pack's name; the first of those lanes then makes the atomics for all of them."""
    lines, pack = combined or ("", "v")
    leader = " && (threadIdx.x & 31) == __ffs(peers) - 1" if combined else ""
    return f"""
__device__ __forceinline__ void {name}(float* out, long long key, const Pack& v) {{
{lines}    if (key >= 0{leader}) {{
        #pragma unroll
        for (int e = 0; e < VEC; ++e) {atomic}(out + key + e, {pack}.v[e]);
    }}
}}
"""


def _add_pack(aggregate: bool) -> str:
    """add_pack(out, key, v): lanes of the same address (equal idx, same columns) sum their packs; the first adds them."""
    summed = f"""    // lanes of the same address (equal idx, same columns) sum their packs; the first adds them
    unsigned peers = __match_any_sync({FULL_MASK}, key);
    Pack s;
    #pragma unroll
    for (int e = 0; e < VEC; ++e) s.v[e] = 0.0f;
    for (int src = 0; src < 32; ++src) {{
        #pragma unroll
        for (int e = 0; e < VEC; ++e) {{
            float other = __shfl_sync({FULL_MASK}, v.v[e], src);
            if ((peers >> src) & 1u) s.v[e] += other;
        }}
    }}
"""
    return pack_atomics("add_pack", "atomicAdd", (summed, "s") if aggregate else None)


def _indexadd_prelude(defines: dict[str, int]) -> str:
    return f"{CUDA_HEADER}{define_lines(defines)}{pack_struct('f32', defines['VEC'])}{COPY_BASE}"


def _indexadd_element(vector: int, aggregate: bool) -> str:
    return f"""{_indexadd_prelude({"VEC": vector})}{_add_pack(aggregate)}
{INDEXADD_SIGNATURE} {{
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;  // first of this thread's VEC columns
    long long key = -1;  // where they go in out; lanes past the end keep -1 but still call add_pack
    Pack v;
    #pragma unroll
    for (int e = 0; e < VEC; ++e) v.v[e] = 0.0f;
    if (i < m * d) {{
        int row = i / d;  // d is a multiple of VEC: the pack lies in one source row
        key = idx[row] * d + (i - row * d);
        v = *reinterpret_cast<const Pack*>(src + i);
    }}
    add_pack(out, key, v);
}}
"""


def scatter_row(source: str, key: str, lanes: tuple[str, str], update: str = "atomicAdd", indent: str = "    ") -> str:
    """CUDA lines sending one source row to its key's row of out, VEC columns a pack: `source` and
    `key` name the row (`src + (long long)row * d`, `idx[row]`); `lanes` is the first lane and its step."""
    first, step = lanes
    return f"""{indent}const Pack* from = reinterpret_cast<const Pack*>({source});
{indent}float* to = out + {key} * d;
{indent}for (int c = {first}; c < d / VEC; c += {step}) {{
{indent}    Pack v = from[c];
{indent}    #pragma unroll
{indent}    for (int e = 0; e < VEC; ++e) {update}(to + c * VEC + e, v.v[e]);
{indent}}}
"""


def _indexadd_block_row(vector: int) -> str:
    return f"""{_indexadd_prelude({"VEC": vector})}
{INDEXADD_SIGNATURE} {{
    int row = blockIdx.x;
{scatter_row("src + (long long)row * d", "idx[row]", ("threadIdx.x", "blockDim.x"))}}}
"""


def _indexadd_warp_segment(presum: bool, rows_per_warp: int, vector: int) -> str:
    if presum:
        walk = """        // a running sum while idx repeats; added once when it changes (idx[r] is the same for all lanes)
        long long current = -1;
        Pack acc;
        for (int r = first; r < last; ++r) {
            long long key = idx[r];
            if (key != current) {
                if (current >= 0) flush(out + current * d + c, acc);
                current = key;
                #pragma unroll
                for (int e = 0; e < VEC; ++e) acc.v[e] = 0.0f;
            }
            Pack v = *reinterpret_cast<const Pack*>(src + (long long)r * d + c);
            #pragma unroll
            for (int e = 0; e < VEC; ++e) acc.v[e] += v.v[e];
        }
        if (current >= 0) flush(out + current * d + c, acc);"""
    else:
        walk = """        for (int r = first; r < last; ++r) {
            Pack v = *reinterpret_cast<const Pack*>(src + (long long)r * d + c);
            flush(out + idx[r] * d + c, v);
        }"""
    return f"""{_indexadd_prelude({"VEC": vector, "WARPS": 4, "ROWS_PER_WARP": rows_per_warp})}
__device__ __forceinline__ void flush(float* to, const Pack& v) {{
    #pragma unroll
    for (int e = 0; e < VEC; ++e) atomicAdd(to + e, v.v[e]);
}}

{INDEXADD_SIGNATURE} {{
    int lane = threadIdx.x & 31;
    int first = (blockIdx.x * WARPS + (threadIdx.x >> 5)) * ROWS_PER_WARP;
    int last = min(first + ROWS_PER_WARP, m);
    for (int c = lane * VEC; c < d; c += 32 * VEC) {{
{walk}
    }}
}}
"""


def tile_kernel(kernel: str, atomic: str, sem: str) -> str:
    """The Triton tile program: each source row's BLOCK_D columns go to its key's row of out by tl.<atomic>."""
    return f"""{TRITON_HEADER}{TRITON_COPY_BASE}

@triton.jit
def {kernel}(src_ptr, idx_ptr, out_ptr, m, d, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    keys = tl.load(idx_ptr + rows, mask=rows < m, other=0)
    mask = (rows[:, None] < m) & (cols[None, :] < d)
    vals = tl.load(src_ptr + rows[:, None] * d + cols[None, :], mask=mask, other=0.0)
    tl.{atomic}(out_ptr + keys[:, None] * d + cols[None, :], vals, mask=mask, sem="{sem}")
"""


def row_scatter_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("src", "idx", "out", i32(sizes["m"]), i32(sizes["d"]))


def copied_from_base(language: str, sizes: Sizes, launch: Launch) -> list[Launch]:
    """out starts as base, written by the variant's own copy kernel."""
    size = sizes["rows"] * sizes["d"]
    if language == "cuda":
        copy = Launch("copy_base", grid1(cdiv(size // 4, COPY_BLOCK)), ("base", "out", i32(size // 4)), block1(COPY_BLOCK))
    else:
        copy = Launch(
            "copy_base",
            grid1(cdiv(size, TRITON_COPY_BLOCK)),
            ("base", "out", i32(size)),
            constexprs={"BLOCK": TRITON_COPY_BLOCK},
            num_warps=4,
        )
    return [copy, launch]


def _indexadd_cuda_variant(family: str, params: dict[str, Any], code: str, blocks, block: int, vector: int) -> Variant:
    """The copy, then one CUDA kernel of `blocks(sizes)` blocks of `block` threads."""

    def launches(s: Sizes) -> list[Launch]:
        return copied_from_base("cuda", s, Launch("indexadd_rows", grid1(blocks(s)), row_scatter_args(s), block1(block)))

    return Variant(family, "cuda", params, code, launches, unsupported=unsupported(None, divisible("d", max(vector, 4))))


def indexadd_variants() -> Iterable[Variant]:
    for params in product({"block": [128, 256, 512], "vector": [1, 4], "aggregate": [False, True]}):
        block, vector = params["block"], params["vector"]
        yield _indexadd_cuda_variant(
            "cuda-element",
            params,
            _indexadd_element(vector, params["aggregate"]),
            lambda s, block=block, vector=vector: cdiv(s["m"] * s["d"] // vector, block),
            block,
            vector,
        )
    for params in product({"block": [32, 64, 256], "vector": [1, 4]}):
        yield _indexadd_cuda_variant(
            "cuda-block-row", params, _indexadd_block_row(params["vector"]), lambda s: s["m"], params["block"], params["vector"]
        )
    for params in product({"presum": [False, True], "rows_per_warp": [8, 64], "vector": [1, 4]}):
        rows = 4 * params["rows_per_warp"]
        yield _indexadd_cuda_variant(
            "cuda-warp-segment",
            params,
            _indexadd_warp_segment(params["presum"], params["rows_per_warp"], params["vector"]),
            lambda s, rows=rows: cdiv(s["m"], rows),
            128,
            params["vector"],
        )
    for params in tile_params([4, 16, 64]):
        yield tile_variant("indexadd_rows", params, tile_kernel("indexadd_rows", "atomic_add", params["sem"]), row_scatter_args)


def tile_params(block_ms: list[int]) -> list[dict[str, Any]]:
    """A Triton [BLOCK_M, BLOCK_D] row-scatter tile's settings: BLOCK_M, then BLOCK_D, each against sem; then num_warps."""
    return [
        *product({"BLOCK_M": block_ms, "BLOCK_D": [64], "num_warps": [4], "sem": ["relaxed", "acq_rel"]}),
        *product({"BLOCK_M": [16], "BLOCK_D": [8, 256], "num_warps": [4], "sem": ["relaxed", "acq_rel"]}),
        *product({"BLOCK_M": [16], "BLOCK_D": [64], "num_warps": [1, 8], "sem": ["relaxed"]}),
    ]


def tile_variant(kernel: str, params: dict[str, Any], code: str, args: Callable[[Sizes], tuple[Any, ...]]) -> Variant:
    """A Triton program per [BLOCK_M, BLOCK_D] tile of the source rows, after the copy of base into out."""
    block_m, block_d, warps = params["BLOCK_M"], params["BLOCK_D"], params["num_warps"]

    def launches(s: Sizes) -> list[Launch]:
        grid = (cdiv(s["m"], block_m), cdiv(s["d"], block_d), 1)
        return copied_from_base(
            "triton", s, Launch(kernel, grid, args(s), constexprs={"BLOCK_M": block_m, "BLOCK_D": block_d}, num_warps=warps)
        )

    return Variant("triton-tile", "triton", params, code, launches)


def row_scatter_inputs(s: Sizes) -> dict[str, TensorSpec]:
    """A keyed scatter of source rows: base (rows, d), idx (m) over the rows, src (m, d)."""
    return {
        "base": TensorSpec((s["rows"], s["d"])),
        "idx": TensorSpec((s["m"],), "i64", f"randint:0:{s['rows']}"),
        "src": TensorSpec((s["m"], s["d"])),
    }


INDEXADD_ROWS = Op(
    name="indexadd_rows",
    bound="memory",
    sizes=INDEXADD_SIZES,
    inputs=row_scatter_inputs,
    outputs=lambda s: {"out": TensorSpec((s["rows"], s["d"]))},
    reference=lambda torch, inputs, sizes: {"out": inputs["base"].index_add(0, inputs["idx"], inputs["src"])},
    reference_code="def reference(base, idx, src):\n    return base.index_add(0, idx, src)\n",
    variants=indexadd_variants,
    # 262144 randn additions per element at 16 keys, in an order the atomics choose (see class_sum).
    tolerance={"f32": 2e-3},
)

OPS = [CLASS_SUM, INDEXADD_ROWS]
