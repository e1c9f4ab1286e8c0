"""One calibration layer for every backend (FORECAST.md): temperature per backend × GPU class.

A backend's raw bin probabilities are sharpened or flattened by a temperature fitted
on held-out measured pairs. Until a fit exists for a (backend, GPU class), the
identity is used and the calibration id says so, so cached forecasts made under
different calibrations never mix.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

IDENTITY_ID = "identity"


def gpu_class(compute_capability: Sequence[int] | None) -> str:
    """Calibrations are shared by GPUs of one architecture generation."""
    if not compute_capability:
        return "unknown"
    return f"sm{compute_capability[0]}x"


@dataclass(frozen=True)
class Temperature:
    value: float
    fitted_on: int  # number of measured pairs behind it

    def apply(self, probabilities: Sequence[float]) -> list[float]:
        logs = [math.log(max(p, 1e-12)) / self.value for p in probabilities]
        top = max(logs)
        weights = [math.exp(v - top) for v in logs]
        total = sum(weights)
        return [w / total for w in weights]


class CalibrationTable:
    """Temperatures by (backend, GPU class), read from a JSON file that fitting writes."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._temperatures: dict[str, Temperature] = {}
        self.version = IDENTITY_ID
        if path is not None and path.exists():
            text = path.read_text()
            self.version = hashlib.sha256(text.encode()).hexdigest()[:12]
            data = json.loads(text)
            self._temperatures = {
                key: Temperature(float(v["temperature"]), int(v.get("fitted_on", 0))) for key, v in data.items()
            }

    @staticmethod
    def _key(backend: str, gpu: str) -> str:
        return f"{backend}/{gpu}"

    def calibrate(self, backend: str, gpu: str, probabilities: Sequence[float]) -> tuple[list[float], str]:
        """Calibrated probabilities and the id of the calibration used."""
        temperature = self._temperatures.get(self._key(backend, gpu))
        if temperature is None:
            total = sum(probabilities)
            return [p / total for p in probabilities], IDENTITY_ID
        return temperature.apply(probabilities), f"T{temperature.value:.3f}-n{temperature.fitted_on}"
