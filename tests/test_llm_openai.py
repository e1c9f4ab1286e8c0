"""The openai backend against a real OpenAI-compatible server on loopback.

The server is llama_cpp.server serving the SmolLM2 GGUF; no stand-in. Error paths
use real failures: a port nobody listens on, and requests this server answers with 500.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from machine import limit
from test_llm_llama_cpp import pair, require_llama_and_model

from kernelcast.models.service import backends
from kernelcast.models.service.calibrated import Forecaster
from kernelcast.models.service.llm_common import LLMBackendError
from kernelcast.models.service.llm_llama_cpp import default_threads
from kernelcast.models.service.llm_openai import OpenAICompatibleBackend


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_server(logits_all: bool) -> tuple[subprocess.Popen[bytes], str]:
    gguf = require_llama_and_model()
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as error:
        pytest.skip(f"llama_cpp.server is not importable ({error}): pip install 'llama-cpp-python[server]'")
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "4096",
        # As the llama-cpp backend does: a core left to the rest (the suite's other worker), since
        # llama.cpp's threads wait for the slowest at every operation.
        "--n_threads",
        str(default_threads()),
        "--n_threads_batch",
        str(default_threads()),
        "--logits_all",
        str(logits_all),
        "--verbose",
        "False",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + limit(60)
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"llama_cpp.server exited: {process.stderr.read().decode()[-2000:] if process.stderr else ''}")
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.3)
    process.kill()
    pytest.fail("llama_cpp.server did not come up within 60 s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """A server with logprobs (llama_cpp.server needs logits_all for them)."""
    process, url = _start_server(logits_all=True)
    yield url
    _stop(process)


def test_probe_finds_logprobs_and_json_support(server_url: str) -> None:
    backend = backends.create("openai", {"llm_url": server_url})
    capabilities = backend.capabilities()
    assert capabilities.logprobs and capabilities.json_format in ("json_schema", "json_object")
    assert backend.status().available and "logprobs yes" in backend.status().detail


def test_distribution_from_top_logprobs_is_deterministic(server_url: str) -> None:
    backend = backends.create("openai", {"llm_url": server_url})
    first = backend.predict(pair())
    again = backend.predict(pair())
    assert first.details["readout"] == "top_logprobs" and first.details["label_mass"] > 0
    assert len(first.probabilities) == 8 and sum(first.probabilities) == pytest.approx(1.0)
    assert again.probabilities == pytest.approx(first.probabilities, abs=1e-4)


def test_json_distribution_is_schema_constrained(server_url: str) -> None:
    backend = backends.create("openai", {"llm_url": server_url, "llm_mode": "json"})
    prediction = backend.predict(pair())
    assert prediction.details["readout"] == "json" and prediction.details["raw_sum"] > 0
    assert sum(prediction.probabilities) == pytest.approx(1.0)


def test_reason_then_answer(server_url: str) -> None:
    backend = backends.create("openai", {"llm_url": server_url, "llm_mode": "reason", "llm_reason_tokens": 32})
    prediction = backend.predict(pair())
    assert prediction.details["mode"] == "reason" and prediction.details["reasoning_chars"] > 0
    assert sum(prediction.probabilities) == pytest.approx(1.0)


def test_unknown_model_is_named(server_url: str) -> None:
    backend = backends.create("openai", {"llm_url": server_url, "llm_model": "no-such-lora"})
    with pytest.raises(LLMBackendError, match="does not serve 'no-such-lora'"):
        backend.predict(pair())


def test_server_down_fails_clearly_within_the_deadline() -> None:
    backend = OpenAICompatibleBackend(f"http://127.0.0.1:{_free_port()}", deadline_s=3, retries=2)
    started = time.monotonic()
    with pytest.raises(LLMBackendError, match="did not answer within 3 attempts"):
        backend.predict(pair())
    assert time.monotonic() - started < 3 + limit(0.5)  # the 3 s deadline, then slack
    assert not backend.status().available


def test_server_errors_are_retried_then_reported() -> None:
    """llama_cpp.server without logits_all answers a logprobs request with a real HTTP 500."""
    process, url = _start_server(logits_all=False)
    try:
        backend = OpenAICompatibleBackend(url, deadline_s=limit(30), retries=2)
        probed = time.monotonic()
        assert not backend.capabilities().logprobs
        # The probe takes that 500 for the answer: no 0.5 s + 1 s of backing off per feature
        # probed (3 s with both JSON formats) before the first forecast.
        assert time.monotonic() - probed < limit(1.0)
        started = time.monotonic()
        with pytest.raises(LLMBackendError, match="3 attempts.*HTTP 500"):
            backend._chat(
                time.monotonic() + limit(30),
                backend.capabilities().model,
                [{"role": "user", "content": "1"}],
                max_tokens=1,
                logprobs=True,
                top_logprobs=5,
            )
        assert time.monotonic() - started >= 1.5  # backed off 0.5 s, then 1 s
        assert backend.predict(pair()).details["readout"] == "json"  # auto mode falls back to JSON
    finally:
        _stop(process)


def test_served_with_the_embedded_prior(server_url: str) -> None:
    forecaster = Forecaster(["embedded", "openai"], options={"llm_url": server_url, "combine_weights": "embedded=1,openai=1"})
    forecast = forecaster.forecast(pair())
    details = forecast.provenance["details"]
    assert forecast.provenance["backend"] == "combined" and details["failed"] == []
    assert [c["backend"] for c in details["contributors"]] == ["embedded", "openai"]
    assert sum(forecast.probabilities) == pytest.approx(1.0)
