"""Opening a file of many kernels nothing has forecast yet: didOpen → publishDiagnostics.

The real server over stdio with a fresh kernelcast home each time (a new service, an empty
cache), so every kernel needs the forecaster; compiler facts off and debounce 0, so the time
is discovery, references, the forecasts and publishing. The server forecasts the first 100
kernels of a file; a file of 2,000 shows what discovery costs beyond them.

    python benchmarks/bench_many_kernels.py --out benchmarks/results/many_kernels.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from lsp_support import EXAMPLES, FAST, StdioLsp, stop_service  # noqa: E402

COUNTS = (10, 100, 500, 2000)
REPEATS = 3


def many_kernels(count: int, language: str) -> tuple[str, str]:
    """A file of `count` distinct kernels with a reference pragma, and its suffix."""
    if language == "cuda":
        kernels = "".join(f"__global__ void k{i}(float* x) {{ x[threadIdx.x * {i + 1}] += {i}.0f; }}\n" for i in range(count))
        return ".cu", "// kernelcast: reference=matmul_naive.cu::sgemm\n" + kernels
    kernels = "".join(
        f"@triton.jit\ndef k{i}(x, n, BLOCK: tl.constexpr):\n    o = tl.arange(0, BLOCK) * {i + 1}\n"
        "    tl.store(x + o, tl.load(x + o) + 1, mask=o < n)\n"
        for i in range(count)
    )
    return ".py", "# kernelcast: reference=add_triton_baseline.py::add_kernel\nimport triton\nimport triton.language as tl\n" + kernels


async def cold_open_s(count: int, language: str) -> tuple[float, int]:
    """Seconds from didOpen to the first diagnostics, on a server with nothing cached; and how many it published."""
    scratch = Path(tempfile.mkdtemp(prefix="kernelcast-many-"))
    root, home = scratch / "workspace", scratch / "home"
    shutil.copytree(EXAMPLES, root)
    server = await StdioLsp(home, root, FAST).start()
    try:
        # The service starts with the first file; a one-kernel file pays for that, not the measurement.
        warm = (root / "warm.cu").as_uri()
        server.open(warm, "// kernelcast: reference=matmul_naive.cu::sgemm\n__global__ void w(float* x) { x[0] = 1; }\n")
        await server.published(warm, 1, 60)
        suffix, text = many_kernels(count, language)
        uri = (root / f"many{suffix}").as_uri()
        started = time.perf_counter()
        server.open(uri, text, 1, "python" if suffix == ".py" else "cuda")
        diagnostics = await server.published(uri, 1, 120)
        return time.perf_counter() - started, len(diagnostics)
    finally:
        await server.stop()
        stop_service(home)
        shutil.rmtree(scratch, ignore_errors=True)


async def measure() -> dict[str, dict[str, float]]:
    rows = {}
    for language in ("cuda", "triton"):
        for count in COUNTS:
            runs = [await cold_open_s(count, language) for _ in range(REPEATS)]
            seconds = [s for s, _ in runs]
            rows[f"{language}, {count} kernels"] = {
                "median_ms": 1000 * statistics.median(seconds),
                "max_ms": 1000 * max(seconds),
                "diagnostics": runs[0][1],
            }
            print(
                f"{language}, {count} kernels: median {rows[f'{language}, {count} kernels']['median_ms']:.0f} ms, "
                f"max {1000 * max(seconds):.0f} ms, {runs[0][1]} diagnostics",
                flush=True,
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = asyncio.run(measure())
    result = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "repeats": REPEATS,
        "files": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
