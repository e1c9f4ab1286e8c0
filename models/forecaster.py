"""Turns a request into a calibrated Forecast: backend → calibration → provenance.

Used by the HTTP service and, in-process, by `kernelcast forecast` (batch mode),
so both give the same numbers for the same pair.
"""

from __future__ import annotations

import time
from pathlib import Path

from kernelcast.forecast import Forecast, ForecastRequest
from kernelcast.models import backends
from kernelcast.models.calibration import CalibrationTable, gpu_class


class Forecaster:
    def __init__(self, backend_names: list[str], calibration_path: Path | None = None) -> None:
        if not backend_names:
            raise ValueError("at least one backend is needed")
        self.backends = {name: backends.create(name) for name in backend_names}
        self.default_backend = backend_names[0]
        self.calibration = CalibrationTable(calibration_path)

    def forecast(self, request: ForecastRequest) -> Forecast:
        name = request.backend or self.default_backend
        if name not in self.backends:
            raise KeyError(f"backend {name!r} is not served here; served: {', '.join(self.backends)}")
        backend = self.backends[name]
        started = time.perf_counter()
        raw = backend.predict(request)
        gpu = gpu_class(request.hardware.get("compute_capability"))
        probabilities, calibration_id = self.calibration.calibrate(backend.name, gpu, raw.probabilities)
        provenance = {
            "backend": backend.name,
            "model_id": backend.model_id,
            "backend_version": backend.version,
            "calibration_id": calibration_id,
            "hardware": request.hardware.get("key") or request.hardware.get("name"),
            "hardware_fingerprint": request.hardware.get("fingerprint"),
            "facts_used": [side for side in ("reference", "candidate") if getattr(request, side).facts],
            "elapsed_ms": round(1000 * (time.perf_counter() - started), 3),
            "details": raw.details,
        }
        return Forecast.from_probabilities(probabilities, request.threshold, provenance)
