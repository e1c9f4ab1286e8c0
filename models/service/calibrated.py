"""Turns a request into a calibrated Forecast: backend → calibration → provenance.

Used by the HTTP service and, in-process, by `kernelcast forecast` (batch mode),
so both give the same numbers for the same pair. Also learns from the user's
measurements (`learn`, the service's /v1/learn) and forgets them (`forget_learning`,
`kernelcast reset-learning`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from kernelcast.models import prediction
from kernelcast.models.service import backends
from kernelcast.models.service.calibration import (
    CalibrationTable,
    _write_json,
    code_key,
    gpu_class,
    local_path,
    reset_local,
    update_local,
)
from kernelcast.models.service.combine import COMBINED, DEFAULT_POOL, CombinedBackend, parse_weights
from kernelcast.wire import Forecast, ForecastRequest

OBSERVATIONS_FILE = "local_observations.json"
# Local learning follows the user's recent kernels: older measurements drop out.
MAX_OBSERVATIONS = 500
# The local correction's id ends the calibration id ("…+local+0.450D1.200-n7", then
# "+ref-0.310-n2" where the pair's reference was measured); the n's are the numbers of the user's
# measurements behind each, which the hover shows.
_LOCAL_ID = re.compile(r"local[+-]\d+\.\d+(?:D\d+\.\d+)?-n(\d+)(?:\+ref[+-]\d+\.\d+-n(\d+))?$")


class Forecaster:
    def __init__(self, backend_names: list[str], calibration_path: Path | None = None, options: dict[str, Any] | None = None) -> None:
        """`options` go to every backend's factory (e.g. gguf, llm_url; see backends.describe_backends).

        With more than one backend, a "combined" backend pools them (combine.py) and
        becomes the default; each member stays reachable by its own name.
        """
        if not backend_names:
            raise ValueError("at least one backend is needed")
        options = options or {}
        members = [name for name in backend_names if name != COMBINED]
        self.backends: dict[str, prediction.Backend] = {name: backends.create(name, options) for name in members}
        self.default_backend = backend_names[0]
        self.calibration = CalibrationTable(calibration_path)
        if len(members) > 1:
            self.backends[COMBINED] = CombinedBackend(
                {name: self.backends[name] for name in members},
                self._calibrate,
                parse_weights(options.get("combine_weights")),
                options.get("combine_pool") or DEFAULT_POOL,
            )
            self.default_backend = COMBINED

    def _calibrate(self, backend: prediction.Backend, request: ForecastRequest, probabilities: Sequence[float]) -> tuple[list[float], str]:
        gpu = gpu_class(request.hardware.get("compute_capability"))
        return self.calibration.calibrate(backend.name, gpu, probabilities, code_key(request.reference.code))

    def _backend(self, request: ForecastRequest) -> prediction.Backend:
        name = request.backend or self.default_backend
        if name not in self.backends:
            raise KeyError(f"backend {name!r} is not served here; served: {', '.join(self.backends)}")
        return self.backends[name]

    def forecast(self, request: ForecastRequest) -> Forecast:
        return self.forecast_many([request])[0]

    def forecast_many(self, requests: Sequence[ForecastRequest]) -> list[Forecast]:
        """Each request's forecast, in order. Requests for a backend that batches are predicted
        in one call; each forecast's `elapsed_ms` is its share of that call."""
        by_backend: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            by_backend.setdefault(self._backend(request).name, []).append(index)
        forecasts: dict[int, Forecast] = {}
        for name, indices in by_backend.items():
            backend = self.backends[name]
            started = time.perf_counter()
            raws = prediction.predict_all(backend, [requests[i] for i in indices])
            elapsed_ms = round(1000 * (time.perf_counter() - started) / len(indices), 3)
            for index, raw in zip(indices, raws):
                forecasts[index] = self._calibrated(backend, requests[index], raw, elapsed_ms)
        return [forecasts[index] for index in range(len(requests))]

    def _calibrated(
        self, backend: prediction.Backend, request: ForecastRequest, raw: prediction.RawPrediction, elapsed_ms: float
    ) -> Forecast:
        probabilities, calibration_id = self._calibrate(backend, request, raw.probabilities)
        local = _LOCAL_ID.search(calibration_id)
        provenance = {
            "backend": backend.name,
            "model_id": backend.model_id,
            "backend_version": backend.version,
            "calibration_id": calibration_id,
            "local_learning": self.calibration.is_local(backend.name, gpu_class(request.hardware.get("compute_capability"))),
            "local_measurements": int(local.group(1)) if local else 0,
            "reference_measurements": int(local.group(2)) if local and local.group(2) else 0,
            "hardware": request.hardware.get("key") or request.hardware.get("name"),
            "hardware_fingerprint": request.hardware.get("fingerprint"),
            "facts_used": [side for side in ("reference", "candidate") if getattr(request, side).facts],
            "elapsed_ms": elapsed_ms,
            "details": raw.details,
        }
        if request.assumed:
            provenance["assumed"] = list(request.assumed)
        return Forecast.from_probabilities(probabilities, request.threshold, provenance)

    def learn(self, request: ForecastRequest, measured_speedup: float) -> dict[str, Any]:
        """Keep one pair measured on the user's GPU and refit that GPU class's local correction.

        The backend's *raw* distribution for the pair is stored with the measured S and a key
        of its reference (the last MAX_OBSERVATIONS per backend × GPU class, of the backend's
        current model: raw distributions of another model say nothing about this one's bias),
        and calibration.update_local refits from all of them. A pair measured again replaces its
        earlier measurement: the same pair twice is one pair, not two that missed alike. Returns
        the new correction's summary.
        """
        if isinstance(measured_speedup, bool) or not isinstance(measured_speedup, (int, float)):
            raise ValueError("measured_speedup must be a number")
        if not (math.isfinite(measured_speedup) and measured_speedup > 0):
            raise ValueError(f"measured_speedup must be positive and finite, got {measured_speedup!r}")
        backend = self._backend(request)
        gpu = gpu_class(request.hardware.get("compute_capability"))
        raw = backend.predict(request).probabilities
        model = f"{backend.model_id} v{backend.version}"
        key, local = f"{backend.name}/{gpu}", self.calibration.local
        with _learning_lock(local):
            store = _read_observations(local)
            pair = code_key(f"{request.reference.code}\0{request.candidate.code}")
            kept = [o for o in store.get(key, []) if o.get("model") == model and o.get("pair") != pair]
            kept.append(
                {
                    "probabilities": [float(p) for p in raw],
                    "speedup": float(measured_speedup),
                    "reference": code_key(request.reference.code),
                    "pair": pair,
                    "model": model,
                    "at": time.time(),
                }
            )
            store[key] = kept[-MAX_OBSERVATIONS:]
            _write_json(observations_path(local), store)
            # Measurements kept before references were keyed count as measured against one.
            observations = [(o["probabilities"], o["speedup"], o.get("reference", "")) for o in store[key]]
            correction = update_local(observations, backend.name, gpu, local)
            # A fresh table rather than its stat check: two updates within one clock tick can
            # leave the local file's (mtime, size) as they were, and the next forecast must use this one.
            self.calibration = CalibrationTable(self.calibration.path, local)
            version = self.calibration.version
        return {
            "backend": backend.name,
            "gpu_class": gpu,
            "n": correction.fitted_on,
            "bias_log2": correction.bias_log2,
            "direction_temperature": correction.direction_temperature,
            "calibration_version": version,
        }


def observations_path(local: Path | None = None) -> Path:
    """The user's measured pairs, next to the local-learning file they were fitted into."""
    return (local if local is not None else local_path()).with_name(OBSERVATIONS_FILE)


def _read_observations(local: Path) -> dict[str, list[dict[str, Any]]]:
    try:
        store = json.loads(observations_path(local).read_text())
    except (OSError, ValueError):
        return {}  # none yet; a broken one starts afresh rather than blocking learning for good
    return store if isinstance(store, dict) else {}


@contextlib.contextmanager
def _learning_lock(local: Path) -> Iterator[None]:
    """Learning (the service) and forgetting (the CLI) rewrite two files: one at a time, across processes."""
    local.parent.mkdir(parents=True, exist_ok=True)
    with open(local.with_name(".learning.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def forget_learning(local: Path | None = None) -> tuple[dict[str, int], list[Path]]:
    """Undo all local learning: the corrections and the measurements behind them.

    Returns the measurements forgotten per "backend/GPU class" and the files removed. A
    running service notices the missing local file at its next forecast (the calibration
    table checks the file's stat), so it needs no signal.
    """
    local = local if local is not None else local_path()
    removed: list[Path] = []
    with _learning_lock(local):
        counts = {key: len(kept) for key, kept in _read_observations(local).items()}
        if reset_local(local):
            removed.append(local)
        with contextlib.suppress(FileNotFoundError):
            observations_path(local).unlink()
            removed.append(observations_path(local))
    return counts, removed
