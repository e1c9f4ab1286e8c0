"""Answer each analysed kernel from the cache or the forecaster service.

The per-file task (file_task.py) calls `fill_forecasts` after kernelcast.analysis has built the
requests; a backend that batches gets a file's kernels in a few calls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from kernelcast.analysis import FileAnalysis, KernelResult, build_request, forecast_key, measurement_key, problem_sizes
from kernelcast.cache import ResultCache
from kernelcast.server.service_client import STAND_IN_TIMEOUT_S, BackendInfo, ForecasterClient, ForecasterUnavailable
from kernelcast.settings import Settings
from kernelcast.wire import Forecast, ForecastRequest, Measurement

logger = logging.getLogger(__name__)

# Forecasts asked in one call of a backend that batches (the service takes up to 256).
FORECAST_BATCH = 64


# A kernel whose forecast is not cached, its request, and the cache key of its forecast.
Pending = tuple[KernelResult, ForecastRequest, str]


async def fill_forecasts(
    analysis: FileAnalysis,
    path: Path,
    workspace_root: Path | None,
    settings: Settings,
    cache: ResultCache,
    client: ForecasterClient,
    is_current: Callable[[], bool],
    stand_in: str | None = None,
) -> int:
    """Answer every kernel from cache or forecaster; returns how many the forecaster computed.

    With `stand_in` (a fast backend), a kernel whose configured backend's forecast is not
    cached gets the stand-in's, marked as waiting; a later call without it replaces those
    with the configured backend's, or keeps them and says why it did not answer. Each
    backend's forecast is cached under its own key (the backend is part of it), so a
    stand-in never shadows the configured backend's answer.
    """
    assert analysis.hardware is not None
    hardware = analysis.hardware
    backend: BackendInfo | None = None
    missing: list[Pending] = []
    for result in analysis.results:
        if result.reference is None or result.unchanged:
            continue
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
        request = build_request(analysis, result, problem, settings.confidence_threshold)
        key = forecast_key(request, backend)
        if not _show_cached(result, cache, key, settings.confidence_threshold):
            missing.append((result, request, key))
    if backend is None or not missing:
        return 0
    if stand_in is not None:
        return await _stand_in_forecasts(missing, stand_in, cache, client, is_current)
    computed = 0
    async for result, key, answer in _forecasts(missing, client, backend, None, is_current):
        if isinstance(answer, Forecast):
            _show_computed(result, cache, key, answer)
            computed += 1
        elif result.stands_in_for is not None and result.forecast is not None:
            result.stand_in_failure = str(answer)
        else:
            result.unavailable, result.stands_in_for = str(answer), None
    return computed


async def _stand_in_forecasts(
    missing: list[Pending], stand_in: str, cache: ResultCache, client: ForecasterClient, is_current: Callable[[], bool]
) -> int:
    """Show the stand-in's forecasts (cached, or within its short deadline) until the configured
    backend answers; how many were computed. A stand-in that cannot answer shows nothing new."""
    computed = 0
    try:
        info = await client.backend_info(stand_in)
        keyed = [(result, request, forecast_key(request, info)) for result, request, _ in missing]
        uncached = [(result, request, key) for result, request, key in keyed if not _show_cached(result, cache, key, request.threshold)]
        async for result, key, answer in _forecasts(uncached, client, info, STAND_IN_TIMEOUT_S, is_current):
            if isinstance(answer, ForecasterUnavailable):
                raise answer
            _show_computed(result, cache, key, answer)
            computed += 1
    except ForecasterUnavailable as error:
        logger.info("%s could not stand in for %s: %s", stand_in, client.backend, error)
    for result, _, _ in missing:
        result.stands_in_for = client.backend
    return computed


async def _forecasts(
    pending: list[Pending], client: ForecasterClient, backend: BackendInfo, timeout_s: float | None, is_current: Callable[[], bool]
) -> AsyncIterator[tuple[KernelResult, str, Forecast | ForecasterUnavailable]]:
    """Each pending kernel with its forecast from `backend`, or why there is none.

    A backend that batches gets up to FORECAST_BATCH requests a call, so a file's hundred
    kernels cost one round trip and one matrix product; any other (an LLM, or a service started
    by an older kernelcast, which has no batch route) gets one at a time, each within its deadline.
    Stops (cancelled) as soon as the text changes.
    """
    size = FORECAST_BATCH if backend.batches else 1
    for start in range(0, len(pending), size):
        if not is_current():
            raise asyncio.CancelledError()
        chunk = pending[start : start + size]
        requests = [request for _, request, _ in chunk]
        answers: list[Forecast | ForecasterUnavailable]
        try:
            if backend.batches:
                answers = list(await client.forecast_many(requests, backend.name, timeout_s))
            else:
                answers = [await client.forecast(requests[0], backend.name, timeout_s)]
        except ForecasterUnavailable as error:
            answers = [error] * len(chunk)
        for (result, _, key), answer in zip(chunk, answers):
            yield result, key, answer


def _show_cached(result: KernelResult, cache: ResultCache, key: str, threshold: float) -> bool:
    stored = cache.get(key)
    if stored:
        _show(result, Forecast.from_json(stored["forecast"]).with_threshold(threshold), stored["at"], from_cache=True)
    return bool(stored)


def _show_computed(result: KernelResult, cache: ResultCache, key: str, forecast: Forecast) -> None:
    _show(result, forecast, time.time(), from_cache=False)
    cache.put(key, {"forecast": forecast.to_json(), "at": result.computed_at})


def _show(result: KernelResult, forecast: Forecast, at: float, from_cache: bool) -> None:
    result.forecast, result.computed_at, result.from_cache = forecast, at, from_cache
    result.unavailable = result.stands_in_for = result.stand_in_failure = None
