"""The measuring loop: pick by the policy, measure a round (one variant per GPU), update, until
the budget is spent, the best is settled or nothing is left."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernelcast.rank import policy
from kernelcast.rank.variants import Variant
from kernelcast.wire import Measurement

# Measure failures that say nothing about the variant: measuring stops, the variants stay open.
NOT_THE_VARIANTS_FAULT = ("no-gpu", "cancelled")


@dataclass
class Budget:
    measurements: int | None = None
    gpu_seconds: float | None = None


@dataclass
class SearchState:
    variants: list[Variant]  # the ranked ones, forecast
    outcomes: dict[int, dict[str, Any]] = field(default_factory=dict)  # by variant index: the job's result
    best_after: list[float] = field(default_factory=list)  # best measured S after each measurement (nan before one)
    stopped: str = ""
    gpu_seconds: float = 0.0
    chances: dict[int, float] = field(default_factory=dict)  # unmeasured variants' chance of beating the best, at the end

    def measurement(self, index: int) -> Measurement | None:
        outcome = self.outcomes.get(index)
        return Measurement.from_json(outcome["outcome"]) if outcome and outcome["measured"] else None

    def fastest_first(self) -> list[tuple[int, Measurement]]:
        """Every variant measured correct, with its measurement, the fastest first (in measuring order among equals)."""
        measured = [(i, m) for i in self.outcomes if (m := self.measurement(i)) is not None]
        return sorted(measured, key=lambda item: -item[1].speedup)

    @property
    def best(self) -> tuple[int, Measurement] | None:
        return next(iter(self.fastest_first()), None)

    @property
    def tied_with_best(self) -> list[tuple[int, Measurement]]:
        """Measured variants whose 95% CI overlaps the best's, fastest first: as fast as the best
        within measurement noise, so another run may well name one of them best instead."""
        ranked = self.fastest_first()
        if not ranked:
            return []
        low, high = ranked[0][1].ci95
        return [(i, m) for i, m in ranked[1:] if m.ci95[1] >= low and m.ci95[0] <= high]

    @property
    def per_gpu(self) -> dict[str, int]:
        return dict(sorted(Counter(o["where"] for o in self.outcomes.values()).items()))


def search(
    variants: list[Variant],
    measurer: Any,
    budget: Budget,
    on_result: Callable[[SearchState, dict[str, Any]], None],
    learn: Callable[[Variant, Measurement], None],
    settle_chance: float = policy.SETTLE_CHANCE,
    kernel_timeout_s: float = 10.0,
) -> SearchState:
    """Measure in rounds of `measurer.width` until the budget is spent or the best is settled."""
    state = SearchState(variants)
    run = policy.Run.of(
        [v.forecast.probabilities for v in variants],  # type: ignore[union-attr]
        [v.text for v in variants],
        [v.request.candidate.language for v in variants],  # type: ignore[union-attr]
    )
    measured: dict[int, float] = {}
    excluded: set[int] = set()

    def take(result: dict[str, Any]) -> None:
        index = result["index"]
        state.gpu_seconds += result["seconds"]
        outcome = result["outcome"]
        if not result["measured"] and outcome.get("kind") in NOT_THE_VARIANTS_FAULT:
            state.stopped = state.stopped or f"measuring stopped: {outcome['message']}"
            return
        state.outcomes[index] = result
        if result["measured"]:
            measurement = Measurement.from_json(outcome)
            measured[index] = math.log2(measurement.speedup)
            learn(variants[index], measurement)
        else:
            excluded.add(index)
        best = state.best
        state.best_after.append(best[1].speedup if best else math.nan)
        on_result(state, result)

    while not state.stopped:
        spent = len(state.outcomes)
        if spent == len(variants):
            state.stopped = "every variant measured"
        elif budget.measurements is not None and spent >= budget.measurements:
            state.stopped = f"budget of {budget.measurements} measurements spent"
        elif budget.gpu_seconds is not None and state.gpu_seconds >= budget.gpu_seconds:
            state.stopped = f"budget of {budget.gpu_seconds:g} GPU-seconds spent"
        elif policy.settled(run, measured, excluded, settle_chance):
            state.stopped = f"settled: no unmeasured variant has more than {100 * settle_chance:g}% chance of beating the best"
        else:
            room = budget.measurements - spent if budget.measurements is not None else measurer.width
            picks = policy.pick_next(run, measured, excluded, max(1, min(measurer.width, room)))
            measurer.run([variants[i].measurement_job(i, kernel_timeout_s) for i in picks], take)
    state.chances = policy.open_chances(run, measured, excluded)
    return state
