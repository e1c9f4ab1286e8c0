"""One calibration layer for every backend (docs/forecast.md), per backend × GPU class.

A backend's raw 8-bin distribution passes through, in order:
1. a local bias, when the user's own measurements say forecasts on this GPU run high or
   low: the distribution is shifted by `bias_log2` in log2 S (local learning); where the
   pair's reference was measured against, also by that reference's own miss, and narrowed
   by as much as those measurements told of it;
2. a map fitted on held-out measured pairs: a temperature on the bin probabilities, or an
   isotonic map of the distribution's CDF at the 7 bin edges (monotone, so the result is
   still a distribution; it recalibrates P(S ≥ 1), the direction confidence, directly);
3. with enough of the user's measurements, a temperature on the log-odds of the direction
   (local learning again): how sure forecasts on this GPU should be that S ≥ 1.

Local learning is cautious because the user's measurements are few and alike. Measured
against one reference, a user's kernels miss together (one problem's solutions land high or
low as one), so the bias counts references, not measurements: a miss shared by every
reference must show across many references before it moves the forecasts of the others. The
same likeness makes one measurement worth much for the next kernel against its reference: most
of its miss is the reference's, and so is the next one's. How far apart the three levels lie
(an author's or GPU's own bias, a reference's, a pair's) was measured on the held-out forecasts
of the real-world sources (workshop/training/local_learning.py, which also replays the learning
there); a bias that counts each measurement alike, fitted with a temperature on the bins, made
held-out authors' other forecasts worse.

The shipped maps live in `models/weights/calibration.json` (written by training); the
user's own in a small JSON in kernelcast's state folder. Until a map exists for a
(backend, GPU class), the identity is used and the calibration id says so, so cached
forecasts made under different calibrations never mix.

API for learning from the user's measurements (the server's side of issue 5):
- `update_local(observations, backend, gpu, path=None, table=None) -> LocalCorrection`: refit the
  local bias (and, with enough measurements, the direction's temperature on top of the shipped
  map) of one (backend, GPU class) from every (raw probabilities, measured S, reference key)
  measured so far, and persist it. Pass all observations each time: the fit is a pure function of
  them, so a removed measurement is forgotten by the next update.
- `reset_local(path=None)`: forget all local learning (`kernelcast reset-learning`).
- `CalibrationTable.is_local(backend, gpu)`: whether forecasts of this pair use local
  learning; the forecaster writes it into provenance["local_learning"].
A running service re-reads the local file when it changes, so an update takes effect on
the next forecast.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.paths import state_home
from kernelcast.wire import LOG2_EDGES, NUM_BINS, _bin_bounds, bin_of_speedup, with_direction_temperature

IDENTITY_ID = "identity"
SHIPPED_PATH = Path(__file__).parents[1] / "weights" / "calibration.json"
LOCAL_FILE = "local_learning.json"
# Fitting a temperature on fewer pairs than this overfits; the local bias alone is used below it.
MIN_PAIRS_FOR_TEMPERATURE = 30
TEMPERATURE_RANGE = (0.2, 8.0)
# Octaves, a miss being measured log2 S (clipped to ±MISS_CLIP) less the forecast's median. On
# the real-world sources, each forecast by a fit that never saw it: one source's mean miss lay
# this far from zero (root mean square over the sources) ...
LOCAL_BIAS_SD = 0.21
# ... one reference's mean miss this far from its source's, one pair's this far from its reference's.
REFERENCE_MISS_SD = 1.0
PAIR_MISS_SD = 0.69
MISS_CLIP = 3.0
# The local direction temperature's prior: log T ~ Normal(0, this). Of 0.3 and 1.0, the one whose
# learning helped held-out sources more (workshop/training/local_learning.py).
DIRECTION_TEMPERATURE_SD = 0.3
_FLOOR = 1e-9


def gpu_class(compute_capability: Sequence[int] | None) -> str:
    """Calibrations are shared by GPUs of one architecture generation."""
    if not compute_capability:
        return "unknown"
    return f"sm{compute_capability[0]}x"


def _as_rows(probabilities: Any) -> np.ndarray:
    rows = np.maximum(np.asarray(probabilities, dtype=float).reshape(-1, NUM_BINS), 0.0)
    return rows / rows.sum(axis=1, keepdims=True)


def true_bins(speedups: Any) -> np.ndarray:
    """1-based bins of measured speedups, as kernelcast.wire.bin_of_speedup gives them one at a time."""
    values = np.atleast_1d(np.asarray(speedups, dtype=float))
    bad = ~(values > 0) | np.isinf(values)
    if bad.any():
        bin_of_speedup(float(values[bad][0]))  # raises its message
    log2 = np.fromiter(map(math.log2, values), dtype=float, count=len(values))  # math's log2, as bin_of_speedup's
    return 1 + (log2[:, None] >= np.array(LOG2_EDGES)).sum(axis=1)


def _with_temperature(rows: np.ndarray, value: float) -> np.ndarray:
    logs = np.log(np.maximum(rows, 1e-12)) / value
    weights = np.exp(logs - logs.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True)


def _from_cdf(cdf: np.ndarray) -> np.ndarray:
    """Bin probabilities from CDF values at the 7 edges (rows, non-decreasing)."""
    cuts = np.concatenate([np.zeros((len(cdf), 1)), np.clip(cdf, 0.0, 1.0), np.ones((len(cdf), 1))], axis=1)
    probabilities = np.maximum(np.diff(cuts, axis=1), 0.0) + _FLOOR
    return probabilities / probabilities.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class Temperature:
    """p_k ∝ p_k^(1/T): T > 1 flattens an over-confident backend, T < 1 sharpens."""

    value: float
    fitted_on: int  # number of measured pairs behind it

    def apply_rows(self, rows: np.ndarray) -> np.ndarray:
        return _with_temperature(rows, self.value)

    @property
    def id(self) -> str:
        return f"T{self.value:.3f}-n{self.fitted_on}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": "temperature", "temperature": self.value, "fitted_on": self.fitted_on}


@dataclass(frozen=True)
class IsotonicCdf:
    """F'(edge) = g(F(edge)) with g monotone, fitted by pooled-adjacent-violators on held-out pairs."""

    knots_x: tuple[float, ...]
    knots_y: tuple[float, ...]
    fitted_on: int

    def apply_rows(self, rows: np.ndarray) -> np.ndarray:
        # Mapped from both ends (P(below) from the left, P(above) from the right) and averaged:
        # equal to g(F) for a symmetric g, and exactly mirrored for a swapped pair even where
        # rounding leaves F at 0 on one side and 1 − ε on the other.
        below = np.cumsum(rows, axis=1)[:, : NUM_BINS - 1]
        above = np.cumsum(rows[:, ::-1], axis=1)[:, NUM_BINS - 2 :: -1]
        return _from_cdf((self._g(below) + 1.0 - self._g(above)) / 2.0)

    def _g(self, cdf: np.ndarray) -> np.ndarray:
        return np.interp(cdf, *self._knots)

    # Both are read on every forecast and a fitted map has thousands of knots: made once.
    @functools.cached_property
    def _knots(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.knots_x), np.asarray(self.knots_y)

    @functools.cached_property
    def id(self) -> str:
        digest = hashlib.sha256(json.dumps([self.knots_x, self.knots_y]).encode()).hexdigest()[:6]
        return f"iso{digest}-n{self.fitted_on}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": "isotonic-cdf", "x": list(self.knots_x), "y": list(self.knots_y), "fitted_on": self.fitted_on}


CalibrationMap = Temperature | IsotonicCdf


def map_from_json(data: dict[str, Any]) -> CalibrationMap:
    if data.get("kind", "temperature") == "temperature":
        return Temperature(float(data["temperature"]), int(data.get("fitted_on", 0)))
    return IsotonicCdf(tuple(map(float, data["x"])), tuple(map(float, data["y"])), int(data.get("fitted_on", 0)))


def best_temperature(loss: Callable[[float], float]) -> float:
    """The T in TEMPERATURE_RANGE whose log minimises `loss` (golden-section search on log T)."""
    low, high = (math.log(v) for v in TEMPERATURE_RANGE)
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        a, b = high - ratio * (high - low), low + ratio * (high - low)
        if loss(a) < loss(b):
            high = b
        else:
            low = a
    return round(math.exp((low + high) / 2), 4)


def fit_temperature(probabilities: Any, speedups: Any) -> Temperature:
    """The T that minimises the held-out NLL of the true bins."""
    rows, bins = _as_rows(probabilities), true_bins(speedups) - 1

    def loss(log_t: float) -> float:
        calibrated = _with_temperature(rows, math.exp(log_t))
        return float(-np.log(np.maximum(calibrated[np.arange(len(bins)), bins], 1e-12)).mean())

    return Temperature(best_temperature(loss), len(bins))


def fit_direction_temperature(rows: np.ndarray, speedups: np.ndarray) -> float:
    """The most probable direction temperature given the pairs (log T's prior: DIRECTION_TEMPERATURE_SD)."""
    faster = np.log2(speedups) >= 0

    def loss(log_t: float) -> float:
        p_faster = with_direction_temperature(rows, math.exp(log_t))[:, NUM_BINS // 2 :].sum(axis=1)
        right = np.maximum(np.where(faster, p_faster, 1.0 - p_faster), 1e-12)
        return float(-np.log(right).sum() + log_t**2 / (2.0 * DIRECTION_TEMPERATURE_SD**2))

    return best_temperature(loss)


def _pav(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Isotonic (non-decreasing) least-squares fit of y on x; knots at block means."""
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    blocks: list[list[float]] = []  # [sum_y, count, sum_x]
    for xi, yi in zip(xs, ys):
        blocks.append([float(yi), 1.0, float(xi)])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            y2, n2, x2 = blocks.pop()
            blocks[-1][0] += y2
            blocks[-1][1] += n2
            blocks[-1][2] += x2
    return np.array([b[2] / b[1] for b in blocks]), np.array([b[0] / b[1] for b in blocks])


def fit_isotonic(probabilities: Any, speedups: Any) -> IsotonicCdf:
    """g with P(s < edge) ≈ g(F(edge)), pooled over the 7 edges; anchored at (0, 0) and (1, 1).

    Fitted on every pair and its mirror (sides swapped: bins reversed, true bin mirrored), so
    g(1 − u) = 1 − g(u): calibrating a swapped pair gives the swapped forecast, as it must.
    """
    rows, bins = _as_rows(probabilities), true_bins(speedups) - 1
    pairs = len(bins)
    rows, bins = np.concatenate([rows, rows[:, ::-1]]), np.concatenate([bins, NUM_BINS - 1 - bins])
    cdf = np.cumsum(rows, axis=1)[:, : NUM_BINS - 1]
    below = (bins[:, None] <= np.arange(NUM_BINS - 1)[None, :]).astype(float)
    knots_x, knots_y = _pav(cdf.ravel(), below.ravel())
    knots_x = np.concatenate([[0.0], knots_x, [1.0]])
    knots_y = np.concatenate([[0.0], np.clip(knots_y, 0.0, 1.0), [1.0]])
    return IsotonicCdf(tuple(np.round(knots_x, 6)), tuple(np.round(knots_y, 6)), pairs)


def fit(probabilities: Any, speedups: Any, kind: str = "temperature") -> CalibrationMap:
    return fit_isotonic(probabilities, speedups) if kind == "isotonic-cdf" else fit_temperature(probabilities, speedups)


def median_log2(rows: np.ndarray) -> np.ndarray:
    """Median of s per row, linear within bins in log space (as Forecast reads it)."""
    medians = np.empty(len(rows))
    for index, row in enumerate(rows):
        cumulative = 0.0
        for k, p in enumerate(row):
            if p > 0 and cumulative + p >= 0.5:
                lo, hi = _bin_bounds(k)
                medians[index] = lo + (hi - lo) * (0.5 - cumulative) / p
                break
            cumulative += p
        else:
            medians[index] = _bin_bounds(NUM_BINS - 1)[1]
    return medians


def shift(rows: Any, bias_log2: float, scale: float = 1.0) -> np.ndarray:
    """The distribution moved by `bias_log2` in s, and its spread around its median scaled by
    `scale`; CDF linear within bins (outer bins one octave)."""
    rows = _as_rows(rows)
    if bias_log2 == 0 and scale == 1.0:
        return rows
    edges = np.array([_bin_bounds(0)[0], *LOG2_EDGES, _bin_bounds(NUM_BINS - 1)[1]])
    cdf = np.concatenate([np.zeros((len(rows), 1)), np.cumsum(rows, axis=1)], axis=1)
    medians = median_log2(rows) if scale != 1.0 else np.zeros(len(rows))
    # s' = m + bias + scale·(s − m): P(s' < e) = F(m + (e − m − bias) / scale), F piecewise linear
    # through (edges, cdf).
    at = medians[:, None] + (np.array(LOG2_EDGES)[None, :] - medians[:, None] - bias_log2) / scale
    return _from_cdf(np.stack([np.interp(points, edges, row) for points, row in zip(at, cdf)]))


def reference_scale(measured: int) -> float:
    """How much narrower a forecast against a reference measured `measured` times is: its spread
    held the reference's own miss in full, and now holds only what is left unknown of it."""
    left = REFERENCE_MISS_SD**2 * PAIR_MISS_SD**2 / (PAIR_MISS_SD**2 + measured * REFERENCE_MISS_SD**2)
    return math.sqrt((left + PAIR_MISS_SD**2) / (REFERENCE_MISS_SD**2 + PAIR_MISS_SD**2))


@dataclass(frozen=True)
class LocalCorrection:
    """What the user's own measurements taught about one (backend, GPU class)."""

    bias_log2: float
    direction_temperature: float | None
    fitted_on: int
    # By reference key: the most probable miss of that reference's own, beyond the bias, and
    # how many measurements against it say so.
    references: dict[str, tuple[float, int]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        temperature = f"D{self.direction_temperature:.3f}" if self.direction_temperature is not None else ""
        return f"local{self.bias_log2:+.3f}{temperature}-n{self.fitted_on}"

    def reference_id(self, reference: str | None) -> str | None:
        """The part of a calibration id that says a forecast used its reference's own miss."""
        own = self.references.get(reference or "")
        return None if own is None else f"ref{own[0]:+.3f}-n{own[1]}"

    def apply_rows(self, rows: np.ndarray, shipped: CalibrationMap | None, reference: str | None = None) -> np.ndarray:
        """Raw rows shifted by the bias (and by their reference's own miss, narrowed by what its
        measurements told, where it was measured), through the shipped map, then the direction's
        temperature."""
        own_miss, measured = self.references.get(reference or "", (0.0, 0))
        rows = shift(rows, self.bias_log2 + own_miss, reference_scale(measured))
        if shipped is not None:
            rows = shipped.apply_rows(rows)
        return rows if self.direction_temperature is None else with_direction_temperature(rows, self.direction_temperature)

    def to_json(self) -> dict[str, Any]:
        return {
            "bias_log2": self.bias_log2,
            "direction_temperature": self.direction_temperature,
            "fitted_on": self.fitted_on,
            "references": {key: list(own) for key, own in self.references.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LocalCorrection:
        # A file written before the direction temperature holds a "temperature" on the bins: not read.
        temperature = data.get("direction_temperature")
        references = {str(key): (float(shift), int(count)) for key, (shift, count) in (data.get("references") or {}).items()}
        return cls(float(data["bias_log2"]), None if temperature is None else float(temperature), int(data["fitted_on"]), references)


# One of the user's measurements: the backend's raw 8 bin probabilities, the measured S, and
# a key of the reference it was measured against (code_key).
Observation = tuple[Sequence[float], float, str]


def code_key(code: str) -> str:
    """A short key of some code: of a reference, which measurements against it share (they miss
    together), or of a pair, which a measurement of it again replaces."""
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def pooled_bias(misses: np.ndarray, references: Sequence[str]) -> float:
    """The most probable shared miss b, when a miss is b + the reference's own + the pair's own.

    Each reference's mean miss says b with the variance of the two below it, and b is drawn
    around zero with LOCAL_BIAS_SD: so ten measurements against one reference move it barely
    more than one does, and ten references each measured once move it far more.
    """
    weight_sum = weighted = 0.0
    for own in _by_reference(misses, references).values():
        weight = 1.0 / (REFERENCE_MISS_SD**2 + PAIR_MISS_SD**2 / len(own))
        weighted += weight * float(own.mean())
        weight_sum += weight
    return weighted / (weight_sum + 1.0 / LOCAL_BIAS_SD**2)


def _by_reference(misses: np.ndarray, references: Sequence[str]) -> dict[str, np.ndarray]:
    keys = np.array(references)
    return {reference: misses[keys == reference] for reference in dict.fromkeys(references)}


def local_path() -> Path:
    """The user's local-learning file, in kernelcast's private state folder."""
    return state_home() / LOCAL_FILE


def _key(backend: str, gpu: str) -> str:
    return f"{backend}/{gpu}"


class CalibrationTable:
    """Shipped maps by (backend, GPU class), and the user's local corrections on top."""

    def __init__(self, path: Path | None = None, local: Path | None = None) -> None:
        """`path`: a calibration JSON (default: the shipped one); `local`: the local-learning file."""
        self.path = path if path is not None else SHIPPED_PATH
        self.local = local if local is not None else local_path()
        self._maps: dict[str, CalibrationMap] = {}
        self._shipped_version = IDENTITY_ID
        if self.path.exists():
            text = self.path.read_text()
            self._shipped_version = hashlib.sha256(text.encode()).hexdigest()[:12]
            self._maps = {key: map_from_json(value) for key, value in json.loads(text).items()}
        self._local: dict[str, LocalCorrection] = {}
        self._local_stamp: tuple[int, int] | None = None
        self._local_digest = ""

    @property
    def version(self) -> str:
        """Changes whenever shipped or local calibration changes: part of every cache key."""
        self._refresh_local()
        return f"{self._shipped_version}+{self._local_digest}" if self._local_digest else self._shipped_version

    def _refresh_local(self) -> None:
        try:
            status = self.local.stat()
        except OSError:
            self._local, self._local_stamp, self._local_digest = {}, None, ""
            return
        stamp = (status.st_mtime_ns, status.st_size)
        if stamp == self._local_stamp:
            return
        try:
            text = self.local.read_text()
            self._local = {key: LocalCorrection.from_json(value) for key, value in json.loads(text).items()}
            self._local_digest = "local" + hashlib.sha256(text.encode()).hexdigest()[:8]
        except (OSError, ValueError, KeyError, TypeError):
            self._local, self._local_digest = {}, ""  # a broken local file is ignored, never fatal
        self._local_stamp = stamp

    def is_local(self, backend: str, gpu: str) -> bool:
        self._refresh_local()
        return _key(backend, gpu) in self._local

    def calibrate(self, backend: str, gpu: str, probabilities: Sequence[float], reference: str | None = None) -> tuple[list[float], str]:
        """Calibrated probabilities and the id of the calibration used; `reference`: the key of
        the pair's reference (code_key), whose own measurements then count too."""
        self._refresh_local()
        rows = _as_rows(probabilities)
        shipped = self._maps.get(_key(backend, gpu))
        local = self._local.get(_key(backend, gpu))
        if local is not None:
            rows = local.apply_rows(rows, shipped, reference)
        elif shipped is not None:
            rows = shipped.apply_rows(rows)
        parts = [calibration.id for calibration in (shipped, local) if calibration is not None]
        own = local.reference_id(reference) if local is not None else None
        return [float(p) for p in rows[0]], "+".join([*parts, *([own] if own else [])]) or IDENTITY_ID

    def shipped_map(self, backend: str, gpu: str) -> CalibrationMap | None:
        return self._maps.get(_key(backend, gpu))


def fit_local(observations: Sequence[Observation], shipped: CalibrationMap | None = None) -> LocalCorrection:
    """The pooled bias of the misses, each measured reference's own miss beyond it, and the
    direction's temperature on top, with enough pairs."""
    rows = _as_rows([probabilities for probabilities, _, _ in observations])
    speedups = np.array([speedup for _, speedup, _ in observations], dtype=float)
    if not np.all(speedups > 0) or not np.all(np.isfinite(speedups)):
        raise ValueError("measured speedups must be positive and finite")
    misses = np.clip(np.log2(speedups), -MISS_CLIP, MISS_CLIP) - median_log2(rows)
    keys = [reference for _, _, reference in observations]
    bias = pooled_bias(misses, keys)
    temperature = None
    if len(observations) >= MIN_PAIRS_FOR_TEMPERATURE:
        corrected = shift(rows, bias)
        if shipped is not None:
            corrected = shipped.apply_rows(corrected)
        temperature = fit_direction_temperature(corrected, speedups)
    return LocalCorrection(round(bias, 4), temperature, len(observations), reference_misses(misses - bias, keys))


def reference_misses(misses: np.ndarray, references: Sequence[str]) -> dict[str, tuple[float, int]]:
    """Each reference's most probable own miss given the misses against it (the bias taken out)
    and how many there were; a measurement kept without a reference key ("") has none."""
    found = {}
    for reference, own in _by_reference(misses, references).items():
        if reference:
            weight = len(own) * REFERENCE_MISS_SD**2 / (PAIR_MISS_SD**2 + len(own) * REFERENCE_MISS_SD**2)
            found[reference] = (round(weight * float(own.mean()), 4), len(own))
    return found


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(temporary, path)


def update_local(
    observations: Sequence[Observation],
    backend: str,
    gpu: str,
    path: Path | None = None,
    table: CalibrationTable | None = None,
) -> LocalCorrection:
    """Refit and persist the local correction of (backend, GPU class) from all its measured pairs.

    `observations`: (the backend's *raw* 8 bin probabilities for a pair, measured S, code_key).
    `table`: the calibration in use, whose shipped map the local temperature sits on
    (default: the shipped one).
    """
    if not observations:
        raise ValueError("no measured pairs to learn from")
    path = path if path is not None else local_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    shipped = (table if table is not None else CalibrationTable(local=path)).shipped_map(backend, gpu)
    correction = fit_local(observations, shipped)
    data[_key(backend, gpu)] = correction.to_json()
    _write_json(path, data)
    return correction


def reset_local(path: Path | None = None) -> bool:
    """Forget every local correction; True when there was something to forget."""
    try:
        (path if path is not None else local_path()).unlink()
        return True
    except FileNotFoundError:
        return False


def write_shipped(maps: dict[str, CalibrationMap], path: Path = SHIPPED_PATH) -> None:
    """Training's output: the maps by "backend/gpu class"."""
    _write_json(path, {key: value.to_json() for key, value in sorted(maps.items())})
