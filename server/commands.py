"""workspace/executeCommand handlers: measure, set reference, clear cache."""

from __future__ import annotations

from typing import Any

from lsprotocol import types

from kernelcast.server.analysis import KernelResult
from kernelcast.server.code_actions import set_reference_edit
from kernelcast.server.state import KernelcastServer


def _target(ls: KernelcastServer, arguments: list[Any]) -> tuple[str, KernelResult] | str:
    """The (uri, kernel result) a command names, or a readable reason why there is none."""
    if not arguments or not isinstance(arguments[0], dict) or "uri" not in arguments[0]:
        return "expected one argument {uri, position} or {uri, kernel}"
    argument = arguments[0]
    uri = argument["uri"]
    analysis = ls.current_analysis(uri)
    if analysis is None:
        return "this file has not been analysed yet; try again in a moment"
    if "kernel" in argument:
        found = next((r for r in analysis.results if r.kernel.name == argument["kernel"]), None)
    else:
        line = int((argument.get("position") or {}).get("line", -1))
        found = analysis.result_at(line)
    if found is None:
        return "no kernel at that position"
    return uri, found


async def measure(ls: KernelcastServer, arguments: list[Any]) -> dict[str, Any]:
    target = _target(ls, arguments)
    if isinstance(target, str):
        ls.show_message(f"Measure on GPU: {target}", types.MessageType.Warning)
        return {"ok": False, "message": target}
    _, result = target
    message = (
        f"Measure on GPU is not available in this build for {result.kernel.name}: "
        "the measurement runtime (kernels_runtime.measure) has not landed yet"
    )
    ls.show_message(message, types.MessageType.Warning)
    return {"ok": False, "message": message}


async def set_reference(ls: KernelcastServer, arguments: list[Any]) -> dict[str, Any]:
    target = _target(ls, arguments)
    reference = arguments[0].get("reference") if arguments and isinstance(arguments[0], dict) else None
    if isinstance(target, str) or not isinstance(reference, str) or not reference.strip():
        why = target if isinstance(target, str) else "expected a non-empty 'reference' (path[::kernel])"
        ls.show_message(f"Set reference: {why}", types.MessageType.Warning)
        return {"ok": False, "message": why}
    uri, _ = target
    analysis = ls.current_analysis(uri)
    assert analysis is not None
    applied = await ls.workspace_apply_edit_async(
        types.ApplyWorkspaceEditParams(edit=set_reference_edit(analysis, reference.strip()), label="kernelcast: set reference")
    )
    return {"ok": bool(applied.applied), "message": applied.failure_reason or ""}


async def clear_cache(ls: KernelcastServer, arguments: list[Any]) -> dict[str, Any]:
    removed = ls.cache.clear()
    ls.analyses.clear()
    for uri in list(ls.workspace.text_documents):
        ls.scheduler.schedule(uri, 0) if ls.scheduler else None
    ls.show_message(f"kernelcast cache cleared ({removed} entries)")
    return {"ok": True, "removed": removed}
