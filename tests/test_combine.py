"""Pooling several backends' calibrated distributions, through the real Forecaster."""

from __future__ import annotations

import socket

import pytest

from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.models.service import backends
from kernelcast.models.service.calibrated import Forecaster
from kernelcast.models.service.combine import COMBINED, linear_pool, log_pool, parse_weights
from kernelcast.wire import ForecastRequest, KernelSide

NAIVE = "__global__ void k(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }"
TILED = "__global__ void k(float* x, int n) { __shared__ float t[256]; for (int j = 0; j < 4; ++j) { t[threadIdx.x] = x[j]; } }"


def _request(backend: str | None = None) -> ForecastRequest:
    return ForecastRequest(
        reference=KernelSide(NAIVE, "cuda"), candidate=KernelSide(TILED, "cuda"), hardware=SPECS["A100"].to_json(), backend=backend
    )


def test_pools() -> None:
    sharp = [0.0, 0, 0, 0, 0, 0, 0, 1.0]
    flat = [0.125] * 8
    assert linear_pool([sharp, flat], [1, 1])[7] == pytest.approx(0.5625)
    assert sum(log_pool([sharp, flat], [1, 3])) == pytest.approx(1.0)
    # Two members that agree on bin 6 make the log pool at least as sharp as either.
    a = [0.02, 0.02, 0.02, 0.04, 0.1, 0.6, 0.15, 0.05]
    assert log_pool([a, a], [1, 1])[5] == pytest.approx(0.6)


def test_weights_parse_and_validate() -> None:
    assert parse_weights("embedded=1, llama-cpp=2.5") == {"embedded": 1.0, "llama-cpp": 2.5}
    assert parse_weights({"openai": 3}) == {"openai": 3.0}
    with pytest.raises(ValueError):
        parse_weights("embedded=-1")


def test_combined_is_default_members_stay_reachable_and_failures_are_named() -> None:
    # Two real backends: the embedded prior, and an openai backend whose server is down.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    options = {
        "llm_url": f"http://127.0.0.1:{closed_port}/v1",
        "llm_deadline_s": 2,
        "llm_retries": 0,
        "combine_weights": "embedded=2,openai=1",
    }
    forecaster = Forecaster(["embedded", "openai"], options=options)
    assert forecaster.default_backend == COMBINED
    combined = forecaster.forecast(_request())
    alone = forecaster.forecast(_request("embedded"))
    assert combined.probabilities == pytest.approx(alone.probabilities)
    details = combined.provenance["details"]
    assert combined.provenance["backend"] == COMBINED
    assert [c["backend"] for c in details["contributors"]] == ["embedded"]
    assert details["failed"][0]["backend"] == "openai" and "did not answer" in details["failed"][0]["error"]


def test_describe_backends_reports_every_backend() -> None:
    described = {entry["name"]: entry for entry in backends.describe_backends({})}
    assert {"embedded", "llama-cpp", "openai", "transformers"} <= set(described)
    assert described["embedded"]["available"] and not described["llama-cpp"]["available"]
    assert "--gguf" in described["llama-cpp"]["detail"]
