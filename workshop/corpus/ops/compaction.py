"""Order-dependent scans: compact_positive (stream compaction) and rowwise_cummax (running max).

compact_positive keeps the elements of x (n values, fp32 and fp16) that are > 0, in their
order, followed by zeros up to n, and returns how many it kept (int32, shape (1,)). Every
output position must come out right, so the unordered atomic-counter compaction is left
out (compare_sorted would weaken the check of every ordered variant too). CUDA families:
- serial: one thread walks the whole array (the deliberately bad baseline), `__restrict__`
  on or off (without it the kept value is reloaded after each store);
- single block: one block walks the array tile by tile with a running count;
- three passes: count each tile (__syncthreads_count), scan the tile counts in one block,
  then scan each tile again and scatter with its offset (the tail past the count is zeroed
  by the same kernel). Both block families scan the flags three ways: a shared-memory
  Hillis-Steele or a warp-shuffle scan of per-thread counts (ITEMS consecutive elements per
  thread), or warp ballots with __popc (ITEMS coalesced steps of one element per thread);
  block size, ITEMS, `__restrict__`.
Triton: the same three passes with tl.sum / tl.cumsum per BLOCK tile (BLOCK, num_warps),
and a two-pass version whose scatter re-adds the counts of all earlier tiles in every
program (quadratic in the number of tiles) after clearing y with a ZERO launch.

rowwise_cummax: y[r, c] = max(x[r, :c+1]) over rows x cols, fp32 and fp16 (max is exact).
CUDA families: a thread per row (neighbouring threads a row apart), `__restrict__`; a warp
per row with a shuffle max-scan over chunks of 32*VEC and a carry between chunks; a block
per row scanning chunks of BLOCK*VEC with a shared-memory Hillis-Steele or a shuffle block
scan; for few long rows, a split over column chunks (chunk maxima first, then each chunk
scanned from the maximum of the chunks before it). Vector width = elements each thread
scans in registers (16-byte loads). Triton: whole rows in one tile with tl.associative_scan
and a max combine (ROWS rows per program), and a program per row looping over BLOCK-wide
chunks with a carry; num_warps. Sizes: tiny, many short rows, medium, few long rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from workshop.corpus.ops.memkit import one_launch, pack_struct, three_pass_launches, tile_count_scratch
from workshop.corpus.ops.rowkit import (
    NEG_INF,
    TRITON_HEADER,
    at_least,
    at_most,
    cuda_reductions,
    divisible,
    next_pow2,
    unsupported,
    vector_width,
)
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
    ZERO,
    Launch,
    Op,
    Sizes,
    TensorSpec,
    Variant,
    block1,
    cdiv,
    cuda_load_as_float,
    cuda_pointer,
    cuda_store_from_float,
    grid1,
    i32,
    product,
)

FULL = "0xffffffffu"


def _block_scan(style: str, ctype: str, combine: str, identity: str) -> str:
    """scan_op and block_exclusive(v, total): the combination of the values of the threads
    before this one (identity for thread 0), `total` that of the whole block (BLOCK threads).
    Ends with a barrier, so a loop may call it again on the same shared memory."""
    head = f"\n__device__ __forceinline__ {ctype} scan_op({ctype} a, {ctype} b) {{ return {combine}; }}\n"
    if style == "hillis-steele":
        return (
            head
            + f"""
__device__ __forceinline__ {ctype} block_exclusive({ctype} v, {ctype}& total) {{
    __shared__ {ctype} s[2][BLOCK];
    int t = threadIdx.x, cur = 0;
    s[0][t] = v;
    __syncthreads();
    for (int off = 1; off < BLOCK; off <<= 1) {{
        s[cur ^ 1][t] = t >= off ? scan_op(s[cur][t - off], s[cur][t]) : s[cur][t];
        cur ^= 1;
        __syncthreads();
    }}
    {ctype} excl = t > 0 ? s[cur][t - 1] : {identity};
    total = s[cur][BLOCK - 1];
    __syncthreads();
    return excl;
}}
"""
        )
    return (
        head
        + f"""
__device__ __forceinline__ {ctype} warp_inclusive({ctype} v) {{
    int lane = threadIdx.x & 31;
    #pragma unroll
    for (int off = 1; off < 32; off <<= 1) {{
        {ctype} other = __shfl_up_sync({FULL}, v, off);
        if (lane >= off) v = scan_op(other, v);
    }}
    return v;
}}

__device__ __forceinline__ {ctype} block_exclusive({ctype} v, {ctype}& total) {{
    __shared__ {ctype} warp_totals[BLOCK / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    {ctype} incl = warp_inclusive(v);
    {ctype} excl = __shfl_up_sync({FULL}, incl, 1);
    if (lane == 0) excl = {identity};
    if (lane == 31) warp_totals[warp] = incl;
    __syncthreads();
    if (warp == 0) {{
        {ctype} w = warp_inclusive(lane < BLOCK / 32 ? warp_totals[lane] : {identity});
        if (lane < BLOCK / 32) warp_totals[lane] = w;
    }}
    __syncthreads();
    if (warp > 0) excl = scan_op(warp_totals[warp - 1], excl);
    total = warp_totals[BLOCK / 32 - 1];
    __syncthreads();
    return excl;
}}
"""
    )


# --- compact_positive ------------------------------------------------------------------------------

COMPACT_SIZES = [
    {"n": 1000, "dtype": "f32"},
    {"n": 1_000_000, "dtype": "f32"},
    {"n": 1 << 24, "dtype": "f32"},
    {"n": 1 << 26, "dtype": "f32"},
    {"n": 1_000_000, "dtype": "f16"},
    {"n": 1 << 24, "dtype": "f16"},
]
SCAN_STYLES = ("hillis-steele", "shuffle", "ballot")
SERIAL_MAX_N = 1 << 20  # one thread over more takes tens of milliseconds
SINGLE_BLOCK_MAX_N = 1 << 24


def _compact_prelude(dtype: str, block: int, items: int) -> str:
    return f"""{CUDA_HEADER}
#define BLOCK {block}
#define ITEMS {items}
#define TILE (BLOCK * ITEMS)
#define T {CUDA_TYPES[dtype]}
#define KEEP(v) ({cuda_load_as_float(dtype, "v")} > 0.0f)
#define ZERO_T {cuda_store_from_float(dtype, "0.0f")}
"""


def _compact_tile(scan: str, restrict: bool) -> str:
    """compact_tile: writes the kept elements of x[base, base + TILE) to y from `out` on, returns how many."""
    signature = f"__device__ int compact_tile({cuda_pointer('T', 'x', restrict)}, {cuda_pointer('T', 'y', restrict, False)}, int n, int base, int out)"
    if scan == "ballot":
        return f"""
// ITEMS steps of one element per thread (coalesced); a ballot per warp finds each kept element's slot
{signature} {{
    __shared__ int warp_counts[BLOCK / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int total = 0;
    for (int k = 0; k < ITEMS; ++k) {{
        int i = base + k * BLOCK + threadIdx.x;
        T v;
        bool keep = false;
        if (i < n) {{
            v = x[i];
            keep = KEEP(v);
        }}
        unsigned ballot = __ballot_sync({FULL}, keep);
        if (lane == 0) warp_counts[warp] = __popc(ballot);
        __syncthreads();
        int before = 0, step = 0;
        for (int w = 0; w < BLOCK / 32; ++w) {{
            int c = warp_counts[w];
            if (w < warp) before += c;
            step += c;
        }}
        if (keep) y[out + total + before + __popc(ballot & ((1u << lane) - 1))] = v;
        total += step;
        __syncthreads();
    }}
    return total;
}}
"""
    return (
        _block_scan(scan, "int", "a + b", "0")
        + f"""
// each thread owns ITEMS consecutive elements; a block scan of the per-thread counts gives its first slot
{signature} {{
    T v[ITEMS];
    bool keep[ITEMS];
    int mine = 0;
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) {{
        int i = base + threadIdx.x * ITEMS + k;
        keep[k] = false;
        if (i < n) {{
            v[k] = x[i];
            keep[k] = KEEP(v[k]);
        }}
        mine += keep[k];
    }}
    int total;
    int slot = out + block_exclusive(mine, total);
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k)
        if (keep[k]) y[slot++] = v[k];
    return total;
}}
"""
    )


def _compact_serial(dtype: str, restrict: bool) -> str:
    return f"""{_compact_prelude(dtype, 1, 1)}
// launched as <<<1, 1>>>
extern "C" __global__ void compact_positive({cuda_pointer("T", "x", restrict)}, {cuda_pointer("T", "y", restrict, False)}, {cuda_pointer("int", "count", restrict, False)}, int n) {{
    int kept = 0;
    for (int i = 0; i < n; ++i)
        if (KEEP(x[i])) y[kept++] = x[i];
    count[0] = kept;
    for (int i = kept; i < n; ++i) y[i] = ZERO_T;
}}
"""


def _compact_single_block(dtype: str, scan: str, block: int, items: int) -> str:
    return f"""{_compact_prelude(dtype, block, items)}{_compact_tile(scan, True)}
extern "C" __global__ void compact_positive(const T* __restrict__ x, T* __restrict__ y, int* __restrict__ count, int n) {{
    int kept = 0;
    for (int base = 0; base < n; base += TILE) kept += compact_tile(x, y, n, base, kept);
    for (int i = kept + threadIdx.x; i < n; i += BLOCK) y[i] = ZERO_T;
    if (threadIdx.x == 0) count[0] = kept;
}}
"""


def _compact_three_pass(dtype: str, scan: str, block: int, items: int, restrict: bool) -> str:
    """count_tiles, scan_tiles (one block), scatter_tiles; ballot tiles scan the counts with shuffles."""
    counts_scan = _block_scan("shuffle", "int", "a + b", "0") if scan == "ballot" else ""
    x, y = cuda_pointer("T", "x", restrict), cuda_pointer("T", "y", restrict, False)
    return f"""{_compact_prelude(dtype, block, items)}{_compact_tile(scan, restrict)}{counts_scan}
extern "C" __global__ void count_tiles({x}, {cuda_pointer("int", "tile_counts", restrict, False)}, int n) {{
    int base = blockIdx.x * TILE;
    int total = 0;
    for (int k = 0; k < ITEMS; ++k) {{
        int i = base + k * BLOCK + threadIdx.x;
        total += __syncthreads_count(i < n && KEEP(x[i]));
    }}
    if (threadIdx.x == 0) tile_counts[blockIdx.x] = total;
}}

// one block: exclusive offsets of the tiles, and the total into count
extern "C" __global__ void scan_tiles({cuda_pointer("int", "tile_counts", restrict)}, {cuda_pointer("int", "tile_offsets", restrict, False)}, {cuda_pointer("int", "count", restrict, False)}, int tiles) {{
    int carry = 0;
    for (int base = 0; base < tiles; base += BLOCK) {{
        int j = base + threadIdx.x;
        int c = j < tiles ? tile_counts[j] : 0;
        int total;
        int excl = block_exclusive(c, total);
        if (j < tiles) tile_offsets[j] = carry + excl;
        carry += total;
    }}
    if (threadIdx.x == 0) count[0] = carry;
}}

extern "C" __global__ void scatter_tiles({x}, {y}, {cuda_pointer("int", "tile_offsets", restrict)}, {cuda_pointer("int", "count", restrict)}, int n) {{
    int base = blockIdx.x * TILE;
    compact_tile(x, y, n, base, tile_offsets[blockIdx.x]);
    int kept = count[0];
    int end = min(n, base + TILE);
    for (int i = base + threadIdx.x; i < end; i += BLOCK)
        if (i >= kept) y[i] = ZERO_T;
}}
"""


COUNT_TILES_TRITON = f"""{TRITON_HEADER}

@triton.jit
def count_tiles(x_ptr, tile_counts_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + i, mask=i < n, other=0.0)
    tl.store(tile_counts_ptr + tl.program_id(0), tl.sum((v > 0).to(tl.int32), axis=0))
"""

COMPACT_TRITON_THREE_PASS = f"""{COUNT_TILES_TRITON}

@triton.jit
def scan_tiles(tile_counts_ptr, tile_offsets_ptr, count_ptr, tiles, BLOCK: tl.constexpr):
    # one program: exclusive offsets of the tiles, carried from step to step
    carry = 0
    for start in range(0, tiles, BLOCK):
        j = start + tl.arange(0, BLOCK)
        c = tl.load(tile_counts_ptr + j, mask=j < tiles, other=0)
        tl.store(tile_offsets_ptr + j, carry + tl.cumsum(c, axis=0) - c, mask=j < tiles)
        carry += tl.sum(c, axis=0)
    tl.store(count_ptr, carry)


@triton.jit
def scatter_tiles(x_ptr, y_ptr, tile_offsets_ptr, count_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    i = pid * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    v = tl.load(x_ptr + i, mask=mask, other=0.0)
    keep = v > 0
    slot = tl.load(tile_offsets_ptr + pid) + tl.cumsum(keep.to(tl.int32), axis=0) - 1
    tl.store(y_ptr + slot, v, mask=keep)
    tl.store(y_ptr + i, tl.zeros_like(v), mask=mask & (i >= tl.load(count_ptr)))
"""

COMPACT_TRITON_RESUM = f"""{COUNT_TILES_TRITON}

@triton.jit
def scatter_tiles(x_ptr, y_ptr, tile_counts_ptr, count_ptr, n, BLOCK: tl.constexpr):
    # every program adds up the counts of all tiles before it (y was cleared beforehand)
    pid = tl.program_id(0)
    offset = 0
    for start in range(0, pid, BLOCK):
        j = start + tl.arange(0, BLOCK)
        offset += tl.sum(tl.load(tile_counts_ptr + j, mask=j < pid, other=0), axis=0)
    i = pid * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + i, mask=i < n, other=0.0)
    keep = (v > 0).to(tl.int32)
    tl.store(y_ptr + offset + tl.cumsum(keep, axis=0) - 1, v, mask=keep != 0)
    if pid == tl.num_programs(0) - 1:
        tl.store(count_ptr, offset + tl.sum(keep, axis=0))
"""


THREE_PASS_KERNELS = ("count_tiles", "scan_tiles", "scatter_tiles")
TILE_COUNTS = ("tile_counts", "tile_offsets")


def _single_launch(s: Sizes, block: int) -> list[Launch]:
    return [Launch("compact_positive", grid1(1), ("x", "y", "count", i32(s["n"])), block1(block))]


def compact_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"  # fp16 gets a sample of each family
        for params in product({"dtype": [dtype], "restrict": [True, False]}):
            yield Variant(
                "cuda-serial",
                "cuda",
                params,
                _compact_serial(dtype, params["restrict"]),
                lambda s: _single_launch(s, 1),
                unsupported=unsupported(dtype, at_most("n", SERIAL_MAX_N, "a serial pass is too slow")),
            )
        for params in product({"dtype": [dtype], "scan": list(SCAN_STYLES), "block": [256, 1024] if full else [1024], "items": [4]}):
            block = params["block"]
            yield Variant(
                "cuda-single-block",
                "cuda",
                params,
                _compact_single_block(dtype, params["scan"], block, params["items"]),
                lambda s, block=block: _single_launch(s, block),
                unsupported=unsupported(dtype, at_most("n", SINGLE_BLOCK_MAX_N, "one block over more is too slow")),
            )
        axes = [{"block": [128, 512], "items": [1, 4, 8], "restrict": [True]}, {"block": [128], "items": [1, 4], "restrict": [False]}]
        if not full:
            axes = [{"block": [256], "items": [4, 8], "restrict": [True]}]
        for grid in axes:
            for params in product({"dtype": [dtype], "scan": list(SCAN_STYLES), **grid}):
                block, tile = params["block"], params["block"] * params["items"]
                yield Variant(
                    "cuda-three-pass",
                    "cuda",
                    params,
                    _compact_three_pass(dtype, params["scan"], block, params["items"], params["restrict"]),
                    three_pass_launches(THREE_PASS_KERNELS, TILE_COUNTS, tile, block=block),
                    scratch=tile_count_scratch(TILE_COUNTS, tile),
                    unsupported=unsupported(dtype),
                )
        for params in product(
            {"dtype": [dtype], "BLOCK": [256, 1024, 4096] if full else [1024, 4096], "num_warps": [4, 8] if full else [4]}
        ):
            tile = params["BLOCK"]
            yield Variant(
                "triton-three-pass",
                "triton",
                params,
                COMPACT_TRITON_THREE_PASS,
                three_pass_launches(THREE_PASS_KERNELS, TILE_COUNTS, tile, num_warps=params["num_warps"]),
                scratch=tile_count_scratch(TILE_COUNTS, tile),
                unsupported=unsupported(dtype),
            )
        for params in product({"dtype": [dtype], "BLOCK": [1024, 4096] if full else [4096], "num_warps": [4]}):
            yield _resum_variant(params)


def _resum_variant(params: dict[str, Any]) -> Variant:
    tile, options = params["BLOCK"], {"constexprs": {"BLOCK": params["BLOCK"]}, "num_warps": params["num_warps"]}

    def launches(s: Sizes) -> list[Launch]:
        tiles = cdiv(s["n"], tile)
        return [
            Launch(ZERO, grid1(1), ("y",)),
            Launch("count_tiles", grid1(tiles), ("x", "tile_counts", i32(s["n"])), **options),
            Launch("scatter_tiles", grid1(tiles), ("x", "y", "tile_counts", "count", i32(s["n"])), **options),
        ]

    return Variant(
        "triton-resum-offsets",
        "triton",
        params,
        COMPACT_TRITON_RESUM,
        launches,
        scratch=lambda s: {"tile_counts": TensorSpec((cdiv(s["n"], tile),), "i32")},
        unsupported=unsupported(params["dtype"]),
    )


def _compact_reference(torch: Any, inputs: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    x = inputs["x"]
    kept = x[x > 0]
    y = torch.zeros_like(x)
    y[: kept.numel()] = kept
    return {"y": y, "count": torch.tensor([kept.numel()], dtype=torch.int32, device=x.device)}


COMPACT_POSITIVE = Op(
    name="compact_positive",
    bound="memory",
    sizes=COMPACT_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["n"],), s["dtype"]), "count": TensorSpec((1,), "i32")},
    reference=_compact_reference,
    reference_code=(
        "def reference(x):\n"
        "    kept = x[x > 0]\n"
        "    y = torch.zeros_like(x)\n"
        "    y[:kept.numel()] = kept\n"
        "    return y, torch.tensor([kept.numel()], dtype=torch.int32, device=x.device)\n"
    ),
    variants=compact_variants,
)

# --- rowwise_cummax --------------------------------------------------------------------------------

CUMMAX_SIZES = [
    {"rows": 10, "cols": 100, "dtype": "f32"},
    {"rows": 65536, "cols": 64, "dtype": "f32"},
    {"rows": 8192, "cols": 1024, "dtype": "f32"},
    {"rows": 16, "cols": 1 << 18, "dtype": "f32"},
    {"rows": 65536, "cols": 64, "dtype": "f16"},
    {"rows": 8192, "cols": 1024, "dtype": "f16"},
]
SERIAL_MAX_COLS = 8192  # a thread walking a longer row alone takes too long


def _cummax_prelude(dtype: str, defines: dict[str, int], vector: int) -> str:
    lines = [CUDA_HEADER] + [f"#define {name} {value}" for name, value in {**defines, "VEC": vector}.items()]
    lines.append(f"#define NEG_INF {NEG_INF}")
    if vector > 1:
        lines.append(pack_struct(dtype, vector))
    return "\n".join(lines) + "\n"


def _cummax_signature(dtype: str, restrict: bool = True) -> str:
    ctype = CUDA_TYPES[dtype]
    return f'extern "C" __global__ void rowwise_cummax({cuda_pointer(ctype, "x", restrict)}, {cuda_pointer(ctype, "y", restrict, False)}, int rows, int cols)'


def _load_running(dtype: str, vector: int, src: str, index: str, end: str = "cols") -> str:
    """v[VEC]: the running max of VEC elements of `src` from `index` (NEG_INF from `end` on)."""
    if vector == 1:
        return f"        float v[1] = {{{index} < {end} ? {cuda_load_as_float(dtype, f'{src}[{index}]')} : NEG_INF}};\n"
    return f"""        float v[VEC];
        if ({index} < {end}) {{
            Pack p = *reinterpret_cast<const Pack*>({src} + {index});
            #pragma unroll
            for (int e = 0; e < VEC; ++e) v[e] = {cuda_load_as_float(dtype, "p.v[e]")};
        }} else {{
            #pragma unroll
            for (int e = 0; e < VEC; ++e) v[e] = NEG_INF;
        }}
        #pragma unroll
        for (int e = 1; e < VEC; ++e) v[e] = fmaxf(v[e], v[e - 1]);
"""


def _store_running(dtype: str, vector: int, dst: str, index: str, before: str, end: str = "cols") -> str:
    """Stores max(v[e], before) at dst[index + e] (below `end`)."""
    if vector == 1:
        return f"        if ({index} < {end}) {dst}[{index}] = {cuda_store_from_float(dtype, f'fmaxf(v[0], {before})')};\n"
    return f"""        if ({index} < {end}) {{
            Pack p;
            #pragma unroll
            for (int e = 0; e < VEC; ++e) p.v[e] = {cuda_store_from_float(dtype, f"fmaxf(v[e], {before})")};
            *reinterpret_cast<Pack*>({dst} + {index}) = p;
        }}
"""


def _cummax_thread(dtype: str, restrict: bool) -> str:
    return f"""{CUDA_HEADER}
#define NEG_INF {NEG_INF}

// one thread per row: neighbouring threads read addresses a row apart
{_cummax_signature(dtype, restrict)} {{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float best = NEG_INF;
    for (int col = 0; col < cols; ++col) {{
        best = fmaxf(best, {cuda_load_as_float(dtype, "x[row * cols + col]")});
        y[row * cols + col] = {cuda_store_from_float(dtype, "best")};
    }}
}}
"""


def _cummax_warp(dtype: str, warps: int, vector: int, restrict: bool) -> str:
    ctype = CUDA_TYPES[dtype]
    return f"""{_cummax_prelude(dtype, {"WARPS": warps}, vector)}
// one warp per row: chunks of 32 * VEC, a shuffle max-scan of the lanes' maxima, a carry between chunks
{_cummax_signature(dtype, restrict)} {{
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= rows) return;
    const {ctype}* src = x + row * cols;
    {ctype}* dst = y + row * cols;
    float carry = NEG_INF;
    for (int base = 0; base < cols; base += 32 * VEC) {{
        int c = base + lane * VEC;
{_load_running(dtype, vector, "src", "c")}        float incl = v[VEC - 1];
        #pragma unroll
        for (int off = 1; off < 32; off <<= 1) {{
            float other = __shfl_up_sync({FULL}, incl, off);
            if (lane >= off) incl = fmaxf(incl, other);
        }}
        float before = __shfl_up_sync({FULL}, incl, 1);
        if (lane == 0) before = NEG_INF;
        before = fmaxf(before, carry);
{_store_running(dtype, vector, "dst", "c", "before")}        carry = fmaxf(carry, __shfl_sync({FULL}, incl, 31));
    }}
}}
"""


def _cummax_block(dtype: str, block: int, vector: int, scan: str) -> str:
    ctype = CUDA_TYPES[dtype]
    return f"""{_cummax_prelude(dtype, {"BLOCK": block}, vector)}{_block_scan(scan, "float", "fmaxf(a, b)", "NEG_INF")}
// one block per row: chunks of BLOCK * VEC, each thread scans VEC in registers, then the block scan
{_cummax_signature(dtype)} {{
    const {ctype}* src = x + blockIdx.x * cols;
    {ctype}* dst = y + blockIdx.x * cols;
    float carry = NEG_INF;
    for (int base = 0; base < cols; base += BLOCK * VEC) {{
        int c = base + threadIdx.x * VEC;
{_load_running(dtype, vector, "src", "c")}        float total;
        float before = fmaxf(block_exclusive(v[VEC - 1], total), carry);
{_store_running(dtype, vector, "dst", "c", "before")}        carry = fmaxf(carry, total);
    }}
}}
"""


def _cummax_split(dtype: str, chunk: int, vector: int) -> str:
    """Grid (chunks, rows) twice: chunk maxima, then each chunk scanned from the max of those before it."""
    ctype = CUDA_TYPES[dtype]
    return f"""{_cummax_prelude(dtype, {"BLOCK": 256, "CHUNK": chunk}, vector)}{cuda_reductions(("max",), "shuffle")}{_block_scan("shuffle", "float", "fmaxf(a, b)", "NEG_INF")}
extern "C" __global__ void chunk_max(const {ctype}* __restrict__ x, float* __restrict__ chunk_maxes, int rows, int cols) {{
    const {ctype}* src = x + blockIdx.y * cols;
    int end = min(cols, (int)(blockIdx.x + 1) * CHUNK);
    float m = NEG_INF;
    for (int c = blockIdx.x * CHUNK + threadIdx.x; c < end; c += BLOCK) m = fmaxf(m, {cuda_load_as_float(dtype, "src[c]")});
    m = block_max(m);
    if (threadIdx.x == 0) chunk_maxes[blockIdx.y * gridDim.x + blockIdx.x] = m;
}}

extern "C" __global__ void chunk_scan(const {ctype}* __restrict__ x, const float* __restrict__ chunk_maxes, {ctype}* __restrict__ y, int rows, int cols) {{
    float carry = NEG_INF;
    for (int j = threadIdx.x; j < blockIdx.x; j += BLOCK) carry = fmaxf(carry, chunk_maxes[blockIdx.y * gridDim.x + j]);
    carry = block_max(carry);
    const {ctype}* src = x + blockIdx.y * cols;
    {ctype}* dst = y + blockIdx.y * cols;
    int end = min(cols, (int)(blockIdx.x + 1) * CHUNK);
    for (int base = blockIdx.x * CHUNK; base < end; base += BLOCK * VEC) {{
        int c = base + threadIdx.x * VEC;
{_load_running(dtype, vector, "src", "c", "end")}        float total;
        float before = fmaxf(block_exclusive(v[VEC - 1], total), carry);
{_store_running(dtype, vector, "dst", "c", "before", "end")}        carry = fmaxf(carry, total);
    }}
}}
"""


CUMMAX_COMBINE = """

@triton.jit
def max_combine(a, b):
    return tl.maximum(a, b)
"""

CUMMAX_TRITON_ROWS = f"""{TRITON_HEADER}{CUMMAX_COMBINE}

@triton.jit
def rowwise_cummax(x_ptr, y_ptr, rows, cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # ROWS whole rows in one tile (BLOCK = cols rounded up to a power of two)
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    c = tl.arange(0, BLOCK)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    offsets = r[:, None] * cols + c[None, :]
    v = tl.load(x_ptr + offsets, mask=mask, other=float("-inf"))
    tl.store(y_ptr + offsets, tl.associative_scan(v, 1, max_combine), mask=mask)
"""

CUMMAX_TRITON_CHUNKED = f"""{TRITON_HEADER}{CUMMAX_COMBINE}

@triton.jit
def rowwise_cummax(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    carry = float("-inf")
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        mask = c < cols
        v = tl.load(x_ptr + row * cols + c, mask=mask, other=float("-inf")).to(tl.float32)
        scanned = tl.maximum(tl.associative_scan(v, 0, max_combine), carry)
        tl.store(y_ptr + row * cols + c, scanned.to(y_ptr.dtype.element_ty), mask=mask)
        carry = tl.maximum(carry, tl.max(v, axis=0))
"""


def _cummax_args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "y", i32(sizes["rows"]), i32(sizes["cols"]))


# One launch of rowwise_cummax: _row_launch(blocks, threads) gives `blocks(sizes)` blocks of `threads`.
_row_launch = partial(one_launch, "rowwise_cummax", _cummax_args)


def cummax_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        full = dtype == "f32"  # fp16 gets a sample of each family
        width = vector_width(dtype)
        for params in product({"dtype": [dtype], "block": [64, 256] if full else [256], "restrict": [True, False] if full else [True]}):
            block = params["block"]
            yield Variant(
                "cuda-thread-per-row",
                "cuda",
                params,
                _cummax_thread(dtype, params["restrict"]),
                _row_launch(lambda s, block=block: cdiv(s["rows"], block), block),
                unsupported=unsupported(dtype, at_most("cols", SERIAL_MAX_COLS, "a serial row is too slow")),
            )
        for params in product(
            {
                "dtype": [dtype],
                "warps": [4, 8] if full else [4],
                "vector": [1, width] if full else [2, width],
                "restrict": [True, False] if full else [True],
            }
        ):
            warps, vector = params["warps"], params["vector"]
            yield Variant(
                "cuda-warp-per-row",
                "cuda",
                params,
                _cummax_warp(dtype, warps, vector, params["restrict"]),
                _row_launch(lambda s, warps=warps: cdiv(s["rows"], warps), 32 * warps),
                unsupported=unsupported(dtype, divisible("cols", vector)),
            )
        for params in product(
            {
                "dtype": [dtype],
                "block": [128, 256, 1024] if full else [256],
                "vector": [1, width] if full else [2, width],
                "scan": ["hillis-steele", "shuffle"],
            }
        ):
            yield Variant(
                "cuda-block-per-row",
                "cuda",
                params,
                _cummax_block(dtype, params["block"], params["vector"], params["scan"]),
                _row_launch(lambda s: s["rows"], params["block"]),
                unsupported=unsupported(dtype, divisible("cols", params["vector"])),
            )
        if full:
            yield from _split_variants(dtype)
        for params in product({"dtype": [dtype], "ROWS": [1, 4, 16] if full else [1, 4], "num_warps": [1, 4] if full else [4]}):
            yield _cummax_rows_variant(params)
        for params in product({"dtype": [dtype], "BLOCK": [256, 1024, 4096] if full else [1024], "num_warps": [4, 8] if full else [4]}):
            yield Variant(
                "triton-chunked-carry",
                "triton",
                params,
                CUMMAX_TRITON_CHUNKED,
                lambda s, p=params: [
                    Launch("rowwise_cummax", grid1(s["rows"]), _cummax_args(s), constexprs={"BLOCK": p["BLOCK"]}, num_warps=p["num_warps"])
                ],
                unsupported=unsupported(dtype),
            )


def _split_variants(dtype: str) -> Iterable[Variant]:
    for params in product({"dtype": [dtype], "chunk": [2048, 8192, 32768], "vector": [1, vector_width(dtype)]}):
        chunk, vector = params["chunk"], params["vector"]
        yield Variant(
            "cuda-split-row",
            "cuda",
            params,
            _cummax_split(dtype, chunk, vector),
            lambda s, chunk=chunk: [
                Launch(
                    "chunk_max", (cdiv(s["cols"], chunk), s["rows"], 1), ("x", "chunk_maxes", i32(s["rows"]), i32(s["cols"])), block1(256)
                ),
                Launch(
                    "chunk_scan",
                    (cdiv(s["cols"], chunk), s["rows"], 1),
                    ("x", "chunk_maxes", "y", i32(s["rows"]), i32(s["cols"])),
                    block1(256),
                ),
            ],
            scratch=lambda s, chunk=chunk: {"chunk_maxes": TensorSpec((s["rows"] * cdiv(s["cols"], chunk),), "f32")},
            unsupported=unsupported(dtype, divisible("cols", vector), at_least("cols", 4 * chunk, "a row shorter than four chunks")),
        )


def _cummax_rows_variant(params: dict[str, Any]) -> Variant:
    rows, warps = params["ROWS"], params["num_warps"]

    def launches(sizes: Sizes) -> list[Launch]:
        constexprs = {"ROWS": rows, "BLOCK": next_pow2(sizes["cols"])}
        return [Launch("rowwise_cummax", grid1(cdiv(sizes["rows"], rows)), _cummax_args(sizes), constexprs=constexprs, num_warps=warps)]

    def too_big(sizes: Sizes) -> str | None:
        return "more than 128 elements per thread" if rows * next_pow2(sizes["cols"]) > 128 * 32 * warps else None

    return Variant("triton-rows-scan", "triton", params, CUMMAX_TRITON_ROWS, launches, unsupported=unsupported(params["dtype"], too_big))


ROWWISE_CUMMAX = Op(
    name="rowwise_cummax",
    bound="memory",
    sizes=CUMMAX_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["rows"], s["cols"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["rows"], s["cols"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": torch.cummax(inputs["x"], dim=1).values},
    reference_code="def reference(x):\n    return torch.cummax(x, dim=1).values\n",
    variants=cummax_variants,
)

OPS = [COMPACT_POSITIVE, ROWWISE_CUMMAX]
