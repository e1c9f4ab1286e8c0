"""How the LSP reaches the forecaster: join the user's running service when it runs the
same build of kernelcast, else start one (replacing a service of another build), restart it
if it died, and never make the editor wait long.

httpx is imported where it is used: with what it pulls in (about 145 modules) it would
be a third of what `kernelcast lsp` loads before its first forecast.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelcast.wire import STATE_FILE, Forecast, ForecastRequest, code_build, read_or_create_token, read_state

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

# How long a service that is up gets to answer: the health check of one that is busy, and
# the shutdown request of `kernelcast serve --stop`.
BUSY_ANSWER_S = 15.0
REQUEST_TIMEOUT_S = 10.0
# The embedded forecaster answers in milliseconds; standing in for a slow backend, it must show
# its forecast at once or not at all, whatever kernelcast.forecaster.timeoutMs allows the LLM.
STAND_IN = "embedded"
STAND_IN_TIMEOUT_S = 5.0
HEALTH_TIMEOUT_S = 1.0
# After a failed start, the same answer comes at once for this long: a service that cannot
# start must not cost a process start (1-2 s) on every keystroke.
START_RETRY_S = 10.0
# A service that is still starting (a loaded machine, a first import writing its bytecode) is
# waited for while its process lives, by every editor and every try, never joined by another: a
# second process on a busy machine only slows the first, and an editor shows its forecasts late
# rather than an error. One still silent this long after it began is reported, then stopped.
STARTING_FILE = "service.starting"
STARTING_LIMIT_S = 120.0
# The calibration version in cache keys is asked for again after this long, so local learning
# from another editor window or `kernelcast reset-learning` never leaves stale forecasts served.
BACKEND_INFO_TTL_S = 2.0


class ForecasterUnavailable(Exception):
    """The forecaster could not answer; the message is shown to the user as is."""


@dataclass
class BackendInfo:
    name: str
    model_id: str
    version: str
    calibration_version: str
    batches: bool = False  # forecasts many requests in one call (the embedded forecaster)


class ForecasterClient:
    def __init__(self, state_dir: Path, url: str = "", backend: str = "embedded", timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.state_dir = state_dir
        self.configured_url = url.rstrip("/")
        self.backend = backend
        self._url: str | None = None
        self._start_failure: tuple[float, str] | None = None  # (retry after, why it failed)
        self._token = read_or_create_token(state_dir)
        self._served: dict[str, BackendInfo] | None = None
        self._served_at = 0.0
        self._connect_lock = asyncio.Lock()
        # One start at a time: a file task cancelled by the next keystroke leaves it running for the next try.
        self._start: asyncio.Future[str] | None = None
        self.timeout_s = timeout_s  # an LLM on a CPU may need minutes: kernelcast.forecaster.timeoutMs
        self._http_client: httpx.AsyncClient | None = None

    @property
    def _http(self) -> httpx.AsyncClient:
        if self._http_client is None:
            import httpx

            self._http_client = httpx.AsyncClient(timeout=self.timeout_s)
        return self._http_client

    async def close(self) -> None:
        if self._http_client is not None:
            await self._http_client.aclose()

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"}

    async def _healthy(self, url: str) -> bool:
        import httpx

        try:
            response = await self._http.get(f"{url}/v1/health", headers=self._headers, timeout=HEALTH_TIMEOUT_S)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _connect(self) -> str:
        """The URL of a healthy service, starting one when this user has none.

        A known URL is used without asking again: a dead service shows as a transport
        error in `_call`, which forgets the URL and comes back here.
        """
        async with self._connect_lock:
            if self._url:
                return self._url
            self._served = None
            if self.configured_url:
                if not await self._healthy(self.configured_url):
                    raise ForecasterUnavailable(f"forecaster unavailable: no answer from {self.configured_url}")
                self._url = self.configured_url
                return self._url
            state = read_state(self.state_dir)
            if state and state.get("build") == code_build() and await self._healthy(state["url"]):
                self._url = state["url"]
                return self._url
            if self._start is None or self._start.done():
                if self._start_failure is not None and time.monotonic() < self._start_failure[0]:
                    raise ForecasterUnavailable(self._start_failure[1])
                self._start = self._start_in_background()
                self._start.add_done_callback(self._note_start_failure)
            self._url = await asyncio.shield(self._start)
            return self._url

    def _start_in_background(self) -> asyncio.Future[str]:
        """`_start_service` on a daemon thread, as a future of this loop: a start may be waited for up
        to STARTING_LIMIT_S, and an editor closing meanwhile must exit at once, not join that thread
        (asyncio's own threads are joined at exit)."""
        loop = asyncio.get_running_loop()
        start: asyncio.Future[str] = loop.create_future()

        def settle(outcome: str | Exception) -> None:
            if start.done():
                return
            if isinstance(outcome, Exception):
                start.set_exception(outcome)
            else:
                start.set_result(outcome)

        def run() -> None:
            outcome: str | Exception
            try:
                outcome = self._start_service()
            except Exception as failure:
                outcome = failure
            try:
                loop.call_soon_threadsafe(settle, outcome)
            except RuntimeError:  # the loop closed first: the editor is gone
                pass

        threading.Thread(target=run, name="kernelcast-service-start", daemon=True).start()
        return start

    def _note_start_failure(self, start: asyncio.Future[str]) -> None:
        """Remember why a start failed (read here, so a start nobody awaits any more logs no warning)."""
        error = None if start.cancelled() else start.exception()
        if isinstance(error, ForecasterUnavailable):
            self._start_failure = (time.monotonic() + START_RETRY_S, str(error))

    def _start_service(self) -> str:
        """Start `kernelcast serve` detached; a file lock keeps two editors from racing."""
        try:
            return self._start_locked()
        except OSError as error:  # an unusable service folder: no lock, log or state file
            raise ForecasterUnavailable(f"forecaster unavailable: cannot start the service ({error})") from error

    def _start_locked(self) -> str:
        lock_path = self.state_dir / "start.lock"
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = read_state(self.state_dir)
            alive = state is not None and process_alive(state.get("pid"))
            if alive and state.get("build") != code_build():
                logger.info("replacing forecaster service pid %s of build %s", state.get("pid"), state.get("build"))
                stop_service(self.state_dir)
            # Busy (three editors on two cores) is not dead: a service that takes its connections but
            # misses a health check gets BUSY_ANSWER_S to answer, so no second one starts beside it.
            elif alive and _responds(state["url"], self._headers, BUSY_ANSWER_S):
                return state["url"]
            process: subprocess.Popen[bytes] | None = None
            pid, started = self._still_starting() or (None, time.time())
            if pid is None:
                (self.state_dir / STATE_FILE).unlink(missing_ok=True)
                log = open(self.state_dir / "service.log", "ab")
                process = subprocess.Popen(
                    [sys.executable, "-m", "kernelcast", "serve", "--state-dir", str(self.state_dir)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,  # outlives this editor window; others share it
                )
                log.close()
                pid = process.pid
                (self.state_dir / STARTING_FILE).write_text(json.dumps({"pid": pid, "started": started, "build": code_build()}))
            while time.time() - started < STARTING_LIMIT_S:
                if not process_alive(pid):  # an exited child of ours is a zombie until polled: not alive
                    (self.state_dir / STARTING_FILE).unlink(missing_ok=True)
                    code = f" with code {process.poll()}" if process is not None else ""
                    raise ForecasterUnavailable(f"forecaster unavailable: the service exited{code}; see {self.state_dir / 'service.log'}")
                state = read_state(self.state_dir)
                if state and state.get("pid") == pid and _responds(state["url"], self._headers):
                    (self.state_dir / STARTING_FILE).unlink(missing_ok=True)
                    logger.info("started forecaster service pid %s at %s", pid, state["url"])
                    return state["url"]
                time.sleep(0.05)
            raise ForecasterUnavailable(
                f"forecaster unavailable: the service did not start within {STARTING_LIMIT_S:.0f} s (pid {pid}; "
                f"the next try starts another); see {self.state_dir / 'service.log'}"
            )

    def _still_starting(self) -> tuple[int, float] | None:
        """The pid and start time of a service of this build that an earlier try (or another editor)
        started and that is still starting, to be waited for; a record of one that exited is dropped,
        one silent past STARTING_LIMIT_S or of another build is stopped."""
        path = self.state_dir / STARTING_FILE
        try:
            record = json.loads(path.read_text())
            pid, started, build = int(record["pid"]), float(record["started"]), record["build"]
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            return None
        if not process_alive(pid) or b"kernelcast" not in _command_line(pid):
            path.unlink(missing_ok=True)
            return None
        if build == code_build() and time.time() - started < STARTING_LIMIT_S:
            return pid, started
        logger.info("stopping forecaster service pid %s (build %s): not serving %.0f s after it started", pid, build, time.time() - started)
        os.kill(pid, signal.SIGTERM)
        path.unlink(missing_ok=True)
        return None

    async def served(self) -> dict[str, BackendInfo]:
        """Every backend the service serves, by name; the calibration versions are part of every cache key."""
        if self._served is not None and time.monotonic() - self._served_at < BACKEND_INFO_TTL_S:
            return self._served
        payload = await self._call("GET", "/v1/backends?probe=false")
        self._served = {
            entry["name"]: BackendInfo(
                entry["name"],
                entry.get("model_id", ""),
                entry.get("version", ""),
                entry.get("calibration_version", ""),
                entry.get("batches") is True,
            )
            for entry in payload.get("backends", [])
            if entry.get("name")
        }
        self._served_at = time.monotonic()
        return self._served

    async def backend_info(self, name: str | None = None) -> BackendInfo:
        """Name, model and calibration version of `name` (default: the configured backend)."""
        name = name or self.backend
        served = await self.served()
        if name not in served:
            raise ForecasterUnavailable(f"forecaster backend {name!r} is not served (served: {', '.join(served)})")
        return served[name]

    async def stand_in(self) -> str | None:
        """The fast backend shown while the configured one works: embedded, when it is served
        and the configured backend is another (an LLM, or `combined` waiting for its slowest member)."""
        if self.backend == STAND_IN:
            return None
        try:
            return STAND_IN if STAND_IN in await self.served() else None
        except ForecasterUnavailable:
            return None  # the configured backend's own request reports it

    async def forecast(self, request: ForecastRequest, backend: str | None = None, timeout_s: float | None = None) -> Forecast:
        """A forecast from `backend` (default: the configured one) within `timeout_s` (default: timeoutMs)."""
        request.backend = backend or self.backend
        payload = await self._call("POST", "/v1/forecast", request.to_json(), timeout_s)
        return Forecast.from_json(payload)

    async def forecast_many(
        self, requests: list[ForecastRequest], backend: str | None = None, timeout_s: float | None = None
    ) -> list[Forecast]:
        """Forecasts of `requests` in one call, in order (send many only to a backend that batches)."""
        for request in requests:
            request.backend = backend or self.backend
        payload = await self._call("POST", "/v1/forecasts", {"requests": [request.to_json() for request in requests]}, timeout_s)
        forecasts = payload.get("forecasts") if isinstance(payload, dict) else None
        if not isinstance(forecasts, list) or len(forecasts) != len(requests):
            raise ForecasterUnavailable("forecaster error: the service answered a batch of forecasts with something else")
        return [Forecast.from_json(forecast) for forecast in forecasts]

    async def learn(self, request: ForecastRequest, measured_speedup: float) -> dict[str, Any]:
        """Teach the service one pair measured on this GPU; answers the new local correction.

        The calibration version changes with it, so the cached backend info is dropped:
        the next cache key differs and forecasts made before are not served again.
        """
        body = {"request": request.to_json(), "measured_speedup": measured_speedup, "backend": self.backend}
        try:
            return await self._call("POST", "/v1/learn", body)
        finally:
            self._served = None

    async def _call(self, method: str, path: str, body: Any = None, timeout_s: float | None = None) -> Any:
        """One request; on a dead service, reconnect (restarting it) and try once more."""
        import httpx

        wait_s = timeout_s or self.timeout_s
        for attempt in range(2):
            url = await self._connect()
            try:
                response = await self._http.request(method, f"{url}{path}", json=body, headers=self._headers, timeout=wait_s)
            except httpx.TimeoutException as error:
                self._url = None  # a hung service: the next call checks its health, then replaces it
                setting = "" if timeout_s else " (kernelcast.forecaster.timeoutMs)"
                raise ForecasterUnavailable(f"forecaster unavailable: no answer within {wait_s:g} s{setting}") from error
            except httpx.TransportError as error:
                self._url = None
                if attempt == 0:
                    continue
                raise ForecasterUnavailable("forecaster unavailable: the service stopped answering") from error
            if response.status_code == 200:
                return response.json()
            try:
                detail = response.json().get("error", response.text)
            except ValueError:
                detail = response.text
            raise ForecasterUnavailable(f"forecaster error {response.status_code}: {detail}")
        raise ForecasterUnavailable("forecaster unavailable")


STOP_WAIT_S = 10.0


def stop_service(state_dir: Path) -> tuple[bool, str]:
    """Stop the service whose state file is in `state_dir` and wait for it to exit: whether none runs
    now, and what happened, in words.

    It is asked over HTTP with the token (a pid alone could name another process by now);
    one that does not answer in time is sent SIGTERM.
    """
    state = read_state(state_dir)
    if state is None:
        return True, f"no service running (no state file in {state_dir})"
    import httpx

    pid, url = state.get("pid"), state["url"]
    headers = {"Authorization": f"Bearer {read_or_create_token(state_dir)}"}
    try:
        httpx.post(f"{url}/v1/shutdown", headers=headers, timeout=BUSY_ANSWER_S).raise_for_status()
    except httpx.TimeoutException:  # hung: end it, if that pid is still a kernelcast service
        if process_alive(pid) and b"kernelcast" in _command_line(pid):
            os.kill(pid, signal.SIGTERM)
    except httpx.HTTPError:  # nothing there: a state file left by a killed service
        if read_state(state_dir) == state:
            (state_dir / STATE_FILE).unlink(missing_ok=True)
        return True, f"no service running at {url} (removed its stale state file)"
    deadline = time.monotonic() + STOP_WAIT_S
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if process_alive(pid):
        return False, f"the service pid {pid} at {url} did not exit within {STOP_WAIT_S:g} s"
    return True, f"stopped the service pid {pid} at {url}"


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def process_alive(pid: Any) -> bool:
    """True while `pid` runs; an exited child its parent has not reaped yet (a zombie) is not running."""
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        status = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True  # no /proc to ask: take the signal's word
    return status[status.rfind(b")") + 2 : status.rfind(b")") + 3] != b"Z"


def _responds(url: str, headers: dict[str, str], patience_s: float = 0.0) -> bool:
    """True once the service answers its health check. False at once when nothing takes the
    connection (the service is gone, its pid reused) or something else answers; else after
    `patience_s` of timed-out checks (hung)."""
    import httpx

    deadline = time.monotonic() + patience_s
    while True:
        try:
            return httpx.get(f"{url}/v1/health", headers=headers, timeout=HEALTH_TIMEOUT_S).status_code == 200
        except httpx.TimeoutException:
            if time.monotonic() >= deadline:
                return False
        except httpx.HTTPError:
            return False
