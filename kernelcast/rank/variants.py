"""The variants of a rank run: read from a folder, a glob or a JSONL file, analysed and forecast
through the same path as `kernelcast forecast` (analysis.py, then the forecaster's batch call)."""

from __future__ import annotations

import glob
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from kernelcast.analysis import FileAnalysis, KernelResult, analyse_text, build_request, fill_facts, measurement_sides, problem_sizes
from kernelcast.kernels_runtime.hardware import GpuSpec
from kernelcast.kernels_runtime.source.entry_points import kernel_meant, no_kernel_meant
from kernelcast.kernels_runtime.source.launch_spec import LaunchSpecError, find_launch_spec
from kernelcast.settings import Settings
from kernelcast.wire import Forecast, ForecastRequest, jsonl_records

KERNEL_SUFFIXES = (".cu", ".cuh", ".py")
# A JSONL variant's language → the suffix its text is analysed under.
_JSONL_SUFFIX = {"cuda": ".cu", "triton": ".py", "kernelbench": ".py"}


class RankError(Exception):
    """Something the user gave cannot be ranked; the message says what and how to fix it."""


@dataclass
class Variant:
    name: str
    path: Path  # where its text lives, or would (a JSONL variant is analysed as if there)
    text: str
    problem: dict[str, Any] | None = None  # sizes a JSONL variant adds to its pragmas'
    analysis: FileAnalysis | None = None
    result: KernelResult | None = None
    request: ForecastRequest | None = None
    forecast: Forecast | None = None
    skipped: str | None = None  # why it is not ranked

    def measurement_job(self, index: int, kernel_timeout_s: float) -> dict[str, Any]:
        """What a measuring worker needs: both sides as whole files (measure.py's input)."""
        assert self.analysis is not None and self.result is not None
        candidate, reference = measurement_sides(self.analysis, self.result)
        return {"index": index, "name": self.name, "candidate": candidate, "reference": reference, "kernel_timeout_s": kernel_timeout_s}


def read_variants(spec: str) -> list[Variant]:
    """A folder's kernel files (recursively), a glob's, or a JSONL file's lines, in sorted order."""
    path = Path(spec)
    if path.is_file() and path.suffix == ".jsonl":
        return _jsonl_variants(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in KERNEL_SUFFIXES and p.is_file())
        base = path
    elif any(character in spec for character in "*?["):
        files = sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).suffix in KERNEL_SUFFIXES and Path(p).is_file())
        base = Path(os.path.commonpath([str(p.resolve().parent) for p in files])) if files else Path.cwd()
    elif path.is_file():
        files, base = [path], path.parent
    else:
        raise RankError(f"{spec}: no such file, folder or glob (VARIANTS is a folder of kernels, a glob or a .jsonl of variants)")
    if not files:
        raise RankError(f"no variants: {spec} holds no {', '.join(KERNEL_SUFFIXES)} files")
    variants = []
    for file in files:
        name = str(file.resolve().relative_to(base.resolve())) if file.resolve().is_relative_to(base.resolve()) else str(file)
        try:
            variants.append(Variant(name, file.resolve(), file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as error:
            variants.append(Variant(name, file.resolve(), "", skipped=f"cannot read: {getattr(error, 'strerror', None) or error}"))
    return variants


def _jsonl_variants(path: Path) -> list[Variant]:
    """Lines {"name", "code", "language": cuda | triton | kernelbench, "launch"?, "problem"?}.
    The code carries its launch pragma as a file would, or "launch" holds the pragma's text
    (grid=… block=… args=…), put above the code (with kernel=NAME it names its kernel). A bad
    line stops the run, naming its number."""
    variants: list[Variant] = []
    names: set[str] = set()
    try:
        entries = list(jsonl_records(path))
    except ValueError as error:
        raise RankError(str(error)) from None
    for number, entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("code"), str):
            raise RankError(f'{path}:{number}: a variant is an object with "code" (and "name", "language", "problem")')
        language = entry.get("language", "cuda")
        if language not in _JSONL_SUFFIX:
            raise RankError(f"{path}:{number}: language must be one of {', '.join(_JSONL_SUFFIX)}, got {language!r}")
        problem = entry.get("problem")
        if problem is not None and not isinstance(problem, dict):
            raise RankError(f'{path}:{number}: "problem" must be an object of sizes, e.g. {{"N": 4096}}')
        launch = entry.get("launch")
        if launch is not None and not isinstance(launch, str):
            raise RankError(f'{path}:{number}: "launch" is the text of a launch pragma, e.g. "grid=(cdiv(N, 256)) block=(256) args=(...)"')
        code = entry["code"] if launch is None else f"{'//' if language == 'cuda' else '#'} kernelcast: launch {launch}\n{entry['code']}"
        name = str(entry.get("name") or f"line{number}")
        if name in names:
            raise RankError(f"{path}:{number}: a second variant named {name!r}")
        names.add(name)
        safe = re.sub(r"[^\w.-]", "_", name)
        variants.append(Variant(name, path.parent.resolve() / f"{safe}{_JSONL_SUFFIX[language]}", code, problem))
    if not variants:
        raise RankError(f"no variants: {path} has no lines")
    return variants


def reference_option(reference: str | None) -> str | None:
    """--reference as an absolute path[::kernel] (variants live in other folders), or why not."""
    if not reference:
        return None
    path_text, separator, kernel = reference.partition("::")
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise RankError(f"--reference {reference}: no such file {path}")
    return f"{path}{separator}{kernel}"


def analyse(
    variants: list[Variant], reference: str | None, hardware: GpuSpec, kernel: str | None, allow_outside_workspace: bool = False
) -> None:
    """The editor's analysis of each variant; one not rankable gets `skipped` with the reason. The
    reference must lie in a variant's workspace (its git top, else its folder), as `kernelcast
    forecast` and the editor require, unless `allow_outside_workspace`."""
    from kernelcast.references import workspace_root

    settings = Settings(allow_references_outside_workspace=allow_outside_workspace)
    roots: dict[Path, Path | None] = {}
    reference_path = Path(reference.partition("::")[0]) if reference else None
    for variant in variants:
        if variant.skipped:
            continue
        if reference_path is not None and variant.path == reference_path:
            variant.skipped = "is the reference"
            continue
        folder = variant.path.parent
        if folder not in roots:
            roots[folder] = workspace_root(variant.path) if variant.path.exists() else folder
        analysis = analyse_text(variant.path.as_uri(), None, variant.text, variant.path, roots[folder], settings, hardware, reference)
        variant.analysis = analysis
        if analysis.disabled_reason:
            variant.skipped = analysis.disabled_reason
            continue
        results = [r for r in analysis.results if r.part_of is None]
        if kernel is not None:
            meant, _ = kernel_meant(variant.text, str(variant.path), kernel, [r.kernel.name for r in results])
            results = [r for r in results if r.kernel.name == meant]
        if not results:
            variant.skipped = no_kernel_meant(kernel, [k.name for k in analysis.discovery.kernels]) if kernel else "no kernel found"
            continue
        with_reference = [r for r in results if r.reference is not None]
        if not with_reference:
            variant.skipped = results[0].no_reference or "no reference"
        elif with_reference[0].unchanged and _same_launch(analysis, with_reference[0]):
            variant.skipped = "same code and launch as the reference"
        else:
            variant.result = with_reference[0]


def _same_launch(analysis: FileAnalysis, result: KernelResult) -> bool:
    """Whether the variant launches as its reference does: a sweep of block sizes keeps the
    kernel's code and changes only its pragma, and each of those is a variant of its own."""
    assert result.reference is not None
    _, reference = measurement_sides(analysis, result)
    try:
        launch = find_launch_spec(reference["code"], reference["name"], reference["language"]) if reference["name"] else None
    except LaunchSpecError:
        return False
    return launch == result.launch


def _facts_into_cache(text: str, path: str, reference: str | None, hardware: GpuSpec, kernel: str | None) -> None:
    """In a child process: compile one variant's facts into the shared disk cache (the parent
    already checked that its reference may be read)."""
    from kernelcast import paths
    from kernelcast.cache import ResultCache

    variant = Variant(Path(path).name, Path(path), text)
    analyse([variant], reference, hardware, kernel, allow_outside_workspace=True)
    if variant.analysis is not None and variant.result is not None:
        variant.analysis.results = [variant.result]
        fill_facts(variant.analysis, ResultCache(paths.cache_dir()), True, lambda: True)


def attach_facts(variants: list[Variant], reference: str | None, hardware: GpuSpec, kernel: str | None, processes: int) -> None:
    """Compiler facts of every ranked variant, compiled in parallel processes into the disk cache
    (where the editor finds them too), then read back here."""
    from kernelcast import paths
    from kernelcast.cache import ResultCache

    ranked = [v for v in variants if v.result is not None]
    in_pool = processes > 1 and len(ranked) > 1
    if in_pool:
        with ProcessPoolExecutor(min(processes, len(ranked)), mp_context=get_context("spawn")) as pool:
            jobs = [pool.submit(_facts_into_cache, v.text, str(v.path), reference, hardware, kernel) for v in ranked]
            for job in jobs:
                job.result()
    cache = ResultCache(paths.cache_dir())
    for variant in ranked:
        assert variant.analysis is not None
        variant.analysis.results = [variant.result]  # type: ignore[list-item]
        fill_facts(variant.analysis, cache, not in_pool, lambda: True)


def forecast_all(variants: list[Variant], forecaster: Any, threshold: float) -> None:
    """Forecast every ranked variant in one batch call of the forecaster."""
    ranked = [v for v in variants if v.result is not None]
    for variant in ranked:
        assert variant.analysis is not None and variant.result is not None
        problem = problem_sizes(variant.result, variant.analysis.path, variant.analysis.path.parent)
        if variant.problem:
            problem = {**(problem or {}), **variant.problem}
        variant.request = build_request(variant.analysis, variant.result, problem, threshold)
    for variant, forecast in zip(ranked, forecaster.forecast_many([v.request for v in ranked])):
        variant.forecast = forecast
