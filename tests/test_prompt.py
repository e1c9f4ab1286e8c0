"""The one LLM prompt: bins from kernelcast.wire, facts included, cache-friendly order."""

from __future__ import annotations

import json

import pytest

from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.models.service.llm_common import label_token_ids, parse_json_distribution, read_label_logits
from kernelcast.models.service.prompt import DIGIT_LABELS, FACTORS, LETTER_LABELS, bins_table, build_prompt, distribution_schema
from kernelcast.wire import BIN_WORDS, LOG2_EDGES, NUM_BINS, ForecastRequest, KernelSide, bin_of_speedup

NAIVE = (
    "__global__ void add(const float* a, float* b, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) b[i] = a[i] + 1.0f;\n}"
)
VECTOR = NAIVE.replace("a[i] + 1.0f", "a[i] + 2.0f")


def _request(candidate: str = VECTOR, facts: dict | None = None) -> ForecastRequest:
    return ForecastRequest(
        reference=KernelSide(NAIVE, "cuda", "add", {"registers": 16, "spill_store_bytes": 0}),
        candidate=KernelSide(candidate, "cuda", "add_v2", facts),
        hardware=SPECS["H100-SXM"].to_json(),
        problem={"n": 1 << 24},
    )


def test_bins_table_follows_the_shared_edges_and_words() -> None:
    table = bins_table()
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| bin")]
    assert len(rows) == NUM_BINS
    for index, row in enumerate(rows):
        assert row.startswith(f"| {DIGIT_LABELS[index]} |") and BIN_WORDS[index] in row
    # A speedup exactly at an edge belongs to the bin whose row starts with that edge.
    for index, edge in enumerate(LOG2_EDGES):
        assert bin_of_speedup(2.0**edge) == index + 2
        assert f"{2.0**edge:.4g} ≤ S" in rows[index + 1] or f"S ≥ {2.0**edge:.4g}" in rows[index + 1]


def test_prompt_holds_factors_hardware_facts_and_sizes_in_cache_order() -> None:
    prompt = build_prompt(_request(facts={"registers": 40, "occupancy": {"fraction": 0.5}}))
    assert all(factor in prompt.system for factor in FACTORS)
    user = prompt.user
    positions = [
        user.index(marker) for marker in ("## Target GPU", "NVIDIA H100 SXM", "## Reference kernel", "## Candidate kernel", "Which bin")
    ]
    assert positions == sorted(positions)
    assert '"registers": 16' in user and '"registers": 40' in user and "16777216" in user
    assert user.rstrip().endswith("one of: 1, 2, 3, 4, 5, 6, 7, 8.")
    assert [message["role"] for message in prompt.messages()] == ["system", "user"]


def test_missing_facts_are_said_not_invented() -> None:
    assert "Compiler facts: none" in build_prompt(_request(facts=None)).user


def test_an_edit_at_the_end_of_the_candidate_keeps_the_prefix() -> None:
    before = build_prompt(_request(VECTOR)).user
    after = build_prompt(_request(VECTOR + "\n// tuned")).user
    shared = next(i for i, (x, y) in enumerate(zip(before, after)) if x != y)
    assert shared > before.index("## Candidate kernel")


def test_letter_labels_and_answer_modes() -> None:
    prompt = build_prompt(_request(), LETTER_LABELS, answer="json")
    assert "| A |" in prompt.system and "| H |" in prompt.system and '"probabilities"' in prompt.user
    assert "Bin: X" in build_prompt(_request(), answer="reason").user
    with pytest.raises(ValueError):
        build_prompt(_request(), answer="essay")


def test_label_lookup_needs_one_token_in_context() -> None:
    # A character tokenizer: every digit is one token after any context.
    assert label_token_ids(lambda text: [ord(c) for c in text], "assistant\n") == (DIGIT_LABELS, [ord(d) for d in DIGIT_LABELS])

    # A tokenizer that glues a newline to a following digit but not to a letter.
    def glued(text: str) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            if text[i] == "\n" and i + 1 < len(text) and text[i + 1].isdigit():
                ids.append(1000 + ord(text[i + 1]))
                i += 2
            else:
                ids.append(ord(text[i]))
                i += 1
        return ids

    labels, _ = label_token_ids(glued, "assistant\n")
    assert labels == LETTER_LABELS


def test_logit_readout_constrains_to_labels_and_reports_their_mass() -> None:
    logits = [0.0] * 20
    logits[3], logits[4] = 2.0, 2.0
    probabilities, mass = read_label_logits(logits, list(range(3, 11)))
    assert sum(probabilities) == pytest.approx(1.0)
    assert probabilities[0] == probabilities[1] > probabilities[2]
    assert 0 < mass < 1


def test_json_distribution_is_renormalised_with_diagnostics() -> None:
    probabilities, details = parse_json_distribution('ok {"probabilities": [1, 1, 0, 0, 0, 0, 0, 2]}')
    assert probabilities == [0.25, 0.25, 0, 0, 0, 0, 0, 0.5] and details["raw_sum"] == 4
    assert parse_json_distribution('{"probabilities": [1, 2]}')[0] is None
    assert "parse_failure" in parse_json_distribution("no json here")[1]
    schema = distribution_schema()["properties"]["probabilities"]
    assert schema["minItems"] == schema["maxItems"] == NUM_BINS
    json.dumps(distribution_schema())
