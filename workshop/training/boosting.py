"""The boosted trees of models/embedded/boosted.py and models/embedded/spread.py: fitted with lightgbm, exported to numpy node arrays.

Each pair is shown both ways round (reference, candidate → s; candidate, reference → −s) so the
trees learn no side's role; the forecast halves g(a, b) − g(b, a), antisymmetric exactly, and
the spread averages both ways, symmetric exactly. The direction trees see the same rows with
"is the second side faster?" as the label: their halved difference is an antisymmetric log-odds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernelcast.models.embedded.boosted import BoostedTrees, pair_rows
from kernelcast.models.embedded.spread import spread_rows
from workshop.training import CLIP_LOG2


@dataclass(frozen=True)
class TreeSettings:
    """How to grow the trees; the defaults made the shipped ones (stored in the weights' meta)."""

    rounds: int = 500
    learning_rate: float = 0.05
    leaves: int = 255
    min_pairs_in_leaf: int = 100
    feature_fraction: float = 0.5
    bagging_fraction: float = 0.7
    l2: float = 1.0
    # lightgbm's objective: "l2" for a log-speedup or a log squared error, "binary" for a direction.
    objective: str = "l2"
    # lightgbm's sums depend on how rows are split among threads: fixed, a seed gives the same trees.
    threads: int = 2


# The spread trees: smaller, fitted to the held-out pairs of the training GPUs only (~100k for the corpus).
SPREAD_SETTINGS = TreeSettings(rounds=300, leaves=31, min_pairs_in_leaf=200, feature_fraction=0.7, l2=0.0)
# The direction trees (models/embedded/boosted.py): a classifier of which side is faster, on the measured pairs.
DIRECTION_SETTINGS = TreeSettings(rounds=400, learning_rate=0.07, leaves=63, objective="binary")


def train_trees(features: np.ndarray, log2_speedups: np.ndarray, weights: np.ndarray, settings: TreeSettings, seed: int) -> BoostedTrees:
    """Trees fitted to (N, 2, F) pair features and measured log2 S (clipped as the MLP's are); deterministic given `seed`."""
    target = np.clip(log2_speedups, -CLIP_LOG2, CLIP_LOG2)
    return _grow_both_ways(features, target, -target, weights, settings, seed)


def train_direction(
    features: np.ndarray, log2_speedups: np.ndarray, weights: np.ndarray, settings: TreeSettings, seed: int
) -> BoostedTrees:
    """Trees fitted to which side of (N, 2, F) pairs is faster (settings.objective "binary"); their
    BoostedTrees.predict is the log-odds that the candidate is; deterministic given `seed`."""
    if settings.objective != "binary":
        raise ValueError(f"direction trees classify: objective 'binary', not {settings.objective!r}")
    return _grow_both_ways(features, (log2_speedups > 0).astype(float), (log2_speedups < 0).astype(float), weights, settings, seed)


def train_spread(
    features: np.ndarray, forecasts: np.ndarray, log_squared_errors: np.ndarray, settings: TreeSettings, seed: int
) -> BoostedTrees:
    """Spread trees (models/embedded/spread.py) fitted to held-out forecasts' log squared errors; deterministic given `seed`."""
    return grow(spread_rows(features, forecasts), np.concatenate([log_squared_errors] * 2), np.ones(2 * len(features)), settings, seed)


def _grow_both_ways(
    features: np.ndarray, forward: np.ndarray, swapped: np.ndarray, weights: np.ndarray, settings: TreeSettings, seed: int
) -> BoostedTrees:
    """Trees on each pair read both ways round: `forward` labels (reference, candidate), `swapped` the reverse."""
    rows = np.concatenate([pair_rows(features), pair_rows(features[:, ::-1])])
    return grow(rows, np.concatenate([forward, swapped]), np.concatenate([weights, weights]), settings, seed)


def grow(rows: np.ndarray, target: np.ndarray, weights: np.ndarray, settings: TreeSettings, seed: int) -> BoostedTrees:
    import lightgbm

    parameters: dict[str, Any] = {
        "objective": settings.objective,
        "learning_rate": settings.learning_rate,
        "num_leaves": settings.leaves,
        "min_data_in_leaf": settings.min_pairs_in_leaf,
        "feature_fraction": settings.feature_fraction,
        "bagging_fraction": settings.bagging_fraction,
        "bagging_freq": 1,
        "lambda_l2": settings.l2,
        "num_threads": settings.threads,
        "seed": seed,
        "deterministic": True,
        "force_row_wise": True,
        "verbose": -1,
    }
    data = lightgbm.Dataset(rows, target, weight=weights / weights.mean())
    booster = lightgbm.train(parameters, data, num_boost_round=settings.rounds)
    return export(booster.dump_model())


def averaged(forests: Sequence[BoostedTrees]) -> BoostedTrees:
    """One forest whose sum is the mean of `forests`' sums: all their trees, each leaf divided by
    their number. Forests grown with different seeds (bagging) miss apart; their mean misses less."""
    arrays: dict[str, list[np.ndarray]] = {name: [] for name in BoostedTrees.ARRAYS}
    nodes = leaves = 0
    for forest in forests:
        for name in ("roots", "left", "right"):  # a child ≥ 0 is a node, < 0 is ~leaf: past the forests before
            children = getattr(forest, name)
            arrays[name].append(np.where(children >= 0, children + nodes, children - leaves))
        arrays["feature"].append(forest.feature)
        arrays["threshold"].append(forest.threshold)
        arrays["leaf_value"].append(forest.leaf_value / len(forests))
        nodes, leaves = nodes + len(forest.feature), leaves + len(forest.leaf_value)
    return BoostedTrees.from_arrays({name: np.concatenate(parts) for name, parts in arrays.items()})


def export(dump: dict[str, Any]) -> BoostedTrees:
    """lightgbm's dump_model() → flat node arrays (numerical `<=` splits only: the features have no NaN or categories)."""
    arrays: dict[str, list[Any]] = {name: [] for name in BoostedTrees.ARRAYS}

    def visit(node: dict[str, Any]) -> int:
        if "leaf_value" in node:
            arrays["leaf_value"].append(node["leaf_value"])
            return ~(len(arrays["leaf_value"]) - 1)
        if node.get("decision_type") != "<=":
            raise ValueError(f"unsupported split {node.get('decision_type')!r}")
        index = len(arrays["feature"])
        arrays["feature"].append(node["split_feature"])
        arrays["threshold"].append(node["threshold"])
        arrays["left"].append(None)  # children are numbered after their parent
        arrays["right"].append(None)
        arrays["left"][index], arrays["right"][index] = visit(node["left_child"]), visit(node["right_child"])
        return index

    arrays["roots"] = [visit(tree["tree_structure"]) for tree in dump["tree_info"]]
    return BoostedTrees.from_arrays({name: np.array(values) for name, values in arrays.items()})
