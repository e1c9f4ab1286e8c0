"""The line the embedded forecaster reads KernelBench solutions through: which pairs it applies to,
that the shipped file moves their forecast and no other, and how it is fitted (sources weigh alike)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.models.embedded.backend import EmbeddedBackend
from kernelcast.models.embedded.kernelbench_prior import PRIOR_PATH, KernelBenchPrior
from kernelcast.wire import ForecastRequest, KernelSide
from workshop.training.kernelbench_prior import fit

HARDWARE = {**SPECS["H100-SXM"].to_json(), "fingerprint": SPECS["H100-SXM"].fingerprint()}
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PROBLEM = (
    "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n"
    "def get_inputs():\n    return [torch.randn(4096, 4096)]\n"
)
SOLUTION = (
    "import torch\nfrom torch.utils.cpp_extension import load_inline\n"
    "source = '__global__ void relu_kernel(const float* x, float* y, int n) "
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = fmaxf(x[i], 0.f); }'\n"
    "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
)


def kernelbench_pair(candidate_language: str = "cuda", candidate: str = SOLUTION) -> ForecastRequest:
    return ForecastRequest(KernelSide(PROBLEM, "pytorch", "Model"), KernelSide(candidate, candidate_language, "ModelNew"), HARDWARE, None)


def test_the_line_applies_to_a_solution_with_its_own_kernels_against_its_problem() -> None:
    assert KernelBenchPrior.applies(kernelbench_pair("cuda"))
    assert KernelBenchPrior.applies(kernelbench_pair("triton"))
    # A torch-only rewrite or torch.compile of the problem: no kernels of its own, the line was not fitted on them.
    assert not KernelBenchPrior.applies(kernelbench_pair("pytorch"))
    # Two solutions against each other, and kernels in .cu files, are read as the weights read them.
    solutions = ForecastRequest(KernelSide(SOLUTION, "cuda", "ModelNew"), KernelSide(SOLUTION, "cuda", "ModelNew"), HARDWARE, None)
    assert not KernelBenchPrior.applies(solutions)
    naive, tiled = (EXAMPLES / "matmul_naive.cu").read_text(), (EXAMPLES / "matmul_tiled.cu").read_text()
    assert not KernelBenchPrior.applies(
        ForecastRequest(KernelSide(naive, "cuda", "sgemm"), KernelSide(tiled, "cuda", "sgemm"), HARDWARE, None)
    )


def test_the_shipped_line_moves_kernelbench_forecasts_and_leaves_others_alone(tmp_path: Path) -> None:
    shipped = EmbeddedBackend()
    without = EmbeddedBackend(prior_path=tmp_path / "none.json")
    assert shipped.prior is not None and without.prior is None and shipped.model_id != without.model_id
    line = shipped.prior
    moved, plain = shipped.predict(kernelbench_pair()).details, without.predict(kernelbench_pair()).details
    assert moved["kernelbench_prior"] is True and "kernelbench_prior" not in plain
    assert moved["mean_log2"] == pytest.approx(line.intercept + line.slope * plain["mean_log2"], abs=1e-3)
    assert moved["spread_log2"] == pytest.approx(max(line.sd, plain["spread_log2"]), abs=1e-3)
    naive, tiled = (EXAMPLES / "matmul_naive.cu").read_text(), (EXAMPLES / "matmul_tiled.cu").read_text()
    sgemm = ForecastRequest(KernelSide(naive, "cuda", "sgemm"), KernelSide(tiled, "cuda", "sgemm"), HARDWARE, None)
    assert shipped.predict(sgemm).probabilities == without.predict(sgemm).probabilities


def test_the_fit_weighs_every_source_alike() -> None:
    # Source a (two pairs) lies on y = 1 + m, source b (eight pairs) on y = -1 + m, both at m = 0 and 1.
    # Weighted alike the intercept sits halfway, at 0; pooled, b's eight pairs would pull it to -0.6.
    means = [0.0, 1.0] + [0.0, 1.0] * 4
    speedups = [1.0, 2.0] + [-1.0, 0.0] * 4
    line = fit(means, speedups, ["a"] * 2 + ["b"] * 8, {"pairs": 10})
    assert line.intercept == pytest.approx(0.0, abs=1e-3) and line.slope == pytest.approx(1.0, abs=1e-3)
    assert line.sd == pytest.approx(1.0, abs=1e-3) and line.meta == {"pairs": 10}
    assert line.adjust(2.0, 0.3) == (pytest.approx(line.intercept + 2.0 * line.slope), line.sd)
    assert line.adjust(2.0, 5.0)[1] == 5.0  # never narrower than the weights' own spread (novelty widens it)


def test_the_shipped_file_says_what_it_was_fitted_on() -> None:
    data = json.loads(PRIOR_PATH.read_text())
    assert set(data) == {"intercept", "slope", "sd", "meta"}
    assert data["meta"]["pairs"] > 100 and len(data["meta"]["sources"]) >= 5
    assert KernelBenchPrior.load(PRIOR_PATH) == KernelBenchPrior(data["intercept"], data["slope"], data["sd"], data["meta"])
