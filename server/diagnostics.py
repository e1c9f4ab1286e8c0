"""Pushed diagnostics (neovim does not re-pull on refresh): one per kernel, plus file problems."""

from __future__ import annotations

from lsprotocol import types

from kernelcast.analysis import FileAnalysis, KernelResult
from kernelcast.server.positions import to_range
from kernelcast.server.state import KernelcastServer
from kernelcast.server.verdicts import verdict

SOURCE = "kernelcast"


def build_diagnostics(ls: KernelcastServer, analysis: FileAnalysis) -> list[types.Diagnostic]:
    settings = ls.settings
    if not settings.enable or not settings.diagnostics:
        return []
    diagnostics: list[types.Diagnostic] = []
    file_start = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0))
    for problem in analysis.problems:
        diagnostics.append(
            types.Diagnostic(range=file_start, message=problem, severity=types.DiagnosticSeverity.Hint, source=SOURCE, code="file")
        )
    if analysis.disabled_reason is not None:
        return diagnostics
    for result in analysis.results:
        shown = verdict(result)
        if shown is None or shown.code == "unchanged":
            continue
        diagnostics.append(
            types.Diagnostic(
                range=to_range(ls.codec, analysis.lines, result.kernel.signature),
                message=f"{result.kernel.name}: {shown.message}",
                severity=types.DiagnosticSeverity.Information if shown.notable else types.DiagnosticSeverity.Hint,
                source=SOURCE,
                code=shown.code,
                data=_data(result, shown.code),
            )
        )
        for problem in result.facts.hint_problems() if result.facts else []:
            diagnostics.append(
                types.Diagnostic(
                    range=to_range(ls.codec, analysis.lines, result.kernel.signature),
                    message=f"{result.kernel.name}: {problem}",
                    severity=types.DiagnosticSeverity.Hint,
                    source=SOURCE,
                    code="facts",
                )
            )
    return diagnostics


def _data(result: KernelResult, code: str) -> dict[str, str]:
    """The kernel, and for a forecast the backend that made it (the embedded one while an LLM works)."""
    data = {"kernel": result.kernel.name}
    if code in ("forecast", "uncertain") and result.forecast is not None:
        data["backend"] = str(result.forecast.provenance.get("backend", ""))
    return data


def publish(ls: KernelcastServer, analysis: FileAnalysis) -> None:
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=analysis.uri, version=analysis.version, diagnostics=build_diagnostics(ls, analysis))
    )


def clear(ls: KernelcastServer, uri: str) -> None:
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
