"""One file's way from text to results: discover kernels, find their references,
then answer each pair from the cache or the forecaster.

Runs in the per-file background task (scheduler.py); the LSP handlers only read
the finished FileAnalysis, so no handler ever waits on a forecast.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernelcast.forecast import Forecast, ForecastRequest, KernelSide, Measurement
from kernelcast.kernels_runtime.discovery import DiscoveredKernel, Discovery, discover, normalise_code
from kernelcast.kernels_runtime.hardware import GpuSpec
from kernelcast.kernels_runtime.project_config import load_project_config
from kernelcast.kernels_runtime.references import NoReference, Reference, resolve_reference
from kernelcast.server.cache import ResultCache, content_key
from kernelcast.server.forecaster_client import ForecasterClient, ForecasterUnavailable
from kernelcast.server.settings import Settings


@dataclass
class KernelResult:
    kernel: DiscoveredKernel
    reference: Reference | None = None
    no_reference: str | None = None
    forecast: Forecast | None = None
    measurement: Measurement | None = None
    unavailable: str | None = None  # why the forecaster gave no answer
    unchanged: bool = False  # candidate's code equals the reference's
    cache_key: str | None = None
    computed_at: float | None = None
    from_cache: bool = False


@dataclass
class FileAnalysis:
    uri: str
    version: int | None
    text: str
    discovery: Discovery
    results: list[KernelResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    disabled_reason: str | None = None  # `kernelcast: off`, excluded, …
    hardware: GpuSpec | None = None

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines(keepends=True) or [""]

    def result_at(self, line: int) -> KernelResult | None:
        """The kernel whose definition spans `line` (innermost first)."""
        matches = [r for r in self.results if r.kernel.body.start_line <= line <= r.kernel.body.end_line]
        return min(matches, key=lambda r: r.kernel.body.end_line - r.kernel.body.start_line, default=None)


def forecast_key(kernel: DiscoveredKernel, reference: Reference, problem: dict[str, Any] | None, hardware: GpuSpec, backend: Any) -> str:
    return content_key(
        "forecast",
        {
            "candidate": normalise_code(kernel.code, kernel.language),
            "reference": normalise_code(reference.code, reference.language),
            "languages": [kernel.language, reference.language],
            "problem": problem or {},
            "hardware": hardware.fingerprint(),
            "backend": [backend.name, backend.model_id, backend.version, backend.calibration_version],
        },
    )


def measurement_key(kernel: DiscoveredKernel, reference: Reference, problem: dict[str, Any] | None, hardware: GpuSpec) -> str:
    return content_key(
        "measurement",
        {
            "candidate": normalise_code(kernel.code, kernel.language),
            "reference": normalise_code(reference.code, reference.language),
            "problem": problem or {},
            "gpu": hardware.fingerprint(),
        },
    )


def analyse_text(uri: str, version: int | None, text: str, path: Path, workspace_root: Path | None, settings: Settings, hardware: GpuSpec) -> FileAnalysis:
    """The static part (no forecaster): kernels, pragmas, references. Safe to run in a thread."""
    discovery = discover(text, str(path))
    analysis = FileAnalysis(uri, version, text, discovery, problems=list(discovery.problems) + list(discovery.pragmas.problems), hardware=hardware)
    if discovery.pragmas.off:
        analysis.disabled_reason = "kernelcast: off in this file"
        return analysis
    if settings.excludes(str(path)):
        analysis.disabled_reason = "excluded by the kernelcast.exclude setting"
        return analysis
    config = load_project_config(path, workspace_root)
    analysis.problems.extend(config.problems)
    for kernel in discovery.kernels:
        result = KernelResult(kernel)
        found = resolve_reference(kernel, discovery, path, workspace_root, config, settings.allow_references_outside_workspace)
        if isinstance(found, NoReference):
            result.no_reference = found.reason
        else:
            result.reference = found
            result.unchanged = normalise_code(kernel.code, kernel.language) == normalise_code(found.code, found.language)
        analysis.results.append(result)
    return analysis


def problem_sizes(result: KernelResult, path: Path, workspace_root: Path | None) -> dict[str, Any] | None:
    config = load_project_config(path, workspace_root)
    sizes = dict(config.problem)
    if result.reference and result.reference.problem:
        sizes.update(result.reference.problem)
    return sizes or None


async def fill_forecasts(
    analysis: FileAnalysis,
    path: Path,
    workspace_root: Path | None,
    settings: Settings,
    cache: ResultCache,
    client: ForecasterClient,
    is_current: Callable[[], bool],
) -> int:
    """Answer every kernel from cache or forecaster; returns how many the forecaster computed."""
    computed = 0
    assert analysis.hardware is not None
    hardware = analysis.hardware
    for result in analysis.results:
        if result.reference is None or result.unchanged:
            continue
        if not is_current():
            raise asyncio.CancelledError()
        problem = problem_sizes(result, path, workspace_root)
        stored = cache.get(measurement_key(result.kernel, result.reference, problem, hardware))
        if stored:
            result.measurement = Measurement.from_json(stored["measurement"])
            result.computed_at = stored["at"]
        try:
            backend = await client.backend_info()
        except ForecasterUnavailable as error:
            result.unavailable = str(error)
            continue
        key = forecast_key(result.kernel, result.reference, problem, hardware, backend)
        result.cache_key = key
        stored = cache.get(key)
        if stored:
            result.forecast = Forecast.from_json(stored["forecast"]).with_threshold(settings.confidence_threshold)
            result.computed_at = stored["at"]
            result.from_cache = True
            continue
        request = ForecastRequest(
            reference=KernelSide(result.reference.code, result.reference.language, result.reference.name),
            candidate=KernelSide(result.kernel.code, result.kernel.language, result.kernel.name),
            hardware={**hardware.to_json(), "fingerprint": hardware.fingerprint()},
            problem=problem,
            threshold=settings.confidence_threshold,
        )
        try:
            result.forecast = await client.forecast(request)
        except ForecasterUnavailable as error:
            result.unavailable = str(error)
            continue
        result.computed_at = time.time()
        computed += 1
        cache.put(key, {"forecast": result.forecast.to_json(), "at": result.computed_at})
    return computed
