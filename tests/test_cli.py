"""The kernelcast command as a user runs it."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from lsp_support import EXAMPLES, isolated_env


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelcast", *args], capture_output=True, text=True, timeout=120, env=isolated_env(tmp_path / "home")
    )


def test_forecast_file_json(tmp_path: Path) -> None:
    workspace = tmp_path / "w"
    shutil.copytree(EXAMPLES, workspace)
    completed = _run(tmp_path, "forecast", str(workspace / "matmul_tiled.cu"), "--json", "--gpu", "A100")
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["gpu"] == "A100"
    (row,) = report["kernels"]
    assert row["kernel"] == "sgemm" and row["reference"] == "pragma: matmul_naive.cu::sgemm"
    assert len(row["forecast"]["probabilities"]) == 8
    assert row["forecast"]["provenance"]["facts_used"] == ["reference", "candidate"], "nvcc is on this machine: facts feed the forecast"


def test_forecast_errors_are_readable(tmp_path: Path) -> None:
    missing = _run(tmp_path, "forecast", str(tmp_path / "nope.cu"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    bad_gpu = _run(tmp_path, "forecast", str(EXAMPLES / "matmul_tiled.cu"), "--gpu", "Voodoo2")
    assert bad_gpu.returncode == 2 and "known targets" in bad_gpu.stderr
    binary = tmp_path / "blob.cu"
    binary.write_bytes(b"\x00\xff" * 100)
    refused = _run(tmp_path, "forecast", str(binary))
    assert refused.returncode == 1 and "binary" in (refused.stdout + refused.stderr)


def test_forecast_kernel_may_be_named_by_the_function_that_launches_it(tmp_path: Path) -> None:
    workspace = tmp_path / "w"
    shutil.copytree(EXAMPLES, workspace)
    source = (workspace / "vector_add.cu").read_text()
    kernel = source.split("__global__ void ", 1)[1].split("(", 1)[0]
    path = workspace / "k.cu"
    launcher = f"void launch_it(float* a) {{ {kernel}<<<1, 256>>>(a, a, a, 256); }}"
    path.write_text(f"// kernelcast: reference=vector_add.cu::{kernel}\n{source}\n{launcher}\n")
    by_wrapper = _run(tmp_path, "forecast", str(path), "--kernel", "launch_it", "--no-facts", "--json")
    assert by_wrapper.returncode == 0, by_wrapper.stderr
    assert [row["kernel"] for row in json.loads(by_wrapper.stdout)["kernels"]] == [kernel]
    assert f"`launch_it` read as the kernel it launches, `{kernel}`" in by_wrapper.stderr
    unknown = _run(tmp_path, "forecast", str(path), "--kernel", "nothing", "--no-facts")
    assert unknown.returncode == 2
    assert f"k.cu: no kernel named 'nothing', and no function of that name launches one (kernels: {kernel})" in unknown.stderr


def test_batch_forecast(tmp_path: Path) -> None:
    naive = (EXAMPLES / "matmul_naive.cu").read_text()
    tiled = (EXAMPLES / "matmul_tiled.cu").read_text()
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "\n".join(
            [
                json.dumps(
                    {
                        "id": "a",
                        "reference": {"code": naive, "language": "cuda"},
                        "candidate": {"code": tiled, "language": "cuda"},
                        "gpu": "H100-SXM",
                    }
                ),
                json.dumps(
                    {
                        "id": "b",
                        "reference": {"code": tiled, "language": "cuda"},
                        "candidate": {"code": naive, "language": "cuda"},
                        "problem": {"N": 2048},
                    }
                ),
                "{not json",
                json.dumps({"id": "d", "reference": {"code": naive}, "candidate": {"code": tiled}, "gpu": "Voodoo2"}),
            ]
        )
        + "\n"
    )
    out = tmp_path / "out.jsonl"
    completed = _run(tmp_path, "forecast", "--batch", str(pairs), "--out", str(out))
    assert completed.returncode == 1, "lines that failed make the exit code non-zero"
    assert "2 line(s) could not be forecast" in completed.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == ["a", "b", 3, "d"]
    assert lines[0]["speedup"] > 1 > lines[1]["speedup"]
    assert "error" in lines[2] and "known targets" in lines[3]["error"]


def test_doctor_reports_what_is_there(tmp_path: Path) -> None:
    completed = _run(tmp_path, "doctor", "--json")
    assert completed.returncode == 0
    report = json.loads(completed.stdout)
    assert report["backends"]["embedded"].startswith("ok")
    assert set(report) >= {"gpu", "nvcc", "torch", "triton", "cache_dir", "service"}


def every_parser(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and all its subcommands' parsers, depth first."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += every_parser(child)
    return found


def test_every_command_and_subcommand_prints_its_help() -> None:
    """argparse formats help strings with %: a literal one (95% CIs) crashed `python -m workshop corpus --help`."""
    from kernelcast.cli import build_parser

    every = every_parser(build_parser())
    assert len(every) >= 10  # kernelcast and its nine commands
    for parser in every:
        assert parser.format_help().startswith("usage:")
