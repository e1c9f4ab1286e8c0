"""`kernelcast eval`: every metric of docs/forecast.md for a forecaster on pairs with measured speedups.

The metric functions take plain arrays (probabilities (N, 8), true speedups S), so
training code scores a model with exactly the numbers `kernelcast eval` reports.

Directions are read as `Forecast` reads them, so an eval judges what the editor shows:
predicted faster iff P(S ≥ 1) ≥ 0.5; confidence = P(predicted direction); deferred iff
confidence < threshold. Two sets of pairs are used, each for a reason:

- direction accuracy and selective prediction (coverage, risk, AURC, accuracy at 50%
  coverage, non-deferred accuracy) use the pairs with |log2 S| ≥ 0.1, as docs/forecast.md
  defines direction accuracy: a near-tie is neither a right nor a wrong direction.
- direction ECE uses every pair, with "right" meaning the true S ≥ 1 side: confidence
  claims P(S ≥ 1) (or its complement), and dropping the near-ties, where a calibrated
  forecaster is right about half the time, would make any forecaster look better calibrated.
- resolved direction accuracy (beside direction accuracy, never instead of it) uses the
  direction pairs whose measured 95% interval of S lies on one side of 1: how often the
  forecast names a direction the measurement itself established.
- oracle direction accuracy (beside them) uses the direction pairs with an interval, the
  interval read as the label's noise: what a forecaster that knew every true S would score
  against these labels, the ceiling of direction accuracy on them.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.batch import add_facts, default_jobs, report_fact_problems
from kernelcast.models.service.calibrated import Forecaster
from kernelcast.models.service.calibration import true_bins
from kernelcast.models.service.llm_common import LLMBackendError
from kernelcast.paths import install_command
from kernelcast.progress import Progress
from kernelcast.wire import (
    BIN_WORDS,
    DEFAULT_CONFIDENCE_THRESHOLD,
    NUM_BINS,
    Forecast,
    LabelledPair,
    _bin_bounds,
    read_forecast_rows,
    read_pairs,
)

DIRECTION_MIN_LOG2 = 0.1
ECE_BUCKETS = 10
# ECE is biased upward on few pairs: the ECE a calibrated forecaster would show on the same
# confidences, its 90th percentile over this many draws of the outcomes, says how much of an
# observed ECE is the sample's size rather than miscalibration.
CALIBRATED_DRAWS = 300
NOISE_QUANTILE = 0.9
NLL_FLOOR = 1e-12
# The oracle's grid of true log2 S, 0.02 octaves apart: finer than the narrowest label noise kept
# (half a step), so every label lies within one sd of a grid point. A 95% interval is 2 × 1.96 sds wide.
ORACLE_GRID_LOG2 = np.linspace(-8.0, 8.0, 801)
ORACLE_SD_FLOOR_LOG2 = 0.01
# The estimate settles to four decimals within 30 rounds on each real-world source.
ORACLE_EM_ROUNDS = 100
# The grid distribution is fitted on at most this many labels (a seeded draw), and the posteriors
# are taken this many labels at a time: a corpus of 10^5 pairs would otherwise hold a likelihood of
# 10^5 × 801 numbers, several times over, in every split.
ORACLE_LABELS_AT_ONCE = 5000
INTERVAL_SDS = 2 * 1.959964
TOP_SHARE = 0.1
HALF_COVERAGE = 0.5
# The source of pairs that name none (LabelledPair.source).
UNNAMED_SOURCE = "unnamed"
# Bin centres in log2 S (outer bins one octave wide, as forecast.py interpolates them):
# the values "expected s" averages over.
BIN_CENTRES_LOG2 = np.array([sum(_bin_bounds(index)) / 2 for index in range(NUM_BINS)])
PLOT_INSTALL_HINT = install_command("eval")


# --- metric functions on arrays ---------------------------------------------------------


def normalised(probabilities: Any) -> np.ndarray:
    """(N, 8) non-negative rows scaled to sum 1, as Forecast.from_probabilities does."""
    p = np.asarray(probabilities, dtype=float)
    if p.ndim != 2 or p.shape[1] != NUM_BINS:
        raise ValueError(f"probabilities must have shape (N, {NUM_BINS}), got {p.shape}")
    sums = p.sum(axis=1)
    if not np.all(np.isfinite(p)) or np.any(p < 0) or np.any(sums <= 0):
        raise ValueError("probabilities must be finite, non-negative, with a positive sum per row")
    return p / sums[:, None]


def direction(probabilities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(predicted faster, confidence) per pair, as `Forecast` decides them."""
    p_faster = probabilities[:, NUM_BINS // 2 :].sum(axis=1)
    faster = p_faster >= 0.5
    return faster, np.where(faster, p_faster, 1.0 - p_faster)


def reliability(confidence: np.ndarray, correct: np.ndarray, buckets: int = ECE_BUCKETS) -> list[dict[str, Any]]:
    """Non-empty equal-width confidence buckets on [0, 1]: count, mean confidence, accuracy."""
    index = np.minimum((confidence * buckets).astype(int), buckets - 1)
    rows = []
    for bucket in range(buckets):
        members = index == bucket
        if members.any():
            rows.append(
                {
                    "low": bucket / buckets,
                    "high": (bucket + 1) / buckets,
                    "n": int(members.sum()),
                    "confidence": float(confidence[members].mean()),
                    "accuracy": float(correct[members].mean()),
                }
            )
    return rows


def ece(table: list[dict[str, Any]]) -> float | None:
    """Σ (n_i/N)·|mean c_i − acc_i| over a reliability table."""
    total = sum(row["n"] for row in table)
    if total == 0:
        return None
    return float(sum(row["n"] / total * abs(row["confidence"] - row["accuracy"]) for row in table))


def ece_noise(confidence: np.ndarray, buckets: int = ECE_BUCKETS, draws: int = CALIBRATED_DRAWS, seed: int = 0) -> float | None:
    """The direction ECE that forecasts of these confidences exceed one time in ten even when
    calibrated (each right with the probability it states). On 70 pairs it is about 0.13, so
    an ECE of 0.05 there cannot be told from chance; an observed ECE above it is miscalibration."""
    if len(confidence) == 0:
        return None
    index = np.minimum((confidence * buckets).astype(int), buckets - 1)
    order = np.argsort(index, kind="stable")
    sorted_confidence, bucket = confidence[order], index[order]
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    claimed = np.add.reduceat(sorted_confidence, starts)
    generator = np.random.default_rng(seed)
    values = []
    for chunk in np.array_split(np.arange(draws), max(1, draws * len(confidence) // 2_000_000)):
        right = generator.random((len(chunk), len(confidence))) < sorted_confidence
        values.extend(np.abs(np.add.reduceat(right, starts, axis=1) - claimed).sum(axis=1) / len(confidence))
    return float(np.quantile(values, NOISE_QUANTILE))


def oracle_direction_accuracy(log2_s: np.ndarray, sd: np.ndarray) -> float | None:
    """The direction accuracy an oracle that knew every pair's true log2 S would score against these
    labels, each measured with normal noise of its `sd`, over the labels with |log2 S| ≥ 0.1; None
    when there are none. Where pairs differ by less than their noise, no reading of code does better.

    The true values are taken to come from one distribution on a grid, fitted by maximum likelihood
    to the labels and their noise (the nonparametric Kiefer-Wolfowitz estimate, by EM); the oracle is
    right on a label with the posterior probability that its true sign is the measured one (half
    where the true S is 1). Where labels are noise alone, EM concentrates the prior slowly and the
    estimate errs high (0.61 for a coin flip after ORACLE_EM_ROUNDS)."""
    counted = np.flatnonzero(np.abs(log2_s) >= DIRECTION_MIN_LOG2)
    if not len(counted):
        return None
    labels = np.clip(log2_s, ORACLE_GRID_LOG2[0], ORACLE_GRID_LOG2[-1])[:, None]
    sd = np.maximum(sd, ORACLE_SD_FLOOR_LOG2)[:, None]
    fitted = np.random.default_rng(0).permutation(len(labels))[:ORACLE_LABELS_AT_ONCE]
    likelihood = _label_likelihood(labels[fitted], sd[fitted])
    prior = np.full(len(ORACLE_GRID_LOG2), 1.0 / len(ORACLE_GRID_LOG2))
    for _ in range(ORACLE_EM_ROUNDS):  # prior ← mean posterior, as two products with the likelihood
        prior *= likelihood.T @ (1.0 / (likelihood @ prior)) / len(fitted)
    right = 0.0
    for start in range(0, len(counted), ORACLE_LABELS_AT_ONCE):
        rows = counted[start : start + ORACLE_LABELS_AT_ONCE]
        posterior = _label_likelihood(labels[rows], sd[rows]) * prior
        agrees = np.where(ORACLE_GRID_LOG2 == 0.0, 0.5, (ORACLE_GRID_LOG2 > 0) == (labels[rows] > 0))
        right += float(((posterior * agrees).sum(axis=1) / posterior.sum(axis=1)).sum())
    return right / len(counted)


def _label_likelihood(labels: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """(n, grid) density of each (n, 1) label given each true log2 S of the grid."""
    density: np.ndarray = np.exp(-0.5 * ((labels - ORACLE_GRID_LOG2) / sd) ** 2) / sd
    return density


def brier(probabilities: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """½ Σ_k (p_k − y_k)² per pair."""
    onehot = np.eye(NUM_BINS)[bins - 1]
    return 0.5 * ((probabilities - onehot) ** 2).sum(axis=1)


def crps(probabilities: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """(1/7) Σ_{k=1..7} (F_k − 1[k ≥ true])² per pair: the ranked score, so near misses cost less."""
    cumulative = np.cumsum(probabilities, axis=1)[:, : NUM_BINS - 1]
    k = np.arange(1, NUM_BINS)
    observed = (k[None, :] >= bins[:, None]).astype(float)
    return ((cumulative - observed) ** 2).sum(axis=1) / (NUM_BINS - 1)


def nll(probabilities: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """−ln max(p_true, 1e-12) per pair."""
    return -np.log(np.maximum(probabilities[np.arange(len(bins)), bins - 1], NLL_FLOOR))


def risk_coverage(confidence: np.ndarray, correct: np.ndarray) -> list[dict[str, float]]:
    """One point per distinct confidence t, most confident first: forecasts with c ≥ t are kept.

    Tied confidences are kept or deferred together, as a threshold would.
    """
    order = np.argsort(-confidence, kind="stable")
    kept_confidence = confidence[order]
    errors = np.cumsum(~correct[order])
    points = []
    for i in range(len(order)):
        if i + 1 < len(order) and kept_confidence[i + 1] == kept_confidence[i]:
            continue
        points.append({"threshold": float(kept_confidence[i]), "coverage": (i + 1) / len(order), "risk": float(errors[i] / (i + 1))})
    return points


def aurc(points: list[dict[str, float]]) -> float | None:
    """Area under the risk–coverage step curve: Σ risk_j·(coverage_j − coverage_{j−1})."""
    if not points:
        return None
    area, previous = 0.0, 0.0
    for point in points:
        area += point["risk"] * (point["coverage"] - previous)
        previous = point["coverage"]
    return area


def expected_log2(probabilities: np.ndarray) -> np.ndarray:
    """E[s] from bin probabilities, each bin at its centre: the ranking score of top-10% recovery."""
    return probabilities @ BIN_CENTRES_LOG2


def top_recovery(score: np.ndarray, speedups: np.ndarray, groups: Sequence[str]) -> dict[str, float]:
    """Per group of ≥ 2 pairs: best true S among the top ⌈0.1·n⌉ by score ÷ best true S of the group.

    Pairs without a group, and groups of one (trivially 1.0), are left out. Where tied scores straddle
    the cut, the kept ones are drawn at random among them, and the recovery is its expected value over
    those draws: two solutions read alike are forecast alike, and which of them a search keeps is
    chance, not the pairs' order in a file.
    """
    score, speedups = np.asarray(score, dtype=float), np.asarray(speedups, dtype=float)
    members: dict[str, list[int]] = {}
    for index, group in enumerate(groups):
        if group:
            members.setdefault(group, []).append(index)
    return {name: _expected_recovery(score[chosen], speedups[chosen]) for name, chosen in members.items() if len(chosen) >= 2}


def _expected_recovery(score: np.ndarray, speedups: np.ndarray) -> float:
    """One group's top-10% recovery, averaged over the ways of breaking ties at the cut."""
    keep = max(1, math.ceil(TOP_SHARE * len(score)))
    cut = np.sort(score)[::-1][keep - 1]
    above = speedups[score > cut]
    tied = np.sort(speedups[score == cut])[::-1]
    drawn = keep - len(above)
    # The best of `drawn` taken at random from `tied` is its j-th best with probability C(t-j, drawn-1) / C(t, drawn).
    chance = np.array([math.comb(len(tied) - j, drawn - 1) for j in range(1, len(tied) + 1)]) / math.comb(len(tied), drawn)
    best_kept = np.maximum(tied, above.max(initial=-np.inf))
    return float(np.dot(chance, best_kept) / speedups.max())


def confusion(probabilities: np.ndarray, bins: np.ndarray) -> list[list[int]]:
    """Counts: rows are true bins 1–8, columns the predicted (most probable) bin."""
    matrix = np.zeros((NUM_BINS, NUM_BINS), dtype=int)
    np.add.at(matrix, (bins - 1, probabilities.argmax(axis=1)), 1)
    return matrix.tolist()


def _interval_bounds(intervals: Any) -> np.ndarray:
    """(N, 2) lower and upper bounds of measured intervals, NaN for a pair measured without one."""
    rows = [(np.nan, np.nan) if interval is None else interval for interval in intervals]
    return np.array(rows, dtype=float).reshape(len(rows), 2)


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None


def metrics(
    probabilities: Any,
    speedups: Any,
    groups: Sequence[str] | None = None,
    threshold: float = DEFAULT_CONFIDENCE_THRESHOLD,
    intervals: Any = None,
) -> dict[str, Any]:
    """Every docs/forecast.md metric of one set of pairs; a metric with no pairs to judge is None.
    `intervals`: each pair's measured 95% interval of S, or None (NaN) where it has none."""
    p = normalised(probabilities)
    s = np.asarray(speedups, dtype=float)
    if len(s) != len(p):
        raise ValueError(f"{len(p)} probability rows but {len(s)} speedups")
    measured = np.full((len(s), 2), np.nan) if intervals is None else _interval_bounds(intervals)
    bins = true_bins(s)
    predicted = p.argmax(axis=1) + 1
    faster, confidence = direction(p)
    log2_s = np.log2(s)
    right_side = faster == (log2_s >= 0)
    decided = np.abs(log2_s) >= DIRECTION_MIN_LOG2
    # NaN bounds compare false: a pair measured without an interval is not resolved.
    resolved = decided & ((measured[:, 1] < 1.0) | (measured[:, 0] > 1.0))
    with_interval = (measured > 0).all(axis=1)  # NaN bounds compare false too
    direction_table = reliability(confidence, right_side)
    winner_confidence = p.max(axis=1)
    winner_table = reliability(winner_confidence, predicted == bins)
    curve = risk_coverage(confidence[decided], right_side[decided])
    half = next((point for point in curve if point["coverage"] >= HALF_COVERAGE), None)
    kept = confidence[decided] >= threshold
    recovery = top_recovery(expected_log2(p), s, groups if groups is not None else [""] * len(s))
    recovered = np.array(list(recovery.values()))
    return {
        "n": len(s),
        "n_direction": int(decided.sum()),
        "direction_accuracy": _mean(right_side[decided]),
        "n_resolved": int(resolved.sum()),
        "resolved_direction_accuracy": _mean(right_side[resolved]),
        "oracle_direction_accuracy": oracle_direction_accuracy(
            log2_s[with_interval], np.log2(measured[with_interval, 1] / measured[with_interval, 0]) / INTERVAL_SDS
        ),
        "bin_accuracy": _mean(predicted == bins),
        "within_one_bin": _mean(np.abs(predicted - bins) <= 1),
        "direction_ece": ece(direction_table),
        "direction_ece_noise": ece_noise(confidence),
        "bin_ece": ece(winner_table),
        "brier": _mean(brier(p, bins)),
        "crps": _mean(crps(p, bins)),
        "nll": _mean(nll(p, bins)),
        "aurc": aurc(curve),
        "accuracy_at_half_coverage": None if half is None else 1.0 - half["risk"],
        "coverage_at_half_coverage": None if half is None else half["coverage"],
        "threshold": threshold,
        "coverage_at_threshold": _mean(kept),
        "accuracy_at_threshold": _mean(right_side[decided][kept]),
        "top10_recovery_mean": _mean(recovered),
        "top10_recovery_min": float(recovered.min()) if len(recovered) else None,
        "top10_groups": len(recovered),
        "top10_recovery_by_group": recovery,
        "direction_reliability": direction_table,
        "bin_reliability": winner_table,
        "risk_coverage": curve,
        "confusion": confusion(p, bins),
    }


def evaluate(
    probabilities: Any,
    speedups: Any,
    kinds: Sequence[str] | None = None,
    languages: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    threshold: float = DEFAULT_CONFIDENCE_THRESHOLD,
    sources: Sequence[str] | None = None,
    intervals: Sequence[tuple[float, float] | None] | None = None,
) -> dict[str, Any]:
    """Metrics overall (pooled) and split by source, candidate language and pair kind
    (docs/forecast.md); with sources, also their mean, which weighs every source alike: a
    pooled number that one large easy source dominates hides the sources that fail.
    `intervals`: each pair's measured 95% interval of S, or None where it has none."""
    p = np.asarray(probabilities, dtype=float)
    s = np.asarray(speedups, dtype=float)
    result: dict[str, Any] = {"overall": metrics(p, s, groups, threshold, intervals)}
    named_sources = None if sources is None else [source or UNNAMED_SOURCE for source in sources]
    for split, labels in (("by_source", named_sources), ("by_language", languages), ("by_kind", kinds)):
        if labels is None:
            continue
        labels = list(labels)
        result[split] = {}
        for label in sorted(set(labels)):
            chosen = [i for i, value in enumerate(labels) if value == label]
            chosen_groups = None if groups is None else [groups[i] for i in chosen]
            chosen_intervals = None if intervals is None else [intervals[i] for i in chosen]
            result[split][label] = metrics(p[chosen], s[chosen], chosen_groups, threshold, chosen_intervals)
    if "by_source" in result:
        result["mean_over_sources"] = mean_over(result["by_source"])
    return result


# Counts add up over sources; every other number of `metrics` is averaged.
SUMMED = ("n", "n_direction", "n_resolved", "top10_groups")


def mean_over(splits: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each scalar metric averaged over the splits that have it (a metric with no pairs to
    judge in a split, None, is left out of that mean); counts summed; `sources` says how many."""
    values = list(splits.values())
    mean: dict[str, Any] = {"sources": len(values)}
    for key, first in values[0].items():
        if key in SUMMED:
            mean[key] = sum(v[key] for v in values)
        elif first is None or (isinstance(first, (int, float)) and not isinstance(first, bool)):
            numbers = [v[key] for v in values if v[key] is not None]
            mean[key] = float(np.mean(numbers)) if numbers else None
    return mean


# --- running a backend on a pairs file -----------------------------------------------------


def forecast_pairs(pairs: list[LabelledPair], forecaster: Forecaster) -> tuple[list[Forecast | None], list[dict[str, str]]]:
    """Each pair forecast in-process, calibrated as the service does; a pair the backend fails on is named, not fatal."""
    forecasts: list[Forecast | None] = []
    failed = []
    progress = Progress("kernelcast eval: forecast", len(pairs))
    for pair in pairs:
        try:
            forecasts.append(forecaster.forecast(pair.request))
        except LLMBackendError as error:
            forecasts.append(None)
            failed.append({"id": pair.id, "error": str(error)})
        progress.advance()
    return forecasts, failed


def _number(value: Any, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


# (column, metrics key) of the summary table printed and put in report.md.
COLUMNS = (
    ("N", "n"),
    ("dir acc", "direction_accuracy"),
    ("resolved", "resolved_direction_accuracy"),
    ("oracle", "oracle_direction_accuracy"),
    ("bin acc", "bin_accuracy"),
    ("±1 bin", "within_one_bin"),
    ("dir ECE", "direction_ece"),
    ("ECE noise", "direction_ece_noise"),
    ("bin ECE", "bin_ece"),
    ("Brier", "brier"),
    ("CRPS", "crps"),
    ("NLL", "nll"),
    ("AURC", "aurc"),
    ("acc@50%", "accuracy_at_half_coverage"),
    ("acc@0.8", "accuracy_at_threshold"),
    ("cov@0.8", "coverage_at_threshold"),
    ("top10%", "top10_recovery_mean"),
)


def _rows(result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    rows = [("overall", result["overall"])]
    if "mean_over_sources" in result:
        count = result["mean_over_sources"]["sources"]
        rows.append((f"mean of {count} source{'s' if count != 1 else ''}", result["mean_over_sources"]))
        rows += [(f"source: {label}", values) for label, values in result["by_source"].items()]
    for split in ("by_language", "by_kind"):
        rows += [(label, values) for label, values in result.get(split, {}).items()]
    return rows


def _cell(values: dict[str, Any], key: str) -> str:
    return str(values[key]) if key == "n" else _number(values[key])


def summary_table(result: dict[str, Any]) -> str:
    """A fixed-width table for the terminal."""
    rows = [["", *(name for name, _ in COLUMNS)]] + [[label, *(_cell(v, key) for _, key in COLUMNS)] for label, v in _rows(result)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(row, widths))) for row in rows
    )


def _markdown_table(result: dict[str, Any]) -> str:
    lines = ["| split | " + " | ".join(name for name, _ in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(_cell(v, key) for _, key in COLUMNS) + " |" for label, v in _rows(result)]
    return "\n".join(lines)


def report_markdown(report: dict[str, Any], plots: list[str], plot_note: str) -> str:
    """report.md: what was run, the table, where each number comes from, the plots."""
    overall = report["overall"]
    lines = [
        f"# kernelcast eval: {report['backend']} on {Path(report['pairs_file']).name}",
        "",
        f"- pairs: {report['pairs']} in `{report['pairs_file']}`; forecast: {overall['n']}; failed: {len(report['failed'])}",
        f"- backend `{report['backend']}`, model `{report['model_id']}`, calibration {', '.join(report['calibration_ids']) or '–'}",
        f"- direction metrics over the {overall['n_direction']} pairs with |log2 S| ≥ {DIRECTION_MIN_LOG2}; "
        f"ECE, bins and scores over all {overall['n']}; resolved: the {overall['n_resolved']} of those whose "
        "measured 95% interval of S lies on one side of 1",
        "- overall pools every pair; the mean of sources weighs each source alike (a metric a source cannot "
        "judge, e.g. top-10% without groups, is left out of its mean); pairs naming no source are "
        f"“{UNNAMED_SOURCE}”",
        "",
        _markdown_table(report),
        "",
        "Columns: direction accuracy, and on the pairs whose measurement resolved the direction; "
        "the direction accuracy an oracle of the true S would score on these labels (oracle); "
        "most-probable-bin accuracy and within one bin; direction ECE and "
        f"winning-class ECE ({ECE_BUCKETS} equal-width buckets); Brier, CRPS, NLL (means, lower is better); "
        "AURC of the risk–coverage curve; direction accuracy of the most confident half (acc@50%); "
        f"accuracy and coverage of forecasts not deferred at the default threshold {overall['threshold']:.2f}; "
        f"mean top-10% recovery over {overall['top10_groups']} groups (min {_number(overall['top10_recovery_min'])}). "
        'Definitions: docs/forecast.md "Metrics".',
        "",
    ]
    if report["failed"]:
        lines += ["## Pairs the backend could not forecast", ""] + [f"- `{f['id']}`: {f['error']}" for f in report["failed"]] + [""]
    lines += ["## Plots", ""] + ([f"![{name}]({name})" for name in plots] or [plot_note]) + [""]
    return "\n".join(lines)


def write_plots(report_dir: Path, overall: dict[str, Any], title: str) -> list[str]:
    """reliability.png, risk_coverage.png, confusion.png; ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 5))
    # Direction confidence is P(predicted side) ≥ 0.5, so its left half would stay empty.
    for axis, key, name, score, low in (
        (axes[0], "direction_reliability", "direction (faster/slower)", overall["direction_ece"], 0.5),
        (axes[1], "bin_reliability", "winning bin of 8", overall["bin_ece"], 0.0),
    ):
        table = overall[key]
        middles = [row["low"] + 0.5 / ECE_BUCKETS for row in table]
        axis.plot([low, 1], [low, 1], color="grey", linestyle="--", linewidth=1, label="calibrated")
        axis.bar(
            middles,
            [row["accuracy"] for row in table],
            width=1 / ECE_BUCKETS,
            color="tab:blue",
            alpha=0.6,
            edgecolor="black",
            label="accuracy in bucket",
        )
        axis.plot(
            middles,
            [row["confidence"] for row in table],
            "_",
            markersize=22,
            markeredgewidth=3,
            color="tab:red",
            label="mean confidence in bucket",
        )
        for middle, row in zip(middles, table):
            axis.annotate(f"n={row['n']}", (middle, min(max(row["accuracy"], row["confidence"]) + 0.05, 1.06)), ha="center", fontsize=8)
        axis.set(xlim=(low, 1), ylim=(0, 1.1), xlabel="confidence", ylabel="accuracy", title=f"{name}: ECE {_number(score)}")
    figure.legend(*axes[1].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=9)
    figure.suptitle(f"Reliability · {title}")
    figure.tight_layout(rect=(0, 0.06, 1, 1))
    figure.savefig(report_dir / "reliability.png", dpi=110)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(6.5, 5))
    curve = overall["risk_coverage"]
    if curve:
        axis.step(
            [0.0] + [p["coverage"] for p in curve],
            [curve[0]["risk"]] + [p["risk"] for p in curve],
            where="pre",
            color="tab:blue",
            label="risk",
        )
    if overall["coverage_at_threshold"]:
        axis.plot(
            overall["coverage_at_threshold"],
            1 - overall["accuracy_at_threshold"],
            "s",
            color="tab:red",
            label=f"threshold {overall['threshold']:.2f}",
        )
    axis.axvline(HALF_COVERAGE, color="grey", linestyle=":", linewidth=1, label="50% coverage")
    axis.set(
        xlim=(0, 1.02),
        ylim=(0, max([0.1] + [p["risk"] for p in curve]) * 1.1),
        xlabel="coverage (share not deferred)",
        ylabel="risk (direction error among kept)",
        title=f"Risk–coverage · AURC {_number(overall['aurc'])} · N={overall['n_direction']}",
    )
    axis.legend(fontsize=8)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(report_dir / "risk_coverage.png", dpi=110)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(7.5, 6.5))
    matrix = np.array(overall["confusion"])
    axis.imshow(matrix, cmap="Blues")
    for (row, column), count in np.ndenumerate(matrix):
        axis.text(column, row, str(count), ha="center", va="center", fontsize=9, color="white" if count > matrix.max() / 2 else "black")
    labels = [f"{k + 1}: {words}" for k, words in enumerate(BIN_WORDS)]
    axis.set_xticks(range(NUM_BINS), labels, rotation=45, ha="right", fontsize=8)
    axis.set_yticks(range(NUM_BINS), labels, fontsize=8)
    axis.set(
        xlabel="predicted bin (most probable)",
        ylabel="true bin",
        title=f"Bins · accuracy {_number(overall['bin_accuracy'])} · N={overall['n']}",
    )
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(report_dir / "confusion.png", dpi=110)
    plt.close(figure)
    return ["reliability.png", "risk_coverage.png", "confusion.png"]


def _write_text(path: Path, text: str) -> None:
    """Whole file or nothing: a reader never sees half a report."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def forecasts_from_file(path: Path, pairs: list[LabelledPair]) -> list[Forecast]:
    """Each pair's forecast read from a file of {id, probabilities} lines, as the editor would word
    it; ValueError when the file cannot be read, a line is not one, or a pair has none."""
    try:
        rows = read_forecast_rows(path)
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None
    missing = [pair.id for pair in pairs if pair.id not in rows]
    if missing:
        raise ValueError(f"{path} has no forecast of {len(missing)} of the {len(pairs)} pairs, first: {missing[0]}")
    forecasts = []
    for pair in pairs:
        try:
            forecasts.append(Forecast.from_probabilities(rows[pair.id], provenance={"backend": f"forecasts of {path.name}"}))
        except ValueError as error:
            raise ValueError(f"{path}: the forecast of {pair.id}: {error}") from None
    return forecasts


def run(
    pairs_file: Path,
    backend: str,
    options: dict[str, Any],
    report_dir: Path | None,
    compile_facts: bool = True,
    jobs: int | None = None,
    forecasts_file: Path | None = None,
) -> int:
    """`kernelcast eval`: exit 0 with metrics, 2 on bad input (nothing written), 1 when nothing could be forecast.

    Sides without compiler facts get them as the editor compiles them (unless not `compile_facts`),
    in `jobs` processes (default: the CPU count). With `forecasts_file`, the forecasts are read
    from it ({id, probabilities} lines) and judged alike: no backend runs."""
    try:
        pairs = list(read_pairs(pairs_file))
    except OSError as error:
        print(f"kernelcast eval: cannot read {pairs_file}: {error.strerror}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"kernelcast eval: {error}", file=sys.stderr)
        return 2
    if not pairs:
        print(f"kernelcast eval: {pairs_file} holds no pairs", file=sys.stderr)
        return 2
    if forecasts_file is not None:
        try:
            forecasts: list[Forecast | None] = list(forecasts_from_file(forecasts_file, pairs))
        except ValueError as error:
            print(f"kernelcast eval: {error}", file=sys.stderr)
            return 2
        failed: list[dict[str, str]] = []
    else:
        try:
            forecaster = Forecaster([backend], options=options)
        except (KeyError, LLMBackendError) as error:
            print(f"kernelcast eval: backend {backend!r} cannot run: {error.args[0]}", file=sys.stderr)
            return 2
        if compile_facts:
            report_fact_problems(add_facts(pairs, jobs or default_jobs()), "kernelcast eval")
        forecasts, failed = forecast_pairs(pairs, forecaster)
    done = [(pair, forecast) for pair, forecast in zip(pairs, forecasts) if forecast is not None]
    for failure in failed:
        print(f"kernelcast eval: {failure['id']}: {failure['error']}", file=sys.stderr)
    if not done:
        print(f"kernelcast eval: the backend could forecast none of the {len(pairs)} pairs", file=sys.stderr)
        return 1
    result = evaluate(
        [f.probabilities for _, f in done],
        [pair.speedup for pair, _ in done],
        kinds=[pair.kind for pair, _ in done],
        languages=[pair.language for pair, _ in done],
        groups=[pair.group for pair, _ in done],
        sources=[pair.source for pair, _ in done],
        intervals=[pair.ci95 for pair, _ in done],
    )
    first = done[0][1].provenance
    report = {
        "pairs_file": str(pairs_file),
        "pairs": len(pairs),
        "backend": first.get("backend", backend),
        "model_id": first.get("model_id", ""),
        "calibration_ids": sorted({str(f.provenance["calibration_id"]) for _, f in done if "calibration_id" in f.provenance}),
        "failed": failed,
        **result,
    }
    title = f"{report['backend']} on {pairs_file.name}"
    print(f"{title}: {len(done)} of {len(pairs)} pairs forecast")
    print(summary_table(result))
    if report_dir is None:
        print("(give --report DIR to keep metrics.json, report.md, predictions.jsonl and plots)")
        return 0
    report_dir.mkdir(parents=True, exist_ok=True)
    predictions = "".join(
        json.dumps(
            {
                "id": pair.id,
                "kind": pair.kind,
                "language": pair.language,
                "group": pair.group,
                "source": pair.source or UNNAMED_SOURCE,
                "speedup": pair.speedup,
                "true_bin": pair.true_bin,
                "probabilities": forecast.probabilities,
                "confidence": forecast.confidence,
                "calibration_id": forecast.provenance.get("calibration_id"),
                "facts_used": forecast.provenance.get("facts_used", []),
            }
        )
        + "\n"
        for pair, forecast in done
    )
    _write_text(report_dir / "predictions.jsonl", predictions)
    _write_text(report_dir / "metrics.json", json.dumps(report, indent=2) + "\n")
    try:
        plots, plot_note = write_plots(report_dir, result["overall"], title), ""
    except ImportError:
        plots, plot_note = [], f"No plots: matplotlib is not installed ({PLOT_INSTALL_HINT} adds it)."
    _write_text(report_dir / "report.md", report_markdown(report, plots, plot_note))
    print(f"wrote {report_dir}/: metrics.json, report.md, predictions.jsonl" + "".join(f", {name}" for name in plots))
    if plot_note:
        print(plot_note)
    return 0
