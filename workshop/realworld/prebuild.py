"""Build one KernelBench file's load_inline extensions ahead of its measurement, in a process of
its own: `python -m workshop.realworld.prebuild FILE PROBLEM_FILE` prints one JSON line
{ok, seconds, error}.

load_inline builds take about a CPU-minute and the measuring process owns the GPU, so the
runner builds many files at once on the host's other cores. The build lands where the
measuring worker looks for it (`worker.with_own_extension_name`, under the same KERNELCAST_HOME
and TORCH_CUDA_ARCH_LIST), so the worker's own load finds it done. Many files build in `__init__`,
not at import, so the model is built too, from the problem's `get_init_inputs()`; anything but
a failed build that this raises is left for the measurement to report. A process
per file: a file whose import kills Python costs its own build only.
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


def main(path: str, problem: str) -> int:
    started = time.monotonic()
    code = Path(path).read_text()
    printed = io.StringIO()
    try:
        from kernelcast.kernels_runtime.worker import MODEL_SEED, import_user_module, load_kernelbench

        with contextlib.redirect_stdout(printed):
            model_class, _ = load_kernelbench("candidate", code, "ModelNew" if "class ModelNew" in code else "Model")
            build_model(model_class, import_user_module(Path(problem).read_text()), MODEL_SEED)
        result = {"ok": True, "error": ""}
    except BaseException as error:  # the user's file: anything it raises is the build's outcome
        result = {"ok": False, "error": error_summary(f"{type(error).__name__}: {error}\n{printed.getvalue()}")}
    print(json.dumps({**result, "seconds": round(time.monotonic() - started, 1)}), flush=True)
    return 0


def build_model(model_class: type, problem: object, seed: int) -> None:
    """Build the model as the worker will, so an extension loaded in `__init__` is built now.

    Only when importing the file built nothing; on the meta device, so a model of many gigabytes
    of weights costs no memory while a dozen builds run at once."""
    import torch
    from torch.utils import cpp_extension

    if cpp_extension.JIT_EXTENSION_VERSIONER.entries:
        return
    try:
        with torch.device("meta"):
            torch.manual_seed(seed)
            init_inputs = list(problem.get_init_inputs()) if hasattr(problem, "get_init_inputs") else []
            torch.manual_seed(seed)
            model_class(*init_inputs)
    except Exception as error:
        if "Error building extension" in str(error):
            raise


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
