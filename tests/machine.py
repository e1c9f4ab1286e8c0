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


def _reference_operation() -> int:
    total = 0
    for i in range(300_000):
        total += i * i
    return total


def slowdown() -> float:
    """How many times longer than on the idle 2-core machine work takes here right now (≥ 1)."""
    ratios = []
    for _ in range(_ROUNDS):
        wall, cpu = time.perf_counter(), time.process_time()
        _reference_operation()
        wall, cpu = time.perf_counter() - wall, max(time.process_time() - cpu, 1e-6)
        ratios.append((wall / cpu) * max(1.0, cpu / REFERENCE_CPU_S))
    return max(1.0, statistics.median(ratios))


def limit(idle_s: float) -> float:
    """`idle_s` (a limit that holds on an idle 2-core machine) scaled to this machine now."""
    return idle_s * slowdown()


async def within(awaitable: Awaitable[T], idle_s: float) -> T:
    """Await with the limit `limit(idle_s)`; the machine is only measured when `idle_s` has passed.

    Raises asyncio.TimeoutError (whose message names the scaled limit) past it."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=idle_s)
    if not done:
        scaled = limit(idle_s)
        done, _ = await asyncio.wait({task}, timeout=scaled - idle_s)
        if not done:
            task.cancel()
            raise asyncio.TimeoutError(f"{scaled:.1f} s ({idle_s:g} s on an idle 2-core machine, scaled to this one)")
    return task.result()
