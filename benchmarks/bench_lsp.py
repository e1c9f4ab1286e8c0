"""LSP latency and memory: the real server over stdio, driven like an editor.

Measures (issue 2's targets):
  1. cached inlayHint round trip, p50/p99 (target ≤ 10 ms p99);
  2. edit → first hint: didChange → publishDiagnostics of that version, p50, with the
     debounce at 0 (processing alone) and at the default 400 ms (what a user waits);
  3. server RSS while typing across 50 open files for --minutes (target ≤ 250 MB, flat).

    python benchmarks/bench_lsp.py --minutes 10 --out benchmarks/results/lsp.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FILES = 50


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Editor:
    def __init__(self, workspace: Path, home: Path, debounce_ms: int) -> None:
        self.workspace, self.home, self.debounce_ms = workspace, home, debounce_ms
        self.published: dict[str, list[tuple[int | None, float]]] = {}
        self.versions: dict[str, int] = {}

    async def start(self) -> None:
        def factory() -> LanguageClient:
            client = LanguageClient(converter_factory=default_converter)
            register_lsp_features(
                client, {m: f for m, f in DEFAULT_CLIENT_FEATURES.items() if m != types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS}
            )

            @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
            def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
                self.published.setdefault(params.uri, []).append((params.version, time.perf_counter()))

            @client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)
            def on_refresh(params: None) -> None:
                return None

            @client.feature("kernelcast/status")
            def on_status(params: Any) -> None:
                return None

            return client

        env = {**os.environ, "KERNELCAST_HOME": str(self.home)}
        config = ClientServerConfig(server_command=[sys.executable, "-m", "kernelcast", "lsp"], server_env=env, client_factory=factory)
        self.client = await config.start()
        settings = {"kernelcast": {"debounceMs": self.debounce_ms}}
        self.client.set_configuration(settings)
        await self.client.initialize_session(
            types.InitializeParams(
                capabilities=client_capabilities("neovim"), root_uri=self.workspace.as_uri(), initialization_options=settings
            )
        )

    @property
    def pid(self) -> int:
        return self.client._server.pid  # the server subprocess pytest-lsp started

    def open(self, path: Path) -> str:
        uri = path.as_uri()
        self.versions[uri] = 1
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id="cuda", version=1, text=path.read_text()))
        )
        return uri

    def change(self, uri: str, text: str) -> tuple[int, float]:
        self.versions[uri] += 1
        version = self.versions[uri]
        sent = time.perf_counter()
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )
        return version, sent

    async def wait_published(self, uri: str, version: int, timeout: float = 30) -> float:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            for published_version, at in self.published.get(uri, []):
                if published_version == version:
                    return at
            await asyncio.sleep(0.002)
        raise TimeoutError(f"no diagnostics for {uri} v{version}")

    async def inlay_hints(self, uri: str) -> list[types.InlayHint]:
        return (
            await self.client.text_document_inlay_hint_async(
                types.InlayHintParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=500, character=0)),
                )
            )
            or []
        )

    async def stop(self) -> None:
        await self.client.shutdown_session()
        await self.client.stop()


def make_workspace(root: Path) -> list[Path]:
    """50 candidate kernels, each with a reference pragma and its own small variation."""
    shutil.copytree(EXAMPLES, root)
    base = (root / "matmul_tiled.cu").read_text()
    files = []
    for index in range(FILES):
        path = root / f"variant_{index:02d}.cu"
        path.write_text(base.replace("#define TILE 16", f"#define TILE 16\n#define VARIANT {index}"))
        files.append(path)
    return files


def edited(text: str, step: int) -> str:
    """A kernel text as if one more token had been typed inside the kernel body."""
    return text.replace("float sum = 0.0f;", f"float sum = 0.0f; int typed_{step} = {step};", 1)


async def cached_round_trips(editor: Editor, uri: str, count: int = 1000) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        hints = await editor.inlay_hints(uri)
        times.append(1000 * (time.perf_counter() - started))
        assert hints, "no hint to time"
    return times


async def edit_to_hint(editor: Editor, uri: str, path: Path, count: int) -> list[float]:
    text = path.read_text()
    latencies = []
    for step in range(count):
        version, sent = editor.change(uri, edited(text, 100_000 + step + 1000 * editor.debounce_ms))
        arrived = await editor.wait_published(uri, version)
        latencies.append(1000 * (arrived - sent))
        await asyncio.sleep(0.2)
    return latencies


async def typing(editor: Editor, uris: list[str], paths: list[Path], minutes: float) -> list[dict[str, float]]:
    """Type a character every 50 ms in a random open file; sample RSS every 10 s."""
    rng = random.Random(7)
    texts = [p.read_text() for p in paths]
    samples = []
    started = time.monotonic()
    next_sample = started
    step = 0
    while time.monotonic() - started < minutes * 60:
        index = rng.randrange(len(uris))
        step += 1
        texts[index] = edited(texts[index], step) if rng.random() < 0.5 else texts[index] + f"// {step}\n"
        editor.change(uris[index], texts[index])
        if step % 7 == 0:
            await editor.inlay_hints(uris[index])
        if time.monotonic() >= next_sample:
            samples.append({"t_s": round(time.monotonic() - started, 1), "rss_mb": round(rss_mb(editor.pid), 1), "edits": step})
            next_sample += 10
        await asyncio.sleep(0.05)
    return samples


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kernelcast-bench-"))
    paths = make_workspace(tmp / "workspace")
    results: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "machine": f"{platform.node()} {os.cpu_count()} cores",
        "python": platform.python_version(),
    }

    for debounce in (0, 400):
        editor = Editor(tmp / "workspace", tmp / f"home-{debounce}", debounce)
        await editor.start()
        uri = editor.open(paths[0])
        await editor.wait_published(uri, 1, timeout=60)
        await asyncio.sleep(3)  # facts stage of the first open
        latencies = await edit_to_hint(editor, uri, paths[0], 30)
        results[f"edit_to_first_hint_ms_debounce_{debounce}"] = {
            "p50": round(statistics.median(latencies), 1),
            "p90": round(percentile(latencies, 0.9), 1),
            "n": len(latencies),
        }
        if debounce == 0:
            round_trips = await cached_round_trips(editor, uri)
            results["cached_inlay_hint_ms"] = {
                "p50": round(statistics.median(round_trips), 3),
                "p99": round(percentile(round_trips, 0.99), 3),
                "n": len(round_trips),
            }
        else:
            uris = [uri] + [editor.open(p) for p in paths[1:]]
            for other in uris[1:]:
                await editor.wait_published(other, 1, timeout=120)
            samples = await typing(editor, uris, paths, args.minutes)
            results["typing_rss"] = {
                "files_open": len(uris),
                "minutes": args.minutes,
                "first_mb": samples[0]["rss_mb"],
                "last_mb": samples[-1]["rss_mb"],
                "max_mb": max(s["rss_mb"] for s in samples),
                "edits": samples[-1]["edits"],
                "samples": samples,
            }
        await editor.stop()
        state = tmp / f"home-{debounce}" / "service" / "service.json"
        if state.exists():
            os.kill(json.loads(state.read_text())["pid"], 15)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    asyncio.run(main())
