"""What Triton programs that each work on a few values cost, against what the forecaster counts for them.

A Triton kernel that never builds a block (no `tl.arange`) gives each program a single value: one
lane's work for a program of Triton's 4 warps, so the call costs the waves of programs it starts
more than the bytes it moves; blocks of a few values leave most lanes idle too. The forecaster
lengthens such a side by `few_value_program_us` (models/embedded/features.py): FEW_VALUE_WAVE_US per
wave of the programs the GPU holds at once (SMs × 16 programs of 4 warps), for blocks of up to
host_launch.FEW_VALUES values. This times the kernels an author writes that way (FILE, which the
counted cost is read from too: one value a program, blocks of VALUES) against the same work done a
block of 1,024 values a program, over sizes from a few programs to hundreds of waves, and sets the
measured time of a wave, and the measured gap (log2 of the time ratio, octaves), beside the counted
ones.

Run on a GPU machine:  python3 benchmarks/bench_few_value_programs.py --gpu H100-SXM --out DIR
Writes DIR/few_value_programs.json and DIR/few_value_programs.md. Each call is timed by the project's
harness (kernels_runtime/timing.py: an L2 flush, then the call between two events).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

ELEMENTS = (1 << 10, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24)
BLOCK = 1024
# Values a program: relu's one, relu_blocks' blocks of a few (the forecaster counts up to
# host_launch.FEW_VALUES) and of more, which it does not count.
VALUES = (1, 4, 16, 64)

# One file, two ways to write one ReLU: a program per value (read by the forecaster, its size from
# get_inputs()), and a block of BLOCK values a program (the way the weights' kernels are written).
FILE = """import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n):
    index = tl.program_id(0)
    if index < n:
        tl.store(out_ptr + index, tl.maximum(tl.load(x_ptr + index), 0.0))


@triton.jit
def relu_block_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


def relu(x):
    out = torch.empty_like(x)
    n = x.numel()
    relu_kernel[(n,)](x, out, n)
    return out


def relu_blocks(x):
    out = torch.empty_like(x)
    n = x.numel()
    relu_block_kernel[(triton.cdiv(n, {block}),)](x, out, n, BLOCK={block})
    return out


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return relu(x)


def get_inputs():
    return [torch.randn({elements}, device="cuda")]
"""


def at_once(gpu: str) -> int:
    from kernelcast.kernels_runtime.hardware import SPECS
    from kernelcast.models.embedded.features import Hardware, programs_at_once

    return programs_at_once(Hardware.from_json(SPECS[gpu].to_json()))


def counted(elements: int, values: int, gpu: str) -> float:
    """The µs the forecaster adds for FILE's launch whose programs take `values` values each: relu's for
    one, else relu_blocks' launched with blocks of `values` (what FILE so written counts beyond relu's)."""
    from kernelcast.kernels_runtime.hardware import SPECS
    from kernelcast.models.embedded.features import Hardware, few_value_program_us

    hardware = Hardware.from_json(SPECS[gpu].to_json())
    one_value = few_value_program_us(FILE.format(block=BLOCK, elements=elements), hardware, float(elements))
    if values == 1:
        return one_value
    return few_value_program_us(FILE.format(block=values, elements=elements), hardware, float(elements)) - one_value


def report(measured: dict[str, Any]) -> str:
    """The markdown table of one run (what main writes beside its JSON), measured against counted."""
    rows = measured["rows"]
    lines = [
        f"# Programs of a few values each: measured against counted ({measured['device']}, {measured['at_once']:,} programs a wave)",
        "",
        "| elements | values a program | waves | ms | blocks of 1,024, ms | measured µs a wave | measured octaves | counted octaves |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {row['elements']:,} | {row['values']} | {row['waves']:,} | {row['values_ms']:.4f} | {row['block_ms']:.4f} |"
            f" {row['measured_wave_us']:.3f} | {row['measured_octaves']:.2f} | {row['counted_octaves']:.2f} |"
            for row in rows
        ),
        "",
        "Counted octaves add the counted µs to the measured time of the kernel with blocks of 1,024 values.",
    ]
    for values in sorted({row["values"] for row in rows}):
        misses = [row["counted_octaves"] - row["measured_octaves"] for row in rows if row["values"] == values]
        mean, largest = sum(misses) / len(misses), max(misses, key=abs)
        written = "one value" if values == 1 else f"blocks of {values} values"
        lines.append(f"Programs of {written}, counted minus measured: mean {mean:+.2f}, largest {largest:+.2f} octaves.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gpu", default="H200", help="the hardware table's key for the GPU it runs on")
    args = parser.parse_args(argv)
    import torch

    from kernelcast.kernels_runtime import timing
    from kernelcast.kernels_runtime.worker import import_user_module

    programs_held = at_once(args.gpu)
    rows: list[dict[str, Any]] = []
    for elements in ELEMENTS:
        # From a file, as an author writes it: Triton reads a kernel's source.
        module = import_user_module(FILE.format(block=BLOCK, elements=elements))
        x = torch.randn(elements, device="cuda")
        block_ms = float(timing.time_one(torch, lambda: module.relu_blocks(x))["median_ms"])
        for values in VALUES:
            written = module if values == 1 else import_user_module(FILE.format(block=values, elements=elements))
            call = written.relu if values == 1 else written.relu_blocks
            assert torch.equal(call(x), module.relu_blocks(x)), "every way must compute the same"
            values_ms = float(timing.time_one(torch, lambda: call(x))["median_ms"])
            counted_us = counted(elements, values, args.gpu)
            waves = math.ceil(math.ceil(elements / values) / programs_held)
            rows.append(
                {
                    "elements": elements,
                    "values": values,
                    "waves": waves,
                    "values_ms": values_ms,
                    "block_ms": block_ms,
                    "measured_wave_us": round(1000 * (values_ms - block_ms) / waves, 4),
                    "measured_octaves": round(math.log2(values_ms / block_ms), 3),
                    "counted_us": round(counted_us, 3),
                    "counted_octaves": round(math.log2((1000 * block_ms + counted_us) / (1000 * block_ms)), 3),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name()
    measured = {"device": device, "at_once": programs_held, "rows": rows}
    (args.out / "few_value_programs.json").write_text(json.dumps(measured, indent=1) + "\n")
    (args.out / "few_value_programs.md").write_text(report(measured))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
