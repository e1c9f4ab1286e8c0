"""Many editors at once: 3 editor processes, each with its own language server over stdio, share
one forecaster service and one cache while they type in 50 files each.

Each editor types like a person: a burst of 5-30 keystrokes 150 ms apart in one file, a pause,
another file; it asks for inlay hints whenever the server has published the file's current
version (what an editor does on refresh), and for the hints of another open file now and then.
A hint asked for a file whose analysis is current is a *cached* hint: its round trip is the
figure (target p99 ≤ 10 ms). Errors: a server that exits, a request that fails or takes over
5 s, a "forecaster unavailable" diagnostic, a warning shown to the user, a traceback in a
server's log, or an edit never published. The parent samples the RSS of every server and of
the service every 10 s.

    python benchmarks/bench_load.py --minutes 10 --out benchmarks/results/load.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from lsp_support import EXAMPLES, StdioLsp, stop_service  # noqa: E402

EDITORS = 3
FILES = 50
KEYSTROKE_S = 0.15
REQUEST_S = 5.0
SAMPLE_S = 10.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def make_workspace(root: Path) -> None:
    """50 kernels per editor, each a variant of a candidate with a reference pragma."""
    shutil.copytree(EXAMPLES, root)
    bases = [(root / name).read_text() for name in ("matmul_tiled.cu", "vector_add_float4.cu")]
    for editor in range(EDITORS):
        for index in range(FILES):
            text = bases[index % 2].replace("// Candidate", f"#define VARIANT_{editor}_{index} 1\n// Candidate", 1)
            (root / f"editor{editor}_{index:02d}.cu").write_text(text)


def typed(text: str, keystroke: int) -> str:
    """The text after one more keystroke in the kernel body: the number in `int typed = …;`
    grows by a digit (and starts over at eight, as if retyped), so every edit is new code."""
    found = TYPED.search(text)
    if found is None:
        return BODY_START.sub(lambda opening: opening.group() + " int typed = 1;", text, count=1)
    digits = "1" if len(found.group(1)) >= 8 else found.group(1) + str(keystroke % 10)
    return text[: found.start(1)] + digits + text[found.end(1) :]


TYPED = re.compile(r"int typed = (\d+);")
BODY_START = re.compile(r"__global__[^{]*\{")


class Editor:
    """One editor: its own server, its 50 files, its keystrokes and timings."""

    def __init__(self, index: int, workspace: Path, home: Path) -> None:
        self.index, self.workspace, self.home = index, workspace, home
        self.rng = random.Random(index)
        self.paths = [workspace / f"editor{index}_{i:02d}.cu" for i in range(FILES)]
        self.uris = [p.as_uri() for p in self.paths]
        self.texts = {uri: p.read_text() for uri, p in zip(self.uris, self.paths)}
        self.versions = {uri: 1 for uri in self.uris}
        self.hint_ms: list[float] = []
        self.errors: list[str] = []
        self.keystrokes = 0

    async def run(self, minutes: float) -> dict[str, Any]:
        self.server = await StdioLsp(self.home, self.workspace, {"debounceMs": 400}).start()
        print(json.dumps({"server_pid": self.server.pid}), flush=True)
        for uri in self.uris:
            self.server.open(uri, self.texts[uri])
        for uri in self.uris:
            await self.expect_published(uri, 1, 120)
        started = time.monotonic()
        while time.monotonic() - started < minutes * 60 and self.server.process.returncode is None:
            await self.burst(self.rng.choice(self.uris))
            await self.hints(self.rng.choice(self.uris))
            await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        for uri in self.uris:  # every last edit must be published
            await self.expect_published(uri, self.versions[uri], 30)
        self.check_logs()
        await self.server.stop()
        return {"editor": self.index, "keystrokes": self.keystrokes, "hint_ms": self.hint_ms, "errors": self.errors}

    async def burst(self, uri: str) -> None:
        for _ in range(self.rng.randint(5, 30)):
            self.keystrokes += 1
            self.versions[uri] += 1
            self.texts[uri] = typed(self.texts[uri], self.keystrokes)
            self.server.change(uri, self.versions[uri], self.texts[uri])
            await asyncio.sleep(KEYSTROKE_S)
        if await self.expect_published(uri, self.versions[uri], 30):
            await self.hints(uri)

    async def hints(self, uri: str) -> None:
        """Time an inlay-hint round trip when the file's current version is analysed (a cached hint)."""
        published = self.server.diagnostics.get(uri)
        if published is None or published[0] != self.versions[uri]:
            return
        sent = time.perf_counter()
        try:
            hints = await self.server.inlay_hints(uri, timeout=REQUEST_S)
        except (asyncio.TimeoutError, RuntimeError) as error:
            self.errors.append(f"inlayHint {uri}: {error!r}")
            return
        self.hint_ms.append(1000 * (time.perf_counter() - sent))
        if not hints:
            self.errors.append(f"no hint for the analysed {uri}")

    async def expect_published(self, uri: str, version: int, timeout: float) -> bool:
        try:
            diagnostics = await self.server.published(uri, version, timeout)
        except asyncio.TimeoutError:
            self.errors.append(f"{uri} v{version} not published within {timeout} s")
            return False
        self.errors += [f"{uri}: {d['message']}" for d in diagnostics if d.get("code") == "unavailable"]
        return True

    def check_logs(self) -> None:
        if self.server.process.returncode is not None:
            self.errors.append(f"server exited with {self.server.process.returncode}")
        self.errors += [f"shown to the user: {message}" for message in self.server.messages]
        log = self.server.stderr.decode(errors="replace")
        self.errors += [f"server log: {line}" for line in log.splitlines() if " ERROR " in line or line.startswith("Traceback")]


def run_editor(index: int, workspace: Path, home: Path, minutes: float) -> None:
    result = asyncio.run(Editor(index, workspace, home).run(minutes))
    print(json.dumps({"result": result}), flush=True)


def _wait_while_running(editors: list[subprocess.Popen[str]], seconds: float) -> None:
    """Sleep `seconds`, or less once every editor has finished: the run ends when they do, not up to 10 s later."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(editor.poll() is None for editor in editors):
        time.sleep(0.1)


def run(minutes: float, workdir: Path) -> dict[str, Any]:
    """The whole benchmark: start 3 editor processes, sample RSS, gather their figures."""
    workspace, home = workdir / "workspace", workdir / "home"
    make_workspace(workspace)
    editors = [
        subprocess.Popen(
            [sys.executable, __file__, "--editor", str(index), "--workdir", str(workdir), "--minutes", str(minutes)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "KERNELCAST_HOME": str(home)},
        )
        for index in range(EDITORS)
    ]
    server_pids = [json.loads(editor.stdout.readline())["server_pid"] for editor in editors]
    samples: list[dict[str, Any]] = []
    started = time.monotonic()
    while any(editor.poll() is None for editor in editors):
        state = home / "service" / "service.json"
        service_pid = json.loads(state.read_text())["pid"] if state.exists() else None
        samples.append(
            {
                "t_s": round(time.monotonic() - started, 1),
                "servers_mb": [rss_mb(pid) for pid in server_pids],
                "service_mb": rss_mb(service_pid) if service_pid else None,
            }
        )
        _wait_while_running(editors, SAMPLE_S)
    results = [json.loads(editor.stdout.read().strip().splitlines()[-1])["result"] for editor in editors]
    stop_service(home)
    hint_ms = [ms for result in results for ms in result["hint_ms"]]
    return {
        "editors": EDITORS,
        "files_per_editor": FILES,
        "minutes": minutes,
        "keystrokes": sum(result["keystrokes"] for result in results),
        "errors": [error for result in results for error in result["errors"]],
        "cached_inlay_hint_ms": {
            "p50": round(percentile(hint_ms, 0.5), 3),
            "p99": round(percentile(hint_ms, 0.99), 3),
            "max": round(max(hint_ms, default=0), 3),
            "n": len(hint_ms),
        },
        "rss_samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--editor", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.editor is not None:
        run_editor(args.editor, args.workdir / "workspace", args.workdir / "home", args.minutes)
        return
    results = {
        "command": " ".join(["python", *sys.argv]),
        "machine": f"{platform.node()} {os.cpu_count()} cores",
        "python": platform.python_version(),
    }
    results.update(run(args.minutes, Path(tempfile.mkdtemp(prefix="kernelcast-load-"))))
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
