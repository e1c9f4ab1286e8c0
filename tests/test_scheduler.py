"""The per-file scheduler: one file's failure is reported and does not stop the others."""

from __future__ import annotations

import asyncio

from kernelcast.server.scheduler import FileScheduler


def test_a_failing_file_is_reported_and_the_next_file_still_runs() -> None:
    finished: list[str] = []
    failures: list[tuple[str, str]] = []
    idle: list[int] = []

    async def work(uri: str) -> None:
        if uri.endswith("broken.py"):
            raise SystemError("AST constructor recursion depth mismatch")
        finished.append(uri)

    async def run() -> FileScheduler:
        scheduler = FileScheduler(work, lambda: idle.append(1), lambda uri, error: failures.append((uri, str(error))))
        scheduler.schedule("file:///broken.py", 0)
        scheduler.schedule("file:///fine.py", 0.01)
        while scheduler.pending():
            await asyncio.sleep(0.01)
        return scheduler

    scheduler = asyncio.run(run())
    assert failures == [("file:///broken.py", "AST constructor recursion depth mismatch")]
    assert finished == ["file:///fine.py"]
    assert len(idle) == 2 and scheduler.pending() == 0
