"""How the kinds whose lines read the weights' forecast alone fare with each source held out, in
about two minutes: a library's kernel against its problem (eager or compiled) and the problem under
torch.compile against itself eager (WEIGHTS_ONLY_KINDS).

    python -m workshop realworld pairs --out /tmp/rw.jsonl
    python -m workshop.training.weights_only_probe --pairs /tmp/rw.jsonl

Those lines read no trees, so a source held out is forecast from the weights' forecast through
lines and direction temperatures fitted on the other sources (`kernelbench_prior.fit_prior`, which
grows no trees for them) and judged as the refit judges it. A change to how these kinds are fitted
(`FIT_MODES`, the spread, the temperatures) is checked here before the hour a refit takes. The one
thing the other kinds lend these pairs is the widening of a kind and language too few sources
measured, fitted here on these kinds alone; where no pair is widened, a source whose pairs are all of
these kinds (flaggems, helion, liger, kernelbench-inductor) gets the refit's own numbers, and a source
with other kinds too is shown on these pairs alone.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from kernelcast.batch import add_facts, default_jobs, report_fact_problems
from kernelcast.evaluation import summary_table
from kernelcast.models.embedded.kernelbench_prior import WEIGHTS_ONLY_KINDS
from kernelcast.models.embedded.pair_kinds import pair_kind
from kernelcast.models.service.calibrated import Forecaster
from kernelcast.wire import Forecast, LabelledPair, read_pairs
from workshop.training.kernelbench_prior import fit_prior, fitted_kinds, judged, measured, metrics, shipped_calibration


def held_out_forecasts(pairs: list[LabelledPair], forecaster: Forecaster) -> list[Forecast]:
    """Each pair's forecast by lines fitted on the other sources' pairs, in the pairs' order."""
    data = measured(pairs, forecaster)
    fitted = fitted_kinds(data)
    every_source = {pair.source for pair in pairs}
    forecasts: dict[str, Forecast] = {}
    for source in sorted(every_source):
        prior = fit_prior(data, fitted, every_source - {source}, shipped_calibration(forecaster))
        own = [pair for pair in pairs if pair.source == source]
        forecasts.update(zip([pair.id for pair in own], judged(own, forecaster, prior)[1]))
    return [forecasts[pair.id] for pair in pairs]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workshop.training.weights_only_probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=Path, required=True, help="real-world pairs (python -m workshop realworld pairs)")
    args = parser.parse_args(argv)
    pairs = [pair for pair in read_pairs(args.pairs) if pair_kind(pair.request) in WEIGHTS_ONLY_KINDS]
    if len({pair.source for pair in pairs}) < 2:
        print(f"weights_only_probe: {args.pairs} has pairs of these kinds from fewer than two sources: none to hold out", file=sys.stderr)
        return 2
    report_fact_problems(add_facts(pairs, default_jobs()), "weights_only_probe")
    forecasts = held_out_forecasts(pairs, Forecaster(["embedded"]))
    print(f"{len(pairs)} pairs of {', '.join(WEIGHTS_ONLY_KINDS)}, each source forecast by lines fitted on the others:")
    print(summary_table(metrics(pairs, forecasts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
