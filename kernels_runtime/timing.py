"""Correctness-checked timing of two GPU callables, by the method of docs/measure.md.

Read top to bottom: how outputs are compared, how one sample is taken, when sampling
stops, and how two variants are interleaved into a speedup with a confidence interval.
The GPU parts take torch lazily; the checks and the statistics are numpy and stdlib, so
they are tested on machines without a GPU.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernelcast.wire import parse_tolerance

# --- correctness -------------------------------------------------------------------------

# atol = rtol per dtype for .cu and Triton kernels (docs/measure.md); integers and booleans must match exactly.
TOLERANCES = {"f32": 1e-4, "f64": 1e-4, "f16": 1e-2, "bf16": 1e-2}
# KernelBench files are judged by KernelBench's own rule. Its evaluation (src/eval.py,
# run_and_check_correctness) accepts torch.allclose(atol=1e-02, rtol=1e-02) whatever the dtype,
# and its per-precision table (src/kernelbench/eval.py, get_tolerance_for_precision) gives
# fp16 and bf16 1e-2 too: half precision is no looser there than fp32 at its default.
KERNELBENCH_TOLERANCE = 1e-2
SEEDS = (11, 22, 33)
# Elements compared per step on the GPU: float64 copies of a chunk take 128 MiB each, and a
# 1.6-billion-element output is compared in ~100 steps with progress between them.
CHUNK_ELEMENTS = 1 << 24


def tolerance_for(dtype: str) -> float:
    return TOLERANCES.get(dtype, 0.0)


@dataclass(frozen=True)
class Tolerance:
    """How close outputs must be: atol = rtol from a rule's per-dtype table, or one number for all floats."""

    rule: str  # strict | kernelbench | custom
    value: float | None = None  # the number of a custom tolerance

    def for_dtype(self, dtype: str) -> float:
        if dtype not in TOLERANCES:
            return 0.0  # integers and booleans: exact
        if self.rule == "custom":
            return float(self.value)
        return KERNELBENCH_TOLERANCE if self.rule == "kernelbench" else TOLERANCES[dtype]

    def describe(self, dtype: str) -> str:
        named = {"strict": "", "kernelbench": ", KernelBench's rule", "custom": ", set by the user"}[self.rule]
        return f"tolerance {self.for_dtype(dtype):.0e}{named}"

    def to_json(self, dtypes: Iterable[str] = ()) -> dict[str, Any]:
        """The rule and, for each dtype compared, the atol = rtol used."""
        return {"rule": self.rule, "atol_rtol": {dtype: self.for_dtype(dtype) for dtype in sorted(set(dtypes))}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Tolerance:
        return cls(data["rule"], data.get("value"))


def resolve_tolerance(setting: str | float, language: str) -> Tolerance:
    """The tolerance for one pair: auto is KernelBench's rule for KernelBench files, the strict table otherwise."""
    setting = parse_tolerance(setting)
    if isinstance(setting, float):
        return Tolerance("custom", setting)
    if setting == "auto":
        return Tolerance("kernelbench" if language == "pytorch" else "strict")
    return Tolerance(setting)


@dataclass
class Comparison:
    """What comparing one output with the reference found, gathered chunk by chunk."""

    numel: int = 0
    unwritten: int = 0  # NaN (the poison) where the reference has a number
    first_unwritten: int = -1
    bad: int = 0  # elements outside the tolerance
    worst_bad_error: float = -1.0
    worst_bad_index: int = -1
    max_error: float = 0.0  # largest finite abs error anywhere, also when all pass
    diff_squares: float = 0.0
    reference_squares: float = 0.0

    def add(self, chunk: Comparison, offset: int) -> None:
        """Fold in a chunk that starts at flat index `offset`."""
        if chunk.unwritten and not self.unwritten:
            self.first_unwritten = offset + chunk.first_unwritten
        if chunk.bad and chunk.worst_bad_error > self.worst_bad_error:
            self.worst_bad_error, self.worst_bad_index = chunk.worst_bad_error, offset + chunk.worst_bad_index
        self.numel += chunk.numel
        self.unwritten += chunk.unwritten
        self.bad += chunk.bad
        self.max_error = max(self.max_error, chunk.max_error)
        self.diff_squares += chunk.diff_squares
        self.reference_squares += chunk.reference_squares

    @property
    def relative_l2(self) -> float:
        """‖actual − expected‖ / ‖expected‖ over the finite elements: the size of a precision loss."""
        if self.reference_squares == 0.0:
            return 0.0 if self.diff_squares == 0.0 else math.inf
        return math.sqrt(self.diff_squares / self.reference_squares)

    def problem(self, name: str, shape: tuple[int, ...], tolerance_text: str) -> str | None:
        """None when every element passed, else why not in words."""
        if self.unwritten:
            return (
                f"wrong results: {name} has {self.unwritten} NaN elements where the reference has "
                f"numbers (first at index {_index_text(self.first_unwritten, shape)}): output not fully written?"
            )
        if not self.bad:
            return None
        return (
            f"wrong results: max abs err {self.worst_bad_error:.1e} at index {_index_text(self.worst_bad_index, shape)} "
            f"({tolerance_text}){'' if name == 'out' else f' in {name}'}"
        )


def compare_chunk(xp: Any, expected: Any, actual: Any, tolerance: float) -> Comparison:
    """One flat chunk compared in float64 with `xp` = numpy (arrays) or torch (tensors, on their GPU).

    Outputs are poisoned with NaN before each run, so a NaN where the reference has a number
    is an element the candidate never wrote (or computed as NaN); NaN in both, or the same
    infinity in both, agree.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf where both are inf: zeroed below
        e, a = xp.asarray(expected, dtype=xp.float64), xp.asarray(actual, dtype=xp.float64)
        e_nan, a_nan = xp.isnan(e), xp.isnan(a)
        unwritten = a_nan & ~e_nan
        error = xp.where((e_nan & a_nan) | (e == a), 0.0, xp.abs(a - e))
        finite_expected = xp.nan_to_num(e, nan=0.0, posinf=0.0, neginf=0.0)
        bad = ~(error <= tolerance + tolerance * xp.abs(finite_expected))
        finite_error = xp.nan_to_num(error, nan=0.0, posinf=0.0, neginf=0.0)
        chunk = Comparison(numel=int(e.shape[0]), unwritten=int(unwritten.sum()), bad=int(bad.sum()))
        if chunk.numel == 0:
            return chunk
        if chunk.unwritten:
            chunk.first_unwritten = int((unwritten * 1).argmax())
        if chunk.bad:
            ranked = xp.where(bad, xp.nan_to_num(error, nan=math.inf), -1.0)
            chunk.worst_bad_index = int(ranked.argmax())
            chunk.worst_bad_error = float(ranked[chunk.worst_bad_index])
        chunk.max_error = float(finite_error.max())
        chunk.diff_squares = float((finite_error * finite_error).sum())
        chunk.reference_squares = float((finite_expected * finite_expected).sum())
    return chunk


def compare(
    xp: Any,
    expected: Any,
    actual: Any,
    tolerance: float,
    chunk_elements: int = CHUNK_ELEMENTS,
    on_chunk: Callable[[float], None] = lambda done: None,
) -> Comparison:
    """Two outputs of one shape compared in chunks, never copied whole; `on_chunk(fraction done)` after each."""
    flat_expected, flat_actual = expected.reshape(-1), actual.reshape(-1)
    total = int(flat_expected.shape[0])
    result = Comparison()
    for start in range(0, max(total, 1), chunk_elements):
        stop = min(start + chunk_elements, total)
        result.add(compare_chunk(xp, flat_expected[start:stop], flat_actual[start:stop], tolerance), start)
        on_chunk(stop / total if total else 1.0)
    return result


def check_close(name: str, expected: np.ndarray, actual: np.ndarray, dtype: str, tolerance: float | None = None) -> str | None:
    """None when numpy `actual` matches `expected` within the dtype's strict tolerance (or `tolerance`), else why not."""
    if expected.shape != actual.shape:
        return f"wrong results: {name} has shape {tuple(actual.shape)}, reference {tuple(expected.shape)}"
    tolerance = tolerance_for(dtype) if tolerance is None else tolerance
    return compare(np, expected, actual, tolerance).problem(name, tuple(expected.shape), f"tolerance {tolerance:.0e}")


def _index_text(flat_index: int, shape: tuple[int, ...]) -> str:
    if len(shape) <= 1:
        return str(int(flat_index))
    return str(tuple(int(i) for i in np.unravel_index(flat_index, shape)))


# Candidate code that computes in less than fp32 (the reference's torch matmul runs with allow_tf32
# off, and torch's default): a Triton dot on fp32 inputs uses TF32 unless told otherwise.
_TF32_SIGNS = (
    (re.compile(r"\btl\.dot\s*\("), "a Triton tl.dot on fp32 inputs uses TF32 by default"),
    (re.compile(r"allow_tf32\s*=\s*True"), "the candidate turns TF32 on (allow_tf32=True)"),
    (re.compile(r"set_float32_matmul_precision\(\s*['\"](high|medium)"), "the candidate lowers torch's fp32 matmul precision"),
    (re.compile(r"input_precision\s*=\s*['\"]tf32"), "the candidate asks tl.dot for TF32"),
)
_HALF_SIGNS = re.compile(r"\b(tl\.(float16|bfloat16)|torch\.(float16|bfloat16|half)|\.half\(\)|\.bfloat16\(\))")
_NO_TF32 = re.compile(r"allow_tf32\s*=\s*False|input_precision\s*=\s*['\"]ieee")
# ‖err‖/‖ref‖ that each precision gives on random data (the device notes' bands): TF32 lands
# near 3e-4, bf16/fp16 operands between 1e-3 and 1e-2; fp32 itself far under 1e-5.
TF32_RELATIVE_L2 = 3e-3
HALF_RELATIVE_L2 = 3e-2


def precision_explanation(candidate_code: str, relative_l2: float, reference_tf32: bool = False) -> str | None:
    """Why an error of this relative size is plausibly reduced precision rather than a bug, or None.

    `reference_tf32` is torch.backends.cuda.matmul.allow_tf32 where the reference ran.
    """
    if not math.isfinite(relative_l2) or relative_l2 <= 0.0:
        return None
    size = f"‖err‖/‖ref‖ = {relative_l2:.1e}"
    if relative_l2 <= TF32_RELATIVE_L2 and not _NO_TF32.search(candidate_code):
        for pattern, reason in _TF32_SIGNS:
            if pattern.search(candidate_code):
                reference = (
                    "torch's matmuls allow TF32 here too"
                    if reference_tf32
                    else "the reference's torch matmuls run in fp32 (allow_tf32 off)"
                )
                return f"{size}, the size TF32 gives: {reason}; {reference}"
    if relative_l2 <= HALF_RELATIVE_L2 and _HALF_SIGNS.search(candidate_code):
        return f"{size}, the size fp16/bf16 arithmetic gives: the candidate computes in half precision"
    return None


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
