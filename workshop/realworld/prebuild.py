"""Build one KernelBench file's load_inline extensions ahead of its measurement, in a process of
its own: `python -m workshop.realworld.prebuild FILE` prints one JSON line {ok, seconds, error}.

load_inline builds take about a CPU-minute and the measuring process owns the GPU, so the
runner builds many files at once on the host's other cores. The build lands where the
measuring worker looks for it (`worker.extensions_dir`, under the same KERNELCAST_HOME and
TORCH_CUDA_ARCH_LIST), so the worker's own load finds it done. A process per file: a file
whose import kills Python costs its own build only.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import time
from pathlib import Path

MAX_LINES = 14
MAX_LINE_CHARS = 300


def error_summary(text: str) -> str:
    """The first line and the compiler's error lines, without the long command lines around them.

    A build with `verbose=True` prints its log instead of attaching it to the exception: the
    caller appends the process's output, and the error lines are found in either."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines[1:] if re.search(r"\berror\b|Error:|undefined reference", line) and not line.startswith("[")]
    kept = lines[:1] + errors[: MAX_LINES - 1]
    return "\n".join(line[:MAX_LINE_CHARS] for line in kept)


def main(path: str) -> int:
    started = time.monotonic()
    code = Path(path).read_text()
    printed = io.StringIO()
    try:
        from kernelcast.kernels_runtime.worker import load_kernelbench

        with contextlib.redirect_stdout(printed):
            load_kernelbench("candidate", code, "ModelNew" if "class ModelNew" in code else "Model")
        result = {"ok": True, "error": ""}
    except BaseException as error:  # the user's file: anything it raises is the build's outcome
        result = {"ok": False, "error": error_summary(f"{type(error).__name__}: {error}\n{printed.getvalue()}")}
    print(json.dumps({**result, "seconds": round(time.monotonic() - started, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
