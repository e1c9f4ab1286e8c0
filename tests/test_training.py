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

from kernelcast.models.embedded import TimeModel
from kernelcast.models.features import FEATURE_NAMES, FLOOR_INDEX
from kernelcast.models.training import train as train_cli
from kernelcast.models.training.boosting import TreeSettings
from kernelcast.models.training.learner import Settings, _Ensemble, _standardisation, export, train
from kernelcast.pairs import read_pairs

PAIRS = Path(__file__).parent / "data" / "pairs_small.jsonl"
SMALL = Settings(members=3, hidden=16, epochs=8, batch=64)
SMALL_RECIPE = train_cli.Recipe(SMALL, TreeSettings(rounds=20, leaves=7, min_pairs_in_leaf=5, threads=1))


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
    ops = np.array([f"corpus:op{i % 7}" for i in range(70)] + [f"cuda-l1:L1/T{i % 11}" for i in range(44)]
                   + ["corpus:row_sum", "corpus:row_max", "corpus:gemm", "corpus:gemm_bias_relu"])
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
        features=features, log2_speedup=s, speedup=2.0**s, op=ops, source=np.full(n, "corpus"), gpu=np.full(n, "H100-SXM"),
        gpu_class=np.full(n, "hopper"), kind=np.where(np.arange(n) // 4 % 2 == 0, "edit", "cross"), language=np.full(n, "cuda"),
        group=ops, variant=np.full(n, ""),
    )


def test_edit_pairs_weigh_more_than_cross_pairs_of_their_operation() -> None:
    data = _dataset()
    weights = train_cli.pair_weights(data, cuda_l1_weight=0.5)
    same_op = data.op == "corpus:op0"
    edit, cross = weights[same_op & (data.kind == "edit")], weights[same_op & (data.kind == "cross")]
    assert np.allclose(edit, train_cli.EDIT_WEIGHT * cross[0]) and np.allclose(cross, cross[0])


def test_folds_trained_in_parallel_processes_forecast_as_sequential_ones(capsys: pytest.CaptureFixture[str]) -> None:
    data = _dataset()
    sequential, fold, parts = train_cli.held_out(data, 2, {"H100-SXM"}, SMALL_RECIPE, 0, 0.5, None, jobs=1)
    parallel, same_fold, _ = train_cli.held_out(data, 2, {"H100-SXM"}, SMALL_RECIPE, 0, 0.5, None, jobs=2)
    assert np.array_equal(fold, same_fold) and set(fold) == {0, 1}
    assert np.allclose(sequential, parallel, atol=1e-12) and np.allclose(sequential.sum(axis=1), 1.0)
    log = capsys.readouterr().out
    assert log.count(": MLP trained") == 4 and log.count(": trees trained") == 4
    mlp_alone, _, alone_parts = train_cli.held_out(data, 2, {"H100-SXM"}, replace(SMALL_RECIPE, tree_weight=0.0), 0, 0.5, None)
    assert not np.allclose(mlp_alone, sequential, atol=1e-3) and "trees_mean" not in alone_parts
    assert np.array_equal(alone_parts["mlp_mean"], parts["mlp_mean"])  # the blend is made from the learners' own forecasts


def test_train_command_writes_weights_calibration_and_a_report(tmp_path: Path) -> None:
    args = ["--pairs", str(PAIRS), "--out", str(tmp_path / "w.npz"), "--calibration-out", str(tmp_path / "c.json"),
            "--report", str(tmp_path / "report"), "--folds", "2", "--epochs", "2", "--members", "2", "--tree-rounds", "20"]
    assert train_cli.main(args) == 0
    model = TimeModel.load(tmp_path / "w.npz")
    assert model.meta["seed"] == 0 and model.meta["inputs"]["pairs"] == [str(PAIRS)]
    assert model.trees is not None and model.meta["tree_weight"] == train_cli.TREE_WEIGHT
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["sets"]["corpus (H100)"]["raw"]["n"] == 18
    assert "| corpus (H100) | raw | 18 |" in (tmp_path / "report" / "report.md").read_text()

def test_respelled_copy_drops_only_generator_spellings_of_cuda_sides() -> None:
    pair = next(iter(read_pairs(PAIRS)))
    cuda = "extern \"C\" __global__ void k(const float* __restrict__ x, float* __restrict__ y, int n) {\n    y[(long long)r * n + c] = x[(size_t) c];\n}"
    triton = "def k(x_ptr):\n    x = tl.load(x_ptr)  # __restrict__ is only a word here"
    request = replace(pair.request, reference=replace(pair.request.reference, code=cuda, language="cuda"),
                      candidate=replace(pair.request.candidate, code=triton, language="triton"))
    copy = train_cli.respelled(replace(pair, request=request))
    assert copy.request.reference.code == "extern \"C\" __global__ void k(const float* x, float* y, int n) {\n    y[r * n + c] = x[c];\n}"
    assert copy.request.candidate.code == triton
    assert copy.request.reference.facts == pair.request.reference.facts and copy.speedup == pair.speedup
    assert copy.id.endswith("/respelled")


def test_featurizing_in_processes_gives_the_same_rows_in_the_same_order(monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = list(read_pairs(PAIRS))
    labels = [f"copy {index % 3}" for index in range(len(pairs))]
    monkeypatch.setattr(train_cli, "MIN_ROWS_PER_JOB", 4)  # 18 pairs: four chunks in two processes
    alone, together = train_cli.featurize(pairs, labels), train_cli.featurize(pairs, labels, jobs=2)
    for name in train_cli.Dataset.__dataclass_fields__:
        assert np.array_equal(getattr(alone, name), getattr(together, name)), name
