"""The forecaster service as a real process: token, loopback, restart after kill -9."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from lsp_support import EXAMPLES, stop_service
from machine import limit

from kernelcast.analysis import analyse_text, build_request, problem_sizes
from kernelcast.cache import ResultCache
from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.server.forecasts import fill_forecasts
from kernelcast.server.service_client import ForecasterClient, ForecasterUnavailable
from kernelcast.settings import Settings
from kernelcast.wire import ForecastRequest, KernelSide, code_build, read_or_create_token, read_state

NAIVE = "__global__ void k(float* x, int n) { int i = threadIdx.x; x[i * n] += 1.0f; }"
VECTOR = "__global__ void k(float4* x, int n) { int i = threadIdx.x; float4 v = x[i]; v.x += 1.0f; x[i] = v; }"


def _request() -> ForecastRequest:
    hardware = {**SPECS["H100-SXM"].to_json(), "fingerprint": SPECS["H100-SXM"].fingerprint()}
    return ForecastRequest(KernelSide(NAIVE, "cuda"), KernelSide(VECTOR, "cuda"), hardware)


def _start(state_dir: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "kernelcast", "serve", "--state-dir", str(state_dir), *extra])


def _wait_for_state(state_dir: Path, pid: int) -> dict:
    deadline = time.monotonic() + limit(15)
    while time.monotonic() < deadline:
        state = read_state(state_dir)
        if state and state["pid"] == pid:
            return state
        time.sleep(0.05)
    raise AssertionError("service wrote no state file")


@pytest.fixture
def service(tmp_path: Path):
    state_dir = tmp_path / "service"
    state_dir.mkdir(mode=0o700)
    process = _start(state_dir)
    state = _wait_for_state(state_dir, process.pid)
    yield state, read_or_create_token(state_dir), state_dir
    process.terminate()
    process.wait(timeout=10)


def test_requests_without_the_token_are_rejected(service) -> None:
    state, token, state_dir = service
    assert httpx.get(f"{state['url']}/v1/health").status_code == 401
    assert httpx.get(f"{state['url']}/v1/health", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = httpx.get(f"{state['url']}/v1/health", headers={"Authorization": f"Bearer {token}"})
    assert ok.status_code == 200 and ok.json()["ok"] is True
    assert state["url"].startswith("http://127.0.0.1:")
    assert (state_dir / "token").stat().st_mode & 0o777 == 0o600


def test_forecast_backends_and_bad_requests(service) -> None:
    state, token, _ = service
    headers = {"Authorization": f"Bearer {token}"}
    backends = httpx.get(f"{state['url']}/v1/backends", headers=headers).json()["backends"]
    assert [b["name"] for b in backends] == ["embedded"] and backends[0]["available"]

    answer = httpx.post(f"{state['url']}/v1/forecast", json=_request().to_json(), headers=headers)
    assert answer.status_code == 200
    forecast = answer.json()
    assert len(forecast["probabilities"]) == 8 and abs(sum(forecast["probabilities"]) - 1) < 1e-9
    assert forecast["provenance"]["backend"] == "embedded"

    bad = httpx.post(f"{state['url']}/v1/forecast", content=b"{not json", headers=headers)
    assert bad.status_code == 400 and "bad forecast request" in bad.json()["error"]
    wrong_language = _request().to_json()
    wrong_language["candidate"]["language"] = "fortran"
    bad = httpx.post(f"{state['url']}/v1/forecast", json=wrong_language, headers=headers)
    assert bad.status_code == 400 and "language" in bad.json()["error"]


def test_a_batch_of_forecasts_answers_each_as_alone_and_refuses_bad_batches_whole(service) -> None:
    """POST /v1/forecasts: a file's kernels in one call, each forecast what it would be alone."""
    state, token, _ = service
    headers = {"Authorization": f"Bearer {token}"}
    swapped = ForecastRequest(_request().candidate, _request().reference, _request().hardware)
    requests = [_request().to_json(), swapped.to_json(), _request().to_json()]
    backends = httpx.get(f"{state['url']}/v1/backends?probe=false", headers=headers).json()["backends"]
    assert backends[0]["batches"] is True

    answer = httpx.post(f"{state['url']}/v1/forecasts", json={"requests": requests}, headers=headers)
    assert answer.status_code == 200
    batch = answer.json()["forecasts"]
    alone = [httpx.post(f"{state['url']}/v1/forecast", json=request, headers=headers).json() for request in requests]
    assert len(batch) == 3
    for together, single in zip(batch, alone):
        assert together["probabilities"] == pytest.approx(single["probabilities"], abs=1e-12)
    assert batch[0]["probabilities"] == pytest.approx(batch[1]["probabilities"][::-1], abs=1e-9), "sides swapped, bins mirrored"

    wrong_language = _request().to_json()
    wrong_language["candidate"]["language"] = "fortran"
    refusals = {
        "empty": {"requests": []},
        "too many": {"requests": [_request().to_json()] * 257},
        "not a list": {"requests": _request().to_json()},
        "third bad": {"requests": [*requests[:2], wrong_language]},
        "not an object": {"requests": [*requests[:1], "a kernel"]},
    }
    for case, body in refusals.items():
        bad = httpx.post(f"{state['url']}/v1/forecasts", json=body, headers=headers)
        assert bad.status_code == 400 and bad.json()["error"].startswith("bad forecast request: "), case
    assert "request 3" in httpx.post(f"{state['url']}/v1/forecasts", json=refusals["third bad"], headers=headers).json()["error"]
    assert "request 2" in httpx.post(f"{state['url']}/v1/forecasts", json=refusals["not an object"], headers=headers).json()["error"]


def test_listing_answers_at_once_while_an_llm_server_hangs(tmp_path: Path) -> None:
    """The LSP lists backends without probing them; a probing listing runs off the event loop."""
    silent = socket.create_server(("127.0.0.1", 0))  # takes connections, never answers
    state_dir = tmp_path / "service"
    state_dir.mkdir(mode=0o700)
    llm_url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
    process = _start(state_dir, "--backend", "embedded", "--backend", "openai", "--llm-url", llm_url)
    try:
        url, headers = _wait_for_state(state_dir, process.pid)["url"], {"Authorization": f"Bearer {read_or_create_token(state_dir)}"}
        probing = threading.Thread(target=lambda: httpx.get(f"{url}/v1/backends", headers=headers, timeout=60))
        probing.start()
        time.sleep(0.5)  # the probe of the silent server is under way
        started = time.monotonic()
        listing = httpx.get(f"{url}/v1/backends?probe=false", headers=headers, timeout=10).json()["backends"]
        assert time.monotonic() - started < limit(5)  # the probe alone takes 20 s
        assert [b["name"] for b in listing] == ["embedded", "openai", "combined"] and "available" not in listing[0]
        answer = httpx.post(f"{url}/v1/forecast", json={**_request().to_json(), "backend": "embedded"}, headers=headers, timeout=10)
        assert answer.json()["provenance"]["backend"] == "embedded"
        silent.close()  # resets the probe's connection
        probing.join(timeout=30)
    finally:
        silent.close()
        process.terminate()
        process.wait(timeout=10)


def test_refuses_to_bind_beyond_loopback(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "kernelcast", "serve", "--state-dir", str(tmp_path), "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert completed.returncode == 2
    assert "loopback" in completed.stderr


def test_client_starts_service_and_restarts_it_after_kill_9_without_losing_cache(tmp_path: Path) -> None:
    state_dir = tmp_path / "service"
    state_dir.mkdir(mode=0o700)
    cache = ResultCache(tmp_path / "cache")

    async def scenario() -> None:
        client = ForecasterClient(state_dir)
        try:
            first = await client.forecast(_request())
            cache.put("pair", first.to_json())
            pid = read_state(state_dir)["pid"]
            os.kill(pid, signal.SIGKILL)
            second = await client.forecast(_request())
            assert read_state(state_dir)["pid"] != pid
            assert second.probabilities == first.probabilities
        finally:
            await client.close()
            stop_service(tmp_path)  # the service the client started (tmp_path/service is its state folder)

    asyncio.run(scenario())
    cache.close()
    assert ResultCache(tmp_path / "cache").get("pair")["probabilities"]


def test_a_busy_service_that_misses_health_checks_is_waited_for_not_replaced(tmp_path: Path) -> None:
    """Three editors on two cores: the running service answers late, and no second one starts beside it."""
    state_dir = tmp_path / "service"
    state_dir.mkdir(mode=0o700)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    answered_after = 2.5  # past two 1-s health checks

    def busy_service() -> None:
        started = time.monotonic()
        while True:
            connection, _ = listener.accept()
            connection.recv(4096)
            if time.monotonic() - started < answered_after:
                time.sleep(1.2)  # busy: the check times out before an answer comes
                connection.close()
                continue
            connection.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{"ok": true}')
            connection.close()
            return

    state = {"url": f"http://127.0.0.1:{port}", "pid": os.getpid(), "build": code_build()}  # a service of this build
    (state_dir / "service.json").write_text(json.dumps(state))
    thread = threading.Thread(target=busy_service, daemon=True)
    thread.start()
    client = ForecasterClient(state_dir)
    try:
        assert client._start_service() == f"http://127.0.0.1:{port}"
        assert read_state(state_dir)["pid"] == os.getpid()  # no new service was started
    finally:
        listener.close()
        asyncio.run(client.close())


def test_configured_url_that_does_not_answer_is_reported_quickly(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = ForecasterClient(tmp_path, url="http://127.0.0.1:9")
        started = time.monotonic()
        with pytest.raises(ForecasterUnavailable, match="no answer from"):
            await client.forecast(_request())
        assert time.monotonic() - started < limit(5)
        await client.close()

    asyncio.run(scenario())


def test_a_files_kernels_are_forecast_in_batches_each_as_if_alone(tmp_path: Path) -> None:
    """70 kernels: two calls of the batch route (64 + 6), each kernel's forecast the one it gets alone."""
    state_dir = tmp_path / "service"
    state_dir.mkdir(mode=0o700)
    strides = range(1, 71)
    text = "// kernelcast: reference=matmul_naive.cu::sgemm\n" + "".join(
        f"__global__ void k{s}(float* x, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i * {s} < n) x[i * {s}] += 1.0f; }}\n"
        for s in strides
    )
    analysis = analyse_text("file:///many.cu", 1, text, EXAMPLES / "many.cu", EXAMPLES, Settings(), SPECS["H100-SXM"])

    async def scenario() -> None:
        client = ForecasterClient(state_dir)
        try:
            computed = await fill_forecasts(
                analysis, EXAMPLES / "many.cu", EXAMPLES, Settings(), ResultCache(tmp_path / "cache"), client, lambda: True
            )
            assert computed == len(strides) == len(analysis.results)
            for result in analysis.results:
                request = build_request(
                    analysis, result, problem_sizes(result, EXAMPLES / "many.cu", EXAMPLES), Settings().confidence_threshold
                )
                alone = await client.forecast(request)
                assert result.forecast.probabilities == pytest.approx(alone.probabilities, abs=1e-12), result.kernel.name
            # A forecast's elapsed_ms is its share of its call: one value per batch.
            shares = [result.forecast.provenance["elapsed_ms"] for result in analysis.results]
            assert len(set(shares[:64])) == 1 and len(set(shares[64:])) == 1
            assert len({tuple(result.forecast.probabilities) for result in analysis.results}) > 1, "kernels told apart"
        finally:
            await client.close()
            stop_service(tmp_path)  # the service the client started (tmp_path/service is its state folder)

    asyncio.run(scenario())


def test_corrupted_cache_is_moved_aside_and_rebuilt(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    directory.mkdir()
    (directory / "cache.db").write_bytes(b"this is not sqlite" * 100)
    cache = ResultCache(directory)
    assert cache.warnings and "moved to" in cache.warnings[0]
    cache.put("k", {"v": 1})
    assert cache.get("k") == {"v": 1}
    assert any(p.name.startswith("cache.corrupt-") for p in tmp_path.iterdir())
    json.dumps(cache.warnings)
