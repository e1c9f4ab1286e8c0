"""Turns a request into a calibrated Forecast: backend → calibration → provenance.

Used by the HTTP service and, in-process, by `kernelcast forecast` (batch mode),
so both give the same numbers for the same pair.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from kernelcast.forecast import Forecast, ForecastRequest
from kernelcast.models import backends
from kernelcast.models.calibration import CalibrationTable, gpu_class
from kernelcast.models.combine import COMBINED, DEFAULT_POOL, CombinedBackend, parse_weights


class Forecaster:
    def __init__(
        self, backend_names: list[str], calibration_path: Path | None = None, options: dict[str, Any] | None = None
    ) -> None:
        """`options` go to every backend's factory (e.g. gguf, llm_url; see backends.describe_backends).

        With more than one backend, a "combined" backend pools them (combine.py) and
        becomes the default; each member stays reachable by its own name.
        """
        if not backend_names:
            raise ValueError("at least one backend is needed")
        options = options or {}
        members = [name for name in backend_names if name != COMBINED]
        self.backends: dict[str, backends.Backend] = {name: backends.create(name, options) for name in members}
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

    def _calibrate(
        self, backend: backends.Backend, request: ForecastRequest, probabilities: Sequence[float]
    ) -> tuple[list[float], str]:
        gpu = gpu_class(request.hardware.get("compute_capability"))
        return self.calibration.calibrate(backend.name, gpu, probabilities)

    def forecast(self, request: ForecastRequest) -> Forecast:
        name = request.backend or self.default_backend
        if name not in self.backends:
            raise KeyError(f"backend {name!r} is not served here; served: {', '.join(self.backends)}")
        backend = self.backends[name]
        started = time.perf_counter()
        raw = backend.predict(request)
        probabilities, calibration_id = self._calibrate(backend, request, raw.probabilities)
        provenance = {
            "backend": backend.name,
            "model_id": backend.model_id,
            "backend_version": backend.version,
            "calibration_id": calibration_id,
            "local_learning": self.calibration.is_local(backend.name, gpu_class(request.hardware.get("compute_capability"))),
            "hardware": request.hardware.get("key") or request.hardware.get("name"),
            "hardware_fingerprint": request.hardware.get("fingerprint"),
            "facts_used": [side for side in ("reference", "candidate") if getattr(request, side).facts],
            "elapsed_ms": round(1000 * (time.perf_counter() - started), 3),
            "details": raw.details,
        }
        return Forecast.from_probabilities(probabilities, request.threshold, provenance)
