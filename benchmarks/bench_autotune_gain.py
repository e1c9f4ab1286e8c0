"""What `@triton.autotune` buys over one of its configs chosen without timing.

An autotuned kernel is timed after its tuning, so it runs the fastest of its listed configs at the
problem's size; the same kernel with one fixed config runs whichever the author picked. The
embedded forecaster's roofline reads neither the configs nor their timing, so two solutions of
one problem, one autotuned and one not, read alike. This measures the gap: for each workload (a
kernel at one size), every config of a list of the kind solutions carry is timed alone, and the
gap of a config chosen without timing is how much slower the median config runs than the best
(log2, octaves). The forecaster's AUTOTUNE_GAIN_LOG2 (models/embedded/features.py) is the median
of that gap over the workloads that reduce or multiply tiles; the elementwise ones are reported
beside it. It also times one call of an autotuned kernel against the same kernel launched
directly on a tiny tensor: the autotuner's own host cost per call.

Run on a GPU machine:  python3 benchmarks/bench_autotune_gain.py --out DIR
Writes DIR/autotune_gain.json and DIR/autotune_gain.md. Each config is timed by the project's
harness (kernels_runtime/timing.py: an L2 flush, then the call between two events).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

# (BLOCK, num_warps) lists of a one-dimensional kernel, and (BLOCK_M, BLOCK_N, BLOCK_K, num_warps,
# num_stages) of a matmul: the spread of configs an author lists for the tuner to choose from.
BLOCKS_1D = [(block, warps) for block in (256, 512, 1024, 2048, 4096) for warps in (2, 4, 8)]
TILES = [
    (128, 256, 64, 8, 3),
    (64, 256, 32, 4, 4),
    (128, 128, 32, 4, 4),
    (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (128, 32, 32, 4, 4),
    (64, 32, 32, 2, 5),
    (32, 64, 32, 2, 5),
]
ELEMENTS = (1 << 20, 1 << 24, 1 << 27)
ROWS_COLS = ((4096, 4096), (32768, 1024), (256, 65536))
MATMUL_SIDES = (1024, 4096)
TINY = 4096
ELEMENTWISE = "scale_add"


def _kernels() -> dict[str, Any]:
    """The Triton kernels, each with its tiling as constexprs."""
    import triton
    import triton.language as tl

    @triton.jit
    def scale_add(x, y, out, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out + offsets, 2.0 * tl.load(x + offsets, mask=mask) + tl.load(y + offsets, mask=mask), mask=mask)

    @triton.jit
    def row_sum(x, out, cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        total = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in range(0, cols, BLOCK):
            offsets = start + tl.arange(0, BLOCK)
            total += tl.load(x + row * cols + offsets, mask=offsets < cols, other=0.0)
        tl.store(out + row, tl.sum(total, axis=0))

    @triton.jit
    def row_softmax(x, out, cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        running_max = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
        running_sum = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in range(0, cols, BLOCK):
            offsets = start + tl.arange(0, BLOCK)
            values = tl.load(x + row * cols + offsets, mask=offsets < cols, other=float("-inf"))
            new_max = tl.maximum(running_max, values)
            running_sum = running_sum * tl.exp(running_max - new_max) + tl.exp(values - new_max)
            running_max = new_max
        row_max = tl.max(running_max, axis=0)
        row_total = tl.sum(running_sum * tl.exp(running_max - row_max), axis=0)
        for start in range(0, cols, BLOCK):
            offsets = start + tl.arange(0, BLOCK)
            mask = offsets < cols
            values = tl.load(x + row * cols + offsets, mask=mask, other=float("-inf"))
            tl.store(out + row * cols + offsets, tl.exp(values - row_max) / row_total, mask=mask)

    @triton.jit
    def matmul(a, b, c, m, n, k, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        inner = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for start in range(0, k, BLOCK_K):
            left = tl.load(
                a + rows[:, None] * k + (start + inner)[None, :], mask=(rows[:, None] < m) & ((start + inner)[None, :] < k), other=0.0
            )
            right = tl.load(
                b + (start + inner)[:, None] * n + cols[None, :], mask=((start + inner)[:, None] < k) & (cols[None, :] < n), other=0.0
            )
            acc += tl.dot(left, right)
        tl.store(c + rows[:, None] * n + cols[None, :], acc.to(c.dtype.element_ty), mask=(rows[:, None] < m) & (cols[None, :] < n))

    return {"scale_add": scale_add, "row_sum": row_sum, "row_softmax": row_softmax, "matmul": matmul}


def workloads(torch: Any) -> list[tuple[str, list[tuple[str, Callable[[], Any]]]]]:
    """(workload, [(config, call)]) for every kernel and size."""
    import triton

    kernels = _kernels()
    found: list[tuple[str, list[tuple[str, Callable[[], Any]]]]] = []

    def one_dimensional(n: int) -> list[tuple[str, Callable[[], Any]]]:
        x, y, out = (torch.randn(n, device="cuda") for _ in range(3))
        return [
            (
                f"BLOCK={block} warps={warps}",
                lambda block=block, warps=warps: kernels["scale_add"][(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block, num_warps=warps),
            )
            for block, warps in BLOCKS_1D
        ]

    def per_row(name: str, rows: int, cols: int) -> list[tuple[str, Callable[[], Any]]]:
        x = torch.randn(rows, cols, device="cuda")
        out = torch.empty(rows, device="cuda") if name == "row_sum" else torch.empty_like(x)
        return [
            (
                f"BLOCK={block} warps={warps}",
                lambda block=block, warps=warps: kernels[name][(rows,)](x, out, cols, BLOCK=block, num_warps=warps),
            )
            for block, warps in BLOCKS_1D
        ]

    def tiled(side: int, dtype: Any) -> list[tuple[str, Callable[[], Any]]]:
        a, b = (torch.randn(side, side, device="cuda", dtype=dtype) for _ in range(2))
        c = torch.empty(side, side, device="cuda", dtype=dtype)
        return [
            (
                f"{bm}x{bn}x{bk} warps={warps} stages={stages}",
                lambda bm=bm, bn=bn, bk=bk, warps=warps, stages=stages: kernels["matmul"][(triton.cdiv(side, bm), triton.cdiv(side, bn))](
                    a, b, c, side, side, side, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages
                ),
            )
            for bm, bn, bk, warps, stages in TILES
        ]

    found += [(f"{ELEMENTWISE} n=2^{int(math.log2(n))}", one_dimensional(n)) for n in ELEMENTS]
    found += [(f"{name} {rows}x{cols}", per_row(name, rows, cols)) for name in ("row_sum", "row_softmax") for rows, cols in ROWS_COLS]
    found += [
        (f"matmul {side}^3 {label}", tiled(side, dtype))
        for side in MATMUL_SIDES
        for label, dtype in (("fp16", torch.float16), ("fp32", torch.float32))
    ]
    return found


def autotuner_call_us(torch: Any) -> dict[str, float]:
    """Median µs per call on a tiny tensor: the kernel launched directly, and autotuned over its configs (tuned before timing)."""
    import triton

    from kernelcast.kernels_runtime import timing

    kernel = _kernels()["scale_add"]
    x, y, out = (torch.randn(TINY, device="cuda") for _ in range(3))
    tuned = triton.autotune([triton.Config({"BLOCK": block}, num_warps=warps) for block, warps in BLOCKS_1D], key=["n"])(kernel)
    tuned[lambda meta: (triton.cdiv(TINY, meta["BLOCK"]),)](x, y, out, TINY)
    direct = timing.time_one(torch, lambda: kernel[(triton.cdiv(TINY, 1024),)](x, y, out, TINY, BLOCK=1024, num_warps=4))
    through = timing.time_one(torch, lambda: tuned[lambda meta: (triton.cdiv(TINY, meta["BLOCK"]),)](x, y, out, TINY))
    return {"direct_us": 1e3 * float(direct["median_ms"]), "autotuned_us": 1e3 * float(through["median_ms"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    import torch

    from kernelcast.kernels_runtime import timing

    rows = []
    for workload, configs in workloads(torch):
        times, failed = {}, {}
        for config, call in configs:
            try:
                times[config] = 1e3 * float(timing.time_one(torch, call)["median_ms"])
            except Exception as error:  # a config past the GPU's shared memory or registers: the tuner skips it too
                failed[config] = f"{type(error).__name__}: {str(error)[:120]}"
        best = min(times.values())
        median = statistics.median(times.values())
        rows.append(
            {
                "workload": workload,
                "configs_us": times,
                "configs_failed": failed,
                "best_us": best,
                "median_us": median,
                "median_gap_log2": math.log2(median / best),
                "mean_gap_log2": statistics.fmean(math.log2(t / best) for t in times.values()),
            }
        )
        print(f"{workload}: best {best:.1f} µs, median config {median:.1f} µs ({rows[-1]['median_gap_log2']:.2f} octaves)", flush=True)
    calls = autotuner_call_us(torch)
    gain = statistics.median(row["median_gap_log2"] for row in rows if not row["workload"].startswith(ELEMENTWISE))
    elementwise = statistics.median(row["median_gap_log2"] for row in rows if row["workload"].startswith(ELEMENTWISE))
    where = f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    summary = {"machine": where, "rows": rows, "autotuner_call": calls, "median_gap_log2": gain, "elementwise_median_gap_log2": elementwise}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "autotune_gain.json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = [
        "# What an autotuned Triton kernel gains over a config chosen without timing",
        "",
        f"{where}; `python3 benchmarks/bench_autotune_gain.py --out DIR`. Each workload's configs are the list its kind of",
        f"kernel carries ({len(BLOCKS_1D)} block sizes × warps, or {len(TILES)} matmul tiles); µs are medians of the project's harness.",
        "",
        "| workload | best config µs | median config µs | median config / best, octaves | mean over configs, octaves |",
        "|---|---|---|---|---|",
        *(
            f"| {row['workload']} | {row['best_us']:.1f} | {row['median_us']:.1f} | "
            f"{row['median_gap_log2']:.2f} | {row['mean_gap_log2']:.2f} |"
            for row in rows
        ),
        "",
        f"Where the kernel reduces or multiplies tiles, the median config runs {gain:.2f} octaves ({2**gain:.2f}×) slower than the",
        f"best (median over those workloads); an elementwise kernel's, {elementwise:.2f} octaves.",
        f"One call at {TINY} elements: {calls['direct_us']:.2f} µs launched directly, "
        f"{calls['autotuned_us']:.2f} µs through the autotuner.",
        "",
    ]
    (args.out / "autotune_gain.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
