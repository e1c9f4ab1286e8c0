"""How far the embedded forecast can be trusted on a KernelBench solution against its problem's
eager `Model`, learnt from kernels that others wrote and we measured.

The weights learnt from generated kernels and from CUDA-L1's winning rewrites. Solutions that
LLMs write (a `ModelNew` with load_inline CUDA or Triton kernels) mostly lose to eager PyTorch,
which calls cuBLAS and cuDNN: measured on the real-world corpus, two in three are slower, while
the weights call five in six faster. On such pairs the forecast's mean is read through a line
fitted on measured real-world pairs, mean' = intercept + slope·mean, and its spread is the
fit's residual spread (never narrower than the model's own, so novelty still widens it). The
line is judged with each source held out in turn (workshop/training/kernelbench_prior.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelcast.wire import ForecastRequest

PRIOR_PATH = Path(__file__).parents[1] / "weights" / "kernelbench_prior.json"
_MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.M)
_MODEL = re.compile(r"^class\s+Model\b", re.M)
_OWN_KERNELS = ("cuda", "triton")


@dataclass(frozen=True)
class KernelBenchPrior:
    intercept: float
    slope: float
    sd: float  # octaves: the spread of measured log2 S around the line
    meta: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def applies(request: ForecastRequest) -> bool:
        """A solution with its own kernels against the PyTorch problem it solves."""
        reference, candidate = request.reference, request.candidate
        return (
            reference.language == "pytorch"
            and bool(_MODEL.search(reference.code))
            and candidate.language in _OWN_KERNELS
            and bool(_MODEL_NEW.search(candidate.code))
        )

    def adjust(self, mean: float, sd: float) -> tuple[float, float]:
        return self.intercept + self.slope * mean, max(self.sd, sd)

    def to_json(self) -> dict[str, Any]:
        return {"intercept": self.intercept, "slope": self.slope, "sd": self.sd, "meta": self.meta}

    @classmethod
    def load(cls, path: Path = PRIOR_PATH) -> KernelBenchPrior | None:
        """The shipped line, or None where there is none (the forecast is then the weights' alone)."""
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return cls(float(data["intercept"]), float(data["slope"]), float(data["sd"]), data.get("meta", {}))
