"""Measure a packed batch of real-world kernels on this machine's GPUs; resumable.

    python -m workshop realworld run BATCH_DIR --out RUN_DIR [--deadline-s S] [--gpus N] [--build-workers K]

BATCH_DIR is what `pack` wrote (batch.jsonl and files/<sha256>.py). Every entry is measured
the way `kernelcast measure cand.py` measures a KernelBench file: its problem file is the
reference (`Model`), both built after the same seed, outputs checked on several seeds under
KernelBench's tolerance rule, then timed in interleaved rounds and checked again. An
`inductor` entry is the problem's own `Model` under `torch.compile` (default mode).

One thread per GPU drives that GPU's persistent measuring worker; load_inline files are built
first by `prebuild` processes on the other cores, so the GPUs measure while the CPUs build.
Every outcome is kept: a measurement, or a failure with its kind and message (a build that
fails is a `compile` failure). Results are appended to RUN_DIR/results.jsonl as they come, and
a second run over the same folder measures only what is missing.

A measurement still running at the deadline is cut and measured again by a later run; the cut
is noted in results.jsonl (`cut_after_s`, never assembled into a record). One cut after
SLOW_CUT_S or more would hold its GPU for most of every later call in turn, so it is measured
after everything else; after SLOW_CUTS such cuts it is recorded as a `timeout`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kernelcast.wire import jsonl_records
from workshop.realworld import cuda_l2
from workshop.realworld.manifest import INDUCTOR
from workshop.realworld.prebuild import error_summary

# Leave this much of the deadline for the measurement in flight and writing the results.
RESERVE_S = 45.0
BUILD_LIMIT_S = 420.0
KERNEL_LIMIT_S = 10.0
LOAD_LIMIT_S = 240.0
ROUNDS = 5
SLOW_CUT_S = 120.0
SLOW_CUTS = 2
# The field of a results.jsonl row that notes a cut (seconds run before the deadline ended it): no outcome.
CUT = "cut_after_s"

# torch.compile of the problem's own model, as a ModelNew the measure path takes like any other:
# the same parameters (a subclass, built after the same seed), forward compiled in default mode.
COMPILED_MODEL = """

class ModelNew(Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._compiled_forward = torch.compile(super().forward)

    def forward(self, *inputs):
        return self._compiled_forward(*inputs)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("batch", type=Path, help="a folder written by `python -m workshop realworld pack`")
    parser.add_argument("--out", type=Path, required=True, help="the run folder (results.jsonl is appended to)")
    parser.add_argument("--deadline-s", type=float, default=540.0, help="stop starting measurements this long after the start")
    parser.add_argument("--gpus", type=int, default=0, help="how many GPUs to use (default: every visible one)")
    parser.add_argument("--build-workers", type=int, default=0, help="parallel load_inline builds (default: cores - 2 per GPU)")
    parser.set_defaults(run=run_command)


def candidate_code(entry: dict[str, Any], files: Path) -> str:
    code = (files / f"{entry['sha256']}.py").read_text()
    return code + COMPILED_MODEL if entry["language"] == INDUCTOR else code


def read_results(results: Path) -> tuple[set[str], dict[str, list[float]]]:
    """The ids with an outcome, and for each id cut by a deadline how long it had run each time."""
    done: set[str] = set()
    cuts: dict[str, list[float]] = {}
    for _, row in jsonl_records(results) if results.exists() else ():
        if CUT in row:
            cuts.setdefault(row["id"], []).append(float(row[CUT]))
        else:
            done.add(row["id"])
    return done, {key: seconds for key, seconds in cuts.items() if key not in done}


def plan(entries: list[dict[str, Any]], results: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, list[float]]]:
    """What to measure now (in order, slow cuts last), what to record as a timeout, and each slow cut's seconds."""
    done, cuts = read_results(results)
    slow = {key: long for key, each in cuts.items() if (long := [seconds for seconds in each if seconds >= SLOW_CUT_S])}
    waiting = [entry for entry in entries if entry["id"] not in done]
    todo = sorted((entry for entry in waiting if len(slow.get(entry["id"], ())) < SLOW_CUTS), key=lambda entry: entry["id"] in slow)
    given_up = [entry for entry in waiting if len(slow.get(entry["id"], ())) >= SLOW_CUTS]
    return todo, given_up, slow


class Run:
    """One pass over the batch: builds feed a queue the GPU threads drain, until the deadline."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.files = args.batch / "files"
        self.results = args.out / "results.jsonl"
        self.deadline = time.monotonic() + args.deadline_s
        # Built load_inline files go first: a build costs a CPU-minute that a deadline would waste.
        self.ready: queue.PriorityQueue[tuple[int, int, dict[str, Any] | None]] = queue.PriorityQueue()
        self.queued = itertools.count()
        self.lock = threading.Lock()
        self.finished = 0
        self.cancel = threading.Event()
        entries = [entry for _, entry in jsonl_records(args.batch / "batch.jsonl")]
        self.todo, given_up, self.slow_cuts = plan(entries, self.results)
        measured = len(entries) - len(self.todo) - len(given_up)
        print(f"{len(entries)} entries, {measured} already measured, {len(given_up)} cut too often, {len(self.todo)} to go", flush=True)
        for entry in given_up:
            ran = " s and ".join(f"{seconds:.0f}" for seconds in self.slow_cuts[entry["id"]])
            message = f"measuring was still running when {SLOW_CUTS} runs ended ({ran} s in)"
            with self.lock:
                self._append(entry, failure="timeout", message=message)
            print(f"[timeout] {entry['id']} {entry['language']} {message}", flush=True)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def _append(self, entry: dict[str, Any], **fields: Any) -> dict[str, Any]:
        row = {"id": entry["id"], "source": entry["source"], "language": entry["language"], **fields}
        with self.results.open("a") as stream:
            stream.write(json.dumps(row) + "\n")
        return row

    def note_cut(self, entry: dict[str, Any], seconds: float) -> None:
        """A measurement the deadline ended: no outcome, measured again by a later run (module docstring)."""
        with self.lock:
            self._append(entry, **{CUT: seconds})
            print(f"[cut] {entry['id']} {entry['language']} still running after {seconds:.0f} s at the deadline", flush=True)

    def record(self, entry: dict[str, Any], outcome: dict[str, Any], **extra: Any) -> None:
        with self.lock:
            row = self._append(entry, **extra, **outcome)
            self.finished += 1
            what = f"{row['speedup']:.3f}x" if "speedup" in row else f"{row['failure']}: {row['message'][:90]!r}"
            print(f"[{self.finished}/{len(self.todo)}] {entry['id']} {entry['language']} {what}", flush=True)

    def build(self, entry: dict[str, Any]) -> None:
        """Prebuild one load_inline file; a failed build is the entry's result, a built one joins the queue."""
        if self.left() < RESERVE_S + 60:
            return
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "workshop.realworld.prebuild",
                    str(self.files / f"{entry['sha256']}.py"),
                    str(self.files / f"{entry['problem_sha256']}.py"),
                ],
                capture_output=True,
                text=True,
                timeout=min(BUILD_LIMIT_S, max(self.left() - RESERVE_S, 1.0)),
            )
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            printed = "\n".join(line for line in done.stdout.splitlines() if not line.startswith("{"))
            built = (
                json.loads(lines[-1])
                if lines
                else {
                    "ok": False,
                    "error": f"the build process ended ({done.returncode}) without an answer: {done.stderr[-400:]}",
                    "seconds": None,
                }
            )
        except subprocess.TimeoutExpired:
            printed = ""
            if self.left() < RESERVE_S:
                return  # cut by the deadline, not by the kernel: measured next time
            built = {"ok": False, "error": f"the load_inline build took over {BUILD_LIMIT_S:.0f} s", "seconds": BUILD_LIMIT_S}
        if built["ok"]:
            self.put({**entry, "build_s": built["seconds"]}, first=True)
        else:
            message = f"candidate failed to load: {error_summary(built['error'] + chr(10) + printed)}"
            self.record(entry, {"failure": "compile", "message": message}, build_s=built["seconds"])

    def measure_on(self, gpu: int) -> None:
        from kernelcast.kernels_runtime.measure import MeasureFailure, Timeouts, measure_pair

        while True:
            try:
                _, _, entry = self.ready.get(timeout=1.0)
            except queue.Empty:
                if self.left() < RESERVE_S:
                    return
                continue
            if entry is None or self.left() < RESERVE_S:
                return
            reference = (self.files / f"{entry['problem_sha256']}.py").read_text()
            started = time.monotonic()
            outcome = measure_pair(
                {"code": candidate_code(entry, self.files), "language": "pytorch", "name": "ModelNew"},
                {"code": reference, "language": "pytorch", "name": "Model"},
                gpu_index=gpu,
                rounds=ROUNDS,
                timeouts=Timeouts(kernel_s=KERNEL_LIMIT_S, load_s=min(LOAD_LIMIT_S, max(self.left() - 5.0, 10.0))),
                tolerance=entry.get("check_tolerance", "auto"),
                cancel=self.cancel,
            )
            seconds = round(time.monotonic() - started, 2)
            if isinstance(outcome, MeasureFailure):
                if outcome.kind == "cancelled" or (outcome.kind == "timeout" and self.left() < 10.0):
                    self.note_cut(entry, seconds)  # the deadline's doing, not the kernel's: left for the next run
                    return
                self.record(
                    entry,
                    {"failure": outcome.kind, "message": outcome.message, **outcome.details},
                    gpu_index=gpu,
                    seconds=seconds,
                    build_s=entry.get("build_s"),
                )
            else:
                self.record(entry, outcome.to_json(), gpu_index=gpu, seconds=seconds, build_s=entry.get("build_s"))

    def go(self, gpus: int, build_workers: int) -> None:
        to_build = [entry for entry in self.todo if entry["language"] == "cuda"]
        for entry in self.todo:
            if entry["language"] != "cuda":
                self.put(entry)
        threads = [threading.Thread(target=self.measure_on, args=(gpu,), daemon=True) for gpu in range(gpus)]
        for thread in threads:
            thread.start()
        with concurrent.futures.ThreadPoolExecutor(build_workers) as builders:
            list(builders.map(self.build, to_build))
        while any(thread.is_alive() for thread in threads) and self.ready.qsize() and self.left() > RESERVE_S:
            time.sleep(1.0)
        for _ in threads:
            self.put(None)
        for thread in threads:
            thread.join(max(self.left(), 1.0))
        self.cancel.set()
        for thread in threads:
            thread.join(30.0)  # the cancelled measurement ends before the workers are stopped

    def put(self, entry: dict[str, Any] | None, first: bool = False) -> None:
        """Built load_inline files first, entries a deadline cut slowly before last."""
        last = entry is not None and entry["id"] in self.slow_cuts
        self.ready.put((2 if last else 0 if first else 1, next(self.queued), entry))


def run_command(args: argparse.Namespace) -> int:
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    gpus = args.gpus or torch.cuda.device_count()
    if gpus == 0:
        print("no GPU visible: nothing can be measured", file=sys.stderr)
        return 1
    # The build processes and the measuring workers must agree on the flags, or the worker rebuilds.
    major, minor = torch.cuda.get_device_capability(0)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    os.environ.setdefault("MAX_JOBS", "2")
    build_workers = args.build_workers or max((os.cpu_count() or 4) - 4 * gpus, 1)
    # Library entries import the library's package that pack copied into BATCH/lib; the workers inherit this.
    lib = args.batch / "lib"
    if lib.is_dir():
        os.environ["PYTHONPATH"] = os.pathsep.join(part for part in (str(lib.resolve()), os.environ.get("PYTHONPATH", "")) if part)
    # CUDA-L2 entries build against the CUTLASS headers that pack put in the batch; prebuilds and workers inherit the path.
    cuda_l2.unpack_cutlass(args.batch)
    run = Run(args)
    started = time.monotonic()
    run.go(gpus, build_workers)
    from kernelcast.kernels_runtime.measure import shutdown_workers

    shutdown_workers()
    print(f"{run.finished} results in {time.monotonic() - started:.0f} s on {gpus} GPU(s) with {build_workers} builders", flush=True)
    return 0
