"""Measuring without a GPU: correctness checks, statistics, and the worker protocol over a real process."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from analysis_support import measure_request
from machine import limit

from kernelcast.kernels_runtime import timing
from kernelcast.kernels_runtime.measure import WORKER_SHUT_DOWN, GpuWorker, MeasureFailure, Timeouts, measure_pair, prepare_request

FIXTURES = Path(__file__).parent / "data" / "measure"
QUICK = Timeouts(kernel_s=1.0, load_s=3.0, start_s=60.0)


# --- correctness checks ---------------------------------------------------------------------


def test_equal_outputs_pass_and_tolerance_depends_on_dtype() -> None:
    expected = np.linspace(-1, 1, 100, dtype=np.float32)
    assert timing.check_close("out", expected, expected.copy(), "f32") is None
    nudged = expected + np.float32(5e-3)
    assert timing.check_close("out", expected, nudged, "f16") is None
    assert timing.check_close("out", expected, nudged, "f32").startswith("wrong results: max abs err 5.0e-03")


def test_wrong_element_is_reported_with_error_index_and_tolerance() -> None:
    expected = np.zeros(64, dtype=np.float32) + 1.0
    actual = expected.copy()
    actual[17] += 0.32
    assert timing.check_close("out", expected, actual, "f32") == "wrong results: max abs err 3.2e-01 at index 17 (tolerance 1e-04)"


def test_multi_dimensional_index_and_output_name() -> None:
    expected = np.ones((4, 8), dtype=np.float64)
    actual = expected.copy()
    actual[2, 5] = 3.0
    assert timing.check_close("b", expected, actual, "f64") == "wrong results: max abs err 2.0e+00 at index (2, 5) (tolerance 1e-04) in b"


def test_a_scalar_output_like_a_loss_is_compared() -> None:
    # A KernelBench loss returns a 0-d tensor; comparing it raised TypeError (CUDA-L1 L1/T94, T100).
    expected = np.array(0.5, dtype=np.float32)
    assert timing.check_close("out", expected, np.array(0.50001, dtype=np.float32), "f32") is None
    assert (
        timing.check_close("out", expected, np.array(0.7, dtype=np.float32), "f32")
        == "wrong results: max abs err 2.0e-01 at index 0 (tolerance 1e-04)"
    )
    assert "NaN" in timing.check_close("out", expected, np.array(np.nan, dtype=np.float32), "f32")


def test_poisoned_elements_left_unwritten_are_caught() -> None:
    expected = np.arange(10, dtype=np.float32)
    actual = expected.copy()
    actual[7:] = np.nan
    message = timing.check_close("out", expected, actual, "f32")
    assert message == "wrong results: out has 3 NaN elements where the reference has numbers (first at index 7): output not fully written?"


def test_nan_and_inf_in_both_agree_and_integers_are_exact() -> None:
    expected = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert timing.check_close("out", expected, expected.copy(), "f32") is None
    ints = np.array([1, 2, 3], dtype=np.int32)
    assert timing.check_close("out", ints, ints + np.array([0, 1, 0], dtype=np.int32), "i32").endswith("at index 1 (tolerance 0e+00)")


def test_shape_mismatch_is_reported() -> None:
    assert "shape (3,), reference (4,)" in timing.check_close("out", np.zeros(4), np.zeros(3), "f32")


# --- statistics -----------------------------------------------------------------------------


def test_a_vs_a_interval_contains_one() -> None:
    rng = np.random.default_rng(0)
    # Five rounds of two identical variants with ~1% round-to-round drift (docs/measure.md).
    ratios = list(np.exp(rng.normal(0.0, 0.01, size=5)))
    speedup, low, high = timing.ratio_interval(ratios)
    assert low < 1.0 < high
    assert low < speedup < high


def test_interval_is_exp_of_t_interval_on_log_ratios() -> None:
    ratios = [1.40, 1.45, 1.44, 1.47, 1.43]
    logs = np.log(ratios)
    half = 2.776 * logs.std(ddof=1) / np.sqrt(5)
    speedup, low, high = timing.ratio_interval(ratios)
    assert speedup == pytest.approx(np.exp(logs.mean()))
    assert (low, high) == pytest.approx((np.exp(logs.mean() - half), np.exp(logs.mean() + half)))
    assert low > 1.0


def test_drift_the_rounds_cannot_see_widens_the_interval_in_quadrature() -> None:
    """A vs A on two buffers read 1.0009 (rounds-only CI ±0.08%) on the H100: the run-to-run
    drift of both medians belongs in the interval a user compares a re-measurement with."""
    ratios = [1.0009, 1.0010, 1.0008, 1.0009, 1.0011, 1.0008]
    _, low_rounds, high_rounds = timing.ratio_interval(ratios)
    assert low_rounds > 1.0
    drift = math.hypot(timing.run_to_run_sd(0.0614), timing.run_to_run_sd(0.0613))
    speedup, low, high = timing.ratio_interval(ratios, drift)
    within = math.log(high_rounds / speedup)
    assert math.log(high / speedup) == pytest.approx(math.hypot(within, 1.96 * drift))
    assert low < 1.0 < high and timing.run_to_run_sd(0.001) > 5 * timing.run_to_run_sd(1.0)


def test_t_quantiles() -> None:
    assert timing.t_quantile_975(4) == 2.776
    assert timing.t_quantile_975(1000) == 1.96
    with pytest.raises(ValueError):
        timing.t_quantile_975(0)


def test_summary_and_stop_rule_split() -> None:
    summary = timing.summarize([float(v) for v in range(1, 11)])
    assert summary == {"median_ms": 5.5, "p20_ms": pytest.approx(2.8), "p80_ms": pytest.approx(8.2), "n": 10}
    per_round = timing.StopRule().per_round(5)
    assert (per_round.min_kernel_ms, per_round.max_wall_s, per_round.min_samples) == (20.0, 0.4, 10)
    assert timing.relative_sem([1.0]) == float("inf")


# --- preparing a request (no GPU needed) ---------------------------------------------------------


def fixture_side(name: str, language: str = "cuda") -> dict[str, str | None]:
    path = FIXTURES / name
    return {"code": path.read_text(), "language": language, "name": None}


def test_request_carries_hashes_specs_and_sizes() -> None:
    request = prepare_request(fixture_side("copy_strided.cu"), fixture_side("copy_coalesced.cu"))
    assert request["candidate"]["name"] == "copy_strided"
    assert request["reference"]["spec"]["kernel"] == "copy_coalesced"
    assert len(request["candidate"]["sha256"]) == 64
    assert request["problem_sizes"] == {"N": 1 << 24}


def test_missing_spec_explains_what_to_add() -> None:
    bare = {"code": "__global__ void k(const float* x, float* out, int n) {}", "language": "cuda", "name": "k"}
    failure = prepare_request(bare, bare)
    assert isinstance(failure, MeasureFailure) and failure.kind == "no-launch-spec"
    assert "k has no launch spec" in failure.message
    assert "// kernelcast: launch kernel=k grid=(cdiv(n, 256)) block=(256) args=(x:f32[n], out:f32[n]:out, n:i32=1<<20)" in failure.message


def test_sides_must_agree_on_arguments() -> None:
    failure = prepare_request(fixture_side("transpose_naive.cu"), fixture_side("copy_coalesced.cu"))
    assert failure.kind == "no-launch-spec" and "disagree on the arguments" in failure.message


def test_kernelbench_needs_kernelbench_on_both_sides() -> None:
    failure = prepare_request(fixture_side("kernelbench_relu.py", "pytorch"), fixture_side("copy_coalesced.cu"))
    assert failure.kind == "no-launch-spec"


def test_broken_pragma_names_line_and_column() -> None:
    broken = {
        "code": "// kernelcast: launch grid=(1) block=(32) args=(x:f33[4])\n__global__ void k(float* x) {}\n",
        "language": "cuda",
        "name": "k",
    }
    failure = prepare_request(broken, broken)
    assert failure.message == "launch spec of k (line 1, column 51): unknown dtype 'f33'; use one of f32 f16 bf16 f64 i32 i64 u8 i8 bool"


def test_no_gpu_is_answered_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on this PATH
    started = time.monotonic()
    outcome = measure_pair(fixture_side("copy_strided.cu"), fixture_side("copy_coalesced.cu"))
    assert isinstance(outcome, MeasureFailure) and outcome.kind == "no-gpu"
    assert "nvidia-smi not found" in outcome.message
    assert time.monotonic() - started < limit(1.0)


# --- the worker process ---------------------------------------------------------------------------

KERNELBENCH_OK = "class Model:\n    pass\n\ndef get_inputs():\n    return []\n"


def kernelbench(code: str) -> dict[str, str | None]:
    return {"code": code, "language": "pytorch", "name": "Model"}


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    started = GpuWorker(gpu_index=7)  # beyond the visible list: the worker sees no GPU anywhere
    yield started
    started.stop()


def ask(worker: GpuWorker, code: str, cancel: threading.Event | None = None, progress=None) -> dict:
    request = prepare_request(kernelbench(code), kernelbench(KERNELBENCH_OK), timeouts=QUICK)
    return worker.request(request, progress or (lambda text, percent: None), cancel or threading.Event(), QUICK)


def test_worker_answers_no_gpu_after_loading_and_user_prints_stay_in_the_log(worker: GpuWorker) -> None:
    seen: list[str] = []
    reply = ask(worker, 'print(\'{"type": "result"}\' * 1000)\n' + KERNELBENCH_OK, progress=lambda text, pct: seen.append(text))
    assert reply["failure"]["kind"] == "no-gpu"
    assert any(text.startswith("loading candidate") for text in seen)
    assert '{"type": "result"}' in worker.log_path.read_text()


def test_user_file_errors_are_compile_failures_and_the_worker_stays(worker: GpuWorker) -> None:
    reply = ask(worker, "raise ValueError('bad file')\n")
    assert reply["failure"]["kind"] == "compile"
    assert reply["failure"]["message"] == "candidate failed to load: ValueError: bad file"
    pid = worker.pid
    assert ask(worker, "def oops(:\n")["failure"]["kind"] == "compile"
    assert worker.pid == pid


def test_a_hung_worker_is_killed_and_replaced(worker: GpuWorker) -> None:
    ask(worker, KERNELBENCH_OK)
    first_pid = worker.pid
    started = time.monotonic()
    reply = ask(worker, "while True:\n    pass\n")
    assert reply["failure"]["kind"] == "timeout"
    assert reply["failure"]["message"] == "loading candidate took longer than 3 s; worker killed and restarted"
    assert time.monotonic() - started < QUICK.load_s + limit(2)
    assert worker.pid != first_pid
    assert ask(worker, KERNELBENCH_OK)["failure"]["kind"] == "no-gpu"


def test_cancel_stops_promptly(worker: GpuWorker) -> None:
    ask(worker, KERNELBENCH_OK)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    reply = ask(worker, "import time\nwhile True:\n    time.sleep(0.01)\n", cancel=cancel)
    # Which the requester sees first, the cancel or the stopped process, is up to the scheduler.
    assert reply["failure"]["kind"] in ("cancelled", "runtime")
    assert time.monotonic() - started < limit(1.5)
    assert ask(worker, KERNELBENCH_OK)["failure"]["kind"] == "no-gpu"


def test_cancel_kills_a_worker_that_ignores_interrupts(worker: GpuWorker) -> None:
    ask(worker, KERNELBENCH_OK)
    first_pid = worker.pid
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    stubborn = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.01)\n"
    reply = ask(worker, stubborn, cancel=cancel)
    assert reply["failure"]["message"].startswith("measurement cancelled; the worker was mid-kernel, so it was killed")
    assert worker.pid != first_pid


def test_second_request_queues_behind_the_first(worker: GpuWorker) -> None:
    ask(worker, KERNELBENCH_OK)
    replies: dict[str, dict] = {}
    finished: list[str] = []
    waiting_note: list[str] = []

    def run(label: str, code: str, progress=None) -> None:
        replies[label] = ask(worker, code, progress=progress)
        finished.append(label)

    slow = threading.Thread(target=run, args=("slow", "import time\ntime.sleep(1.0)\n" + KERNELBENCH_OK))
    slow.start()
    time.sleep(0.3)
    fast = threading.Thread(target=run, args=("fast", KERNELBENCH_OK, lambda text, pct: waiting_note.append(text)))
    fast.start()
    slow.join(10)
    fast.join(10)
    assert finished == ["slow", "fast"]
    assert replies["slow"]["failure"]["kind"] == replies["fast"]["failure"]["kind"] == "no-gpu"
    assert waiting_note[0] == "waiting for the measurement in progress to finish"


def test_cancel_while_queued_returns_without_waiting(worker: GpuWorker) -> None:
    ask(worker, KERNELBENCH_OK)
    slow = threading.Thread(target=ask, args=(worker, "import time\ntime.sleep(1.5)\n" + KERNELBENCH_OK))
    slow.start()
    time.sleep(0.3)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    started = time.monotonic()
    reply = ask(worker, KERNELBENCH_OK, cancel=cancel)
    assert reply["failure"]["message"] == "measurement cancelled while waiting in the queue"
    assert time.monotonic() - started < limit(0.8)
    slow.join(10)


def test_a_cancel_racing_a_shutdown_from_another_thread_reports_cancelled(worker: GpuWorker) -> None:
    # A batch that stops its workers at its deadline while a measurement is being cancelled
    # raised AttributeError ('NoneType' object has no attribute 'pid') in the measuring thread.
    ask(worker, KERNELBENCH_OK)
    cancel = threading.Event()

    def cancel_then_stop() -> None:
        time.sleep(0.3)
        cancel.set()
        worker.stop()

    threading.Thread(target=cancel_then_stop).start()
    reply = ask(worker, "import time\nwhile True:\n    time.sleep(0.01)\n", cancel=cancel)
    # Which the requester sees first, the cancel or the stopped process, is up to the scheduler.
    assert reply["failure"]["kind"] in ("cancelled", "runtime")


def test_a_request_after_another_thread_shut_the_worker_down_says_so(worker: GpuWorker) -> None:
    # The window the race above can hit: the worker was alive when the request began and its pipe
    # was closed by a shutdown before the request was written (ValueError on a closed file).
    ask(worker, KERNELBENCH_OK)
    worker._requests.close()
    reply = ask(worker, KERNELBENCH_OK)
    assert reply["failure"] == {"kind": "cancelled", "message": WORKER_SHUT_DOWN, "fatal": False}
    worker.stop()
    assert ask(worker, KERNELBENCH_OK)["failure"]["kind"] == "no-gpu"  # the next request starts a worker again


def _load_inline_signature(name, cpp_sources, cuda_sources=None, functions=None, build_directory=None, verbose=False):
    """load_inline's leading parameters (torch is not installed here): what it was called with."""
    return {"name": name, "build_directory": build_directory, "cuda_sources": cuda_sources}


def test_each_distinct_load_inline_extension_gets_a_name_and_folder_of_its_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Files that all name their extension `fused_op` were rebuilt as fused_op_v1 in one process,
    # or over each other in one folder. The real build is checked on the GPU
    # (test_measure_kernelbench_gpu.py::test_two_files_naming_their_extension_alike_each_keep_their_own_build).
    from kernelcast.kernels_runtime import worker

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(worker, "_USER_EXTENSIONS_DIR", None)
    load = worker.with_own_extension_name(_load_inline_signature)
    first = load("fused_op", "", cuda_sources="A", functions=["run"])
    again = load("fused_op", cpp_sources="", cuda_sources="A", functions=["run"], verbose=True)
    other = load("fused_op", "", "B", ["run"])
    assert first == again and first["name"] != other["name"]
    assert first["name"].startswith("fused_op_") and other["name"].startswith("fused_op_")
    assert Path(first["build_directory"]) == tmp_path / "home" / "torch_extensions" / first["name"]
    assert Path(first["build_directory"]).is_dir()
    assert load("fused_op", "", "A", build_directory="/theirs")["build_directory"] == "/theirs"  # the file's own folder is kept
    monkeypatch.setattr(worker, "_USER_EXTENSIONS_DIR", str(tmp_path / "mine"))  # so is the user's TORCH_EXTENSIONS_DIR
    assert Path(load("fused_op", "", "A")["build_directory"]).parent == tmp_path / "mine"


def _loader_seeing_build_locks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Any, list[bool]]:
    """The worker's load_inline wrapper over a stand-in for torch's that returns its build folder
    and notes, each call, whether torch's build lock was in it."""
    from kernelcast.kernels_runtime import worker

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(worker, "_USER_EXTENSIONS_DIR", None)
    seen: list[bool] = []

    def build(name, cpp_sources, cuda_sources=None, functions=None, build_directory=None, verbose=False):
        seen.append((Path(build_directory) / worker.TORCH_BUILD_LOCK).exists())
        return build_directory

    return worker.with_own_extension_name(build), seen


def test_a_build_lock_left_by_a_killed_build_does_not_stall_the_next(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A load_inline build killed at the load limit left torch's `lock` in its folder, and the next
    # build of that extension waited on it until the limit again. The real build is checked on the GPU
    # (test_measure_kernelbench_gpu.py::test_a_build_killed_midway_leaves_nothing_that_stalls_the_next).
    from kernelcast.kernels_runtime import worker

    load, seen = _loader_seeing_build_locks(monkeypatch, tmp_path)
    folder = Path(load("fused_op", "", "A"))
    (folder / worker.TORCH_BUILD_LOCK).write_text("")  # what the killed build left
    assert load("fused_op", "", "A") == str(folder)
    assert seen == [False, False]
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / worker.TORCH_BUILD_LOCK).write_text("")  # a folder the file names may be another program's build
    load("fused_op", "", "A", build_directory=str(theirs))
    assert seen[-1] is True


def test_a_live_build_keeps_its_lock_and_the_next_waits_for_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Two workers (two GPUs) may load one extension at once: the second must wait for the first's build, not take its lock away.
    import fcntl

    from kernelcast.kernels_runtime import worker

    load, calls = _loader_seeing_build_locks(monkeypatch, tmp_path)
    folder = Path(load("fused_op", "", "A"))
    with open(folder / worker.BUILDER_LOCK, "a") as live:  # another process building now
        fcntl.flock(live, fcntl.LOCK_EX)
        (folder / worker.TORCH_BUILD_LOCK).write_text("")
        second = threading.Thread(target=load, args=("fused_op", "", "A"))
        second.start()
        second.join(timeout=0.5)
        assert second.is_alive() and len(calls) == 1 and (folder / worker.TORCH_BUILD_LOCK).exists()
        (folder / worker.TORCH_BUILD_LOCK).unlink()  # the live build ends as torch ends it
        fcntl.flock(live, fcntl.LOCK_UN)
    second.join(timeout=30)
    assert not second.is_alive() and calls == [False, False]


HELPERS = '#pragma once\n#include "inner.cuh"\n__device__ __forceinline__ float twice(float v) { return 2.0f * inner(v); }\n'
INNER = '#pragma once\n#include "helpers.cuh"\n__device__ __forceinline__ float inner(float v) { return v; }\n'
SCALE = (
    '#include "common/helpers.cuh"\n#include "missing.cuh"\n#include <cuda_fp16.h>\n'
    "// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<20)\n"
    "__global__ void scale(const float* x, float* y, int N) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < N) y[i] = twice(x[i]);\n}\n"
)


def _project_with_headers(folder: Path) -> None:
    """base.cu and an edit of it, both including a header (which includes one that includes it back)."""
    (folder / "common").mkdir()
    (folder / "common" / "helpers.cuh").write_text(HELPERS)
    (folder / "common" / "inner.cuh").write_text(INNER)
    (folder / "base.cu").write_text(SCALE)
    (folder / "edit.cu").write_text("// kernelcast: reference=base.cu::scale\n" + SCALE.replace("twice(x[i]);", "twice(x[i]) + 1.0f;"))


def test_a_cuda_file_is_sent_to_be_measured_with_its_local_headers(tmp_path: Path) -> None:
    """The runtime compiles each side in a folder of its own: `#include "common/helpers.cuh"` was not found
    there. Each header beside the file naming it is pasted in once (the loop back is not followed); a header
    that is not there and a system header stay as written."""
    _project_with_headers(tmp_path)
    request = measure_request(tmp_path / "edit.cu", tmp_path)
    for side, edited in (("candidate", True), ("reference", False)):
        code = request[side]["code"]
        assert code.count("float inner(") == 1 and code.count("float twice(") == 1 and ("twice(x[i]) + 1.0f" in code) == edited
        assert "#pragma once" not in code
        assert '"common/helpers.cuh"' not in code and '#include "missing.cuh"' in code and "#include <cuda_fp16.h>" in code


def test_two_programs_without_pragmas_are_measured_as_their_host_code_launches() -> None:
    """Hand-written CUDA programs state their launches in `main`: 'has no launch spec' asked for a pragma
    each. Read from the host code, each side runs at its own block on the arrays it allocates."""
    from kernelcast.kernels_runtime.source.launch_spec import LaunchSpec

    program = (FIXTURES / "program_vec_add.cu").read_text().split("\n", 1)[1]  # without its pragma
    narrow = program.replace("int blockSize = 256;", "int blockSize = 32;")

    def vec_add(code: str) -> dict[str, str]:
        return {"code": code, "language": "cuda", "name": "vecAdd"}

    request = prepare_request(vec_add(narrow), vec_add(program))
    assert isinstance(request, dict), request
    candidate, reference = (LaunchSpec.from_json(request[label]["spec"]) for label in ("candidate", "reference"))
    assert (candidate.grid, candidate.block, reference.grid, reference.block) == ((1 << 19,), (32,), (1 << 16,), (256,))
    assert [arg.shape for arg in candidate.args if arg.is_array] == [(1 << 24,)] * 3 and candidate.signature() == reference.signature()
    unsized = program.replace("cudaMalloc(&d_c, bytes);", "")
    refused = prepare_request(vec_add(unsized), vec_add(unsized))
    assert isinstance(refused, MeasureFailure) and "has no launch spec" in refused.message
