"""Training the embedded forecaster: the torch learner, its export to numpy, the folds and the train command.

Needs torch (the `[train]` extra); CI has none, so these skip there with the reason.
The torch-free parts (features, shipped weights) are in test_embedded_model.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch: pip install 'kernelcast[train]'")
# Imported after the skip: the training modules import torch.

from kernelcast.evaluation import nll  # noqa: E402
from kernelcast.models.embedded.backend import TimeModel  # noqa: E402
from kernelcast.models.embedded.features import FEATURE_NAMES, FLOOR_INDEX  # noqa: E402
from kernelcast.models.embedded.spread import learned_sd  # noqa: E402
from kernelcast.models.service.calibration import true_bins  # noqa: E402
from kernelcast.wire import read_pairs  # noqa: E402
from workshop.training import train as train_cli  # noqa: E402
from workshop.training.boosting import TreeSettings  # noqa: E402
from workshop.training.learner import Settings, _Ensemble, _standardisation, export, train  # noqa: E402

PAIRS = Path(__file__).parents[1] / "data" / "pairs_small.jsonl"
SMALL = Settings(members=3, hidden=16, epochs=8, batch=64)
SMALL_TREES = TreeSettings(rounds=20, leaves=7, min_pairs_in_leaf=5, threads=1)
SMALL_RECIPE = train_cli.Recipe(SMALL, SMALL_TREES, direction=replace(SMALL_TREES, objective="binary"))


def _synthetic(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Pairs whose log2 time per side is 1.5·(feature 3) − (feature 7): a rule the learner must find."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, 2, len(FEATURE_NAMES)))
    features[..., FLOOR_INDEX] = 0.0
    time = 1.5 * features[..., 3] - features[..., 7]
    return features, time[:, 0] - time[:, 1]


def test_training_is_reproducible_from_a_seed() -> None:
    features, s = _synthetic()
    weights = np.ones(len(s))
    first = train(features, s, weights, SMALL, seed=3, meta={})
    again = train(features, s, weights, SMALL, seed=3, meta={})
    other = train(features, s, weights, SMALL, seed=4, meta={})
    assert all(np.array_equal(first.arrays[name], again.arrays[name]) for name in first.arrays)
    assert first.model_id == again.model_id != other.model_id


def test_the_learner_finds_a_known_rule_on_held_out_pairs() -> None:
    features, s = _synthetic(1200)
    model = train(features[:1000], s[:1000], np.ones(1000), Settings(members=3, hidden=32, epochs=40, batch=64), seed=0, meta={})
    prediction = model.predict(features[1000:])
    assert np.mean(np.sign(prediction.mean) == np.sign(s[1000:])) > 0.9
    assert np.corrcoef(prediction.mean, s[1000:])[0, 1] > 0.9


@pytest.mark.parametrize("pair_hidden", [0, 8])
def test_numpy_inference_agrees_with_torch_and_is_antisymmetric(pair_hidden: int) -> None:
    features, _ = _synthetic(50)
    torch.manual_seed(0)
    ensemble = _Ensemble(3, len(FEATURE_NAMES), 16, dropout=0.0, pair_hidden=pair_hidden).eval()
    mu, sd = _standardisation(features)
    model = TimeModel(export(ensemble, mu, sd), {"features": list(FEATURE_NAMES)})
    z = torch.tensor((features - mu) / sd, dtype=torch.float32).expand(3, -1, -1, -1)
    floors = torch.tensor(features[..., FLOOR_INDEX], dtype=torch.float32).expand(3, -1, -1)
    with torch.no_grad():
        means, sds = ensemble(z, floors)
    prediction = model.predict(features)
    assert prediction.mean == pytest.approx(means.numpy().mean(axis=0), abs=1e-4)
    expected_sd = np.sqrt((sds.numpy() ** 2).mean(axis=0) + means.numpy().var(axis=0))
    assert prediction.sd == pytest.approx(expected_sd, abs=1e-4)
    swapped = model.predict(features[:, ::-1])
    assert swapped.mean == pytest.approx(-prediction.mean) and swapped.sd == pytest.approx(prediction.sd)


def test_folds_hold_out_whole_operation_families() -> None:
    ops = np.array(
        [f"corpus:op{i % 7}" for i in range(70)]
        + [f"cuda-l1:L1/T{i % 11}" for i in range(44)]
        + ["corpus:row_sum", "corpus:row_max", "corpus:gemm", "corpus:gemm_bias_relu"]
    )
    fold = train_cli.folds_of(ops, 3, seed=1)
    for op in set(ops):
        assert len(set(fold[ops == op])) == 1
    assert fold[-4] == fold[-3] and fold[-2] == fold[-1]
    assert np.array_equal(fold, train_cli.folds_of(ops, 3, seed=1)) and len(set(fold)) == 3


def _dataset(n: int = 240) -> train_cli.Dataset:
    """Synthetic pairs of four operations, half of them edit pairs, shaped like featurized corpus pairs."""
    features, s = _synthetic(n)
    ops = np.array([f"corpus:op{i % 4}" for i in range(n)])
    return train_cli.Dataset(
        features=features,
        log2_speedup=s,
        speedup=2.0**s,
        op=ops,
        source=np.full(n, "corpus"),
        gpu=np.full(n, "H100-SXM"),
        gpu_class=np.full(n, "hopper"),
        kind=np.where(np.arange(n) // 4 % 2 == 0, "edit", "cross"),
        language=np.full(n, "cuda"),
        group=ops,
        variant=np.full(n, ""),
    )


def test_edit_pairs_weigh_more_than_cross_pairs_of_their_operation() -> None:
    data = _dataset()
    weights = train_cli.pair_weights(data, cuda_l1_weight=0.5)
    same_op = data.op == "corpus:op0"
    edit, cross = weights[same_op & (data.kind == "edit")], weights[same_op & (data.kind == "cross")]
    assert np.allclose(edit, train_cli.EDIT_WEIGHT * cross[0]) and np.allclose(cross, cross[0])


def test_folds_trained_in_parallel_processes_forecast_as_sequential_ones(capsys: pytest.CaptureFixture[str]) -> None:
    data = _dataset()
    fold, parts = train_cli.held_out(data, 2, {"H100-SXM"}, SMALL_RECIPE, 0, 0.5, None, jobs=1)
    same_fold, parallel = train_cli.held_out(data, 2, {"H100-SXM"}, SMALL_RECIPE, 0, 0.5, None, jobs=2)
    assert np.array_equal(fold, same_fold) and set(fold) == {0, 1}
    assert set(parts) == {"mlp_mean", "mlp_sd", "trees_mean", "direction_log_odds"}
    assert all(np.allclose(parts[name], parallel[name], atol=1e-12) for name in parts)
    log = capsys.readouterr().out
    assert log.count(": MLP trained") == 4 and log.count(": trees trained") == 4 and log.count(": direction trees trained") == 4
    _, alone = train_cli.held_out(data, 2, {"H100-SXM"}, replace(SMALL_RECIPE, tree_weight=0.0), 0, 0.5, None)
    assert set(alone) == {"mlp_mean", "mlp_sd"} and np.array_equal(alone["mlp_mean"], parts["mlp_mean"])
    _, no_direction = train_cli.held_out(data, 2, {"H100-SXM"}, replace(SMALL_RECIPE, direction_step=0.0), 0, 0.5, None)
    assert set(no_direction) == {"mlp_mean", "mlp_sd", "trees_mean"}


def test_folds_train_only_the_learners_whose_forecasts_are_not_given(capsys: pytest.CaptureFixture[str]) -> None:
    data = _dataset()
    _, parts = train_cli.held_out(data, 2, {"H100-SXM"}, SMALL_RECIPE, 0, 0.5, None)
    capsys.readouterr()
    given = {name: parts[name] for name in ("mlp_mean", "mlp_sd", "trees_mean")}
    _, completed = train_cli.held_out(data, 2, {"H100-SXM"}, SMALL_RECIPE, 0, 0.5, None, given=given)
    log = capsys.readouterr().out
    assert log.count(": direction trees trained") == 2 and "MLP" not in log and ": trees trained" not in log
    assert all(np.array_equal(completed[name], parts[name]) for name in parts)


def test_direction_trees_train_on_measured_pairs_alone(capsys: pytest.CaptureFixture[str]) -> None:
    data = _dataset()
    data.variant = np.where(np.arange(len(data)) % 3 == 0, "without facts", "")
    train_cli.held_out(data, 2, {"H100-SXM"}, replace(SMALL_RECIPE, mlp=replace(SMALL, epochs=1)), 0, 0.5, None)
    log = capsys.readouterr().out
    fold = train_cli.folds_of(data.op, 2, 0)
    for k in range(2):
        every, measured = (
            ((fold != k) & (data.gpu == "H100-SXM")).sum(),
            ((fold != k) & (data.gpu == "H100-SXM") & (data.variant == "")).sum(),
        )
        assert (
            f"fold {k + 1}/2: trees trained on {every} pairs" in log
            and f"fold {k + 1}/2: direction trees trained on {measured} pairs" in log
        )


def _noisy_held_out(n: int = 1200) -> tuple[train_cli.Dataset, train_cli.HeldOut]:
    """Held-out forecasts that miss by 0.1 where feature 5 of both sides is below 0, by 1.0 elsewhere."""
    data = _dataset(n)
    rng = np.random.default_rng(2)
    noisy = data.features[:, :, 5].min(axis=1) >= 0
    miss = rng.normal(size=n) * np.where(noisy, 1.0, 0.1)
    forecast = data.log2_speedup + miss
    parts = {
        "mlp_mean": forecast,
        "mlp_sd": np.full(n, 0.4),
        "trees_mean": forecast + 0.01 * rng.normal(size=n),
        "direction_log_odds": np.zeros(n),
    }
    return data, (np.arange(n) % 2, parts)


def test_spread_trees_learn_which_held_out_forecasts_miss_by_more_and_read_sides_either_way() -> None:
    data, held = _noisy_held_out()
    fit = np.arange(len(data)) < 1000
    trees = train_cli.fit_spread(data, held, SMALL_RECIPE, fit, seed=0)
    blended, forecasts = train_cli._blended(held[1], SMALL_RECIPE)
    assert trees is not None and forecasts is not None
    sd = learned_sd(trees, data.features[~fit], forecasts[~fit])
    noisy = data.features[~fit, :, 5].min(axis=1) >= 0
    assert np.median(sd[noisy]) > 0.6 and np.median(sd[~noisy]) < 0.25  # the misses' sd: 1.0 and 0.1
    assert learned_sd(trees, data.features[~fit, ::-1], forecasts[~fit]) == pytest.approx(sd, abs=1e-12)
    assert train_cli.fit_spread(data, held, replace(SMALL_RECIPE, spread=None), fit, seed=0) is None


def test_held_out_spread_is_cross_fitted_and_sharpens_the_forecasts_it_can_trust() -> None:
    data, held = _noisy_held_out()
    everything = np.ones(len(data), dtype=bool)
    learned = train_cli.held_out_forecasts(data, held, SMALL_RECIPE, everything, seed=0)
    own = train_cli.held_out_forecasts(data, held, replace(SMALL_RECIPE, spread=None), everything, seed=0)
    quiet = data.features[:, :, 5].min(axis=1) < 0
    assert learned.max(axis=1)[quiet].mean() > own.max(axis=1)[quiet].mean() + 0.1  # sharper where misses are small
    assert learned.max(axis=1)[~quiet].mean() < own.max(axis=1)[~quiet].mean()  # wider where they are large
    bins = true_bins(data.speedup)
    assert nll(learned, bins).mean() < nll(own, bins).mean() - 0.1
    assert np.allclose(learned.sum(axis=1), 1.0)


def test_train_command_writes_weights_calibration_and_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "--pairs",
        str(PAIRS),
        "--out",
        str(tmp_path / "w.npz"),
        "--calibration-out",
        str(tmp_path / "c.json"),
        "--report",
        str(tmp_path / "report"),
        "--folds",
        "2",
        "--epochs",
        "2",
        "--members",
        "2",
        "--tree-rounds",
        "20",
    ]
    assert train_cli.main(args) == 0
    model = TimeModel.load(tmp_path / "w.npz")
    assert model.meta["seed"] == 0 and model.meta["inputs"]["pairs"] == [str(PAIRS)]
    assert model.trees is not None and model.meta["tree_weight"] == train_cli.TREE_WEIGHT
    assert model.direction is not None and model.meta["direction_step"] == train_cli.DIRECTION_STEP
    assert model.spread is not None and model.model_id.startswith("time-mlp-trees-direction-spread-")
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["sets"]["corpus (H100)"]["raw"]["n"] == 18
    assert "| corpus (H100) | raw | 18 |" in (tmp_path / "report" / "report.md").read_text()

    # Judged again from the saved held-out forecasts, no fold trained: the same report and spread trees.
    again = [
        "--pairs",
        str(PAIRS),
        "--held-out",
        str(tmp_path / "report" / "held_out.npz"),
        "--out",
        str(tmp_path / "w2.npz"),
        "--calibration-out",
        str(tmp_path / "c2.json"),
        "--report",
        str(tmp_path / "again"),
        "--folds",
        "2",
        "--epochs",
        "2",
        "--members",
        "2",
        "--tree-rounds",
        "20",
    ]
    assert train_cli.main(again) == 0
    assert json.loads((tmp_path / "again" / "report.json").read_text())["sets"] == report["sets"]
    assert (tmp_path / "c2.json").read_text() == (tmp_path / "c.json").read_text()
    assert np.array_equal(TimeModel.load(tmp_path / "w2.npz").spread.leaf_value, model.spread.leaf_value)

    # The folds alone (a device call), then the judging from their forecasts (elsewhere): the same report.
    folds = [
        "--pairs",
        str(PAIRS),
        "--folds-only",
        "--report",
        str(tmp_path / "folds"),
        "--folds",
        "2",
        "--epochs",
        "2",
        "--members",
        "2",
        "--tree-rounds",
        "20",
    ]
    assert train_cli.main(folds) == 0
    assert sorted(p.name for p in (tmp_path / "folds").iterdir()) == ["held_out.npz"]
    judged = [
        "--pairs",
        str(PAIRS),
        "--held-out",
        str(tmp_path / "folds" / "held_out.npz"),
        "--calibration-out",
        str(tmp_path / "c3.json"),
        "--report",
        str(tmp_path / "judged"),
        "--folds",
        "2",
    ]
    assert train_cli.main(judged) == 0
    assert json.loads((tmp_path / "judged" / "report.json").read_text())["sets"] == report["sets"]

    # Without the direction trees' forecasts (a run before they were a learner): only they are trained.
    with np.load(tmp_path / "folds" / "held_out.npz") as stored:
        np.savez(tmp_path / "older.npz", **{name: stored[name] for name in stored.files if name != "direction_log_odds"})
    capsys.readouterr()
    completed = [
        "--pairs",
        str(PAIRS),
        "--held-out",
        str(tmp_path / "older.npz"),
        "--calibration-out",
        str(tmp_path / "c4.json"),
        "--report",
        str(tmp_path / "completed"),
        "--folds",
        "2",
    ]
    assert train_cli.main(completed) == 0
    log = capsys.readouterr().err
    assert log.count(": direction trees trained") == 2 and "MLP trained" not in log and ": trees trained" not in log
    assert json.loads((tmp_path / "completed" / "report.json").read_text())["sets"] == report["sets"]


def test_train_command_refuses_held_out_forecasts_of_other_folds_or_pairs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "--pairs",
        str(PAIRS),
        "--report",
        str(tmp_path / "r"),
        "--calibration-out",
        str(tmp_path / "c.json"),
        "--folds",
        "2",
        "--epochs",
        "1",
        "--members",
        "1",
        "--tree-rounds",
        "5",
    ]
    assert train_cli.main(args) == 0
    held = str(tmp_path / "r" / "held_out.npz")
    with pytest.raises(SystemExit):
        train_cli.main([*args, "--held-out", held, "--seed", "5"])
    assert "its folds are not those of --folds 2 --seed 5" in capsys.readouterr().err
    np.savez(
        tmp_path / "short.npz", fold=np.zeros(3), log2_speedup=np.zeros(3), mlp_mean=np.zeros(3), mlp_sd=np.ones(3), trees_mean=np.zeros(3)
    )
    with pytest.raises(SystemExit):
        train_cli.main([*args, "--held-out", str(tmp_path / "short.npz")])
    assert "other pairs than --pairs and --cuda-l1 give (3 pairs, not 33)" in capsys.readouterr().err
    with np.load(held) as stored:
        np.savez(tmp_path / "no_mlp.npz", **{name: stored[name] for name in stored.files if name != "mlp_mean"})
    with pytest.raises(SystemExit):
        train_cli.main([*args, "--held-out", str(tmp_path / "no_mlp.npz")])
    assert "no mlp_mean: not a held_out.npz of this command" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train_cli.main(["--pairs", str(PAIRS), "--no-eval", "--out", str(tmp_path / "w.npz")])
    assert "give --held-out FILE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train_cli.main(["--pairs", str(PAIRS), "--folds-only"])
    assert "--folds-only writes DIR/held_out.npz and nothing else" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train_cli.main(["--pairs", str(PAIRS), "--featurize-only"])
    assert "--featurize-only fills the feature cache: give --feature-cache DIR" in capsys.readouterr().err


def test_featurize_only_fills_the_cache_that_a_later_run_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert train_cli.main(["--pairs", str(PAIRS), "--feature-cache", str(tmp_path / "fc"), "--featurize-only"]) == 0
    assert [path.name.startswith("pairs-") for path in (tmp_path / "fc").iterdir()] == [True]
    assert "33 pairs" in capsys.readouterr().err and not (tmp_path / "report").exists()

    def featurized_again(*_: object) -> None:
        raise AssertionError("the pairs were featurized again")

    monkeypatch.setattr(train_cli, "_pairs_file", featurized_again)
    assert len(train_cli.load([PAIRS], [], tmp_path / "fc")) == 33


def test_respelled_copy_drops_only_generator_spellings_of_cuda_sides() -> None:
    pair = next(iter(read_pairs(PAIRS)))
    cuda = (
        'extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y, int n) {\n'
        "    y[(long long)r * n + c] = x[(size_t) c];\n}"
    )
    triton = "def k(x_ptr):\n    x = tl.load(x_ptr)  # __restrict__ is only a word here"
    request = replace(
        pair.request,
        reference=replace(pair.request.reference, code=cuda, language="cuda"),
        candidate=replace(pair.request.candidate, code=triton, language="triton"),
    )
    copy = train_cli.respelled(replace(pair, request=request))
    assert copy.request.reference.code == 'extern "C" __global__ void k(const float* x, float* y, int n) {\n    y[r * n + c] = x[c];\n}'
    assert copy.request.candidate.code == triton
    assert copy.request.reference.facts == pair.request.reference.facts and copy.speedup == pair.speedup
    assert copy.id.endswith("/respelled")


def test_editor_copy_without_sass_has_none_in_any_kernels_facts() -> None:
    """Features read the heaviest launch's own facts: a copy without the SASS mix must lose it there too."""
    pair = next(iter(read_pairs(PAIRS)))
    sass = {"total": 100, "global_loads": 4}
    facts = {
        "registers": 32,
        "sass": sass,
        "launches": [{"kernel": "k", "grid": [8], "block": [128]}],
        "kernels": {"k": {"registers": 32, "sass": sass}, "other": {"registers": 40, "sass": sass}},
    }
    request = replace(pair.request, candidate=replace(pair.request.candidate, facts=facts))
    copy = train_cli.as_editor_sends(replace(pair, request=request), "facts without SASS").request.candidate.facts
    assert "sass" not in copy and all("sass" not in own for own in copy["kernels"].values())
    assert copy["kernels"]["other"]["registers"] == 40 and copy["launches"] == facts["launches"]
    assert facts["kernels"]["k"]["sass"] == sass  # the original pair is left as it was


def test_featurizing_in_processes_gives_the_same_rows_in_the_same_order(monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = list(read_pairs(PAIRS))
    labels = [f"copy {index % 3}" for index in range(len(pairs))]
    monkeypatch.setattr(train_cli, "MIN_ROWS_PER_JOB", 4)  # 18 pairs: four chunks in two processes
    alone, together = train_cli.featurize(pairs, labels), train_cli.featurize(pairs, labels, jobs=2)
    for name in train_cli.Dataset.__dataclass_fields__:
        assert np.array_equal(getattr(alone, name), getattr(together, name)), name
