"""One file analysed as the editor analyses it (no server), for tests of what it reads and compiles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelcast.analysis import FileAnalysis, analyse_text, fill_facts, measurement_sides
from kernelcast.cache import ResultCache
from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.kernels_runtime.measure import prepare_request
from kernelcast.settings import Settings


def analysed(path: Path, workspace: Path) -> FileAnalysis:
    """The file at `path` as saved, for an H100, with default settings."""
    return analyse_text(path.as_uri(), 1, path.read_text(), path, workspace, Settings(), SPECS["H100-SXM"])


def with_facts(path: Path, workspace: Path) -> FileAnalysis:
    """`analysed`, its compiler facts compiled (a cache under `workspace`); asserts some were found."""
    analysis = analysed(path, workspace)
    assert fill_facts(analysis, ResultCache(workspace / "cache"), True, lambda: True)
    return analysis


def measure_request(path: Path, workspace: Path) -> dict[str, Any]:
    """What Measure sends the GPU runtime for the file's one kernel (made without a GPU); asserts it can be sent."""
    analysis = analysed(path, workspace)
    (result,) = analysis.results
    request = prepare_request(*measurement_sides(analysis, result))
    assert isinstance(request, dict), request
    return request
