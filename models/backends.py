"""What every forecaster backend is, and the registry the service picks from.

A backend turns a ForecastRequest into a *raw* distribution over the 8 bins; the
calibration layer (calibration.py) is applied afterwards by the service, the same
way for every backend, so backends never calibrate themselves.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

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


def predicts_batches(backend: Backend) -> bool:
    """Whether `backend` also has `predict_many(requests) -> list[RawPrediction]`, many requests in
    one call and much faster than one by one (the embedded forecaster: one matrix product for a
    file's hundred kernels). An LLM has none: its requests go one at a time, each within its deadline."""
    return callable(getattr(backend, "predict_many", None))


def predict_all(backend: Backend, requests: Sequence[ForecastRequest]) -> list[RawPrediction]:
    """Raw forecasts of `requests`: in one call where the backend batches, else one at a time."""
    if predicts_batches(backend):
        return backend.predict_many(requests)  # type: ignore[attr-defined]
    return [backend.predict(request) for request in requests]


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

    # LLM backends: their modules import llama_cpp/transformers/torch only when built.
    for name, module in (("llama-cpp", "llm_llama_cpp"), ("transformers", "llm_transformers"), ("openai", "llm_openai")):
        if name not in _FACTORIES:
            register(name, _lazy_factory(module))


def _lazy_factory(module: str) -> BackendFactory:
    def factory(options: dict[str, Any]) -> Backend:
        return importlib.import_module(f"kernelcast.models.{module}").create(options)

    return factory


def describe_backends(options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every known backend, built with `options`, and whether it can forecast (for `kernelcast doctor`)."""
    described = []
    for name in known_backends():
        try:
            status = create(name, options).status()
            described.append({"name": name, "available": status.available, "detail": status.detail})
        except Exception as error:  # a backend that cannot be built is reported, not fatal
            described.append({"name": name, "available": False, "detail": f"{type(error).__name__}: {error}"})
    return described
