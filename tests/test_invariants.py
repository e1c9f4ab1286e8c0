"""The rules of the tree, as tests: the import layers (import-linter), what `kernelcast lsp`
loads, ruff, types on the core modules (mypy) and what the wheel ships.

lint-imports and mypy read packages from disk and cannot follow the editable install's
import hook, so they run on a copy of the Python files laid out as the wheel installs them
(pyproject's package-dir maps server/, models/ and kernels_runtime/ under kernelcast/).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import lsp_support
import pytest
from lsp_support import FAST, StdioLsp

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
# Installed beside the test runner, in the same environment.
TOOLS = Path(sys.executable).parent

# What the language server never loads: the numeric stack and the forecasters live in the
# service process; GPU and LLM libraries load only to measure or to serve a model.
NEVER_IN_LSP = ("numpy", "kernelcast.models", "workshop", "torch", "triton", "cupy", "llama_cpp", "transformers")
# Parsers of kernel source load with the first file, not before.
NOT_BEFORE_A_FILE = ("tree_sitter",)
# The weights are most of the wheel (the MLP 5.5 MB; the KernelBench trees and their
# source-left-out members, each three seeds' forests of 1,800 trees, 4.1 MB, their leaves and
# thresholds doubles that do not compress; the novelty table): the limit catches data or build
# output that slips in.
WHEEL_LIMIT_BYTES = 12_000_000


def installed_layout(target: Path) -> Path:
    """The Python files of every folder that package-dir maps, copied to where the wheel puts
    them, and the workshop beside them (import-linter checks that nothing installed imports it)."""
    package_dirs = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["package-dir"]
    folders = {**package_dirs, "workshop": "workshop"}
    for package, folder in folders.items():
        shutil.copytree(ROOT / folder, target.joinpath(*package.split(".")), ignore=_all_but_python, dirs_exist_ok=True)
    return target


def _all_but_python(folder: str, names: list[str]) -> list[str]:
    return [name for name in names if not name.endswith(".py") and (name == "__pycache__" or not Path(folder, name).is_dir())]


def _run(command: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_import_contracts_hold(tmp_path: Path) -> None:
    layout = installed_layout(tmp_path / "installed")
    result = _run([str(TOOLS / "lint-imports"), str(PYPROJECT), "--no-cache"], cwd=layout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout, result.stdout


def test_core_modules_type_check(tmp_path: Path) -> None:
    layout = installed_layout(tmp_path / "installed")
    result = _run([sys.executable, "-m", "mypy", "--config-file", str(PYPROJECT), "--cache-dir", str(tmp_path / "mypy")], cwd=layout)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("command", [["check", "--output-format", "concise", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff_is_clean(command: list[str]) -> None:
    result = _run([sys.executable, "-m", "ruff", *command], cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


async def _lsp_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_file: bool) -> tuple[set[str], float, list[str]]:
    """Start the real `kernelcast lsp` the way its console script does, initialize it (and
    read a file where asked), shut it down; the modules it had loaded, the seconds from
    spawning it to its `initialize` answer, and the file's diagnostics."""
    modules_file = tmp_path / "modules.json"
    entry_point = (
        "import atexit, json, sys\n"
        f"atexit.register(lambda: open({str(modules_file)!r}, 'w').write(json.dumps(sorted(sys.modules))))\n"
        "from kernelcast.cli import main\n"
        "sys.exit(main(['lsp']))\n"
    )
    monkeypatch.setattr(lsp_support, "SERVER_COMMAND", [sys.executable, "-c", entry_point])
    workspace = tmp_path / "workspace"
    shutil.copytree(lsp_support.EXAMPLES, workspace)
    # Nothing listens on the discard port: forecasts fail fast, without a service process.
    settings = {**FAST, "forecaster": {"url": "http://127.0.0.1:9", "timeoutMs": 1000}}
    started = time.perf_counter()
    server = await StdioLsp(tmp_path / "home", workspace, settings).start()
    start_s = time.perf_counter() - started
    diagnostics: list[str] = []
    try:
        if open_file:
            document = workspace / "kernelbench_relu.py"
            server.open(document.as_uri(), document.read_text(), language="python")
            diagnostics = [item["message"] for item in await server.published(document.as_uri(), 1, timeout=60)]
    finally:
        exit_code = await server.stop()
    assert exit_code == 0, server.stderr.decode(errors="replace")
    return set(json.loads(modules_file.read_text())), start_s, diagnostics


def _loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(name for name in modules if any(name == package or name.startswith(f"{package}.") for package in packages))


async def test_lsp_start_loads_no_forecaster_numpy_or_parsers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    modules, start_s, _ = await _lsp_session(tmp_path, monkeypatch, open_file=False)
    own = [name for name in modules if name == "kernelcast" or name.startswith("kernelcast.")]
    print(f"kernelcast lsp: {len(modules)} modules ({len(own)} of kernelcast), initialize answered {start_s * 1000:.0f} ms after spawn")
    assert _loaded(modules, NEVER_IN_LSP + NOT_BEFORE_A_FILE) == []
    assert "kernelcast.server.app" in modules  # the count is of the language server itself


async def test_lsp_reading_a_file_loads_no_forecaster_or_numpy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    modules, _, diagnostics = await _lsp_session(tmp_path, monkeypatch, open_file=True)
    print(f"kernelcast lsp after reading a KernelBench file: {len(modules)} modules; diagnostics {diagnostics}")
    assert _loaded(modules, NEVER_IN_LSP) == []
    assert any("forecaster unavailable" in message for message in diagnostics), diagnostics  # the file was read and forecast


def _fresh_clone(target: Path) -> Path:
    """The files a clone of this working tree would hold: no build/ left over from earlier builds."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    for name in filter(None, listed.stdout.split("\0")):
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    return target


def test_wheel_ships_the_product_and_weights_without_the_workshop(tmp_path: Path) -> None:
    source = _fresh_clone(tmp_path / "source")
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "wheel"), str(source)],
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "wheel").glob("kernelcast-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        python_lines = sum(archive.read(name).count(b"\n") for name in names if name.endswith(".py"))
    size = wheel.stat().st_size
    print(f"wheel: {size / 1e6:.2f} MB, {sum(name.endswith('.py') for name in names)} Python files, {python_lines} lines")
    assert size < WHEEL_LIMIT_BYTES
    assert [name for name in names if name.startswith("workshop/") or name.endswith(".jsonl.gz")] == []
    assert {"kernelcast/models/weights/embedded.npz", "kernelcast/models/weights/calibration.json"} <= names
    layout = installed_layout(tmp_path / "installed")
    product = {path.relative_to(layout).as_posix() for path in (layout / "kernelcast").rglob("*.py")}
    assert product - names == set(), "modules of the tree missing from the wheel (pyproject's packages)"

    # The installed copy forecasts with its own weights: -S keeps the editable install's import
    # hook (a .pth file) out, so nothing missing from the wheel is found in the checkout instead.
    site = tmp_path / "site"
    installed = _run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site), str(wheel)], cwd=tmp_path
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    dependencies = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    forecast = subprocess.run(
        [sys.executable, "-S", "-m", "kernelcast", "forecast", str(lsp_support.EXAMPLES / "kernelbench_relu.py"), "--no-facts", "--json"],
        cwd=tmp_path,
        env={**lsp_support.isolated_env(tmp_path / "home"), "PYTHONPATH": os.pathsep.join([str(site), *dependencies])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert forecast.returncode == 0, forecast.stderr
    (kernel,) = json.loads(forecast.stdout)["kernels"]
    assert len(kernel["forecast"]["probabilities"]) == 8
