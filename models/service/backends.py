"""The registry the service builds forecaster backends from, by name."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from kernelcast.models.prediction import Backend

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


# The built-in backends by module: each module's `create(options)` builds one. A module is
# imported only when its backend is built, so the registry imports no backend (no cycle) and
# the LLM modules load llama_cpp/transformers/torch only when asked for.
BUILTIN_BACKENDS = {
    "embedded": "kernelcast.models.embedded.backend",
    "llama-cpp": "kernelcast.models.service.llm_llama_cpp",
    "transformers": "kernelcast.models.service.llm_transformers",
    "openai": "kernelcast.models.service.llm_openai",
}


def _ensure_builtin_backends() -> None:
    for name, module in BUILTIN_BACKENDS.items():
        if name not in _FACTORIES:
            register(name, _lazy_factory(module))


def _lazy_factory(module: str) -> BackendFactory:
    def factory(options: dict[str, Any]) -> Backend:
        return importlib.import_module(module).create(options)

    return factory


def describe_backends(options: dict[str, Any] | None = None, names: list[str] | None = None) -> list[dict[str, Any]]:
    """The backends `names` (default: every known one), built with `options`, and whether each can forecast (for `kernelcast doctor`)."""
    described = []
    for name in names or known_backends():
        try:
            status = create(name, options).status()
            described.append({"name": name, "available": status.available, "detail": status.detail})
        except Exception as error:  # a backend that cannot be built is reported, not fatal
            described.append({"name": name, "available": False, "detail": f"{type(error).__name__}: {error}"})
    return described
