"""Generated hostile documents through real servers over stdio: no crash, no hang, every
refusal in words.

Two server processes share one forecaster service and one cache (two cores' worth); each
keeps four documents in flight, with debounce 0 and compiler facts off so the time goes to
discovery, references, launch specs, forecasts and publishing, the parts a keystroke runs.
The suite feeds the first 1,000 documents of the seeded generator (every kind of document,
16 or more of the rarest); `benchmarks/bench_fuzz.py` feeds the 10,000 of the full sweep.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import shutil
import time
from pathlib import Path

from documents import Document, DocumentGenerator
from lsp_support import EXAMPLES, Start, StdioLsp, commit_all
from machine import within

DOCUMENTS = 1_000  # the full sweep's 10,000: benchmarks/bench_fuzz.py
SERVERS = 2
IN_FLIGHT = 4  # documents each server has in flight at once
HANG_S = 5.0  # on an idle 2-core machine; machine.within scales it to this one
HUGE_MB = 10
# What a traceback or a leaked object looks like in a message meant for a person.
UNREADABLE = re.compile(r"Traceback|File \"|object at 0x|<kernelcast\.|\bself\.|Error\(\"")


def make_workspace(root: Path) -> Path:
    """The examples as references, plus files a pragma may point at that cannot be used, in git."""
    shutil.copytree(EXAMPLES, root)
    shutil.copy(EXAMPLES.parent / "tests" / "data" / "discovery" / "reference.py", root / "reference.py")
    (root / "bad_utf8.cu").write_bytes(b"__global__ void k(float* x) { x[0] = 1; } // \xff\xfe\xc3\x28\n")
    (root / "binary.cu").write_bytes(b"\x7fELF\x00\x00" * 100)
    (root / "too_big.cu").write_text("// padding\n" * 300_000)
    (root / "folder").mkdir()
    commit_all(root)
    return root


class Fuzzer:
    """Feeds documents to one server through `IN_FLIGHT` slots and checks every answer."""

    def __init__(self, server: StdioLsp, root: Path, documents: list[Document]) -> None:
        self.server, self.root, self.documents = server, root, documents
        self.latencies: list[float] = []
        self.problems: list[str] = []

    async def run(self) -> None:
        await asyncio.gather(*(self.slot(index, self.documents[index::IN_FLIGHT]) for index in range(IN_FLIGHT)))

    async def slot(self, index: int, documents: list[Document]) -> None:
        """One editor tab: change the text while the suffix stays, else close and open anew."""
        uri, suffix, version = None, None, 0
        for number, document in enumerate(documents):
            if document.suffix != suffix:
                if uri is not None:
                    self.server.close(uri)
                uri, suffix, version = (self.root / f"slot{index}_{number}{document.suffix}").as_uri(), document.suffix, 1
                self.server.open(uri, document.text, version, "python" if document.suffix == ".py" else "cuda")
            else:
                version += 1
                self.server.change(uri, version, document.text)
            await self.answered(uri, version, document)
            if number % 10 == 0:
                await self.check_hints(uri, document)

    async def answered(self, uri: str, version: int, document: Document) -> None:
        started = time.perf_counter()
        try:
            diagnostics = await within(self.server.published(uri, version, None), HANG_S)
        except asyncio.TimeoutError as limit:
            self.problems.append(f"{document.kind}: no diagnostics within {limit} for {document.text[:200]!r}")
            return
        self.latencies.append(time.perf_counter() - started)
        for diagnostic in diagnostics:
            self.check_message(diagnostic["message"], document)
            self.check_range(diagnostic["range"], document)

    async def check_hints(self, uri: str, document: Document) -> None:
        try:
            hints = await within(self.server.inlay_hints(uri, timeout=None), HANG_S)
        except asyncio.TimeoutError as limit:
            self.problems.append(f"{document.kind}: inlayHint took over {limit}")
            return
        for hint in hints:
            label = "".join(part["value"] for part in hint["label"])
            if len(label) > 30:
                self.problems.append(f"{document.kind}: hint longer than 30 characters: {label!r}")
            self.check_range({"start": hint["position"], "end": hint["position"]}, document)

    def check_message(self, message: str, document: Document) -> None:
        if not message.strip() or len(message) > 2000 or UNREADABLE.search(message):
            self.problems.append(f"{document.kind}: unreadable diagnostic {message[:300]!r}")

    def check_range(self, span: dict, document: Document) -> None:
        """Inside the document, in UTF-16 code units (the client offered no other encoding)."""
        lines = re.split(r"\r\n|\r|\n", document.text)
        for end in ("start", "end"):
            line, character = span[end]["line"], span[end]["character"]
            width = len(lines[line].encode("utf-16-le", "surrogatepass")) // 2 if 0 <= line < len(lines) else -1
            if not 0 <= character <= width:
                self.problems.append(f"{document.kind}: position {line}:{character} outside the document")


async def fuzz(servers: list[StdioLsp], root: Path, count: int) -> dict:
    """Feed the first `count` documents of the seeded generator (and two huge files each) to
    `servers` on the workspace `root`; what went wrong, in words, and the latencies."""
    documents = list(itertools.islice(DocumentGenerator(seed=8), count))
    fuzzers = [Fuzzer(server, root, documents[index :: len(servers)]) for index, server in enumerate(servers)]
    started = time.perf_counter()
    await asyncio.gather(*(fuzzer.run() for fuzzer in fuzzers), *(huge_files(server, root) for server in servers))
    elapsed = time.perf_counter() - started
    problems = [problem for fuzzer in fuzzers for problem in fuzzer.problems]
    for server in servers:
        if server.process.returncode is not None:
            problems.append(f"server exited with {server.process.returncode}")
        elif await within(server.hover((root / "matmul_tiled.cu").as_uri(), 0, timeout=None), HANG_S) != "":
            problems.append("hover on a line without a kernel answered")
        if b"Traceback" in server.stderr:
            problems.append(server.stderr.decode(errors="replace")[-3000:])
        problems += [f"unreadable message {message!r}" for message in server.messages if UNREADABLE.search(message)]
    latencies = sorted(latency for fuzzer in fuzzers for latency in fuzzer.latencies)
    return {
        "documents": count,
        "kinds": sorted({document.kind for document in documents}),
        "answered": len(latencies),
        "seconds": round(elapsed, 1),
        "p50_ms": round(1000 * latencies[len(latencies) // 2]) if latencies else None,
        "max_ms": round(1000 * latencies[-1]) if latencies else None,
        "problems": problems,
    }


async def test_hostile_documents(start: Start, tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "fuzzed")
    result = await fuzz([await start(root=root) for _ in range(SERVERS)], root, DOCUMENTS)
    problems = result["problems"]
    assert not problems, f"{len(problems)} problems, first 20:\n" + "\n".join(problems[:20])
    assert result["kinds"] == sorted(DocumentGenerator(seed=8).kinds), "the sample holds every kind of document"
    assert result["answered"] == DOCUMENTS
    print(
        f"\nfuzzed {DOCUMENTS} documents in {result['seconds']} s through {SERVERS} servers: "
        f"p50 {result['p50_ms']} ms, max {result['max_ms']} ms, 0 crashes, 0 hangs"
    )


async def huge_files(server: StdioLsp, root: Path) -> None:
    """Two 10 MB files per server, opened as an editor would, refused in one readable line."""
    for index, suffix in enumerate((".cu", ".py")):
        uri = (root / f"huge_{server.pid}_{index}{suffix}").as_uri()
        server.open(uri, ("// " if suffix == ".cu" else "# ") + "x" * (HUGE_MB * 2**20) + "\n")
        diagnostics = await within(server.published(uri, 1, None), 3 * HANG_S)
        assert [d["message"] for d in diagnostics] == [f"file is {HUGE_MB + 0.0:.1f} MB; kernelcast reads files up to 2 MB"]
        server.close(uri)


MALFORMED_BODIES = (
    b'{"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": '
    b'{"textDocument": {"uri": "file:///w/a.cu", "languageId": "cuda", "version": 1, "text": "\xff\xfe\xc3\x28"}}}',
    b"{not json",
    b"[]",
    b"1",
    b'"text"',
    b"null",
    b'{"jsonrpc": "2.0"}',
    b"\x00" * 64,
    b'{"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": 5}}',
    b'{"jsonrpc": "2.0", "method": "textDocument/didChange", "params": '
    b'{"textDocument": {"uri": "file:///nowhere.cu", "version": 2}, "contentChanges": [{"text": "x"}]}}',
    b'{"jsonrpc": "2.0", "method": "textDocument/didClose", "params": {"textDocument": {"uri": "file:///never-opened.cu"}}}',
    b'{"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration", "params": '
    b'{"settings": {"kernelcast": {"debounceMs": -5, "confidenceThreshold": "high", "exclude": 7, "cacheDir": []}}}}',
)


async def test_malformed_messages_and_requests_are_answered(start: Start, tmp_path: Path) -> None:
    """Protocol-level garbage: the server answers every request (a result or a JSON-RPC error in words) and lives."""
    root = make_workspace(tmp_path / "fuzzed")
    server = await start(root=root)
    for body in MALFORMED_BODIES:
        server.send_raw(body)
    uri = (root / "matmul_tiled.cu").as_uri()
    server.open(uri, (root / "matmul_tiled.cu").read_text())
    await server.published(uri, 1, HANG_S)
    server.change(uri, 0, "// a version older than the open\n")
    far = {"line": 10**9, "character": 2**31 - 1}
    requests = [
        ("textDocument/hover", {"textDocument": {"uri": uri}, "position": far}),
        ("textDocument/hover", {"textDocument": {"uri": "file:///never-opened.cu"}, "position": {"line": 0, "character": 0}}),
        (
            "textDocument/inlayHint",
            {"textDocument": {"uri": uri}, "range": {"start": {"line": 50, "character": 0}, "end": {"line": 0, "character": 0}}},
        ),
        (
            "textDocument/codeAction",
            {"textDocument": {"uri": "file:///never-opened.cu"}, "range": {"start": far, "end": far}, "context": {"diagnostics": []}},
        ),
        ("workspace/executeCommand", {"command": "kernelcast.measure", "arguments": []}),
        ("workspace/executeCommand", {"command": "kernelcast.measure", "arguments": [5, "x"]}),
        ("workspace/executeCommand", {"command": "kernelcast.measure", "arguments": [{"uri": 5}]}),
        ("workspace/executeCommand", {"command": "kernelcast.measure", "arguments": [{"uri": uri, "position": {"line": "a"}}]}),
        ("workspace/executeCommand", {"command": "kernelcast.measure", "arguments": [{"uri": uri, "kernel": ["sgemm"]}]}),
        (
            "workspace/executeCommand",
            {"command": "kernelcast.setReference", "arguments": [{"uri": uri, "position": {"line": 5}, "reference": 5}]},
        ),
        ("workspace/executeCommand", {"command": "kernelcast.noSuchCommand", "arguments": []}),
        ("kernelcast/noSuchMethod", {}),
    ]
    for method, params in requests:
        try:
            await within(server.request(method, params, timeout=None), HANG_S)
        except RuntimeError as error:  # a JSON-RPC error: it must still read as words
            (answer,) = error.args
            assert answer["code"] != -32603 and not UNREADABLE.search(answer["message"]), (method, params, answer)
    assert server.process.returncode is None
    await server.published(uri, 0, HANG_S)
    assert all(not UNREADABLE.search(message) for message in server.messages), server.messages
