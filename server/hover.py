"""Hover on a kernel's signature: the whole forecast, as markdown."""

from __future__ import annotations

import time
from typing import Any

from lsprotocol import types

from kernelcast.analysis import FileAnalysis, KernelResult
from kernelcast.kernels_runtime.cuda_facts import first_error_line
from kernelcast.kernels_runtime.facts import roofline_floor_ms
from kernelcast.kernels_runtime.hardware import GpuSpec
from kernelcast.kernels_runtime.source.host_launch import DEFAULT_ELEMENTS
from kernelcast.kernels_runtime.source.timed_path import GUESSED_TRIPS
from kernelcast.server.state import KernelcastServer
from kernelcast.server.verdicts import verdict
from kernelcast.wire import (
    ASSUMED_CANDIDATE_CONFIG,
    ASSUMED_CANDIDATE_GRID,
    ASSUMED_CANDIDATE_LAUNCH,
    ASSUMED_CANDIDATE_LOOPS,
    ASSUMED_REFERENCE_CONFIG,
    ASSUMED_REFERENCE_GRID,
    ASSUMED_REFERENCE_LAUNCH,
    ASSUMED_REFERENCE_LOOPS,
    ASSUMED_SIZES,
    BIN_WORDS,
    TEMPLATES_OUT_OF_SIGHT,
    Forecast,
)

BAR_WIDTH = 20


def hover(ls: KernelcastServer, params: types.HoverParams) -> types.Hover | None:
    if not (ls.settings.enable and ls.settings.hover):
        return None
    analysis = ls.current_analysis(params.text_document.uri)
    if analysis is None:
        return None
    line = params.position.line
    for result in analysis.results:
        signature = result.kernel.signature
        if signature.start_line <= line <= signature.end_line:
            return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=render(result, analysis)))
    return None


def render(result: KernelResult, analysis: FileAnalysis) -> str:
    shown = verdict(result)
    lines = [f"**kernelcast** · `{result.kernel.name}` ({result.kernel.language})", ""]
    if shown is not None:
        lines += [f"**{shown.message}**", ""]
    if result.reference is not None:
        lines.append(f"Reference: {result.reference.description}")
    if result.problem_model is not None:
        lines.append(f"Inputs: the problem's, from {result.problem_model.description} (KernelBench times both solutions on them)")
    if result.measurement is not None:
        m = result.measurement
        lines.append(
            f"Measured: reference {m.t_reference_ms:.4g} ms, candidate {m.t_candidate_ms:.4g} ms, 95% CI {m.ci95[0]:.3f}–{m.ci95[1]:.3f}×"
        )
    if result.forecast is not None:
        lines += ["", *_forecast_lines(result.forecast)]
    if result.stands_in_for is not None:
        lines += ["", _stand_in_line(result)]
    lines += ["", *_facts_lines(result)]
    if result.launch is not None and analysis.hardware is not None:
        lines += ["", _floor_line(result, analysis.hardware)]
    if analysis.hardware is not None:
        hw = analysis.hardware
        source = "this machine" if hw.source == "detected" else "target"
        lines.append(f"Hardware: {hw.name} ({hw.arch}, {hw.sm_count} SMs, {hw.peak_bandwidth_gbs:.0f} GB/s; {source})")
    if result.computed_at is not None:
        age = time.time() - result.computed_at
        lines.append(f"{'From cache, ' if result.from_cache else 'Computed '}{_age_words(age)} ago")
    return "\n".join(lines)


def _forecast_lines(forecast: Forecast) -> list[str]:
    lo, hi = forecast.interval
    provenance = forecast.provenance
    lines = [
        f"Point estimate {forecast.speedup:.2f}× · 80% interval {lo:.2f}–{hi:.2f}× · "
        f"P({forecast.direction}) = {forecast.confidence:.2f}{' · deferring to measurement' if forecast.defer else ''}",
        "",
        "```text",
    ]
    for words, probability in zip(BIN_WORDS, forecast.probabilities):
        bar = "█" * round(probability * BAR_WIDTH)
        lines.append(f"{words:>18} {bar:<{BAR_WIDTH}} {probability:4.0%}")
    lines += [
        "```",
        f"Backend: {provenance.get('backend', '?')} ({provenance.get('model_id', '?')} v{provenance.get('backend_version', '?')}), "
        f"calibration {provenance.get('calibration_id', '?')}",
    ]
    details = provenance.get("details") or {}
    lines += _pool_lines(details)
    prior = _prior_words(details)
    if prior:
        lines += ["", prior]
    if details.get("out_of_sight"):
        lines += ["", _out_of_sight_words(details["out_of_sight"])]
    if details.get("repeated_grids"):
        lines += ["", _repeated_grid_words(details["repeated_grids"])]
    if details.get("few_value_programs"):
        lines += ["", _few_value_program_words(details["few_value_programs"])]
    if provenance.get("assumed"):
        lines += ["", _assumed_words(provenance["assumed"])]
    if provenance.get("local_learning"):
        count, against = provenance.get("local_measurements"), provenance.get("reference_measurements")
        own = f", {against} of them against this reference" if against else ""
        lines += ["", f"Calibrated with {f'{count} of ' if count else ''}your measurements on this GPU{own}"]
    return lines


def _out_of_sight_words(calls: list[str]) -> str:
    """Which calls run kernels the file does not hold, or which template library a side's kernels are
    built on: why the forecast cannot take a side."""
    templates = [call for call in calls if call.endswith(f"({TEMPLATES_OUT_OF_SIGHT})")]
    reasons = []
    if len(templates) < len(calls):
        reasons.append("the file shows no kernel of that side's own, so what it launches is unknown")
    if templates:
        reasons.append("its kernels copy and multiply through templates whose loops, layouts and block size the forecast cannot read")
    why = "; ".join(reasons)
    return (
        f"Kernels out of sight: {'; '.join(calls)}. {why[0].upper()}{why[1:]}:"
        " the forecast is mixed evenly with knowing nothing and defers to measurement."
    )


def _repeated_grid_words(repeated: list[dict[str, Any]]) -> str:
    """Which launch runs copies of its grid: the likeliest reason a forecast says a side is many times slower."""
    each = []
    for grid in repeated:
        axes = ", ".join(str(axis) for axis in grid["unread_axes"])
        each.append(
            f"the {grid['side']}'s `{grid['launch']}` runs {grid['copies']:,} copies of its grid: its kernel never reads"
            f" `tl.program_id` of axis {axes}, so every program along it redoes the work of the first"
        )
    text = "; ".join(each)
    return f"Repeated grid: {text[0].upper()}{text[1:]}. The forecast counts the copies (a CUDA block size is not a Triton grid axis)."


def _few_value_program_words(launches: list[dict[str, Any]]) -> str:
    """Which launch gives each program only a few values: why a forecast says a side is many times slower."""
    each = []
    for launch in launches:
        values = "one value" if launch["values"] == 1 else f"blocks of {launch['values']} values"
        programs = f"{launch['programs']:,} programs" if launch["programs"] is not None else "as many programs as the problem's size makes"
        each.append(f"the {launch['side']}'s `{launch['launch']}` ({values}, {programs})")
    return (
        f"Few values a program: {'; '.join(each)}. Most lanes of each program idle, so the call costs the waves of"
        " programs it starts more than the bytes it moves; the forecast counts them."
    )


def _prior_words(details: dict[str, Any]) -> str | None:
    """Which line read a KernelBench pair, and how far the measured sources disagree on it: why such
    a forecast may defer where a generated-looking pair would not."""
    kind = details.get("kernelbench_prior")
    if not kind:
        return None
    spread = float(details.get("source_spread_log2", 0.0))
    if details.get("trees_read") is False:
        words = (
            f"Read as a KernelBench {kind} pair, through a line on the weights' own forecast, as wide and as sure"
            " as it was right on sources of kernels others wrote and we measured, each left out of its fit."
        )
    else:
        words = (
            f"Read as a KernelBench {kind} pair, through trees and a line fitted on kernels others wrote and we measured. "
            f"Trees fitted each without one of those sources disagree here by ±{spread:.2f} octaves; the interval includes that."
        )
    if details.get("read_the_other_way_round"):
        words += " Its line reads the solution as the candidate: the pair was read that way round and the forecast turned back."
    if details.get("few_sources_of_kind"):
        words += " Fewer than two sources measured this kind of pair in this language, so the interval is wider still."
    if details.get("launches_read") is False:
        words += (
            " The launches ModelNew makes of its own kernels are not read, as the line was fitted (read with them, the"
            " held-out sources were forecast worse), save a grid that repeats its work: a block size or num_warps edit"
            " does not move this forecast; measure it."
        )
    return words


# Guesses the forecast mixes with the reading without them (models/embedded/backend.py) or was learnt without.
_SPREAD_COVERS = (
    ASSUMED_CANDIDATE_LAUNCH,
    ASSUMED_REFERENCE_LAUNCH,
    ASSUMED_CANDIDATE_CONFIG,
    ASSUMED_REFERENCE_CONFIG,
    ASSUMED_SIZES,
    ASSUMED_CANDIDATE_LOOPS,
    ASSUMED_REFERENCE_LOOPS,
)


def _assumed_words(assumed: list[str]) -> str:
    """Which inputs were guessed, and how: a grid its host code computes from sizes known only at run time
    is read for the problem's elements; a config is the first of several autotune configs or a guess."""
    words = [f"Assumed, not read from the code: {', '.join(assumed)}."]
    if any(item in (ASSUMED_CANDIDATE_GRID, ASSUMED_REFERENCE_GRID) for item in assumed):
        words.append(
            f"A grid computed from run-time sizes is taken for the problem's elements ({DEFAULT_ELEMENTS:,} where none is stated)."
        )
    if any(item in (ASSUMED_CANDIDATE_CONFIG, ASSUMED_REFERENCE_CONFIG) for item in assumed):
        words.append(
            "A launch config chosen at run time is taken as the autotuner's first, and a Triton block size the host code computes"
            " (`triton.next_power_of_2(n)`) as 1024 (64 for a BLOCK_M/N/K)."
        )
    if any(item in (ASSUMED_CANDIDATE_LOOPS, ASSUMED_REFERENCE_LOOPS) for item in assumed):
        words.append(
            "A host loop whose bound is known only at run time is taken to go round as often as the median of the file's size"
            f" constants ({GUESSED_TRIPS} where it states none), and the forecast is mixed evenly with one where it goes round once."
        )
    if any(item in _SPREAD_COVERS for item in assumed):
        words.append("The spread covers what the guess could be.")
    return " ".join(words)


def _stand_in_line(result: KernelResult) -> str:
    """Why the forecast shown is not the configured backend's."""
    if result.forecast is None:
        return f"Waiting for {result.stands_in_for}…"
    shown = result.forecast.provenance.get("backend", "?")
    if result.stand_in_failure is not None:
        return f"Shown: the {shown} forecast, because {result.stands_in_for} did not answer: {result.stand_in_failure}"
    return f"Provisional: the {shown} forecast, until {result.stands_in_for} answers"


def _pool_lines(details: dict[str, Any]) -> list[str]:
    """Which members a `combined` forecast pooled, and which failed and were left out."""
    if "contributors" not in details:
        return []
    pooled = ", ".join(f"{c.get('backend', '?')} (w={c.get('weight', 1):g})" for c in details["contributors"])
    lines = ["", f"Pooled ({details.get('pool', '?')}) from {pooled}  "]
    lines += [f"Left out: {f.get('backend', '?')}: {f.get('error', '?')}  " for f in details.get("failed", [])]
    return lines


def _floor_line(result: KernelResult, hardware: GpuSpec) -> str:
    """Memory floor from the launch spec's arrays: each read or written at least once."""
    assert result.launch is not None
    moved = sum(arg.nbytes for arg in result.launch.args if arg.is_array)
    floor_ms, _ = roofline_floor_ms(moved, 0.0, hardware)
    rate = f"{hardware.peak_bandwidth_gbs / 1000:.2f} TB/s"
    line = f"Floor: ≥ {floor_ms:.3g} ms to move {moved / 1e6:.3g} MB at {rate} (memory; FLOPs not counted)"
    if result.measurement is not None:
        line += f" · measured {result.measurement.t_candidate_ms / floor_ms:.1f}× the floor"
    return line


def _facts_lines(result: KernelResult) -> list[str]:
    if result.facts is not None:
        lines = ["Compiler facts:", *result.facts.hover_lines()]
    elif result.facts_error:
        lines = [f"Compiler facts unavailable: {first_error_line(result.facts_error)}"]
    else:
        return []
    if result.reference_facts is not None:
        lines += ["", "Reference:", *result.reference_facts.hover_lines()]
    return [line + "  " for line in lines]  # markdown hard line breaks


def _age_words(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"
