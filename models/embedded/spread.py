"""The embedded forecast's spread, learned from how far forecasts of unseen operations missed.

The MLP learns its spread on the pairs it trains on. On an operation it never saw it misses
by more, and by more for some pairs than for others: a PyTorch reference whose library call
it cannot cost, a knob it reads only through side effects. Trees fitted to the log squared
error of held-out forecasts (cross-fitted in training/train.py) say which forecasts to trust,
from the pair's features and the learners' own forecasts and spreads. On the corpus's held-out
operations this raised the accuracy of forecasts that are not deferred
(workshop/training/README.md). It is symmetric: swapping the sides leaves it unchanged.
"""

from __future__ import annotations

import numpy as np

from kernelcast.models.embedded.boosted import BoostedTrees, pair_rows

# For z ~ N(0, 1), E[log z²] = −1.27: a fitted mean of log r² is log σ² − 1.27.
GAUSSIAN_LOG_SQUARE = -1.2704
# Added to r² before the log: an exact hit would be −∞.
SQUARED_ERROR_FLOOR = 1e-3
MIN_SD, MAX_SD = 0.05, 5.0


def forecast_columns(mlp_mean: np.ndarray, mlp_sd: np.ndarray, trees_mean: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """(N, 6) what the learners said, as sizes only (the same with the sides swapped): the MLP's and
    the trees' |forecast|, their distance, the MLP's spread, and the blend's |forecast| and spread."""
    return np.stack([np.abs(mlp_mean), np.abs(trees_mean), np.abs(trees_mean - mlp_mean), mlp_sd, np.abs(mean), sd], axis=1)


def spread_rows(features: np.ndarray, forecasts: np.ndarray) -> np.ndarray:
    """(2N, columns) rows of each pair read both ways round: first reference → candidate, then the reverse."""
    return np.concatenate(
        [
            np.concatenate([forecasts, pair_rows(features)], axis=1),
            np.concatenate([forecasts, pair_rows(features[:, ::-1])], axis=1),
        ]
    )


def log_squared_error(log2_speedups: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """What the spread trees are fitted to."""
    return np.log((log2_speedups - mean) ** 2 + SQUARED_ERROR_FLOOR)


def learned_sd(trees: BoostedTrees, features: np.ndarray, forecasts: np.ndarray) -> np.ndarray:
    """(N,) sd of s = log2 S: the trees' log σ², averaged over both ways round."""
    both_ways = trees.raw(spread_rows(features, forecasts))
    log_variance = 0.5 * (both_ways[: len(features)] + both_ways[len(features) :]) - GAUSSIAN_LOG_SQUARE
    return np.clip(np.exp(0.5 * log_variance), MIN_SD, MAX_SD)
