"""The one prompt every LLM forecaster backend sends (docs/forecast.md).

Sections run from what changes least to what changes most: system (bins, factors) →
hardware and problem sizes → reference → candidate → question. An edit in the
candidate then leaves everything before it byte-identical, so llama.cpp, vLLM and
SGLang re-use the KV cache of that prefix instead of recomputing it.

The bins are rendered from kernelcast.wire, never restated, so a prompt cannot
disagree with the labels it is scored against.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kernelcast.wire import BIN_WORDS, LOG2_EDGES, NUM_BINS, ForecastRequest, KernelSide

# Answer labels, one per bin. Digits first; letters for tokenizers where a digit
# is not one token after the generation prompt (see llm_common.label_token_ids).
DIGIT_LABELS: tuple[str, ...] = tuple(str(index) for index in range(1, NUM_BINS + 1))
LETTER_LABELS: tuple[str, ...] = tuple(chr(ord("A") + index) for index in range(NUM_BINS))

# docs/forecast.md "What a forecaster is given": what a good forecast reasons about.
FACTORS: tuple[str, ...] = (
    "FLOPs and total work",
    "memory coalescing and reuse",
    "arithmetic intensity (compute- or memory-bound)",
    "warp divergence",
    "occupancy (registers, shared memory)",
    "parallelism and grid shape",
    "synchronisation and atomics",
    "launch overhead and number of launches",
    "vendor libraries (cuBLAS/cuDNN are hard to beat)",
    "data types and tensor cores",
)

ANSWER_MODES = ("label", "json", "reason")
_FENCE_LANGUAGE = {"cuda": "cuda", "triton": "python", "pytorch": "python"}


@dataclass(frozen=True)
class Prompt:
    """A chat prompt whose answer is one of `labels` (bin k ↔ labels[k-1])."""

    system: str
    user: str
    labels: tuple[str, ...]

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


def _speedup_edge(log2_edge: float) -> str:
    return f"{2.0**log2_edge:.4g}"


def bins_table(labels: tuple[str, ...] = DIGIT_LABELS) -> str:
    """The bin table of docs/forecast.md as text, built from the shared edges and words."""
    rows = ["| bin | S range | meaning |", "|---|---|---|"]
    for index in range(NUM_BINS):
        if index == 0:
            bounds = f"S < {_speedup_edge(LOG2_EDGES[0])}"
        elif index == NUM_BINS - 1:
            bounds = f"S ≥ {_speedup_edge(LOG2_EDGES[-1])}"
        else:
            bounds = f"{_speedup_edge(LOG2_EDGES[index - 1])} ≤ S < {_speedup_edge(LOG2_EDGES[index])}"
        rows.append(f"| {labels[index]} | {bounds} | candidate {BIN_WORDS[index]} |")
    return "\n".join(rows)


def system_text(labels: tuple[str, ...] = DIGIT_LABELS) -> str:
    """Everything that is the same for every request with these labels."""
    factors = "\n".join(f"{number}. {factor}" for number, factor in enumerate(FACTORS, start=1))
    return (
        "You are an expert in GPU performance. You are shown a reference kernel and a candidate "
        "kernel that compute the same result on the same GPU with the same inputs. Forecast the "
        "speedup S = t_reference / t_candidate (S > 1: the candidate is faster).\n\n"
        f"Answer with the bin that holds S:\n{bins_table(labels)}\n\n"
        f"Reason about these factors for each kernel:\n{factors}"
    )


def _json_block(value: dict[str, Any] | None) -> str:
    if not value:
        return "none"
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _hardware_text(hardware: dict[str, Any], problem: dict[str, Any] | None) -> str:
    lines = [f"- {key}: {value}" for key, value in hardware.items() if value is not None]
    return "## Target GPU\n" + ("\n".join(lines) or "- unknown") + f"\n\n## Problem sizes\n{_json_block(problem)}"


def _side_text(title: str, side: KernelSide) -> str:
    fence = _FENCE_LANGUAGE.get(side.language, "")
    name = f" `{side.name}`" if side.name else ""
    return f"## {title} kernel{name} ({side.language})\n```{fence}\n{side.code.rstrip()}\n```\nCompiler facts: {_json_block(side.facts)}"


def question_text(labels: tuple[str, ...], answer: str) -> str:
    """The closing instruction; the only part that depends on the answer mode."""
    choices = ", ".join(labels)
    if answer == "label":
        return f"Which bin holds S? Answer with the bin label only, one of: {choices}."
    if answer == "json":
        return f'Give a probability for each bin as JSON: {{"probabilities": [{NUM_BINS} numbers in bin order {choices}, summing to 1]}}.'
    if answer == "reason":
        return f"Think through the factors for both kernels step by step, briefly. End with the line `Bin: X` where X is one of: {choices}."
    raise ValueError(f"answer mode must be one of {', '.join(ANSWER_MODES)}, got {answer!r}")


def build_prompt(request: ForecastRequest, labels: tuple[str, ...] = DIGIT_LABELS, answer: str = "label") -> Prompt:
    """The prompt for one pair, ordered for prefix-cache reuse (module docstring)."""
    if len(labels) != NUM_BINS:
        raise ValueError(f"need {NUM_BINS} labels, got {len(labels)}")
    user = "\n\n".join(
        (
            _hardware_text(request.hardware, request.problem),
            _side_text("Reference", request.reference),
            _side_text("Candidate", request.candidate),
            question_text(labels, answer),
        )
    )
    return Prompt(system=system_text(labels), user=user, labels=labels)


def answer_after_reasoning_text(labels: tuple[str, ...]) -> str:
    """The follow-up turn of the two-step "reason, then answer" mode."""
    return f"Now give only the bin label, one of: {', '.join(labels)}."


def distribution_schema() -> dict[str, Any]:
    """JSON schema of the fallback answer: one probability per bin, in bin order."""
    return {
        "type": "object",
        "properties": {
            "probabilities": {
                "type": "array",
                "items": {"type": "number", "minimum": 0, "maximum": 1},
                "minItems": NUM_BINS,
                "maxItems": NUM_BINS,
            }
        },
        "required": ["probabilities"],
        "additionalProperties": False,
    }
