"""The per-file task: analyse, answer from cache at once, forecast the rest, publish.

A slow configured backend (an LLM, or `combined` waiting for one) is asked once, on the
final inputs (compiler facts included); until it answers, the embedded forecaster's
forecast is shown, marked as waiting. Results for a text that changed meanwhile are
dropped; forecasts taking longer than 300 ms report `$/progress`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable

from lsprotocol import types

from kernelcast.analysis import FileAnalysis, analyse_text, fill_facts
from kernelcast.server import diagnostics
from kernelcast.server.forecasts import fill_forecasts
from kernelcast.server.state import KernelcastServer

logger = logging.getLogger(__name__)

PROGRESS_AFTER_S = 0.3
# Compiles take a second or more and cannot be stopped once started: they get a thread of
# their own, so the analysis of the next keystroke never queues behind them in asyncio's
# default pool (six threads on two cores, all of them compiling while someone types).
_COMPILES = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernelcast-compile")


async def analyse_and_forecast(ls: KernelcastServer, uri: str) -> None:
    document = ls.document(uri)
    if document is None:
        return
    text, version = document.source, document.version
    path = ls.path_of(uri)
    root = ls.workspace_root()
    settings = ls.settings
    hardware, hardware_problem = await asyncio.to_thread(ls.hardware, path)

    def is_current() -> bool:
        live = ls.document(uri)
        return live is not None and live.version == version

    analysis = await asyncio.to_thread(analyse_text, uri, version, text, path, root, settings, hardware)
    if hardware_problem:
        analysis.problems.append(hardware_problem)
    if not is_current():
        return
    ls.send_status()
    if analysis.disabled_reason is not None:
        _publish(ls, analysis)
        return
    stand_in = await ls.client.stand_in() if _needs_forecasts(analysis) else None
    if settings.compiler_facts:
        # First what the caches know (instant on reopen), then compile what they do not.
        await asyncio.to_thread(fill_facts, analysis, ls.cache, False, is_current)
    await _forecast_and_publish(ls, analysis, is_current, stand_in)
    if settings.compiler_facts and is_current():
        compiled = await asyncio.get_running_loop().run_in_executor(_COMPILES, fill_facts, analysis, ls.cache, True, is_current)
        if compiled:
            await _forecast_and_publish(ls, analysis, is_current, stand_in)
    if any(result.stands_in_for for result in analysis.results) and is_current():
        await _forecast_and_publish(ls, analysis, is_current)


def _needs_forecasts(analysis: FileAnalysis) -> bool:
    return any(r.reference and not r.unchanged for r in analysis.results)


async def _forecast_and_publish(
    ls: KernelcastServer, analysis: FileAnalysis, is_current: Callable[[], bool], stand_in: str | None = None
) -> None:
    path = ls.path_of(analysis.uri)
    if _needs_forecasts(analysis):
        async with _progress_if_slow(ls, f"forecasting {path.name}"):
            await fill_forecasts(analysis, path, ls.workspace_root(), ls.settings, ls.cache, ls.client, is_current, stand_in)
    if not is_current():
        return
    problems = (r.unavailable or r.stand_in_failure for r in analysis.results)
    ls.last_error = next((problem for problem in problems if problem), None)
    _publish(ls, analysis)


def publish_again(ls: KernelcastServer, analysis: FileAnalysis) -> None:
    """Show a changed result of the current text (e.g. a new measurement) at once."""
    if ls.current_analysis(analysis.uri) is analysis:
        _publish(ls, analysis)


def _publish(ls: KernelcastServer, analysis: FileAnalysis) -> None:
    ls.analyses[analysis.uri] = analysis
    diagnostics.publish(ls, analysis)
    ls.report_cache_problems()
    if _client_refreshes_inlay_hints(ls):
        ls.workspace_inlay_hint_refresh(None)
    ls.send_status()


def _client_refreshes_inlay_hints(ls: KernelcastServer) -> bool:
    workspace = ls.client_capabilities.workspace
    return bool(workspace and workspace.inlay_hint and workspace.inlay_hint.refresh_support)


@contextlib.asynccontextmanager
async def _progress_if_slow(ls: KernelcastServer, title: str) -> AsyncIterator[None]:
    """Begin a `$/progress` only once the work has taken longer than 300 ms."""
    token = f"kernelcast-{uuid.uuid4()}"
    started = asyncio.Event()

    async def begin_later() -> None:
        await asyncio.sleep(PROGRESS_AFTER_S)
        window = ls.client_capabilities.window
        if not (window and window.work_done_progress):
            return
        # Shielded: if this task is cancelled (a newer edit), the client's answer must
        # still find its request pending rather than a cancelled future.
        await asyncio.shield(ls.work_done_progress.create_async(token))
        ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=title, cancellable=False))
        started.set()

    starter = asyncio.create_task(begin_later())
    try:
        yield
    finally:
        starter.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await starter
        if started.is_set():
            ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message="done"))
        ls.work_done_progress.tokens.pop(token, None)  # pygls keeps every token otherwise
