"""What one call costs the host, on a tensor too small to keep the GPU busy: an eager PyTorch op, a
torch.compile'd function or module, a Triton kernel launched from Python, and one defined (and
autotuned) inside the call. The embedded forecaster's roofline floor adds a compiled call's cost
(models/embedded/features.py: COMPILED_CALL_US) and a kernel defined in the call's
(DEFINED_IN_CALL_US, AUTOTUNE_CONFIG_US); this is where their sizes come from.

Run on a GPU machine:  python3 benchmarks/bench_host_costs.py --out DIR [--processes 3] [--flaggems LIB]
With --flaggems (a folder holding the flag_gems package, as `python -m workshop realworld pack`
extracts it), two FlagGems ops join: abs through its generated pointwise wrapper
(`@pointwise_dynamic`) and a full sum through its kernel cache (`@libentry`, two kernels). What they
cost beyond a Triton kernel launched directly is each dispatch layer's host time
(models/embedded/features.py: DISPATCH_US). With --helion (a folder holding the helion package, as
`python -m workshop realworld pack` extracts it, its imports' wheels installed), an add written as
helion's example writes it (`@helion.kernel()`, its default config: no autotuning) joins likewise.
Writes DIR/host_costs.json and DIR/host_costs.md. Each workload is timed by the project's harness
(kernels_runtime/timing.py: an L2 flush, then the call between two events), in several fresh
processes: a compiled call's host time lies near what the flush hides, so within one process it
is either hidden (as cheap as one eager op) or tens of microseconds, and the mean over processes
is what a forecast can expect. At 64×64 elements the GPU work is well under a microsecond.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIDE = 64
CHAIN = 4  # eager ops in the chained workload; torch.compile fuses them into one kernel
EAGER_ONE = "eager, 1 op"
COMPILED = ("torch.compile, 1 op", f"torch.compile, {CHAIN} ops fused", "torch.compile of a module's forward, 1 op")


HELION_ADD = "helion add (@helion.kernel, 1 kernel)"
FLAGGEMS_ABS = "FlagGems abs (@pointwise_dynamic, 1 kernel)"
FLAGGEMS_SUM = "FlagGems sum (@libentry, 2 kernels)"
TRITON_ONE = "Triton kernel launched from Python"
# A kernel whose `@triton.jit` (and `@triton.autotune`) sits inside the timed function, as some
# LLM-written solutions have it: each call makes a new kernel object, which finds its binary in
# Triton's disk cache but not in its own, and an autotuner that times every config again.
DEFINED_IN_CALL = "Triton kernel defined inside the call"
AUTOTUNE_CONFIGS = (1, 4)  # one config, which the autotuner launches untimed, and several


def _autotuned_in_call(configs: int) -> str:
    return f"autotuned Triton kernel defined inside the call, {configs} configs"


def workloads(torch: Any, flaggems: Path | None = None, helion: Path | None = None) -> list[tuple[str, Callable[[], Any]]]:
    x = torch.randn(SIDE, SIDE, device="cuda")

    def chain(t: Any) -> Any:
        for _ in range(CHAIN):
            t = t.abs()
        return t

    class Problem(torch.nn.Module):
        def forward(self, t: Any) -> Any:
            return t.abs()

    compiled_one = torch.compile(lambda t: t.abs())
    compiled_chain = torch.compile(chain)
    compiled_module = torch.compile(Problem().forward)  # as a KernelBench ModelNew compiles its problem
    return [
        (EAGER_ONE, lambda: x.abs()),
        (f"eager, {CHAIN} ops", lambda: chain(x)),
        (COMPILED[0], lambda: compiled_one(x)),
        (COMPILED[1], lambda: compiled_chain(x)),
        (COMPILED[2], lambda: compiled_module(x)),
        (TRITON_ONE, _triton_abs(torch, x)),
        (DEFINED_IN_CALL, _defined_in_call(torch, x, configs=0)),
        *((_autotuned_in_call(configs), _defined_in_call(torch, x, configs)) for configs in AUTOTUNE_CONFIGS),
        *(_flaggems_ops(flaggems, x) if flaggems else []),
        *([(HELION_ADD, _helion_add(helion, torch, x))] if helion else []),
    ]


def _flaggems_ops(folder: Path, x: Any) -> list[tuple[str, Callable[[], Any]]]:
    """Two FlagGems ops on `x`, imported from `folder`."""
    import importlib

    import triton

    sys.path.insert(0, str(folder))
    libentry = importlib.import_module("flag_gems.utils.libentry")
    if tuple(int(part) for part in triton.__version__.split(".")[:2]) >= (3, 6):
        # Its launch cache knows Triton up to 3.5, whose launcher takes the same arguments.
        libentry.major_version, libentry.minor_version = 3, 5
    absolute = importlib.import_module("flag_gems.ops.abs").abs
    total = importlib.import_module("flag_gems.ops.sum").sum
    return [(FLAGGEMS_ABS, lambda: absolute(x)), (FLAGGEMS_SUM, lambda: total(x))]


def _helion_add(folder: Path, torch_module: Any, x: Any) -> Callable[[], Any]:
    """x + x through a helion kernel imported from `folder`, compiled by its first call (untimed)."""
    import importlib
    import os

    os.environ["HELION_AUTOTUNE_EFFORT"] = "none"  # read when a kernel is decorated
    sys.path.insert(0, str(folder))
    helion = importlib.import_module("helion")
    # helion compiles a kernel from its source and refuses closures: the names it uses must be globals.
    globals().update(torch=torch_module, hl=importlib.import_module("helion.language"))

    @helion.kernel()
    def add(a: Any, b: Any) -> Any:
        out = torch.empty_like(a)  # noqa: F821 (a global set above)
        for tile in hl.tile(out.size()):  # noqa: F821
            out[tile] = a[tile] + b[tile]
        return out

    return lambda: add(x, x)


def _absolute_kernel() -> Any:
    """A Triton |x| kernel, defined (and wrapped by `triton.jit`) anew each time this is called."""
    import triton
    import triton.language as tl

    @triton.jit
    def absolute(source, target, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(target + offsets, tl.abs(tl.load(source + offsets, mask=mask)), mask=mask)

    return absolute


def _triton_abs(torch: Any, x: Any) -> Callable[[], Any]:
    """One Triton kernel, defined once and launched directly: what a library's wrapper adds is on top of this."""
    import triton

    absolute, out = _absolute_kernel(), torch.empty_like(x)
    return lambda: absolute[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)


def _defined_in_call(torch: Any, x: Any, configs: int) -> Callable[[], Any]:
    """The same kernel defined anew on each call; autotuned over `configs` block sizes when configs > 0."""
    import triton

    out = torch.empty_like(x)

    def call() -> Any:
        if not configs:
            return _absolute_kernel()[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        tuned = triton.autotune([triton.Config({"BLOCK": 256 << i}) for i in range(configs)], key=["n"])(_absolute_kernel())
        return tuned[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())

    return call


def one_process(flaggems: Path | None, helion: Path | None) -> dict[str, float]:
    """Median µs per call of each workload, timed in this process."""
    import torch

    from kernelcast.kernels_runtime import timing

    return {name: 1e3 * float(timing.time_one(torch, fn)["median_ms"]) for name, fn in workloads(torch, flaggems, helion)}


def machine() -> str:
    """The GPU and the torch build the numbers belong to."""
    import torch

    return f"{torch.cuda.get_device_name()}, torch {torch.__version__}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--flaggems", type=Path, help="a folder holding the flag_gems package: time two of its ops too")
    parser.add_argument("--helion", type=Path, help="a folder holding the helion package: time a helion kernel too")
    parser.add_argument("--one-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_process:
        print(json.dumps(one_process(args.flaggems, args.helion)))
        return 0

    runs = []
    for index in range(args.processes):
        command = [sys.executable, __file__, "--out", str(args.out), "--one-process"]
        command += ["--flaggems", str(args.flaggems)] if args.flaggems else []
        command += ["--helion", str(args.helion)] if args.helion else []
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {index + 1}: " + ", ".join(f"{name} {us:.2f}" for name, us in runs[-1].items()), flush=True)
    surcharges = [run[name] - run[EAGER_ONE] for run in runs for name in COMPILED]
    derived = {
        "compiled_call_surcharge_us_mean": statistics.fmean(surcharges),
        "compiled_call_surcharge_us_median": statistics.median(surcharges),
        "eager_op_us": statistics.fmean((run[f"eager, {CHAIN} ops"] - run[EAGER_ONE]) / (CHAIN - 1) for run in runs),
    }
    derived["defined_in_call_us_mean"] = statistics.fmean(run[DEFINED_IN_CALL] - run[TRITON_ONE] for run in runs)
    # An autotuner with one config launches it untimed; with several it times each, so a config costs (many - none) / many.
    one, many = (_autotuned_in_call(configs) for configs in AUTOTUNE_CONFIGS)
    derived["autotune_one_config_us_mean"] = statistics.fmean(run[one] - run[DEFINED_IN_CALL] for run in runs)
    derived["autotune_per_config_us_mean"] = statistics.fmean((run[many] - run[DEFINED_IN_CALL]) / AUTOTUNE_CONFIGS[1] for run in runs)
    if args.flaggems:
        derived["flaggems_pointwise_wrapper_us_mean"] = statistics.fmean(run[FLAGGEMS_ABS] - run[TRITON_ONE] for run in runs)
        derived["flaggems_libentry_us_mean"] = statistics.fmean(run[FLAGGEMS_SUM] - 2 * run[TRITON_ONE] for run in runs)
    if args.helion:
        derived["helion_kernel_us_mean"] = statistics.fmean(run[HELION_ADD] - run[TRITON_ONE] for run in runs)
    args.out.mkdir(parents=True, exist_ok=True)
    where = machine()
    summary = {"machine": where, "side": SIDE, "runs": runs, "derived": derived}
    (args.out / "host_costs.json").write_text(json.dumps(summary, indent=1) + "\n")
    names = list(runs[0])
    lines = [
        f"# Host cost of a call, {SIDE}×{SIDE} fp32, median µs per call, each column one fresh process",
        "",
        f"{where}; `python3 benchmarks/bench_host_costs.py --out DIR --processes {args.processes}"
        + (" --flaggems LIB" if args.flaggems else "")
        + (" --helion LIB`" if args.helion else "`"),
        "",
        "| workload | " + " | ".join(f"process {i + 1}" for i in range(len(runs))) + " |",
        "|---|" + "---|" * len(runs),
        *(f"| {name} | " + " | ".join(f"{run[name]:.2f}" for run in runs) + " |" for name in names),
        "",
        f"A compiled call costs {derived['compiled_call_surcharge_us_mean']:.1f} µs more than one eager op on average "
        f"(median {derived['compiled_call_surcharge_us_median']:.1f}, over {len(surcharges)} compiled workloads); "
        f"each further eager op adds {derived['eager_op_us']:.2f} µs.",
        f"A Triton kernel defined inside the call costs {derived['defined_in_call_us_mean']:.0f} µs more than one defined once; "
        f"autotuned there over {AUTOTUNE_CONFIGS[1]} configs, each call times every config again, "
        f"{derived['autotune_per_config_us_mean']:.0f} µs a config (over one config, "
        f"{derived['autotune_one_config_us_mean']:.0f} µs: it is not timed); means over {len(runs)} processes.",
        "",
    ]
    if args.flaggems:
        lines[-1:-1] = [
            f"Beyond its kernels launched directly, a FlagGems op costs {derived['flaggems_pointwise_wrapper_us_mean']:.1f} µs "
            f"through its generated pointwise wrapper (abs) and {derived['flaggems_libentry_us_mean']:.1f} µs through its "
            f"kernel cache (sum, two kernels), on average over {len(runs)} processes.",
            "",
        ]
    if args.helion:
        lines[-1:-1] = [
            f"Beyond a Triton kernel launched directly, a helion kernel's call costs {derived['helion_kernel_us_mean']:.1f} µs "
            f"(`@helion.kernel`: its bound kernel found by the arguments, then launched), on average over {len(runs)} processes.",
            "",
        ]
    (args.out / "host_costs.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
