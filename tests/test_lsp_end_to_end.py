"""The real server over stdio, driven by pytest-lsp with neovim's capabilities."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lsp_support import EXAMPLES, SERVER_COMMAND, initialize_in_workspace, isolated_env, stop_service
from lsprotocol import types
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")

WAIT_S = 20


class Recorder:
    """Everything the server pushed, in order, so tests can count and wait."""

    def __init__(self) -> None:
        self.diagnostics: list[types.PublishDiagnosticsParams] = []
        self.statuses: list[dict[str, Any]] = []
        self.inlay_refreshes = 0

    def latest(self, uri: str) -> types.PublishDiagnosticsParams | None:
        return next((d for d in reversed(self.diagnostics) if d.uri == uri), None)

    async def wait_for(self, predicate: Any, timeout: float = WAIT_S) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s; pushed: {self.diagnostics[-3:]}")
            await asyncio.sleep(0.02)


def _client_with_recorder(recorder: Recorder) -> Any:
    def factory() -> LanguageClient:
        client = LanguageClient(converter_factory=default_converter)
        defaults = {m: f for m, f in DEFAULT_CLIENT_FEATURES.items() if m != types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS}
        register_lsp_features(client, defaults)

        @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
            client.diagnostics[params.uri] = params.diagnostics
            recorder.diagnostics.append(params)

        @client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)
        def on_refresh(params: None) -> None:
            recorder.inlay_refreshes += 1

        @client.feature("kernelcast/status")
        def on_status(params: Any) -> None:
            recorder.statuses.append(params)

        return client

    return factory


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    shutil.copytree(EXAMPLES, root)
    return root


class Session:
    def __init__(self, client: LanguageClient, recorder: Recorder, root: Path) -> None:
        self.client, self.recorder, self.root = client, recorder, root

    def open(self, name: str, text: str | None = None, language: str = "cuda") -> str:
        path = self.root / name
        if text is None:
            text = path.read_text()
        uri = path.as_uri()
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text))
        )
        return uri

    def change(self, uri: str, version: int, text: str) -> None:
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    async def diagnostics_for(self, uri: str, version: int = 1) -> list[types.Diagnostic]:
        await self.recorder.wait_for(lambda: (d := self.recorder.latest(uri)) is not None and d.version == version)
        latest = self.recorder.latest(uri)
        assert latest is not None
        return list(latest.diagnostics)

    async def inlay_hints(self, uri: str) -> list[types.InlayHint]:
        result = await self.client.text_document_inlay_hint_async(
            types.InlayHintParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=10_000, character=0)),
            )
        )
        return list(result or [])


async def _start(root: Path, home: Path, settings: dict[str, Any] | None = None) -> tuple[LanguageClient, Recorder]:
    recorder = Recorder()
    config = ClientServerConfig(
        server_command=SERVER_COMMAND, server_env=isolated_env(home), client_factory=_client_with_recorder(recorder)
    )
    client = await config.start()
    await initialize_in_workspace(client, root, {"kernelcast": settings or {}})
    return client, recorder


@pytest.fixture
async def session(workspace: Path, tmp_path: Path) -> AsyncIterator[Session]:
    home = tmp_path / "home"
    client, recorder = await _start(workspace, home)
    try:
        yield Session(client, recorder, workspace)
    finally:
        await client.shutdown_session()
        await client.stop()
        stop_service(home)


def _label(hint: types.InlayHint) -> str:
    return hint.label if isinstance(hint.label, str) else "".join(part.value for part in hint.label)


async def test_forecast_appears_as_diagnostic_hint_and_hover(session: Session) -> None:
    uri = session.open("matmul_tiled.cu")
    diagnostics = await session.diagnostics_for(uri)
    kernel_diagnostics = [d for d in diagnostics if d.code in ("forecast", "uncertain")]
    assert len(kernel_diagnostics) == 1
    diagnostic = kernel_diagnostics[0]
    assert diagnostic.message.startswith("sgemm: ")
    assert "than reference (conf" in diagnostic.message or "measure?" in diagnostic.message
    text = (session.root / "matmul_tiled.cu").read_text().splitlines()
    signature_line = next(i for i, line in enumerate(text) if "__global__" in line)
    assert diagnostic.range.start.line == signature_line

    hints = await session.inlay_hints(uri)
    assert len(hints) == 1
    label = _label(hints[0])
    assert label.startswith("⏱ ") and len(label) <= 30
    assert hints[0].position.line == signature_line
    assert session.recorder.inlay_refreshes >= 1

    hover = await session.client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(uri=uri), types.Position(line=signature_line, character=17))
    )
    assert hover is not None
    markdown = hover.contents.value
    assert "matmul_naive.cu" in markdown and "≥4× faster" in markdown and "80% interval" in markdown
    assert "H100" in markdown


async def test_measure_and_reference_code_actions(session: Session) -> None:
    uri = session.open("matmul_tiled.cu")
    diagnostics = await session.diagnostics_for(uri)
    signature = next(d for d in diagnostics if d.code in ("forecast", "uncertain")).range
    actions = await session.client.text_document_code_action_async(
        types.CodeActionParams(types.TextDocumentIdentifier(uri=uri), signature, types.CodeActionContext(diagnostics=diagnostics))
    )
    titles = [a.title for a in actions or []]
    assert "Measure sgemm on GPU" in titles

    lone = "__global__ void scale(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2.0f; }\n"
    lone_uri = session.open("lone.cu", lone)
    diagnostics = await session.diagnostics_for(lone_uri)
    assert [d.code for d in diagnostics] == ["no-reference"]
    hints = await session.inlay_hints(lone_uri)
    assert _label(hints[0]) == "⏱ no reference · set one?"
    actions = await session.client.text_document_code_action_async(
        types.CodeActionParams(
            types.TextDocumentIdentifier(uri=lone_uri), diagnostics[0].range, types.CodeActionContext(diagnostics=diagnostics)
        )
    )
    set_reference = [a for a in actions or [] if a.title.startswith("Set reference…")]
    assert set_reference, [a.title for a in actions or []]
    edit = set_reference[0].edit.changes[lone_uri][0]
    assert edit.new_text.startswith("// kernelcast: reference=") and edit.range.start.line == 0


def _kernels(*names: str) -> str:
    return "".join(f"__global__ void {name}(float* x, int n) {{ int i = threadIdx.x; if (i < n) x[i] += 1.0f; }}\n" for name in names)


async def test_set_reference_offers_only_targets_that_resolve(session: Session) -> None:
    folder = session.root / "refs"
    folder.mkdir()
    (folder / "a_two_others.cu").write_text(_kernels("shift", "negate"))  # no `scale`, and two kernels: ambiguous
    (folder / "b_single_other.cu").write_text(_kernels("double_it"))  # its only kernel: the file alone resolves
    (folder / "c_defines_scale.cu").write_text(_kernels("negate", "scale"))  # defines the name
    (folder / "d_no_kernels.cu").write_text("int helper(int x) { return x; }\n")
    uri = session.open("refs/lone.cu", _kernels("scale"))
    diagnostics = await session.diagnostics_for(uri)
    actions = await session.client.text_document_code_action_async(
        types.CodeActionParams(
            types.TextDocumentIdentifier(uri=uri), diagnostics[0].range, types.CodeActionContext(diagnostics=diagnostics)
        )
    )
    offered = [a for a in actions or [] if a.title.startswith("Set reference…")]
    assert [a.title for a in offered] == ["Set reference… c_defines_scale.cu::scale", "Set reference… b_single_other.cu"]
    assert [a.edit.changes[uri][0].new_text for a in offered] == [
        "// kernelcast: reference=c_defines_scale.cu::scale\n",
        "// kernelcast: reference=b_single_other.cu\n",
    ]

    # A reference typed by hand is checked the same way before it becomes a pragma.
    answer = await session.client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="kernelcast.setReference",
            arguments=[{"uri": uri, "position": {"line": 0, "character": 0}, "reference": "a_two_others.cu::scale"}],
        )
    )
    assert answer["ok"] is False and "no kernel `scale` there; it has `shift`, `negate`" in answer["message"]
    shown = [m.message for m in session.client.messages]
    assert any("Set reference: " in m and "a_two_others.cu::scale" in m for m in shown), shown


async def test_burst_of_edits_yields_one_forecast_for_the_final_text(session: Session) -> None:
    uri = session.open("vector_add_float4.cu")
    await session.diagnostics_for(uri)
    # An empty cache: the forecast comes before the compiles, then again with their facts; the burst starts after both.
    await session.recorder.wait_for(lambda: sum(p.uri == uri for p in session.recorder.diagnostics) >= 2)
    before = len(session.recorder.diagnostics)
    base = (session.root / "vector_add_float4.cu").read_text()
    for version in range(2, 52):
        session.change(uri, version, base + f"\n// edit {version}\n")
        await asyncio.sleep(0.005)
    await session.diagnostics_for(uri, version=51)
    await asyncio.sleep(0.8)  # longer than the debounce: nothing else may arrive
    published = [d for d in session.recorder.diagnostics[before:] if d.uri == uri]
    assert [d.version for d in published] == [51]


async def test_off_pragma_and_bad_files_get_no_forecast(session: Session) -> None:
    off_uri = session.open("off.cu", "// kernelcast: off\n" + (session.root / "matmul_tiled.cu").read_text())
    assert await session.diagnostics_for(off_uri) == []
    assert await session.inlay_hints(off_uri) == []

    huge_uri = session.open("huge.cu", "// x\n" * 2_200_000)
    diagnostics = await session.diagnostics_for(huge_uri)
    assert len(diagnostics) == 1 and "MB" in diagnostics[0].message

    broken_uri = session.open("broken.cu", "__global__ void half_typed(float* x) {\n  x[threadIdx.x] = \n")
    diagnostics = await session.diagnostics_for(broken_uri)
    assert diagnostics, "a half-typed kernel is reported, not ignored"


async def test_settings_exclude_and_threshold(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    client, recorder = await _start(workspace, home, {"exclude": ["*_tiled.cu"], "confidenceThreshold": 0.5})
    session = Session(client, recorder, workspace)
    try:
        excluded = session.open("matmul_tiled.cu")
        assert await session.diagnostics_for(excluded) == []
        uri = session.open("vector_add_float4.cu")
        diagnostics = await session.diagnostics_for(uri)
        assert [d.code for d in diagnostics] == ["forecast"], "threshold 0.5 never defers"

        client.set_configuration({"kernelcast": {"inlayHints": {"enable": False}, "confidenceThreshold": "high"}})
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await recorder.wait_for(lambda: any("confidenceThreshold" in m.message for m in client.messages))
        await asyncio.sleep(0.3)
        assert await session.inlay_hints(uri) == []
    finally:
        await client.shutdown_session()
        await client.stop()
        stop_service(home)


async def test_reopening_shows_cached_forecast_at_once(session: Session) -> None:
    uri = session.open("matmul_tiled.cu")
    first = await session.diagnostics_for(uri)
    session.client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
    await session.recorder.wait_for(lambda: not session.recorder.latest(uri).diagnostics)
    started = asyncio.get_running_loop().time()
    session.open("matmul_tiled.cu")
    again = await session.diagnostics_for(uri)
    assert asyncio.get_running_loop().time() - started < 1.0
    assert [d.message for d in again] == [d.message for d in first]
    signature_line = again[-1].range.start.line
    hover = await session.client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(uri=uri), types.Position(line=signature_line, character=5))
    )
    assert "From cache" in hover.contents.value
