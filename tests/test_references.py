"""Reference resolution on real files and a real git repository: the four sources, their order, the reasons."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kernelcast.kernels_runtime.source.discovery import Discovery, discover
from kernelcast.project_config import NO_CONFIG, load_project_config
from kernelcast.references import OUTSIDE_HINT, NoReference, Reference, pragma_line, resolve_reference

DATA = Path(__file__).parent / "data" / "discovery"
BASE = "__global__ void add(float* x) { x[0] += 1; }\n__global__ void mul(float* x) { x[0] *= 2; }\n"
CANDIDATE = "__global__ void add(float* x) { x[0] = x[0] + 1; }\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def resolve(path: Path, workspace: Path | None, kernel: str = "add", **options: bool) -> Reference | NoReference:
    found = discover(path.read_text(), str(path))
    chosen = next(k for k in found.kernels if k.name == kernel)
    return resolve_reference(chosen, found, path, workspace, load_project_config(path, workspace), **options)


def git(repo: Path, *args: str) -> str:
    command = [
        "git",
        "-c",
        "user.name=kernelcast tests",
        "-c",
        "user.email=tests@kernelcast.invalid",
        "-c",
        "init.defaultBranch=main",
        *args,
    ]
    return subprocess.run(command, cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


# --- (a) pragma ------------------------------------------------------------------------


def test_pragma_with_kernel_name(tmp_path: Path) -> None:
    write(tmp_path / "lib" / "base.cu", BASE)
    path = write(tmp_path / "src" / "k.cu", "// kernelcast: reference=../lib/base.cu::mul\n" + CANDIDATE)
    reference = resolve(path, tmp_path)
    assert isinstance(reference, Reference)
    assert (reference.origin, reference.name, reference.language) == ("pragma", "mul", "cuda")
    assert reference.code == "__global__ void mul(float* x) { x[0] *= 2; }"
    assert (reference.description, reference.path) == ("pragma: ../lib/base.cu::mul", str(tmp_path / "lib" / "base.cu"))


def test_pragma_may_name_the_host_function_that_launches_the_reference(tmp_path: Path) -> None:
    write(tmp_path / "base.cu", BASE + "void run_mul(float* x) { mul<<<1, 32>>>(x); }\n")
    reference = resolve(write(tmp_path / "k.cu", "// kernelcast: reference=base.cu::run_mul\n" + CANDIDATE), tmp_path)
    assert isinstance(reference, Reference) and reference.name == "mul"
    assert reference.description == "pragma: base.cu::run_mul"


def test_pragma_without_kernel_name_picks_same_name_then_only_kernel(tmp_path: Path) -> None:
    write(tmp_path / "base.cu", BASE)
    write(tmp_path / "single.cu", "__global__ void other(float* x) {}\n")
    same = resolve(write(tmp_path / "a.cu", "// kernelcast: reference=base.cu\n" + CANDIDATE), tmp_path)
    assert isinstance(same, Reference) and same.name == "add"
    only = resolve(write(tmp_path / "b.cu", "// kernelcast: reference=single.cu\n" + CANDIDATE), tmp_path)
    assert isinstance(only, Reference) and only.name == "other"
    ambiguous = resolve(write(tmp_path / "c.cu", "// kernelcast: reference=base.cu\n" + CANDIDATE.replace("add", "sub")), tmp_path, "sub")
    assert ambiguous == NoReference("no reference: pragma: base.cu: name the kernel with `::name`; it has `add`, `mul`")


def test_pragma_errors_name_what_is_missing(tmp_path: Path) -> None:
    write(tmp_path / "base.cu", BASE)
    missing_file = resolve(write(tmp_path / "a.cu", "// kernelcast: reference=nope.cu::add\n" + CANDIDATE), tmp_path)
    assert missing_file == NoReference("no reference: pragma: nope.cu::add: nope.cu does not exist")
    missing_kernel = resolve(write(tmp_path / "b.cu", "// kernelcast: reference=base.cu::div\n" + CANDIDATE), tmp_path)
    assert missing_kernel == NoReference("no reference: pragma: base.cu::div: no kernel `div` there; it has `add`, `mul`")
    write(tmp_path / "blob.cu", "")
    (tmp_path / "blob.cu").write_bytes(b"\x00\x01")
    binary = resolve(write(tmp_path / "c.cu", "// kernelcast: reference=blob.cu\n" + CANDIDATE), tmp_path)
    assert binary == NoReference("no reference: pragma: blob.cu: blob.cu: binary file")


def test_pragma_outside_the_workspace_is_refused_unless_allowed(tmp_path: Path) -> None:
    write(tmp_path / "outside" / "base.cu", BASE)
    path = write(tmp_path / "ws" / "k.cu", "// kernelcast: reference=../outside/base.cu::add\n" + CANDIDATE)
    refused = resolve(path, tmp_path / "ws")
    assert refused == NoReference(
        f"no reference: pragma: ../outside/base.cu::add points outside the workspace ({tmp_path / 'ws'}); {OUTSIDE_HINT}"
    )
    allowed = resolve(path, tmp_path / "ws", allow_outside_workspace=True)
    assert isinstance(allowed, Reference) and allowed.name == "add"
    assert isinstance(resolve(path, None), NoReference)  # without a workspace, the file's folder is the limit


def test_pragma_can_name_another_kernel_of_the_same_file(tmp_path: Path) -> None:
    path = write(tmp_path / "k.cu", "// kernelcast: reference=::add_v1\n" + CANDIDATE + CANDIDATE.replace("add", "add_v1"))
    reference = resolve(path, tmp_path)
    assert isinstance(reference, Reference) and reference.name == "add_v1" and reference.path == str(path)
    # The reference kernel itself: it was told `no kernel `add_v1` there` while it is there.
    itself = resolve(path, tmp_path, "add_v1")
    said = "no reference: pragma: ::add_v1: `add_v1` is this kernel itself (the reference of the file's other kernels)"
    assert itself == NoReference(said)


def test_a_file_named_as_its_own_reference_is_told_so(tmp_path: Path) -> None:
    """`kernelcast measure k.cu --reference k.cu` was told k.cu "has no kernels" while it has one."""
    path = write(tmp_path / "k.cu", "// kernelcast: reference=k.cu\n" + CANDIDATE)
    said = "no reference: pragma: k.cu: that is this file, and `add` its only kernel; name another file"
    said += " (a copy, to measure it against itself)"
    assert resolve(path, tmp_path) == NoReference(said)


def test_pragma_to_a_kernelbench_reference_is_pytorch(tmp_path: Path) -> None:
    shutil.copy(DATA / "reference.py", tmp_path / "ref_model.py")
    path = write(tmp_path / "k.cu", "// kernelcast: reference=ref_model.py\n" + CANDIDATE)
    reference = resolve(path, tmp_path)
    assert isinstance(reference, Reference)
    assert (reference.name, reference.language) == ("Model", "pytorch") and "def get_inputs" in reference.code


# --- (b) project config ----------------------------------------------------------------


def test_config_rule_is_relative_to_the_config_and_carries_problem_sizes(tmp_path: Path) -> None:
    write(tmp_path / "kernels" / "baseline.cu", BASE)
    write(
        tmp_path / "kernelcast.toml",
        'problem = { N = 64, M = 8 }\n[[references]]\nfiles = "kernels/*_v2.cu"\n'
        'reference = "kernels/baseline.cu::add"\nproblem = { N = 1024 }\n',
    )
    path = write(tmp_path / "kernels" / "add_v2.cu", CANDIDATE)
    reference = resolve(path, tmp_path)
    assert isinstance(reference, Reference)
    assert (reference.origin, reference.name, reference.problem) == ("config", "add", {"N": 1024, "M": 8})
    assert reference.description == "config: kernels/baseline.cu::add"


def test_pragma_beats_config(tmp_path: Path) -> None:
    write(tmp_path / "base.cu", BASE)
    write(tmp_path / "kernelcast.toml", '[[references]]\nfiles = "*.cu"\nreference = "base.cu::add"\n')
    path = write(tmp_path / "k.cu", "// kernelcast: reference=base.cu::mul\n" + CANDIDATE)
    reference = resolve(path, tmp_path)
    assert isinstance(reference, Reference) and (reference.origin, reference.name) == ("pragma", "mul")


# --- (c) KernelBench -------------------------------------------------------------------


def kernelbench_candidate(found: Discovery):
    return next(k for k in found.kernels if k.container == "kernelbench")


def test_kernelbench_model_in_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "new.py"
    shutil.copy(DATA / "kernelbench_new.py", path)
    found = discover(path.read_text(), str(path))
    reference = resolve_reference(kernelbench_candidate(found), found, path, tmp_path, NO_CONFIG)
    assert isinstance(reference, Reference)
    assert (reference.origin, reference.language, reference.description) == ("kernelbench", "pytorch", "Model in this file")
    assert reference.code == found.reference_model.code


def test_kernelbench_reference_py_beside_the_file_and_config_beats_it(tmp_path: Path) -> None:
    shutil.copy(DATA / "reference.py", tmp_path / "reference.py")
    path = write(
        tmp_path / "new.py", "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.clamp_min(0)\n"
    )
    found = discover(path.read_text(), str(path))
    reference = resolve_reference(kernelbench_candidate(found), found, path, tmp_path, NO_CONFIG)
    assert isinstance(reference, Reference)
    assert (reference.name, reference.description, reference.path) == ("Model", "Model in reference.py", str(tmp_path / "reference.py"))
    write(tmp_path / "older.py", path.read_text())
    write(tmp_path / "kernelcast.toml", '[[references]]\nfiles = "new.py"\nreference = "older.py"\n')
    configured = resolve_reference(kernelbench_candidate(found), found, path, tmp_path, load_project_config(path, tmp_path))
    assert isinstance(configured, Reference) and (configured.origin, configured.name) == ("config", "ModelNew")


# --- (d) git HEAD ------------------------------------------------------------------------


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q")
    write(tmp_path / "kernels" / "k.cu", BASE)
    git(tmp_path, "add", "kernels/k.cu")
    git(tmp_path, "commit", "-q", "-m", "base")
    return tmp_path


def test_git_head_version_of_the_same_kernel(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(repo / "kernels" / "k.cu", CANDIDATE + "__global__ void fresh() {}\n")
    commit = git(repo, "rev-parse", "--short=7", "HEAD")
    reference = resolve(path, repo)
    assert isinstance(reference, Reference)
    assert (reference.origin, reference.description) == ("git-head", f"git HEAD ({commit}): add")
    assert reference.code == "__global__ void add(float* x) { x[0] += 1; }"
    assert reference.file_text == BASE  # what its facts and launch are read from, not the edited file
    arguments = _resolve_arguments(path, repo)
    ran: list[list[str]] = []
    run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda argv, *args, **kwargs: ran.append(argv) or run(argv, *args, **kwargs))
    again = resolve_reference(*arguments)
    assert ran == [] and again == reference  # cached per (repo, HEAD, path): no git process on a keystroke
    new_kernel = resolve(path, repo, "fresh")
    assert new_kernel == NoReference(f"no reference: `fresh` is new since git HEAD ({commit}); HEAD has `add`, `mul`")


def _resolve_arguments(path: Path, workspace: Path) -> tuple:
    found = discover(path.read_text(), str(path))
    return found.kernels[0], found, path, workspace, NO_CONFIG


def test_git_head_follows_new_commits(repo: Path) -> None:
    path = write(repo / "kernels" / "k.cu", CANDIDATE)
    git(repo, "commit", "-q", "-am", "candidate becomes the base")
    reference = resolve(path, repo)
    assert isinstance(reference, Reference) and reference.code == CANDIDATE.strip()


def test_untracked_file_and_file_outside_git(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    untracked = write(repo / "kernels" / "new.cu", CANDIDATE)
    commit = git(repo, "rev-parse", "--short=7", "HEAD")
    assert resolve(untracked, repo) == NoReference(
        f"no reference: kernels/new.cu is untracked or new since git HEAD ({commit}) and has no `kernelcast: reference=` pragma"
    )
    loose = write(tmp_path_factory.mktemp("no_git") / "k.cu", CANDIDATE)
    assert resolve(loose, loose.parent) == NoReference("no reference: file is not in git and has no `kernelcast: reference=` pragma")


def test_repository_without_commits(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    path = write(tmp_path / "k.cu", CANDIDATE)
    assert resolve(path, tmp_path) == NoReference(
        "no reference: the git repository has no commit yet and has no `kernelcast: reference=` pragma"
    )


def test_pragma_line() -> None:
    assert pragma_line("cuda", "base.cu::add") == "// kernelcast: reference=base.cu::add"
    assert pragma_line("triton", "my dir/base.py::k") == '# kernelcast: reference="my dir/base.py::k"'
    assert discover(pragma_line("pytorch", "my dir/base.py::k") + "\n", "x.py").pragmas.reference == "my dir/base.py::k"


def test_reference_option_comes_first_and_is_measured_as_its_whole_file(tmp_path: Path) -> None:
    """`--reference` beats the file's pragma, says where it came from, and a measurement gets the
    reference's whole file (its macros and helpers), as for a pragma."""
    from kernelcast.analysis import analyse_text, measurement_sides
    from kernelcast.kernels_runtime.hardware import SPECS
    from kernelcast.settings import Settings

    examples = Path(__file__).resolve().parents[1] / "examples"
    workspace = tmp_path / "w"
    shutil.copytree(examples, workspace)
    path = workspace / "matmul_tiled.cu"
    override = f"{workspace / 'matmul_naive.cu'}::sgemm"
    analysis = analyse_text(path.as_uri(), None, path.read_text(), path, workspace, Settings(), SPECS["H100-SXM"], override)
    (result,) = analysis.results
    assert (result.reference.origin, result.reference.description) == ("--reference", f"--reference: {override}")
    _, reference = measurement_sides(analysis, result)
    assert reference == {"code": (workspace / "matmul_naive.cu").read_text(), "language": "cuda", "name": "sgemm"}
