"""The full fuzz sweep: 10,000 generated hostile documents through two real servers over stdio,
sharing one forecaster service and one cache. The suite's test (tests/reliability/test_fuzz.py)
feeds the first 2,500 of the same seeded documents; this feeds them all and reports the latencies.

    python benchmarks/bench_fuzz.py --out benchmarks/results/fuzz.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "reliability")]

from lsp_support import FAST, StdioLsp, stop_service  # noqa: E402
from test_fuzz import SERVERS, fuzz, make_workspace  # noqa: E402


async def sweep(count: int, workdir: Path) -> dict:
    root, home = make_workspace(workdir / "fuzzed"), workdir / "home"
    servers = [await StdioLsp(home, root, FAST).start() for _ in range(SERVERS)]
    try:
        return await fuzz(servers, root, count)
    finally:
        for server in servers:
            await server.stop()
        stop_service(home)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = {
        "command": " ".join(["python", *sys.argv]),
        "machine": f"{platform.node()} {os.cpu_count()} cores",
        "python": platform.python_version(),
    }
    results.update(asyncio.run(sweep(args.documents, Path(tempfile.mkdtemp(prefix="kernelcast-fuzz-")))))
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    sys.exit(1 if results["problems"] or results["answered"] != args.documents else 0)


if __name__ == "__main__":
    main()
