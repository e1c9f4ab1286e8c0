"""What the LLM backends share: answer-token lookup, reading bin probabilities, JSON fallback.

A distribution is read from the 8 answer-token probabilities at one position
(docs/forecast.md: verbalised confidences from small models are useless). Only where a
backend cannot expose them is a JSON distribution parsed instead, and how far it
was from a distribution is kept as a diagnostic, never silently fixed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from kernelcast.models.service.prompt import DIGIT_LABELS, LETTER_LABELS
from kernelcast.wire import NUM_BINS


class LLMBackendError(RuntimeError):
    """An LLM backend could not produce a forecast; the message says why and what to do."""


def label_token_ids(tokenize: Callable[[str], list[int]], context: str) -> tuple[tuple[str, ...], list[int]]:
    """Labels whose every member is exactly one token right after `context`, and those tokens.

    Checked in context, not alone: a SentencePiece tokenizer splits "5" at the start
    of a text differently from "5" after the generation prompt.
    """
    context_ids = tokenize(context)
    for labels in (DIGIT_LABELS, LETTER_LABELS):
        ids: list[int] = []
        for label in labels:
            full = tokenize(context + label)
            if len(full) != len(context_ids) + 1 or full[:-1] != context_ids:
                break
            ids.append(full[-1])
        if len(ids) == NUM_BINS and len(set(ids)) == NUM_BINS:
            return labels, ids
    raise LLMBackendError("neither digits 1–8 nor letters A–H are single tokens after this model's prompt")


def shared_prefix_length(previous: Sequence[int], tokens: Sequence[int]) -> int:
    """How many leading tokens a KV cache built for `previous` can serve for `tokens`."""
    length = 0
    for old, new in zip(previous, tokens):
        if old != new:
            break
        length += 1
    return length


def read_label_logits(logits: Any, label_ids: Sequence[int]) -> tuple[list[float], float]:
    """Bin probabilities from one position's full-vocabulary logits (a 1-D numpy array).

    The answer is constrained to the label tokens (softmax over those 8 alone); the
    second value is how much of the unconstrained mass they held, a diagnostic of
    whether the model meant to answer with a label at all.
    """
    import numpy as np

    everything = np.asarray(logits, dtype=np.float64)
    top = float(everything.max())
    log_total = top + float(np.log(np.exp(everything - top).sum()))
    label_log_probs = everything[list(label_ids)] - log_total
    label_probs = np.exp(label_log_probs)
    mass = float(label_probs.sum())
    if mass > 0:
        return (label_probs / mass).tolist(), mass
    # All labels underflowed: fall back to a stable softmax of their logits.
    shifted = np.exp(label_log_probs - label_log_probs.max())
    return (shifted / shifted.sum()).tolist(), mass


def parse_json_distribution(text: str) -> tuple[list[float] | None, dict[str, Any]]:
    """Bin probabilities from a `{"probabilities": [...]}` answer, renormalised.

    Returns (None, details) when the text is not such a distribution; details keep
    the raw sum or the parse failure so calibration work can see how bad answers were.
    """
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None, {"parse_failure": "no JSON object in the answer", "answer": text[:200]}
    try:
        data = json.loads(text[start : end + 1])
    except ValueError as error:
        return None, {"parse_failure": f"invalid JSON: {error}", "answer": text[:200]}
    values = data.get("probabilities") if isinstance(data, dict) else None
    if not isinstance(values, list) or len(values) != NUM_BINS:
        return None, {"parse_failure": f"'probabilities' is not a list of {NUM_BINS}", "answer": text[:200]}
    try:
        numbers = [max(float(value), 0.0) for value in values]
    except (TypeError, ValueError):
        return None, {"parse_failure": "non-numeric probability", "answer": text[:200]}
    raw_sum = sum(numbers)
    if not raw_sum > 0 or not math.isfinite(raw_sum):
        return None, {"parse_failure": "probabilities do not have a positive finite sum", "raw_sum": raw_sum}
    return [value / raw_sum for value in numbers], {"raw_sum": round(raw_sum, 6)}


def predict_from_last_logits(backend: Any, request: Any) -> Any:
    """The 8 bin probabilities from the answer position's logits, for backends that run the
    model in-process and keep a prefix cache (llama-cpp, transformers): `backend` provides
    `labels`, `_label_ids`, `_lock`, `_render`, `_tokenize` and `_last_logits`."""
    import time

    from kernelcast.models import prediction
    from kernelcast.models.service.prompt import build_prompt

    prompt = build_prompt(request, backend.labels)
    tokens = backend._tokenize(backend._render(prompt.messages()))
    started = time.perf_counter()
    with backend._lock:
        logits, reused = backend._last_logits(tokens)
    probabilities, label_mass = read_label_logits(logits, backend._label_ids)
    return prediction.RawPrediction(
        probabilities=probabilities,
        details={
            "readout": "logits",
            "labels": "".join(backend.labels),
            "prompt_tokens": len(tokens),
            "reused_tokens": reused,
            "eval_ms": round(1000 * (time.perf_counter() - started), 1),
            "label_mass": round(label_mass, 4),
        },
    )
