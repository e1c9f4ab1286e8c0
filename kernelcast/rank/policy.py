"""Which variants to measure next, and when to stop, from the forecasts of one run.

The forecasts of one run share a reference and a problem, so they err together. The policy
reads each forecast as its mean m in s = log2 S (uniform within each bin, the outer bins one
octave wide, as wire.py interpolates) and models the misses s - m of a run as jointly normal,
each the sum of
  - a miss shared by the whole run (sd SHARED_SD);
  - a miss in the forecasts' spread: a run's forecasts are often too close together or too far
    apart, so this part grows with m - the run's mean m (sd SLOPE_SD per octave);
  - a miss shared by the variants written in one language, less the mean of the run's languages'
    misses (sd LANGUAGE_SD; none in a run of one language): the forecaster errs by language, and
    an agent's CUDA and Triton solutions of one problem, or torch.compile's among them, miss apart;
  - a miss shared with the variants whose code is alike (sd NEIGHBOUR_SD, correlation
    exp(-(1 - l) / NEIGHBOUR_SCALE) for the likeness l of two variants' code, the Jaccard
    similarity of their sets of three-token runs): near-twins land together. An agent's or a
    sweep's variants are mostly near-twins of each other, and on the real-world solution groups
    code likeness told which misses go together better than the likeness of two forecasts did (half
    the squared difference of two misses 0.04 for likeness above 0.8 and 0.37 for 0.4-0.6, against
    0.19 for forecasts within a total-variation distance of 0.05);
  - the variant's own miss (sd OWN_SD).
Every measurement moves every open variant by what it shares with the measured one (Gaussian
conditioning). Misses are heavier-tailed than normal: on real-world code one variant of a run can
miss by six octaves while its near-twins land where forecast. A measured miss that lies beyond
ROBUST_Z sds of what the other measurements (or, alone, the prior) predict for it is therefore read
as mostly the variant's own: its own variance grows until the miss sits at ROBUST_Z sds (found in
a few rounds), so the further a miss lies out the less it moves the rest, while misses that agree
with each other still move the run together. The policy measures next the variant with the
largest expected improvement over the best s measured (before any measurement, the highest
forecast mean). A round of several GPUs is picked one at a time, each pick counted as measured
at its expected s, so a round spends no two GPUs on near-twins. The run is settled when no open
variant has more than SETTLE_CHANCE of beating the best.

The numbers come from the design half of the corpus groups (replay.HALF_SEED): the four spreads
by maximum likelihood of those groups' misses (`python -m workshop.training.rank_policy`, when
the near-twin term still read the likeness of forecasts and no language term was there;
benchmarks/results/rank_replay.md),
NEIGHBOUR_SCALE, ROBUST_Z and LANGUAGE_SD from the design halves of the synthetic and the
real-world groups together (a scale from 0.2 to 0.5 found as many on the real-world design half;
LANGUAGE_SD the most groups of the two halves at 20% measured among 0.5 to 1.0,
benchmarks/results/rank_replay.md). The held-out half
judges the policy (README). A forecast's own spread is not used: within a run it hardly told
whose miss would be larger (rank correlation 0.07 on the design half), and taking it as the own
miss's spread made the search chase wide forecasts and find the best less often than forecast
order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kernelcast.wire import NUM_BINS, _bin_bounds

SETTLE_CHANCE = 0.05
SHARED_SD = 0.51
SLOPE_SD = 0.47
LANGUAGE_SD = 0.8
NEIGHBOUR_SD = 0.33
NEIGHBOUR_SCALE = 0.3
OWN_SD = 0.24
ROBUST_Z = 1.0
ROBUST_ROUNDS = 3
_LOWS, _HIGHS = (np.array(bounds) for bounds in zip(*(_bin_bounds(index) for index in range(NUM_BINS))))
# A token of any kernel language: a name, a number or one other character.
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+|\S")


@dataclass(frozen=True)
class Run:
    """What the policy reads of one run: each variant's forecast, and how alike their code is."""

    probabilities: np.ndarray  # n × 8, rows summing to one
    likeness: np.ndarray  # n × n, code_likeness
    kin: np.ndarray  # n × n, same_language

    @classmethod
    def of(cls, forecasts: Sequence[Sequence[float]], texts: Sequence[str], languages: Sequence[str]) -> Run:
        return cls(as_matrix(forecasts), code_likeness(texts), same_language(languages))

    def __len__(self) -> int:
        return len(self.probabilities)


def as_matrix(rows: Sequence[Sequence[float]]) -> np.ndarray:
    """Forecast bin probabilities as an n × 8 matrix whose rows sum to one."""
    matrix = np.asarray(rows, dtype=float).reshape(len(rows), NUM_BINS)
    return matrix / matrix.sum(axis=1, keepdims=True)


def code_likeness(texts: Sequence[str]) -> np.ndarray:
    """The Jaccard similarity of each two texts' sets of three-token runs (1 on the diagonal): 1 for
    the same code however it is spaced, near 1 for one constant changed."""
    runs = []
    for text in texts:
        tokens = _TOKEN.findall(text)
        runs.append(set(zip(tokens, tokens[1:], tokens[2:])))
    likeness = np.eye(len(runs))
    for i, first in enumerate(runs):
        for j in range(i + 1, len(runs)):
            shared = len(first & runs[j])
            union = len(first) + len(runs[j]) - shared
            likeness[i, j] = likeness[j, i] = shared / union if union else 1.0
    return likeness


def same_language(languages: Sequence[str]) -> np.ndarray:
    """How two variants' languages go together once the run's shared miss is taken out: 1 - 1/k for
    one language, -1/k for two, of k in the run (the covariance of each language's own miss less
    their mean), so a run in one language has no language term."""
    names = np.asarray(languages, dtype=object)
    return (names[:, None] == names[None, :]) - 1.0 / max(len(set(languages)), 1)


def forecast_means(probabilities: np.ndarray) -> np.ndarray:
    return probabilities @ ((_LOWS + _HIGHS) / 2)


def centred_means(probabilities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The forecast means, and each less the run's mean: what the slope term of the misses grows with."""
    means = forecast_means(probabilities)
    return means, means - means.mean()


def best_measured(measured: Mapping[int, float]) -> tuple[int, float] | None:
    """(index, s) of the fastest correct variant measured so far."""
    if not measured:
        return None
    index = max(measured, key=lambda i: measured[i])
    return index, measured[index]


def miss_covariance(
    run: Run,
    centred: np.ndarray,
    rows: np.ndarray,
    cols: np.ndarray,
    spreads: tuple[float, float, float, float] | None = None,
) -> np.ndarray:
    """Prior covariance of the misses of variants `rows` with those of variants `cols`; `spreads`
    (shared, slope, near-twin, own sds) default to the shipped ones (workshop/training/rank_policy.py
    fits them), the language term is always LANGUAGE_SD."""
    shared, slope, neighbour, own = spreads or (SHARED_SD, SLOPE_SD, NEIGHBOUR_SD, OWN_SD)
    unlikeness = 1.0 - run.likeness[np.ix_(rows, cols)]
    return (
        shared**2
        + slope**2 * np.outer(centred[rows], centred[cols])
        + LANGUAGE_SD**2 * run.kin[np.ix_(rows, cols)]
        + neighbour**2 * np.exp(-unlikeness / NEIGHBOUR_SCALE)
        + own**2 * (rows[:, None] == cols[None, :])
    )


def _down_weight_outliers(among: np.ndarray, misses: np.ndarray, rounds: int = ROBUST_ROUNDS) -> np.ndarray:
    """The measured variants' covariance with the own variance of each outlying miss grown until
    the miss lies ROBUST_Z sds from what the others predict for it (leave-one-out, the others'
    outliers already down-weighted)."""
    extra = np.zeros(len(misses))
    for _ in range(rounds):
        inverse = np.linalg.inv(among + np.diag(extra))
        left_out = 1.0 / np.diag(inverse)
        residuals = (inverse @ misses) * left_out
        variances = left_out - extra
        extra = np.maximum(residuals**2 / ROBUST_Z**2 - variances, 0.0)
    return among + np.diag(extra)


def posterior(run: Run, measured: Mapping[int, float], rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sd of s for variants `rows`, given the measured s of others."""
    means, centred = centred_means(run.probabilities)
    wanted = np.asarray(rows, dtype=int)
    variances = np.diag(miss_covariance(run, centred, wanted, wanted))
    if not measured or not len(wanted):
        return means[wanted], np.sqrt(variances)
    done = np.array(list(measured), dtype=int)
    misses = np.array([measured[i] for i in done]) - means[done]
    across = miss_covariance(run, centred, wanted, done)
    weights = np.linalg.solve(_down_weight_outliers(miss_covariance(run, centred, done, done), misses), across.T)
    variances = variances - np.einsum("ij,ji->i", across, weights)
    return means[wanted] + weights.T @ misses, np.sqrt(np.maximum(variances, 1e-9))


def _normal_tail(z: np.ndarray) -> np.ndarray:
    """P(Z > z) for a standard normal Z."""
    return np.array([0.5 * math.erfc(value / math.sqrt(2)) for value in z])


def expected_improvement(means: np.ndarray, sds: np.ndarray, best: float) -> np.ndarray:
    """E[max(s - best, 0)] for s ~ Normal(means, sds): how much each variant may add to the best."""
    z = (means - best) / sds
    return sds * (z * (1 - _normal_tail(z)) + np.exp(-(z**2) / 2) / math.sqrt(2 * math.pi))


def _open_rows(run: Run, measured: Mapping[int, float], excluded: set[int]) -> list[int]:
    return [i for i in range(len(run)) if i not in measured and i not in excluded]


def open_chances(run: Run, measured: Mapping[int, float], excluded: set[int]) -> dict[int, float]:
    """Each unmeasured, not excluded variant's chance of beating the best measured (1.0 before any)."""
    rows = _open_rows(run, measured, excluded)
    found = best_measured(measured)
    if found is None or not rows:
        return dict.fromkeys(rows, 1.0)
    means, sds = posterior(run, measured, rows)
    return {i: float(c) for i, c in zip(rows, _normal_tail((found[1] - means) / sds))}


def pick_next(run: Run, measured: Mapping[int, float], excluded: set[int], count: int) -> list[int]:
    """Up to `count` variants to measure next: each the largest expected improvement over the best,
    the earlier picks counted as measured at their expected s; ties go to the higher expected s,
    then to the earlier variant. Before any measurement the first pick is the highest forecast mean."""
    assumed = dict(measured)
    picks: list[int] = []
    while len(picks) < count and (rows := _open_rows(run, assumed, excluded)):
        means, sds = posterior(run, assumed, rows)
        found = best_measured(assumed)
        gains = expected_improvement(means, sds, found[1]) if found else np.zeros(len(rows))
        best = min(range(len(rows)), key=lambda k: (-gains[k], -means[k], rows[k]))
        picks.append(rows[best])
        assumed[rows[best]] = float(means[best])
    return picks


def settled(run: Run, measured: Mapping[int, float], excluded: set[int], chance: float = SETTLE_CHANCE) -> bool:
    """True when some variant was measured and no unmeasured one has more than `chance` of beating it."""
    return bool(measured) and all(c <= chance for c in open_chances(run, measured, excluded).values())
