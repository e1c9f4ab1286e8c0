"""The one definition of bins, forecasts and their wording (docs/forecast.md).

Every part of kernelcast imports this module instead of restating a bin edge or a
hint format, so labels, prompts, metrics and UI cannot drift apart.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import math
import os
import secrets
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# Half-octave bins symmetric around S = 1, as edges in s = log2 S.
LOG2_EDGES: tuple[float, ...] = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)
NUM_BINS = 8
# Outer bins are open; for interpolation they are taken one octave wide.
_OUTER_WIDTH = 1.0
BIN_WORDS: tuple[str, ...] = (
    "≥4× slower",
    "2–4× slower",
    "1.4–2× slower",
    "up to 1.4× slower",
    "up to 1.4× faster",
    "1.4–2× faster",
    "2–4× faster",
    "≥4× faster",
)
DEFAULT_CONFIDENCE_THRESHOLD = 0.80
# |log2 S| below this reads "about the same".
SAME_SPEED_LOG2 = 0.07


def bin_of_speedup(speedup: float) -> int:
    """1-based bin of a speedup S = t_ref / t_cand (docs/forecast.md table)."""
    if not speedup > 0 or math.isinf(speedup):
        raise ValueError(f"speedup must be positive and finite, got {speedup!r}")
    s = math.log2(speedup)
    return 1 + sum(1 for edge in LOG2_EDGES if s >= edge)


def _bin_bounds(index: int) -> tuple[float, float]:
    """Log2 bounds of 0-based bin `index`, outer bins given a finite width."""
    lo = LOG2_EDGES[index - 1] if index > 0 else LOG2_EDGES[0] - _OUTER_WIDTH
    hi = LOG2_EDGES[index] if index < NUM_BINS - 1 else LOG2_EDGES[-1] + _OUTER_WIDTH
    return lo, hi


def normal_bin_probabilities(mean_log2: float, sd_log2: float) -> list[float]:
    """Probabilities of the 8 bins under s ~ Normal(mean, sd)."""
    sd = max(sd_log2, 1e-6)
    cdf = [0.5 * (1.0 + math.erf((edge - mean_log2) / (sd * math.sqrt(2.0)))) for edge in LOG2_EDGES]
    cuts = [0.0, *cdf, 1.0]
    probs = [max(cuts[i + 1] - cuts[i], 0.0) for i in range(NUM_BINS)]
    total = sum(probs)
    return [p / total for p in probs]


def with_direction_temperature(rows: np.ndarray, value: float) -> np.ndarray:
    """(N, 8) bin probabilities with the log-odds of P(S ≥ 1) divided by `value`; each side keeps
    its own shape. numpy is imported here, not at start-up: the language server starts without it."""
    import numpy as np

    half = NUM_BINS // 2
    faster = np.clip(rows[:, half:].sum(axis=1), 1e-9, 1.0 - 1e-9)
    tempered = 1.0 / (1.0 + np.exp(-np.log(faster / (1.0 - faster)) / value))
    scaled = rows * np.repeat(np.stack([(1.0 - tempered) / (1.0 - faster), tempered / faster], axis=1), half, axis=1)
    normalised: np.ndarray = scaled / scaled.sum(axis=1, keepdims=True)
    return normalised


def _quantile_log2(probabilities: Sequence[float], q: float) -> float:
    """Quantile of s from bin probabilities, linear within each bin in log space."""
    cumulative = 0.0
    for index, p in enumerate(probabilities):
        if p > 0 and cumulative + p >= q:
            lo, hi = _bin_bounds(index)
            return lo + (hi - lo) * (q - cumulative) / p
        cumulative += p
    return _bin_bounds(NUM_BINS - 1)[1]


@dataclass
class Forecast:
    """A calibrated predictive distribution over s = log2(t_ref / t_cand)."""

    probabilities: list[float]
    speedup: float
    interval: tuple[float, float]
    direction: str
    confidence: float
    defer: bool
    provenance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_probabilities(
        cls,
        probabilities: Sequence[float],
        threshold: float = DEFAULT_CONFIDENCE_THRESHOLD,
        provenance: dict[str, Any] | None = None,
    ) -> Forecast:
        probs = [max(float(p), 0.0) for p in probabilities]
        total = sum(probs)
        if len(probs) != NUM_BINS or total <= 0:
            raise ValueError(f"need {NUM_BINS} non-negative probabilities with a positive sum")
        if not math.isclose(total, 1.0, rel_tol=0.0, abs_tol=1e-12):
            # A distribution already is kept as given: scaling it again moves its last bits, and a
            # forecast at exactly even odds could change side.
            probs = [p / total for p in probs]
        p_faster = sum(probs[NUM_BINS // 2 :])
        direction = "faster" if p_faster >= 0.5 else "slower"
        confidence = p_faster if direction == "faster" else 1.0 - p_faster
        return cls(
            probabilities=probs,
            speedup=2.0 ** _quantile_log2(probs, 0.5),
            interval=(2.0 ** _quantile_log2(probs, 0.1), 2.0 ** _quantile_log2(probs, 0.9)),
            direction=direction,
            confidence=confidence,
            defer=confidence < threshold,
            provenance=dict(provenance or {}),
        )

    def with_threshold(self, threshold: float) -> Forecast:
        """The same forecast judged against another user threshold."""
        return Forecast(**{**asdict(self), "defer": self.confidence < threshold})

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["interval"] = list(self.interval)
        data["bin"] = 1 + max(range(NUM_BINS), key=lambda i: self.probabilities[i])
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Forecast:
        return cls(
            probabilities=[float(p) for p in data["probabilities"]],
            speedup=float(data["speedup"]),
            interval=(float(data["interval"][0]), float(data["interval"][1])),
            direction=str(data["direction"]),
            confidence=float(data["confidence"]),
            defer=bool(data["defer"]),
            provenance=dict(data.get("provenance") or {}),
        )

    # --- wording (docs/forecast.md "What a forecast holds") ---------------------------------

    def ratio_words(self) -> str:
        """`1.4× slower`, `2.0× faster` or `about the same`."""
        if abs(math.log2(self.speedup)) < SAME_SPEED_LOG2:
            return "about the same"
        if self.speedup >= 1:
            return f"{self.speedup:.1f}× faster"
        return f"{1.0 / self.speedup:.1f}× slower"

    def interval_words(self) -> str:
        lo, hi = self.interval
        return f"{_short_number(lo)}–{_short_number(hi)}×"

    def message(self) -> str:
        """One-line text for diagnostics: the docs/forecast.md sentence."""
        if self.defer:
            return f"uncertain: {self.interval_words()} · measure?"
        words = self.ratio_words()
        if words == "about the same":
            return f"about the same as reference (conf {self.confidence:.2f})"
        return f"likely {words} than reference (conf {self.confidence:.2f})"

    def inlay_label(self) -> str:
        """At most 30 characters, for the kernel's signature line."""
        if self.defer:
            return "⏱ uncertain · measure?"
        return f"⏱ {self.ratio_words()} · {round(100 * self.confidence)}%"


def _short_number(value: float) -> str:
    return f"{value:.2f}" if value < 1 else f"{value:.1f}"


@dataclass
class Measurement:
    """A real timing of candidate vs reference; replaces a forecast in the UI."""

    speedup: float
    ci95: tuple[float, float]
    gpu: str
    t_reference_ms: float
    t_candidate_ms: float
    details: dict[str, Any] = field(default_factory=dict)

    def relative_error_percent(self) -> float:
        lo, hi = self.ci95
        return 100.0 * max(hi / self.speedup - 1.0, 1.0 - lo / self.speedup)

    def message(self) -> str:
        words = f"{self.speedup:.2f}× faster" if self.speedup >= 1 else f"{1.0 / self.speedup:.2f}× slower"
        return f"measured {words} ±{self.relative_error_percent():.1f}% ({self.gpu})"

    def inlay_label(self) -> str:
        words = f"{self.speedup:.2f}× faster" if self.speedup >= 1 else f"{1.0 / self.speedup:.2f}× slower"
        return f"✓ {words} (measured)"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ci95"] = list(self.ci95)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        return cls(
            speedup=float(data["speedup"]),
            ci95=(float(data["ci95"][0]), float(data["ci95"][1])),
            gpu=str(data["gpu"]),
            t_reference_ms=float(data["t_reference_ms"]),
            t_candidate_ms=float(data["t_candidate_ms"]),
            details=dict(data.get("details") or {}),
        )


@dataclass
class KernelSide:
    """One side of a pair: the code a forecaster reads and what is known about it."""

    code: str
    language: str  # cuda | triton | pytorch
    name: str | None = None
    facts: dict[str, Any] | None = None  # compiler facts (kernels_runtime), when available

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelSide:
        if not isinstance(data, dict) or not isinstance(data.get("code"), str):
            raise ValueError("a kernel side needs a 'code' string")
        given = data.get("language", "cuda")
        language = LANGUAGE_ALIASES.get(given.lower(), given.lower()) if isinstance(given, str) else given
        if language not in LANGUAGES:
            raise ValueError(f"language must be one of {', '.join(LANGUAGES)}, got {given!r}")
        return cls(code=data["code"], language=language, name=data.get("name"), facts=data.get("facts"))


LANGUAGES = ("cuda", "triton", "pytorch")
LANGUAGE_ALIASES = {"python": "pytorch", "torch": "pytorch"}  # as people write them, in any case


@dataclass
class ForecastRequest:
    """What the server sends the forecaster (docs/forecast.md "What a forecaster is given")."""

    reference: KernelSide
    candidate: KernelSide
    hardware: dict[str, Any]
    problem: dict[str, Any] | None = None
    threshold: float = DEFAULT_CONFIDENCE_THRESHOLD
    backend: str | None = None
    # Inputs the editor guessed rather than read (ASSUMED_INPUTS): the forecast must cover what they could be.
    assumed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "reference": self.reference.to_json(),
            "candidate": self.candidate.to_json(),
            "hardware": self.hardware,
            "threshold": self.threshold,
        }
        if self.problem:
            data["problem"] = self.problem
        if self.backend:
            data["backend"] = self.backend
        if self.assumed:
            data["assumed"] = list(self.assumed)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ForecastRequest:
        if not isinstance(data, dict):
            raise ValueError("a forecast request is a JSON object")
        for key in ("reference", "candidate"):
            if key not in data:
                raise ValueError(f"a forecast request needs '{key}'")
        threshold = float(data.get("threshold", DEFAULT_CONFIDENCE_THRESHOLD))
        if not 0.5 <= threshold <= 1.0:
            raise ValueError("threshold must lie in [0.5, 1]")
        hardware = data.get("hardware") or {}
        if not isinstance(hardware, dict):
            raise ValueError("hardware must be an object (a spec); resolve GPU names before sending")
        return cls(
            reference=KernelSide.from_json(data["reference"]),
            candidate=KernelSide.from_json(data["candidate"]),
            hardware=hardware,
            problem=data.get("problem") or None,
            threshold=threshold,
            backend=data.get("backend"),
            assumed=_assumed_inputs(data.get("assumed") or []),
        )


# How a forecast's details name a side's CuTe or CUTLASS header among the code out of its sight.
TEMPLATES_OUT_OF_SIGHT = "CuTe/CUTLASS templates"


# What a request may say it assumed: a side's launch (from the other side's pragma when their
# parameters match, else read from the code alone), and problem sizes that nothing read gave;
# of a launch read from host code, its grid (computed from sizes only known at run time) or its
# config (block, shared memory, Triton options: one of several autotune configs, or computed); and
# how often a side's host loops go round.
ASSUMED_CANDIDATE_LAUNCH = "candidate launch"
ASSUMED_REFERENCE_LAUNCH = "reference launch"
ASSUMED_SIZES = "problem sizes"
ASSUMED_CANDIDATE_GRID = "candidate grid"
ASSUMED_REFERENCE_GRID = "reference grid"
ASSUMED_CANDIDATE_CONFIG = "candidate launch config"
ASSUMED_REFERENCE_CONFIG = "reference launch config"
# A host loop of a side's timed call whose bound the text does not fix (`range(x.shape[1])`).
ASSUMED_CANDIDATE_LOOPS = "candidate loop trips"
ASSUMED_REFERENCE_LOOPS = "reference loop trips"
ASSUMED_INPUTS = (
    ASSUMED_CANDIDATE_LAUNCH,
    ASSUMED_REFERENCE_LAUNCH,
    ASSUMED_SIZES,
    ASSUMED_CANDIDATE_GRID,
    ASSUMED_REFERENCE_GRID,
    ASSUMED_CANDIDATE_CONFIG,
    ASSUMED_REFERENCE_CONFIG,
    ASSUMED_CANDIDATE_LOOPS,
    ASSUMED_REFERENCE_LOOPS,
)


def _assumed_inputs(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or any(item not in ASSUMED_INPUTS for item in value):
        raise ValueError(f"assumed must be a list of {', '.join(repr(item) for item in ASSUMED_INPUTS)}, got {value!r}")
    return tuple(value)


# How close a candidate's outputs must be to the reference's: a setting of the editor and a
# flag of the CLI, applied by the GPU worker (kernels_runtime/timing.py).
TOLERANCE_RULES = ("auto", "strict", "kernelbench")


def parse_tolerance(value: Any) -> str | float:
    """How close measured outputs must be: auto (KernelBench's rule for KernelBench files, the strict
    per-dtype table for .cu and Triton kernels), strict, kernelbench, or a number in (0, 1] used
    as atol = rtol for every float output. ValueError in words otherwise."""
    if isinstance(value, str) and value.strip().lower() in TOLERANCE_RULES:
        return value.strip().lower()
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not 0.0 < number <= 1.0:
        raise ValueError(f"expected auto, strict, kernelbench or a number in (0, 1] (used as atol = rtol), got {value!r}")
    return number


# Labelled pairs: a forecast request plus the speedup that was measured for it. One line of a
# pairs file (JSONL) is one `LabelledPair`; the workshop writes them, `kernelcast eval` and
# training read them.

# edit: same operation and family, the two sides differ in one variation axis.
# cross: same operation, unrelated implementations (other family or language).
# reference: the operation's PyTorch reference against a hand-written kernel.
# llm-vs-cublas: an LLM-written CUDA GEMM (CUDA-L2) against torch.matmul, i.e. cuBLAS, at one shape.
# edit, cross, reference: the synthetic corpus and CUDA-L1; the rest: kernels others wrote (workshop/realworld).
# llm-vs-human: an LLM's kernel against the human-written kernel it was asked to replace (TritonBench G).
PAIR_KINDS = (
    "edit",
    "cross",
    "reference",
    "llm-vs-eager",
    "llm-vs-compile",
    "library-vs-eager",
    "library-vs-compile",
    "library-vs-naive",
    "llm-vs-human",
    "llm-vs-cublas",
    "variant",
    "inductor-vs-eager",
)


@dataclass
class LabelledPair:
    """A forecast request whose answer is known: S = t_reference / t_candidate."""

    id: str
    kind: str
    request: ForecastRequest
    speedup: float
    op: str = ""
    # Pairs that share a group have the same reference and problem: the unit of
    # top-10% recovery (docs/forecast.md).
    group: str = ""
    ci95: tuple[float, float] | None = None
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def log2_speedup(self) -> float:
        return math.log2(self.speedup)

    @property
    def true_bin(self) -> int:
        return bin_of_speedup(self.speedup)

    @property
    def language(self) -> str:
        """The candidate's language: the split docs/forecast.md reports by."""
        return self.request.candidate.language

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "op": self.op,
            "group": self.group,
            "speedup": self.speedup,
            "request": self.request.to_json(),
        }
        if self.ci95 is not None:
            data["ci95"] = list(self.ci95)
        if self.source:
            data["source"] = self.source
        if self.extra:
            data["extra"] = self.extra
        return data

    @classmethod
    def from_json(cls, data: Any) -> LabelledPair:
        """Validate one parsed line; ValueError says what is wrong with it."""
        if not isinstance(data, dict):
            raise ValueError("a pair is a JSON object")
        for key in ("id", "kind", "speedup", "request"):
            if key not in data:
                raise ValueError(f"a pair needs '{key}'")
        if data["kind"] not in PAIR_KINDS:
            raise ValueError(f"kind must be one of {', '.join(PAIR_KINDS)}, got {data['kind']!r}")
        speedup = data["speedup"]
        if isinstance(speedup, bool) or not isinstance(speedup, (int, float)) or not (0 < speedup < math.inf):
            raise ValueError(f"speedup must be a positive finite number, got {speedup!r}")
        ci95 = data.get("ci95")
        if ci95 is not None:
            if not (isinstance(ci95, list) and len(ci95) == 2 and all(isinstance(v, (int, float)) for v in ci95)):
                raise ValueError("ci95 must be [low, high]")
            ci95 = (float(ci95[0]), float(ci95[1]))
        extra = data.get("extra") or {}
        if not isinstance(extra, dict):
            raise ValueError("extra must be an object")
        return cls(
            id=str(data["id"]),
            kind=data["kind"],
            request=ForecastRequest.from_json(data["request"]),
            speedup=float(speedup),
            op=str(data.get("op", "")),
            group=str(data.get("group", "")),
            ci95=ci95,
            source=str(data.get("source", "")),
            extra=extra,
        )


def jsonl_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSONL file; a line that is not JSON raises
    ValueError naming its number."""
    with open(path, encoding="utf-8") as stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not JSON ({error.msg})") from None
            yield number, value


def read_forecast_rows(path: Path) -> dict[str, list[float]]:
    """{id: probabilities} of a file of {id, probabilities} lines: forecasts made elsewhere (held-out
    forecasts of a training run, an eval's predictions.jsonl) to judge or search with; a line that is
    not one raises ValueError naming its number."""
    found: dict[str, list[float]] = {}
    for number, row in jsonl_records(path):
        try:
            probabilities = [float(p) for p in row["probabilities"]]
            found[str(row["id"])] = probabilities
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}:{number}: not an {{id, probabilities}} line ({error})") from None
        if len(probabilities) != NUM_BINS:
            raise ValueError(f"{path}:{number}: {len(probabilities)} probabilities, not one per bin ({NUM_BINS})")
        if not all(math.isfinite(p) and p >= 0 for p in probabilities):
            raise ValueError(f"{path}:{number}: probabilities must be finite and non-negative")
    return found


def read_pairs(path: Path) -> Iterator[LabelledPair]:
    """Pairs of a JSONL file; a bad line raises ValueError naming its line number."""
    for number, value in jsonl_records(path):
        try:
            yield LabelledPair.from_json(value)
        except ValueError as error:
            raise ValueError(f"{path}:{number}: {error}") from None


def write_pairs(path: Path, pairs: Iterable[LabelledPair]) -> int:
    """Writes JSONL, creating the folder as `--out` users expect; returns how many pairs were written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(path, "w", encoding="utf-8") as stream:
        for pair in pairs:
            stream.write(json.dumps(pair.to_json(), ensure_ascii=False) + "\n")
            count += 1
    return count


# How a client finds and talks to the running forecaster service: its state file (url, pid,
# version, build) and the per-user token it wants in the Authorization header, in the state folder
# (paths.state_home). The LSP reads them without loading the service.
TOKEN_FILE = "token"
STATE_FILE = "service.json"
TOKEN_HEADER = "authorization"


# The packages whose code a service runs (pyproject maps them under kernelcast.*).
_SERVICE_PACKAGES = ("kernelcast", "kernelcast.server", "kernelcast.kernels_runtime", "kernelcast.models")


@functools.cache
def code_build() -> str:
    """Which code this process runs: the version, where it is installed and when each of its
    files last changed. A client joins only a service of its own build, so after an upgrade,
    another install or an edit of an editable one, forecasts never come from the old code."""
    from kernelcast import __version__

    digest = hashlib.sha256(__version__.encode())
    for package in _SERVICE_PACKAGES:
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            digest.update(str(folder).encode())
            for file in sorted(Path(folder).rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts:
                    digest.update(f"{file.relative_to(folder)}:{file.stat().st_mtime_ns}".encode())
    return f"{__version__}+{digest.hexdigest()[:12]}"


def read_or_create_token(state_dir: Path) -> str:
    """The per-user secret; created once with 0600 so only its owner can read it."""
    path = state_dir / TOKEN_FILE
    try:
        token = path.read_text().strip()
        if token:
            return token
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token)
    return token


def read_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((state_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and "url" in state else None


def write_state(state_dir: Path, state: dict[str, Any]) -> None:
    temporary = state_dir / f".{STATE_FILE}.{os.getpid()}"
    temporary.write_text(json.dumps(state))
    os.replace(temporary, state_dir / STATE_FILE)
