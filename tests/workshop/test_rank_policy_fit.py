"""Fitting the measuring policy's spreads (workshop/training/rank_policy.py): the likelihood finds
the sds that made the misses, and the command fits on recorded groups."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernelcast.rank import policy
from workshop.training import rank_policy

DATA = Path(__file__).parents[1] / "data"


def _simulated_groups(spreads: tuple[float, float, float, float], count: int, size: int, seed: int) -> list[rank_policy.Group]:
    """Groups of near-twins (four kernels with forecasts random over the bins, each variant one of
    them a little changed: its forecast mixed with a little of another random one, its code's
    likeness to its kernel's other variants lowered as much) whose misses are drawn from the
    policy's covariance with `spreads`. Without twins the near-twin and own misses would both be
    only variance, and could not be told apart."""
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(count):
        kernels = rng.integers(0, 4, size)
        bases = rng.dirichlet(np.full(policy.NUM_BINS, 0.3), size=4)[kernels]
        mix = rng.uniform(0.0, 0.15, size)
        others = rng.dirichlet(np.full(policy.NUM_BINS, 0.3), size=size)
        probabilities = policy.as_matrix((1 - mix[:, None]) * bases + mix[:, None] * others)
        likeness = np.where(kernels[:, None] == kernels[None, :], 1.0 - mix[:, None] - mix[None, :], rng.uniform(0.0, 0.2, (size, size)))
        likeness = np.triu(likeness, 1) + np.triu(likeness, 1).T + np.eye(size)
        run = policy.Run(probabilities, likeness, policy.same_language(["cuda"] * size))
        _, centred, _ = rank_policy.group_misses(run, np.zeros(size))
        every = np.arange(size)
        covariance = policy.miss_covariance(run, centred, every, every, spreads)
        misses = rng.multivariate_normal(np.zeros(size), covariance)
        groups.append(rank_policy.group_misses(run, policy.forecast_means(probabilities) + misses))
    return groups


def test_the_likelihood_recovers_the_spreads_that_made_the_misses() -> None:
    made = (0.6, 0.3, 0.5, 0.25)
    fitted = rank_policy.fit_spreads(_simulated_groups(made, count=300, size=12, seed=3))
    for name, value in zip(rank_policy.SPREADS, made):
        assert fitted[name] == pytest.approx(value, rel=0.2), fitted
    # The true spreads are more likely than the shipped start, which differs from them.
    groups = _simulated_groups(made, count=100, size=12, seed=4)
    shipped = [getattr(policy, name) for name in rank_policy.SPREADS]
    assert rank_policy.negative_log_likelihood(made, groups) < rank_policy.negative_log_likelihood(shipped, groups)


def test_the_command_fits_recorded_groups_and_says_when_a_half_has_none(capsys: pytest.CaptureFixture[str]) -> None:
    assert rank_policy.main(["--pairs", str(DATA / "pairs_rank_groups.jsonl"), "--half", "all"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 groups (all): SHARED_SD = ")
    assert rank_policy.main(["--pairs", str(DATA / "pairs_small.jsonl")]) == 2
    assert "no group of 10 or more in the design half" in capsys.readouterr().err
