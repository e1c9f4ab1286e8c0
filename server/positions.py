"""Spans from discovery (code points) into LSP ranges in the client's encoding."""

from __future__ import annotations

from collections.abc import Sequence

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec, ServerTextPosition

from kernelcast.kernels_runtime.source.discovery import Span


def to_position(codec: PositionCodec, lines: Sequence[str], line: int, column: int) -> types.Position:
    return codec.position_to_client_units(lines, ServerTextPosition(line, column))


def to_range(codec: PositionCodec, lines: Sequence[str], span: Span) -> types.Range:
    return types.Range(
        start=to_position(codec, lines, span.start_line, span.start_col),
        end=to_position(codec, lines, span.end_line, span.end_col),
    )
