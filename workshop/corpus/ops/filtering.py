"""Filtering with a data-dependent output length: nonzero_indices and unique_consecutive.

Both return a fixed shape, as compact_positive does: y (n, int32) holds the selected
entries in order followed by -1 up to n, and count (int32, shape (1,)) how many there are.
- nonzero_indices: the indices i with x[i] != 0 (torch.nonzero(x).flatten()), x int32 or
  fp32 of about half zeros.
- unique_consecutive: the values x[i] with i == 0 or x[i] != x[i-1]
  (torch.unique_consecutive(x)), x int32 in [0, 4): repeated neighbours dropped.
The unordered atomic-counter version is left out: order matters and it would need a sort.
CUDA families, shared by both operations:
- serial: one thread walks the array (the bad baseline), `__restrict__` on or off (without
  it x is reloaded after every store);
- single block: one block walks the array tile by tile with a running count;
- three passes: count each tile (__syncthreads_count), scan the tile counts in one block,
  then select each tile again and scatter from its offset (and pad past the count);
Tiles are selected two ways (`scan`): "shuffle", ITEMS consecutive elements per thread and
a warp-shuffle block scan of per-thread counts; "ballot", ITEMS coalesced steps of one
element per thread with __ballot_sync/__popc. Axes: block size, ITEMS, `__restrict__`;
nonzero_indices also int4/float4 loads of the ITEMS of a thread (`vector`), and
unique_consecutive reads the left neighbour x[i-1] from global memory again or from a tile
staged in shared memory with a one-element halo (`halo`; the shuffle style then reads it
with ITEMS-way bank conflicts).
Triton: the same three passes with tl.sum / tl.cumsum per BLOCK tile, and one program
walking the whole array with a carried count (BLOCK, num_warps). Sizes: 1000 elements
(launch-bound) to 2^25 (bandwidth-bound); nonzero_indices in int32 and a sample in fp32.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from workshop.corpus.ops.memkit import one_launch, three_pass_launches, tile_count_scratch
from workshop.corpus.ops.rowkit import TRITON_HEADER, at_most, unsupported
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
    Launch,
    Op,
    Sizes,
    TensorSpec,
    Variant,
    cuda_pointer,
    grid1,
    i32,
    product,
)

SERIAL_MAX_N = 1 << 20  # one thread over more takes tens of milliseconds
SINGLE_BLOCK_MAX_N = 1 << 24
ONE_PROGRAM_MAX_N = 1 << 20  # a Triton program steps through BLOCK elements at a time
SCANS = ("shuffle", "ballot")


@dataclass(frozen=True)
class Rule:
    """What one operation keeps and writes, as C expressions of element i (tile-local j).

    `keep` and `value` may read the staged shared tile (tile[j + 1] is x[i]); `count_keep`
    reads global memory only, for the counting passes that stage nothing.
    """

    name: str
    ctype: str
    count_keep: Callable[[str], str]
    keep: Callable[[str, str], str]
    value: Callable[[str, str], str]
    staged: bool = False
    vector: bool = False


def _nonzero_rule(dtype: str, vector: bool) -> Rule:
    return Rule("nonzero_indices", CUDA_TYPES[dtype], lambda i: f"x[{i}] != 0", lambda i, j: f"x[{i}] != 0", lambda i, j: i, vector=vector)


def _unique_rule(halo: str) -> Rule:
    def differs(i: str) -> str:
        return f"({i} == 0 || x[{i}] != x[{i} - 1])"

    if halo == "shared":
        return Rule(
            "unique_consecutive",
            "int",
            differs,
            lambda i, j: f"({i} == 0 || tile[{j} + 1] != tile[{j}])",
            lambda i, j: f"tile[{j} + 1]",
            staged=True,
        )
    return Rule("unique_consecutive", "int", differs, lambda i, j: differs(i), lambda i, j: f"x[{i}]")


# --- CUDA --------------------------------------------------------------------------------------


def _prelude(rule: Rule, block: int, items: int) -> str:
    return f"""{CUDA_HEADER}
#define BLOCK {block}
#define ITEMS {items}
#define TILE (BLOCK * ITEMS)
typedef {rule.ctype} T;
"""


BLOCK_EXCLUSIVE_SUM = """
// exclusive prefix sum over the block; *total gets the sum of all BLOCK values
__device__ int block_exclusive_sum(int v, int* total) {
    __shared__ int warp_sums[BLOCK / 32];
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    int incl = v;
    for (int d = 1; d < 32; d *= 2) {
        int up = __shfl_up_sync(0xffffffff, incl, d);
        if (lane >= d) incl += up;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int s = lane < BLOCK / 32 ? warp_sums[lane] : 0;
        for (int d = 1; d < 32; d *= 2) {
            int up = __shfl_up_sync(0xffffffff, s, d);
            if (lane >= d) s += up;
        }
        if (lane < BLOCK / 32) warp_sums[lane] = s;
    }
    __syncthreads();
    int before = warp > 0 ? warp_sums[warp - 1] : 0;
    *total = warp_sums[BLOCK / 32 - 1];
    __syncthreads();
    return before + incl - v;
}
"""


def _stage(rule: Rule) -> str:
    """Copies x[base - 1, base + TILE) into tile[] (the left halo first) for staged rules."""
    if not rule.staged:
        return ""
    return """    __shared__ T tile[TILE + 1];
    for (int j = threadIdx.x; j <= TILE; j += BLOCK) {
        int i = base - 1 + j;
        if (i >= 0 && i < n) tile[j] = x[i];
    }
    __syncthreads();
"""


def _vector_flags(rule: Rule) -> str:
    """keep[k] from ITEMS / 4 16-byte loads (scalar loads for the last, partial thread)."""
    vec = "int4" if rule.ctype == "int" else "float4"
    return f"""    if (first + ITEMS <= n) {{
        #pragma unroll
        for (int q = 0; q < ITEMS / 4; ++q) {{
            {vec} p = reinterpret_cast<const {vec}*>(x + first)[q];
            keep[4 * q] = p.x != 0;
            keep[4 * q + 1] = p.y != 0;
            keep[4 * q + 2] = p.z != 0;
            keep[4 * q + 3] = p.w != 0;
        }}
    }} else {{
        for (int k = 0; k < ITEMS; ++k) keep[k] = first + k < n && x[first + k] != 0;
    }}
"""


def _slot_in_tile(rule: Rule) -> str:
    """j, where the shuffle style's element k sits in the staged tile (nothing to stage: no j)."""
    return "        int j = threadIdx.x * ITEMS + k;\n" if rule.staged else ""


def _select_tile(rule: Rule, scan: str, restrict: bool) -> str:
    """select_tile: writes the selected entries of x[base, base + TILE) to y from `out` on; returns how many."""
    signature = f"__device__ int select_tile({cuda_pointer('T', 'x', restrict)}, {cuda_pointer('int', 'y', restrict, False)}, int n, int base, int out)"
    if scan == "ballot":
        return f"""
// ITEMS coalesced steps; each warp votes, lane 0 publishes its count
{signature} {{
{_stage(rule)}    __shared__ int warp_counts[BLOCK / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int written = 0;
    for (int k = 0; k < ITEMS; ++k) {{
        int j = k * BLOCK + threadIdx.x;
        int i = base + j;
        bool keep = i < n && {rule.keep("i", "j")};
        unsigned votes = __ballot_sync(0xffffffff, keep);
        if (lane == 0) warp_counts[warp] = __popc(votes);
        __syncthreads();
        int before = 0, step = 0;
        for (int w = 0; w < BLOCK / 32; ++w) {{
            if (w < warp) before += warp_counts[w];
            step += warp_counts[w];
        }}
        if (keep) y[out + written + before + __popc(votes & ((1u << lane) - 1))] = {rule.value("i", "j")};
        written += step;
        __syncthreads();
    }}
    return written;
}}
"""
    if rule.vector:
        flags = _vector_flags(rule)
    else:
        flags = f"""    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) {{
        int i = first + k;
{_slot_in_tile(rule)}        keep[k] = i < n && {rule.keep("i", "j")};
    }}
"""
    write_index = _slot_in_tile(rule) if rule.staged else "        int i = first + k;\n"
    # the staged tile is read again after the scan's last barrier: wait before it is restaged
    finish = "    __syncthreads();\n" if rule.staged else ""
    return f"""{BLOCK_EXCLUSIVE_SUM}
// each thread owns ITEMS consecutive elements and finds its first slot by a block scan of the counts
{signature} {{
{_stage(rule)}    int first = base + threadIdx.x * ITEMS;
    bool keep[ITEMS];
{flags}    int mine = 0;
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) mine += keep[k];
    int total;
    int pos = out + block_exclusive_sum(mine, &total);
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) {{
{write_index}        if (keep[k]) y[pos++] = {rule.value("i", "j")};
    }}
{finish}    return total;
}}
"""


def _count_tile(rule: Rule, restrict: bool) -> str:
    return f"""
// the block's number of selected elements in x[base, base + TILE), coalesced
__device__ int count_tile({cuda_pointer("T", "x", restrict)}, int n, int base) {{
    int total = 0;
    for (int k = 0; k < ITEMS; ++k) {{
        int i = base + k * BLOCK + threadIdx.x;
        total += __syncthreads_count(i < n && {rule.count_keep("i")});
    }}
    return total;
}}
"""


def _serial(rule: Rule, restrict: bool) -> str:
    return f"""{CUDA_HEADER}
// launched as <<<1, 1>>>
extern "C" __global__ void {rule.name}({cuda_pointer(rule.ctype, "x", restrict)}, {cuda_pointer("int", "y", restrict, False)}, {cuda_pointer("int", "count", restrict, False)}, int N) {{
    int k = 0;
    for (int i = 0; i < N; i++)
        if ({rule.count_keep("i")}) y[k++] = {rule.value("i", "i")};
    count[0] = k;
    for (int i = k; i < N; i++) y[i] = -1;
}}
"""


def _single_block(rule: Rule, scan: str, block: int, items: int) -> str:
    return f"""{_prelude(rule, block, items)}{_select_tile(rule, scan, True)}
extern "C" __global__ void {rule.name}(const T* __restrict__ x, int* __restrict__ y, int* __restrict__ count, int n) {{
    int kept = 0;
    for (int base = 0; base < n; base += TILE) kept += select_tile(x, y, n, base, kept);
    for (int i = kept + threadIdx.x; i < n; i += BLOCK) y[i] = -1;
    if (threadIdx.x == 0) count[0] = kept;
}}
"""


def _three_pass(rule: Rule, scan: str, block: int, items: int, restrict: bool) -> str:
    """count_blocks, scan_counts (one block), scatter_blocks."""
    scan_helper = BLOCK_EXCLUSIVE_SUM if scan == "ballot" else ""  # the shuffle tile brings its own
    x, y = cuda_pointer("T", "x", restrict), cuda_pointer("int", "y", restrict, False)
    return f"""{_prelude(rule, block, items)}{_count_tile(rule, restrict)}{_select_tile(rule, scan, restrict)}{scan_helper}
extern "C" __global__ void count_blocks({x}, {cuda_pointer("int", "block_counts", restrict, False)}, int n) {{
    int c = count_tile(x, n, blockIdx.x * TILE);
    if (threadIdx.x == 0) block_counts[blockIdx.x] = c;
}}

// one block: where each tile's entries start, and the total into count
extern "C" __global__ void scan_counts({cuda_pointer("int", "block_counts", restrict)}, {cuda_pointer("int", "block_offsets", restrict, False)}, {cuda_pointer("int", "count", restrict, False)}, int blocks) {{
    int carry = 0;
    for (int start = 0; start < blocks; start += BLOCK) {{
        int b = start + threadIdx.x;
        int c = b < blocks ? block_counts[b] : 0;
        int total;
        int before = block_exclusive_sum(c, &total);
        if (b < blocks) block_offsets[b] = carry + before;
        carry += total;
    }}
    if (threadIdx.x == 0) count[0] = carry;
}}

extern "C" __global__ void scatter_blocks({x}, {y}, {cuda_pointer("int", "block_offsets", restrict)}, {cuda_pointer("int", "count", restrict)}, int n) {{
    int base = blockIdx.x * TILE;
    select_tile(x, y, n, base, block_offsets[blockIdx.x]);
    int kept = count[0];
    int end = min(n, base + TILE);
    for (int i = base + threadIdx.x; i < end; i += BLOCK)
        if (i >= kept) y[i] = -1;
}}
"""


# --- Triton ------------------------------------------------------------------------------------

TRITON_NONZERO = """    v = tl.load(x_ptr + offs, mask=mask, other=0)
    keep = v != 0
    value = offs
"""
TRITON_UNIQUE = """    v = tl.load(x_ptr + offs, mask=mask, other=0)
    prev = tl.load(x_ptr + offs - 1, mask=mask & (offs > 0), other=0)
    keep = mask & ((offs == 0) | (v != prev))
    value = v
"""


def _indent(snippet: str) -> str:
    return "".join(f"    {line}\n" for line in snippet.splitlines())


def _triton_three_pass(select: str) -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def count_blocks(x_ptr, counts_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
{select}    tl.store(counts_ptr + tl.program_id(0), tl.sum(keep.to(tl.int32), axis=0))


@triton.jit
def scan_counts(counts_ptr, offsets_ptr, count_ptr, blocks, BLOCK: tl.constexpr):
    # one program: where each tile's entries start, carried from step to step
    carry = 0
    for start in range(0, blocks, BLOCK):
        b = start + tl.arange(0, BLOCK)
        c = tl.load(counts_ptr + b, mask=b < blocks, other=0)
        tl.store(offsets_ptr + b, carry + tl.cumsum(c, axis=0) - c, mask=b < blocks)
        carry += tl.sum(c, axis=0)
    tl.store(count_ptr, carry)


@triton.jit
def scatter_blocks(x_ptr, y_ptr, offsets_ptr, count_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
{select}    flags = keep.to(tl.int32)
    slot = tl.load(offsets_ptr + pid) + tl.cumsum(flags, axis=0) - 1
    tl.store(y_ptr + slot, value, mask=keep)
    tl.store(y_ptr + offs, tl.full([BLOCK], -1, tl.int32), mask=mask & (offs >= tl.load(count_ptr)))
"""


def _triton_one_program(name: str, select: str) -> str:
    return f"""{TRITON_HEADER}

@triton.jit
def {name}(x_ptr, y_ptr, count_ptr, n, BLOCK: tl.constexpr):
    # one program walks the whole array, carrying how many entries it has written
    kept = 0
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
{_indent(select)}        flags = keep.to(tl.int32)
        tl.store(y_ptr + kept + tl.cumsum(flags, axis=0) - 1, value, mask=keep)
        kept += tl.sum(flags, axis=0)
    tl.store(count_ptr, kept)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.full([BLOCK], -1, tl.int32), mask=(offs < n) & (offs >= kept))
"""


# --- launches and variants ---------------------------------------------------------------------


def _args(sizes: Sizes) -> tuple[Any, ...]:
    return ("x", "y", "count", i32(sizes["n"]))


THREE_PASS_KERNELS = ("count_blocks", "scan_counts", "scatter_blocks")
TILE_COUNTS = ("block_counts", "block_offsets")


def _cuda_variants(
    rule_for: Callable[[dict[str, Any]], Rule], dtype: str | None, grids: dict[str, list[dict[str, list[Any]]]]
) -> Iterable[Variant]:
    """The three CUDA families over the axis grids of each; `rule_for(params)` is the operation's rule."""
    only = unsupported(dtype)
    for params in (params for grid in grids["cuda-serial"] for params in product(grid)):
        rule = rule_for(params)
        yield Variant(
            "cuda-serial",
            "cuda",
            params,
            _serial(rule, params["restrict"]),
            one_launch(rule.name, _args, lambda s: 1, 1),
            unsupported=unsupported(dtype, at_most("n", SERIAL_MAX_N, "a serial pass is too slow")),
        )
    for params in (params for grid in grids["cuda-single-block"] for params in product(grid)):
        rule = rule_for(params)
        yield Variant(
            "cuda-single-block",
            "cuda",
            params,
            _single_block(rule, params["scan"], params["block"], params["items"]),
            one_launch(rule.name, _args, lambda s: 1, params["block"]),
            unsupported=unsupported(dtype, at_most("n", SINGLE_BLOCK_MAX_N, "one block over more is too slow")),
        )
    for params in (params for grid in grids["cuda-three-pass"] for params in product(grid)):
        block, tile = params["block"], params["block"] * params["items"]
        yield Variant(
            "cuda-three-pass",
            "cuda",
            params,
            _three_pass(rule_for(params), params["scan"], block, params["items"], params["restrict"]),
            three_pass_launches(THREE_PASS_KERNELS, TILE_COUNTS, tile, block=block),
            scratch=tile_count_scratch(TILE_COUNTS, tile),
            unsupported=only,
        )


def _triton_variants(
    name: str, select: str, base: dict[str, Any], dtype: str | None, three_pass: dict[str, list[Any]], one_program: dict[str, list[Any]]
) -> Iterable[Variant]:
    for params in product({**base, **three_pass}):
        tile = params["BLOCK"]
        yield Variant(
            "triton-three-pass",
            "triton",
            params,
            _triton_three_pass(select),
            three_pass_launches(THREE_PASS_KERNELS, TILE_COUNTS, tile, num_warps=params["num_warps"]),
            scratch=tile_count_scratch(TILE_COUNTS, tile),
            unsupported=unsupported(dtype),
        )
    for params in product({**base, **one_program}):
        yield Variant(
            "triton-one-program",
            "triton",
            params,
            _triton_one_program(name, select),
            lambda s, p=params: [Launch(name, grid1(1), _args(s), constexprs={"BLOCK": p["BLOCK"]}, num_warps=p["num_warps"])],
            unsupported=unsupported(dtype, at_most("n", ONE_PROGRAM_MAX_N, "one program over more is too slow")),
        )


def _reference_padded(torch: Any, selected: Any, n: int) -> dict[str, Any]:
    y = torch.full((n,), -1, dtype=torch.int32, device=selected.device)
    y[: selected.numel()] = selected.to(torch.int32)
    return {"y": y, "count": torch.tensor([selected.numel()], dtype=torch.int32, device=selected.device)}


def _outputs(sizes: Sizes) -> dict[str, TensorSpec]:
    return {"y": TensorSpec((sizes["n"],), "i32"), "count": TensorSpec((1,), "i32")}


# --- nonzero_indices ---------------------------------------------------------------------------

NONZERO_SIZES = [
    {"n": 1000, "dtype": "i32"},
    {"n": 1 << 20, "dtype": "i32"},
    {"n": 1 << 24, "dtype": "i32"},
    {"n": 1 << 25, "dtype": "i32"},
    {"n": 1 << 20, "dtype": "f32"},
    {"n": 1 << 24, "dtype": "f32"},
]


def _nonzero_grids(dtype: str) -> dict[str, list[dict[str, list[Any]]]]:
    """i32 gets every axis; f32 a sample of each family around the same points."""
    if dtype == "f32":
        grids = {
            "cuda-serial": [{"restrict": [True]}],
            "cuda-single-block": [{"scan": ["shuffle"], "block": [1024], "items": [4]}],
            "cuda-three-pass": [
                {"scan": list(SCANS), "block": [512], "items": [4], "vector": [False], "restrict": [True]},
                {"scan": ["shuffle"], "block": [512], "items": [4], "vector": [True], "restrict": [True]},
            ],
        }
    else:
        grids = {
            "cuda-serial": [{"restrict": [True, False]}],
            "cuda-single-block": [{"scan": list(SCANS), "block": [256, 1024], "items": [4]}],
            "cuda-three-pass": [
                {"scan": list(SCANS), "block": [128, 512], "items": [1, 4, 8], "vector": [False], "restrict": [True]},
                {"scan": ["shuffle"], "block": [128, 512], "items": [4, 8], "vector": [True], "restrict": [True]},
                {"scan": list(SCANS), "block": [512], "items": [1, 4], "vector": [False], "restrict": [False]},
            ],
        }
    return {family: [{"dtype": [dtype], **grid} for grid in family_grids] for family, family_grids in grids.items()}


def nonzero_variants() -> Iterable[Variant]:
    for dtype in ("i32", "f32"):
        full = dtype == "i32"
        yield from _cuda_variants(lambda p: _nonzero_rule(p["dtype"], p.get("vector", False)), dtype, _nonzero_grids(dtype))
        yield from _triton_variants(
            "nonzero_indices",
            TRITON_NONZERO,
            {"dtype": [dtype]},
            dtype,
            {"BLOCK": [256, 1024, 4096] if full else [1024, 4096], "num_warps": [4, 8] if full else [4]},
            {"BLOCK": [1024, 4096], "num_warps": [4, 8] if full else [4]},
        )


NONZERO_INDICES = Op(
    name="nonzero_indices",
    bound="memory",
    sizes=NONZERO_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],), s["dtype"], "randint:0:2")},
    outputs=_outputs,
    reference=lambda torch, inputs, sizes: _reference_padded(torch, torch.nonzero(inputs["x"]).flatten(), sizes["n"]),
    reference_code=(
        "def reference(x):\n"
        "    idx = torch.nonzero(x).flatten()\n"
        "    y = torch.full_like(x, -1, dtype=torch.int32)\n"
        "    y[:idx.numel()] = idx\n"
        "    return y, torch.tensor([idx.numel()], dtype=torch.int32, device=x.device)\n"
    ),
    variants=nonzero_variants,
)

# --- unique_consecutive ------------------------------------------------------------------------

UNIQUE_SIZES = [{"n": 1000}, {"n": 1 << 20}, {"n": 1 << 23}, {"n": 1 << 25}]
# Every tiled family in both halo styles (a serial pass has no tile to stage).
UNIQUE_TILED_GRIDS = {
    "cuda-single-block": [{"scan": list(SCANS), "block": [1024], "items": [4]}],
    "cuda-three-pass": [
        {"scan": list(SCANS), "block": [128, 512], "items": [1, 4, 8], "restrict": [True]},
        {"scan": list(SCANS), "block": [512], "items": [4], "restrict": [False]},
    ],
}


def unique_variants() -> Iterable[Variant]:
    grids = {"cuda-serial": [{"restrict": [True, False]}]}
    grids.update(
        {family: [{"halo": ["global", "shared"], **grid} for grid in family_grids] for family, family_grids in UNIQUE_TILED_GRIDS.items()}
    )
    yield from _cuda_variants(lambda p: _unique_rule(p.get("halo", "global")), None, grids)
    yield from _triton_variants(
        "unique_consecutive",
        TRITON_UNIQUE,
        {},
        None,
        {"BLOCK": [256, 1024, 4096], "num_warps": [4, 8]},
        {"BLOCK": [1024, 4096], "num_warps": [4, 8]},
    )


UNIQUE_CONSECUTIVE = Op(
    name="unique_consecutive",
    bound="memory",
    sizes=UNIQUE_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"],), "i32", "randint:0:4")},
    outputs=_outputs,
    reference=lambda torch, inputs, sizes: _reference_padded(torch, torch.unique_consecutive(inputs["x"]), sizes["n"]),
    reference_code=(
        "def reference(x):\n"
        "    values = torch.unique_consecutive(x)\n"
        "    y = torch.full_like(x, -1)\n"
        "    y[:values.numel()] = values\n"
        "    return y, torch.tensor([values.numel()], dtype=torch.int32, device=x.device)\n"
    ),
    variants=unique_variants,
)

OPS = [NONZERO_INDICES, UNIQUE_CONSECUTIVE]
