"""Hostile kernels measured from the editor on a real GPU: each ends in words naming what went
wrong, the GPU worker is replaced when its process can no longer be trusted, the server lives,
and a measurement completed before is still there afterwards.

One server and one warm worker go through every case in turn, with a 2 s kernel timeout, so
the whole file costs about a minute of GPU time:

    python -m pytest tests/reliability/test_hostile_kernels.py -m gpu -v
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path

import pytest
from lsp_support import FAST, Start, StdioLsp

pytestmark = pytest.mark.gpu

MEASURE_DATA = Path(__file__).resolve().parents[1] / "data" / "measure"
HOSTILE_DATA = Path(__file__).parent / "data"
SETTINGS = {**FAST, "measure": {"kernelTimeoutMs": 2000}}
MEASURE_S = 120  # the longest case: a worker restart (torch import, CUDA context) and a full timing
# file, kernel, kind of failure, the message's start, whether the worker must be replaced.
CASES = (
    ("copy_illegal_address.cu", "copy_illegal_address", "runtime", "illegal memory access in candidate; worker restarted", True),
    ("copy_spin_forever.cu", "copy_spin_forever", "timeout", "candidate ran longer than 2 s; worker killed and restarted", True),
    ("copy_wrong.cu", "copy_wrong", "wrong", "wrong results: max abs err 3.2e-01 at index 17", False),
    (
        "copy_past_the_end.cu",
        "copy_past_the_end",
        "wrong",
        "candidate wrote outside its arrays: 4 bytes in the 2 MiB after 'y' changed",
        True,
    ),
    ("copy_writes_input.cu", "copy_writes_input", "wrong", "candidate wrote to its input 'x'; mark arrays a kernel writes :out", True),
    ("huge_arrays.cu", "huge_arrays", "no-launch-spec", "arrays need 1024.", False),
    ("relu_huge_allocation.py", "ModelNew", "runtime", "candidate raised OutOfMemoryError: CUDA out of memory", False),
)


def worker_pids(server_pid: int) -> set[int]:
    """The GPU worker processes the server started (its children running kernels_runtime.worker)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == server_pid and b"kernels_runtime.worker" in command:
            found.add(int(entry.name))
    return found


def hostile_workspace(workspace: Path) -> None:
    """Every candidate next to copy_coalesced.cu, which each names as its reference."""
    shutil.copy(MEASURE_DATA / "copy_coalesced.cu", workspace)
    pragma = "// kernelcast: reference=copy_coalesced.cu\n"
    for source in [
        MEASURE_DATA / name for name in ("copy_strided.cu", "copy_illegal_address.cu", "copy_spin_forever.cu", "copy_wrong.cu")
    ] + sorted(HOSTILE_DATA.glob("*.cu")):
        (workspace / source.name).write_text(pragma + source.read_text())
    huge = (MEASURE_DATA / "copy_coalesced.cu").read_text().replace("N:i32=1<<24", "N:i64=1<<36")  # 1 TiB a side
    (workspace / "huge_reference.cu").write_text(huge.replace("copy_coalesced", "huge_reference"))
    (workspace / "huge_arrays.cu").write_text(
        "// kernelcast: reference=huge_reference.cu\n" + huge.replace("copy_coalesced", "huge_arrays")
    )
    shutil.copy(HOSTILE_DATA / "relu_huge_allocation.py", workspace)


async def opened(server: StdioLsp, workspace: Path, name: str) -> str:
    uri = (workspace / name).as_uri()
    server.open(uri, (workspace / name).read_text(), language="python" if name.endswith(".py") else "cuda")
    await server.published(uri, 1, 60)
    return uri


async def measure(server: StdioLsp, uri: str, kernel: str) -> dict:
    arguments = [{"uri": uri, "kernel": kernel}]
    return await server.request("workspace/executeCommand", {"command": "kernelcast.measure", "arguments": arguments}, timeout=MEASURE_S)


async def test_hostile_kernels_are_named_the_worker_replaced_and_nothing_lost(start: Start, workspace: Path) -> None:
    hostile_workspace(workspace)
    server = await start(SETTINGS)
    good_uri = await opened(server, workspace, "copy_strided.cu")
    good = await measure(server, good_uri, "copy_strided")
    assert good["ok"], good
    (pid,) = worker_pids(server.pid)

    for name, kernel, kind, message, replaced in CASES:
        uri = await opened(server, workspace, name)
        shown = len(server.messages)
        answer = await measure(server, uri, kernel)
        assert (answer["ok"], answer.get("kind")) == (False, kind), (name, answer)
        assert answer["message"].startswith(message), (name, answer["message"])
        assert server.messages[shown:] == [f"Measure {kernel}: {answer['message']}"], "the editor is told which"
        workers = worker_pids(server.pid)
        assert (workers != {pid}) == replaced, (name, pid, workers)
        assert server.process.returncode is None
        pid = next(iter(workers))

    # kill -9 of the worker mid-kernel, as an out-of-memory killer or a user would
    uri = (workspace / "copy_spin_forever.cu").as_uri()
    measuring = asyncio.create_task(measure(server, uri, "copy_spin_forever"))
    await asyncio.sleep(1.0)
    os.kill(next(iter(worker_pids(server.pid))), signal.SIGKILL)
    answer = await measuring
    assert answer["kind"] == "runtime" and answer["message"].startswith("the GPU worker exited (code -9) while "), answer

    server.close(good_uri)
    server.open(good_uri, (workspace / "copy_strided.cu").read_text())
    measured = [d for d in await server.published(good_uri, 1, 60) if d["code"] == "measured"]
    assert measured and measured[0]["message"].startswith("copy_strided: measured "), "the completed measurement is kept"
    again = await measure(server, good_uri, "copy_strided")
    assert again["ok"], again
