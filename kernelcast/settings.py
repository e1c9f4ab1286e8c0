"""Every setting the server reads, typed in one place.

Settings arrive as `initializationOptions`, from `workspace/configuration`
(section `kernelcast`) and in `didChangeConfiguration`. A bad value is reported
once in readable words and replaced by its default; it never stops the server.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, fields, replace
from typing import Any

from kernelcast.wire import DEFAULT_CONFIDENCE_THRESHOLD, parse_tolerance

SECTION = "kernelcast"


@dataclass(frozen=True)
class Settings:
    enable: bool = True
    inlay_hints: bool = True
    diagnostics: bool = True
    hover: bool = True
    code_actions: bool = True
    compiler_facts: bool = True  # off: forecasts from code alone, no compiler child processes
    confidence_threshold: float = DEFAULT_CONFIDENCE_THRESHOLD
    exclude: tuple[str, ...] = ()
    forecaster_url: str = ""  # empty: start or join the local service
    forecaster_backend: str = "embedded"
    forecaster_timeout_ms: int = 10_000  # a forecast slower than this shows "forecaster unavailable"
    target_gpu: str = ""  # empty: the project's target_gpu, else the local GPU, else H100-SXM
    debounce_ms: int = 400
    measure_kernel_timeout_ms: int = 10_000  # one launch longer than this is a hang: worker killed
    measure_tolerance: str | float = "auto"  # parse_tolerance's words, or one atol = rtol for every float output
    allow_references_outside_workspace: bool = False
    cache_dir: str = ""

    def excludes(self, path: str) -> bool:
        return any(fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path.rsplit("/", 1)[-1], pattern) for pattern in self.exclude)


# Client-facing key (nested as VS Code nests dotted settings) → field name.
_KEYS: dict[str, str] = {
    "enable": "enable",
    "inlayHints.enable": "inlay_hints",
    "diagnostics.enable": "diagnostics",
    "hover.enable": "hover",
    "codeActions.enable": "code_actions",
    "compilerFacts.enable": "compiler_facts",
    "confidenceThreshold": "confidence_threshold",
    "exclude": "exclude",
    "forecaster.url": "forecaster_url",
    "forecaster.backend": "forecaster_backend",
    "forecaster.timeoutMs": "forecaster_timeout_ms",
    "targetGpu": "target_gpu",
    "debounceMs": "debounce_ms",
    "measure.kernelTimeoutMs": "measure_kernel_timeout_ms",
    "measure.tolerance": "measure_tolerance",
    "allowReferencesOutsideWorkspace": "allow_references_outside_workspace",
    "cacheDir": "cache_dir",
}


_MILLISECONDS = {"debounce_ms": (0, 60_000), "measure_kernel_timeout_ms": (100, 600_000), "forecaster_timeout_ms": (1_000, 600_000)}


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    if isinstance(value, dict):
        for key, inner in value.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(inner, dict):
                flat.update(_flatten(inner, name))
            else:
                flat[name] = inner
    return flat


def _coerce(name: str, value: Any, default: Any) -> Any:
    """The value in the field's type, or ValueError saying what was expected."""
    if name == "measure_tolerance":
        return parse_tolerance(value)
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise ValueError("expected true or false")
    if isinstance(default, int):
        low, high = _MILLISECONDS[name]
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return value
        raise ValueError(f"expected a whole number of milliseconds from {low} to {high}")
    if isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.5 <= value <= 1.0:
            return float(value)
        raise ValueError("expected a number from 0.5 to 1")
    if isinstance(default, tuple):
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return tuple(value)
        raise ValueError("expected a list of glob strings")
    if isinstance(value, str):
        return value
    raise ValueError("expected a string")


def parse_settings(raw: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Settings from a client object, plus readable problems for values that were ignored."""
    settings = base or Settings()
    if raw is None:
        return settings, []
    if not isinstance(raw, dict):
        return settings, [f"kernelcast settings must be an object, got {type(raw).__name__}; using defaults"]
    if SECTION in raw and isinstance(raw[SECTION], dict):
        raw = raw[SECTION]
    defaults = {f.name: f.default for f in fields(Settings)}
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in _flatten(raw).items():
        name = _KEYS.get(key)
        if name is None:
            continue  # unknown keys belong to the client (e.g. kernelcast.python)
        try:
            changes[name] = _coerce(name, value, defaults[name])
        except ValueError as error:
            problems.append(f"setting kernelcast.{key} = {value!r} ignored: {error}")
    return replace(settings, **changes), problems


@dataclass
class SettingsState:
    """The current settings and the problems reported for them."""

    current: Settings = field(default_factory=Settings)
    problems: list[str] = field(default_factory=list)
