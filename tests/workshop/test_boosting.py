"""The embedded forecaster's boosted trees: numpy inference, lightgbm training and export, the blend with the MLP.

Growing trees needs lightgbm (in the `[test]` and `[train]` extras); inference and the blend need numpy only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernelcast.models.embedded.backend import Prediction, TimeModel, blend
from kernelcast.models.embedded.boosted import ROWS_AT_ONCE, SIDE_COUNT, BoostedTrees, pair_rows, toward_direction
from kernelcast.models.embedded.features import FEATURE_NAMES
from kernelcast.models.embedded.spread import forecast_columns, learned_sd, log_squared_error
from workshop.training.boosting import TreeSettings, averaged, export, train_direction, train_spread, train_trees

try:
    import lightgbm
except ImportError:
    lightgbm = None
needs_lightgbm = pytest.mark.skipif(lightgbm is None, reason="growing trees needs lightgbm: pip install 'kernelcast[train]'")
SMALL = TreeSettings(rounds=60, leaves=15, min_pairs_in_leaf=5, threads=1)
SMALL_DIRECTION = TreeSettings(rounds=60, leaves=15, min_pairs_in_leaf=5, threads=1, objective="binary")

# One tree: column 0 ≤ 1.5 → (column 2 ≤ −1 → leaf 0, else leaf 1), else leaf 2; a second tree is one leaf.
HAND_MADE = BoostedTrees(
    roots=np.array([0, ~3]),
    feature=np.array([0, 2]),
    threshold=np.array([1.5, -1.0]),
    left=np.array([1, ~0]),
    right=np.array([~2, ~1]),
    leaf_value=np.array([10.0, 20.0, 30.0, 0.5]),
)


def _synthetic(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Pairs whose log2 time per side is 1.5·(feature 3) − (feature 7)."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, 2, len(FEATURE_NAMES)))
    time = 1.5 * features[..., 3] - features[..., 7]
    return features, time[:, 0] - time[:, 1]


def test_rows_walk_down_the_branches_their_values_choose() -> None:
    rows = np.array([[1.5, 0, -1.0], [1.0, 0, 0.0], [2.0, 0, -5.0]])
    assert HAND_MADE.raw(rows) == pytest.approx([10.5, 20.5, 30.5])  # thresholds are inclusive, as lightgbm's


def test_rows_read_in_many_chunks_sum_as_each_row_read_alone() -> None:
    rows = np.random.default_rng(1).normal(size=(2 * ROWS_AT_ONCE + 3, 3)) * 2
    alone = np.concatenate([HAND_MADE.raw(rows[i : i + 1]) for i in range(len(rows))])
    assert np.array_equal(HAND_MADE.raw(rows), alone)
    assert HAND_MADE.raw(rows[:0]).shape == (0,)


def test_averaged_forests_sum_to_the_mean_of_their_sums() -> None:
    # A second forest: one tree splitting column 1, then a one-leaf tree.
    other = BoostedTrees(
        roots=np.array([0, ~2]),
        feature=np.array([1]),
        threshold=np.array([0.0]),
        left=np.array([~0]),
        right=np.array([~1]),
        leaf_value=np.array([-4.0, 6.0, 1.0]),
    )
    rows = np.array([[1.5, -1.0, -1.0], [1.0, 2.0, 0.0], [2.0, 0.0, -5.0]])
    mean = averaged([HAND_MADE, other, HAND_MADE])
    assert len(mean.roots) == 6
    assert mean.raw(rows) == pytest.approx((2 * HAND_MADE.raw(rows) + other.raw(rows)) / 3)


def test_pair_rows_hold_both_sides_their_difference_and_the_context_once() -> None:
    features, _ = _synthetic(3)
    rows = pair_rows(features)
    assert rows.shape == (3, 3 * SIDE_COUNT + len(FEATURE_NAMES) - SIDE_COUNT)
    assert np.array_equal(rows[:, 2 * SIDE_COUNT : 3 * SIDE_COUNT], features[:, 1, :SIDE_COUNT] - features[:, 0, :SIDE_COUNT])


def test_a_blend_is_a_two_part_mixture() -> None:
    mlp = Prediction(np.array([1.0, -2.0]), np.array([0.5, 1.0]), np.array([[3.0, 2.0], [0.0, 2.0]]))
    mixed = blend(mlp, np.array([2.0, -2.0]), weight=0.25)
    assert mixed.mean == pytest.approx([1.25, -2.0])
    assert mixed.sd == pytest.approx(np.sqrt([0.25 + 0.25 * 0.75 * 1.0, 1.0]))
    assert mixed.log2_time[:, 0] - mixed.log2_time[:, 1] == pytest.approx(mixed.mean)


@needs_lightgbm
def test_exported_trees_forecast_what_lightgbm_does() -> None:
    features, s = _synthetic(300)
    rows = pair_rows(features)
    booster = lightgbm.train({"objective": "l2", "num_leaves": 15, "min_data_in_leaf": 5, "verbose": -1}, lightgbm.Dataset(rows, s), 40)
    assert export(booster.dump_model()).raw(rows) == pytest.approx(booster.predict(rows), abs=1e-12)


@needs_lightgbm
def test_trees_find_a_known_rule_on_held_out_pairs_and_are_antisymmetric() -> None:
    features, s = _synthetic(1500)
    trees = train_trees(features[:1200], s[:1200], np.ones(1200), SMALL, seed=0)
    forecast = trees.predict(features[1200:])
    assert np.corrcoef(forecast, s[1200:])[0, 1] > 0.8
    assert trees.predict(features[1200:, ::-1]) == pytest.approx(-forecast, abs=1e-12)


@needs_lightgbm
def test_trees_are_reproducible_from_a_seed() -> None:
    features, s = _synthetic(400)
    weights = np.ones(400)
    first, again, other = (train_trees(features, s, weights, SMALL, seed) for seed in (3, 3, 4))
    assert all(np.array_equal(a, b) for a, b in zip(first.to_arrays().values(), again.to_arrays().values()))
    assert not np.array_equal(first.leaf_value, other.leaf_value)


def test_a_direction_moves_a_forecast_by_at_most_its_step() -> None:
    moved = toward_direction(np.array([0.05, 0.05, 1.0, -2.0]), np.array([-30.0, 0.0, 30.0, 1.0]), step=0.25)
    assert moved == pytest.approx([-0.2, 0.05, 1.25, -2.0 + 0.25 * np.tanh(1.0)])


@needs_lightgbm
def test_direction_trees_call_the_faster_side_of_held_out_pairs_with_antisymmetric_log_odds() -> None:
    features, s = _synthetic(1500)
    trees = train_direction(features[:1200], s[:1200], np.ones(1200), SMALL_DIRECTION, seed=0)
    log_odds = trees.predict(features[1200:])
    assert np.mean(np.sign(log_odds) == np.sign(s[1200:])) > 0.85
    assert trees.predict(features[1200:, ::-1]) == pytest.approx(-log_odds, abs=1e-12)
    sure = np.abs(log_odds) > 2
    assert sure.any() and np.mean(np.sign(log_odds[sure]) == np.sign(s[1200:][sure])) > 0.95  # sure log-odds are right more often
    with pytest.raises(ValueError, match="objective 'binary'"):
        train_direction(features, s, np.ones(1500), SMALL, seed=0)


def _small_mlp() -> TimeModel:
    rng = np.random.default_rng(1)
    members, hidden, width = 2, 4, len(FEATURE_NAMES)
    return TimeModel(
        {
            "mu": np.zeros(width),
            "sd": np.ones(width),
            "w1": rng.normal(size=(members, width, hidden)),
            "b1": np.zeros((members, hidden)),
            "w2": rng.normal(size=(members, hidden, hidden)),
            "b2": np.zeros((members, hidden)),
            "w3": rng.normal(size=(members, hidden, 2)),
            "b3": np.zeros((members, 2)),
            "alpha": np.ones(members),
            "sigma0": np.full(members, 0.3),
        },
        {"features": list(FEATURE_NAMES)},
    )


@needs_lightgbm
def test_a_model_with_trees_saves_and_loads_to_the_same_forecasts(tmp_path: Path) -> None:
    features, s = _synthetic(400)
    trees = train_trees(features, s, np.ones(400), SMALL, seed=0)
    mlp = _small_mlp()
    model = mlp.with_trees(trees, 0.5, SMALL.__dict__)
    model.save(tmp_path / "w.npz")
    loaded = TimeModel.load(tmp_path / "w.npz")
    assert loaded.model_id == model.model_id != mlp.model_id and loaded.model_id.startswith("time-mlp-trees-")
    mixed = blend(mlp.predict(features), trees.predict(features), 0.5)
    assert loaded.predict(features).mean == pytest.approx(mixed.mean, abs=1e-4)
    assert loaded.predict(features[:, ::-1]).mean == pytest.approx(-loaded.predict(features).mean, abs=1e-9)


@needs_lightgbm
def test_spread_trees_set_the_blends_sd_and_save_with_it(tmp_path: Path) -> None:
    features, s = _synthetic(400)
    mlp = _small_mlp()
    with_trees = mlp.with_trees(train_trees(features, s, np.ones(400), SMALL, seed=0), 0.5, SMALL.__dict__)
    blended, mlp_alone = with_trees.predict(features), mlp.predict(features)
    forecasts = forecast_columns(mlp_alone.mean, mlp_alone.sd, with_trees.trees.predict(features), blended.mean, blended.sd)
    misses = np.where(features[:, 0, 5] > 0, 1.0, 0.1) * np.random.default_rng(3).normal(size=400)
    spread_trees = train_spread(features, forecasts, log_squared_error(blended.mean + misses, blended.mean), SMALL, seed=0)
    model = with_trees.with_spread(spread_trees, SMALL.__dict__)
    model.save(tmp_path / "w.npz")
    loaded = TimeModel.load(tmp_path / "w.npz")
    assert loaded.model_id == model.model_id != with_trees.model_id and loaded.model_id.startswith("time-mlp-trees-spread-")
    forecast = loaded.predict(features)
    assert forecast.mean == pytest.approx(blended.mean, abs=1e-4)  # the spread trees touch the sd alone
    assert forecast.sd == pytest.approx(learned_sd(spread_trees, features, forecasts), rel=1e-4)
    assert np.median(forecast.sd[features[:, 0, 5] > 0]) > 2 * np.median(forecast.sd[features[:, 0, 5] <= 0])
    assert loaded.predict(features[:, ::-1]).sd == pytest.approx(forecast.sd, rel=1e-9)
    with pytest.raises(ValueError, match="these weights have no trees"):
        TimeModel({**mlp.arrays, **spread_trees.to_arrays("spread_")}, mlp.meta)


@needs_lightgbm
def test_direction_trees_move_the_trees_forecast_before_the_blend_and_save_with_it(tmp_path: Path) -> None:
    features, s = _synthetic(400)
    trees, direction = (
        train_trees(features, s, np.ones(400), SMALL, seed=0),
        train_direction(features, s, np.ones(400), SMALL_DIRECTION, seed=0),
    )
    mlp = _small_mlp()
    model = mlp.with_trees(trees, 0.5, SMALL.__dict__).with_direction(direction, 0.25, SMALL_DIRECTION.__dict__)
    model.save(tmp_path / "w.npz")
    loaded = TimeModel.load(tmp_path / "w.npz")
    assert loaded.model_id == model.model_id and loaded.model_id.startswith("time-mlp-trees-direction-")
    moved = toward_direction(trees.predict(features), direction.predict(features), 0.25)
    assert loaded.predict(features).mean == pytest.approx(blend(mlp.predict(features), moved, 0.5).mean, abs=1e-4)
    assert loaded.predict(features[:, ::-1]).mean == pytest.approx(-loaded.predict(features).mean, abs=1e-9)
    with pytest.raises(ValueError, match="these weights have no trees"):
        TimeModel({**mlp.arrays, **direction.to_arrays("direction_")}, mlp.meta)
