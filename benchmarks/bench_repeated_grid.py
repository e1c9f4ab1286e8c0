"""What a Triton grid axis the kernel never reads costs, against what the forecaster counts for it.

`kernel[grid, BLOCK]`, a CUDA launch's block size written as a second grid axis, launches BLOCK
copies of the grid: every program along the axis its kernel never reads with `tl.program_id` redoes
the first one's work. The forecaster lengthens such a side by `repeated_grid_octaves`
(models/embedded/features.py): the waves of programs the copies add, the GPU holding SMs × 16
programs of Triton's 4 warps at once. This times one elementwise kernel launched once and with
copies, each from the file an author would write (FILE, which the counted cost is read from too),
over sizes from a few programs to many waves, and sets the measured gap (log2 of the time ratio,
octaves) beside the counted one.

Run on a GPU machine:  python3 benchmarks/bench_repeated_grid.py --out DIR
Writes DIR/repeated_grid.json and DIR/repeated_grid.md. Each launch is timed by the project's
harness (kernels_runtime/timing.py: an L2 flush, then the call between two events).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

ELEMENTS = (1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 27)
COPIES = (2, 16, 1024)
BLOCK = 1024

# The launch as an author writes it: read by the forecaster (its sizes from get_inputs()) and timed as
# written, one copy of the grid (copies 1) against several. tests/ read it with copies "BLOCK".
FILE = """import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)


def scale(x):
    out = torch.empty_like(x)
    n = x.numel()
    BLOCK = {block}
    scale_kernel[(n + BLOCK - 1) // BLOCK, {copies}](x, out, n, BLOCK)
    return out


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return scale(x)


def get_inputs():
    return [torch.randn({elements}, device="cuda")]
"""


def counted_octaves(elements: int, copies: int, gpu: str) -> float:
    """What the forecaster adds to the repeated side, read from the file an author would write."""
    from kernelcast.kernels_runtime.hardware import SPECS
    from kernelcast.models.embedded.features import Hardware, repeated_grid_octaves

    text = FILE.format(block=BLOCK, copies=copies, elements=elements)
    return repeated_grid_octaves(text, Hardware.from_json(SPECS[gpu].to_json()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gpu", default="H200", help="the hardware table's key for the GPU it runs on")
    args = parser.parse_args(argv)
    import torch

    from kernelcast.kernels_runtime import timing
    from kernelcast.kernels_runtime.worker import import_user_module

    rows: list[dict[str, Any]] = []
    for elements in ELEMENTS:
        x = torch.randn(elements, device="cuda")

        def timed_ms(copies: int, x: Any = x, elements: int = elements) -> float:
            # From a file, as an author writes it: Triton reads a kernel's source.
            scale = import_user_module(FILE.format(block=BLOCK, copies=copies, elements=elements)).scale
            return float(timing.time_one(torch, lambda: scale(x))["median_ms"])

        once_ms = timed_ms(1)
        for copies in COPIES:
            repeated_ms = timed_ms(copies)
            rows.append(
                {
                    "elements": elements,
                    "copies": copies,
                    "once_ms": once_ms,
                    "repeated_ms": repeated_ms,
                    "measured_octaves": round(math.log2(repeated_ms / once_ms), 3),
                    "counted_octaves": round(counted_octaves(elements, copies, args.gpu), 3),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name()
    (args.out / "repeated_grid.json").write_text(json.dumps({"device": device, "block": BLOCK, "rows": rows}, indent=1) + "\n")
    misses = [row["counted_octaves"] - row["measured_octaves"] for row in rows]
    lines = [
        f"# A grid axis the kernel never reads: measured against counted ({device}, BLOCK {BLOCK})",
        "",
        "| elements | copies | once ms | repeated ms | measured octaves | counted octaves |",
        "|---|---|---|---|---|---|",
        *(
            f"| {row['elements']:,} | {row['copies']} | {row['once_ms']:.4f} | {row['repeated_ms']:.4f} |"
            f" {row['measured_octaves']:.2f} | {row['counted_octaves']:.2f} |"
            for row in rows
        ),
        "",
        f"Counted minus measured: mean {sum(misses) / len(misses):+.2f}, largest {max(misses, key=abs):+.2f} octaves.",
    ]
    (args.out / "repeated_grid.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
