"""Reductions over every axis but one: batchnorm_stats (per-channel mean and variance of an
NCHW tensor) and mean_dim0 (the mean over the outermost axis of a (b, rows, cols) tensor).

Both read a channel's or an output's elements far apart in memory, so speed is decided by
which thread reads which address, by how many blocks the reduced extent is spread over, and
by how partials from several blocks are brought together (atomics or a scratch and a second
launch). Neighbours of column_sum, written in other user styles (single-letter sizes N, C,
HW, B; `idx` indexing; `#define` tiles; a `restrict` axis).

- batchnorm_stats: x (n, c, h, w) fp32 → y (2, c): row 0 the mean, row 1 the biased
  variance, what batchnorm training computes. Shapes: tiny, ResNet-like middle, many
  channels with a 7x7 plane (h*w = 49: no float4 loads), few channels with a 112x112 plane.
  CUDA: cuda-block-per-channel (one block per channel; method = two kernels, mean then
  variance, reading x twice / one pass of sum and sum of squares / Welford with a
  division per element; loop = flat over n*h*w with a div/mod per element, or nested over
  n then h*w, which idles most threads when h*w is small; block, float4 vector over h*w,
  restrict); cuda-thread-per-channel (a thread walks its channel alone: neighbouring
  threads read planes h*w apart; block, method sum of squares or Welford, restrict; skips
  channels of more than 64K elements); cuda-split-n (grid (c, splits): each block sums a
  range of images; finish = atomicAdd of sum/count and sumsq/count into y after a ZERO
  launch, then a kernel subtracting mean², or partials to a scratch and a kernel per
  channel combining them; splits, block, vector, restrict). Triton: triton-channel (a
  program per channel over the flattened n*h*w in BLOCK tiles, div/mod addressing;
  method sum of squares or two passes; BLOCK, num_warps), triton-channel-2d (a
  [BLOCK_N, BLOCK_HW] tile: no div/mod, padding waste when h*w is not a multiple),
  triton-split-n (a program per (channel, range of images), tl.atomic_add, then a finish
  kernel; splits).
- mean_dim0: y = x.mean(0), x (b, rows, cols) fp32 or fp16 with b from 2 to 512; fp32
  accumulation, output in x's dtype. Shapes: tiny, deep (b = 512 over only 2048 outputs:
  a thread per output leaves the GPU idle), odd 999 x 1001 (no vector loads), wide, and
  fp16 deep and wide. CUDA: cuda-thread-per-output (a thread per output walking b, reads
  coalesced across threads; block, `#pragma unroll` of the b loop, vector of 2/4/8 outputs
  per thread in one load, restrict); cuda-2d (the textbook (row, col) grid: threadIdx.x
  along cols is coalesced, along rows it is not; block shape); cuda-block-tile (TX outputs
  x TY threads splitting b, a shared-memory tree over TY in `partial[TX][TY + PAD]`, a
  TY-way bank conflict without the pad); cuda-split-b (grid (outputs, splits), each block
  sums a range of b; finish = atomicAdd into y after a ZERO launch (fp32 only) or partials
  to a scratch and a second launch; splits, block, restrict). Triton: triton-block (BLOCK
  flattened outputs, a loop over b), triton-tile-2d (a [BLOCK_B, BLOCK] tile per step,
  more loads in flight), triton-split-b (a program per (outputs, range of b), atomics; fp32).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workshop.corpus.ops.memkit import pack_struct
from workshop.corpus.ops.rowkit import TRITON_HEADER, cuda_reductions, unsupported
from workshop.corpus.spec import (
    CUDA_HEADER,
    CUDA_TYPES,
    ZERO,
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
    grid1,
    i32,
)

# --- batchnorm_stats ------------------------------------------------------------------------------

BATCHNORM_SIZES = [
    {"n": 4, "c": 16, "h": 8, "w": 8},
    {"n": 32, "c": 64, "h": 28, "w": 28},
    {"n": 128, "c": 512, "h": 7, "w": 7},
    {"n": 64, "c": 256, "h": 28, "w": 28},
    {"n": 16, "c": 64, "h": 112, "w": 112},
]
SERIAL_MAX_COUNT = 65536  # one thread walking a longer channel alone takes too long

BATCHNORM_REFERENCE = """\
def reference(x):
    mean = x.mean(dim=(0, 2, 3))
    var = x.var(dim=(0, 2, 3), unbiased=False)
    return torch.stack([mean, var])
"""

# What one element v adds to a thread's state, per method (two-kernel: its mean pass, its variance pass).
ACCUMULATE = {
    "sumsq": "sum += v; sq += v * v;",
    "welford": "cnt += 1.0f; float d = v - mean; mean += d / cnt; m2 += d * (v - mean);",
    "mean": "sum += v;",
    "var": "float d = v - mean; sq += d * d;",
}

WELFORD = """
// Chan et al.: merge the statistics (nb, meanb, m2b) of other elements into (n, mean, m2)
__device__ __forceinline__ void welford_merge(float& n, float& mean, float& m2, float nb, float meanb, float m2b) {
    float total = n + nb;
    if (total == 0.0f) return;
    float delta = meanb - mean;
    float wb = nb / total;
    mean += delta * wb;
    m2 += m2b + delta * delta * n * wb;
    n = total;
}

__device__ __forceinline__ void warp_welford(float& n, float& mean, float& m2) {
    for (int offset = 16; offset > 0; offset >>= 1)
        welford_merge(n, mean, m2, __shfl_down_sync(0xffffffff, n, offset), __shfl_down_sync(0xffffffff, mean, offset),
                      __shfl_down_sync(0xffffffff, m2, offset));
}

// the block's statistics end up in thread 0
__device__ void block_welford(float& n, float& mean, float& m2) {
    __shared__ float sn[BLOCK / 32], smean[BLOCK / 32], sm2[BLOCK / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    warp_welford(n, mean, m2);
    if (lane == 0) { sn[warp] = n; smean[warp] = mean; sm2[warp] = m2; }
    __syncthreads();
    if (warp == 0) {
        n = lane < BLOCK / 32 ? sn[lane] : 0.0f;
        mean = lane < BLOCK / 32 ? smean[lane] : 0.0f;
        m2 = lane < BLOCK / 32 ? sm2[lane] : 0.0f;
        warp_welford(n, mean, m2);
    }
}
"""


def _bn_signature(name: str, restrict: bool, out: str = "y") -> str:
    return f'extern "C" __global__ void {name}({cuda_pointer("float", "x", restrict)}, {cuda_pointer("float", out, restrict, const=False)}, int N, int C, int HW)'


def _channel_loop(loop: str, vector: int, body: str, first: str = "0", last: str = "N") -> str:
    """Statements running `body` on every element v of channel c over images [first, last): the block's threads share it."""
    plane = "HW" if vector == 1 else "HW4"
    if vector == 1:
        element = ["float v = x[((size_t)n * C + c) * HW + p];", body]
    else:
        element = [
            "float4 q = reinterpret_cast<const float4*>(x)[((size_t)n * C + c) * HW4 + p];",
            "float vals[4] = {q.x, q.y, q.z, q.w};",
            "#pragma unroll",
            f"for (int k = 0; k < 4; k++) {{ float v = vals[k]; {body} }}",
        ]
    setup = "    int HW4 = HW / 4;\n" if vector > 1 else ""
    if loop == "nested":
        inner = "".join(f"            {line}\n" for line in element)
        return f"""{setup}    for (int n = {first}; n < {last}; n++) {{
        for (int p = threadIdx.x; p < {plane}; p += BLOCK) {{
{inner}        }}
    }}
"""
    images = last if first == "0" else f"({last} - {first})"
    image = f"i / {plane}" if first == "0" else f"{first} + i / {plane}"
    inner = "".join(f"        {line}\n" for line in element)
    return f"""{setup}    int total = {images} * {plane};
    for (int i = threadIdx.x; i < total; i += BLOCK) {{
        int n = {image}, p = i % {plane};
{inner}    }}
"""


def _bn_block_code(method: str, loop: str, block: int, vector: int, restrict: bool) -> str:
    """One block per channel; the first kernel's block reduction decides what reaches y."""
    head = f"{CUDA_HEADER}#define BLOCK {block}\n"
    if method == "welford":
        return f"""{head}{WELFORD}
// one block per channel: per-thread Welford statistics, merged across the block
{_bn_signature("batchnorm_stats", restrict)} {{
    int c = blockIdx.x;
    float cnt = 0.0f, mean = 0.0f, m2 = 0.0f;
{_channel_loop(loop, vector, ACCUMULATE["welford"])}    block_welford(cnt, mean, m2);
    if (threadIdx.x == 0) {{
        y[c] = mean;
        y[C + c] = m2 / cnt;
    }}
}}
"""
    head += cuda_reductions(("sum",), "shuffle")
    if method == "sumsq":
        return f"""{head}
// one block per channel, one pass: var = E[x^2] - mean^2
{_bn_signature("batchnorm_stats", restrict)} {{
    int c = blockIdx.x;
    float sum = 0.0f, sq = 0.0f;
{_channel_loop(loop, vector, ACCUMULATE["sumsq"])}    sum = block_sum(sum);
    sq = block_sum(sq);
    if (threadIdx.x == 0) {{
        float mean = sum / (N * HW);
        y[c] = mean;
        y[C + c] = sq / (N * HW) - mean * mean;
    }}
}}
"""
    return f"""{head}
// first kernel: one block per channel writes the mean
{_bn_signature("batchnorm_mean", restrict)} {{
    int c = blockIdx.x;
    float sum = 0.0f;
{_channel_loop(loop, vector, ACCUMULATE["mean"])}    sum = block_sum(sum);
    if (threadIdx.x == 0) y[c] = sum / (N * HW);
}}

// second kernel: reads x again for the squared deviations from that mean
{_bn_signature("batchnorm_var", restrict)} {{
    int c = blockIdx.x;
    float mean = y[c];
    float sq = 0.0f;
{_channel_loop(loop, vector, ACCUMULATE["var"])}    sq = block_sum(sq);
    if (threadIdx.x == 0) y[C + c] = sq / (N * HW);
}}
"""


def _bn_thread_code(method: str, restrict: bool) -> str:
    """A thread per channel: each thread reads its own planes, H*W elements away from its neighbour's."""
    if method == "welford":
        state, final = "float cnt = 0.0f, mean = 0.0f, m2 = 0.0f;", "y[c] = mean;\n    y[C + c] = m2 / cnt;"
    else:
        state = "float sum = 0.0f, sq = 0.0f;"
        final = "float mean = sum / (N * H * W);\n    y[c] = mean;\n    y[C + c] = sq / (N * H * W) - mean * mean;"
    return f"""{CUDA_HEADER}
extern "C" __global__ void batchnorm_stats({cuda_pointer("float", "x", restrict)}, {cuda_pointer("float", "y", restrict, const=False)}, int N, int C, int H, int W) {{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    {state}
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++)
            for (int w = 0; w < W; w++) {{
                float v = x[((n * C + c) * H + h) * W + w];
                {ACCUMULATE[method]}
            }}
    {final}
}}
"""


def _bn_split_code(finish: str, block: int, vector: int, restrict: bool) -> str:
    """grid (C, splits): block (c, s) sums images [s * chunk, (s + 1) * chunk) of channel c."""
    if finish == "atomic":
        out = "y"
        store = "        atomicAdd(&y[c], sum / (N * HW));\n        atomicAdd(&y[C + c], sq / (N * HW));"
        second = f"""
// y holds E[x] and E[x^2] once every block has added its share
extern "C" __global__ void batchnorm_finish({cuda_pointer("float", "y", restrict, const=False)}, int C) {{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) y[C + c] -= y[c] * y[c];
}}
"""
    else:
        out = "partial"
        store = "        partial[(blockIdx.y * 2) * C + c] = sum;\n        partial[(blockIdx.y * 2 + 1) * C + c] = sq;"
        second = f"""
// a thread per channel adds its blocks' partial sums
extern "C" __global__ void batchnorm_finish({cuda_pointer("float", "partial", restrict)}, {cuda_pointer("float", "y", restrict, const=False)}, int C, int count, int splits) {{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sum = 0.0f, sq = 0.0f;
    for (int s = 0; s < splits; s++) {{
        sum += partial[(s * 2) * C + c];
        sq += partial[(s * 2 + 1) * C + c];
    }}
    float mean = sum / count;
    y[c] = mean;
    y[C + c] = sq / count - mean * mean;
}}
"""
    return f"""{CUDA_HEADER}#define BLOCK {block}
{cuda_reductions(("sum",), "shuffle")}
{_bn_signature("batchnorm_partial", restrict, out)} {{
    int c = blockIdx.x;
    int chunk = (N + gridDim.y - 1) / gridDim.y;
    int first = blockIdx.y * chunk;
    int last = min(N, first + chunk);
    float sum = 0.0f, sq = 0.0f;
{_channel_loop("flat", vector, ACCUMULATE["sumsq"], "first", "last")}    sum = block_sum(sum);
    sq = block_sum(sq);
    if (threadIdx.x == 0) {{
{store}
    }}
}}
{second}"""


def _bn_args(sizes: Sizes, out: str = "y") -> tuple[Any, ...]:
    return ("x", out, i32(sizes["n"]), i32(sizes["c"]), i32(sizes["h"] * sizes["w"]))


def _bn_vector_check(vector: int):
    return lambda sizes: None if (sizes["h"] * sizes["w"]) % vector == 0 else f"h*w not a multiple of {vector}"


def _bn_block_launches(method: str, block: int):
    def launches(sizes: Sizes) -> list[Launch]:
        grid = grid1(sizes["c"])
        if method == "two-kernel":
            return [
                Launch("batchnorm_mean", grid, _bn_args(sizes), block1(block)),
                Launch("batchnorm_var", grid, _bn_args(sizes), block1(block)),
            ]
        return [Launch("batchnorm_stats", grid, _bn_args(sizes), block1(block))]

    return launches


def _bn_splits(sizes: Sizes, splits: int) -> int:
    """Never more splits than images: the extra blocks would have nothing to sum."""
    return min(splits, sizes["n"])


def _bn_split_launches(finish: str, splits: int, block: int):
    def launches(sizes: Sizes) -> list[Launch]:
        c, count, used = sizes["c"], sizes["n"] * sizes["h"] * sizes["w"], _bn_splits(sizes, splits)
        grid = (c, used, 1)
        if finish == "atomic":
            return [
                Launch(ZERO, grid1(1), ("y",)),
                Launch("batchnorm_partial", grid, _bn_args(sizes), block1(block)),
                Launch("batchnorm_finish", grid1(cdiv(c, 256)), ("y", i32(c)), block1(256)),
            ]
        return [
            Launch("batchnorm_partial", grid, _bn_args(sizes, "partial"), block1(block)),
            Launch("batchnorm_finish", grid1(cdiv(c, 256)), ("partial", "y", i32(c), i32(count), i32(used)), block1(256)),
        ]

    return launches


def _bn_triton_flat(method: str) -> str:
    load = "tl.load(x_ptr + (n * C + c) * HW + p, mask=mask, other=0.0)"
    if method == "sumsq":
        passes = f"""    acc = tl.zeros([BLOCK], dtype=tl.float32)
    acc_sq = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, count, BLOCK):
        i = start + tl.arange(0, BLOCK)
        n = i // HW
        p = i % HW
        mask = i < count
        v = {load}
        acc += v
        acc_sq += v * v
    mean = tl.sum(acc, axis=0) / count
    var = tl.sum(acc_sq, axis=0) / count - mean * mean
"""
    else:
        passes = f"""    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, count, BLOCK):
        i = start + tl.arange(0, BLOCK)
        n = i // HW
        p = i % HW
        mask = i < count
        acc += {load}
    mean = tl.sum(acc, axis=0) / count
    # second pass over the channel: squared deviations from the mean
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, count, BLOCK):
        i = start + tl.arange(0, BLOCK)
        n = i // HW
        p = i % HW
        mask = i < count
        d = tl.where(mask, {load} - mean, 0.0)
        acc += d * d
    var = tl.sum(acc, axis=0) / count
"""
    return f"""{TRITON_HEADER}

@triton.jit
def batchnorm_stats(x_ptr, y_ptr, N, C, HW, BLOCK: tl.constexpr):
    # one program per channel, walking its N * HW elements as one flat range
    c = tl.program_id(0)
    count = N * HW
{passes}    tl.store(y_ptr + c, mean)
    tl.store(y_ptr + C + c, var)
"""


BN_TRITON_2D = f"""{TRITON_HEADER}

@triton.jit
def batchnorm_stats(x_ptr, y_ptr, N, C, HW, BLOCK_N: tl.constexpr, BLOCK_HW: tl.constexpr):
    # one program per channel, [BLOCK_N images, BLOCK_HW pixels] at a time: no div/mod
    c = tl.program_id(0)
    acc = tl.zeros([BLOCK_N, BLOCK_HW], dtype=tl.float32)
    acc_sq = tl.zeros([BLOCK_N, BLOCK_HW], dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        for p0 in range(0, HW, BLOCK_HW):
            p = p0 + tl.arange(0, BLOCK_HW)
            mask = (n[:, None] < N) & (p[None, :] < HW)
            v = tl.load(x_ptr + (n[:, None] * C + c) * HW + p[None, :], mask=mask, other=0.0)
            acc += v
            acc_sq += v * v
    count = N * HW
    mean = tl.sum(tl.sum(acc, axis=1), axis=0) / count
    var = tl.sum(tl.sum(acc_sq, axis=1), axis=0) / count - mean * mean
    tl.store(y_ptr + c, mean)
    tl.store(y_ptr + C + c, var)
"""

BN_TRITON_SPLIT = f"""{TRITON_HEADER}

@triton.jit
def batchnorm_partial(x_ptr, y_ptr, N, C, HW, CHUNK, BLOCK: tl.constexpr):
    # program (c, s) adds E[x] and E[x^2] over images [s * CHUNK, (s + 1) * CHUNK) of channel c
    c = tl.program_id(0)
    first = tl.program_id(1) * CHUNK
    total = tl.minimum(CHUNK, N - first) * HW
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    acc_sq = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, total, BLOCK):
        i = start + tl.arange(0, BLOCK)
        n = first + i // HW
        p = i % HW
        v = tl.load(x_ptr + (n * C + c) * HW + p, mask=i < total, other=0.0)
        acc += v
        acc_sq += v * v
    count = N * HW
    tl.atomic_add(y_ptr + c, tl.sum(acc, axis=0) / count)
    tl.atomic_add(y_ptr + C + c, tl.sum(acc_sq, axis=0) / count)


@triton.jit
def batchnorm_finish(y_ptr, C, BLOCK: tl.constexpr):
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = c < C
    mean = tl.load(y_ptr + c, mask=mask)
    mean_sq = tl.load(y_ptr + C + c, mask=mask)
    tl.store(y_ptr + C + c, mean_sq - mean * mean, mask=mask)
"""


def batchnorm_variants() -> Iterable[Variant]:
    block_base = {"method": "sumsq", "loop": "flat", "block": 256, "vector": 1, "restrict": False}
    block_settings = around(
        block_base, method=["two-kernel", "welford"], loop=["nested"], block=[128, 512, 1024], vector=[4], restrict=[True]
    ) + [
        {**block_base, "vector": 4, "method": "two-kernel"},
        {**block_base, "vector": 4, "method": "welford"},
        {**block_base, "vector": 4, "restrict": True},
        {**block_base, "vector": 4, "loop": "nested"},
    ]
    for p in block_settings:
        yield Variant(
            "cuda-block-per-channel",
            "cuda",
            p,
            _bn_block_code(p["method"], p["loop"], p["block"], p["vector"], p["restrict"]),
            _bn_block_launches(p["method"], p["block"]),
            unsupported=unsupported(None, _bn_vector_check(p["vector"])),
        )
    for p in around({"block": 128, "method": "sumsq", "restrict": False}, block=[32], method=["welford"], restrict=[True]):
        yield Variant(
            "cuda-thread-per-channel",
            "cuda",
            p,
            _bn_thread_code(p["method"], p["restrict"]),
            lambda s, b=p["block"]: [
                Launch("batchnorm_stats", grid1(cdiv(s["c"], b)), ("x", "y", i32(s["n"]), i32(s["c"]), i32(s["h"]), i32(s["w"])), block1(b))
            ],
            unsupported=lambda s: (
                None if s["n"] * s["h"] * s["w"] <= SERIAL_MAX_COUNT else f"n*h*w > {SERIAL_MAX_COUNT}: one thread walks the channel"
            ),
        )
    split_base = {"finish": "atomic", "splits": 8, "block": 256, "vector": 1, "restrict": True}
    split_settings = around(split_base, finish=["partials"], splits=[2, 32], block=[128, 512], vector=[4], restrict=[False]) + [
        {**split_base, "finish": "partials", "vector": 4},
        {**split_base, "finish": "partials", "splits": 32},
    ]
    for p in split_settings:
        yield Variant(
            "cuda-split-n",
            "cuda",
            p,
            _bn_split_code(p["finish"], p["block"], p["vector"], p["restrict"]),
            _bn_split_launches(p["finish"], p["splits"], p["block"]),
            scratch=lambda s, p=p: (
                {"partial": TensorSpec((_bn_splits(s, p["splits"]) * 2 * s["c"],), "f32")} if p["finish"] == "partials" else {}
            ),
            unsupported=unsupported(None, _bn_vector_check(p["vector"])),
        )
    yield from _bn_triton_variants()


def _bn_triton_variants() -> Iterable[Variant]:
    flat = [{"method": "sumsq", "BLOCK": block, "num_warps": warps} for block in (256, 1024, 4096) for warps in (4, 8)]
    flat += [{"method": "two-pass", "BLOCK": 1024, "num_warps": 4}, {"method": "two-pass", "BLOCK": 4096, "num_warps": 8}]
    for p in flat:
        yield Variant(
            "triton-channel",
            "triton",
            p,
            _bn_triton_flat(p["method"]),
            lambda s, p=p: [
                Launch("batchnorm_stats", grid1(s["c"]), _bn_args(s), constexprs={"BLOCK": p["BLOCK"]}, num_warps=p["num_warps"])
            ],
        )
    for block_n, block_hw in ((1, 1024), (4, 256), (16, 64), (4, 1024)):
        p = {"BLOCK_N": block_n, "BLOCK_HW": block_hw, "num_warps": 4}
        yield Variant(
            "triton-channel-2d",
            "triton",
            p,
            BN_TRITON_2D,
            lambda s, p=p: [
                Launch(
                    "batchnorm_stats",
                    grid1(s["c"]),
                    _bn_args(s),
                    constexprs={"BLOCK_N": p["BLOCK_N"], "BLOCK_HW": p["BLOCK_HW"]},
                    num_warps=4,
                )
            ],
        )
    for splits in (4, 16):
        p = {"splits": splits, "BLOCK": 1024, "num_warps": 4}

        def launches(s: Sizes, splits: int = splits) -> list[Launch]:
            chunk = cdiv(s["n"], splits)
            return [
                Launch(ZERO, grid1(1), ("y",)),
                Launch(
                    "batchnorm_partial",
                    (s["c"], cdiv(s["n"], chunk), 1),
                    (*_bn_args(s), i32(chunk)),
                    constexprs={"BLOCK": 1024},
                    num_warps=4,
                ),
                Launch("batchnorm_finish", grid1(cdiv(s["c"], 256)), ("y", i32(s["c"])), constexprs={"BLOCK": 256}, num_warps=4),
            ]

        yield Variant("triton-split-n", "triton", p, BN_TRITON_SPLIT, launches)


BATCHNORM_STATS = Op(
    name="batchnorm_stats",
    bound="memory",
    sizes=BATCHNORM_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["n"], s["c"], s["h"], s["w"]), "f32")},
    outputs=lambda s: {"y": TensorSpec((2, s["c"]), "f32")},
    reference=lambda torch, inputs, sizes: {
        "y": torch.stack([inputs["x"].mean(dim=(0, 2, 3)), inputs["x"].var(dim=(0, 2, 3), unbiased=False)])
    },
    reference_code=BATCHNORM_REFERENCE,
    variants=batchnorm_variants,
)


# --- mean_dim0 ------------------------------------------------------------------------------------

MEAN_SIZES = [
    {"b": 2, "rows": 64, "cols": 64, "dtype": "f32"},
    {"b": 512, "rows": 32, "cols": 64, "dtype": "f32"},
    {"b": 6, "rows": 999, "cols": 1001, "dtype": "f32"},
    {"b": 64, "rows": 512, "cols": 512, "dtype": "f32"},
    {"b": 512, "rows": 128, "cols": 256, "dtype": "f16"},
    {"b": 16, "rows": 1024, "cols": 1024, "dtype": "f16"},
]
MEAN_VECTORS = {"f32": (2, 4), "f16": (2, 8)}

MEAN_REFERENCE = """\
def reference(x):
    return x.mean(0)
"""


def _outputs(sizes: Sizes) -> int:
    return sizes["rows"] * sizes["cols"]


def _mean_args(sizes: Sizes, out: str = "y") -> tuple[Any, ...]:
    return ("x", out, i32(sizes["b"]), i32(_outputs(sizes)))


def _outputs_divisible(by: int):
    return lambda sizes: None if _outputs(sizes) % by == 0 else f"rows*cols not a multiple of {by}"


def _mean_signature(dtype: str, restrict: bool, out_type: str | None = None, out: str = "y") -> str:
    ctype = CUDA_TYPES[dtype]
    return f'extern "C" __global__ void mean_dim0({cuda_pointer(ctype, "x", restrict)}, {cuda_pointer(out_type or ctype, out, restrict, const=False)}, int B, int N)'


def _unroll_pragma(unroll: int) -> str:
    return f"        #pragma unroll {unroll}\n" if unroll > 1 else ""


def _thread_per_output(dtype: str, unroll: int, vector: int, restrict: bool) -> str:
    """A thread per output (or per `vector` neighbouring outputs) walks b: warps read contiguous runs."""
    if vector == 1:
        return f"""{CUDA_HEADER}
{_mean_signature(dtype, restrict)} {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) {{
        float sum = 0.0f;
{_unroll_pragma(unroll)}        for (int k = 0; k < B; k++) sum += {cuda_load_as_float(dtype, "x[k * N + idx]")};
        y[idx] = {cuda_store_from_float(dtype, "sum / B")};
    }}
}}
"""
    return f"""{CUDA_HEADER}#define VEC {vector}
{pack_struct(dtype, vector)}
// VEC neighbouring outputs per thread, one load per b
{_mean_signature(dtype, restrict)} {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int packs = N / VEC;
    if (idx < packs) {{
        const Pack* xp = reinterpret_cast<const Pack*>(x);
        float sum[VEC] = {{}};
{_unroll_pragma(unroll)}        for (int k = 0; k < B; k++) {{
            Pack p = xp[k * packs + idx];
            #pragma unroll
            for (int e = 0; e < VEC; e++) sum[e] += {cuda_load_as_float(dtype, "p.v[e]")};
        }}
        Pack out;
        #pragma unroll
        for (int e = 0; e < VEC; e++) out.v[e] = {cuda_store_from_float(dtype, "sum[e] / B")};
        reinterpret_cast<Pack*>(y)[idx] = out;
    }}
}}
"""


def _mean_2d(dtype: str, along: str) -> str:
    """The (row, col) grid a user writes first; threadIdx.x along rows makes every load a scattered one."""
    ctype = CUDA_TYPES[dtype]
    first, second = ("col", "row") if along == "cols" else ("row", "col")
    return f"""{CUDA_HEADER}
extern "C" __global__ void mean_dim0(const {ctype}* x, {ctype}* y, int B, int rows, int cols) {{
    int {first} = blockIdx.x * blockDim.x + threadIdx.x;
    int {second} = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {{
        float sum = 0.0f;
        for (int b = 0; b < B; b++) sum += {cuda_load_as_float(dtype, "x[(b * rows + row) * cols + col]")};
        y[row * cols + col] = {cuda_store_from_float(dtype, "sum / B")};
    }}
}}
"""


def _mean_block_tile(dtype: str, tx: int, ty: int, pad: int) -> str:
    """TY threads share each of TX outputs; partial[tx][ty] puts a warp's lanes TY + PAD words apart."""
    return f"""{CUDA_HEADER}#define TX {tx}
#define TY {ty}
#define PAD {pad}

extern "C" __global__ void mean_dim0(const {CUDA_TYPES[dtype]}* __restrict__ x, {CUDA_TYPES[dtype]}* __restrict__ y, int B, int N) {{
    __shared__ float partial[TX][TY + PAD];
    int tx = threadIdx.x, ty = threadIdx.y;
    int idx = blockIdx.x * TX + tx;
    float sum = 0.0f;
    if (idx < N)
        for (int b = ty; b < B; b += TY) sum += {cuda_load_as_float(dtype, "x[(size_t)b * N + idx]")};
    partial[tx][ty] = sum;
    __syncthreads();
    for (int s = TY / 2; s > 0; s >>= 1) {{
        if (ty < s) partial[tx][ty] += partial[tx][ty + s];
        __syncthreads();
    }}
    if (ty == 0 && idx < N) y[idx] = {cuda_store_from_float(dtype, "partial[tx][0] / B")};
}}
"""


def _mean_split(dtype: str, finish: str, restrict: bool) -> str:
    """grid (output blocks, splits): a thread sums one output over its split's range of b."""
    if finish == "atomic":
        signature, store, second = _mean_signature(dtype, restrict, "float"), "atomicAdd(&y[idx], sum / B);", ""
    else:
        signature, store = _mean_signature(dtype, restrict, "float", "partial"), "partial[blockIdx.y * N + idx] = sum;"
        ctype = CUDA_TYPES[dtype]
        second = f"""
// second launch: a thread per output adds the splits' partial sums
extern "C" __global__ void mean_dim0_finish({cuda_pointer("float", "partial", restrict)}, {cuda_pointer(ctype, "y", restrict, const=False)}, int B, int N, int splits) {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N) return;
    float sum = 0.0f;
    for (int s = 0; s < splits; s++) sum += partial[s * N + idx];
    y[idx] = {cuda_store_from_float(dtype, "sum / B")};
}}
"""
    return f"""{CUDA_HEADER}
{signature} {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int chunk = (B + gridDim.y - 1) / gridDim.y;
    int b0 = blockIdx.y * chunk;
    int b1 = min(B, b0 + chunk);
    if (idx >= N) return;
    float sum = 0.0f;
    for (int b = b0; b < b1; b++) sum += {cuda_load_as_float(dtype, "x[(size_t)b * N + idx]")};
    {store}
}}
{second}"""


MEAN_TRITON_BLOCK = f"""{TRITON_HEADER}

@triton.jit
def mean_dim0(x_ptr, y_ptr, B, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for b in range(0, B):
        acc += tl.load(x_ptr + b * N + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, (acc / B).to(y_ptr.dtype.element_ty), mask=mask)
"""

MEAN_TRITON_TILE = f"""{TRITON_HEADER}

@triton.jit
def mean_dim0(x_ptr, y_ptr, B, N, BLOCK_B: tl.constexpr, BLOCK: tl.constexpr):
    # BLOCK_B slices of b per step: more independent loads in flight than one slice
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK_B, BLOCK], dtype=tl.float32)
    for b0 in range(0, B, BLOCK_B):
        b = b0 + tl.arange(0, BLOCK_B)
        mask = (b[:, None] < B) & (offs[None, :] < N)
        acc += tl.load(x_ptr + b[:, None] * N + offs[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, (tl.sum(acc, axis=0) / B).to(y_ptr.dtype.element_ty), mask=offs < N)
"""

MEAN_TRITON_SPLIT = f"""{TRITON_HEADER}

@triton.jit
def mean_dim0(x_ptr, y_ptr, B, N, CHUNK, BLOCK: tl.constexpr):
    # program (i, s) adds its outputs' share over b in [s * CHUNK, (s + 1) * CHUNK)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    b0 = tl.program_id(1) * CHUNK
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for b in range(b0, tl.minimum(b0 + CHUNK, B)):
        acc += tl.load(x_ptr + b * N + offs, mask=mask, other=0.0)
    tl.atomic_add(y_ptr + offs, acc / B, mask=mask)
"""


def _mean_splits(sizes: Sizes, splits: int) -> int:
    return min(splits, sizes["b"])


def mean_variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        yield from _mean_cuda_variants(dtype)
        yield from _mean_triton_variants(dtype)


def _mean_cuda_variants(dtype: str) -> Iterable[Variant]:
    """fp32 gets every edit around each family's base; fp16 the base and its main knobs."""
    full = dtype == "f32"
    only = unsupported(dtype)
    narrow, wide = MEAN_VECTORS[dtype]
    thread_base = {"block": 256, "unroll": 1, "vector": 1, "restrict": False}
    if full:
        thread_settings = around(thread_base, block=[64, 1024], unroll=[4, 8], vector=[narrow, wide], restrict=[True]) + [
            {**thread_base, "unroll": 4, "vector": wide},
            {**thread_base, "restrict": True, "vector": wide},
        ]
    else:
        thread_settings = around(thread_base, unroll=[4], vector=[narrow, wide], restrict=[True])
    for p in thread_settings:
        yield Variant(
            "cuda-thread-per-output",
            "cuda",
            {"dtype": dtype, **p},
            _thread_per_output(dtype, p["unroll"], p["vector"], p["restrict"]),
            lambda s, p=p: [Launch("mean_dim0", grid1(cdiv(_outputs(s) // p["vector"], p["block"])), _mean_args(s), block1(p["block"]))],
            unsupported=unsupported(dtype, _outputs_divisible(p["vector"])),
        )
    shapes = [(32, 8), (16, 16), (64, 4)] if full else [(32, 8)]
    for (bx, by), along in ((shape, along) for shape in shapes for along in ("cols", "rows")):
        yield Variant(
            "cuda-2d",
            "cuda",
            {"dtype": dtype, "block_x": bx, "block_y": by, "along": along},
            _mean_2d(dtype, along),
            lambda s, bx=bx, by=by, along=along: [
                Launch(
                    "mean_dim0",
                    (cdiv(s["cols" if along == "cols" else "rows"], bx), cdiv(s["rows" if along == "cols" else "cols"], by), 1),
                    ("x", "y", i32(s["b"]), i32(s["rows"]), i32(s["cols"])),
                    (bx, by, 1),
                )
            ],
            unsupported=only,
        )
    tiles = [(32, 8), (32, 32), (64, 4), (16, 16)] if full else [(32, 8)]
    for (tx, ty), pad in ((tile, pad) for tile in tiles for pad in (0, 1)):
        yield Variant(
            "cuda-block-tile",
            "cuda",
            {"dtype": dtype, "tx": tx, "ty": ty, "pad": pad},
            _mean_block_tile(dtype, tx, ty, pad),
            lambda s, tx=tx, ty=ty: [Launch("mean_dim0", grid1(cdiv(_outputs(s), tx)), _mean_args(s), (tx, ty, 1))],
            unsupported=only,
        )
    split_base = {"finish": "atomic" if full else "partials", "splits": 16, "block": 256, "restrict": True}
    if full:
        split_settings = around(split_base, finish=["partials"], splits=[4, 64], block=[128], restrict=[False]) + [
            {**split_base, "finish": "partials", "splits": 64}
        ]
    else:
        split_settings = around(split_base, splits=[4], restrict=[False])
    for p in split_settings:
        yield Variant(
            "cuda-split-b",
            "cuda",
            {"dtype": dtype, **p},
            _mean_split(dtype, p["finish"], p["restrict"]),
            _mean_split_launches(p),
            scratch=lambda s, p=p: (
                {"partial": TensorSpec((_mean_splits(s, p["splits"]) * _outputs(s),), "f32")} if p["finish"] == "partials" else {}
            ),
            unsupported=only,
        )


def _mean_split_launches(p: dict[str, Any]):
    def launches(sizes: Sizes) -> list[Launch]:
        n, used = _outputs(sizes), _mean_splits(sizes, p["splits"])
        grid = (cdiv(n, p["block"]), used, 1)
        if p["finish"] == "atomic":
            return [Launch(ZERO, grid1(1), ("y",)), Launch("mean_dim0", grid, _mean_args(sizes), block1(p["block"]))]
        return [
            Launch("mean_dim0", grid, _mean_args(sizes, "partial"), block1(p["block"])),
            Launch("mean_dim0_finish", grid1(cdiv(n, 256)), ("partial", "y", i32(sizes["b"]), i32(n), i32(used)), block1(256)),
        ]

    return launches


def _mean_triton_variants(dtype: str) -> Iterable[Variant]:
    full = dtype == "f32"
    only = unsupported(dtype)
    blocks = [(block, warps) for block in (256, 1024, 4096) for warps in (4, 8)] if full else [(1024, 4), (4096, 4), (4096, 8)]
    for block, warps in blocks:
        yield Variant(
            "triton-block",
            "triton",
            {"dtype": dtype, "BLOCK": block, "num_warps": warps},
            MEAN_TRITON_BLOCK,
            lambda s, block=block, warps=warps: [
                Launch("mean_dim0", grid1(cdiv(_outputs(s), block)), _mean_args(s), constexprs={"BLOCK": block}, num_warps=warps)
            ],
            unsupported=only,
        )
    tiles = [(4, 256), (8, 256), (8, 1024), (32, 128)] if full else [(8, 256), (8, 1024)]
    for block_b, block in tiles:
        yield Variant(
            "triton-tile-2d",
            "triton",
            {"dtype": dtype, "BLOCK_B": block_b, "BLOCK": block, "num_warps": 4},
            MEAN_TRITON_TILE,
            lambda s, block_b=block_b, block=block: [
                Launch(
                    "mean_dim0",
                    grid1(cdiv(_outputs(s), block)),
                    _mean_args(s),
                    constexprs={"BLOCK_B": block_b, "BLOCK": block},
                    num_warps=4,
                )
            ],
            unsupported=only,
        )
    if full:
        for splits in (4, 16):

            def launches(s: Sizes, splits: int = splits) -> list[Launch]:
                chunk = cdiv(s["b"], splits)
                grid = (cdiv(_outputs(s), 1024), cdiv(s["b"], chunk), 1)
                return [
                    Launch(ZERO, grid1(1), ("y",)),
                    Launch("mean_dim0", grid, (*_mean_args(s), i32(chunk)), constexprs={"BLOCK": 1024}, num_warps=4),
                ]

            yield Variant(
                "triton-split-b",
                "triton",
                {"dtype": dtype, "splits": splits, "BLOCK": 1024, "num_warps": 4},
                MEAN_TRITON_SPLIT,
                launches,
                unsupported=only,
            )


MEAN_DIM0 = Op(
    name="mean_dim0",
    bound="memory",
    sizes=MEAN_SIZES,
    inputs=lambda s: {"x": TensorSpec((s["b"], s["rows"], s["cols"]), s["dtype"])},
    outputs=lambda s: {"y": TensorSpec((s["rows"], s["cols"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"y": inputs["x"].mean(0)},
    reference_code=MEAN_REFERENCE,
    variants=mean_variants,
)

OPS = [BATCHNORM_STATS, MEAN_DIM0]
