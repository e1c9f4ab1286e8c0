"""The suite's time limits relative to the machine (tests/machine.py): load beside a test stretches
a limit while it lasts; a hang still fails."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import machine
import pytest
from machine import MAX_STRETCH, within


def test_a_hang_fails_within_the_stretch_cap_whatever_the_load() -> None:
    started = time.perf_counter()
    with pytest.raises(asyncio.TimeoutError, match=r"0\.2 s on an idle 2-core machine"):
        asyncio.run(within(asyncio.sleep(60), 0.2))
    assert time.perf_counter() - started < MAX_STRETCH * 0.2 + 1.0


def test_a_hang_fails_on_a_machine_slower_than_the_idle_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every step counts a third of its wall time: the limit is reached after three times its idle
    # seconds, not approached by ever shorter steps.
    monkeypatch.setattr(machine, "slowdown", lambda rounds=3: 3.0)
    started = time.perf_counter()
    with pytest.raises(asyncio.TimeoutError, match=r"0\.2 s on an idle 2-core machine"):
        asyncio.run(within(asyncio.sleep(60), 0.2))
    assert 3 * 0.2 <= time.perf_counter() - started < MAX_STRETCH * 0.2


def test_load_that_starts_during_the_wait_stretches_the_limit() -> None:
    # Four busy processes on this machine's cores: past the idle limit's wall time, the awaited work
    # (1.5 idle-seconds of sleep against a 1-second limit) still counts as in time, because the
    # steps it waited through were slower than an idle machine's. One reading taken when the
    # limit ran out missed load that came and went; this one counts every step.
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        time.sleep(0.3)
        assert asyncio.run(within(asyncio.sleep(1.5, result="done"), 1.0)) == "done"
    finally:
        for process in busy:
            process.kill()
            process.wait()
