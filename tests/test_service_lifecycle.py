"""The service's life as real processes: it says where it is, stops when asked or idle, a
client of other code does not join it, and a slow start is waited for, not doubled."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from lsp_support import KERNELCAST, StdioLsp, stop_service
from machine import limit

import kernelcast
from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.server import service_client
from kernelcast.server.service_client import STARTING_FILE, ForecasterClient, ForecasterUnavailable
from kernelcast.wire import ForecastRequest, KernelSide, code_build, read_or_create_token, read_state

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _serve(state_dir: Path, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [KERNELCAST, "serve", "--state-dir", str(state_dir), *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _announced(process: subprocess.Popen[str]) -> str:
    """The three lines serve prints once it listens."""
    return "".join(process.stdout.readline() for _ in range(3))


def _health(state_dir: Path) -> dict:
    state = read_state(state_dir)
    assert state is not None
    headers = {"Authorization": f"Bearer {read_or_create_token(state_dir)}"}
    return httpx.get(f"{state['url']}/v1/health", headers=headers, timeout=10).json()


def test_serve_says_where_it_listens_and_exits_when_idle(tmp_path: Path) -> None:
    state_dir = tmp_path / "service"
    # 5 s on an idle 2-core machine, longer on a busy one: the first request must come before it runs out.
    idle_min = round(limit(5.0) / 60, 3)
    process = _serve(state_dir, "--idle-timeout", str(idle_min))
    try:
        words = _announced(process)
        state = read_state(state_dir)
        assert f"listening on {state['url']}" in words
        assert f"'Authorization: Bearer <token>'; the token is in {state_dir / 'token'}" in words
        assert f"exits after {idle_min:g} min without requests" in words and "kernelcast serve --stop" in words
        health = _health(state_dir)
        assert (health["version"], health["build"], state["build"]) == (kernelcast.__version__, code_build(), code_build())
        asked = time.monotonic()
        assert process.wait(timeout=30 + 60 * idle_min) == 0
        waited = time.monotonic() - asked
        assert 60 * idle_min <= waited < 60 * idle_min + limit(20), "exits after the idle time, counted from the last request"
        assert read_state(state_dir) is None
    finally:
        process.kill()


def test_serve_stop_stops_the_running_service(tmp_path: Path) -> None:
    state_dir = tmp_path / "service"
    process = _serve(state_dir)
    try:
        _announced(process)
        state = read_state(state_dir)
        pid = state["pid"]
        doctor = subprocess.run([KERNELCAST, "doctor", "--json", "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=60)
        assert json.loads(doctor.stdout)["service"] == f"running at {state['url']} (pid {pid}); `kernelcast serve --stop` stops it"
        stopped = subprocess.run([KERNELCAST, "serve", "--stop", "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=30)
        assert stopped.returncode == 0 and f"stopped the service pid {pid}" in stopped.stdout
        assert process.wait(timeout=10) == 0 and read_state(state_dir) is None
        again = subprocess.run([KERNELCAST, "serve", "--stop", "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=30)
        assert again.returncode == 0 and "no service running" in again.stdout
    finally:
        process.kill()


def test_a_service_takes_connections_once_it_says_where_it_listens(tmp_path: Path) -> None:
    """A client that reads the state file may connect at once. A refusal reads as "no service
    here" (stop_service then drops the state file), so a stop or an upgrade racing the service's
    start would leave it running unseen. Stopped right after it announced itself, the service's
    socket must still take a connection (the kernel queues it until the service runs again)."""
    state_dir = tmp_path / "service"
    process = _serve(state_dir)
    try:
        _announced(process)
        process.send_signal(signal.SIGSTOP)
        url = httpx.URL(read_state(state_dir)["url"])
        try:
            socket.create_connection((url.host, url.port), timeout=limit(5)).close()
        finally:
            process.send_signal(signal.SIGCONT)
    finally:
        process.kill()


def test_a_client_of_other_code_replaces_the_service_instead_of_joining_it(tmp_path: Path) -> None:
    """A service started before the code changed (an upgrade, an edit of an editable install)."""
    state_dir = tmp_path / "service"
    old = _serve(state_dir)
    package_file = Path(kernelcast.__file__)
    before = package_file.stat()
    try:
        _announced(old)
        old_state = read_state(state_dir)
        old_build = old_state["build"]
        os.utime(package_file, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))  # the code changed since
        code_build.cache_clear()
        assert code_build() != old_build

        async def forecast() -> None:
            client = ForecasterClient(state_dir)
            try:
                hardware = {**SPECS["H100-SXM"].to_json(), "fingerprint": SPECS["H100-SXM"].fingerprint()}
                code = "__global__ void k(float* x) { x[threadIdx.x] += 1.0f; }"
                await client.forecast(ForecastRequest(KernelSide(code, "cuda"), KernelSide(code, "cuda"), hardware))
            finally:
                await client.close()

        asyncio.run(forecast())
        try:
            exit_code = old.wait(timeout=limit(15))
        except subprocess.TimeoutExpired:
            headers = {"Authorization": f"Bearer {read_or_create_token(state_dir)}"}
            try:
                answer = f"answers its health check ({httpx.get(old_state['url'] + '/v1/health', headers=headers, timeout=5).status_code})"
            except httpx.HTTPError as error:
                answer = f"does not answer its health check ({error!r})"
            old.kill()
            pytest.fail(f"the replaced service pid {old.pid} did not exit and {answer}; its stderr:\n{old.communicate()[1]}")
        assert exit_code == 0, "the old service was stopped"
        state = read_state(state_dir)
        assert state["pid"] != old.pid and state["build"] == code_build() == _health(state_dir)["build"]
    finally:
        os.utime(package_file, ns=(before.st_atime_ns, before.st_mtime_ns))
        code_build.cache_clear()
        old.kill()
        stop_service(tmp_path)


def test_a_start_that_outlasts_its_timeout_is_waited_for_not_doubled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a loaded machine `kernelcast serve` may take long to start. Every try must wait for that
    process until STARTING_LIMIT_S: another one beside it would only slow both (three editors
    typing started one after another and none answered)."""
    state_dir = tmp_path / "service"
    state_dir.mkdir()
    client = ForecasterClient(state_dir)
    try:
        monkeypatch.setattr(service_client, "STARTING_LIMIT_S", 0.01)  # no service imports that fast
        with pytest.raises(ForecasterUnavailable, match="did not start within") as failed:
            client._start_service()
        starting = json.loads((state_dir / STARTING_FILE).read_text())
        assert f"(pid {starting['pid']};" in str(failed.value)
        monkeypatch.setattr(service_client, "STARTING_LIMIT_S", 60.0)
        url = client._start_service()
        state = read_state(state_dir)
        assert state["url"] == url and state["pid"] == starting["pid"], "the second try started another service"
        assert not (state_dir / STARTING_FILE).exists()
        # A record of a start whose process is gone names nothing to wait for: it is dropped.
        gone = subprocess.Popen(["true"])
        gone.wait()
        (state_dir / STARTING_FILE).write_text(json.dumps({"pid": gone.pid, "started": time.time(), "build": code_build()}))
        assert client._still_starting() is None and not (state_dir / STARTING_FILE).exists()
    finally:
        asyncio.run(client.close())
        stop_service(tmp_path)


async def test_a_start_outlives_the_keystroke_that_began_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file task is cancelled by the next keystroke, often while the service starts: the start
    goes on, and the next task waits for it instead of starting (or queueing) another."""
    state_dir = tmp_path / "service"
    state_dir.mkdir()
    client = ForecasterClient(state_dir)
    starts: list[float] = []
    start_service = client._start_service

    def counted_start() -> str:
        starts.append(time.monotonic())
        return start_service()

    monkeypatch.setattr(client, "_start_service", counted_start)
    try:
        first = asyncio.ensure_future(client._connect())
        while not starts:
            await asyncio.sleep(0.01)
        first.cancel()
        url = await client._connect()
        assert first.cancelled() and len(starts) == 1
        assert read_state(state_dir)["url"] == url
    finally:
        await client.close()
        stop_service(tmp_path)


async def test_the_editor_exits_at_once_while_a_slow_service_start_is_waited_for(tmp_path: Path) -> None:
    """A start may be waited for up to STARTING_LIMIT_S; closing the editor meanwhile must not wait
    with it. A process that never serves stands in for a service starting on a loaded machine."""
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    state_dir = home / "service"
    state_dir.mkdir(parents=True)
    workspace.mkdir()
    for name in ("matmul_naive.cu", "matmul_tiled.cu"):
        (workspace / name).write_text((EXAMPLES / name).read_text())
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "kernelcast", "serve"])
    try:
        (state_dir / STARTING_FILE).write_text(json.dumps({"pid": silent.pid, "started": time.time(), "build": code_build()}))
        server = await StdioLsp(home, workspace).start()
        server.open((workspace / "matmul_tiled.cu").as_uri(), (workspace / "matmul_tiled.cu").read_text())
        while not (state_dir / "start.lock").exists():  # the server waits for the silent "service" now
            await asyncio.sleep(0.05)
        assert await server.stop() == 0, "the server did not exit when asked (it was killed)"
        assert silent.poll() is None, "a start still in its time is waited for, not stopped"
    finally:
        silent.kill()
        silent.wait()


def test_a_service_that_exits_while_starting_is_reported_with_its_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state_dir = tmp_path / "service"
    state_dir.mkdir()
    client = ForecasterClient(state_dir)
    monkeypatch.setattr(service_client.sys, "executable", "/bin/false")  # `false -m kernelcast serve …` exits 1 at once
    with pytest.raises(ForecasterUnavailable, match=r"the service exited with code 1; see .*service\.log"):
        client._start_service()
    assert not (state_dir / STARTING_FILE).exists()
    asyncio.run(client.close())
