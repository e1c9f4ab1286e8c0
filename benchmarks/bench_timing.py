"""Our timing harness against triton.testing.do_bench, and end-to-end measure time on a warm worker.

Run on a GPU machine:  python3 benchmarks/bench_timing.py --out DIR
Writes DIR/timing.json and DIR/timing.md. Target: within 2% of do_bench's median for
kernels ≥ 50 µs (both flush L2 before each sample); end-to-end ≤ 5 s for a kernel < 10 ms.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelcast.kernels_runtime import timing
from kernelcast.kernels_runtime.measure import measure_pair, shutdown_workers

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "data" / "measure"


def workloads(torch: Any) -> list[tuple[str, Callable[[], Any]]]:
    """Copies, matrix products and a reduction from ~5 µs to ~10 ms."""
    cases: list[tuple[str, Callable[[], Any]]] = []
    for log2 in (14, 18, 20, 22, 24, 26, 28):
        source = torch.randn(1 << log2, device="cuda")
        target = torch.empty_like(source)
        cases.append((f"copy f32 2^{log2}", lambda s=source, t=target: t.copy_(s)))
    for size, dtype in ((1024, torch.bfloat16), (4096, torch.bfloat16), (8192, torch.bfloat16), (4096, torch.float32)):
        a = torch.randn(size, size, device="cuda", dtype=dtype)
        b = torch.randn(size, size, device="cuda", dtype=dtype)
        name = str(dtype).replace("torch.", "")
        cases.append((f"matmul {name} {size}³", lambda a=a, b=b: a @ b))
    values = torch.randn(1 << 26, device="cuda")
    cases.append(("sum f32 2^26", lambda v=values: v.sum()))
    return cases


def compare_with_do_bench(torch: Any) -> list[dict[str, Any]]:
    import triton.testing

    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for name, fn in workloads(torch):
        ours = timing.time_one(torch, fn)
        theirs = triton.testing.do_bench(fn, quantiles=[0.5])
        theirs = theirs[0] if isinstance(theirs, (list, tuple)) else theirs
        rows.append({"kernel": name, **ours, "do_bench_median_ms": theirs, "ratio": ours["median_ms"] / theirs})
        print(
            f"{name:22s} ours {ours['median_ms']:.4f} ms (n={ours['n']}) do_bench {theirs:.4f} ms ratio {rows[-1]['ratio']:.3f}", flush=True
        )
    return rows


def end_to_end() -> dict[str, Any]:
    """measure_pair wall time on a warm worker (the first call starts it)."""

    def fixture(name: str) -> dict[str, str | None]:
        return {"code": (FIXTURES / name).read_text(), "language": "cuda", "name": None}

    measure_pair(fixture("copy_strided.cu"), fixture("copy_coalesced.cu"))
    results = {}
    for candidate, reference in (("copy_strided.cu", "copy_coalesced.cu"), ("transpose_tiled.cu", "transpose_naive.cu")):
        started = time.monotonic()
        outcome = measure_pair(fixture(candidate), fixture(reference))
        results[f"{candidate} vs {reference}"] = {
            "wall_s": time.monotonic() - started,
            "message": outcome.message(),
            "ci95": list(getattr(outcome, "ci95", [])),
        }
        print(
            f"end-to-end {candidate} vs {reference}: {results[f'{candidate} vs {reference}']['wall_s']:.2f} s, {outcome.message()}",
            flush=True,
        )
    shutdown_workers()
    return results


def write_markdown(path: Path, rows: list[dict[str, Any]], e2e: dict[str, Any], environment: dict[str, Any], command: str) -> None:
    lines = [
        "# Timing harness vs triton.testing.do_bench",
        "",
        f"Command: `{command}`  ",
        f"GPU: {environment['gpu']}, torch {environment['torch']}, triton {environment['triton']}, {environment['date']}",
        "",
        "| kernel | ours median ms | p20 | p80 | n | do_bench median ms | ours / do_bench |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['kernel']} | {row['median_ms']:.4f} | {row['p20_ms']:.4f} | {row['p80_ms']:.4f} | {row['n']} | "
            f"{row['do_bench_median_ms']:.4f} | {row['ratio']:.3f} |"
        )
    lines += ["", "| end-to-end measure_pair (warm worker) | wall s | result |", "|---|---|---|"]
    for name, result in e2e.items():
        lines.append(f"| {name} | {result['wall_s']:.2f} | {result['message']} |")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    options = parser.parse_args()
    import torch
    import triton

    rows = compare_with_do_bench(torch)
    environment = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    del torch  # the worker owns its own context; nothing here holds the GPU busy
    e2e = end_to_end()
    command = f"python3 benchmarks/bench_timing.py --out {options.out}"
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "timing.json").write_text(
        json.dumps({"command": command, "environment": environment, "kernels": rows, "end_to_end": e2e}, indent=2)
    )
    write_markdown(options.out / "timing.md", rows, e2e, environment, command)


if __name__ == "__main__":
    main()
