"""Fit the embedded forecaster's line for KernelBench solutions (models/weights/kernelbench_prior.json)
from measured real-world pairs, and judge it with each source held out in turn.

    python -m workshop realworld pairs --out /tmp/rw.jsonl
    python -m workshop.training.kernelbench_prior --pairs /tmp/rw.jsonl [--out PATH] [--report FILE]

The pairs it fits on are those the line applies to (a `ModelNew` with its own CUDA or Triton
kernels against the PyTorch problem: llm-vs-eager and llm-vs-compile). The weights' forecast
mean m, taken without any line, is regressed on the measured log2 S by least squares, every
source weighing the same whatever its number of pairs; the line's spread is the weighted
residual spread. Judging: for each source, the line fitted on the other sources alone is
shipped to a forecaster, which forecasts that source's pairs (all its kinds) as `kernelcast
eval` does, compiler facts included; the table holds every metric per held-out source, with
and without the line. The shipped line is then fitted on every source.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.batch import add_facts, default_jobs
from kernelcast.evaluation import evaluate, forecast_pairs, summary_table
from kernelcast.models.embedded.kernelbench_prior import PRIOR_PATH, KernelBenchPrior
from kernelcast.models.service.calibrated import Forecaster
from kernelcast.wire import Forecast, LabelledPair, read_pairs
from workshop.training import CLIP_LOG2


def fit(means: Sequence[float], log2_speedups: Sequence[float], sources: Sequence[str], meta: dict[str, Any]) -> KernelBenchPrior:
    """Weighted least squares of log2 S on the forecast mean, each source weighing the same."""
    counts: dict[str, int] = defaultdict(int)
    for source in sources:
        counts[source] += 1
    weights = np.array([1.0 / counts[source] for source in sources])
    x = np.asarray(means, dtype=float)
    y = np.clip(np.asarray(log2_speedups, dtype=float), -CLIP_LOG2, CLIP_LOG2)
    design = np.stack([np.ones_like(x), x], axis=1)
    root = np.sqrt(weights)[:, None]
    (intercept, slope), *_ = np.linalg.lstsq(design * root, y * root[:, 0], rcond=None)
    residuals = y - (intercept + slope * x)
    sd = math.sqrt(float(np.sum(weights * residuals**2) / np.sum(weights)))
    return KernelBenchPrior(round(float(intercept), 4), round(float(slope), 4), round(sd, 4), meta)


def forecast_all(pairs: list[LabelledPair], forecaster: Forecaster) -> list[Forecast]:
    """Every pair's forecast, in order: the embedded forecaster answers every pair, so a gap is an error, never skipped."""
    forecasts, failed = forecast_pairs(pairs, forecaster)
    if failed:
        raise RuntimeError(f"the embedded forecaster failed on {len(failed)} pairs, first: {failed[0]}")
    return [forecast for forecast in forecasts if forecast is not None]


def raw_means(pairs: list[LabelledPair], forecaster: Forecaster) -> list[float]:
    """The weights' forecast mean of each pair, with no line applied."""
    forecaster.backends["embedded"].prior = None  # type: ignore[attr-defined]
    return [float(forecast.provenance["details"]["mean_log2"]) for forecast in forecast_all(pairs, forecaster)]


def judged(pairs: list[LabelledPair], forecaster: Forecaster, prior: KernelBenchPrior | None) -> dict[str, Any]:
    forecaster.backends["embedded"].prior = prior  # type: ignore[attr-defined]
    return evaluate(
        [forecast.probabilities for forecast in forecast_all(pairs, forecaster)],
        [pair.speedup for pair in pairs],
        kinds=[pair.kind for pair in pairs],
        groups=[pair.group for pair in pairs],
        sources=[pair.source for pair in pairs],
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workshop.training.kernelbench_prior", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=Path, required=True, help="real-world pairs (python -m workshop realworld pairs)")
    parser.add_argument("--out", type=Path, default=PRIOR_PATH)
    parser.add_argument("--report", type=Path, default=None, help="write the held-out-source tables here (markdown)")
    args = parser.parse_args(argv)
    pairs = list(read_pairs(args.pairs))
    add_facts(pairs, default_jobs())
    forecaster = Forecaster(["embedded"])
    fitted = [pair for pair in pairs if KernelBenchPrior.applies(pair.request)]
    means = raw_means(fitted, forecaster)
    sources = sorted({pair.source for pair in fitted})
    lines = [f"# The KernelBench line, each source held out ({len(fitted)} of {len(pairs)} pairs fit it, {len(sources)} sources)", ""]
    held_out: dict[str, Any] = {}
    for source in sources:
        rest = [i for i, pair in enumerate(fitted) if pair.source != source]
        prior = fit([means[i] for i in rest], [fitted[i].log2_speedup for i in rest], [fitted[i].source for i in rest], {})
        own = [pair for pair in pairs if pair.source == source]
        with_line, without = judged(own, forecaster, prior), judged(own, forecaster, None)
        held_out[source] = {
            "line": prior.to_json(),
            "with": with_line["overall"],
            "without": without["overall"],
            "by_kind": with_line["by_kind"],
        }
        lines += [
            f"## {source} held out: line {prior.intercept:+.2f} + {prior.slope:.2f}·m, sd {prior.sd:.2f}",
            "",
            "with the line:",
            "```",
            summary_table(with_line),
            "```",
            "without:",
            "```",
            summary_table(without),
            "```",
            "",
        ]
    meta = {
        "pairs": len(fitted),
        "sources": sources,
        "held_out_direction_accuracy": {source: held_out[source]["with"]["direction_accuracy"] for source in sources},
    }
    shipped = fit(means, [pair.log2_speedup for pair in fitted], [pair.source for pair in fitted], meta)
    args.out.write_text(json.dumps(shipped.to_json(), indent=1, sort_keys=True) + "\n")
    lines += [f"Shipped: {shipped.intercept:+.3f} + {shipped.slope:.3f}·m, sd {shipped.sd:.3f} → {args.out}"]
    text = "\n".join(lines)
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
