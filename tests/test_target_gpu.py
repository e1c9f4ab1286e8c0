"""Which GPU forecasts are for: `--gpu` / `targetGpu` > the project's `target_gpu` > the local GPU > H100-SXM."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from lsp_support import EXAMPLES, FAST, KERNELCAST, StdioLsp, isolated_env, stop_service


def _workspace(tmp_path: Path, config_name: str, config_text: str) -> Path:
    workspace = tmp_path / "w"
    shutil.copytree(EXAMPLES, workspace)
    (workspace / config_name).write_text(config_text)
    return workspace


def _forecast_gpu(tmp_path: Path, workspace: Path, *flags: str) -> tuple[str, list[str]]:
    completed = subprocess.run(
        [KERNELCAST, "forecast", str(workspace / "vector_add_float4.cu"), "--json", "--no-facts", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        env=isolated_env(tmp_path / "home"),
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    return report["gpu"], report["problems"]


def test_cli_forecasts_for_the_projects_target_gpu_unless_told_otherwise(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path, "pyproject.toml", '[tool.kernelcast]\ntarget_gpu = "A100"\n')
    assert _forecast_gpu(tmp_path, workspace) == ("A100", [])
    assert _forecast_gpu(tmp_path, workspace, "--gpu", "L40S")[0] == "L40S"


def test_tool_table_pasted_into_kernelcast_toml_is_read_and_named(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path, "kernelcast.toml", '[tool.kernelcast]\ntarget_gpu = "H200"\n')
    gpu, problems = _forecast_gpu(tmp_path, workspace)
    assert gpu == "H200"
    (problem,) = problems
    assert "kernelcast.toml:1: kernelcast.toml takes its settings at the top level: drop the `[tool.kernelcast]` header" in problem
    assert "unknown setting 'tool'" not in problem


async def test_editor_forecasts_for_the_projects_target_gpu_unless_the_setting_names_one(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path, "kernelcast.toml", 'target_gpu = "A100"\n')
    uri = (workspace / "vector_add_float4.cu").as_uri()
    text = (workspace / "vector_add_float4.cu").read_text()
    line = next(number for number, words in enumerate(text.splitlines()) if "__global__" in words)
    home = tmp_path / "home"
    try:
        for settings, expected in (({}, "Hardware: NVIDIA A100"), ({"targetGpu": "L40S"}, "Hardware: NVIDIA L40S")):
            client = await StdioLsp(home, workspace, {**FAST, **settings}).start()
            try:
                client.open(uri, text)
                await client.published(uri, 1, timeout=60)
                shown = await client.hover(uri, line, 20)
                assert expected in shown, shown
            finally:
                await client.stop()
    finally:
        stop_service(home)
