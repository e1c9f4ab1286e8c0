"""Measure the spreads local learning assumes (models/service/calibration.py), and whether learning
from a user's first measurements makes that user's other forecasts better, so both can be made again:

    python -m workshop realworld pairs --out rw.jsonl
    python -m workshop.training.kernelbench_prior --pairs rw.jsonl --held-out-forecasts held_out.jsonl
    python -m workshop.training.local_learning --pairs rw.jsonl --forecasts held_out.jsonl

A source stands for a user: one author's kernels, timed on one GPU, forecast by a fit that never
saw them. A miss is measured log2 S (clipped to ±MISS_CLIP) less the forecast's median. The three
spreads are the root mean square over sources of a source's mean miss, the pooled sd of one
reference's mean miss around its source's, and of one pair's miss around its reference's.

The replay then plays each source as a user who measured k pairs: references in a random order,
every pair of each until k are measured; fit_local learns from those, and the pairs of the other
references are judged with and without it (the same pairs, each seed). Last, as a user who
measured one pair against each reference (chosen at random) and goes on against it: the other
pairs against the references are judged, each with its reference's own miss learnt. The forecasts read are
already calibrated, so the correction is applied to them without the shipped map between its
bias and its temperature, as the product applies it to raw forecasts. The spreads it uses are the
shipped ones, measured on these same sources.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from kernelcast.evaluation import metrics, normalised
from kernelcast.models.service import calibration
from kernelcast.wire import read_forecast_rows, read_pairs

# A source with fewer pairs says little about an author's bias.
MIN_SOURCE_PAIRS = 50
MEASURED = (10, 30, 100, 300)
ONE_EACH = "one each"
SEEDS = 8
# Judged on fewer left-over pairs than this, a source is left out at that k.
MIN_JUDGED = 20
JUDGED = ("direction_accuracy", "direction_ece", "within_one_bin")


class Source:
    """One source's pairs: forecasts (calibrated), speedups, misses and reference keys."""

    def __init__(self, rows: np.ndarray, speedups: np.ndarray, references: list[str]) -> None:
        self.rows, self.speedups, self.references = rows, speedups, np.array(references)
        clipped = np.clip(np.log2(speedups), -calibration.MISS_CLIP, calibration.MISS_CLIP)
        self.misses = clipped - calibration.median_log2(rows)


def read_sources(pairs_path: Path, forecasts_path: Path) -> dict[str, Source]:
    forecasts = read_forecast_rows(forecasts_path)
    by_source: dict[str, list] = defaultdict(list)
    for pair in read_pairs(pairs_path):
        if pair.id in forecasts:
            by_source[pair.source].append((forecasts[pair.id], pair.speedup, calibration.code_key(pair.request.reference.code)))
    return {
        name: Source(normalised([row for row, _, _ in found]), np.array([s for _, s, _ in found]), [key for _, _, key in found])
        for name, found in sorted(by_source.items())
        if len(found) >= MIN_SOURCE_PAIRS
    }


def spreads(sources: dict[str, Source]) -> dict[str, float]:
    """LOCAL_BIAS_SD, REFERENCE_MISS_SD and PAIR_MISS_SD as these sources show them."""
    source_means, between, within = [], [], []
    for source in sources.values():
        source_means.append(source.misses.mean())
        reference_means = []
        for key in dict.fromkeys(source.references):
            own = source.misses[source.references == key]
            reference_means.append(own.mean())
            if len(own) > 1:
                within.append(own.var(ddof=1))
        between.append(np.var(reference_means, ddof=1))
    return {
        "LOCAL_BIAS_SD": round(float(np.sqrt(np.mean(np.square(source_means)))), 2),
        "REFERENCE_MISS_SD": round(float(np.sqrt(np.mean(between))), 2),
        "PAIR_MISS_SD": round(float(np.sqrt(np.mean(within))), 2),
    }


def split(source: Source, measured: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the pairs a user measured first (whole references, until `measured`) and of the rest."""
    order = np.random.default_rng(seed).permutation(list(dict.fromkeys(source.references)))
    first: list[int] = []
    rest: list[int] = []
    for key in order:
        (first if len(first) < measured else rest).extend(np.flatnonzero(source.references == key))
    return np.array(first), np.array(rest)


def replay(source: Source, measured: int) -> dict[str, np.ndarray] | None:
    """Mean over seeds of the judged metrics on the pairs left over, without and with learning."""
    return _replayed(source, lambda seed: split(source, measured, seed))


def replay_one_each(source: Source) -> dict[str, np.ndarray] | None:
    """A user who measured one pair against each reference (chosen at random): the mean over seeds
    of the judged metrics of the reference's other pairs, without and with learning."""
    shared = [key for key in dict.fromkeys(source.references) if np.count_nonzero(source.references == key) > 1]

    def one_each(seed: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        first = {int(rng.choice(np.flatnonzero(source.references == key))) for key in shared}
        rest = [i for key in shared for i in np.flatnonzero(source.references == key) if i not in first]
        return np.array(sorted(first)), np.array(rest)

    return _replayed(source, one_each)


def _replayed(source: Source, choose: Callable[[int], tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray] | None:
    """For each seed, the pairs `choose` says were measured first and the rest: fit_local learns from
    the first, and the rest are judged without and with it (each with its reference's own miss,
    where that reference was measured); the mean over seeds, or None if too few are left."""
    without, learnt = [], []
    for seed in range(SEEDS):
        first, rest = choose(seed)
        if len(rest) < MIN_JUDGED:
            return None
        correction = calibration.fit_local([(source.rows[i], float(source.speedups[i]), str(source.references[i])) for i in first])
        rows = source.rows[rest].copy()
        for key in dict.fromkeys(source.references[rest]):
            against = source.references[rest] == key
            rows[against] = correction.apply_rows(rows[against], None, str(key))
        for judged, judged_rows in ((without, source.rows[rest]), (learnt, rows)):
            found = metrics(judged_rows, source.speedups[rest])
            judged.append([found[name] for name in JUDGED])
    return {"without": np.mean(without, axis=0), "with": np.mean(learnt, axis=0)}


def table(sources: dict[str, Source]) -> str:
    """Markdown: per source and k, direction / ECE / ±1 bin of the pairs left over, without → with."""
    columns = [f"{k} measured" for k in MEASURED] + ["one each, its others"]
    lines = ["| source | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    means: dict[int | str, list[dict[str, np.ndarray]]] = defaultdict(list)

    def cell(result: dict[str, np.ndarray] | None) -> str:
        if result is None:
            return "–"
        return " → ".join("/".join(f"{value:.3f}" for value in result[side]) for side in ("without", "with"))

    for name, source in sources.items():
        results = [replay(source, k) for k in MEASURED] + [replay_one_each(source)]
        for k, result in zip([*MEASURED, ONE_EACH], results):
            if result is not None:
                means[k].append(result)
        lines.append(f"| {name} ({len(source.speedups)}) | " + " | ".join(cell(result) for result in results) + " |")
    mean_cells = []
    for k in [*MEASURED, ONE_EACH]:
        found = means[k]
        mean = {side: np.mean([r[side] for r in found], axis=0) for side in ("without", "with")} if found else None
        mean_cells.append(f"{cell(mean)} ({len(found)})")
    lines.append("| mean (sources) | " + " | ".join(mean_cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workshop.training.local_learning", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=Path, required=True, help="the real-world pairs (python -m workshop realworld pairs)")
    parser.add_argument("--forecasts", type=Path, required=True, help="each pair's held-out forecast ({id, probabilities} a line)")
    args = parser.parse_args(argv)
    sources = read_sources(args.pairs, args.forecasts)
    if not sources:
        print(f"no source of {MIN_SOURCE_PAIRS} or more forecast pairs in {args.pairs}", file=sys.stderr)
        return 2
    print(", ".join(f"{name} = {value}" for name, value in spreads(sources).items()) + f" ({len(sources)} sources)\n")
    print("direction / ECE / ±1 bin of the pairs not measured, without → with local learning\n")
    print(table(sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
