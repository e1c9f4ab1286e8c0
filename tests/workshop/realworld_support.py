"""What the real-world corpus' tests share: a measurement as the GPU host's runner writes it."""

from __future__ import annotations

from typing import Any


def measured(entry_id: str, speedup: float, t_candidate_ms: float = 0.1, gpu: str = "H200") -> dict[str, Any]:
    """A result line as the runner writes it for a measurement."""
    return {
        "id": entry_id,
        "gpu": gpu,
        "seconds": 2.0,
        "speedup": speedup,
        "ci95": [speedup * 0.98, speedup * 1.02],
        "t_reference_ms": speedup * t_candidate_ms,
        "t_candidate_ms": t_candidate_ms,
        "details": {
            "round_ratios": [speedup] * 5,
            "tolerance": {"rule": "kernelbench", "atol_rtol": {"f32": 0.01}},
            "correctness": {"out": {"max_abs_err": 1e-6}},
            "versions": {"torch": "2.11.0"},
            "driver": "580",
        },
    }
