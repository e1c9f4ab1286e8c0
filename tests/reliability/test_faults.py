"""Faults injected into real processes: kill -9 of the forecaster service mid-request, of the
GPU worker mid-load, of the language server while it writes the cache; a full disk, a cache
folder that cannot be made, truncated cache files.

After each: the editor is told in words, the next request works, nothing completed is lost,
and the cache opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import resource
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from lsp_support import Start
from test_measure_cpu import KERNELBENCH_OK, QUICK, kernelbench

from kernelcast.kernels_runtime.measure import GpuWorker, prepare_request
from kernelcast.wire import read_state

FORECAST_CODES = ("forecast", "uncertain")
WAIT_S = 30


def candidate(workspace: Path, variant: int) -> str:
    """matmul_tiled.cu (which has a reference pragma) with one constant changed: a new forecast."""
    return (workspace / "matmul_tiled.cu").read_text().replace("float sum = 0.0f;", f"float sum = {variant}.0f;")


def forecast_of(diagnostics: list[dict]) -> dict:
    (found,) = [d for d in diagnostics if d["code"] in FORECAST_CODES]
    return found


async def wait_until(condition, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.005)


def queued_bytes(port: int) -> int:
    """Bytes waiting unread in the service's end of its loopback connections (/proc/net/tcp)."""
    total = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port, state, rx_queue = int(fields[1].split(":")[1], 16), fields[3], int(fields[4].split(":")[1], 16)
        if local_port == port and state == "01":  # ESTABLISHED
            total += rx_queue
    return total


async def test_service_killed_mid_request_is_restarted_and_nothing_is_lost(start: Start, workspace: Path, home: Path) -> None:
    server = await start()
    done_uri = (workspace / "matmul_tiled.cu").as_uri()
    server.open(done_uri, candidate(workspace, 1))
    completed = forecast_of(await server.published(done_uri, 1, WAIT_S))

    state = read_state(home / "service")
    pid, port = state["pid"], int(state["url"].rsplit(":", 1)[1])
    os.kill(pid, signal.SIGSTOP)  # it reads nothing more: the next request waits in its socket
    try:
        uri = (workspace / "tiled_copy.cu").as_uri()
        server.open(uri, candidate(workspace, 2))
        await wait_until(lambda: queued_bytes(port) > 0, "the forecast request reaching the service")
    finally:
        os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):  # the language server, its parent, may have reaped it already
            os.kill(pid, signal.SIGCONT)

    answer = forecast_of(await server.published(uri, 1, WAIT_S))
    assert answer["message"].startswith("sgemm: ") and "unavailable" not in answer["message"]
    assert read_state(home / "service")["pid"] != pid, "a fresh service answered"
    server.close(done_uri)
    server.open(done_uri, candidate(workspace, 1))
    assert forecast_of(await server.published(done_uri, 1, WAIT_S)) == completed
    line = completed["range"]["start"]["line"]
    assert "From cache" in await server.hover(done_uri, line)


async def test_service_that_cannot_start_is_reported_in_words(start: Start, workspace: Path, home: Path) -> None:
    (home / "service" / "service.log").mkdir(parents=True)  # the service's log cannot be opened
    server = await start()
    uri = (workspace / "matmul_tiled.cu").as_uri()
    for version in range(1, 4):
        if version == 1:
            server.open(uri, candidate(workspace, version))
        else:
            server.change(uri, version, candidate(workspace, version))
        (answer,) = [d for d in await server.published(uri, version, WAIT_S) if d["code"] == "unavailable"]
        assert (
            answer["message"]
            == f"sgemm: forecaster unavailable: cannot start the service ([Errno 21] Is a directory: '{home / 'service' / 'service.log'}')"
        )
    assert server.process.returncode is None


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    started = GpuWorker(gpu_index=7)  # beyond the visible list: a real worker that sees no GPU
    yield started
    started.stop()


def test_worker_killed_mid_load_is_replaced_and_says_where(worker: GpuWorker) -> None:
    seen: list[str] = []
    replies: list[dict] = []
    slow_load = "import time\ntime.sleep(60)\n" + KERNELBENCH_OK
    request = prepare_request(kernelbench(slow_load), kernelbench(KERNELBENCH_OK), timeouts=QUICK)
    asking = threading.Thread(
        target=lambda: replies.append(worker.request(request, lambda text, pct: seen.append(text), threading.Event(), QUICK))
    )
    asking.start()
    deadline = time.monotonic() + 60
    while not any(text.startswith("loading candidate") for text in seen):
        assert time.monotonic() < deadline, seen
        time.sleep(0.01)
    killed = worker.pid
    os.kill(killed, signal.SIGKILL)
    asking.join(30)
    failure = replies[0]["failure"]
    assert failure["kind"] == "runtime"
    assert failure["message"].startswith("the GPU worker exited (code -9) while loading candidate; worker restarted")
    assert worker.pid != killed
    next_reply = worker.request(
        prepare_request(kernelbench(KERNELBENCH_OK), kernelbench(KERNELBENCH_OK), timeouts=QUICK), lambda *_: None, threading.Event(), QUICK
    )
    assert next_reply["failure"]["kind"] == "no-gpu", "the fresh worker answers the next request"


async def test_server_killed_while_writing_the_cache_loses_nothing_it_published(start: Start, workspace: Path, home: Path) -> None:
    """Three kill -9s at random points of a burst of 30 forecasts, each written before it is published."""
    rng = random.Random(8)
    published: dict[str, dict] = {}
    texts = {(workspace / f"variant_{i}.cu").as_uri(): candidate(workspace, 100 + i) for i in range(30)}
    for _ in range(3):
        server = await start()
        for uri, text in texts.items():
            server.open(uri, text)
        # Then kill it while it computes and writes the next. Forecasts come in batches, so one server
        # may publish all 30 before it is killed: the next one then has no more to publish than those.
        enough = min(len(published) + rng.randint(1, 8), len(texts))
        # Up to 24 forecasts, each with an nvcc run for its compiler facts: on 2 loaded cores
        # (the full suite) that took over WAIT_S once. The test is about what survives, not speed.
        await wait_until(lambda: sum(1 for _, d in server.diagnostics.values() if d) >= enough, "forecasts", 4 * WAIT_S)
        server.process.kill()
        await server.process.wait()
        published.update({uri: forecast_of(d) for uri, (_, d) in server.diagnostics.items() if any(x["code"] in FORECAST_CODES for x in d)})
    assert published, "no forecast was published before the kills"
    assert sqlite3.connect(home / "cache" / "cache.db").execute("pragma integrity_check").fetchone() == ("ok",)

    server = await start()
    for uri in published:
        server.open(uri, texts[uri])
    for uri, forecast in published.items():
        assert forecast_of(await server.published(uri, 1, WAIT_S)) == forecast
        assert "From cache" in await server.hover(uri, forecast["range"]["start"]["line"])
    assert not server.messages, "the cache opened without complaint"
    print(f"\n{len(published)} forecasts published before 3 kill -9s, all served from the cache after")


async def test_full_disk_is_reported_once_and_forecasts_go_on(start: Start, workspace: Path) -> None:
    server = await start()
    uri = (workspace / "matmul_tiled.cu").as_uri()
    server.open(uri, candidate(workspace, 1))
    before = forecast_of(await server.published(uri, 1, WAIT_S))
    resource.prlimit(server.pid, resource.RLIMIT_FSIZE, (0, 0))  # no file of the server's may grow: a full disk
    for version in range(2, 5):
        server.change(uri, version, candidate(workspace, version))
        assert forecast_of(await server.published(uri, version, WAIT_S))["message"].startswith("sgemm: ")
    assert len(server.messages) == 1 and server.messages[0].startswith("cache write failed (")
    assert server.messages[0].endswith("; results are kept in memory only")

    later = await start()  # a fresh disk: the cache opens and still holds what was written before
    later.open(uri, candidate(workspace, 1))
    assert forecast_of(await later.published(uri, 1, WAIT_S)) == before
    assert "From cache" in await later.hover(uri, before["range"]["start"]["line"])
    assert not later.messages


async def test_cache_folder_that_cannot_be_made_is_reported_and_forecasts_go_on(start: Start, workspace: Path, tmp_path: Path) -> None:
    """A path under a regular file stands in for a read-only folder (root, which CI runs as, ignores chmod)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    server = await start({"debounceMs": 0, "compilerFacts": {"enable": False}, "cacheDir": str(blocker / "cache")})
    uri = (workspace / "matmul_tiled.cu").as_uri()
    server.open(uri, candidate(workspace, 1))
    assert forecast_of(await server.published(uri, 1, WAIT_S))["message"].startswith("sgemm: ")
    assert server.messages == [
        f"cache disabled: {blocker / 'cache'} is unusable ([Errno 20] Not a directory: '{blocker / 'cache'}'); "
        "results are kept in memory only"
    ]
    assert blocker.read_text() == "", "the user's file is left alone"


@pytest.mark.parametrize("keep", [0.5, 0.0])
async def test_truncated_cache_file_opens_again(start: Start, workspace: Path, home: Path, keep: float) -> None:
    first = await start()
    uri = (workspace / "matmul_tiled.cu").as_uri()
    first.open(uri, candidate(workspace, 1))
    forecast = forecast_of(await first.published(uri, 1, WAIT_S))
    await first.stop()
    database = home / "cache" / "cache.db"
    os.truncate(database, int(database.stat().st_size * keep))

    server = await start()
    server.open(uri, candidate(workspace, 1))
    assert forecast_of(await server.published(uri, 1, WAIT_S)) == forecast
    if keep:
        (message,) = server.messages
        assert message.startswith(f"cache at {home / 'cache'} could not be opened (") and message.endswith(" and rebuilt")
    else:
        assert not server.messages, "an empty file is an empty cache"
    server.change(uri, 2, candidate(workspace, 2))
    await server.published(uri, 2, WAIT_S)
    await server.stop()
    assert sqlite3.connect(database).execute("pragma integrity_check").fetchone() == ("ok",)
    again = await start()
    again.open(uri, candidate(workspace, 2))
    await again.published(uri, 1, WAIT_S)
    assert not again.messages, "the rebuilt cache opens without complaint"
