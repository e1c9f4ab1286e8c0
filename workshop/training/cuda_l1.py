"""CUDA-L1's measured rewrites as LabelledPairs, built at training time from ../shared/data.

Nothing of CUDA-L1 is committed: this module only reads its JSONL files and turns each
KernelBench problem into pairs against its PyTorch reference. Its rewrites were kept only
when they won (score ≥ 1), so every pair is also emitted swapped, and the CUDA-graph and
cuDNN baselines (which often lose) are added as candidates too: without them a model
could learn "the rewritten side wins" (shared/data/README.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelcast.kernels_runtime.hardware import SPECS, GpuSpec, lookup
from kernelcast.kernels_runtime.source.launch_spec import kernelbench_problem
from kernelcast.wire import ForecastRequest, KernelSide, LabelledPair

DEFAULT_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "cuda-l1"
GPUS = ("h100", "a100", "l40", "h20", "3090")

# GPUs CUDA-L1 measured that kernelcast's table lacks; dense datasheet peaks (TFLOP/s, GB/s).
_EXTRA_SPECS = {
    "l40": GpuSpec("L40", "NVIDIA L40", (8, 9), 142, 864, 90.5, 90.5, 181, 362, 96, 1536, 24, 100, 99),
    "h20": replace(
        SPECS["H100-SXM"],
        key="H20",
        name="NVIDIA H20",
        sm_count=78,
        peak_bandwidth_gbs=4000,
        fp32_tflops=44,
        tf32_tflops=74,
        bf16_tflops=148,
        fp8_tflops=296,
        l2_mb=60,
    ),
    "3090": GpuSpec("RTX3090", "NVIDIA GeForce RTX 3090", (8, 6), 82, 936, 35.6, 35.6, 71, None, 6, 1536, 16, 100, 99),
}
# (code field, score field, name): the variants of a problem measured against its reference.
_VARIANTS = (
    ("custom_code", "score_default", "custom"),
    ("cuda_graph_code", "score_cuda_graph", "cuda-graph"),
    ("cudnn_code", "score_cudnn", "cudnn"),
)


def gpu_spec(gpu: str) -> GpuSpec:
    """The spec of a CUDA-L1 GPU name: kernelcast's table where it has it, else the datasheet row above."""
    return _EXTRA_SPECS[gpu] if gpu in _EXTRA_SPECS else lookup(gpu)


def hardware_json(spec: GpuSpec) -> dict[str, Any]:
    return {**spec.to_json(), "fingerprint": spec.fingerprint()}


def _language(code: str) -> str:
    if "load_inline" in code or "RawKernel" in code:
        return "cuda"
    if "@triton.jit" in code:
        return "triton"
    return "pytorch"


def pairs_of_row(row: dict[str, Any], gpu: str) -> Iterator[LabelledPair]:
    """Every measured variant of one problem against its reference, both ways round."""
    task = f"L{row['level_id']}/T{row['task_id']}"
    hardware = hardware_json(gpu_spec(gpu))
    problem = kernelbench_problem(row["ref_code"])
    reference = KernelSide(row["ref_code"], "pytorch", "Model")
    for code_field, score_field, name in _VARIANTS:
        code, score = row.get(code_field) or "", row.get(score_field)
        if not code.strip() or not isinstance(score, (int, float)) or not (0 < score < math.inf):
            continue
        candidate = KernelSide(code, _language(code), name)
        for swapped in (False, True):
            ref, cand, speedup = (candidate, reference, 1.0 / score) if swapped else (reference, candidate, float(score))
            yield LabelledPair(
                id=f"cuda-l1/{gpu}/{task}/{name}{'/swapped' if swapped else ''}",
                kind="reference",
                request=ForecastRequest(ref, cand, hardware, problem or None),
                speedup=speedup,
                op=task,
                group=f"cuda-l1/{gpu}/{task}/ref={name if swapped else 'reference'}",
                source=f"cuda-l1/{gpu}",
            )


def load_pairs(gpu: str, directory: Path = DEFAULT_DIR) -> list[LabelledPair]:
    """All pairs of one GPU's file (e.g. gpu="h100")."""
    pairs: list[LabelledPair] = []
    with open(directory / f"{gpu}.jsonl", encoding="utf-8") as stream:
        for line in stream:
            if line.strip():
                pairs.extend(pairs_of_row(json.loads(line), gpu))
    return pairs
