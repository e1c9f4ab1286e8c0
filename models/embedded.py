"""The embedded forecaster: a physics-shaped prior that needs no download and no GPU.

It models each side's own time as a product of cost factors read from the code and
compiler facts (FORECAST.md "A direction that should generalize"), so swapping the
sides flips the forecast. Each factor is a rough, public rule of thumb, so every
factor that differs between the sides also widens the predictive spread: the model
is only confident when the two kernels differ in a few well-understood ways, and it
defers to measurement otherwise. It is replaced by the learned model (issue 5)
behind the same Backend interface.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kernelcast.forecast import ForecastRequest, KernelSide, normal_bin_probabilities
from kernelcast.models import backends
from kernelcast.models.code_features import CodeFeatures, extract

# Spread of log2 S that remains even when the sides differ in nothing we can read:
# kernels that look alike still differ by ~30% on a GPU (layout, compiler choices).
BASE_SPREAD = 0.45
# Each differing factor adds this share of its own size to the spread (in quadrature).
FACTOR_SPREAD_SHARE = 0.8
# Fixed cost of one launch relative to a kernel's work when problem sizes are unknown.
LAUNCH_SHARE_UNKNOWN_SIZE = 0.15
LAUNCH_OVERHEAD_US = 4.0


@dataclass(frozen=True)
class Factor:
    name: str
    log2_time: float  # contribution to log2 of this side's time
    why: str


def _code_factors(features: CodeFeatures) -> list[Factor]:
    factors: list[Factor] = []
    if features.library_matmul:
        factors.append(Factor("library matmul/conv", -1.0, "cuBLAS/cuDNN run near peak"))
    elif features.tensor_cores:
        factors.append(Factor("tensor cores", -1.0, "mma units do matrix work several times faster"))
    if features.shared_memory and features.loops:
        factors.append(Factor("shared-memory tiling", -0.6, "re-used data served from on-chip memory"))
    if features.vector_loads:
        factors.append(Factor("vector loads", -0.2, "fewer, wider memory transactions"))
    if features.strided_index:
        factors.append(Factor("strided index", 0.6, "uncoalesced global accesses waste bandwidth"))
    if features.atomics:
        factors.append(Factor("atomics", 0.3, "serialised updates on contended addresses"))
    if features.warp_shuffles:
        factors.append(Factor("warp shuffles", -0.15, "register-level reductions avoid shared memory"))
    if features.half_precision:
        factors.append(Factor("half precision", -0.3, "half the bytes per element"))
    if features.unrolled:
        factors.append(Factor("unrolled loops", -0.1, "more independent memory requests in flight"))
    return factors


def _fact_factors(facts: dict[str, Any] | None) -> list[Factor]:
    factors: list[Factor] = []
    if not facts:
        return factors
    spills = (facts.get("spill_store_bytes") or 0) + (facts.get("spill_load_bytes") or 0)
    if spills:
        factors.append(Factor("register spills", min(1.0, 0.2 + spills / 2048), "spilled registers go through local memory"))
    occupancy = facts.get("occupancy") or {}
    fraction = occupancy.get("fraction") if isinstance(occupancy, dict) else None
    if isinstance(fraction, (int, float)) and fraction < 0.25:
        factors.append(Factor("low occupancy", 0.4, "too few warps to hide memory latency"))
    return factors


def _side_factors(side: KernelSide) -> tuple[list[Factor], CodeFeatures]:
    features = extract(side.code, side.language)
    facts = side.facts if isinstance(side.facts, dict) else None
    return _code_factors(features) + _fact_factors(facts), features


def _launch_log2_time(features: CodeFeatures, problem: dict[str, Any] | None) -> float:
    """Launch overhead as a share of the side's time: large for small problems."""
    elements = _problem_elements(problem)
    if elements is None:
        share = LAUNCH_SHARE_UNKNOWN_SIZE
    else:
        # ~3 TB/s moves a few hundred bytes per element in a handful of microseconds at 1e6.
        work_us = max(elements * 8 / 3.0e6, 1.0)
        share = LAUNCH_OVERHEAD_US / work_us
    return math.log2(1.0 + share * (features.launches - 1))


def _problem_elements(problem: dict[str, Any] | None) -> float | None:
    if not problem:
        return None
    sizes = [float(v) for v in problem.values() if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
    if not sizes:
        return None
    return max(sizes)


class EmbeddedBackend:
    name = "embedded"
    model_id = "prior-factors"
    version = "1"

    def status(self) -> backends.BackendStatus:
        return backends.BackendStatus(True, "built in: no download, no GPU")

    def predict(self, request: ForecastRequest) -> backends.RawPrediction:
        ref_factors, ref_features = _side_factors(request.reference)
        cand_factors, cand_features = _side_factors(request.candidate)
        ref_time = sum(f.log2_time for f in ref_factors) + _launch_log2_time(ref_features, request.problem)
        cand_time = sum(f.log2_time for f in cand_factors) + _launch_log2_time(cand_features, request.problem)
        mean = ref_time - cand_time

        ref_by_name = {f.name: f.log2_time for f in ref_factors}
        cand_by_name = {f.name: f.log2_time for f in cand_factors}
        differing = {
            name: cand_by_name.get(name, 0.0) - ref_by_name.get(name, 0.0)
            for name in set(ref_by_name) | set(cand_by_name)
            if abs(cand_by_name.get(name, 0.0) - ref_by_name.get(name, 0.0)) > 1e-9
        }
        launches_differ = ref_features.launches != cand_features.launches
        spread = math.sqrt(
            BASE_SPREAD**2
            + sum((FACTOR_SPREAD_SHARE * delta) ** 2 for delta in differing.values())
            + (0.3 if launches_differ else 0.0) ** 2
            + (0.35 if request.reference.language != request.candidate.language else 0.0) ** 2
        )
        return backends.RawPrediction(
            probabilities=normal_bin_probabilities(mean, spread),
            details={
                "mean_log2": round(mean, 4),
                "spread_log2": round(spread, 4),
                "differing_factors": sorted(differing),
                "reference_factors": [f.name for f in ref_factors],
                "candidate_factors": [f.name for f in cand_factors],
            },
        )


backends.register("embedded", lambda options: EmbeddedBackend())
