"""What every forecaster backend is, and the registry the service picks from.

A backend turns a ForecastRequest into a *raw* distribution over the 8 bins; the
calibration layer (calibration.py) is applied afterwards by the service, the same
way for every backend, so backends never calibrate themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from kernelcast.forecast import ForecastRequest


@dataclass
class RawPrediction:
    probabilities: list[float]
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class BackendStatus:
    available: bool
    detail: str


class Backend(Protocol):
    name: str
    model_id: str
    version: str

    def status(self) -> BackendStatus: ...

    def predict(self, request: ForecastRequest) -> RawPrediction: ...


BackendFactory = Callable[[dict[str, Any]], Backend]
_FACTORIES: dict[str, BackendFactory] = {}


def register(name: str, factory: BackendFactory) -> None:
    """Make a backend constructible by name (`kernelcast serve --backend NAME`)."""
    _FACTORIES[name] = factory


def create(name: str, options: dict[str, Any] | None = None) -> Backend:
    _ensure_builtin_backends()
    if name not in _FACTORIES:
        raise KeyError(f"unknown forecaster backend {name!r}; known: {', '.join(sorted(_FACTORIES))}")
    return _FACTORIES[name](options or {})


def known_backends() -> list[str]:
    _ensure_builtin_backends()
    return sorted(_FACTORIES)


def _ensure_builtin_backends() -> None:
    # Imported here, not at module top, so the registry has no import cycle and heavy
    # backends register themselves without being imported until asked for.
    from kernelcast.models import embedded  # noqa: F401
