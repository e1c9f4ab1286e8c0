"""The words a kernel's result is shown with, shared by inlay hints, diagnostics and hover."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernelcast.analysis import KernelResult

# Speedups within ±10% are not worth an Information diagnostic.
NOTABLE_LOG2 = math.log2(1.1)


@dataclass(frozen=True)
class Verdict:
    label: str  # inlay hint, ≤ 30 characters
    message: str  # diagnostic text
    notable: bool  # confident and far enough from 1× to deserve Information severity
    code: str  # diagnostic code: forecast | measured | uncertain | no-reference | unavailable | unchanged


def verdict(result: KernelResult) -> Verdict | None:
    if result.part_of is not None:
        return None  # its forecast is the one at `class ModelNew`
    if result.measurement is not None:
        m = result.measurement
        return Verdict(m.inlay_label(), m.message(), abs(math.log2(m.speedup)) >= NOTABLE_LOG2, "measured")
    if result.no_reference is not None:
        return Verdict("⏱ no reference · set one?", result.no_reference, False, "no-reference")
    if result.unchanged:
        return Verdict("⏱ same as reference", "same code as the reference: no change expected", False, "unchanged")
    if result.unavailable is not None:
        return Verdict("⏱ forecaster unavailable", result.unavailable, False, "unavailable")
    forecast = result.forecast
    if forecast is None:
        return None
    message = forecast.message() + _stand_in_words(result)
    if forecast.defer:
        return Verdict(forecast.inlay_label(), message, False, "uncertain")
    notable = abs(math.log2(forecast.speedup)) >= NOTABLE_LOG2
    return Verdict(forecast.inlay_label(), message, notable, "forecast")


def _stand_in_words(result: KernelResult) -> str:
    """` (embedded; waiting for llama-cpp)` after a forecast shown in place of the configured backend's."""
    if result.stands_in_for is None or result.forecast is None:
        return ""
    shown = result.forecast.provenance.get("backend", "?")
    if result.stand_in_failure is not None:
        return f" ({shown}; {result.stands_in_for} did not answer)"
    return f" ({shown}; waiting for {result.stands_in_for})"
