"""Security, tested on real processes: the service is loopback-only and token-guarded; opening,
forecasting and compiling facts never imports or runs the workspace's code; references stay
inside the workspace unless allowed; hostile file names are inert; state is private."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import stat
import time
from pathlib import Path

import httpx
from lsp_support import EXAMPLES, FAST, Start, commit_all

from kernelcast.wire import read_or_create_token, read_state

PACKAGES = ("kernelcast", "server", "models", "kernels_runtime")
WITH_FACTS = {"debounceMs": 0}
FACTS_WAIT_S = 120  # a cold Triton or NVRTC compile in a child process, on a busy 2-core machine


def listening_addresses(pid: int) -> list[str]:
    """Local addresses of the TCP sockets `pid` listens on, from /proc (no connection made)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = fd.readlink().as_posix() if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                raw = bytes.fromhex(fields[1].split(":")[0])
                packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # /proc prints host-order words
                found.append(socket.inet_ntop(family, packed))
    return found


async def facts_in_hover(server, uri: str, line: int) -> str:
    """The hover once the compiler facts (compiled in a child process) are in it."""
    deadline = time.monotonic() + FACTS_WAIT_S
    while True:
        text = await server.hover(uri, line)
        if "Compiler facts" in text:
            return text
        assert time.monotonic() < deadline, f"no compiler facts in the hover within {FACTS_WAIT_S} s:\n{text}"
        await asyncio.sleep(0.2)


async def test_service_listens_on_loopback_only_and_wants_the_token(start: Start, workspace: Path, home: Path) -> None:
    server = await start()
    uri = (workspace / "matmul_tiled.cu").as_uri()
    server.open(uri, (workspace / "matmul_tiled.cu").read_text())
    await server.published(uri, 1, 30)
    state = read_state(home / "service")
    assert set(listening_addresses(state["pid"])) == {"127.0.0.1"}
    url = f"{state['url']}/v1/backends"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer not-the-token"}).status_code == 401
    assert httpx.get(url, headers={"Authorization": read_or_create_token(home / "service")}).status_code == 401, "no Bearer prefix"
    assert httpx.get(url, headers={"Authorization": f"Bearer {read_or_create_token(home / 'service')}"}).status_code == 200


def hostile_module(marker: Path, body: str) -> str:
    """`body` in a file that writes `marker` however Python would run it: on import, at def
    time (defaults, annotations, decorators, class keywords), in configs and in functions."""
    touch = f"__import__('pathlib').Path({str(marker)!r}).write_text('ran')"
    return (HOSTILE_PRELUDE + body + HOSTILE_EPILOGUE).replace("TOUCH", touch)


HOSTILE_PRELUDE = "import triton\nimport triton.language as tl\nimport torch\nimport torch.nn as nn\n\nTOUCH\nSIZE = TOUCH or 1024\n\n"
HOSTILE_EPILOGUE = "\nif __name__ != '__main__':\n    TOUCH\n"
TRITON_BODY = """\
# kernelcast: launch grid=(cdiv(N, BLOCK),) args=(x_ptr:f32[N], out_ptr:f32[N]:out, N:i32=1<<20) BLOCK=1024 num_warps=4
@triton.autotune(configs=[triton.Config({'BLOCK': TOUCH or 128})], key=['N'])
@triton.jit(do_not_specialize=[TOUCH])
def scale(x_ptr, out_ptr, N: TOUCH, BLOCK: tl.constexpr = TOUCH or 1024):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < N
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)
"""
KERNELBENCH_BODY = """\
class Model(nn.Module):
    def forward(self, x, y=TOUCH):
        return torch.relu(x)


class ModelNew(nn.Module, metaclass=type(TOUCH)):
    def forward(self, x):
        return torch.clamp(x, min=0)


def get_inputs():
    TOUCH
    return [torch.randn(16, 16)]
"""


async def test_opening_triton_and_kernelbench_files_never_runs_them(start: Start, workspace: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (workspace / "reference_scale.py").write_text(hostile_module(marker, TRITON_BODY))
    candidate = "# kernelcast: reference=reference_scale.py::scale\n" + hostile_module(marker, TRITON_BODY.replace("* 2.0", "+ 0.0"))
    kernelbench = hostile_module(marker, KERNELBENCH_BODY)
    server = await start(WITH_FACTS)
    triton_uri, kernelbench_uri = (workspace / "scale.py").as_uri(), (workspace / "relu_bench.py").as_uri()
    server.open(triton_uri, candidate, language="python")
    server.open(kernelbench_uri, kernelbench, language="python")
    forecasts = {uri: await server.published(uri, 1, 30) for uri in (triton_uri, kernelbench_uri)}
    assert [d["code"] for d in forecasts[triton_uri] if d["code"] != "file"] in (["forecast"], ["uncertain"])
    assert [d["code"] for d in forecasts[kernelbench_uri] if d["code"] != "file"] in (["forecast"], ["uncertain"])
    line = next(number for number, text in enumerate(candidate.splitlines()) if text.startswith("def scale("))
    hover = await facts_in_hover(server, triton_uri, line)
    assert not marker.exists(), "the workspace's code ran"
    assert "registers/thread" in hover and "Reference:" in hover, "facts of both sides, compiled from extracted source"
    maps = Path(f"/proc/{server.pid}/maps").read_text()
    assert not re.search(r"libtriton|libtorch|libcudart|libnvrtc", maps), "the editor's process loaded a GPU library"


async def test_references_stay_inside_the_workspace_unless_allowed(start: Start, workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(EXAMPLES / "matmul_naive.cu", outside / "secret.cu")
    shutil.copy(EXAMPLES.parent / "tests" / "data" / "discovery" / "reference.py", outside / "reference.py")
    (workspace / "linked.cu").symlink_to(outside / "secret.cu")
    (workspace / "bench").mkdir()
    (workspace / "bench" / "reference.py").symlink_to(outside / "reference.py")
    (workspace / "configured").mkdir()
    (workspace / "kernelcast.toml").write_text('[[references]]\nfiles = "configured/*.cu"\nreference = "../outside/secret.cu::sgemm"\n')
    kernel = (EXAMPLES / "matmul_tiled.cu").read_text().split("\n", 1)[1]  # without its own pragma
    files = {
        "relative.cu": "// kernelcast: reference=../outside/secret.cu::sgemm\n" + kernel,
        "absolute.cu": f"// kernelcast: reference={outside / 'secret.cu'}::sgemm\n" + kernel,
        "through_link.cu": "// kernelcast: reference=linked.cu::sgemm\n" + kernel,
        "configured/by_config.cu": kernel,
    }
    kernelbench = (
        "import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.clamp(x, min=0)\n"
    )

    async def verdicts(server) -> dict[str, str]:
        uris = {name: (workspace / name).as_uri() for name in [*files, "bench/new.py"]}
        for name, text in files.items():
            server.open(uris[name], text)
        server.open(uris["bench/new.py"], kernelbench, language="python")
        return {name: " ".join(d["message"] for d in await server.published(uri, 1, 30)) for name, uri in uris.items()}

    refused = await verdicts(await start())
    for name, message in refused.items():
        assert "points outside the workspace" in message, (name, message)
    allowed = await verdicts(await start({**FAST, "allowReferencesOutsideWorkspace": True}))
    for name, message in allowed.items():
        assert "outside" not in message and ("than reference" in message or "measure?" in message), (name, message)


HOSTILE_NAMES = ("a; rm -rf victim.cu", "$(touch pwned).cu", "`touch pwned`.cu", 'it\'s "quoted" & spaced.cu', "x|tee pwned>y.cu", "-rf.cu")


async def test_file_names_with_shell_metacharacters_are_inert(start: Start, workspace: Path) -> None:
    victim = workspace / "victim.cu"
    victim.write_text("// must survive\n")
    kernel = (EXAMPLES / "vector_add_float4.cu").read_text().split("\n", 1)[1]
    for name in HOSTILE_NAMES:
        (workspace / name).write_text((EXAMPLES / "vector_add.cu").read_text())
    commit_all(workspace)
    server = await start(WITH_FACTS)
    for name in HOSTILE_NAMES:
        uri = (workspace / name).as_uri()
        pragma = f'// kernelcast: reference="{HOSTILE_NAMES[0]}::vector_add"\n' if name != HOSTILE_NAMES[0] else ""
        server.open(uri, pragma + kernel)  # the first is forecast against its git HEAD version
        (forecast,) = [d for d in await server.published(uri, 1, 30) if d["code"] in ("forecast", "uncertain")]
        hover = await facts_in_hover(server, uri, forecast["range"]["start"]["line"])
        assert "registers/thread" in hover, (name, hover)
    assert victim.read_text() == "// must survive\n"
    assert not list(workspace.rglob("pwned")) and not Path("pwned").exists(), "a shell ran `touch pwned`"


def test_no_shell_anywhere_in_the_package() -> None:
    root = Path(__file__).resolve().parents[2]
    shell = re.compile(
        r"shell\s*=\s*True|os\.system\(|os\.popen\(|subprocess\.getoutput|subprocess\.getstatusoutput|os\.exec\w*\(|os\.spawn\w*\("
    )
    found = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for package in PACKAGES
        for path in (root / package).rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if shell.search(line)
    ]
    assert not found, found
    assert shell.search("subprocess.run(cmd, shell=True)") and shell.search("os.system('x')"), "the pattern finds what it looks for"


async def test_state_folders_are_private(start: Start, workspace: Path, home: Path) -> None:
    home.mkdir(mode=0o755)  # a loose folder from before is tightened
    server = await start()
    uri = (workspace / "matmul_tiled.cu").as_uri()
    server.open(uri, (workspace / "matmul_tiled.cu").read_text())
    await server.published(uri, 1, 30)
    for folder in (home, home / "cache", home / "service"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE((home / "service" / "token").stat().st_mode) == 0o600
