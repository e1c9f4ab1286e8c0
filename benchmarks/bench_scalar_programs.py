"""What Triton programs that each work on one value cost, against what the forecaster counts for them.

A Triton kernel that never builds a block (no `tl.arange`) gives each program a single value: one
lane's work for a program of Triton's 4 warps, so the call costs the waves of programs it starts
more than the bytes it moves. The forecaster lengthens such a side by `few_value_program_us`
(models/embedded/features.py): FEW_VALUE_WAVE_US per wave of the programs the GPU holds at once (SMs ×
16 programs of 4 warps). This times the kernel an author writes that way (FILE, which the counted
cost is read from too) against the same work done a block of 1,024 values a program, over sizes from
a few programs to hundreds of waves, and sets the measured time of a wave, and the measured gap
(log2 of the time ratio, octaves), beside the counted ones.

Run on a GPU machine:  python3 benchmarks/bench_scalar_programs.py --out DIR
Writes DIR/scalar_programs.json and DIR/scalar_programs.md. Each call is timed by the project's
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


def counted(elements: int, gpu: str) -> tuple[float, int | None]:
    """The µs the forecaster adds for the program-per-value side, and the programs it read, from FILE."""
    from kernelcast.kernels_runtime.hardware import SPECS
    from kernelcast.kernels_runtime.source.host_launch import few_value_programs
    from kernelcast.models.embedded.features import Hardware, few_value_program_us

    text = FILE.format(block=BLOCK, elements=elements)
    (launch,) = few_value_programs(text)
    return few_value_program_us(text, Hardware.from_json(SPECS[gpu].to_json()), float(elements)), launch.programs


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
        assert torch.equal(module.relu(x), module.relu_blocks(x)), "the two ways must compute the same"
        scalar_ms = float(timing.time_one(torch, lambda: module.relu(x))["median_ms"])
        block_ms = float(timing.time_one(torch, lambda: module.relu_blocks(x))["median_ms"])
        counted_us, programs_read = counted(elements, args.gpu)
        waves = math.ceil(elements / programs_held)
        rows.append(
            {
                "elements": elements,
                "waves": waves,
                "scalar_ms": scalar_ms,
                "block_ms": block_ms,
                "measured_wave_us": round(1000 * (scalar_ms - block_ms) / waves, 4),
                "measured_octaves": round(math.log2(scalar_ms / block_ms), 3),
                "counted_us": round(counted_us, 3),
                "counted_octaves": round(math.log2((1000 * block_ms + counted_us) / (1000 * block_ms)), 3),
                "programs_read": programs_read,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name()
    (args.out / "scalar_programs.json").write_text(json.dumps({"device": device, "at_once": programs_held, "rows": rows}, indent=1) + "\n")
    misses = [row["counted_octaves"] - row["measured_octaves"] for row in rows]
    lines = [
        f"# Programs of one value each: measured against counted ({device}, {programs_held:,} programs a wave, block of {BLOCK})",
        "",
        "| elements | waves | a value a program, ms | a block a program, ms | measured µs a wave | measured octaves | counted octaves |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {row['elements']:,} | {row['waves']:,} | {row['scalar_ms']:.4f} | {row['block_ms']:.4f} |"
            f" {row['measured_wave_us']:.3f} | {row['measured_octaves']:.2f} | {row['counted_octaves']:.2f} |"
            for row in rows
        ),
        "",
        "Counted octaves add the counted µs to the measured time of the block kernel.",
        f"Counted minus measured: mean {sum(misses) / len(misses):+.2f}, largest {max(misses, key=abs):+.2f} octaves.",
    ]
    (args.out / "scalar_programs.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
