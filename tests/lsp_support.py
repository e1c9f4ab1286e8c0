"""Helpers for end-to-end tests that start real kernelcast processes."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kernelcast.server.service_client import process_alive

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SERVER_COMMAND = [sys.executable, "-m", "kernelcast", "lsp"]
# The installed console script: beside the interpreter in a virtual environment, else on PATH
# (a GPU host runs the tests with the package laid out and a `kernelcast` script on PATH).
_BESIDE = Path(sys.executable).with_name("kernelcast")
KERNELCAST = str(_BESIDE) if _BESIDE.exists() else shutil.which("kernelcast") or str(_BESIDE)
# What a keystroke runs, without the compiler child processes (they have their own tests).
FAST = {"debounceMs": 0, "compilerFacts": {"enable": False}}


async def initialize_in_workspace(client: Any, root: Path, settings: dict[str, Any]) -> None:
    """Initialize a pytest-lsp client as neovim would, with `root` as its one workspace folder and
    `settings` (the whole {"kernelcast": {...}} object) answered for workspace/configuration too."""
    from lsprotocol import types
    from pytest_lsp import client_capabilities

    client.set_configuration(settings)
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("neovim"),
            root_uri=root.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="workspace")],
            initialization_options=settings,
        )
    )


def isolated_env(home: Path) -> dict[str, str]:
    """An environment whose kernelcast state (cache, service, token) lives under `home`."""
    env = dict(os.environ)
    env["KERNELCAST_HOME"] = str(home)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def commit_all(root: Path) -> None:
    """Make `root` a git repository with everything committed (for git HEAD references)."""
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
        subprocess.run(["git", *command], cwd=root, check=True, capture_output=True)


def stop_service(home: Path) -> None:
    """Stop the forecaster service a test's server started (it outlives the server by design)."""
    state_file = home / "service" / "service.json"
    try:
        pid = json.loads(state_file.read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not process_alive(pid):  # an exited service waiting for init to reap it counts as gone
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


class StdioLsp:
    """A lean JSON-RPC client on the real server's stdio, for thousands of documents.

    pytest-lsp's client parses every message into lsprotocol types, which on 2 cores costs
    about as much as the server's own work; this one keeps messages as dicts, answers the
    server's requests (configuration, progress, refresh) and records what it pushes.
    """

    def __init__(self, home: Path, root: Path, settings: dict | None = None) -> None:
        self.home, self.root = home, root
        self.settings = {"kernelcast": settings or {}}
        self.diagnostics: dict[str, tuple[int | None, list[dict]]] = {}
        self.messages: list[str] = []
        self.stderr = bytearray()
        self._waiters: dict[str, list[tuple[int | None, asyncio.Future]]] = {}
        self._pending: dict[int, asyncio.Future] = {}
        self._next_id = 0

    async def start(self) -> StdioLsp:
        self.process = await asyncio.create_subprocess_exec(
            *SERVER_COMMAND,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=isolated_env(self.home),
            limit=1 << 20,
        )
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._drain_stderr())]
        capabilities = {
            "workspace": {"configuration": True, "inlayHint": {"refreshSupport": True}},
            "window": {"workDoneProgress": True},
            "textDocument": {"publishDiagnostics": {"versionSupport": True}, "inlayHint": {}},
        }
        await self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": self.root.as_uri(),
                "capabilities": capabilities,
                "initializationOptions": self.settings,
                "workspaceFolders": [{"uri": self.root.as_uri(), "name": "workspace"}],
            },
        )
        self.notify("initialized", {})
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def send_raw(self, body: bytes) -> None:
        """One framed message with any bytes as its body (the framing itself stays valid)."""
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def _send(self, message: dict) -> None:
        self.send_raw(json.dumps({"jsonrpc": "2.0", **message}).encode("utf-8", "surrogatepass"))

    def notify(self, method: str, params: Any) -> None:
        self._send({"method": method, "params": params})

    async def request(self, method: str, params: Any, timeout: float | None = 30) -> Any:
        self._next_id += 1
        future = asyncio.get_running_loop().create_future()
        self._pending[self._next_id] = future
        self._send({"id": self._next_id, "method": method, "params": params})
        await self.process.stdin.drain()
        return await asyncio.wait_for(future, timeout)

    def open(self, uri: str, text: str, version: int = 1, language: str = "cuda") -> None:
        self.diagnostics.pop(uri, None)  # a reopened file's versions start again
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language, "version": version, "text": text}})

    def change(self, uri: str, version: int, text: str) -> None:
        self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]})

    def close(self, uri: str) -> None:
        self.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    async def published(self, uri: str, version: int | None, timeout: float | None) -> list[dict]:
        """The diagnostics the server publishes for `version` of `uri` (those already in, or the next)."""
        known = self.diagnostics.get(uri)
        if known is not None and known[0] == version:
            return known[1]
        future = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(uri, []).append((version, future))
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            self._waiters[uri] = [w for w in self._waiters.get(uri, []) if w[1] is not future]

    async def inlay_hints(self, uri: str, timeout: float | None = 30) -> list[dict]:
        whole = {"start": {"line": 0, "character": 0}, "end": {"line": 100_000, "character": 0}}
        return await self.request("textDocument/inlayHint", {"textDocument": {"uri": uri}, "range": whole}, timeout) or []

    async def hover(self, uri: str, line: int, character: int = 0, timeout: float | None = 30) -> str:
        answer = await self.request(
            "textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}, timeout
        )
        return (answer or {}).get("contents", {}).get("value", "")

    async def stop(self) -> int:
        """Shut down politely when the server still answers; its exit code."""
        if self.process.returncode is None:
            try:
                await self.request("shutdown", None, timeout=10)
                self.notify("exit", None)
                await self.process.stdin.drain()
                await asyncio.wait_for(self.process.wait(), 10)
            except (asyncio.TimeoutError, ConnectionError):
                self.process.kill()
                await self.process.wait()
        for task in self._tasks:
            task.cancel()
        return self.process.returncode

    async def _read(self) -> None:
        stdout = self.process.stdout
        while True:
            try:
                header = await stdout.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:  # the server exited
                return
            length = int(next(line for line in header.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1])
            message = json.loads(await stdout.readexactly(length))
            if "method" in message and "id" in message:
                self._answer(message)
            elif "method" in message:
                self._notified(message["method"], message.get("params"))
            elif message.get("id") in self._pending:
                future = self._pending.pop(message["id"])
                if not future.done():
                    if "error" in message:
                        future.set_exception(RuntimeError(message["error"]))
                    else:
                        future.set_result(message.get("result"))

    def _answer(self, message: dict) -> None:
        method = message["method"]
        result: Any = None
        if method == "workspace/configuration":
            result = [self.settings["kernelcast"] for _ in message["params"]["items"]]
        self._send({"id": message["id"], "result": result})

    def _notified(self, method: str, params: Any) -> None:
        if method == "textDocument/publishDiagnostics":
            uri, version = params["uri"], params.get("version")
            self.diagnostics[uri] = (version, params["diagnostics"])
            for wanted, future in self._waiters.get(uri, []):
                if wanted == version and not future.done():
                    future.set_result(params["diagnostics"])
        elif method == "window/showMessage":
            self.messages.append(params["message"])

    async def _drain_stderr(self) -> None:
        while chunk := await self.process.stderr.read(1 << 16):
            self.stderr += chunk


# The reliability suite's `start` fixture: `await start(settings, root=...)` gives a started server.
Start = Callable[..., Awaitable[StdioLsp]]
