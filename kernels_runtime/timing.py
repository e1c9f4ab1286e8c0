"""Correctness-checked timing of two GPU callables, by the method of docs/measure.md.

Read top to bottom: how outputs are compared, how one sample is taken, when sampling
stops, and how two variants are interleaved into a speedup with a confidence interval.
The GPU parts take torch lazily; the checks and the statistics are numpy and stdlib, so
they are tested on machines without a GPU.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# --- correctness -------------------------------------------------------------------------

# atol = rtol per dtype (docs/measure.md); integers and booleans must match exactly.
TOLERANCES = {"f32": 1e-4, "f64": 1e-4, "f16": 1e-2, "bf16": 1e-2}
SEEDS = (11, 22, 33)


def tolerance_for(dtype: str) -> float:
    return TOLERANCES.get(dtype, 0.0)


def check_close(name: str, expected: np.ndarray, actual: np.ndarray, dtype: str, tolerance: float | None = None) -> str | None:
    """None when `actual` matches `expected` within the dtype's tolerance, else why not.

    Outputs are poisoned with NaN before each run, so a NaN where the reference has a
    number means an element the candidate never wrote (or computed as NaN). `tolerance`
    overrides the dtype's where an operation's summation order legitimately differs.
    """
    if expected.shape != actual.shape:
        return f"wrong results: {name} has shape {tuple(actual.shape)}, reference {tuple(expected.shape)}"
    tolerance = tolerance_for(dtype) if tolerance is None else tolerance
    # At least 1-d: a loss function's 0-d output would make the error a scalar below.
    expected64 = np.atleast_1d(expected.astype(np.float64, copy=False))
    actual64 = np.atleast_1d(actual.astype(np.float64, copy=False))
    unwritten = np.isnan(actual64) & ~np.isnan(expected64)
    if unwritten.any():
        first = _index_text(np.flatnonzero(unwritten)[0], expected.shape)
        return (
            f"wrong results: {name} has {int(unwritten.sum())} NaN elements where the reference has "
            f"numbers (first at index {first}): output not fully written?"
        )
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: handled below
        error = np.abs(actual64 - expected64)
    error[np.isnan(expected64) & np.isnan(actual64)] = 0.0
    error[np.isinf(expected64) & (expected64 == actual64)] = 0.0
    allowed = tolerance + tolerance * np.abs(np.nan_to_num(expected64, nan=0.0, posinf=0.0, neginf=0.0))
    bad = ~(error <= allowed)
    if not bad.any():
        return None
    worst = int(np.argmax(np.where(bad, np.nan_to_num(error, nan=np.inf), -1.0)))
    return (
        f"wrong results: max abs err {error.flat[worst]:.1e} at index {_index_text(worst, expected.shape)} "
        f"(tolerance {tolerance:.0e}){'' if name == 'out' else f' in {name}'}"
    )


def _index_text(flat_index: int, shape: tuple[int, ...]) -> str:
    if len(shape) <= 1:
        return str(int(flat_index))
    return str(tuple(int(i) for i in np.unravel_index(flat_index, shape)))


# --- statistics --------------------------------------------------------------------------

# Two-sided 95% Student t quantiles for 1..30 degrees of freedom.
_T_975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t_quantile_975(degrees_of_freedom: int) -> float:
    if degrees_of_freedom < 1:
        raise ValueError("need at least two rounds for an interval")
    return _T_975[degrees_of_freedom - 1] if degrees_of_freedom <= len(_T_975) else 1.96


# A kernel's median moves between runs (other buffers, clocks, neighbours) by more than its
# rounds within one run show: a relative part and a timer/launch jitter that dominates below
# ~50 µs. Fitted by maximum likelihood on the corpus's first re-measured 2% sample (95
# kernels, a later device call); 91.5% and 96.9% of two later samples fell inside.
RUN_TO_RUN_REL_SD = 0.0037
RUN_TO_RUN_JITTER_MS = 0.00024


def run_to_run_sd(median_ms: float) -> float:
    """Log-scale sd of a kernel's median between runs."""
    return math.hypot(RUN_TO_RUN_REL_SD, RUN_TO_RUN_JITTER_MS / median_ms)


def ratio_interval(round_ratios: list[float], drift_sd: float = 0.0) -> tuple[float, float, float]:
    """Speedup and 95% CI from per-round ratios: exp(mean ± t·sd/√k) of their logs, widened
    in quadrature by `drift_sd`, the log-scale sd that rounds of one run cannot see.

    Rounds drift about 1% on a GPU, so rounds (not pooled samples) are the unit.
    """
    logs = [math.log(ratio) for ratio in round_ratios]
    mean = statistics.fmean(logs)
    within = t_quantile_975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    half_width = math.hypot(within, 1.96 * drift_sd)
    return math.exp(mean), math.exp(mean - half_width), math.exp(mean + half_width)


def summarize(samples_ms: list[float]) -> dict[str, float | int]:
    """Median, p20, p80 and n: what a measurement reports for each side."""
    values = np.asarray(samples_ms, dtype=np.float64)
    return {
        "median_ms": float(np.median(values)),
        "p20_ms": float(np.percentile(values, 20)),
        "p80_ms": float(np.percentile(values, 80)),
        "n": int(values.size),
    }


def relative_sem(samples_ms: list[float]) -> float:
    if len(samples_ms) < 2:
        return math.inf
    mean = statistics.fmean(samples_ms)
    return statistics.stdev(samples_ms) / math.sqrt(len(samples_ms)) / mean if mean > 0 else math.inf


# --- one sample ----------------------------------------------------------------------------


def l2_flush_buffer(torch: Any) -> Any:
    """Bytes to zero before each sample: max(2 × L2, 256 MB), so every sample starts cold."""
    l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return torch.empty(max(2 * l2_bytes, 256 * 2**20) // 4, dtype=torch.int32, device="cuda")


def time_batch(torch: Any, fn: Callable[[], Any], flush: Any, count: int) -> list[float]:
    """`count` samples of one launch each, in ms, read with one synchronize.

    The flush before each start event also keeps the GPU busy while the host enqueues the
    launch, so host launch gaps stay out of the sample (docs/measure.md).
    """
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(count)]
    for start, end in events:
        flush.zero_()
        start.record()
        fn()
        end.record()
    events[-1][1].synchronize()
    return [start.elapsed_time(end) for start, end in events]


# --- warm-up and the stop rule ---------------------------------------------------------------


@dataclass(frozen=True)
class StopRule:
    """Per variant over the whole measurement (docs/measure.md); rounds share it equally."""

    min_samples: int = 10
    min_kernel_ms: float = 100.0
    max_rel_sem: float = 0.005
    max_wall_s: float = 2.0

    def per_round(self, rounds: int) -> StopRule:
        return StopRule(self.min_samples, self.min_kernel_ms / rounds, self.max_rel_sem, self.max_wall_s / rounds)


def warm_up(torch: Any, fn: Callable[[], Any], on_call: Callable[[], None], min_ms: float = 100.0, min_calls: int = 3) -> float:
    """Run past JIT, module load and idle clocks; returns a per-call estimate in ms.

    The first call is excluded (compile, load); then at least `min_calls` calls and
    `min_ms` of wall time, so the SM clock has left its 345 MHz idle state.
    """
    on_call()
    fn()
    torch.cuda.synchronize()
    calls, started = 0, time.perf_counter()
    while calls < min_calls or (time.perf_counter() - started) * 1e3 < min_ms:
        on_call()
        fn()
        torch.cuda.synchronize()
        calls += 1
    return (time.perf_counter() - started) * 1e3 / calls


def sample_until_stable(
    torch: Any, fn: Callable[[], Any], flush: Any, rule: StopRule, estimate_ms: float, on_call: Callable[[], None]
) -> list[float]:
    """Samples until ≥min_samples and ≥min_kernel_ms, then until rel. SEM ≤ max, or the wall budget."""
    # Batches of about 50 ms keep host syncs rare and still let a hung kernel be noticed.
    batch = max(1, min(rule.min_samples, int(50.0 / max(estimate_ms, 1e-3))))
    samples: list[float] = []
    started = time.perf_counter()
    while True:
        on_call()
        samples += time_batch(torch, fn, flush, batch)
        enough = len(samples) >= rule.min_samples and sum(samples) >= rule.min_kernel_ms
        if enough and relative_sem(samples) <= rule.max_rel_sem:
            return samples
        if time.perf_counter() - started >= rule.max_wall_s and len(samples) >= 2:
            return samples


# --- two variants, interleaved ------------------------------------------------------------------


@dataclass
class PairTiming:
    """Reference and candidate timed in k interleaved rounds; speedup = t_ref / t_cand."""

    speedup: float
    ci95: tuple[float, float]
    round_ratios: list[float]
    reference: dict[str, float | int]
    candidate: dict[str, float | int]

    def to_json(self) -> dict[str, Any]:
        return {
            "speedup": self.speedup,
            "ci95": list(self.ci95),
            "round_ratios": self.round_ratios,
            "reference": self.reference,
            "candidate": self.candidate,
        }


def time_pair(
    torch: Any,
    reference: Callable[[], Any],
    candidate: Callable[[], Any],
    rounds: int = 6,
    rule: StopRule = StopRule(),
    on_call: Callable[[str], None] = lambda label: None,
    on_round: Callable[[int], None] = lambda done: None,
) -> PairTiming:
    """Warm both, then rounds with a per-round ratio of medians.

    The order alternates (reference first, then candidate first) so that whatever the
    first or second position gains, e.g. clocks or caches settling, cancels out: with a
    fixed order, A vs identical A read 1.0007 with a CI excluding 1 on the H100.
    """
    flush = l2_flush_buffer(torch)
    estimates = {
        label: warm_up(torch, fn, lambda label=label: on_call(label)) for label, fn in (("reference", reference), ("candidate", candidate))
    }
    round_rule = rule.per_round(rounds)
    samples: dict[str, list[float]] = {"reference": [], "candidate": []}
    ratios = []
    for done in range(rounds):
        medians = {}
        order = (("reference", reference), ("candidate", candidate))
        for label, fn in order if done % 2 == 0 else reversed(order):
            taken = sample_until_stable(torch, fn, flush, round_rule, estimates[label], lambda label=label: on_call(label))
            samples[label] += taken
            medians[label] = statistics.median(taken)
        ratios.append(medians["reference"] / medians["candidate"])
        on_round(done + 1)
    reference_summary, candidate_summary = summarize(samples["reference"]), summarize(samples["candidate"])
    # The interval is for measuring again, not for this run alone: A vs identical A, each on
    # its own buffers, read 1.0009 with a rounds-only CI of ±0.08% on the H100.
    drift = math.hypot(run_to_run_sd(reference_summary["median_ms"]), run_to_run_sd(candidate_summary["median_ms"]))
    speedup, low, high = ratio_interval(ratios, drift)
    return PairTiming(speedup, (low, high), ratios, reference_summary, candidate_summary)


def time_one(torch: Any, fn: Callable[[], Any], rule: StopRule = StopRule()) -> dict[str, float | int]:
    """One variant alone (benchmarks): warm-up then the stop rule."""
    flush = l2_flush_buffer(torch)
    estimate = warm_up(torch, fn, lambda: None)
    return summarize(sample_until_stable(torch, fn, flush, rule, estimate, lambda: None))
