"""Boosted regression trees on a pair, the embedded forecaster's second learner, in numpy.

The per-side MLP (models/embedded/backend.py) must learn an edit's effect as the difference of two
smooth functions; trees split on the difference of a feature between the two sides directly
("the candidate reads fewer global values"), a rule that carries over to operations they
never saw. Their forecast is antisymmetric by construction: g(ref, cand) − g(cand, ref),
halved. Trained by lightgbm (workshop/training/boosting.py); inference here needs only numpy.

A regression to log S spends its splits on how far apart two kernels are; an edit that changes
little is then a coin toss. Direction trees, a classifier of which side is faster read the same
antisymmetric way, give log-odds that move the regression's forecast toward the side they favour,
by a bounded step (`toward_direction`): on held-out operations this raised the direction accuracy
of edit pairs without costing the bins (workshop/training/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernelcast.models.embedded.features import SIDE_NAMES

SIDE_COUNT = len(SIDE_NAMES)

# How many rows walk the trees at once: the walks' index arrays (rows × trees) then stay in cache.
# A refit reads some 28,000 rows through 1,800 trees at a time: 13.8 s in one go, 3.3 s at 128 rows
# (64 to 256 alike), the same sums to the bit, since each row's leaves are summed on their own.
ROWS_AT_ONCE = 128


def pair_rows(features: np.ndarray) -> np.ndarray:
    """(N, 2, F) pair features → (N, 3·sides + context) rows: reference, candidate, their difference, the shared context."""
    reference, candidate = features[:, 0, :SIDE_COUNT], features[:, 1, :SIDE_COUNT]
    return np.concatenate([reference, candidate, candidate - reference, features[:, 0, SIDE_COUNT:]], axis=1)


@dataclass(frozen=True)
class BoostedTrees:
    """All trees as flat node arrays. A child index ≥ 0 is a node, < 0 is leaf ~index."""

    roots: np.ndarray  # (trees,) index of each tree's first node, or ~leaf for a one-leaf tree
    feature: np.ndarray  # (nodes,) column of pair_rows each node tests
    threshold: np.ndarray  # (nodes,) goes left when value <= threshold
    left: np.ndarray
    right: np.ndarray
    leaf_value: np.ndarray  # (leaves,)

    ARRAYS = ("roots", "feature", "threshold", "left", "right", "leaf_value")

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str = "") -> BoostedTrees:
        integer = {"roots", "feature", "left", "right"}
        return cls(**{name: np.asarray(arrays[prefix + name], dtype=np.int64 if name in integer else np.float64) for name in cls.ARRAYS})

    def to_arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        return {prefix + name: getattr(self, name) for name in self.ARRAYS}

    def raw(self, rows: np.ndarray) -> np.ndarray:
        """Sum of every tree's leaf for each row of `rows` (N, columns), ROWS_AT_ONCE rows at a time."""
        # At least one chunk, so that no rows also go through the walk: (0,) in the leaves' dtype.
        starts = range(0, max(len(rows), 1), ROWS_AT_ONCE)
        return np.concatenate([self._leaf_sums(rows[start : start + ROWS_AT_ONCE]) for start in starts])

    def _leaf_sums(self, rows: np.ndarray) -> np.ndarray:
        """All (row, tree) walks go down together, one level a step; a walk that reached its leaf
        drops out, so a step costs the walks still going, not all of them (most leaves are
        far shallower than the deepest)."""
        count, trees = len(rows), len(self.roots)
        values = rows.ravel()
        node = np.tile(self.roots, count)
        row_start = np.repeat(np.arange(count) * rows.shape[1], trees)
        walking = np.flatnonzero(node >= 0)
        while walking.size:
            current = node[walking]
            goes_left = values[row_start[walking] + self.feature[current]] <= self.threshold[current]
            node[walking] = np.where(goes_left, self.left[current], self.right[current])
            walking = walking[node[walking] >= 0]
        return self.leaf_value[~node].reshape(count, trees).sum(axis=1)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """(N,) forecast of s = log2 S for (N, 2, F) pair features; swapping the sides negates it exactly."""
        both_ways = self.raw(np.concatenate([pair_rows(features), pair_rows(features[:, ::-1])]))
        return 0.5 * (both_ways[: len(features)] - both_ways[len(features) :])


def toward_direction(trees_mean: np.ndarray, log_odds: np.ndarray, step: float) -> np.ndarray:
    """The regression trees' forecast moved toward the side the direction trees favour, by at
    most `step` octaves (tanh of their log-odds): a sure classifier cannot push a forecast far."""
    return trees_mean + step * np.tanh(log_odds)


def forecast_rows(
    features: np.ndarray, mean: np.ndarray, sd: np.ndarray, flags: np.ndarray, tokens: np.ndarray | None = None
) -> np.ndarray:
    """`pair_rows` with what the weights forecast for the pair (mean and spread of s) and per-pair
    flags (which kind of pair it is): rows for trees that correct the weights' forecast. `tokens`,
    (N, 2, K) per-side columns (features.token_counts), follow as reference, candidate and their difference."""
    rows = [pair_rows(features), mean[:, None], sd[:, None], flags]
    if tokens is not None:
        rows += [tokens[:, 0], tokens[:, 1], tokens[:, 1] - tokens[:, 0]]
    return np.concatenate(rows, axis=1)


def forecast_rows_both_ways(
    features: np.ndarray, mean: np.ndarray, sd: np.ndarray, flags: np.ndarray, tokens: np.ndarray | None = None
) -> np.ndarray:
    """(2N, …) `forecast_rows` of each pair as given, then of each with its sides swapped and the weights' mean negated."""
    swapped = None if tokens is None else tokens[:, ::-1]
    return np.concatenate([forecast_rows(features, mean, sd, flags, tokens), forecast_rows(features[:, ::-1], -mean, sd, flags, swapped)])


def corrected(
    trees: BoostedTrees, features: np.ndarray, mean: np.ndarray, sd: np.ndarray, flags: np.ndarray, tokens: np.ndarray | None = None
) -> np.ndarray:
    """(N,) forecast of s by trees grown on `forecast_rows_both_ways`, their two readings halved
    apart: antisymmetric exactly, as `BoostedTrees.predict`."""
    return read_both_ways(trees, forecast_rows_both_ways(features, mean, sd, flags, tokens))


def read_both_ways(trees: BoostedTrees, rows: np.ndarray) -> np.ndarray:
    """(N,) `corrected` from rows already built, so several trees read one set of rows."""
    both_ways = trees.raw(rows)
    count = len(rows) // 2
    return 0.5 * (both_ways[:count] - both_ways[count:])
