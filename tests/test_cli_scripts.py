"""The `kernelcast` console script in scripts: exit codes, plain words, the same rules as the editor."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from lsp_support import EXAMPLES, KERNELCAST, isolated_env


def _run(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KERNELCAST, *args], capture_output=True, text=True, timeout=180, env=isolated_env(tmp_path / "home"), cwd=cwd)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    copy = tmp_path / "w"
    shutil.copytree(EXAMPLES, copy)
    return copy


def test_forecast_fails_when_the_reference_does_not_resolve(tmp_path: Path, workspace: Path) -> None:
    (workspace / "lonely.cu").write_text("// kernelcast: reference=missing.cu::k\n__global__ void k(float* x) { x[0] = 1.0f; }\n")
    completed = _run(tmp_path, "forecast", str(workspace / "lonely.cu"), "--no-facts")
    assert completed.returncode == 1, completed.stdout
    assert "no reference: pragma: missing.cu::k: missing.cu does not exist" in completed.stdout
    as_json = _run(tmp_path, "forecast", str(workspace / "lonely.cu"), "--no-facts", "--json")
    assert as_json.returncode == 1 and "no_reference" in json.loads(as_json.stdout)["kernels"][0]


def test_reference_option_is_labelled_as_such_and_read_from_the_current_folder(tmp_path: Path, workspace: Path) -> None:
    completed = _run(
        tmp_path, "forecast", "matmul_tiled.cu", "--reference", "matmul_naive.cu::sgemm", "--no-facts", "--json", cwd=workspace
    )
    assert completed.returncode == 0, completed.stderr
    (row,) = json.loads(completed.stdout)["kernels"]
    assert row["reference"] == f"--reference: {workspace / 'matmul_naive.cu'}::sgemm"
    assert "forecast" in row


def test_a_forecast_says_in_plain_words_what_it_could_not_read(tmp_path: Path, workspace: Path) -> None:
    (workspace / "matmul_cute.cu").write_text("#include <cute/tensor.hpp>\n" + (workspace / "matmul_tiled.cu").read_text())
    unlaunched = "\n".join(line for line in (workspace / "matmul_tiled.cu").read_text().splitlines() if "launch" not in line)
    (workspace / "matmul_unlaunched.cu").write_text(unlaunched)
    cute = _run(tmp_path, "forecast", str(workspace / "matmul_cute.cu"), "--no-facts")
    assert "uncertain" in cute.stdout and "    out of sight: candidate: cute/tensor.hpp (CuTe/CUTLASS templates)" in cute.stdout
    guessed = _run(tmp_path, "forecast", str(workspace / "matmul_unlaunched.cu"), "--no-facts")
    assert "    assumed, not read: candidate launch" in guessed.stdout, guessed.stdout
    plain = _run(tmp_path, "forecast", str(workspace / "matmul_tiled.cu"), "--no-facts")
    assert plain.returncode == 0 and "out of sight" not in plain.stdout and "assumed" not in plain.stdout


def test_reference_outside_the_workspace_is_refused_as_the_editor_refuses_it(tmp_path: Path, workspace: Path) -> None:
    outside = tmp_path / "elsewhere.cu"
    shutil.copy(workspace / "matmul_naive.cu", outside)
    refused = _run(tmp_path, "forecast", str(workspace / "matmul_tiled.cu"), "--reference", f"{outside}::sgemm", "--no-facts")
    assert refused.returncode == 1
    assert f"points outside the workspace ({workspace}); allow with the setting allowReferencesOutsideWorkspace" in refused.stdout
    assert "--allow-references-outside-workspace" in refused.stdout
    allowed = _run(
        tmp_path, "forecast", str(workspace / "matmul_tiled.cu"), "--reference", f"{outside}::sgemm", "--no-facts",
        "--allow-references-outside-workspace",
    )  # fmt: skip
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert f"reference: --reference: {outside}::sgemm" in allowed.stdout


def test_non_utf8_bytes_in_a_comment_do_not_refuse_the_file(tmp_path: Path, workspace: Path) -> None:
    tiled = workspace / "matmul_tiled.cu"
    tiled.write_bytes("// tuilé à la main\n".encode("latin-1") + tiled.read_bytes())
    completed = _run(tmp_path, "forecast", str(tiled), "--no-facts", "--json")
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["kernels"][0]["kernel"] == "sgemm"


def test_batch_exit_code_says_lines_failed(tmp_path: Path) -> None:
    naive = (EXAMPLES / "matmul_naive.cu").read_text()
    good = json.dumps({"id": "a", "reference": {"code": naive, "language": "cuda"}, "candidate": {"code": naive, "language": "cuda"}})
    pairs, out = tmp_path / "pairs.jsonl", tmp_path / "out.jsonl"
    pairs.write_text(good + "\n")
    assert _run(tmp_path, "forecast", "--batch", str(pairs), "--out", str(out)).returncode == 0
    pairs.write_text(good + "\n{broken\n")
    failed = _run(tmp_path, "forecast", "--batch", str(pairs), "--out", str(out))
    assert failed.returncode == 1 and "1 line(s) could not be forecast" in failed.stderr


def test_facts_of_a_kernelbench_file_compile_its_cuda_strings_in_plain_words(tmp_path: Path) -> None:
    completed = _run(tmp_path, "facts", str(EXAMPLES / "kernelbench_relu.py"))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "relu_kernel on sm_" in completed.stdout and "registers/thread" in completed.stdout
    assert "ModelNew\n    compiled as its CUDA kernels: relu_kernel" in completed.stdout
    assert "error" not in completed.stdout and "**" not in completed.stdout


_TRITON_MODEL_NEW = """import torch
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        double_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
"""


def test_facts_of_a_triton_kernelbench_file_name_its_kernels_triton(tmp_path: Path, workspace: Path) -> None:
    """The ModelNew line names the language its kernels are in: a Triton solution was said to compile as CUDA."""
    (workspace / "solution.py").write_text(_TRITON_MODEL_NEW)
    completed = _run(tmp_path, "facts", str(workspace / "solution.py"))
    assert "ModelNew\n    compiled as its Triton kernels: double_kernel" in completed.stdout, completed.stdout + completed.stderr
    assert "CUDA" not in completed.stdout


def test_facts_exit_codes_for_no_kernels_and_compile_errors(tmp_path: Path, workspace: Path) -> None:
    (workspace / "empty.cu").write_text("// nothing here yet\n")
    empty = _run(tmp_path, "facts", str(workspace / "empty.cu"))
    assert empty.returncode == 1 and "empty.cu: no kernels found" in empty.stdout
    (workspace / "broken.cu").write_text("__global__ void k(float* x) { x[0] = undeclared_name; }\n")
    broken = _run(tmp_path, "facts", str(workspace / "broken.cu"))
    assert broken.returncode == 1
    assert "no facts: " in broken.stdout and "undeclared_name" in broken.stdout


def test_triton_launch_spec_with_other_argument_names_is_named(tmp_path: Path) -> None:
    completed = _run(tmp_path, "facts", str(EXAMPLES / "add_triton.py"))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert (
        "add_kernel: launch spec args= names differ from the parameters, taken in order (x→x_ptr, y→y_ptr, out→out_ptr)" in completed.stdout
    )
    assert "no launch spec" not in completed.stdout


def test_lsp_accepts_stdio_and_doctor_takes_serve_flags(tmp_path: Path) -> None:
    lsp = subprocess.run([KERNELCAST, "lsp", "--stdio"], input="", capture_output=True, text=True, timeout=60, env=isolated_env(tmp_path))
    assert "unrecognized arguments" not in lsp.stderr and lsp.returncode == 0, lsp.stderr
    doctor = _run(tmp_path, "doctor", "--json", "--backend", "embedded", "--backend", "llama-cpp", "--gguf", str(tmp_path / "none.gguf"))
    assert doctor.returncode == 0, doctor.stderr
    assert list(json.loads(doctor.stdout)["backends"]) == ["embedded", "llama-cpp"]
    unknown = _run(tmp_path, "doctor", "--backend", "voodoo")
    assert unknown.returncode == 2 and "unknown backend voodoo; known: " in unknown.stderr
