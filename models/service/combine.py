"""`combined` backend: one forecast from several backends' calibrated distributions.

Each member is calibrated on its own first (its temperature for this GPU class), then
the distributions are pooled with a weight per backend:

- `linear` (default): p = Σ wᵢ pᵢ. When the members disagree the pool is wide and
  the forecast defers to measurement, which is the safe reading of "the embedded
  prior and the LLM disagree". A single overconfident member cannot make the pool
  more confident than the members' average.
- `log`: p ∝ Π pᵢ^wᵢ (weights normalised to sum 1). Sharper where members agree;
  use it once members are calibrated well enough that agreement is evidence.

A member that fails (server down, model missing) is left out and named in the
details, so the editor still gets the embedded forecast when the LLM is away.
The pooled distribution goes through the calibration layer again under the name
"combined", so a fitted temperature can correct the pool itself.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kernelcast.models import prediction
from kernelcast.wire import NUM_BINS, ForecastRequest

COMBINED = "combined"
POOLS = ("linear", "log")
DEFAULT_POOL = "linear"

# (member, request, raw probabilities) -> (calibrated probabilities, calibration id)
Calibrate = Callable[[prediction.Backend, ForecastRequest, Sequence[float]], tuple[list[float], str]]


def linear_pool(distributions: Sequence[Sequence[float]], weights: Sequence[float]) -> list[float]:
    total_weight = sum(weights)
    return [sum(w * p[k] for p, w in zip(distributions, weights)) / total_weight for k in range(NUM_BINS)]


def log_pool(distributions: Sequence[Sequence[float]], weights: Sequence[float]) -> list[float]:
    total_weight = sum(weights)
    logs = [sum(w * math.log(max(p[k], 1e-12)) for p, w in zip(distributions, weights)) / total_weight for k in range(NUM_BINS)]
    top = max(logs)
    unnormalised = [math.exp(value - top) for value in logs]
    total = sum(unnormalised)
    return [value / total for value in unnormalised]


def parse_weights(spec: str | Mapping[str, float] | None) -> dict[str, float]:
    """Weights from a mapping or from `"embedded=1,llama-cpp=2"` (a setting or a flag)."""
    if not spec:
        return {}
    pairs = spec.items() if isinstance(spec, Mapping) else (item.split("=", 1) for item in spec.split(",") if item.strip())
    weights: dict[str, float] = {}
    for name, value in pairs:
        weight = float(value)
        if not weight >= 0:
            raise ValueError(f"weight of {name!r} must be ≥ 0, got {value!r}")
        weights[str(name).strip()] = weight
    return weights


class CombinedBackend:
    name = COMBINED
    version = "1"

    def __init__(
        self,
        members: Mapping[str, prediction.Backend],
        calibrate: Calibrate,
        weights: Mapping[str, float] | None = None,
        pool: str = DEFAULT_POOL,
    ) -> None:
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {', '.join(POOLS)}, got {pool!r}")
        unknown = set(weights or {}) - set(members)
        if unknown:
            raise ValueError(f"weights given for backends not served: {', '.join(sorted(unknown))}")
        self.members = dict(members)
        self.weights = {name: (weights or {}).get(name, 1.0) for name in self.members}
        self.pool = pool
        self.model_id = "+".join(member.model_id for member in self.members.values())
        self._calibrate = calibrate

    def status(self) -> prediction.BackendStatus:
        parts = []
        for name, member in self.members.items():
            status = member.status()
            parts.append(f"{name} (w={self.weights[name]:g}) {'ok' if status.available else 'unavailable'}")
        available = any(member.status().available for member in self.members.values())
        return prediction.BackendStatus(available, f"{self.pool} pool of " + ", ".join(parts))

    def predict(self, request: ForecastRequest) -> prediction.RawPrediction:
        distributions: list[list[float]] = []
        used_weights: list[float] = []
        contributors: list[dict[str, Any]] = []
        failed: list[dict[str, str]] = []
        for name, member in self.members.items():
            if self.weights[name] == 0:
                continue
            started = time.perf_counter()
            try:
                raw = member.predict(request)
            except Exception as error:  # any member may fail; the others still answer
                failed.append({"backend": name, "error": f"{type(error).__name__}: {error}"})
                continue
            calibrated, calibration_id = self._calibrate(member, request, raw.probabilities)
            distributions.append(calibrated)
            used_weights.append(self.weights[name])
            contributors.append(
                {
                    "backend": name,
                    "model_id": member.model_id,
                    "backend_version": member.version,
                    "weight": self.weights[name],
                    "calibration_id": calibration_id,
                    "probabilities": [round(p, 5) for p in calibrated],
                    "elapsed_ms": round(1000 * (time.perf_counter() - started), 1),
                    "details": raw.details,
                }
            )
        if not distributions:
            reasons = "; ".join(f"{item['backend']}: {item['error']}" for item in failed)
            raise RuntimeError(f"no backend of the combination answered ({reasons})")
        pooled = (linear_pool if self.pool == "linear" else log_pool)(distributions, used_weights)
        return prediction.RawPrediction(probabilities=pooled, details={"pool": self.pool, "contributors": contributors, "failed": failed})
