"""The learned embedded forecaster: features, learner, export, data conversion and the shipped weights."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from kernelcast.forecast import ForecastRequest, KernelSide
from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.models.embedded import WEIGHTS_PATH, EmbeddedBackend, TimeModel
from kernelcast.models.features import FEATURE_NAMES, FLOOR_INDEX, pair_features, read_code
from kernelcast.models.training import cuda_l1, train as train_cli
from kernelcast.models.training.learner import Settings, _Ensemble, _standardisation, export, train

PAIRS = Path(__file__).parent / "data" / "pairs_small.jsonl"
HARDWARE = SPECS["H100-SXM"].to_json()
SMALL = Settings(members=3, hidden=16, epochs=8, batch=64)


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


def test_weights_trained_on_other_features_are_refused() -> None:
    with pytest.raises(ValueError, match="other features"):
        TimeModel({}, {"features": ["something else"]})


def test_swapping_the_sides_swaps_the_feature_rows() -> None:
    request = ForecastRequest(KernelSide("__global__ void a(float* x) { __shared__ float t[32]; }", "cuda"),
                              KernelSide("def reference(x):\n    return torch.relu(x)", "pytorch"), HARDWARE, {"n": 4096})
    swapped = ForecastRequest(request.candidate, request.reference, HARDWARE, {"n": 4096})
    assert np.array_equal(pair_features(request), pair_features(swapped)[::-1])


def test_code_reading_ignores_comments_and_python_floor_division() -> None:
    cuda = read_code("// __shared__ float t[32];\n/* atomicAdd(x, 1) */\n__global__ void k(float4* x) {}", "cuda")
    assert cuda["shared_decl"] == 0 and cuda["atomics"] == 0 and cuda["vector_types"] == 1
    triton = read_code("grid = (n // 256,)\n# tl.dot(a, b)\nacc = tl.dot(a, b)\n", "triton")
    assert triton["tl_dot"] == 1


def test_launch_pragma_and_corpus_launches_are_read() -> None:
    code = "// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<20)\n__global__ void k() {}"
    from_pragma = pair_features(ForecastRequest(KernelSide(code, "cuda"), KernelSide(code, "cuda"), HARDWARE, {"N": 1 << 20}))
    row = dict(zip(FEATURE_NAMES, from_pragma[0]))
    assert row["launch_from_pragma"] == 1 and row["blocks"] == pytest.approx(np.log2(1 + 4096)) and row["threads_per_block"] == pytest.approx(np.log2(257))
    assert row["bytes_log2"] == pytest.approx(np.log2(1 + 8 * (1 << 20)))  # the pragma's two f32 arrays
    facts = {"launches": [{"kernel": "__zero__", "grid": [1, 1, 1], "args": ["y"]}, {"kernel": "k", "grid": [64, 1, 1], "num_warps": 8, "args": []}]}
    side = KernelSide("@triton.jit\ndef k(): pass", "triton", facts=facts)
    row = dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(side, side, HARDWARE))[0]))
    assert row["launch_from_facts"] == 1 and row["zero_fills"] == 1 and row["launches"] == 1.0
    assert row["threads_per_block"] == pytest.approx(np.log2(1 + 256))


def test_cuda_l1_rows_become_pairs_both_ways_with_sizes() -> None:
    reference = "import torch\nclass Model:\n    pass\nbatch_size = 16\nheight, width = 2 * 64, 1 << 7\n\ndef get_inputs():\n    return [torch.randn(batch_size, height, width, dtype=torch.float16)]\n"
    row = {"level_id": 1, "task_id": 9, "ref_code": reference, "custom_code": "x = load_inline(name='k', cuda_sources='')",
           "score_default": 2.0, "cuda_graph_code": "torch.cuda.CUDAGraph()", "score_cuda_graph": 0.8, "cudnn_code": "", "score_cudnn": 1.1}
    pairs = list(cuda_l1.pairs_of_row(row, "l40"))
    assert len(pairs) == 4  # custom and graph, each both ways; no cuDNN code
    forward, backward = pairs[0], pairs[1]
    assert forward.speedup == 2.0 and backward.speedup == 0.5 and forward.op == backward.op == "L1/T9"
    assert forward.request.candidate.language == "cuda" and forward.request.reference.language == "pytorch"
    assert forward.request.problem == {"batch_size": 16, "height": 128, "width": 128, "dtype": "f16"}
    assert forward.request.hardware["key"] == "L40" and forward.group != backward.group


def test_folds_hold_out_whole_operation_families() -> None:
    ops = np.array([f"corpus:op{i % 7}" for i in range(70)] + [f"cuda-l1:L1/T{i % 11}" for i in range(44)]
                   + ["corpus:row_sum", "corpus:row_max", "corpus:gemm", "corpus:gemm_bias_relu"])
    fold = train_cli.folds_of(ops, 3, seed=1)
    for op in set(ops):
        assert len(set(fold[ops == op])) == 1
    assert fold[-4] == fold[-3] and fold[-2] == fold[-1]
    assert np.array_equal(fold, train_cli.folds_of(ops, 3, seed=1)) and len(set(fold)) == 3


def test_train_command_writes_weights_calibration_and_a_report(tmp_path: Path) -> None:
    args = ["--pairs", str(PAIRS), "--out", str(tmp_path / "w.npz"), "--calibration-out", str(tmp_path / "c.json"),
            "--report", str(tmp_path / "report"), "--folds", "2", "--epochs", "2", "--members", "2"]
    assert train_cli.main(args) == 0
    model = TimeModel.load(tmp_path / "w.npz")
    assert model.meta["seed"] == 0 and model.meta["inputs"]["pairs"] == [str(PAIRS)]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["sets"]["corpus (H100)"]["raw"]["n"] == 18
    assert "| corpus (H100) | raw | 18 |" in (tmp_path / "report" / "report.md").read_text()


def test_shipped_weights_load_small_and_fast() -> None:
    assert WEIGHTS_PATH.stat().st_size < 20 * 2**20
    backend = EmbeddedBackend()
    code = "\n".join(f"__global__ void k{i}(float* x) {{ __shared__ float t[32]; x[threadIdx.x] = t[{i}]; }}" for i in range(300))
    request = ForecastRequest(KernelSide(code, "cuda"), KernelSide(code.replace("t[", "t [", 1), "cuda"), HARDWARE, {"N": 4096})
    backend.predict(request)
    # CPU time of this process: other work on a shared machine must not fail the test.
    started = time.process_time()
    for _ in range(20):
        read_code.cache_clear()
        raw = backend.predict(request)
    assert (time.process_time() - started) / 20 < 0.020
    assert sum(raw.probabilities) == pytest.approx(1.0)
