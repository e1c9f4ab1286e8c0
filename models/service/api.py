"""`kernelcast serve`: the locally served forecaster, shared by every editor window.

Binds loopback only and answers only requests that carry the per-user token, so
another user on the machine can neither read forecasts nor make it run backends.
A state file (url, pid, version, build) lets LSP servers of the same build find a running
instance instead of starting their own. It exits after an idle time without requests
(`--idle-timeout`, 30 minutes by default) or when POST /v1/shutdown asks (`kernelcast serve --stop`).
POST /v1/forecast answers with the request's `backend` (default: the service's), so the LSP
can show the embedded forecast while an LLM works; POST /v1/forecasts answers many requests in
one call (a file's kernels), predicted as one batch by a backend that batches. POST /v1/learn
takes the user's measured pairs (local learning).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelcast import __version__
from kernelcast.models.prediction import predicts_batches
from kernelcast.models.service.calibrated import Forecaster
from kernelcast.models.service.llm_common import LLMBackendError
from kernelcast.wire import STATE_FILE, TOKEN_FILE, TOKEN_HEADER, ForecastRequest, code_build, read_or_create_token, read_state, write_state

# Requests in one POST /v1/forecasts; the LSP sends at most 64 (server/forecasts.py).
MAX_BATCH = 256
DEFAULT_IDLE_TIMEOUT_MIN = 30.0


class Activity:
    """When the last request ended and how many are in flight: the idle exit waits for both."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._last = time.monotonic()

    def begin(self) -> None:
        with self._lock:
            self._in_flight += 1

    def end(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._last = time.monotonic()

    def idle_s(self) -> float:
        with self._lock:
            return 0.0 if self._in_flight else time.monotonic() - self._last


def _require_loopback(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ValueError(f"the forecaster serves loopback only; {host!r} is not a loopback address")


def build_app(forecaster: Forecaster, token: str, activity: Activity | None = None, stop: Callable[[], None] | None = None) -> Any:
    """The ASGI app; starlette is imported here so the LSP never pays for it. Requests with
    the token count as `activity`; POST /v1/shutdown calls `stop`."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    started = time.time()
    expected = f"Bearer {token}"
    activity = activity or Activity()

    class TokenMiddleware:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = dict(scope.get("headers") or [])
                given = headers.get(TOKEN_HEADER.encode(), b"").decode("latin-1")
                if not secrets.compare_digest(given, expected):
                    response = JSONResponse({"error": "missing or wrong token"}, status_code=401)
                    await response(scope, receive, send)
                    return
                activity.begin()
                try:
                    await self.app(scope, receive, send)
                finally:
                    activity.end()
                return
            await self.app(scope, receive, send)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse(
            {"ok": True, "pid": os.getpid(), "version": __version__, "build": code_build(), "uptime_s": round(time.time() - started, 1)}
        )

    async def shutdown(request: Request) -> JSONResponse:
        if stop is None:
            return JSONResponse({"error": "this service cannot be stopped over HTTP"}, status_code=501)
        stop()
        return JSONResponse({"stopping": True, "pid": os.getpid()})

    def describe(probe: bool) -> list[dict[str, Any]]:
        listing = []
        for name, backend in forecaster.backends.items():
            entry = {
                "name": name,
                "model_id": backend.model_id,
                "version": backend.version,
                "default": name == forecaster.default_backend,
                "calibration_version": forecaster.calibration.version,
                "batches": predicts_batches(backend),
            }
            if probe:
                status = backend.status()
                entry.update(available=status.available, detail=status.detail)
            listing.append(entry)
        return listing

    async def list_backends(request: Request) -> JSONResponse:
        """Every backend served. `?probe=false` leaves out whether each can answer: asking an LLM
        server takes up to its deadline, and the LSP needs only names and versions for its cache keys."""
        probe = request.query_params.get("probe") != "false"
        return JSONResponse({"backends": await run_in_threadpool(describe, probe)})

    async def answer(work: Callable[[], Any]) -> JSONResponse:
        """Run a forecast off the event loop; a backend's failure becomes an error the LSP shows."""
        try:
            return JSONResponse(await run_in_threadpool(work))
        except KeyError as error:
            return JSONResponse({"error": str(error.args[0])}, status_code=400)
        except LLMBackendError as error:  # a model server that is down or answers garbage
            return JSONResponse({"error": f"backend failed: {error}"}, status_code=503)

    async def forecast(request: Request) -> JSONResponse:
        try:
            parsed = ForecastRequest.from_json(await request.json())
        except (ValueError, TypeError, KeyError) as error:
            return JSONResponse({"error": f"bad forecast request: {error}"}, status_code=400)
        return await answer(lambda: forecaster.forecast(parsed).to_json())

    async def forecasts(request: Request) -> JSONResponse:
        """{"requests": [...]} → {"forecasts": [...]} in the same order; one bad request refuses all."""
        try:
            body = await request.json()
            items = body.get("requests") if isinstance(body, dict) else None
            if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
                raise ValueError(f"expected {{requests: [1 to {MAX_BATCH} forecast requests]}}")
            parsed = []
            for number, item in enumerate(items, start=1):
                try:
                    parsed.append(ForecastRequest.from_json(item))
                except (ValueError, TypeError, KeyError, AttributeError) as error:
                    raise ValueError(f"request {number}: {error}") from error
        except ValueError as error:
            return JSONResponse({"error": f"bad forecast request: {error}"}, status_code=400)
        return await answer(lambda: {"forecasts": [result.to_json() for result in forecaster.forecast_many(parsed)]})

    async def learn(request: Request) -> JSONResponse:
        """One pair measured on the user's GPU; answers the new local correction (n, bias_log2, direction_temperature)."""
        try:
            body = await request.json()
            if not isinstance(body, dict) or "measured_speedup" not in body:
                raise ValueError("expected {request: <forecast request>, measured_speedup: S, backend?}")
            parsed = ForecastRequest.from_json(body.get("request"))
        except (ValueError, TypeError, KeyError) as error:
            return JSONResponse({"error": f"bad learn request: {error}"}, status_code=400)
        parsed.backend = body.get("backend") or parsed.backend
        try:
            summary = await run_in_threadpool(forecaster.learn, parsed, body["measured_speedup"])
        except KeyError as error:
            return JSONResponse({"error": str(error.args[0])}, status_code=400)
        except ValueError as error:
            return JSONResponse({"error": f"bad learn request: {error}"}, status_code=400)
        except LLMBackendError as error:
            return JSONResponse({"error": f"backend failed: {error}"}, status_code=503)
        except OSError as error:  # a full or read-only state folder
            return JSONResponse({"error": f"could not store the measurement: {error}"}, status_code=500)
        return JSONResponse(summary)

    return Starlette(
        routes=[
            Route("/v1/health", health, methods=["GET"]),
            Route("/v1/backends", list_backends, methods=["GET"]),
            Route("/v1/forecast", forecast, methods=["POST"]),
            Route("/v1/forecasts", forecasts, methods=["POST"]),
            Route("/v1/learn", learn, methods=["POST"]),
            Route("/v1/shutdown", shutdown, methods=["POST"]),
        ],
        middleware=[Middleware(TokenMiddleware)],
    )


def serve(
    state_dir: Path,
    backend_names: list[str],
    host: str = "127.0.0.1",
    port: int = 0,
    options: dict[str, Any] | None = None,
    idle_timeout_min: float = DEFAULT_IDLE_TIMEOUT_MIN,
) -> None:
    """Run until stopped or idle for `idle_timeout_min` (0: never); writes the state file once
    the socket listens and says on stdout where it listens and where its token is."""
    import uvicorn

    _require_loopback(host)
    if idle_timeout_min < 0:
        raise ValueError(f"--idle-timeout must be 0 (never) or more minutes, got {idle_timeout_min:g}")
    token = read_or_create_token(state_dir)
    forecaster = Forecaster(backend_names, options=options)
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that name it, and without
    # it every answer's body waited for the client's delayed ACK (40 ms per request).
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    # Listening before the state file names it: a client that reads the file may connect at once,
    # and a refused connection reads as "no service here" (stop_service drops the file).
    listener.listen(socket.SOMAXCONN)
    bound_port = listener.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    state = {
        "url": f"http://{url_host}:{bound_port}",
        "pid": os.getpid(),
        "version": __version__,
        "build": code_build(),
        "backends": backend_names,
        "started": time.time(),
    }
    activity = Activity()
    server: Any = None

    def stop() -> None:
        server.should_exit = True

    config = uvicorn.Config(build_app(forecaster, token, activity, stop), log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    if idle_timeout_min:
        threading.Thread(target=_exit_when_idle, args=(activity, idle_timeout_min * 60, stop), daemon=True).start()
    write_state(state_dir, state)
    idle_words = f"exits after {idle_timeout_min:g} min without requests" if idle_timeout_min else "runs until stopped"
    print(
        f"kernelcast serve: listening on {state['url']} (backends: {', '.join(backend_names)}; pid {os.getpid()})\n"
        f"  requests need the header 'Authorization: Bearer <token>'; the token is in {state_dir / TOKEN_FILE}\n"
        f"  {idle_words}; `kernelcast serve --stop` stops it",
        flush=True,
    )
    try:
        server.run(sockets=[listener])
    finally:
        current = read_state(state_dir)
        if current and current.get("pid") == os.getpid():
            (state_dir / STATE_FILE).unlink(missing_ok=True)


def _exit_when_idle(activity: Activity, idle_timeout_s: float, stop: Callable[[], None]) -> None:
    """Stop the server once no request came for `idle_timeout_s`; the next editor starts a new one."""
    while True:
        idle_s = activity.idle_s()
        if idle_s >= idle_timeout_s:
            stop()
            return
        time.sleep(min(idle_timeout_s - idle_s, 5.0) + 0.01)
