"""Fit the measuring policy's spreads (kernelcast/rank/policy.py) by maximum likelihood of the
misses in the design half of recorded groups, so its numbers can be made again:

    python -m workshop corpus pairs --out pairs.jsonl
    python -m workshop.training.rank_policy --pairs pairs.jsonl
    python -m workshop.training.rank_policy --pairs rw.jsonl --pool-sources --forecasts held_out.jsonl

The misses s - m of one group are read as jointly normal with the policy's covariance (a shared
miss, a slope in the forecasts' spread, near-twins in code at NEIGHBOUR_SCALE, the variant's own), and
the four sds that make them most likely are found by Nelder-Mead on their logs, every group
weighing the same. The near-twin scale, ROBUST_Z and LANGUAGE_SD are not fitted here (policy.py
says how they were chosen); the language term is held at LANGUAGE_SD.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kernelcast.rank import policy, replay

SPREADS = ("SHARED_SD", "SLOPE_SD", "NEIGHBOUR_SD", "OWN_SD")


Group = tuple[np.ndarray, np.ndarray, policy.Run]


def group_misses(run: policy.Run, log2_speedups: np.ndarray) -> Group:
    """A group's misses, its forecast means less their mean, and its run: what the policy's
    covariance (policy.miss_covariance) reads."""
    means, centred = policy.centred_means(run.probabilities)
    return log2_speedups - means, centred, run


def negative_log_likelihood(spreads: Sequence[float], groups: Sequence[Group]) -> float:
    """Mean over groups of -log N(misses; 0, the policy's covariance with `spreads`), less the constant."""
    shared, slope, neighbour, own = (float(value) for value in spreads)
    total = 0.0
    for misses, centred, run in groups:
        every = np.arange(len(misses))
        covariance = policy.miss_covariance(run, centred, every, every, (shared, slope, neighbour, own))
        _, log_determinant = np.linalg.slogdet(covariance)
        total += 0.5 * (log_determinant + misses @ np.linalg.solve(covariance, misses))
    return total / len(groups)


def fit_spreads(groups: Sequence[Group]) -> dict[str, float]:
    """The four sds that make the groups' misses most likely, started from the shipped ones."""
    from scipy.optimize import minimize

    start = np.log([getattr(policy, name) for name in SPREADS])
    found = minimize(
        lambda logs: negative_log_likelihood(np.exp(logs), groups),
        start,
        method="Nelder-Mead",
        options={"maxiter": 600, "xatol": 1e-3, "fatol": 1e-5},
    )
    return {name: round(float(value), 3) for name, value in zip(SPREADS, np.exp(found.x))}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workshop.training.rank_policy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=Path, required=True, help="labelled pairs, as `kernelcast rank --replay` reads")
    parser.add_argument("--forecasts", type=Path, help="each pair's forecast ({id, probabilities} a line); else the embedded forecaster's")
    parser.add_argument("--pool-sources", action="store_true", help="a group is one problem's pairs from every source")
    parser.add_argument("--half", choices=("design", "held-out", "all"), default="design", help="which half of the groups to fit on")
    args = parser.parse_args(argv)
    groups = replay.read_groups(args.pairs, pool_sources=args.pool_sources)
    if args.forecasts:
        replay.read_forecasts(args.forecasts, groups)
    else:
        from kernelcast.models.service.calibrated import Forecaster

        replay.forecast_groups(groups, Forecaster(["embedded"]), lambda done, total: None)
    chosen = [group for group in groups if args.half in ("all", group.half)]
    if not chosen:
        print(f"no group of {replay.MIN_GROUP} or more in the {args.half} half of {args.pairs}", file=sys.stderr)
        return 2
    fitted = fit_spreads([group_misses(group.run, group.log2_speedups) for group in chosen])
    print(f"{len(chosen)} groups ({args.half}): " + ", ".join(f"{name} = {value}" for name, value in fitted.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
