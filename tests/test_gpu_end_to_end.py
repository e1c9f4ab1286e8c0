"""Measure on GPU from the editor and the CLI, on a real GPU (run on the device)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lsp_support import EXAMPLES, commit_all, isolated_env, stop_service
from lsprotocol import types
from test_lsp_end_to_end import Session, _label, _start
from test_novelty_and_assumed import NAIVE_TRANSPOSE, TRANSPOSE_LAUNCH, _cupy_file

from kernelcast.kernels_runtime.hardware import detect_local_gpus

pytestmark = pytest.mark.gpu


async def test_measure_action_replaces_the_forecast(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    shutil.copytree(EXAMPLES, workspace)
    home = tmp_path / "home"
    client, recorder = await _start(workspace, home)
    session = Session(client, recorder, workspace)
    try:
        uri = session.open("matmul_tiled.cu")
        diagnostics = await session.diagnostics_for(uri)
        line = next(d for d in diagnostics if d.code in ("forecast", "uncertain")).range.start.line
        answer = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="kernelcast.measure", arguments=[{"uri": uri, "position": {"line": line, "character": 0}}])
        )
        assert answer["ok"], answer
        await recorder.wait_for(lambda: any(d.code == "measured" for d in recorder.latest(uri).diagnostics), timeout=60)
        measured = next(d for d in recorder.latest(uri).diagnostics if d.code == "measured")
        local_gpu = detect_local_gpus()[0].spec.key.split("-")[0]  # the machine's own GPU, as NVML names it
        assert measured.message.startswith("sgemm: measured ") and "faster" in measured.message and f"({local_gpu})" in measured.message
        hints = await session.inlay_hints(uri)
        assert _label(hints[0]).endswith("(measured)")
        reports = [r for token, values in client.progress_reports.items() if "measure" in str(token) for r in values]
        assert reports and reports[-1].kind == "end"
    finally:
        await client.shutdown_session()
        await client.stop()
        stop_service(home)


def _measured(path: Path, home: Path) -> dict:
    """`kernelcast measure PATH --json`'s measurement of the file's one kernel: the real CLI on the GPU."""
    completed = subprocess.run(
        [sys.executable, "-m", "kernelcast", "measure", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=isolated_env(home),
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])["measurement"]


def test_cli_measure_reports_speedup_with_interval(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    shutil.copytree(EXAMPLES, workspace)
    measurement = _measured(workspace / "vector_add_float4.cu", tmp_path / "home")
    low, high = measurement["ci95"]
    assert low <= measurement["speedup"] <= high
    assert measurement["details"]["clocks"]


def test_measuring_against_git_head_runs_the_committed_kernel(tmp_path: Path) -> None:
    """The naive SGEMM committed, the tiled one in the working tree and no reference pragma: the
    reference ran the working tree's file (the tiled kernel against itself, about 1×)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "sgemm.cu").write_text((EXAMPLES / "matmul_naive.cu").read_text())
    commit_all(workspace)
    (workspace / "sgemm.cu").write_text((EXAMPLES / "matmul_tiled.cu").read_text().split("\n", 1)[1])
    measurement = _measured(workspace / "sgemm.cu", tmp_path / "home")
    assert measurement["ci95"][0] > 1.2, measurement


def test_a_kernel_in_a_cupy_string_is_measured_from_its_string(tmp_path: Path) -> None:
    """A tiled transpose in a cupy.RawKernel string against the naive one in a .cu file: the runtime was
    given the whole Python file to compile (NVRTC: `import` is undefined). The launch pragma may sit in
    the string or above the RawKernel call as a Python comment."""
    (tmp_path / "transpose_naive.cu").write_text(NAIVE_TRANSPOSE)
    (tmp_path / "inside.py").write_text(_cupy_file(TRANSPOSE_LAUNCH))
    pragma = "# kernelcast: launch kernel=transpose" + TRANSPOSE_LAUNCH.split("launch", 1)[1]
    (tmp_path / "outside.py").write_text(_cupy_file("").replace("transpose = cupy.RawKernel", pragma + "transpose = cupy.RawKernel"))
    for name in ("inside.py", "outside.py"):
        measurement = _measured(tmp_path / name, tmp_path / "home")
        assert measurement["ci95"][0] > 1.2, (name, measurement)


def test_calibrate_hw_measures_plausible_rates(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "kernelcast", "calibrate-hw"],
        capture_output=True,
        text=True,
        timeout=300,
        env=isolated_env(tmp_path / "home"),
    )
    assert completed.returncode == 0, completed.stderr
    stored = json.loads((tmp_path / "home" / "hardware.json").read_text())
    (rates,) = stored.values()
    assert 500 < rates["copy_gbs"] < 10_000 and 100 < rates["bf16_tflops"] < 3_000
    print(completed.stdout)
