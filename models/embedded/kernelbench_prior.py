"""How far the embedded forecast can be trusted on KernelBench solutions, learnt from kernels
that others wrote and we measured.

The weights learnt from generated kernels and from CUDA-L1's winning rewrites. Solutions that
LLMs write (a `ModelNew` with load_inline CUDA or Triton kernels) mostly lose to eager PyTorch,
which calls cuBLAS and cuDNN: measured on the real-world corpus, two in three are slower, while
the weights call five in six faster. Three kinds of pair are read through lines fitted on
measured real-world pairs, mean' = intercept + slope·mean. Around the line, the forecast takes the
shape of the line's misses on sources left out of its fit (heavy-tailed: most pairs land near the
line, a few octaves away), widened where the model's own spread is wider (novelty still widens it):
- a solution against its problem (eager `Model`, or the problem under torch.compile);
- two solutions of one problem against each other. Their order is arbitrary, so that line runs
  through the origin; the weights rank such pairs no better than chance, and the line's wide
  spread makes the forecast say so (it defers) instead of naming a side with confidence. A
  solution against itself with a line or two edited (a launch's block size) is not such a pair;
- a `ModelNew(Model)` that calls a library's kernel (FlagGems, Liger, ...) against the problem.
  The kernel that runs is out of sight and libraries disagree (a line fitted on some did worse
  on the others than none), so the mean stays the weights' and only the spread is learnt: how
  far the weights missed on libraries left out, as wide on either side.
All are judged with each source held out in turn (workshop/training/kernelbench_prior.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelcast.wire import ForecastRequest, KernelSide, normal_bin_probabilities

PRIOR_PATH = Path(__file__).parents[1] / "weights" / "kernelbench_prior.json"
_MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.M)
_MODEL = re.compile(r"^class\s+Model\b", re.M)
_WRAPPER = re.compile(r"^class\s+ModelNew\s*\(\s*Model\s*\)", re.M)
_OWN_KERNELS = ("cuda", "triton")
AGAINST_PROBLEM = "solution-vs-problem"
BETWEEN_SOLUTIONS = "solution-vs-solution"
LIBRARY_CALL = "library-vs-problem"
# Pairs whose solutions are read without the launches their ModelNew makes, as those lines were fitted.
SOLUTION_KINDS = (AGAINST_PROBLEM, BETWEEN_SOLUTIONS)
EDITED_LINES = 2


@dataclass(frozen=True)
class Line:
    intercept: float
    slope: float
    sd: float  # octaves: the spread of measured log2 S around the line
    misses: tuple[float, ...] = ()  # quantiles of measured − line on sources left out of the fit, octaves
    bandwidth: float = 0.0  # octaves: how far each quantile is smoothed

    def adjust(self, mean: float, sd: float) -> tuple[float, float]:
        return self.intercept + self.slope * mean, max(self.sd, sd)

    def bin_probabilities(self, mean: float, sd: float) -> list[float]:
        """The 8 bins around the line: its misses, each smoothed by the bandwidth, stretched by how
        much wider the model's own spread is; a normal of the line's spread where it has none."""
        centre, spread = self.adjust(mean, sd)
        if not self.misses:
            return normal_bin_probabilities(centre, spread)
        stretch = spread / self.sd if self.sd > 0 else 1.0
        each = [normal_bin_probabilities(centre + stretch * miss, stretch * self.bandwidth) for miss in self.misses]
        return [sum(column) / len(each) for column in zip(*each)]

    def to_json(self) -> dict[str, Any]:
        shape = {"misses": list(self.misses), "bandwidth": self.bandwidth} if self.misses else {}
        return {"intercept": self.intercept, "slope": self.slope, "sd": self.sd, **shape}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Line:
        misses = tuple(float(miss) for miss in data.get("misses", ()))
        return cls(float(data["intercept"]), float(data["slope"]), float(data["sd"]), misses, float(data.get("bandwidth", 0.0)))


def _solution(side: KernelSide) -> bool:
    """A rewrite with kernels of its own. A `ModelNew(Model)` wraps the problem's own model instead
    (a library's kernel or torch.compile called on it): the lines were not fitted on those."""
    return side.language in _OWN_KERNELS and bool(_MODEL_NEW.search(side.code)) and not _WRAPPER.search(side.code)


def _an_edit(reference: str, candidate: str) -> bool:
    """One solution with a line or two changed (a block size, `num_warps`): not two solutions. The
    weights read such an edit from the launch; the line was fitted on solutions written apart."""
    before, after = reference.splitlines(), candidate.splitlines()
    return len(before) == len(after) and sum(old != new for old, new in zip(before, after)) <= EDITED_LINES


@dataclass(frozen=True)
class KernelBenchPrior:
    lines: dict[str, Line]  # by the kind of pair it reads: AGAINST_PROBLEM, BETWEEN_SOLUTIONS
    meta: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def reads(request: ForecastRequest) -> str | None:
        """Which line a pair is read through, or None: a solution with its own kernels against the
        PyTorch problem it solves, or two such solutions against each other; a `ModelNew(Model)`
        that calls a library's kernel on the problem's inputs, against the problem."""
        reference, candidate = request.reference, request.candidate
        against_problem = reference.language == "pytorch" and bool(_MODEL.search(reference.code))
        if _solution(candidate):
            if against_problem:
                return AGAINST_PROBLEM
            return BETWEEN_SOLUTIONS if _solution(reference) and not _an_edit(reference.code, candidate.code) else None
        if against_problem and candidate.language in _OWN_KERNELS and _WRAPPER.search(candidate.code):
            return LIBRARY_CALL
        return None

    def applies(self, request: ForecastRequest) -> str | None:
        """The kind of pair, where this prior has a line for it."""
        kind = self.reads(request)
        return kind if kind in self.lines else None

    def adjust(self, kind: str, mean: float, sd: float) -> tuple[float, float]:
        return self.lines[kind].adjust(mean, sd)

    def bin_probabilities(self, kind: str, mean: float, sd: float) -> list[float]:
        return self.lines[kind].bin_probabilities(mean, sd)

    def to_json(self) -> dict[str, Any]:
        return {"lines": {kind: line.to_json() for kind, line in sorted(self.lines.items())}, "meta": self.meta}

    @classmethod
    def load(cls, path: Path = PRIOR_PATH) -> KernelBenchPrior | None:
        """The shipped lines, or None where there are none (the forecast is then the weights' alone)."""
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        lines = {kind: Line.from_json(line) for kind, line in data["lines"].items()}
        return cls(lines, data.get("meta", {}))
