"""Inlay hints: the short verdict at the end of each kernel's signature."""

from __future__ import annotations

from lsprotocol import types

from kernelcast.server.positions import to_position
from kernelcast.server.state import KernelcastServer
from kernelcast.server.verdicts import verdict

MEASURE_WORD = "measure?"


def inlay_hints(ls: KernelcastServer, params: types.InlayHintParams) -> list[types.InlayHint]:
    if not (ls.settings.enable and ls.settings.inlay_hints):
        return []
    analysis = ls.current_analysis(params.text_document.uri)
    if analysis is None:
        return []
    hints: list[types.InlayHint] = []
    for result in analysis.results:
        shown = verdict(result)
        signature = result.kernel.signature
        if shown is None or not (params.range.start.line <= signature.end_line <= params.range.end.line):
            continue
        position = to_position(ls.codec, analysis.lines, signature.end_line, signature.end_col)
        hints.append(
            types.InlayHint(
                position=position,
                label=_label_parts(shown.label, params.text_document.uri, position),
                kind=None,
                padding_left=True,
                tooltip=shown.message,
            )
        )
    return hints


def _label_parts(label: str, uri: str, position: types.Position) -> list[types.InlayHintLabelPart]:
    """The `measure?` word becomes a clickable part that runs the measure command."""
    if not label.endswith(MEASURE_WORD):
        return [types.InlayHintLabelPart(value=label)]
    return [
        types.InlayHintLabelPart(value=label[: -len(MEASURE_WORD)]),
        types.InlayHintLabelPart(
            value=MEASURE_WORD,
            tooltip="Compile and time this kernel against its reference on the local GPU",
            command=types.Command(
                title="Measure on GPU",
                command="kernelcast.measure",
                arguments=[{"uri": uri, "position": {"line": position.line, "character": position.character}}],
            ),
        ),
    ]
