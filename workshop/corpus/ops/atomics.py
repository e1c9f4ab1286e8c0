"""Keyed accumulation with atomics: accumulate_rows (index_add of rows) and keyed_max.

Both scatter a stream into `buckets` targets chosen by an int64 key, and the number of
buckets is part of the problem: 8 (every warp hits the same few addresses: contention
decides the speed) up to n/4 (few collisions: bandwidth decides).

- accumulate_rows: out[keys[i], :] += values[i, :] (values (n, dim) fp32, out zeroed
  first). CUDA: cuda-atomic-element (`int idx`, one atomicAdd per element; block, restrict,
  grid-stride or one pass), cuda-warp-row (a warp per row, float/float2/float4 vector
  atomics; vector, warps, rows per warp), cuda-shared-partial (a block sums a chunk of rows
  for a TILE-column stripe into shared memory, then one global atomic per touched
  (bucket, column); tile, row threads — 1 owns its column and needs no shared atomic —
  and chunk; only when the buckets fit shared memory), cuda-warp-aggregate (a warp takes
  32 rows, groups the rows of equal key with ballots and issues one atomic per group and
  column; vector, warps), cuda-privatised (no atomics: block g adds its rows into its own
  global copy, each thread owning columns, then a second kernel sums the copies; copies,
  threads). Triton: triton-atomic (tl.atomic_add of a BLOCK_N x BLOCK_D tile; BLOCK_N,
  BLOCK_D, num_warps) and triton-onehot (persistent programs sum their rows per bucket
  with a one-hot tl.dot in fp32, then one atomic per bucket; small bucket counts only).
- keyed_max: out[b] = max of values[i] with keys[i] == b, -inf where no key is b (1-D,
  fp32). Every variant fills out with -inf first (a launch of its own). Float atomicMax is
  done three ways: "int-sign" (the sign-handled integer trick: atomicMax on the int bits for
  v >= 0, atomicMin on the unsigned bits for v < 0; right for every non-NaN float), "cas"
  (an atomicCAS loop that always swaps in fmaxf) and "cas-early-exit" (CAS only while v is
  larger than what is stored). CUDA: cuda-atomic (thread per element; atomic, block,
  restrict), cuda-encoded (an order-preserving unsigned key per value, integer atomicMax,
  then a decode kernel; block, items per thread), cuda-shared-private (block-private bins in
  shared memory merged with one global atomic per non-empty bin; atomic, block,
  blocks_per_sm), cuda-warp-match (grid-stride; __match_any_sync groups equal keys of a
  warp, which reduce with shuffles before one atomic; aggregate, atomic, blocks_per_sm).
  Triton: triton-atomic (tl.atomic_max; BLOCK, num_warps, sem) and triton-onehot-max
  (persistent programs keep a per-bucket max in registers; few buckets only).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import MAX_SHARED_BYTES, one_launch
from workshop.corpus.ops.rowkit import (
    ATOMIC_MAX_FLOAT,
    NEG_INF,
    SM_COUNT,
    THREADS_PER_SM,
    TRITON_HEADER,
    divisible,
    next_pow2,
    resident_blocks,
    unsupported,
)
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

# --- accumulate_rows -------------------------------------------------------------------------------

# 8192 (and 1024) additions per output element at 8 (128) buckets; n/4 buckets: ~4 rows each.
ACCUMULATE_SIZES = [
    {"n": 512, "dim": 64, "buckets": 8},
    {"n": 16384, "dim": 64, "buckets": 4096},
    {"n": 65536, "dim": 128, "buckets": 8},
    {"n": 131072, "dim": 128, "buckets": 128},
    {"n": 131072, "dim": 128, "buckets": 32768},
]
VECTORS = {  # atomicAdd type (sm_90 has float2/float4 atomics), zero, element-wise add into s
    1: ("float", "0.0f", "s += x;"),
    2: ("float2", "make_float2(0.0f, 0.0f)", "s.x += x.x; s.y += x.y;"),
    4: ("float4", "make_float4(0.0f, 0.0f, 0.0f, 0.0f)", "s.x += x.x; s.y += x.y; s.z += x.z; s.w += x.w;"),
}
PRIVATE_MAX_BYTES = 128 << 20  # the per-block copies of cuda-privatised
ONEHOT_MAX_BUCKETS = 128  # a BUCKETS x BLOCK_D accumulator in registers


def _accumulate_signature(names: tuple[str, str], restrict: bool = True, extra: str = "") -> str:
    """`names`: what the kernel calls its row count and row length (users differ)."""
    rows, cols = names
    return (
        f'extern "C" __global__ void accumulate_rows({cuda_pointer("float", "values", restrict)}, {cuda_pointer("long long", "keys", restrict)}, '
        f"{cuda_pointer('float', 'out', restrict, False)}, int {rows}, int {cols}{extra})"
    )


def _accumulate_element(restrict: bool, grid_stride: bool) -> str:
    body = """        int row = idx / D;
        int col = idx % D;
        atomicAdd(&out[keys[row] * D + col], values[idx]);"""
    if grid_stride:
        loop = f"""    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < N * D; idx += gridDim.x * blockDim.x) {{
{body}
    }}"""
    else:
        loop = f"""    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N * D) {{
{body}
    }}"""
    return f"""{CUDA_HEADER}
{_accumulate_signature(("N", "D"), restrict)} {{
{loop}
}}
"""


def _accumulate_warp_row(vector: int, warps: int, rows_per_warp: int) -> str:
    vtype = VECTORS[vector][0]
    return f"""{CUDA_HEADER}
#define WARPS {warps}
#define ROWS_PER_WARP {rows_per_warp}

{_accumulate_signature(("rows", "cols"))} {{
    int warp = blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    int first = warp * ROWS_PER_WARP;
    int last = min(first + ROWS_PER_WARP, rows);
    for (int r = first; r < last; ++r) {{
        const {vtype}* src = reinterpret_cast<const {vtype}*>(values + (long long)r * cols);
        {vtype}* dst = reinterpret_cast<{vtype}*>(out + keys[r] * cols);
        for (int c = lane; c < cols / {vector}; c += 32) atomicAdd(dst + c, src[c]);
    }}
}}
"""


def _accumulate_shared(tile: int, row_threads: int, chunk: int) -> str:
    """Block (TILE, ROW_THREADS) sums CHUNK rows of a TILE-column stripe per bucket in shared memory."""
    add = (
        "partial[slot] += v;  // this thread owns the column: no other thread adds here"
        if row_threads == 1
        else "atomicAdd(&partial[slot], v);"
    )
    return f"""{CUDA_HEADER}
#define TILE {tile}
#define ROW_THREADS {row_threads}
#define CHUNK {chunk}

{_accumulate_signature(("n", "dim"), extra=", int buckets")} {{
    extern __shared__ float partial[];  // buckets x TILE sums of this block's rows
    int tid = threadIdx.y * TILE + threadIdx.x;
    for (int i = tid; i < buckets * TILE; i += TILE * ROW_THREADS) partial[i] = 0.0f;
    __syncthreads();
    int col = blockIdx.x * TILE + threadIdx.x;
    int last = min(((int)blockIdx.y + 1) * CHUNK, n);
    if (col < dim) {{
        for (int row = blockIdx.y * CHUNK + threadIdx.y; row < last; row += ROW_THREADS) {{
            float v = values[(long long)row * dim + col];
            int slot = (int)keys[row] * TILE + threadIdx.x;
            {add}
        }}
    }}
    __syncthreads();
    // one global atomic per (bucket, column) this block touched
    for (int i = tid; i < buckets * TILE; i += TILE * ROW_THREADS) {{
        int c = blockIdx.x * TILE + i % TILE;
        if (c < dim && partial[i] != 0.0f) atomicAdd(&out[(long long)(i / TILE) * dim + c], partial[i]);
    }}
}}
"""


def _accumulate_warp_aggregate(vector: int, warps: int) -> str:
    vtype, zero, add = VECTORS[vector]
    return f"""{CUDA_HEADER}
#define WARPS {warps}
#define VEC {vector}

{_accumulate_signature(("n", "dim"))} {{
    int lane = threadIdx.x % 32;
    int base = (blockIdx.x * WARPS + threadIdx.x / 32) * 32;  // this warp's 32 rows, one key per lane
    if (base >= n) return;  // the whole warp leaves together
    long long key = base + lane < n ? keys[base + lane] : -1;
    unsigned pending = __ballot_sync(0xffffffffu, key >= 0);
    while (pending) {{
        // the rows sharing the first pending key are summed, then added with one atomic per column
        long long target = __shfl_sync(0xffffffffu, key, __ffs(pending) - 1);
        unsigned peers = __ballot_sync(0xffffffffu, key == target);
        pending &= ~peers;
        {vtype}* dst = reinterpret_cast<{vtype}*>(out + target * dim);
        for (int c = lane; c < dim / VEC; c += 32) {{
            {vtype} s = {zero};
            for (unsigned rest = peers; rest; rest &= rest - 1) {{
                {vtype} x = reinterpret_cast<const {vtype}*>(values + (long long)(base + __ffs(rest) - 1) * dim)[c];
                {add}
            }}
            atomicAdd(dst + c, s);
        }}
    }}
}}
"""


ACCUMULATE_PRIVATISED = f"""{CUDA_HEADER}
// Block g adds its share of the rows into copy g of the output; thread t owns the columns
// t, t + blockDim.x, ..., so no two threads ever touch one address: no atomics at all.
extern "C" __global__ void accumulate_private(const float* __restrict__ values, const long long* __restrict__ keys, float* __restrict__ copies,
                                              int n, int dim, int buckets) {{
    float* mine = copies + (long long)blockIdx.x * buckets * dim;
    for (int b = 0; b < buckets; ++b)
        for (int c = threadIdx.x; c < dim; c += blockDim.x) mine[(long long)b * dim + c] = 0.0f;
    int per_block = (n + gridDim.x - 1) / gridDim.x;
    int first = blockIdx.x * per_block;
    int last = min(first + per_block, n);
    for (int row = first; row < last; ++row) {{
        long long key = keys[row];
        for (int c = threadIdx.x; c < dim; c += blockDim.x) mine[key * dim + c] += values[(long long)row * dim + c];
    }}
}}

extern "C" __global__ void sum_copies(const float* __restrict__ copies, float* __restrict__ out, int count, int size) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= size) return;
    float s = 0.0f;
    for (int g = 0; g < count; ++g) s += copies[(long long)g * size + i];
    out[i] = s;
}}
"""

ACCUMULATE_TRITON_ATOMIC = f"""{TRITON_HEADER}

@triton.jit
def accumulate_rows(values_ptr, keys_ptr, out_ptr, n, dim, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    keys = tl.load(keys_ptr + rows, mask=rows < n, other=0)
    mask = (rows[:, None] < n) & (cols[None, :] < dim)
    vals = tl.load(values_ptr + rows[:, None] * dim + cols[None, :], mask=mask)
    tl.atomic_add(out_ptr + keys[:, None] * dim + cols[None, :], vals, mask=mask, sem="relaxed")
"""

ACCUMULATE_TRITON_ONEHOT = f"""{TRITON_HEADER}

@triton.jit
def accumulate_rows(values_ptr, keys_ptr, out_ptr, n, dim, buckets, BUCKETS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    # each program walks every num_programs-th block of rows and sums them per bucket:
    # onehot[b, r] = (keys[r] == b), so onehot @ rows is the per-bucket sum (fp32, no tf32)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    slots = tl.arange(0, BUCKETS)
    acc = tl.zeros([BUCKETS, BLOCK_D], dtype=tl.float32)
    for start in range(tl.program_id(0) * BLOCK_N, n, tl.num_programs(0) * BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        keys = tl.load(keys_ptr + rows, mask=rows < n, other=-1)
        onehot = (slots[:, None] == keys[None, :]).to(tl.float32)
        vals = tl.load(values_ptr + rows[:, None] * dim + cols[None, :], mask=(rows[:, None] < n) & (cols[None, :] < dim), other=0.0)
        acc += tl.dot(onehot, vals, input_precision="ieee")
    mask = (slots[:, None] < buckets) & (cols[None, :] < dim)
    tl.atomic_add(out_ptr + slots[:, None] * dim + cols[None, :], acc, mask=mask, sem="relaxed")
"""


def _accumulate_args(sizes: Sizes, with_buckets: bool = False) -> tuple[Any, ...]:
    return ("values", "keys", "out", i32(sizes["n"]), i32(sizes["dim"])) + ((i32(sizes["buckets"]),) if with_buckets else ())


def _zeroed(launches: list[Launch]) -> list[Launch]:
    """Atomics add into out, so each call clears it first."""
    return [Launch(ZERO, grid1(1), ("out",)), *launches]


def _zeroed_launch(kernel: str, args, blocks, threads: int):
    """memkit.one_launch after clearing out."""
    single = one_launch(kernel, args, blocks, threads)
    return lambda sizes: _zeroed(single(sizes))


def _shared_partial_fits(tile: int):
    return lambda s: None if s["buckets"] * tile * 4 <= MAX_SHARED_BYTES else "buckets x TILE sums do not fit shared memory"


def accumulate_variants() -> Iterable[Variant]:
    for params in product({"block": [128, 512], "restrict": [True, False], "grid_stride": [False, True]}):
        block, grid_stride = params["block"], params["grid_stride"]
        full_grid = lambda s, block=block: cdiv(s["n"] * s["dim"], block)
        resident = lambda s, block=block: resident_blocks(cdiv(s["n"] * s["dim"], block), THREADS_PER_SM // block)
        yield Variant(
            "cuda-atomic-element",
            "cuda",
            params,
            _accumulate_element(params["restrict"], grid_stride),
            _zeroed_launch("accumulate_rows", _accumulate_args, resident if grid_stride else full_grid, block),
        )
    warp_row_settings = [
        *product({"vector": [1, 2, 4], "warps": [4], "rows_per_warp": [1, 8]}),
        *around({"vector": 4, "warps": 4, "rows_per_warp": 1}, warps=[1, 8]),
    ]
    for params in warp_row_settings:
        vector, warps, rows_per_warp = params["vector"], params["warps"], params["rows_per_warp"]
        yield Variant(
            "cuda-warp-row",
            "cuda",
            params,
            _accumulate_warp_row(vector, warps, rows_per_warp),
            _zeroed_launch("accumulate_rows", _accumulate_args, lambda s, rows=warps * rows_per_warp: cdiv(s["n"], rows), 32 * warps),
            unsupported=unsupported(None, divisible("dim", vector)),
        )
    shared_settings = [
        *product({"tile": [32], "row_threads": [1, 4, 8], "chunk": [256, 2048]}),
        *around({"tile": 64, "row_threads": 4, "chunk": 2048}, row_threads=[1]),
    ]
    for params in shared_settings:
        tile, row_threads, chunk = params["tile"], params["row_threads"], params["chunk"]

        def launches(sizes: Sizes, tile=tile, row_threads=row_threads, chunk=chunk) -> list[Launch]:
            grid = (cdiv(sizes["dim"], tile), cdiv(sizes["n"], chunk), 1)
            return _zeroed(
                [
                    Launch(
                        "accumulate_rows",
                        grid,
                        _accumulate_args(sizes, True),
                        (tile, row_threads, 1),
                        shared_bytes=sizes["buckets"] * tile * 4,
                    )
                ]
            )

        yield Variant(
            "cuda-shared-partial",
            "cuda",
            params,
            _accumulate_shared(tile, row_threads, chunk),
            launches,
            unsupported=_shared_partial_fits(tile),
        )
    for params in product({"vector": [1, 2, 4], "warps": [2, 8]}):
        vector, warps = params["vector"], params["warps"]
        yield Variant(
            "cuda-warp-aggregate",
            "cuda",
            params,
            _accumulate_warp_aggregate(vector, warps),
            _zeroed_launch("accumulate_rows", _accumulate_args, lambda s, warps=warps: cdiv(s["n"], 32 * warps), 32 * warps),
            unsupported=unsupported(None, divisible("dim", vector)),
        )
    for params in product({"copies": [33, 132, 528], "threads": [64, 128]}):
        yield _privatised_variant(params)
    triton_tiles = [
        *product({"BLOCK_N": [1, 8, 32], "BLOCK_D": [64], "num_warps": [4]}),
        *product({"BLOCK_N": [8], "BLOCK_D": [32, 128], "num_warps": [4]}),
        *product({"BLOCK_N": [8], "BLOCK_D": [64], "num_warps": [1, 8]}),
    ]
    for params in triton_tiles:
        yield _accumulate_triton_atomic(params)
    for params in [
        *product({"BLOCK_N": [32, 64], "BLOCK_D": [32, 64], "programs_per_sm": [4]}),
        {"BLOCK_N": 32, "BLOCK_D": 64, "programs_per_sm": 1},
    ]:
        yield _accumulate_triton_onehot(params)


def _privatised_variant(params: dict[str, Any]) -> Variant:
    copies, threads = params["copies"], params["threads"]

    def launches(sizes: Sizes) -> list[Launch]:
        size = sizes["buckets"] * sizes["dim"]
        return [
            Launch(
                "accumulate_private",
                grid1(copies),
                ("values", "keys", "copies", i32(sizes["n"]), i32(sizes["dim"]), i32(sizes["buckets"])),
                block1(threads),
            ),
            Launch("sum_copies", grid1(cdiv(size, 256)), ("copies", "out", i32(copies), i32(size)), block1(256)),
        ]

    def too_big(sizes: Sizes) -> str | None:
        return None if copies * sizes["buckets"] * sizes["dim"] * 4 <= PRIVATE_MAX_BYTES else "the per-block copies take too much memory"

    return Variant(
        "cuda-privatised",
        "cuda",
        params,
        ACCUMULATE_PRIVATISED,
        launches,
        scratch=lambda s: {"copies": TensorSpec((copies, s["buckets"], s["dim"]), "f32")},
        unsupported=too_big,
    )


def _accumulate_triton_atomic(params: dict[str, Any]) -> Variant:
    block_n, block_d = params["BLOCK_N"], params["BLOCK_D"]

    def launches(sizes: Sizes) -> list[Launch]:
        grid = (cdiv(sizes["n"], block_n), cdiv(sizes["dim"], block_d), 1)
        return _zeroed(
            [
                Launch(
                    "accumulate_rows",
                    grid,
                    _accumulate_args(sizes),
                    constexprs={"BLOCK_N": block_n, "BLOCK_D": block_d},
                    num_warps=params["num_warps"],
                )
            ]
        )

    return Variant("triton-atomic", "triton", params, ACCUMULATE_TRITON_ATOMIC, launches)


def _accumulate_triton_onehot(params: dict[str, Any]) -> Variant:
    block_n, block_d, per_sm = params["BLOCK_N"], params["BLOCK_D"], params["programs_per_sm"]

    def launches(sizes: Sizes) -> list[Launch]:
        column_tiles = cdiv(sizes["dim"], block_d)
        programs = max(1, min(cdiv(sizes["n"], block_n), SM_COUNT * per_sm // column_tiles))
        constexprs = {"BUCKETS": max(16, next_pow2(sizes["buckets"])), "BLOCK_N": block_n, "BLOCK_D": block_d}
        return _zeroed(
            [Launch("accumulate_rows", (programs, column_tiles, 1), _accumulate_args(sizes, True), constexprs=constexprs, num_warps=4)]
        )

    def too_many(sizes: Sizes) -> str | None:
        return None if sizes["buckets"] <= ONEHOT_MAX_BUCKETS else f"buckets > {ONEHOT_MAX_BUCKETS}: the accumulator leaves the registers"

    return Variant("triton-onehot", "triton", params, ACCUMULATE_TRITON_ONEHOT, launches, unsupported=too_many)


def _accumulate_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    values = inputs["values"]
    out = torch.zeros((sizes["buckets"], sizes["dim"]), dtype=values.dtype, device=values.device)
    return {"out": out.index_add_(0, inputs["keys"], values)}


ACCUMULATE_ROWS = Op(
    name="accumulate_rows",
    bound="memory",
    sizes=ACCUMULATE_SIZES,
    inputs=lambda s: {"values": TensorSpec((s["n"], s["dim"])), "keys": TensorSpec((s["n"],), "i64", f"randint:0:{s['buckets']}")},
    outputs=lambda s: {"out": TensorSpec((s["buckets"], s["dim"]))},
    reference=_accumulate_reference,
    reference_code="def reference(values, keys, buckets):\n    out = torch.zeros(buckets, values.shape[1], device=values.device)\n    return out.index_add_(0, keys, values)\n",
    variants=accumulate_variants,
    # 8192 randn additions per element at 8 buckets, in an order the atomics choose: two
    # fp32 orders differ by up to ~1.4e-4 (1 + |sum|) there (CPU check), so 1e-3 with margin.
    tolerance={"f32": 1e-3},
)

# --- keyed_max -------------------------------------------------------------------------------------

KEYED_MAX_SIZES = [
    {"n": 4096, "buckets": 8},
    {"n": 1 << 20, "buckets": 1 << 18},
    {"n": 1 << 24, "buckets": 8},
    {"n": 1 << 24, "buckets": 4096},
    {"n": 1 << 24, "buckets": 1 << 22},
]
FILL_BLOCK = 256
KEYED_ONEHOT_MAX_BUCKETS = 16  # BUCKETS x BLOCK compares per step stay in registers

ATOMIC_MAX = {
    "int-sign": ATOMIC_MAX_FLOAT,
    "cas": """
// CAS loop: always swaps in the larger of the two, even when the stored value already wins
__device__ __forceinline__ void atomic_max_float(float* address, float v) {
    int* bits = reinterpret_cast<int*>(address);
    int old = *bits, assumed;
    do {
        assumed = old;
        old = atomicCAS(bits, assumed, __float_as_int(fmaxf(v, __int_as_float(assumed))));
    } while (old != assumed);
}
""",
    "cas-early-exit": """
// CAS loop that gives up as soon as the stored value is at least v (the stored value only grows)
__device__ __forceinline__ void atomic_max_float(float* address, float v) {
    int* bits = reinterpret_cast<int*>(address);
    int old = *bits;
    while (v > __int_as_float(old)) {
        int assumed = old;
        old = atomicCAS(bits, assumed, __float_as_int(v));
        if (old == assumed) break;
    }
}
""",
}

FILL_NEG_INF = f"""
extern "C" __global__ void fill_neg_inf(float* out, int buckets) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < buckets) out[i] = {NEG_INF};
}}
"""


def _keyed_signature(restrict: bool = True, extra: str = "") -> str:
    return (
        f'extern "C" __global__ void keyed_max({cuda_pointer("float", "values", restrict)}, {cuda_pointer("long long", "keys", restrict)}, '
        f"{cuda_pointer('float', 'out', restrict, False)}, int n{extra})"
    )


def _keyed_atomic(atomic: str, restrict: bool) -> str:
    return f"""{CUDA_HEADER}{ATOMIC_MAX[atomic]}{FILL_NEG_INF}
{_keyed_signature(restrict)} {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) atomic_max_float(&out[keys[idx]], values[idx]);
}}
"""


def _keyed_encoded(items: int) -> str:
    return f"""{CUDA_HEADER}
#define ITEMS {items}

// order-preserving key: flip every bit of negatives, only the sign bit of the rest; 0 = empty
__device__ __forceinline__ unsigned int order_key(float v) {{
    unsigned int b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}}

extern "C" __global__ void keyed_max(const float* __restrict__ values, const long long* __restrict__ keys, unsigned int* __restrict__ best, int n) {{
    int first = blockIdx.x * blockDim.x * ITEMS + threadIdx.x;
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) {{
        int i = first + k * blockDim.x;
        if (i < n) atomicMax(&best[keys[i]], order_key(values[i]));
    }}
}}

extern "C" __global__ void decode(const unsigned int* __restrict__ best, float* __restrict__ out, int buckets) {{
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= buckets) return;
    unsigned int e = best[b];
    out[b] = e == 0u ? {NEG_INF} : __uint_as_float((e & 0x80000000u) ? (e & 0x7fffffffu) : ~e);
}}
"""


def _keyed_shared(atomic: str) -> str:
    return f"""{CUDA_HEADER}{ATOMIC_MAX[atomic]}{FILL_NEG_INF}
{_keyed_signature(extra=", int buckets")} {{
    extern __shared__ float local[];  // this block's maxima
    for (int b = threadIdx.x; b < buckets; b += blockDim.x) local[b] = {NEG_INF};
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) atomic_max_float(&local[keys[i]], values[i]);
    __syncthreads();
    for (int b = threadIdx.x; b < buckets; b += blockDim.x)
        if (local[b] != {NEG_INF}) atomic_max_float(&out[b], local[b]);
}}
"""


def _keyed_warp_match(atomic: str, aggregate: bool) -> str:
    if aggregate:
        update = """        // lanes holding the same key take the max of their values; the first of them writes it
        unsigned peers = __match_any_sync(0xffffffffu, key);
        float m = v;
        for (int s = 0; s < 32; ++s) {
            float other = __shfl_sync(0xffffffffu, v, s);
            if ((peers >> s) & 1u) m = fmaxf(m, other);
        }
        if (key >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) atomic_max_float(&out[key], m);"""
    else:
        update = "        if (key >= 0) atomic_max_float(&out[key], v);"
    return f"""{CUDA_HEADER}{ATOMIC_MAX[atomic]}{FILL_NEG_INF}
{_keyed_signature()} {{
    // `base` is the same for the whole block, so every lane runs the same iterations
    for (int base = blockIdx.x * blockDim.x; base < n; base += gridDim.x * blockDim.x) {{
        int i = base + threadIdx.x;
        long long key = i < n ? keys[i] : -1;
        float v = i < n ? values[i] : {NEG_INF};
{update}
    }}
}}
"""


KEYED_TRITON_FILL = """

@triton.jit
def fill_neg_inf(out_ptr, buckets, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.full([BLOCK], float("-inf"), tl.float32), mask=offsets < buckets)
"""


def _keyed_triton_atomic(sem: str) -> str:
    return f"""{TRITON_HEADER}{KEYED_TRITON_FILL}

@triton.jit
def keyed_max(values_ptr, keys_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    keys = tl.load(keys_ptr + offsets, mask=mask, other=0)
    vals = tl.load(values_ptr + offsets, mask=mask)
    tl.atomic_max(out_ptr + keys, vals, mask=mask, sem="{sem}")
"""


KEYED_TRITON_ONEHOT = f"""{TRITON_HEADER}{KEYED_TRITON_FILL}

@triton.jit
def keyed_max(values_ptr, keys_ptr, out_ptr, n, buckets, BUCKETS: tl.constexpr, BLOCK: tl.constexpr):
    # each program walks every num_programs-th block and keeps one running max per bucket
    slots = tl.arange(0, BUCKETS)
    best = tl.full([BUCKETS], float("-inf"), tl.float32)
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < n
        keys = tl.load(keys_ptr + offsets, mask=mask, other=-1)
        vals = tl.load(values_ptr + offsets, mask=mask, other=float("-inf"))
        hit = slots[:, None] == keys[None, :]
        best = tl.maximum(best, tl.max(tl.where(hit, vals[None, :], float("-inf")), axis=1))
    tl.atomic_max(out_ptr + slots, best, mask=(slots < buckets) & (best > float("-inf")), sem="relaxed")
"""


def _keyed_args(sizes: Sizes, with_buckets: bool = False) -> tuple[Any, ...]:
    return ("values", "keys", "out", i32(sizes["n"])) + ((i32(sizes["buckets"]),) if with_buckets else ())


def _filled(language: str, sizes: Sizes, *launches: Launch) -> list[Launch]:
    """Maxima start from -inf, written by the variant's own fill kernel."""
    buckets = sizes["buckets"]
    if language == "cuda":
        fill = Launch("fill_neg_inf", grid1(cdiv(buckets, FILL_BLOCK)), ("out", i32(buckets)), block1(FILL_BLOCK))
    else:
        fill = Launch("fill_neg_inf", grid1(cdiv(buckets, 1024)), ("out", i32(buckets)), constexprs={"BLOCK": 1024}, num_warps=4)
    return [fill, *launches]


def keyed_max_variants() -> Iterable[Variant]:
    for params in [
        *product({"atomic": list(ATOMIC_MAX), "block": [256], "restrict": [True, False]}),
        *product({"atomic": list(ATOMIC_MAX), "block": [1024], "restrict": [False]}),
    ]:
        block = params["block"]
        yield Variant(
            "cuda-atomic",
            "cuda",
            params,
            _keyed_atomic(params["atomic"], params["restrict"]),
            lambda s, block=block: _filled("cuda", s, Launch("keyed_max", grid1(cdiv(s["n"], block)), _keyed_args(s), block1(block))),
        )
    for params in around({"block": 256, "items": 4}, block=[128, 512], items=[1, 16]):
        yield _encoded_variant(params)
    for params in product({"atomic": ["int-sign", "cas-early-exit"], "block": [256, 1024], "blocks_per_sm": [1, 2]}):
        block, per_sm = params["block"], params["blocks_per_sm"]
        yield Variant(
            "cuda-shared-private",
            "cuda",
            params,
            _keyed_shared(params["atomic"]),
            lambda s, block=block, per_sm=per_sm: _filled(
                "cuda",
                s,
                Launch(
                    "keyed_max",
                    grid1(resident_blocks(cdiv(s["n"], block), per_sm)),
                    _keyed_args(s, True),
                    block1(block),
                    shared_bytes=s["buckets"] * 4,
                ),
            ),
            unsupported=lambda s: None if s["buckets"] * 4 <= MAX_SHARED_BYTES else "the bins do not fit shared memory",
        )
    for params in product({"aggregate": [False, True], "atomic": ["int-sign", "cas-early-exit"], "blocks_per_sm": [2, 8]}):
        per_sm = params["blocks_per_sm"]
        yield Variant(
            "cuda-warp-match",
            "cuda",
            params,
            _keyed_warp_match(params["atomic"], params["aggregate"]),
            lambda s, per_sm=per_sm: _filled(
                "cuda", s, Launch("keyed_max", grid1(resident_blocks(cdiv(s["n"], 256), per_sm)), _keyed_args(s), block1(256))
            ),
        )
    for params in around({"BLOCK": 1024, "num_warps": 4, "sem": "relaxed"}, BLOCK=[256, 4096], num_warps=[1, 8], sem=["acq_rel"]):
        block = params["BLOCK"]
        yield Variant(
            "triton-atomic",
            "triton",
            params,
            _keyed_triton_atomic(params["sem"]),
            lambda s, block=block, warps=params["num_warps"]: _filled(
                "triton", s, Launch("keyed_max", grid1(cdiv(s["n"], block)), _keyed_args(s), constexprs={"BLOCK": block}, num_warps=warps)
            ),
        )
    for params in product({"BLOCK": [256, 1024], "programs_per_sm": [1, 4]}):
        yield _keyed_onehot_variant(params)


def _encoded_variant(params: dict[str, Any]) -> Variant:
    block, items = params["block"], params["items"]

    def launches(sizes: Sizes) -> list[Launch]:
        buckets = sizes["buckets"]
        return [
            Launch(ZERO, grid1(1), ("best",)),
            Launch("keyed_max", grid1(cdiv(sizes["n"], block * items)), ("values", "keys", "best", i32(sizes["n"])), block1(block)),
            Launch("decode", grid1(cdiv(buckets, FILL_BLOCK)), ("best", "out", i32(buckets)), block1(FILL_BLOCK)),
        ]

    return Variant(
        "cuda-encoded", "cuda", params, _keyed_encoded(items), launches, scratch=lambda s: {"best": TensorSpec((s["buckets"],), "i32")}
    )


def _keyed_onehot_variant(params: dict[str, Any]) -> Variant:
    block, per_sm = params["BLOCK"], params["programs_per_sm"]

    def launches(sizes: Sizes) -> list[Launch]:
        constexprs = {"BUCKETS": next_pow2(sizes["buckets"]), "BLOCK": block}
        return _filled(
            "triton",
            sizes,
            Launch(
                "keyed_max",
                grid1(resident_blocks(cdiv(sizes["n"], block), per_sm)),
                _keyed_args(sizes, True),
                constexprs=constexprs,
                num_warps=4,
            ),
        )

    def too_many(sizes: Sizes) -> str | None:
        return (
            None
            if sizes["buckets"] <= KEYED_ONEHOT_MAX_BUCKETS
            else f"buckets > {KEYED_ONEHOT_MAX_BUCKETS}: BUCKETS x BLOCK compares leave the registers"
        )

    return Variant("triton-onehot-max", "triton", params, KEYED_TRITON_ONEHOT, launches, unsupported=too_many)


def _keyed_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    values = inputs["values"]
    out = torch.full((sizes["buckets"],), float("-inf"), dtype=values.dtype, device=values.device)
    return {"out": out.scatter_reduce_(0, inputs["keys"], values, "amax")}


KEYED_MAX = Op(
    name="keyed_max",
    bound="memory",
    sizes=KEYED_MAX_SIZES,
    inputs=lambda s: {"values": TensorSpec((s["n"],)), "keys": TensorSpec((s["n"],), "i64", f"randint:0:{s['buckets']}")},
    outputs=lambda s: {"out": TensorSpec((s["buckets"],))},
    reference=_keyed_reference,
    reference_code=(
        "def reference(values, keys, buckets):\n"
        "    out = torch.full((buckets,), float('-inf'), device=values.device)\n"
        "    return out.scatter_reduce_(0, keys, values, 'amax')\n"
    ),
    variants=keyed_max_variants,
    tolerance={"f32": 0.0},  # a max is exact whatever the order
)

OPS = [ACCUMULATE_ROWS, KEYED_MAX]
