"""Labelled pairs: a forecast request plus the speedup that was measured for it.

One line of a pairs file (JSONL) is one `LabelledPair`. The corpus's pair builder writes
them, `kernelcast eval` reads them and training learns from them, so the format lives in
the core next to the bins, not in any one of those parts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from kernelcast.forecast import ForecastRequest, bin_of_speedup

# edit: same operation and family, the two sides differ in one variation axis.
# cross: same operation, unrelated implementations (other family or language).
# reference: the operation's PyTorch reference against a hand-written kernel.
PAIR_KINDS = ("edit", "cross", "reference")


@dataclass
class LabelledPair:
    """A forecast request whose answer is known: S = t_reference / t_candidate."""

    id: str
    kind: str
    request: ForecastRequest
    speedup: float
    op: str = ""
    # Pairs that share a group have the same reference and problem: the unit of
    # top-10% recovery (FORECAST.md).
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
        """The candidate's language: the split FORECAST.md reports by."""
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
    def from_json(cls, data: Any) -> "LabelledPair":
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


def read_pairs(path: Path) -> Iterator[LabelledPair]:
    """Pairs of a JSONL file; a bad line raises ValueError naming its line number."""
    with open(path, encoding="utf-8") as stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                yield LabelledPair.from_json(json.loads(line))
            except (ValueError, json.JSONDecodeError) as error:
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
