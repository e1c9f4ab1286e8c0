"""Code actions on a kernel: "Measure on GPU" and, without a reference, "Set reference…" to files that have one."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from kernelcast.analysis import FileAnalysis, KernelResult
from kernelcast.kernels_runtime.source.host_launch import proposed_pragma
from kernelcast.references import Reference, pragma_line, pragma_reference
from kernelcast.server.state import KernelcastServer

KERNEL_SUFFIXES = (".cu", ".cuh", ".py")
# Files read (discovery, cached by mtime) per code action request in a crowded folder.
MAX_CANDIDATE_FILES = 50


def code_actions(ls: KernelcastServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    if not (ls.settings.enable and ls.settings.code_actions):
        return []
    uri = params.text_document.uri
    analysis = ls.current_analysis(uri)
    if analysis is None:
        return []
    result = analysis.result_at(params.range.start.line)
    if result is None:
        return []
    position = {"line": params.range.start.line, "character": params.range.start.character}
    related = [d for d in params.context.diagnostics if d.source == "kernelcast"]
    actions: list[types.CodeAction] = []
    if result.reference is not None and result.launch is None and analysis.discovery.kind != "kernelbench":
        actions.append(_launch_template_action(analysis, result, related))
    if result.reference is not None:
        actions.append(
            types.CodeAction(
                title=f"Measure {result.kernel.name} on GPU",
                kind=types.CodeActionKind.QuickFix,
                diagnostics=related or None,
                command=types.Command(title="Measure on GPU", command="kernelcast.measure", arguments=[{"uri": uri, "position": position}]),
            )
        )
    else:
        actions.extend(_set_reference_actions(ls, analysis, result, related))
    return actions


def _launch_template_action(analysis: FileAnalysis, result: KernelResult, related: list[types.Diagnostic]) -> types.CodeAction:
    """Measuring needs grid, block and arguments: insert a pragma to fill in above the kernel."""
    kernel = result.kernel
    template = proposed_pragma(analysis.text, kernel.name, kernel.language, result.host_launch)
    line = kernel.body.start_line  # the body span starts at decorators / template lines
    indent = analysis.lines[line][: len(analysis.lines[line]) - len(analysis.lines[line].lstrip())]
    start = types.Position(line=line, character=0)
    edit = types.TextEdit(range=types.Range(start=start, end=start), new_text=f"{indent}{template}\n")
    return types.CodeAction(
        title=f"Add a launch spec for {kernel.name} (needed to measure it)",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=related or None,
        edit=types.WorkspaceEdit(changes={analysis.uri: [edit]}),
    )


def _set_reference_actions(
    ls: KernelcastServer, analysis: FileAnalysis, result: KernelResult, related: list[types.Diagnostic]
) -> list[types.CodeAction]:
    """One action per kernel file beside this one that would resolve as its reference."""
    return [
        types.CodeAction(
            title=f"Set reference… {target}",
            kind=types.CodeActionKind.QuickFix,
            diagnostics=related or None,
            edit=set_reference_edit(analysis, target),
        )
        for target in _reference_targets(ls, analysis, result)
    ]


def _reference_targets(ls: KernelcastServer, analysis: FileAnalysis, result: KernelResult, limit: int = 3) -> list[str]:
    """Pragma values that resolve for this kernel, checked the way the pragma will be read:
    `file::name` where that file defines the kernel's name (listed first), else the file alone
    where it resolves by itself (its only kernel, or its KernelBench Model)."""
    path = ls.path_of(analysis.uri)
    root, allow_outside = ls.workspace_root(), ls.settings.allow_references_outside_workspace

    def resolves(spec: str) -> bool:
        return isinstance(pragma_reference(spec, result.kernel, analysis.discovery, path, root, allow_outside), Reference)

    same_name, whole_file = [], []
    for candidate in _sibling_kernel_files(path)[:MAX_CANDIDATE_FILES]:
        named = f"{candidate.name}::{result.kernel.name}"
        if resolves(named):
            same_name.append(named)
        elif resolves(candidate.name):
            whole_file.append(candidate.name)
    return (same_name + whole_file)[:limit]


def set_reference_edit(analysis: FileAnalysis, reference: str) -> types.WorkspaceEdit:
    """Insert the reference pragma as the file's first line (after a shebang or coding line)."""
    language = "python" if analysis.uri.endswith(".py") else "cuda"
    line = 0
    for index, text in enumerate(analysis.lines[:2]):
        if text.startswith("#!") or "coding" in text and text.startswith("#"):
            line = index + 1
    start = types.Position(line=line, character=0)
    edit = types.TextEdit(range=types.Range(start=start, end=start), new_text=pragma_line(language, reference) + "\n")
    return types.WorkspaceEdit(changes={analysis.uri: [edit]})


def _sibling_kernel_files(path: Path) -> list[Path]:
    try:
        siblings = sorted(p for p in path.parent.iterdir() if p.suffix in KERNEL_SUFFIXES and p != path and p.is_file())
    except OSError:
        return []
    return siblings
