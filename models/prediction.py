"""What a forecaster backend is: the Backend protocol and what it returns.

A backend turns a ForecastRequest into a *raw* distribution over the 8 bins; the service's
calibration layer (service/calibration.py) is applied afterwards, the same way for every
backend, so backends never calibrate themselves. The embedded model and the service's LLM
backends implement it; the service's registry (service/backends.py) builds them by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

from kernelcast.wire import ForecastRequest


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


class BatchBackend(Backend, Protocol):
    """A backend that also forecasts many requests in one call."""

    def predict_many(self, requests: Sequence[ForecastRequest]) -> list[RawPrediction]: ...


def predicts_batches(backend: Backend) -> TypeGuard[BatchBackend]:
    """Whether `backend` also has `predict_many(requests) -> list[RawPrediction]`, many requests in
    one call and much faster than one by one (the embedded forecaster: one matrix product for a
    file's hundred kernels). An LLM has none: its requests go one at a time, each within its deadline."""
    return callable(getattr(backend, "predict_many", None))


def predict_all(backend: Backend, requests: Sequence[ForecastRequest]) -> list[RawPrediction]:
    """Raw forecasts of `requests`: in one call where the backend batches, else one at a time."""
    if predicts_batches(backend):
        return backend.predict_many(requests)
    return [backend.predict(request) for request in requests]
