"""Measure a candidate kernel against a reference on the local GPU, from the editor process.

The editor never touches the GPU: one persistent worker process per GPU (worker.py) does,
and this module keeps it alive, queues requests, enforces timeouts, and turns every way a
user kernel can fail into a short message. Nothing here imports torch, cupy or triton.

    outcome = measure_pair(candidate, reference, progress=lambda text, pct: ..., cancel=event)
    outcome is a kernelcast.wire.Measurement, or a MeasureFailure with a `kind` in
    compile | runtime | wrong | parameters | timeout | cancelled | no-gpu | no-launch-spec
    ("parameters": ModelNew's weights differ from Model's after the same seed, so its outputs
    cannot be judged against this reference).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kernelcast.kernels_runtime.source.host_launch import host_launch, proposed_pragma, runnable_host_launch
from kernelcast.kernels_runtime.source.launch_spec import (
    LaunchSpec,
    LaunchSpecError,
    find_launch_spec,
    kernel_names,
    launched_as,
)
from kernelcast.kernels_runtime.timing import SEEDS, TOLERANCES, Tolerance, resolve_tolerance
from kernelcast.kernels_runtime.worker import RECHECK_SEED, cache_dir
from kernelcast.wire import Measurement

FAILURE_KINDS = ("compile", "runtime", "wrong", "parameters", "timeout", "cancelled", "no-gpu", "no-launch-spec")
NO_GPU_MESSAGE = "no NVIDIA GPU here (nvidia-smi not found): measuring needs a local NVIDIA GPU; forecasts still work"
WORKER_SHUT_DOWN = "measurement stopped: the GPU worker was shut down"
# After a cancel, how long the worker may take to stop on its own before it is killed.
CANCEL_GRACE_S = 1.0
POLL_S = 0.05

ProgressCallback = Callable[[str, float], None]


@dataclass
class MeasureFailure:
    """Why there is no measurement, in words for the user."""

    kind: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


MeasureOutcome = Measurement | MeasureFailure


@dataclass(frozen=True)
class Timeouts:
    """kernel_s bounds one launch; load_s bounds exec, compiles, load_inline builds and first JIT calls."""

    kernel_s: float = 10.0
    load_s: float = 600.0
    start_s: float = 120.0


class GpuWorker:
    """One worker process for one GPU, restarted after any CUDA error, crash or timeout."""

    def __init__(self, gpu_index: int = 0) -> None:
        self.gpu_index = gpu_index
        self.log_path = cache_dir() / "workers" / f"gpu{gpu_index}.log"
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._requests: Any = None
        self._results_fd: int | None = None
        self._buffer = b""
        self._next_id = 0
        self.ready: dict[str, Any] | None = None

    # --- process lifetime -------------------------------------------------------------------

    def start(self) -> None:
        """Spawn (never fork) a fresh worker; it warms up while the caller does other things."""
        request_read, request_write = os.pipe()
        result_read, result_write = os.pipe()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        environment = dict(os.environ, PYTHONUNBUFFERED="1", CUDA_DEVICE_ORDER="PCI_BUS_ID")
        environment["CUDA_VISIBLE_DEVICES"] = self._visible_device(os.environ.get("CUDA_VISIBLE_DEVICES"))
        with open(self.log_path, "ab") as log:
            log.write(f"\n--- worker started {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kernelcast.kernels_runtime.worker",
                    "--request-fd",
                    str(request_read),
                    "--result-fd",
                    str(result_write),
                    "--gpu-index",
                    str(self.gpu_index),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(request_read, result_write),
                start_new_session=True,
                env=environment,
            )
        os.close(request_read)
        os.close(result_write)
        self._requests = os.fdopen(request_write, "w", buffering=1)
        self._results_fd = result_read
        self._buffer = b""
        self.ready = None

    def _visible_device(self, inherited: str | None) -> str:
        if inherited:
            devices = [device.strip() for device in inherited.split(",") if device.strip()]
            return devices[self.gpu_index] if self.gpu_index < len(devices) else ""
        return str(self.gpu_index)

    def stop(self) -> None:
        """Kill the worker's whole process group (a load_inline build's compilers too)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if process is not None:
            process.wait()
        for closer in (self._requests, self._results_fd):
            try:
                closer.close() if hasattr(closer, "close") else os.close(closer)
            except (OSError, TypeError):
                pass
        self._requests, self._results_fd, self.ready = None, None, None

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def log_tail(self, lines: int = 8) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # --- requests -----------------------------------------------------------------------------

    def request(self, payload: dict[str, Any], progress: ProgressCallback, cancel: threading.Event, timeouts: Timeouts) -> dict[str, Any]:
        """Send one request and wait for its result; a second caller queues on the lock."""
        if not self._lock.acquire(blocking=False):
            progress("waiting for the measurement in progress to finish", 0.0)
            while not self._lock.acquire(timeout=POLL_S):
                if cancel.is_set():
                    return _failure("cancelled", "measurement cancelled while waiting in the queue")
        try:
            return self._request_locked(payload, progress, cancel, timeouts)
        finally:
            self._lock.release()

    def _request_locked(
        self, payload: dict[str, Any], progress: ProgressCallback, cancel: threading.Event, timeouts: Timeouts
    ) -> dict[str, Any]:
        if self._process is None or self._process.poll() is not None:
            self.restart()
        if self.ready is None:
            progress("starting the GPU worker (torch import and CUDA context: a few seconds)", 0.0)
            message = self._wait_for(None, time.monotonic() + timeouts.start_s, cancel)
            if message.get("type") != "ready":
                return self._lost(message, "starting the GPU worker", timeouts.start_s)
            self.ready = message
        self._next_id += 1
        request_id = self._next_id
        requests = self._requests  # None, or closed, once another thread stopped the worker
        try:
            if requests is None:
                raise ValueError("stopped")
            requests.write(json.dumps({**payload, "id": request_id}) + "\n")
        except ValueError:
            return _failure("cancelled", WORKER_SHUT_DOWN)
        except (BrokenPipeError, OSError):
            self.restart()
            return _failure("runtime", "the GPU worker exited before the request; worker restarted")
        running, phase, deadline = None, "load", time.monotonic() + timeouts.load_s
        while True:
            message = self._wait_for(request_id, deadline, cancel)
            kind = message.get("type")
            if kind == "progress":
                running, phase = message.get("running") or running, message.get("phase", phase)
                deadline = time.monotonic() + float(message["deadline_s"])
                if message.get("message"):
                    progress(message["message"], float(message.get("percent") or 0.0))
                continue
            if kind == "result":
                failure = message.get("failure")
                if failure and failure.get("fatal"):
                    self.restart()
                    return _failure(failure["kind"], f"{failure['message']}; worker restarted")
                return message
            if kind == "cancelled":
                return self._cancel(request_id)
            if kind == "stopped":
                return _failure("cancelled", WORKER_SHUT_DOWN)
            limit = timeouts.load_s if phase == "load" else timeouts.kernel_s
            what = f"loading {running}" if phase == "load" and running else (running or "the measurement")
            return self._lost(message, what, limit)

    def _cancel(self, request_id: int) -> dict[str, Any]:
        """Ask the worker to stop (SIGINT); kill it if it is stuck in a kernel."""
        process = self._process  # None when another thread stopped the worker (shutdown) meanwhile
        if process is None:
            return _failure("cancelled", "measurement cancelled; the GPU worker had been stopped")
        try:
            os.kill(process.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        message = self._wait_for(request_id, time.monotonic() + CANCEL_GRACE_S, threading.Event(), results_only=True)
        if message.get("type") != "result":
            self.restart()
            return _failure("cancelled", "measurement cancelled; the worker was mid-kernel, so it was killed and restarted")
        return _failure("cancelled", "measurement cancelled")

    def _lost(self, message: dict[str, Any], what: str, limit: float) -> dict[str, Any]:
        """The worker went silent past its deadline, or died: kill, restart, explain."""
        if message.get("type") == "timeout":
            verb = "took" if what.startswith(("loading", "starting")) else "ran"
            self.restart()
            return _failure("timeout", f"{what} {verb} longer than {limit:g} s; worker killed and restarted")
        code = self._exit_code()
        tail = self.log_tail()
        self.restart()
        return _failure("runtime", f"the GPU worker exited (code {code}) while {what}; worker restarted. Log {self.log_path}:\n{tail}")

    def _exit_code(self) -> int | None:
        """The dead worker's exit status: its pipe can close before the kernel has reaped it."""
        try:
            return self._process.wait(timeout=2.0) if self._process is not None else None
        except subprocess.TimeoutExpired:
            return None

    def _wait_for(self, request_id: int | None, deadline: float, cancel: threading.Event, results_only: bool = False) -> dict[str, Any]:
        """The next message for this request, or {"type": "timeout" | "eof" | "cancelled"}."""
        while True:
            line = self._next_line(deadline, cancel)
            if not isinstance(line, bytes):
                return line
            message = json.loads(line)
            if message.get("id") not in (None, request_id) and message.get("type") != "ready":
                continue  # a late answer to a request that was cancelled
            if results_only and message.get("type") != "result":
                continue
            return message

    def _next_line(self, deadline: float, cancel: threading.Event) -> bytes | dict[str, Any]:
        while b"\n" not in self._buffer:
            if cancel.is_set():
                return {"type": "cancelled"}
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {"type": "timeout"}
            results_fd = self._results_fd  # None, or closed, once another thread stopped the worker
            if results_fd is None:
                return {"type": "stopped"}
            try:
                readable, _, _ = select.select([results_fd], [], [], min(POLL_S, remaining))
                chunk = os.read(results_fd, 1 << 16) if readable else b""
            except (OSError, ValueError):
                return {"type": "stopped"}
            if readable and not chunk:
                return {"type": "eof"}
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line


def _failure(kind: str, message: str) -> dict[str, Any]:
    return {"type": "result", "failure": {"kind": kind, "message": message, "fatal": False}}


_WORKERS: dict[int, GpuWorker] = {}
_WORKERS_LOCK = threading.Lock()


def worker_for(gpu_index: int = 0) -> GpuWorker:
    """The persistent worker of one GPU (created on first use)."""
    with _WORKERS_LOCK:
        if gpu_index not in _WORKERS:
            _WORKERS[gpu_index] = GpuWorker(gpu_index)
        return _WORKERS[gpu_index]


@atexit.register
def shutdown_workers() -> None:
    with _WORKERS_LOCK:
        for worker in _WORKERS.values():
            worker.stop()
        _WORKERS.clear()


# --- the public API ----------------------------------------------------------------------------


def _side(value: Any) -> dict[str, Any]:
    """A KernelSide, a Reference or a mapping with code, language and name."""
    get = value.get if isinstance(value, Mapping) else lambda key, default=None: getattr(value, key, default)
    return {"code": get("code"), "language": get("language", "cuda"), "name": get("name")}


def _resolve_spec(side: dict[str, Any], label: str) -> LaunchSpec | MeasureFailure | None:
    if side["name"] is None:
        names = kernel_names(side["code"], side["language"])
        if not names:
            return MeasureFailure("no-launch-spec", f"no {side['language']} kernel found in the {label}")
        side["name"] = names[0]
    try:
        return find_launch_spec(side["code"], side["name"], side["language"])
    except LaunchSpecError as error:
        line = f"line {error.line + 1}, " if error.line is not None else ""
        return MeasureFailure("no-launch-spec", f"launch spec of {side['name']} ({line}column {error.column + 1}): {error.message}")


def _host_launch(side: dict[str, Any]) -> LaunchSpec | None:
    """The launch a side's host code makes of its kernel (host_launch.py), where it makes one."""
    return host_launch(side["code"], side["name"], side["language"], python_file=side["language"] == "triton")


def _as_its_host_code_launches(spec: LaunchSpec, side: dict[str, Any]) -> LaunchSpec:
    """The other side's pragma for a side without one, at the config the side's own host code
    launches its kernel with: a num_warps or block-size edit given a pragma on one side only was
    otherwise timed at the edited config on both, 1.00x."""
    host = _host_launch(side)
    if host is None:
        return spec
    try:
        return launched_as(spec, host)
    except LaunchSpecError:  # the host code's values break the pragma (a block over the limit): run it as given
        return spec


def _as_written(side: dict[str, Any]) -> LaunchSpec | None:
    """A `.cu` program's launch as its host code makes it, where the code fixes all of it (host_launch.py)."""
    return runnable_host_launch(side["code"], side["name"]) if side["language"] == "cuda" and side["name"] else None


def _missing_spec(side: dict[str, Any]) -> MeasureFailure:
    template = proposed_pragma(side["code"], side["name"], side["language"], _host_launch(side))
    return MeasureFailure(
        "no-launch-spec",
        f"{side['name']} has no launch spec, so it cannot be run; add this line above it and set the sizes:\n{template}",
        {"template": template},
    )


def prepare_request(
    candidate: Any,
    reference: Any,
    spec: LaunchSpec | None = None,
    reference_spec: LaunchSpec | None = None,
    rounds: int = 6,
    timeouts: Timeouts = Timeouts(),
    tolerance: str | float = "auto",
) -> dict[str, Any] | MeasureFailure:
    """The worker's request, or why the pair cannot be run; no GPU is needed for this.

    `tolerance`: auto (KernelBench's rule for KernelBench files, the strict per-dtype table for
    .cu and Triton kernels), strict, kernelbench, or one number used as atol = rtol.
    """
    resolved = resolve_tolerance(tolerance, _side(candidate)["language"])
    sides = {"candidate": _side(candidate), "reference": _side(reference)}
    languages = {side["language"] for side in sides.values()}
    if "pytorch" in languages and languages != {"pytorch"}:
        return MeasureFailure(
            "no-launch-spec", "a KernelBench (pytorch) side must be compared with another KernelBench side (Model vs ModelNew)"
        )
    specs: dict[str, LaunchSpec | None] = {"candidate": spec, "reference": reference_spec}
    if languages == {"pytorch"}:
        # A ModelNew file often leaves get_inputs() to the reference's file.
        specs["candidate"] = spec or next(
            (found for side in sides.values() if (found := find_launch_spec(side["code"], side["name"], "pytorch"))), None
        )
        if specs["candidate"] is None:
            return MeasureFailure("no-launch-spec", "KernelBench files need class Model/ModelNew and get_inputs()")
    else:
        for label in ("candidate", "reference"):
            if specs[label] is None:
                found = _resolve_spec(sides[label], label)
                if isinstance(found, MeasureFailure):
                    return found
                specs[label] = found
            elif sides[label]["name"] is None:
                sides[label]["name"] = specs[label].kernel
        if specs["candidate"] is None and specs["reference"] is None:  # no pragma: a whole program may run as written
            specs = {label: _as_written(side) for label, side in sides.items()}
        for missing, stated in (("reference", "candidate"), ("candidate", "reference")):
            if specs[missing] is None and specs[stated] is not None:
                if sides[missing]["language"] != sides[stated]["language"]:
                    return MeasureFailure("no-launch-spec", f"the {missing} ({sides[missing]['language']}) needs its own launch spec")
                specs[missing] = _as_its_host_code_launches(specs[stated], sides[missing])
        if specs["candidate"] is None or specs["reference"] is None:
            return _missing_spec(sides["candidate"])
        for label in ("candidate", "reference"):
            specs[label] = replace(specs[label], kernel=sides[label]["name"])
        if specs["candidate"].signature() != specs["reference"].signature():
            return MeasureFailure(
                "no-launch-spec",
                "reference and candidate launch specs disagree on the arguments (both sides run on the same inputs): "
                f"candidate args=({_args_text(specs['candidate'])}), reference args=({_args_text(specs['reference'])})",
            )
    request: dict[str, Any] = {"op": "measure", "rounds": rounds, "timeouts": asdict(timeouts), "tolerance": asdict(resolved)}
    for label, side in sides.items():
        side_spec = specs[label] if languages != {"pytorch"} else None
        request[label] = {
            **side,
            "spec": side_spec.to_json() if side_spec else None,
            "sha256": hashlib.sha256(side["code"].encode()).hexdigest(),
        }
    request["problem_sizes"] = specs["candidate"].problem_sizes()
    return request


def _args_text(spec: LaunchSpec) -> str:
    return ", ".join(f"{arg.name}:{arg.dtype}{list(arg.shape) if arg.shape else ''}{':out' if arg.is_output else ''}" for arg in spec.args)


def measure_pair(
    candidate: Any,
    reference: Any,
    spec: LaunchSpec | None = None,
    gpu_index: int = 0,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    *,
    reference_spec: LaunchSpec | None = None,
    rounds: int = 6,
    timeouts: Timeouts = Timeouts(),
    tolerance: str | float = "auto",
) -> MeasureOutcome:
    """Check the candidate against the reference on fresh inputs, then time both interleaved.

    `spec` defaults to the candidate's pragma, `reference_spec` to the reference's pragma or
    else the candidate's; both must agree on arguments. `tolerance` as prepare_request takes it.
    Never raises for user-kernel faults.
    """
    progress = progress or (lambda text, percent: None)
    cancel = cancel or threading.Event()
    if shutil.which("nvidia-smi") is None:
        return MeasureFailure("no-gpu", NO_GPU_MESSAGE)
    request = prepare_request(candidate, reference, spec, reference_spec, rounds, timeouts, tolerance)
    if isinstance(request, MeasureFailure):
        return request
    reply = worker_for(gpu_index).request(request, progress, cancel, timeouts)
    return outcome_from_reply(reply, request)


def outcome_from_reply(reply: dict[str, Any], request: dict[str, Any]) -> MeasureOutcome:
    """The worker's answer as a Measurement (with everything the server stores) or a failure."""
    failure = reply.get("failure")
    tolerance = Tolerance.from_json(request["tolerance"])
    if failure:
        return MeasureFailure(failure["kind"], failure["message"], {"tolerance": tolerance.to_json(TOLERANCES)})
    result = reply["measurement"]
    timing = result["timing"]
    details = {
        "reference": timing["reference"],
        "candidate": timing["candidate"],
        "rounds": len(timing["round_ratios"]),
        "round_ratios": timing["round_ratios"],
        "clocks": result["clocks"],
        "built": result.get("built") or {},
        "driver": result["driver"],
        "gpu_name": result["gpu_name"],
        "gpu_fingerprint": result["gpu_fingerprint"],
        "versions": result["versions"],
        "problem_sizes": request["problem_sizes"],
        "candidate_sha256": request["candidate"]["sha256"],
        "reference_sha256": request["reference"]["sha256"],
        "launch": {label: (request[label]["spec"] or {}).get("pragma") for label in ("candidate", "reference")},
        "seeds_checked": [*SEEDS, RECHECK_SEED],
        "tolerance": tolerance.to_json(entry["dtype"] for entry in (result.get("correctness") or {}).values()),
        "correctness": result.get("correctness") or {},
    }
    return Measurement(
        speedup=timing["speedup"],
        ci95=(timing["ci95"][0], timing["ci95"][1]),
        gpu=result["gpu_short"],
        t_reference_ms=timing["reference"]["median_ms"],
        t_candidate_ms=timing["candidate"]["median_ms"],
        details=details,
    )


def measurement_notes(details: dict[str, Any]) -> str:
    """The tolerance a measurement was checked at, any note on its error, and how a side was built
    where that is news (nvcc for a file NVRTC could not compile), in one line."""
    tolerance = details.get("tolerance") or {}
    values = sorted({value for value in (tolerance.get("atol_rtol") or {}).values()})
    rule = {"strict": "strict table", "kernelbench": "KernelBench's rule", "custom": "set by the user"}.get(tolerance.get("rule"), "")
    text = f"outputs within atol = rtol = {'/'.join(f'{value:.0e}' for value in values) or 'exact'} ({rule})"
    notes = [entry["note"] for entry in (details.get("correctness") or {}).values() if entry.get("note")]
    notes += [entry["parameters"] for entry in (details.get("correctness") or {}).values() if entry.get("parameters")][:1]
    notes += [f"{label} {how}" for label, how in (details.get("built") or {}).items()]
    return "; ".join([text, *notes])


def measure_file(path: Path, kernel: str | None, reference: Any, **options: Any) -> MeasureOutcome:
    """measure_pair for a file on disk: .cu/.cuh is CUDA, .py with Model classes KernelBench, else Triton."""
    code = Path(path).read_text()
    if Path(path).suffix in (".cu", ".cuh"):
        language = "cuda"
    elif "get_inputs" in code and "class Model" in code:
        language = "pytorch"
    else:
        language = "triton"
    return measure_pair({"code": code, "language": language, "name": kernel}, reference, **options)
