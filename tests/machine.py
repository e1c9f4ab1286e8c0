"""Time limits relative to this machine, so a busy or slow machine does not fail a test that a
quiet one passes, while a real hang still fails.

A limit is written as the seconds it allows on an idle 2-core machine (the CI size); `limit`
scales it by how much slower a fixed CPU-bound operation runs right now: its wall time over
its CPU time says how contended the CPUs are, its CPU time over the idle machine's says how
slow this CPU is.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

# CPU seconds `_reference_operation` takes on the 2-core machine the limits were chosen on.
REFERENCE_CPU_S = 0.0114
_ROUNDS = 3
# `within` reads the machine this often while it waits, and gives up past this many times its idle limit.
STEP_S = 0.5
MIN_STEP_S = 0.01
MAX_STRETCH = 20.0


def _reference_operation() -> int:
    total = 0
    for i in range(300_000):
        total += i * i
    return total


def slowdown(rounds: int = _ROUNDS) -> float:
    """How many times longer than on the idle 2-core machine work takes here right now (≥ 1)."""
    ratios = []
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        _reference_operation()
        wall, cpu = time.perf_counter() - wall, max(time.process_time() - cpu, 1e-6)
        ratios.append((wall / cpu) * max(1.0, cpu / REFERENCE_CPU_S))
    return max(1.0, statistics.median(ratios))


def limit(idle_s: float) -> float:
    """`idle_s` (a limit that holds on an idle 2-core machine) scaled to this machine now."""
    return idle_s * slowdown()


async def within(awaitable: Awaitable[T], idle_s: float) -> T:
    """Await for at most `idle_s` seconds of an idle 2-core machine.

    The wait is counted in such seconds as it goes: each step counts its wall time over how
    slow the machine is during that step. A burst of load beside the test (a parallel test
    process compiling, a model answering) stretches the limit while it lasts, which one
    reading taken when the limit ran out can miss; a hang still fails, and after
    MAX_STRETCH times the idle limit in wall time whatever the load. Raises
    asyncio.TimeoutError (whose message names the wall time waited) past it."""
    task = asyncio.ensure_future(awaitable)
    counted = waited = 0.0
    while True:
        step = min(STEP_S, idle_s - counted) if counted < idle_s else STEP_S
        started = time.perf_counter()
        done, _ = await asyncio.wait({task}, timeout=max(step, MIN_STEP_S))
        if done:
            return task.result()
        # The time the step took, not the time asked for: on a machine slower than the idle one,
        # steps shortened to the limit's remainder would otherwise shrink without end.
        elapsed = time.perf_counter() - started
        waited += elapsed
        counted += elapsed / slowdown(rounds=1)
        if counted >= idle_s or waited >= MAX_STRETCH * idle_s:
            task.cancel()
            raise asyncio.TimeoutError(f"{waited:.1f} s ({idle_s:g} s on an idle 2-core machine, counted as this one ran)")
