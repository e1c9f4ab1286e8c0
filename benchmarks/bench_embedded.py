"""Embedded forecaster latency on this machine's CPU: one pair as the editor sends it, a KernelBench
file (whose forecast the real-world trees and a line read too), and the worst case the issue names
(a 300-kernel file on both sides, nothing cached). Target: under
20 ms a pair of process CPU time, so a keystroke never waits on the model.

    python benchmarks/bench_embedded.py --out benchmarks/results/embedded.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.kernels_runtime.source.access_pattern import clear_cache as forget_access_patterns
from kernelcast.kernels_runtime.source.loop_trips import clear_cache as forget_loops
from kernelcast.models.embedded.backend import WEIGHTS_PATH, EmbeddedBackend
from kernelcast.models.embedded.features import read_code
from kernelcast.wire import ForecastRequest, KernelSide

ROOT = Path(__file__).resolve().parents[1]
HARDWARE = SPECS["H100-SXM"].to_json()
TARGET_MS = 20.0
REPEATS = 50


def _pairs() -> dict[str, ForecastRequest]:
    examples = ROOT / "examples"
    many = "\n".join(f"__global__ void k{i}(float* x) {{ __shared__ float t[32]; x[threadIdx.x] = t[{i}]; }}" for i in range(300))
    return {
        "examples: naive vs tiled SGEMM": ForecastRequest(
            KernelSide((examples / "matmul_naive.cu").read_text(), "cuda"),
            KernelSide((examples / "matmul_tiled.cu").read_text(), "cuda"),
            HARDWARE,
            {"N": 2048},
        ),
        "examples: KernelBench ReLU file, ModelNew against Model (read through the trees and a line)": ForecastRequest(
            KernelSide((examples / "kernelbench_relu.py").read_text(), "pytorch", "Model"),
            KernelSide((examples / "kernelbench_relu.py").read_text(), "cuda", "ModelNew"),
            HARDWARE,
            None,
        ),
        "300-kernel file on both sides": ForecastRequest(
            KernelSide(many, "cuda"), KernelSide(many.replace("t[", "t [", 1), "cuda"), HARDWARE, {"N": 4096}
        ),
    }


def _cpu_ms(backend: EmbeddedBackend, request: ForecastRequest) -> list[float]:
    """Process CPU time per forecast with the text caches cleared: what a fresh edit costs."""
    backend.predict(request)
    samples = []
    for _ in range(REPEATS):
        read_code.cache_clear()
        forget_access_patterns()
        forget_loops()
        started = time.process_time()
        backend.predict(request)
        samples.append((time.process_time() - started) * 1e3)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    backend = EmbeddedBackend()
    rows = {}
    for name, request in _pairs().items():
        samples = _cpu_ms(backend, request)
        rows[name] = {"median_ms": statistics.median(samples), "p90_ms": statistics.quantiles(samples, n=10)[-1], "n": len(samples)}
        print(f"{name}: median {rows[name]['median_ms']:.2f} ms, p90 {rows[name]['p90_ms']:.2f} ms (target < {TARGET_MS} ms)")
    result = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "weights": {"file": WEIGHTS_PATH.name, "bytes": WEIGHTS_PATH.stat().st_size, "model_id": backend.model.model_id},
        "target_ms": TARGET_MS,
        "pairs": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
