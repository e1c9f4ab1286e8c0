"""Fit and check the run-to-run part of a speedup's 95% interval on kernels measured twice.

A speedup's interval is its rounds' spread within one run widened by how far a kernel's median
moves between runs (`kernels_runtime/timing.py`: a relative part and a timer jitter, per side).
Rounds minutes apart cannot see that drift; a second run on another machine can. Given records
and the same entries measured again elsewhere (`pack --remeasure`, `realworld repro`):

- `fit` finds the relative sd and the jitter that make the log-ratios of the two runs' speedups
  most likely: each is normal with the variance of both runs' within-run parts and two draws of
  each side's drift. A grid in log space: two parameters, no optimiser needed.
- `coverage` recomputes each record's interval with given constants and counts the second runs
  inside it, in the interval for the true speedup and in the wider one for another run's. Fit on
  one sample and check on another: a fit judged on its own sample flatters it.

    python -m workshop realworld repro FIT/results.jsonl --fit [--check CHECK/results.jsonl]
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernelcast.kernels_runtime.timing import RUN_TO_RUN_JITTER_MS, RUN_TO_RUN_REL_SD, ratio_interval

RELATIVE_GRID = np.geomspace(1e-4, 0.3, 121)
JITTER_GRID_MS = np.geomspace(1e-6, 1e-2, 81)


@dataclass(frozen=True)
class Drift:
    """How far a kernel's median moves between runs: log-scale sd hypot(relative, jitter / median)."""

    relative: float
    jitter_ms: float

    def sd(self, median_ms: float) -> float:
        return math.hypot(self.relative, self.jitter_ms / median_ms)

    def speedup_sd(self, record: dict[str, Any]) -> float:
        """The drift of a speedup: both sides' medians move."""
        return math.hypot(self.sd(record["t_reference_ms"]), self.sd(record["t_candidate_ms"]))


SHIPPED = Drift(RUN_TO_RUN_REL_SD, RUN_TO_RUN_JITTER_MS)


@dataclass(frozen=True)
class Twice:
    """One entry's recorded measurement and its measurement on another run."""

    record: dict[str, Any]
    again: dict[str, Any]

    @property
    def log_ratio(self) -> float:
        return math.log(self.again["speedup"] / self.record["speedup"])

    @property
    def within_variance(self) -> float:
        """Both runs' standard errors of the mean log round ratio."""
        return sum(_standard_error(rounds) ** 2 for rounds in (self.record["round_ratios"], _rounds(self.again)))


def _rounds(result: dict[str, Any]) -> list[float]:
    return result.get("round_ratios") or result["details"]["round_ratios"]


def _standard_error(rounds: list[float]) -> float:
    logs = [math.log(ratio) for ratio in rounds]
    return statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0.0


def matched(records: list[dict[str, Any]], remeasured: Iterable[dict[str, Any]]) -> list[Twice]:
    """Correct records with rounds, each with its first re-measurement."""
    recorded = {record["id"]: record for record in records if record["correct"] and len(record.get("round_ratios") or []) > 1}
    pairs: dict[str, Twice] = {}
    for result in remeasured:
        if result["id"] in recorded and "speedup" in result and result["id"] not in pairs:
            pairs[result["id"]] = Twice(recorded[result["id"]], result)
    return list(pairs.values())


def fit(pairs: list[Twice]) -> Drift:
    """The drift that makes the second runs most likely."""
    if not pairs:
        raise ValueError("no entry was measured twice: nothing to fit")
    differences = np.array([pair.log_ratio for pair in pairs])
    within = np.array([pair.within_variance for pair in pairs])
    references = np.array([pair.record["t_reference_ms"] for pair in pairs])
    candidates = np.array([pair.record["t_candidate_ms"] for pair in pairs])
    relative, jitter = np.meshgrid(RELATIVE_GRID, JITTER_GRID_MS, indexing="ij")
    per_side = [relative[..., None] ** 2 + (jitter[..., None] / times) ** 2 for times in (references, candidates)]
    variance = within + 2.0 * (per_side[0] + per_side[1])  # each run's median draws its own drift
    negative_log_likelihood = np.sum(np.log(variance) + differences**2 / variance, axis=-1)
    best = np.unravel_index(np.argmin(negative_log_likelihood), negative_log_likelihood.shape)
    return Drift(float(relative[best]), float(jitter[best]))


def coverage(pairs: list[Twice], drift: Drift, another_run: bool = False) -> dict[str, Any]:
    """How many second runs fall inside the record's 95% interval recomputed with `drift`.

    That interval is for the true speedup. A second run carries its own within-run noise and its
    own drift, so even at the right drift only about 83% of second runs fall inside it (the
    difference of two runs has twice the variance). `another_run` widens it by √2 in log space:
    the interval a second run's speedup falls in 95% of the time."""
    inside = 0
    for pair in pairs:
        speedup, low, high = ratio_interval(pair.record["round_ratios"], drift.speedup_sd(pair.record))
        if another_run:
            half = math.sqrt(2.0) * math.log(high / low) / 2
            low, high = speedup * math.exp(-half), speedup * math.exp(half)
        inside += low <= pair.again["speedup"] <= high
    return {"compared": len(pairs), "inside_ci": inside, "share_inside_ci": round(inside / len(pairs), 4) if pairs else None}


def _coverages(pairs: list[Twice], fitted: Drift) -> dict[str, Any]:
    return {
        "shipped": coverage(pairs, SHIPPED),
        "fitted": coverage(pairs, fitted),
        "fitted, as another run's interval": coverage(pairs, fitted, another_run=True),
    }


def report(records: list[dict[str, Any]], fit_sample: list[dict[str, Any]], check_sample: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The fitted drift, and the coverage of the fit sample and of the check sample under the shipped
    constants and under the fitted ones."""
    fitting = matched(records, fit_sample)
    fitted = fit(fitting)
    found: dict[str, Any] = {
        "shipped": {"relative": SHIPPED.relative, "jitter_ms": SHIPPED.jitter_ms},
        "fitted": {"relative": round(fitted.relative, 5), "jitter_ms": round(fitted.jitter_ms, 7)},
        "fit sample": _coverages(fitting, fitted),
    }
    if check_sample is not None:
        found["check sample"] = _coverages(matched(records, check_sample), fitted)
    return found
