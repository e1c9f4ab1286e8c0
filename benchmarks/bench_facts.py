"""Compiler-facts latency, cold (compiler in a child process) and warm (cache), on this machine.

python benchmarks/bench_facts.py --out benchmarks/results/facts_latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from kernelcast.kernels_runtime import facts
from kernelcast.kernels_runtime.hardware import SPECS

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    ("vector_add.cu (CUDA)", ROOT / "examples" / "vector_add.cu", "cuda"),
    ("matmul_tiled.cu (CUDA)", ROOT / "examples" / "matmul_tiled.cu", "cuda"),
    ("add_triton.py (Triton)", ROOT / "examples" / "add_triton.py", "triton"),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    gpu = SPECS["H100-SXM"]
    rows = []
    for label, path, language in CASES:
        code = path.read_text()
        started = time.perf_counter()
        cold = facts.compile_facts(code, language, gpu)
        cold_ms = 1000 * (time.perf_counter() - started)
        started = time.perf_counter()
        facts.compile_facts(code, language, gpu)
        warm_ms = 1000 * (time.perf_counter() - started)
        compilers = sorted({k.compiler for k in cold.kernels.values()})
        rows.append({"case": label, "cold_ms": round(cold_ms), "warm_ms": round(warm_ms, 3), "compiler": compilers, "error": cold.error})
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": f"{platform.node()}, {os.cpu_count()} cores, no GPU",
        "rows": rows,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
