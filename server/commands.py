"""workspace/executeCommand handlers: measure, set reference, clear cache."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from typing import Any

from lsprotocol import types

from kernelcast.analysis import KernelResult, build_request, measured_on, measurement_key, measurement_sides, problem_sizes
from kernelcast.references import NoReference, pragma_reference
from kernelcast.server.code_actions import set_reference_edit
from kernelcast.server.file_task import publish_again
from kernelcast.server.service_client import ForecasterUnavailable
from kernelcast.server.state import KernelcastServer
from kernelcast.wire import ForecastRequest, Measurement

logger = logging.getLogger(__name__)
# Learning runs after `measure` has answered; its tasks are kept here until done so none is collected midway.
_LEARNING: set[asyncio.Task[None]] = set()


def _target(ls: KernelcastServer, arguments: list[Any]) -> tuple[str, KernelResult] | str:
    """The (uri, kernel result) a command names, or a readable reason why there is none."""
    expected = "expected one argument {uri, position: {line, character}} or {uri, kernel}"
    argument = arguments[0] if arguments and isinstance(arguments[0], dict) else {}
    uri, position = argument.get("uri"), argument.get("position")
    line = position.get("line") if isinstance(position, dict) else None
    if not isinstance(uri, str) or not (isinstance(argument.get("kernel"), str) or isinstance(line, int)):
        return expected
    analysis = ls.current_analysis(uri)
    if analysis is None:
        return "this file has not been analysed yet; try again in a moment"
    if isinstance(argument.get("kernel"), str):
        found = next((r for r in analysis.results if r.kernel.name == argument["kernel"]), None)
    else:
        found = analysis.result_at(line)
    if found is None:
        return "no kernel at that position"
    return uri, found


async def measure(ls: KernelcastServer, arguments: list[Any]) -> dict[str, Any]:
    """Compile, check and time the kernel against its reference on the local GPU."""
    target = _target(ls, arguments)
    if isinstance(target, str):
        ls.show_message(f"Measure on GPU: {target}", types.MessageType.Warning)
        return {"ok": False, "message": target}
    uri, result = target
    analysis = ls.current_analysis(uri)
    assert analysis is not None
    if result.reference is None:
        message = f"Measure on GPU: {result.kernel.name} has no reference to compare with ({result.no_reference})"
        ls.show_message(message, types.MessageType.Warning)
        return {"ok": False, "message": message}
    from kernelcast.kernels_runtime.measure import Timeouts, measure_pair  # the GPU runtime, only when asked

    candidate, reference = measurement_sides(analysis, result)
    loop = asyncio.get_running_loop()
    cancel = threading.Event()
    token = f"kernelcast-measure-{uuid.uuid4()}"
    await ls.work_done_progress.create_async(token)
    ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=f"Measuring {result.kernel.name}", cancellable=True, percentage=0))
    ls.work_done_progress.tokens[token].add_done_callback(lambda future: cancel.set() if future.cancelled() else None)

    def report(text: str, percent: float) -> None:
        loop.call_soon_threadsafe(
            ls.work_done_progress.report, token, types.WorkDoneProgressReport(message=text, percentage=max(0, min(100, int(percent))))
        )

    ls.measuring += 1
    ls.send_status(f"measuring {result.kernel.name}")
    try:
        timeouts = Timeouts(kernel_s=ls.settings.measure_kernel_timeout_ms / 1000)
        outcome = await asyncio.to_thread(
            measure_pair, candidate, reference, None, 0, report, cancel, timeouts=timeouts, tolerance=ls.settings.measure_tolerance
        )
    finally:
        ls.measuring -= 1
        ls.work_done_progress.end(token, types.WorkDoneProgressEnd())
        ls.work_done_progress.tokens.pop(token, None)
        ls.send_status()
    if not isinstance(outcome, Measurement):
        ls.show_message(f"Measure {result.kernel.name}: {outcome.message}", types.MessageType.Warning)
        return {"ok": False, "kind": outcome.kind, "message": outcome.message}
    problem = problem_sizes(result, analysis.path, ls.workspace_root())
    store_measurement(ls, analysis, result, outcome, candidate, reference, problem)
    result.measurement = outcome
    publish_again(ls, analysis)
    ls.show_message(f"{result.kernel.name}: {outcome.message()}")
    assert analysis.hardware is not None
    if measured_on(outcome, analysis.hardware):
        _learn_in_background(ls, build_request(analysis, result, problem, ls.settings.confidence_threshold), outcome.speedup)
    else:
        logger.info("not learning from %s: measured on %s, forecasts are for %s", result.kernel.name, outcome.gpu, analysis.hardware.key)
    return {"ok": True, "measurement": outcome.to_json()}


def store_measurement(
    ls: KernelcastServer,
    analysis: Any,
    result: KernelResult,
    outcome: Measurement,
    candidate: dict[str, Any],
    reference: dict[str, Any],
    problem: dict[str, Any] | None,
) -> None:
    """Keep the result for this exact pair, and a labelled example for calibration."""
    assert analysis.hardware is not None and result.reference is not None
    at = time.time()
    ls.cache.put(measurement_key(result.kernel, result.reference, problem, analysis.hardware), {"measurement": outcome.to_json(), "at": at})
    ls.cache.put(
        f"measured-pair:{at:.6f}:{uuid.uuid4().hex[:8]}",
        {"candidate": candidate, "reference": reference, "problem": problem, "measurement": outcome.to_json(), "at": at},
    )


def _learn_in_background(ls: KernelcastServer, request: ForecastRequest, speedup: float) -> None:
    """Teach the forecaster the measured pair without holding up or failing the measurement."""
    task = asyncio.create_task(_learn(ls, request, speedup))
    _LEARNING.add(task)
    task.add_done_callback(_LEARNING.discard)


async def _learn(ls: KernelcastServer, request: ForecastRequest, speedup: float) -> None:
    try:
        learned = await ls.client.learn(request, speedup)
    except (ForecasterUnavailable, OSError) as error:
        logger.warning("local learning skipped: %s", error)
        return
    logger.info("local learning: %s", learned)
    _analyse_open_files(ls)  # every forecast on this GPU class now has another calibration


def _analyse_open_files(ls: KernelcastServer) -> None:
    if ls.scheduler is not None:
        for uri in ls.open_uris():
            ls.scheduler.schedule(uri, 0)


async def set_reference(ls: KernelcastServer, arguments: list[Any]) -> dict[str, Any]:
    target = _target(ls, arguments)
    reference = arguments[0].get("reference") if arguments and isinstance(arguments[0], dict) else None
    if isinstance(target, str) or not isinstance(reference, str) or not reference.strip():
        why = target if isinstance(target, str) else "expected a non-empty 'reference' (path[::kernel])"
        ls.show_message(f"Set reference: {why}", types.MessageType.Warning)
        return {"ok": False, "message": why}
    uri, result = target
    analysis = ls.current_analysis(uri)
    assert analysis is not None
    reference = reference.strip()
    found = pragma_reference(
        reference,
        result.kernel,
        analysis.discovery,
        ls.path_of(uri),
        ls.workspace_root(),
        ls.settings.allow_references_outside_workspace,
    )
    if isinstance(found, NoReference):  # a typo must not become a pragma that fails on every keystroke
        ls.show_message(f"Set reference: {found.reason}", types.MessageType.Warning)
        return {"ok": False, "message": found.reason}
    applied = await ls.workspace_apply_edit_async(
        types.ApplyWorkspaceEditParams(edit=set_reference_edit(analysis, reference), label="kernelcast: set reference")
    )
    return {"ok": bool(applied.applied), "message": applied.failure_reason or ""}


async def clear_cache(ls: KernelcastServer, arguments: list[Any]) -> dict[str, Any]:
    removed = ls.cache.clear()
    ls.analyses.clear()
    _analyse_open_files(ls)
    ls.show_message(f"kernelcast cache cleared ({removed} entries)")
    return {"ok": True, "removed": removed}
