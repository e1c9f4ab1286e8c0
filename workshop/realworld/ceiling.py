"""How well the measured direction of a source's pairs can be forecast at all.

A label is log2 S measured with noise, and its 95% interval (the rounds' spread widened by the
run-to-run drift, `kernelcast/kernels_runtime/timing.py`) says how much. Where most of a source's
pairs differ by less than their noise, even an oracle that knew every pair's true S would often
disagree with the measured sign; no reading of code can do better than that oracle on these labels.

Its accuracy is estimated per source, from the labels alone: the true log2 S of the source's pairs
are taken to come from one distribution on a grid, fitted by maximum likelihood to the labels and
their noise (the nonparametric, Kiefer-Wolfowitz estimate, by EM); each pair's true value then has a
posterior, and the oracle is right on a pair with the posterior probability that its true sign is
the measured one (half where the true S is 1). Averaged over the pairs the direction metrics count
(|log2 S| >= DIRECTION_MIN_LOG2), that is the ceiling of direction accuracy on the source.

    python -m workshop realworld ceiling PAIRS.jsonl
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from kernelcast.evaluation import DIRECTION_MIN_LOG2, UNNAMED_SOURCE
from kernelcast.wire import LabelledPair

# True log2 S on a grid 0.02 octaves apart: finer than the narrowest noise kept (SD_FLOOR_LOG2
# is half a step), so a label always lies within one sd of a grid point.
GRID_LOG2 = np.linspace(-8.0, 8.0, 801)
SD_FLOOR_LOG2 = 0.01
EM_ROUNDS = 300
# A 95% interval is 2 × 1.96 sds of a normal wide.
INTERVAL_SDS = 2 * 1.959964


def label_sd(interval: tuple[float, float] | None) -> float | None:
    """The sd of a label's log2 S its 95% interval states; None without one."""
    if interval is None or not all(bound > 0 for bound in interval):
        return None
    return max(math.log2(interval[1] / interval[0]) / INTERVAL_SDS, SD_FLOOR_LOG2)


def oracle_direction_accuracy(log2_s: np.ndarray, sd: np.ndarray) -> float | None:
    """The share of labels whose measured sign an oracle knowing the true log2 S would give, over the
    labels with |log2 S| >= DIRECTION_MIN_LOG2; None when there are none."""
    counted = np.abs(log2_s) >= DIRECTION_MIN_LOG2
    if not counted.any():
        return None
    labels = np.clip(log2_s, GRID_LOG2[0], GRID_LOG2[-1])[:, None]
    likelihood = np.exp(-0.5 * ((labels - GRID_LOG2) / sd[:, None]) ** 2) / sd[:, None]
    prior = np.full(len(GRID_LOG2), 1.0 / len(GRID_LOG2))
    for _ in range(EM_ROUNDS):
        posterior = likelihood * prior
        posterior /= posterior.sum(axis=1, keepdims=True)
        prior = posterior.mean(axis=0)
    posterior = likelihood * prior
    posterior /= posterior.sum(axis=1, keepdims=True)
    agrees = np.where(GRID_LOG2 == 0.0, 0.5, (GRID_LOG2 > 0) == (labels > 0))
    return float((posterior * agrees)[counted].sum(axis=1).mean())


def ceilings(pairs: Iterable[LabelledPair]) -> dict[str, dict[str, float | int | None]]:
    """Per source: its pairs, those the direction metrics count, the median label sd and the
    oracle's direction accuracy; pairs without an interval are left out and counted."""
    labels: dict[str, list[tuple[float, float]]] = defaultdict(list)
    unmeasured: dict[str, int] = defaultdict(int)
    for pair in pairs:
        source = pair.source or UNNAMED_SOURCE
        sd = label_sd(pair.ci95)
        if sd is None:
            unmeasured[source] += 1
        else:
            labels[source].append((pair.log2_speedup, sd))
    table: dict[str, dict[str, float | int | None]] = {}
    for source in sorted(labels.keys() | unmeasured.keys()):
        rows = np.array(labels[source], dtype=float).reshape(-1, 2)
        table[source] = {
            "pairs": len(rows),
            "direction_pairs": int((np.abs(rows[:, 0]) >= DIRECTION_MIN_LOG2).sum()),
            "without_interval": unmeasured[source],
            "median_sd_log2": float(np.median(rows[:, 1])) if len(rows) else None,
            "oracle_direction": oracle_direction_accuracy(rows[:, 0], rows[:, 1]) if len(rows) else None,
        }
    return table


def table_text(table: dict[str, dict[str, float | int | None]]) -> str:
    """The per-source table and the mean over sources, as `kernelcast eval` weighs them."""

    def cell(value: float | int | None) -> str:
        return "–" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)

    columns = ("pairs", "direction_pairs", "median_sd_log2", "oracle_direction")
    lines = [f"{'source':24s}" + "".join(f"{name:>18s}" for name in columns)]
    lines += [f"{source:24s}" + "".join(f"{cell(row[name]):>18s}" for name in columns) for source, row in table.items()]
    reached = [row["oracle_direction"] for row in table.values() if row["oracle_direction"] is not None]
    if reached:
        lines.append(f"{'mean of ' + str(len(reached)) + ' sources':24s}{'':54s}{float(np.mean(reached)):>18.3f}")
    return "\n".join(lines)
