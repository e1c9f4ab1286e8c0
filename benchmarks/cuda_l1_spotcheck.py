"""Spot-check CUDA-L1's H100 labels: re-measure some of their (reference, custom) pairs with our harness.

Run on the H100 (the data is copied into the git-ignored .cudal1/ and carried there):

    python3 benchmarks/cuda_l1_spotcheck.py --data .cudal1 --out OUT/cuda_l1_spotcheck.json

Writes OUT.json (one record per pair and a summary) and OUT.md (the table it prints). Read
top to bottom: which rows, what one pair does inside its own process, how the parent runs
the processes, and the summary statistics.

Choice of rows. Rows whose custom_code defines ModelNew (17 H100 rows hold the text "None")
and that have a score_default, in a seeded order, spread over
KernelBench's levels 2:2:1 (it has 100, 100 and 50 problems). By default rows whose
ModelNew needs a build are left out: load_inline / cpp_extension (a C++ build of 1-2
minutes each) and torch.compile (tens of seconds of inductor compile on first call).
`--include-inline` takes them too and builds them first, in parallel processes with a
per-build timeout, each into its own TORCH_EXTENSIONS_DIR, so the timing process only
loads the built library (and finds inductor's caches warm).

One pair, in a fresh child process (a pair can kill its CUDA context or spin forever; the
parent kills the process group after --pair-timeout-s). As KernelBench does it:
- get_init_inputs() once under torch.manual_seed(42); Model and ModelNew each built under
  manual_seed(42), moved to CUDA, left in training mode (KernelBench never calls .eval()).
  When the two state_dicts have the same keys and shapes but different values (ModelNew
  drew its weights differently), the reference's is copied into ModelNew; `weights` says
  which happened.
- correctness on fresh get_inputs() (seed 11) with check_close at atol = rtol = 1e-2, which
  is KernelBench's own torch.allclose tolerance; our fp32 default of 1e-4 would fail many
  correct rewrites that only reorder reductions or use TF32. A different output dtype is
  a failure (torch.allclose refuses it too). Wrong pairs are not timed.
- timing.time_pair(rounds=6) under torch.no_grad(), then a re-check on new inputs (seed 22).
  Each side gets its own copy of the inputs, so an in-place ModelNew cannot change what the
  reference sees.
- Global backend flags (cudnn.benchmark, TF32, matmul precision) that ModelNew sets at
  import or in __init__ are isolated: the reference runs under the flags as they were
  before ModelNew was imported, ModelNew under its own (`--flags shared` gives both
  ModelNew's, as KernelBench's harness does by accident: it times ModelNew, then the
  reference, in one process). `flags_changed` lists them.
- `wall_speedup`: the same ratio from host wall time around a synchronized call. Events
  on the current stream miss work that ModelNew sends to other streams and never joins;
  `suspect_async` marks pairs where the event speedup is far above the wall one.

Budget: a pair takes ~2-5 s, so the default 40 pairs fit ~3-4 minutes on the H100. To get
there the stop rule is smaller than docs/measure.md's (≥10 samples and ≥60 ms of kernel time per
side, rel. SEM ≤ 0.5%, at most 1.2 s of sampling per side instead of 100 ms / 2 s), and two
child processes are kept starting (torch import + CUDA context, ~6 s) while a pair runs.
`--deadline-s` (default 240) stops starting new pairs or builds; the JSON is rewritten
after every pair, so a run cut short still leaves its pairs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

KERNELBENCH_SEED = 42  # KernelBench seeds weights and init inputs with 42
KERNELBENCH_TOLERANCE = 1e-2  # KernelBench's torch.allclose(atol=1e-2, rtol=1e-2)
CHECK_SEED, RECHECK_SEED = 11, 22  # inputs before timing, fresh inputs after
LEVEL_WEIGHTS = {1: 2, 2: 2, 3: 1}  # KernelBench: 100, 100, 50 problems
BUILD_SIGNS = ("load_inline", "cpp_extension", "torch.compile")
SUSPECT_ASYNC_FACTOR = 1.5  # event speedup / wall speedup above this (reference ≥ 1 ms) is suspect
CHILD_START_TIMEOUT_S = 180.0


# --- the data: which pairs -----------------------------------------------------------------------


def load_rows(data_dir: Path) -> list[dict[str, Any]]:
    with open(data_dir / "h100.jsonl") as stream:
        return [json.loads(line) for line in stream if line.strip()]


def needs_build(custom_code: str) -> bool:
    """ModelNew compiles C++ (load_inline, cpp_extension) or calls torch.compile."""
    return any(sign in custom_code for sign in BUILD_SIGNS)


def custom_traits(custom_code: str) -> dict[str, bool]:
    """What the rewrite leans on, read from its text (for the table, not for the choice)."""
    return {
        "build": needs_build(custom_code),
        "cuda_graph": "CUDAGraph" in custom_code or "torch.cuda.graph" in custom_code,
        "streams": "torch.cuda.Stream" in custom_code or "cudaStream" in custom_code,
        "triton": "import triton" in custom_code,
        "cupy": "import cupy" in custom_code,
    }


def choose_rows(rows: list[dict[str, Any]], count: int, seed: int, include_inline: bool = False) -> list[dict[str, Any]]:
    """`count` rows, the same for the same seed, in the order they will be measured.

    Each level's eligible rows are shuffled by one seeded generator; then the levels take
    turns by weight (level with the fewest picks per weight next, ties to the lower
    level), so any prefix of the result is spread 2:2:1 and a deadline keeps the spread.
    """
    pool: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        code = row.get("custom_code") or ""
        if "class ModelNew" not in code or row.get("score_default") is None:  # 17 rows hold the text "None"
            continue
        if needs_build(code) and not include_inline:
            continue
        pool.setdefault(int(row["level_id"]), []).append(row)
    generator = random.Random(seed)
    for level in sorted(pool):
        pool[level].sort(key=lambda row: int(row["task_id"]))
        generator.shuffle(pool[level])
    taken = {level: 0 for level in pool}
    chosen: list[dict[str, Any]] = []
    while len(chosen) < count:
        open_levels = [level for level in sorted(pool) if taken[level] < len(pool[level])]
        if not open_levels:
            break
        level = min(open_levels, key=lambda level: ((taken[level] + 1) / LEVEL_WEIGHTS.get(level, 1), level))
        chosen.append(pool[level][taken[level]])
        taken[level] += 1
    return chosen


def pair_name(row: dict[str, Any]) -> str:
    return f"L{row['level_id']}-T{row['task_id']}"


# --- one pair, inside its own child process ---------------------------------------------------------


def harness() -> tuple[Any, Any]:
    """kernelcast's timing and worker modules: installed, or straight from this checkout."""
    try:
        from kernelcast.kernels_runtime import timing, worker
    except ImportError:  # not pip-installed (the GPU image's python3): map the folders as setup does
        sys.path.insert(0, str(ROOT))
        import kernelcast

        kernelcast.__path__.append(str(ROOT))  # kernels_runtime/ is kernelcast.kernels_runtime
        from kernelcast.kernels_runtime import timing, worker
    return timing, worker


def spotcheck_rule(timing: Any) -> Any:
    """docs/measure.md's stop rule, shortened so a pair fits in a few seconds (see the docstring)."""
    return timing.StopRule(min_samples=10, min_kernel_ms=60.0, max_rel_sem=0.005, max_wall_s=1.2)


class PairFailure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


def failing_as(kind: str, action: Callable[[], Any]) -> Any:
    """Run a step of the user's code; any exception becomes a PairFailure of `kind`."""
    try:
        return action()
    except PairFailure:
        raise
    except BaseException as error:  # their code: SyntaxError, build errors, CUDA errors, SystemExit
        raise PairFailure(kind, f"{type(error).__name__}: {first_lines(str(error), 8)}") from None


def first_lines(text: str, count: int) -> str:
    return "\n".join(text.strip().splitlines()[:count])


# Global backend flags a rewrite may set; allow_tf32 before the precision that it implies.
FLAG_PATHS = (
    "cudnn.enabled",
    "cudnn.benchmark",
    "cudnn.deterministic",
    "cudnn.allow_tf32",
    "cuda.matmul.allow_tf32",
    "cuda.matmul.allow_fp16_reduced_precision_reduction",
    "cuda.matmul.allow_bf16_reduced_precision_reduction",
    "float32_matmul_precision",
)


def read_flags(torch: Any) -> dict[str, Any]:
    values = {}
    for path in FLAG_PATHS:
        try:
            if path == "float32_matmul_precision":
                values[path] = torch.get_float32_matmul_precision()
            else:
                holder = torch.backends
                for part in path.split("."):
                    holder = getattr(holder, part)
                values[path] = holder
        except Exception:  # a flag this torch does not have
            continue
    return values


def apply_flags(torch: Any, values: dict[str, Any]) -> None:
    for path in FLAG_PATHS:
        if path not in values:
            continue
        if path == "float32_matmul_precision":
            torch.set_float32_matmul_precision(values[path])
            continue
        *parents, name = path.split(".")
        holder = torch.backends
        for part in parents:
            holder = getattr(holder, part)
        setattr(holder, name, values[path])


def under_flags(torch: Any, values: dict[str, Any], model: Any, inputs: list[Any]) -> Callable[[], Any]:
    """A zero-argument call of `model`, with its flags set first (only those that differ)."""
    if not values:
        return lambda: model(*inputs)

    def run() -> Any:
        apply_flags(torch, values)  # ~1 µs a flag, on the host, while the L2 flush runs
        return model(*inputs)

    return run


def cuda_inputs(torch: Any, module: Any, seed: int) -> list[Any]:
    torch.manual_seed(seed)
    return [value.cuda() if isinstance(value, torch.Tensor) else value for value in module.get_inputs()]


def copies(torch: Any, inputs: list[Any]) -> list[Any]:
    return [value.clone() if isinstance(value, torch.Tensor) else value for value in inputs]


def build_models(torch: Any, worker: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Import both sides and build Model and ModelNew with matching weights (KernelBench style)."""
    reference_module = failing_as("load-reference", lambda: worker.import_user_module(job["ref_code"]))
    flags_before = read_flags(torch)
    custom_module = failing_as("load-custom", lambda: worker.import_user_module(job["custom_code"]))
    torch.manual_seed(KERNELBENCH_SEED)
    init_inputs = failing_as("load-reference", lambda: list(reference_module.get_init_inputs()))
    init_inputs = [value.cuda() if isinstance(value, torch.Tensor) else value for value in init_inputs]

    def build(module: Any, class_name: str) -> Any:
        torch.manual_seed(KERNELBENCH_SEED)
        with torch.no_grad():
            model = getattr(module, class_name)(*init_inputs)
        return model.cuda()

    reference = failing_as("load-reference", lambda: build(reference_module, "Model"))
    custom = failing_as("load-custom", lambda: build(custom_module, "ModelNew"))
    flags_custom = read_flags(torch)
    return {
        "reference_module": reference_module,
        "reference": reference,
        "custom": custom,
        "flags_before": flags_before,
        "flags_custom": flags_custom,
        "weights": failing_as("load-custom", lambda: align_weights(torch, reference, custom)),
    }


def align_weights(torch: Any, reference: Any, custom: Any) -> str:
    """KernelBench relies on the seed alone; copy the reference's weights where that fell short."""
    expected, actual = reference.state_dict(), custom.state_dict()
    if not expected:
        return "none"
    if expected.keys() != actual.keys() or any(expected[key].shape != actual[key].shape for key in expected):
        return "seed only (state_dict keys or shapes differ)"
    if all(torch.equal(expected[key].to(actual[key].device, actual[key].dtype), actual[key]) for key in expected):
        return "seed (equal state_dicts)"
    with torch.no_grad():
        custom.load_state_dict(expected)
    return "copied from the reference (the seed gave other values)"


def compare_outputs(torch: Any, timing: Any, worker: Any, expected: Any, actual: Any) -> str | None:
    """None when every output matches at KernelBench's tolerance, else why not."""
    expected_list = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    actual_list = list(actual) if isinstance(actual, (tuple, list)) else [actual]
    if len(expected_list) != len(actual_list):
        return f"wrong results: {len(actual_list)} outputs, reference {len(expected_list)}"
    for index, (want, got) in enumerate(zip(expected_list, actual_list)):
        name = "out" if len(expected_list) == 1 else f"output[{index}]"
        want, got = torch.as_tensor(want), torch.as_tensor(got)
        if want.dtype != got.dtype:
            return f"wrong results: {name} is {got.dtype}, reference {want.dtype}"
        problem = timing.check_close(
            name,
            worker.to_numpy(torch, want),
            worker.to_numpy(torch, got),
            worker.dtype_name(torch, want.dtype),
            tolerance=KERNELBENCH_TOLERANCE,
        )
        if problem:
            return problem
    return None


def check_pair(torch: Any, timing: Any, worker: Any, models: dict[str, Any], flags: dict[str, dict[str, Any]], seed: int) -> str | None:
    """Both sides on the same fresh inputs (each its own copy); None when they agree."""
    inputs = cuda_inputs(torch, models["reference_module"], seed)
    with torch.no_grad():
        expected = failing_as("runtime-reference", under_flags(torch, flags["reference"], models["reference"], copies(torch, inputs)))
        torch.cuda.synchronize()
        actual = failing_as("runtime-custom", under_flags(torch, flags["custom"], models["custom"], copies(torch, inputs)))
        torch.cuda.synchronize()
    return compare_outputs(torch, timing, worker, expected, actual)


def synced_ms(torch: Any, fn: Callable[[], Any], calls: int = 5) -> float:
    """Median host wall time of one call followed by a device-wide synchronize (all streams)."""
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def clocks(worker: Any) -> dict[str, Any]:
    """NVML through kernels_runtime; nvidia-smi where nvidia-ml-py is missing."""
    state = worker.clock_state(0)
    if "unavailable" not in state or shutil.which("nvidia-smi") is None:
        return state
    fields = "clocks.sm,clocks.max.sm,clocks.mem,clocks_event_reasons.active,temperature.gpu,power.draw"
    try:
        line = subprocess.run(
            ["nvidia-smi", "-i", "0", f"--query-gpu={fields}", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10
        ).stdout
        sm, sm_max, memory, reasons, temperature, power = [part.strip() for part in line.strip().split(",")]
        return {
            "sm_clock_mhz": int(sm),
            "sm_clock_max_mhz": int(sm_max),
            "memory_clock_mhz": int(memory),
            "throttle_reasons_mask": reasons,
            "temperature_c": int(temperature),
            "power_w": float(power),
            "source": "nvidia-smi",
        }
    except Exception as error:
        return {**state, "nvidia_smi": str(error)}


def flags_for_sides(before: dict[str, Any], custom: dict[str, Any], mode: str) -> dict[str, dict[str, Any]]:
    """The flags each side sets before its call: only those ModelNew changed."""
    changed = {path: value for path, value in custom.items() if before.get(path) != value}
    reference = dict(changed) if mode == "shared" else {path: before[path] for path in changed if path in before}
    return {"reference": reference, "custom": changed}


def measure_pair(torch: Any, timing: Any, worker: Any, job: dict[str, Any], phase: Callable[[str], None]) -> dict[str, Any]:
    """Build, check, time, re-check one pair; raises PairFailure with the first problem."""
    result: dict[str, Any] = {}
    phase("load")
    models = build_models(torch, worker, job)
    result["weights"] = models["weights"]
    flags = flags_for_sides(models["flags_before"], models["flags_custom"], job["flags"])

    phase("check")
    problem = check_pair(torch, timing, worker, models, flags, CHECK_SEED)
    if problem:
        raise PairFailure("wrong", f"{problem} (seed {CHECK_SEED}, atol=rtol={KERNELBENCH_TOLERANCE:g})")
    # ModelNew ran last: the flags now are its own, including any its forward() set.
    flags = flags_for_sides(models["flags_before"], read_flags(torch), job["flags"])
    result["flags_changed"] = {path: [models["flags_before"].get(path), value] for path, value in flags["custom"].items()}

    phase("time")
    inputs = cuda_inputs(torch, models["reference_module"], CHECK_SEED)
    reference_fn = under_flags(torch, flags["reference"], models["reference"], copies(torch, inputs))
    custom_fn = under_flags(torch, flags["custom"], models["custom"], copies(torch, inputs))
    result["clocks"] = {"before": clocks(worker)}
    with torch.no_grad():
        measured = failing_as(
            "runtime",
            lambda: timing.time_pair(
                torch,
                reference_fn,
                custom_fn,
                rounds=job["rounds"],
                rule=spotcheck_rule(timing),
                on_round=lambda done: phase(f"time: round {done}/{job['rounds']} done"),
            ),
        )
        calls = 5 if max(measured.reference["median_ms"], measured.candidate["median_ms"]) < 20.0 else 2
        wall = {
            label: failing_as("runtime", lambda fn=fn: synced_ms(torch, fn, calls))
            for label, fn in (("reference", reference_fn), ("custom", custom_fn))
        }
    result["clocks"]["after"] = clocks(worker)
    result["timing"] = measured.to_json()
    result["ours"], result["ci95"] = measured.speedup, list(measured.ci95)
    result["wall_ms"] = wall
    result["wall_speedup"] = wall["reference"] / wall["custom"] if wall["custom"] > 0 else None
    result["suspect_async"] = bool(
        result["wall_speedup"]
        and measured.reference["median_ms"] >= 1.0
        and measured.speedup > SUSPECT_ASYNC_FACTOR * result["wall_speedup"]
    )

    phase("re-check")
    problem = check_pair(torch, timing, worker, models, flags, RECHECK_SEED)
    if problem:
        result["failure"] = {"kind": "wrong-after-timing", "message": f"{problem} (seed {RECHECK_SEED})"}
    return result


def build_custom(torch: Any, timing: Any, worker: Any, job: dict[str, Any], phase: Callable[[str], None]) -> dict[str, Any]:
    """--include-inline's build step: import ModelNew (load_inline builds), build it, call it once."""
    phase("build")
    models = build_models(torch, worker, job)
    inputs = cuda_inputs(torch, models["reference_module"], CHECK_SEED)
    with torch.no_grad():
        failing_as("runtime-custom", lambda: models["custom"](*inputs))  # lazy builds, torch.compile
    torch.cuda.synchronize()
    return {}


def child_main(result_fd: int) -> int:
    """Reads one job (JSON line) on stdin, answers on `result_fd`; stdout goes to the log."""
    _die_with_parent()
    out = os.fdopen(result_fd, "w", buffering=1)
    os.dup2(2, 1)  # prints of the user's code go to the log

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")

    timing, worker = harness()
    import torch

    if not torch.cuda.is_available():
        send({"type": "ready", "error": "torch sees no CUDA GPU"})
        return 2
    torch.zeros(1, device="cuda")  # the context, before the job arrives
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda}
    for name in ("triton", "cupy"):
        try:
            versions[name] = __import__(name).__version__
        except Exception:
            versions[name] = None
    send({"type": "ready", "gpu": torch.cuda.get_device_name(0), "versions": versions, "pid": os.getpid()})
    line = sys.stdin.readline()
    if not line:
        return 0
    job = json.loads(line)
    os.environ["TORCH_EXTENSIONS_DIR"] = job["extensions_dir"]
    os.environ["MAX_JOBS"] = str(job.get("max_jobs", os.cpu_count() or 4))
    phase = lambda name: send({"type": "phase", "phase": name})  # noqa: E731
    try:
        result = (build_custom if job["mode"] == "build" else measure_pair)(torch, timing, worker, job, phase)
        send({"type": "result", **result})
    except PairFailure as failure:
        send({"type": "result", "failure": {"kind": failure.kind, "message": failure.message}})
    except BaseException as error:  # our own bug or a CUDA error outside the guarded steps
        send({"type": "result", "failure": {"kind": "runtime", "message": f"{type(error).__name__}: {first_lines(str(error), 8)}"}})
    out.flush()
    return 0


def _die_with_parent() -> None:
    """SIGKILL this child when the parent dies (Linux), so no orphan keeps the GPU busy."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    if os.getppid() != int(os.environ.get("CUDA_L1_SPOTCHECK_PARENT", os.getppid())):
        os._exit(1)  # the parent died before the line above took effect


# --- the parent: processes, timeouts, the deadline -------------------------------------------------------


class Child:
    """One fresh process for one job: started early (torch import, CUDA context), used once, killed."""

    def __init__(self, log: Path) -> None:
        read_fd, write_fd = os.pipe()
        self.log_path = log
        self.log = open(log, "ab")
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", "--result-fd", str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=self.log,
            pass_fds=(write_fd,),
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "CUDA_L1_SPOTCHECK_PARENT": str(os.getpid())},
        )
        os.close(write_fd)
        self.read_fd, self.pending = read_fd, b""
        self.started = time.monotonic()

    def send(self, job: dict[str, Any]) -> None:
        self.process.stdin.write((json.dumps(job) + "\n").encode())
        self.process.stdin.flush()

    def receive(self, timeout_s: float) -> dict[str, Any] | str:
        """The next message, or "timeout" / "exited"."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.read_fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return "timeout"
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                return "exited"
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def terminate(self) -> None:
        """SIGKILL its process group; whoever reads from it then sees it exit."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """Terminate, reap and close; safe to call twice."""
        if self.log.closed:
            return
        self.terminate()
        self.process.wait()
        os.close(self.read_fd)
        self.log.close()


def wait_ready(child: Child) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the child's ready message, None), or (None, a failure) when it did not start."""
    ready = child.receive(max(0.0, CHILD_START_TIMEOUT_S - (time.monotonic() - child.started)))
    if isinstance(ready, dict) and not ready.get("error"):
        return ready, None
    why = ready.get("error") if isinstance(ready, dict) else f"child {ready} before it was ready"
    return None, {"failure": {"kind": "child-start", "message": why, "log_tail": child.log_tail()}}


def run_job(child: Child, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Send `job` to a ready child; its result, or a timeout / crash failure, within `timeout_s`."""
    started = time.monotonic()
    child.send(job)
    phase = "sent"
    while True:
        message = child.receive(max(0.0, timeout_s - (time.monotonic() - started)))
        if message == "timeout":
            return {
                "failure": {
                    "kind": "timeout",
                    "message": f"no result after {timeout_s:.0f} s (during {phase}); process group killed",
                    "log_tail": child.log_tail(),
                }
            }
        if message == "exited":
            code = child.process.wait()
            return {"failure": {"kind": "crash", "message": f"child exited with {code} during {phase}", "log_tail": child.log_tail()}}
        if message["type"] == "phase":
            phase = message["phase"]
        elif message["type"] == "result":
            message.pop("type")
            return message


def job_for(row: dict[str, Any], options: argparse.Namespace, mode: str, max_jobs: int) -> dict[str, Any]:
    return {
        "mode": mode,
        "ref_code": row["ref_code"],
        "custom_code": row["custom_code"],
        "rounds": options.rounds,
        "flags": options.flags,
        # One folder per row: load_inline names repeat across rows and would rebuild each other.
        "extensions_dir": str(options.extensions_dir / pair_name(row)),
        "max_jobs": max_jobs,
    }


def build_all(rows: list[dict[str, Any]], options: argparse.Namespace, log_dir: Path, deadline: float) -> dict[str, dict[str, Any]]:
    """Build every row that needs it, `--build-jobs` at a time; returns pair name -> outcome."""
    todo = [row for row in rows if needs_build(row["custom_code"])]
    if not todo:
        return {}
    jobs = max(1, options.build_jobs)
    max_jobs = max(1, (os.cpu_count() or 16) // jobs)
    print(
        f"building {len(todo)} rewrites ({jobs} at a time, MAX_JOBS={max_jobs}, timeout {options.build_timeout_s:.0f} s each)", flush=True
    )
    outcomes: dict[str, dict[str, Any]] = {}
    live: set[Child] = set()
    lock = threading.Lock()

    def build(row: dict[str, Any]) -> None:
        name = pair_name(row)
        started = time.monotonic()
        if started >= deadline:
            result: dict[str, Any] = {"failure": {"kind": "deadline", "message": "not built: the deadline had passed"}}
        else:
            child = Child(log_dir / f"build_{name}.log")
            with lock:
                live.add(child)
            try:
                ready, result = wait_ready(child)
                if ready is not None:
                    result = run_job(child, job_for(row, options, "build", max_jobs), options.build_timeout_s)
            finally:
                with lock:
                    live.discard(child)
                child.kill()
        failure = result.get("failure")
        if failure and failure["kind"] in ("timeout", "deadline"):
            failure["kind"] = f"build-{failure['kind']}"
        elif failure:
            failure["kind"] = f"build ({failure['kind']})"
        outcome = {"ok": failure is None, "seconds": round(time.monotonic() - started, 1), "failure": failure}
        with lock:
            outcomes[name] = outcome
        print(f"  built {name}: {'ok' if failure is None else failure['kind']} ({outcome['seconds']} s)", flush=True)

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        list(pool.map(build, todo))
    except BaseException:  # SIGTERM or Ctrl-C: no build may outlive us
        with lock:
            for child in list(live):
                child.terminate()  # its thread reads "exited", reaps it and returns
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return outcomes


def measure_all(
    rows: list[dict[str, Any]],
    options: argparse.Namespace,
    log_dir: Path,
    deadline: float,
    builds: dict[str, dict[str, Any]],
    report: Callable[[list[dict[str, Any]], dict[str, Any], bool], None],
) -> list[dict[str, Any]]:
    """Pairs one after another, each in a fresh child; `--warm-children` more start meanwhile."""
    records: list[dict[str, Any]] = []
    environment: dict[str, Any] = {}
    for row in rows:
        outcome = builds.get(pair_name(row))
        if outcome and not outcome["ok"]:
            records.append(record_for(row, {"failure": outcome["failure"]}, 0.0, outcome))
    todo = [row for row in rows if builds.get(pair_name(row), {"ok": True})["ok"]]
    warm: deque[Child] = deque()
    spawned = 0

    def top_up(still_needed: int) -> None:
        """A child takes ~6 s to import torch and make its context: start them ahead of need."""
        nonlocal spawned
        while len(warm) < min(max(1, options.warm_children), still_needed):
            spawned += 1
            warm.append(Child(log_dir / f"child_{spawned:03d}.log"))

    current: Child | None = None
    try:
        for index, row in enumerate(todo):
            if time.monotonic() >= deadline:
                print(f"deadline reached: {len(todo) - index} chosen pairs not started", flush=True)
                break
            top_up(len(todo) - index)
            current = warm.popleft()
            started = time.monotonic()
            ready, result = wait_ready(current)
            waited = time.monotonic() - started
            top_up(len(todo) - index - 1)
            if ready is not None:
                if not environment:
                    environment.update({"gpu": ready.get("gpu"), "versions": ready.get("versions")})
                result = run_job(current, job_for(row, options, "measure", os.cpu_count() or 16), options.pair_timeout_s)
            current.kill()
            record = record_for(row, result, time.monotonic() - started, builds.get(pair_name(row)))
            record["waited_for_child_s"], record["log"] = round(waited, 2), str(current.log_path)
            current = None
            records.append(record)
            print(progress_line(len(records), len(rows), record), flush=True)
            report(records, environment, False)
    finally:
        for child in [current, *warm]:
            if child is not None:
                child.kill()
        report(records, environment, True)
    return records


def record_for(row: dict[str, Any], result: dict[str, Any], elapsed_s: float, build: dict[str, Any] | None) -> dict[str, Any]:
    theirs = float(row["score_default"])
    failure = result.get("failure")
    ours = result.get("ours")
    record: dict[str, Any] = {
        "level": int(row["level_id"]),
        "task": int(row["task_id"]),
        "theirs": theirs,
        "ours": ours,
        "ci95": result.get("ci95"),
        # Compared and passed before and after timing; False when a comparison failed; None: never compared.
        "correct": failure is None or (False if failure["kind"] in ("wrong", "wrong-after-timing") else None),
        "status": "ok" if failure is None else failure["kind"],
        "failure": failure,
        "ratio": ours / theirs if ours else None,
        "log2_ratio": math.log2(ours / theirs) if ours else None,
        "theirs_in_ci": (result["ci95"][0] <= theirs <= result["ci95"][1]) if ours else None,
        "traits": custom_traits(row["custom_code"]),
        "elapsed_s": round(elapsed_s, 2),
    }
    for key in ("weights", "flags_changed", "wall_speedup", "wall_ms", "suspect_async", "clocks", "timing"):
        if key in result:
            record[key] = result[key]
    if build is not None:
        record["build"] = build
    return record


def progress_line(done: int, total: int, record: dict[str, Any]) -> str:
    head = f"[{done:3d}/{total}] L{record['level']} T{record['task']:<3d} theirs {record['theirs']:7.3f}"
    if record["ours"] is not None:
        low, high = record["ci95"]
        head += f"  ours {record['ours']:7.3f} [{low:.3f}, {high:.3f}]  ours/theirs {record['ratio']:.3f}"
    return f"{head}  {record['status']}  {record['elapsed_s']:.1f} s"


# --- the summary -----------------------------------------------------------------------------------------


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda index: values[index])
    result = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            result[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return result


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Pearson correlation of the ranks; None under 3 points or when one side is constant."""
    if len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def within(ratio: float, fraction: float) -> bool:
    """ours/theirs within ±fraction, symmetric in log: 1/(1+f) ≤ r ≤ 1+f."""
    return 1 / (1 + fraction) <= ratio <= 1 + fraction


DEFINITIONS = {
    "pairs": "statistics over pairs with status ok (correct before and after timing, and timed)",
    "ratio": "ours / theirs, speedups t_ref / t_custom",
    "median_abs_log2_ratio": "median of |log2(ours / theirs)|",
    "share_within_10pct": "share with 1/1.1 <= ours/theirs <= 1.1",
    "share_within_25pct": "share with 1/1.25 <= ours/theirs <= 1.25",
    "share_theirs_in_our_ci": "share with ci95_low <= theirs <= ci95_high",
    "share_direction_agrees": "share with (ours > 1) == (theirs > 1)",
    "spearman": "Pearson correlation of the ranks of ours and theirs (ties: mean rank)",
    "geomean_ratio": "exp(mean(log(ours / theirs)))",
}


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    good = [record for record in records if record["status"] == "ok" and record["ours"] is not None]
    failures: dict[str, int] = {}
    for record in records:
        if record["status"] != "ok":
            failures[record["status"]] = failures.get(record["status"], 0) + 1
    summary: dict[str, Any] = {
        "n_records": len(records),
        "n_measured": sum(record["ours"] is not None for record in records),
        "n_correct": sum(record["correct"] is True for record in records),
        "n_ok": len(good),
        "failures": failures,
    }
    if not good:
        return summary
    ours, theirs = [record["ours"] for record in good], [record["theirs"] for record in good]
    ratios = [a / b for a, b in zip(ours, theirs)]
    summary.update(
        {
            "median_abs_log2_ratio": statistics.median(abs(math.log2(r)) for r in ratios),
            "median_ratio": statistics.median(ratios),
            "geomean_ratio": math.exp(statistics.fmean(math.log(r) for r in ratios)),
            "share_within_10pct": sum(within(r, 0.10) for r in ratios) / len(ratios),
            "share_within_25pct": sum(within(r, 0.25) for r in ratios) / len(ratios),
            "share_theirs_in_our_ci": sum(record["ci95"][0] <= record["theirs"] <= record["ci95"][1] for record in good) / len(good),
            "share_direction_agrees": sum((a > 1) == (b > 1) for a, b in zip(ours, theirs)) / len(good),
            "spearman": spearman(ours, theirs),
            "by_level": {},
        }
    )
    for level in sorted({record["level"] for record in good}):
        level_ratios = [r for r, record in zip(ratios, good) if record["level"] == level]
        summary["by_level"][str(level)] = {
            "n": len(level_ratios),
            "median_ratio": statistics.median(level_ratios),
            "median_abs_log2_ratio": statistics.median(abs(math.log2(r)) for r in level_ratios),
        }
    return summary


def markdown(records: list[dict[str, Any]], summary: dict[str, Any], header: list[str]) -> str:
    lines = header + [
        "",
        "| level | task | theirs | ours [95% CI] | ours/theirs | theirs in CI | status | weights | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for record in sorted(records, key=lambda record: (record["level"], record["task"])):
        ours = f"{record['ours']:.3f} [{record['ci95'][0]:.3f}, {record['ci95'][1]:.3f}]" if record["ours"] is not None else "–"
        ratio = f"{record['ratio']:.3f}" if record["ratio"] is not None else "–"
        in_ci = {True: "yes", False: "no", None: "–"}[record["theirs_in_ci"]]
        notes = [name for name, present in record["traits"].items() if present]
        if record.get("flags_changed"):
            notes.append("flags " + ", ".join(f"{path}={after}" for path, (_, after) in record["flags_changed"].items()))
        if record.get("wall_speedup") is not None:
            notes.append(f"wall S {record['wall_speedup']:.2f}" + (" (suspect async)" if record.get("suspect_async") else ""))
        if record["failure"]:
            notes.append(first_lines(record["failure"]["message"], 1)[:120].replace("|", "/"))
        lines.append(
            f"| {record['level']} | {record['task']} | {record['theirs']:.3f} | {ours} | {ratio} | {in_ci} | {record['status']} | "
            f"{record.get('weights', '–').split(' (')[0]} | {'; '.join(notes)} |"
        )
    lines += ["", "| summary | value |", "|---|---|"]
    for key, value in summary.items():
        if key == "by_level":
            for level, numbers in value.items():
                lines.append(
                    f"| level {level} | n {numbers['n']}, median ratio {numbers['median_ratio']:.3f}, "
                    f"median abs log2 {numbers['median_abs_log2_ratio']:.3f} |"
                )
        else:
            lines.append(f"| {key} | {value:.3f} |" if isinstance(value, float) else f"| {key} | {value} |")
    return "\n".join(lines) + "\n"


# --- main -------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "cuda-l1", help="folder with h100.jsonl")
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("cuda_l1_spotcheck.json"))
    parser.add_argument("--deadline-s", type=float, default=240.0, help="start no new pair (or build) after this many seconds")
    parser.add_argument(
        "--include-inline", action="store_true", help="also rows that build C++ (load_inline, cpp_extension) or call torch.compile"
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--pair-timeout-s", type=float, default=60.0)
    parser.add_argument("--warm-children", type=int, default=2, help="child processes kept starting ahead of the pair that runs")
    parser.add_argument("--build-timeout-s", type=float, default=300.0)
    parser.add_argument("--build-jobs", type=int, default=8)
    parser.add_argument(
        "--flags",
        choices=("isolated", "shared"),
        default="isolated",
        help="reference under the flags before ModelNew's import, or under ModelNew's",
    )
    parser.add_argument("--extensions-dir", type=Path, default=None, help="TORCH_EXTENSIONS_DIR root (default: kernelcast's cache)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result-fd", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        return child_main(options.result_fd)

    started = time.monotonic()
    deadline = started + options.deadline_s
    rows = choose_rows(load_rows(options.data), options.count, options.seed, options.include_inline)
    if options.extensions_dir is None:
        options.extensions_dir = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernelcast" / "cuda_l1_extensions"
    log_dir = Path(tempfile.mkdtemp(prefix="cuda_l1_spotcheck_"))
    command = "python3 benchmarks/cuda_l1_spotcheck.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(
        f"{len(rows)} pairs chosen (seed {options.seed}; levels "
        + ", ".join(f"{level}: {sum(row['level_id'] == level for row in rows)}" for level in sorted({row["level_id"] for row in rows}))
        + f"); child logs in {log_dir}",
        flush=True,
    )
    chosen = [pair_name(row) for row in rows]

    def report(records: list[dict[str, Any]], environment: dict[str, Any], final: bool) -> None:
        summary = summarize(records)
        done = {f"L{record['level']}-T{record['task']}" for record in records}
        document = {
            "command": command,
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "environment": environment,
            "settings": {
                "count": options.count,
                "seed": options.seed,
                "include_inline": options.include_inline,
                "rounds": options.rounds,
                "flags": options.flags,
                "tolerance": KERNELBENCH_TOLERANCE,
                "pair_timeout_s": options.pair_timeout_s,
                "deadline_s": options.deadline_s,
            },
            "complete": final,
            "elapsed_s": round(time.monotonic() - started, 1),
            "chosen": chosen,
            "not_started": [name for name in chosen if name not in done],
            "definitions": DEFINITIONS,
            "summary": summary,
            "pairs": records,
        }
        options.out.parent.mkdir(parents=True, exist_ok=True)
        temporary = options.out.with_suffix(".tmp")
        temporary.write_text(json.dumps(document, indent=1))
        temporary.replace(options.out)
        if final:
            header = [
                "# CUDA-L1 H100 labels vs our harness",
                "",
                f"Command: `{command}`  ",
                f"GPU: {environment.get('gpu')}, versions {environment.get('versions')}, {document['date']}, {document['elapsed_s']} s  ",
                f"Correctness: check_close at atol=rtol={KERNELBENCH_TOLERANCE:g} (KernelBench's); flags {options.flags}; "
                f"{len(records)} of {len(chosen)} chosen pairs run",
            ]
            text = markdown(records, summary, header)
            options.out.with_suffix(".md").write_text(text)
            print(text, flush=True)

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # `timeout` may send a second: let `finally` finish
        raise KeyboardInterrupt  # `finally` kills the children and writes what is done

    signal.signal(signal.SIGTERM, stop)
    try:
        builds = build_all(rows, options, log_dir, deadline) if options.include_inline else {}
        measure_all(rows, options, log_dir, deadline, builds, report)
    except KeyboardInterrupt:
        print(f"interrupted: {options.out} holds the pairs done so far", flush=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
