"""Build, check and time every corpus kernel on the local GPU; resumable, crash-proof.

Runs on the GPU machine: `python -m workshop.corpus.runner --out DIR`.

- Compile workers (a process pool) compile each variant (cupy/NVRTC for CUDA, Triton's
  warm-up for Triton, no launches) and take its compiler facts with kernels_runtime, in
  parallel, filling the on-disk compile caches.
- One measuring child owns the GPU for checks and timing, one (operation, size) group at
  a time: inputs and the PyTorch reference once, each variant checked against it (outputs
  poisoned first), then `--rounds` interleaved timing rounds over all correct variants and
  the reference, then a re-check on fresh inputs. Round medians give each kernel's 95% CI.
- The parent appends each record to DIR/records.jsonl as it arrives. A kernel that kills
  the child (illegal address) or hangs is recorded as a failure and the child restarted,
  so a run resumes where it stopped and one bad kernel costs one record.

Records carry ids and numbers only; `generate.describe` restores code and launches.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import select
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from workshop.corpus.generate import REFERENCE_FAMILY, Entry, entries, record_key, reference_id
from workshop.corpus.spec import ZERO, Launch, Op, Sizes, TensorSpec

SEEDS = (11, 22)  # check before timing, re-check after
GROUP_TIMEOUT_S = 120.0  # no message from the child for this long: it hangs
TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i32": "int32", "i64": "int64", "u8": "uint8", "i8": "int8"}
TRITON_POINTER = {"f32": "*fp32", "f16": "*fp16", "bf16": "*bf16", "i32": "*i32", "i64": "*i64", "u8": "*u8", "i8": "*i8"}


# --- compiling (pool workers) -------------------------------------------------------------------


def compile_variant(kernel_id: str) -> dict[str, Any]:
    """Compile one variant without launching it; returns its error or its compiler facts by record key.

    Facts are taken for every problem size: a Triton block that follows the size (BLOCK_N = n)
    compiles to other registers and spills, and a CUDA block that does has another occupancy.
    Sizes with the same launches share one compile (compile_facts caches it).
    """
    entry = _entries_by_id()[kernel_id]
    sizes = entry.problems()[-1]
    try:
        if entry.variant.language == "cuda":
            _cuda_functions(entry)
        else:
            _triton_warmup(entry, sizes)
    except Exception as error:  # a compile error of a generated kernel: recorded, never fatal
        return {"id": kernel_id, "error": f"{type(error).__name__}: {_first_lines(str(error), 20)}"}
    return {"id": kernel_id, "error": None, "facts": {record_key(kernel_id, s): _facts(entry, s) for s in entry.problems()}}


def _facts(entry: Entry, sizes: Sizes) -> dict[str, Any]:
    """kernels_runtime's facts, taken the way the editor takes them, per kernel name."""
    from kernelcast.kernels_runtime.facts import compile_facts
    from kernelcast.kernels_runtime.hardware import lookup

    gpu = lookup("h100-sxm")
    facts: dict[str, Any] = {}
    shapes = {**entry.op.inputs(sizes), **entry.op.outputs(sizes), **entry.variant.scratch(sizes)}
    for launch in entry.launches(sizes):
        if launch.kernel == ZERO or launch.kernel in facts:
            continue
        if entry.variant.language == "cuda":
            result = compile_facts(
                entry.variant.code,
                "cuda",
                gpu,
                [launch.kernel],
                launch.block[0] * launch.block[1] * launch.block[2],
                launch.shared_bytes,
                timeout_s=120,
            )
        else:
            signature = _triton_signature(entry, launch, shapes)
            result = compile_facts(
                entry.variant.code,
                "triton",
                gpu,
                [launch.kernel],
                signature=signature,
                constexprs=dict(launch.constexprs),
                num_warps=launch.num_warps,
                num_stages=launch.num_stages,
                timeout_s=120,
            )
        kernel = result.kernels.get(launch.kernel)
        facts[launch.kernel] = kernel.to_json() if kernel else {"error": result.error}
    return facts


def _triton_signature(entry: Entry, launch: Launch, shapes: dict[str, TensorSpec]) -> dict[str, Any]:
    import ast

    tree = ast.parse(entry.variant.code)
    function = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == launch.kernel)
    params = [arg.arg for arg in function.args.args if arg.arg not in launch.constexprs]
    return {name: (TRITON_POINTER[shapes[arg].dtype] if isinstance(arg, str) else arg.value) for name, arg in zip(params, launch.args)}


_ENTRIES: dict[str, Entry] | None = None


def _entries_by_id() -> dict[str, Entry]:
    global _ENTRIES
    if _ENTRIES is None:
        _ENTRIES = {entry.id: entry for entry in entries()}
    return _ENTRIES


_LOADED: dict[str, dict[str, Any]] = {}


def _cuda_functions(entry: Entry) -> dict[str, Any]:
    """Kernel name → cupy function; NVRTC results come from cupy's disk cache after the first compile."""
    if entry.id not in _LOADED:
        import cupy

        module = cupy.RawModule(code=entry.variant.code, options=("-std=c++17",))
        _LOADED[entry.id] = {name: module.get_function(name) for name in entry.kernel_names()}
    return _LOADED[entry.id]


def _triton_module(entry: Entry) -> Any:
    from kernelcast.kernels_runtime.worker import import_user_module

    return import_user_module(entry.variant.code)


def _triton_warmup(entry: Entry, sizes: Sizes) -> None:
    import torch

    module = _triton_module(entry)
    shapes = {**entry.op.inputs(sizes), **entry.op.outputs(sizes), **entry.variant.scratch(sizes)}
    tiny = {name: torch.empty(16, dtype=getattr(torch, TORCH_DTYPES[spec.dtype]), device="cuda") for name, spec in shapes.items()}
    for launch in entry.launches(sizes):
        if launch.kernel == ZERO:
            continue
        values = [tiny[arg] if isinstance(arg, str) else arg.value for arg in launch.args]
        getattr(module, launch.kernel).warmup(*values, grid=launch.grid, **_triton_options(launch))


def _triton_options(launch: Launch) -> dict[str, Any]:
    options = dict(launch.constexprs)
    if launch.num_warps is not None:
        options["num_warps"] = launch.num_warps
    if launch.num_stages is not None:
        options["num_stages"] = launch.num_stages
    return options


# --- the measuring child -----------------------------------------------------------------------


class Group:
    """One operation at one size: shared inputs, outputs and reference, many variants."""

    def __init__(self, torch: Any, op: Op, sizes: Sizes) -> None:
        self.torch, self.op, self.sizes = torch, op, sizes
        self.input_specs = op.inputs(sizes)
        self.output_specs = op.outputs(sizes)
        self.outputs = {name: self.empty(spec) for name, spec in self.output_specs.items()}
        self.fill_inputs(SEEDS[0])

    def empty(self, spec: TensorSpec) -> Any:
        return self.torch.empty(spec.shape, dtype=getattr(self.torch, TORCH_DTYPES[spec.dtype]), device="cuda")

    def fill_inputs(self, seed: int) -> None:
        torch = self.torch
        generator = torch.Generator(device="cuda").manual_seed(seed)
        self.inputs = {}
        for name, spec in self.input_specs.items():
            dtype = getattr(torch, TORCH_DTYPES[spec.dtype])
            kind, *bounds = spec.init.split(":")
            if kind == "randint":
                low, high = int(bounds[0]), int(bounds[1])
                tensor = torch.randint(low, high, spec.shape, generator=generator, device="cuda", dtype=torch.int64).to(dtype)
            elif kind == "zeros":
                tensor = torch.zeros(spec.shape, dtype=dtype, device="cuda")
            elif kind == "rand":
                tensor = torch.rand(spec.shape, generator=generator, device="cuda", dtype=torch.float32).to(dtype)
            else:
                tensor = torch.randn(spec.shape, generator=generator, device="cuda", dtype=torch.float32).to(dtype)
            self.inputs[name] = tensor
        self.expected = self.op.reference(torch, self.inputs, self.sizes)

    def poison(self) -> None:
        for tensor in self.outputs.values():
            if tensor.is_floating_point():
                tensor.fill_(float("nan"))
            else:
                tensor.view(self.torch.uint8).fill_(0x5A)

    def callable_for(self, entry: Entry) -> Callable[[], None]:
        """The variant's launches at this size, bound to this group's tensors."""
        scratch = {name: self.empty(spec) for name, spec in entry.variant.scratch(self.sizes).items()}
        steps: list[Callable[[], None]] = []
        for launch in entry.launches(self.sizes):
            steps.append(self._bind(entry, launch, scratch))

        def run() -> None:
            for step in steps:
                step()

        return run

    def _bind(self, entry: Entry, launch: Launch, scratch: dict[str, Any]) -> Callable[[], None]:
        import numpy as np

        def tensor(name: str) -> Any:
            return self.inputs.get(name) if name in self.inputs else self.outputs.get(name, scratch.get(name))

        if launch.kernel == ZERO:
            target = launch.args[0]
            return lambda: tensor(target).zero_()
        if entry.variant.language == "cuda":
            function = _cuda_functions(entry)[launch.kernel]
            if launch.shared_bytes > 48 * 1024:
                function.max_dynamic_shared_size_bytes = launch.shared_bytes
            scalar_types = {"i32": np.int32, "i64": np.int64, "f32": np.float32}

            def cuda_args() -> tuple[Any, ...]:
                # Resolved at call time: inputs are replaced for the re-check.
                return tuple(
                    np.uint64(tensor(arg).data_ptr()) if isinstance(arg, str) else scalar_types[arg.ctype](arg.value) for arg in launch.args
                )

            return lambda: function(launch.grid, launch.block, cuda_args(), shared_mem=launch.shared_bytes)
        kernel = getattr(_triton_module(entry), launch.kernel)
        options = _triton_options(launch)
        grid = launch.grid
        return lambda: kernel[grid](*[tensor(arg) if isinstance(arg, str) else arg.value for arg in launch.args], **options)

    def check(self, run: Callable[[], None]) -> str | None:
        """None when every output matches the reference within the operation's tolerance."""
        from kernelcast.kernels_runtime.timing import tolerance_for

        self.poison()
        run()
        self.torch.cuda.synchronize()
        for name, expected in self.expected.items():
            actual = self.outputs[name]
            dtype = self.output_specs[name].dtype
            tolerance = self.op.tolerance.get(dtype, tolerance_for(dtype))
            problem = compare(self.torch, name, expected, actual, dtype, tolerance, self.op.compare_sorted)
            if problem:
                return problem
        return None


def compare(torch: Any, name: str, expected: Any, actual: Any, dtype: str, tolerance: float, sort_rows: bool) -> str | None:
    from kernelcast.kernels_runtime.timing import check_close

    if sort_rows:
        expected, actual = torch.sort(expected, dim=-1).values, torch.sort(actual, dim=-1).values
    if expected.shape == actual.shape and _close_on_gpu(torch, expected, actual, tolerance):
        return None
    return check_close(name, _numpy(torch, expected), _numpy(torch, actual), dtype, tolerance)


def _close_on_gpu(torch: Any, expected: Any, actual: Any, tolerance: float) -> bool:
    """check_close's criterion evaluated on the GPU: copying 64M elements to numpy took
    seconds per check. Only a mismatch goes to check_close, for its message."""
    e, a = expected.double(), actual.double()
    error = (a - e).abs()
    error[torch.isnan(e) & torch.isnan(a)] = 0.0
    error[torch.isinf(e) & (e == a)] = 0.0
    allowed = tolerance + tolerance * torch.nan_to_num(e, nan=0.0, posinf=0.0, neginf=0.0).abs()
    return bool((error <= allowed).all())


def _numpy(torch: Any, tensor: Any) -> Any:
    if tensor.dtype in (torch.float16, torch.bfloat16):
        tensor = tensor.float()
    return tensor.detach().cpu().numpy()


def round_samples(torch: Any, run: Callable[[], None], flush: Any, first: bool) -> list[float]:
    """One round of one kernel: a short warm-up, then samples until stable or 0.05 s.

    Shorter than docs/measure.md's per-side rule (≥100 ms of kernel time): the GPU stays busy
    through the whole sweep, so clocks are up, and three rounds spread over a group's
    minutes give a CI that includes drift, which pooled samples would not.
    """
    from kernelcast.kernels_runtime import timing

    estimate = timing.warm_up(torch, run, lambda: None, min_ms=5.0 if first else 1.0, min_calls=3 if first else 1)
    rule = timing.StopRule(min_samples=10, min_kernel_ms=1.0, max_rel_sem=0.01, max_wall_s=0.05)
    return timing.sample_until_stable(torch, run, flush, rule, estimate, lambda: None)


def median_intervals(round_medians_ms: list[float]) -> dict[str, list[float] | None]:
    """95% intervals of a kernel's median from its round medians.

    `ci95_within_run_ms` is what the rounds alone say; `ci95_ms`, the one the dataset reports,
    adds the run-to-run drift, so that a re-measurement in another run lands inside it.
    """
    from kernelcast.kernels_runtime.timing import run_to_run_sd, t_quantile_975

    if len(round_medians_ms) < 2:
        return {"ci95_within_run_ms": None, "ci95_ms": None}
    logs = [math.log(m) for m in round_medians_ms]
    center = math.exp(statistics.fmean(logs))
    within = t_quantile_975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    drift_sd = run_to_run_sd(center)
    total = math.hypot(within, 1.96 * drift_sd)
    return {
        "ci95_within_run_ms": [center * math.exp(-within), center * math.exp(within)],
        "ci95_ms": [center * math.exp(-total), center * math.exp(total)],
    }


def runtime_summary(rounds: list[list[float]]) -> dict[str, Any]:
    """Median/p20/p80/n over all samples, plus 95% intervals of the median from round medians."""
    from kernelcast.kernels_runtime.timing import summarize

    summary = summarize([sample for samples in rounds for sample in samples])
    summary["round_medians_ms"] = [statistics.median(samples) for samples in rounds]
    summary.update(median_intervals(summary["round_medians_ms"]))
    return summary


def child_main(rounds: int, result_fd: int) -> int:
    """Reads groups as JSON lines on stdin; writes messages on `result_fd` (stdout is the log)."""
    import torch

    from kernelcast.kernels_runtime.timing import l2_flush_buffer
    from kernelcast.kernels_runtime.worker import clock_state

    out = os.fdopen(result_fd, "w", buffering=1)
    sys.stdout = sys.stderr

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")

    by_id = _entries_by_id()
    ops = {entry.op.name: entry.op for entry in by_id.values()}
    flush = l2_flush_buffer(torch)
    send({"type": "ready"})
    for line in sys.stdin:
        request = json.loads(line)
        op, sizes = ops[request["op"]], request["sizes"]
        clocks_before = clock_state(0)
        group = Group(torch, op, sizes)
        runs: dict[str, Callable[[], None]] = {}
        results: dict[str, dict[str, Any]] = {}
        for kernel_id in request["variants"]:
            send({"type": "start", "id": kernel_id, "phase": "check"})
            try:
                run = group.callable_for(by_id[kernel_id])
                problem = group.check(run)
            except Exception as error:
                results[kernel_id] = {"failure": {"kind": "runtime", "message": _first_lines(str(error), 8)}}
                if not _context_alive(torch):
                    send({"type": "dead", "id": kernel_id, "message": _first_lines(str(error), 8)})
                    return 3
                continue
            if problem:
                results[kernel_id] = {"failure": {"kind": "wrong", "message": problem}}
            else:
                runs[kernel_id] = run
        if request.get("reference"):
            runs[reference_id(op.name)] = lambda: op.reference(torch, group.inputs, sizes)  # noqa: F821 (del only after the rounds)
        samples: dict[str, list[list[float]]] = {kernel_id: [] for kernel_id in runs}
        order = list(runs)
        for round_index in range(rounds):
            for kernel_id in order if round_index % 2 == 0 else reversed(order):
                send({"type": "start", "id": kernel_id, "phase": f"round {round_index + 1}"})
                samples[kernel_id].append(round_samples(torch, runs[kernel_id], flush, round_index == 0))
        group.fill_inputs(SEEDS[1])
        for kernel_id in order:
            if kernel_id == reference_id(op.name):
                continue
            send({"type": "start", "id": kernel_id, "phase": "re-check"})
            problem = group.check(runs[kernel_id])
            if problem:
                results[kernel_id] = {"failure": {"kind": "wrong", "message": f"after timing, seed {SEEDS[1]}: {problem}"}}
        clocks_after = clock_state(0)
        for kernel_id in order:
            result = results.get(kernel_id) or {"failure": None}
            result["runtime"] = runtime_summary(samples[kernel_id])
            results[kernel_id] = result
        for kernel_id, result in results.items():
            send(
                {
                    "type": "record",
                    "key": record_key(kernel_id, sizes),
                    "kernel_id": kernel_id,
                    "op": op.name,
                    "sizes": sizes,
                    "correct": result["failure"] is None,
                    "seeds": list(SEEDS),
                    "clocks": {"before": clocks_before, "after": clocks_after},
                    **result,
                }
            )
        send({"type": "group_done"})
        del group, runs
        torch.cuda.empty_cache()
    return 0


def _context_alive(torch: Any) -> bool:
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").item()
        return True
    except Exception:
        return False


# --- the parent: scheduling, crash handling, the records file -------------------------------------


class Child:
    """The measuring child process and its message pipe."""

    def __init__(self, rounds: int, log: Path) -> None:
        read_fd, write_fd = os.pipe()
        self.log = open(log, "a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "workshop.corpus.runner", "--child", "--rounds", str(rounds), "--result-fd", str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=self.log,
            pass_fds=(write_fd,),
            text=True,
            start_new_session=True,
        )
        os.close(write_fd)
        self.read_fd = read_fd
        self.pending = b""

    def send(self, request: dict[str, Any]) -> None:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()

    def receive(self, timeout_s: float) -> dict[str, Any] | None:
        """The next message, or None when the child died or was silent for `timeout_s`.

        Reads the raw fd with its own buffer: select() on a buffered file misses lines that
        already sit in Python's buffer, which looked like a hang after every burst.
        """
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.read_fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        os.close(self.read_fd)


class Runner:
    def __init__(self, out: Path, rounds: int, workers: int, deadline_s: float, only: set[str] | None, ops: list[str] | None) -> None:
        self.out, self.rounds, self.workers, self.deadline = out, rounds, workers, time.monotonic() + deadline_s
        self.records_path = out / "records.jsonl"
        self.facts_path = out / "facts.jsonl"
        self.only = only
        self.entries = entries(ops)
        self.by_id = {entry.id: entry for entry in self.entries}
        self.done = self._read_keys(self.records_path)
        self.faulted: set[str] = set()
        self.child: Child | None = None
        self.counts = {"records": 0, "correct": 0, "failed": 0, "child_restarts": 0}

    @staticmethod
    def _read_keys(path: Path) -> set[str]:
        if not path.exists():
            return set()
        keys = set()
        for line in path.read_text().splitlines():
            try:
                keys.add(json.loads(line)["key"])
            except (ValueError, KeyError):
                continue  # a line cut by a kill: measured again
        return keys

    def wanted(self, key: str) -> bool:
        return key not in self.done and (self.only is None or key in self.only)

    def write(self, path: Path, record: dict[str, Any]) -> None:
        with open(path, "a") as stream:
            stream.write(json.dumps(record) + "\n")
            stream.flush()
            os.fsync(stream.fileno())

    def record(self, record: dict[str, Any]) -> None:
        if record["key"] in self.done:
            return  # a group re-sent after a crash: its earlier records stand
        entry = self.by_id.get(record["kernel_id"])
        record["launches"] = [launch.to_json() for launch in entry.launches(record["sizes"])] if entry else []
        self.write(self.records_path, record)
        self.done.add(record["key"])
        self.counts["records"] += 1
        self.counts["correct" if record["correct"] else "failed"] += 1

    def run(self) -> dict[str, Any]:
        by_op: dict[str, list[Entry]] = {}
        for entry in self.entries:
            by_op.setdefault(entry.op.name, []).append(entry)
        todo = [entry for entry in self.entries if any(self.wanted(record_key(entry.id, s)) for s in entry.problems())]
        compiled_facts = self._read_keys(self.facts_path)
        context = get_context("spawn")
        started = time.monotonic()
        with ProcessPoolExecutor(self.workers, mp_context=context) as pool:
            futures: dict[str, Future] = {entry.id: pool.submit(compile_variant, entry.id) for entry in todo}
            for op_name, op_entries in by_op.items():
                op = op_entries[0].op
                for sizes in op.sizes:
                    if time.monotonic() > self.deadline:
                        break
                    ready = []
                    for entry in op_entries:
                        key = record_key(entry.id, sizes)
                        if entry.variant.unsupported(sizes) is not None or not self.wanted(key):
                            continue
                        compiled = futures[entry.id].result()
                        if entry.id not in compiled_facts:
                            self.write(self.facts_path, {"key": entry.id, "facts": None, "kernel": kernel_description(entry)})
                            compiled_facts.add(entry.id)
                        if key not in compiled_facts and compiled.get("facts"):
                            self.write(self.facts_path, {"key": key, "facts": compiled["facts"].get(key)})
                            compiled_facts.add(key)
                        if compiled["error"]:
                            self.record(
                                {
                                    "key": key,
                                    "kernel_id": entry.id,
                                    "op": op_name,
                                    "sizes": dict(sizes),
                                    "correct": False,
                                    "failure": {"kind": "compile", "message": compiled["error"]},
                                    "runtime": None,
                                }
                            )
                        else:
                            ready.append(entry.id)
                    with_reference = self.wanted(record_key(reference_id(op.name), sizes))
                    if with_reference and reference_id(op.name) not in compiled_facts:
                        self.write(self.facts_path, {"key": reference_id(op.name), "facts": None, "kernel": reference_description(op)})
                        compiled_facts.add(reference_id(op.name))
                    if ready or with_reference:
                        self.measure_group(op_name, sizes, ready, with_reference)
            for future in futures.values():
                future.cancel()
        if self.child:
            self.child.process.stdin.close()
            self.child.kill()
        return {**self.counts, "elapsed_s": round(time.monotonic() - started, 1), "remaining": self.remaining()}

    def remaining(self) -> int:
        return sum(1 for entry in self.entries for s in entry.problems() if self.wanted(record_key(entry.id, s)))

    def measure_group(self, op_name: str, sizes: Sizes, variants: list[str], with_reference: bool) -> None:
        """Sends the group until it completes; a kernel that kills or hangs the child is dropped from it."""
        pending = [v for v in variants if v not in self.faulted]
        while True:
            if self.child is None:
                self.child = Child(self.rounds, self.out / "child.log")
                ready = self.child.receive(300)
                if not ready or ready.get("type") != "ready":
                    raise RuntimeError(f"the measuring child did not start: see {self.out / 'child.log'}")
            self.child.send({"op": op_name, "sizes": dict(sizes), "variants": pending, "reference": with_reference})
            current, message_text = None, ""
            while True:
                message = self.child.receive(GROUP_TIMEOUT_S)
                if message is None:
                    kind, message_text = (
                        ("timeout", f"no progress for {GROUP_TIMEOUT_S:.0f} s")
                        if self.child.process.poll() is None
                        else ("runtime", "the measuring process died (e.g. illegal address)")
                    )
                    break
                if message["type"] == "start":
                    current = message["id"]
                elif message["type"] == "dead":
                    current, kind, message_text = message["id"], "runtime", message["message"]
                    message = None
                    break
                elif message["type"] == "record":
                    message.pop("type")
                    self.record(message)
                elif message["type"] == "group_done":
                    return
            self.child.kill()
            self.child = None
            self.counts["child_restarts"] += 1
            if current is None:
                raise RuntimeError(f"the measuring child failed outside any kernel: see {self.out / 'child.log'}")
            self.faulted.add(current)
            if current == reference_id(op_name):
                with_reference = False
            else:
                pending = [v for v in pending if v != current]
            self.record(
                {
                    "key": record_key(current, sizes),
                    "kernel_id": current,
                    "op": op_name,
                    "sizes": dict(sizes),
                    "correct": False,
                    "failure": {"kind": kind, "message": message_text},
                    "runtime": None,
                }
            )
            if not pending and not with_reference:
                return


def kernel_description(entry: Entry) -> dict[str, Any]:
    """What a kernel is, saved with the run, so records outlive later edits of the generator."""
    return {
        "op": entry.op.name,
        "bound": entry.op.bound,
        "family": entry.variant.family,
        "language": entry.variant.language,
        "params": dict(entry.variant.params),
        "code": entry.variant.code,
    }


def reference_description(op: Op) -> dict[str, Any]:
    return {"op": op.name, "bound": op.bound, "family": REFERENCE_FAMILY, "language": "pytorch", "params": {}, "code": op.reference_code}


def _first_lines(text: str, count: int) -> str:
    return "\n".join(text.strip().splitlines()[:count])


def environment() -> dict[str, Any]:
    """What the records were measured on: GPU, driver, library versions."""
    import torch

    from kernelcast.kernels_runtime.hardware import detect_local_gpus

    properties = torch.cuda.get_device_properties(0)
    local = detect_local_gpus()
    versions = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda}
    for name in ("triton", "cupy"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = None
    return {
        "gpu_name": properties.name,
        "gpu_fingerprint": local[0].spec.fingerprint() if local else None,
        "driver": local[0].spec.driver if local else None,
        "sm_count": properties.multi_processor_count,
        "versions": versions,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="run folder; records already there are not measured again")
    parser.add_argument("--ops", help="comma-separated operation names (default: all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--deadline-s", type=float, default=540.0, help="start no new group after this many seconds")
    parser.add_argument("--only", type=Path, help="a file of record keys to measure (a re-run sample)")
    parser.add_argument("--sample", type=float, help="re-measure this fraction of the keys in --only (seeded)")


def run(args: argparse.Namespace) -> int:
    """Measure what is missing in `args.out`; prints and writes a summary."""
    args.out.mkdir(parents=True, exist_ok=True)
    only = None
    if args.only:
        only = {line.strip() for line in args.only.read_text().splitlines() if line.strip()}
        if args.sample:
            only = set(random.Random(0).sample(sorted(only), max(1, round(args.sample * len(only)))))
    (args.out / "environment.json").write_text(json.dumps(environment(), indent=2))
    runner = Runner(args.out, args.rounds, args.workers, args.deadline_s, only, args.ops.split(",") if args.ops else None)
    summary = runner.run()
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))
    return 0


def main(argv: list[str] | None = None) -> int:
    if argv is None and "--child" in sys.argv:
        child = argparse.ArgumentParser()
        child.add_argument("--child", action="store_true")
        child.add_argument("--rounds", type=int)
        child.add_argument("--result-fd", type=int)
        options = child.parse_args()
        return child_main(options.rounds, options.result_fd)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())


def one_per_operation(every: int = 1) -> list[Entry]:
    """Every `every`-th operation once (in name order), languages alternating along the sample,
    each time the variant whose family has been picked least so far: all operations and most
    families in 86 compiles, where all 500 (operation, family, language) combinations take over
    14 minutes on 2 busy cores."""
    by_op: dict[str, list[Entry]] = {}
    for entry in entries():
        by_op.setdefault(entry.op.name, []).append(entry)
    picked: dict[tuple[str, str], int] = {}
    sample: list[Entry] = []
    for variants in [variants for _, variants in sorted(by_op.items())][::every]:
        languages = sorted({entry.variant.language for entry in variants})
        language = languages[len(sample) % len(languages)]
        entry = min((e for e in variants if e.variant.language == language), key=lambda e: picked.get((e.variant.family, language), 0))
        picked[(entry.variant.family, language)] = picked.get((entry.variant.family, language), 0) + 1
        sample.append(entry)
    return sample


def compile_failures(sample: list[Entry], workers: int = 2) -> list[str]:
    """Each entry compiled for the H100 at its largest size as the editor takes facts (nvcc/NVRTC for
    CUDA, Triton's offline compile): what failed, or what NVRTC (the GPU machine's compiler) rejected."""
    with ThreadPoolExecutor(workers) as pool:  # the compiles run in child processes
        results = list(pool.map(lambda entry: (entry, _facts(entry, entry.problems()[-1])), sample))
    failures = []
    for entry, facts in results:
        for name, kernel in facts.items():
            if kernel.get("error") or kernel.get("registers") is None:
                failures.append(f"{entry.id} {name}: {kernel.get('error') or kernel.get('notes')}")
            rejected = [note for note in kernel.get("notes") or [] if note.startswith("NVRTC rejected")]
            if rejected:
                failures.append(f"{entry.id} {name}: {rejected[0]}")
    return failures
