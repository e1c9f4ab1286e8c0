"""`kernelcast eval`: the metric functions against hand-computed values, then the command itself."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from lsp_support import isolated_env
from test_llm_llama_cpp import require_llama_and_model

from kernelcast import evaluation
from kernelcast.evaluation import (
    PLOT_INSTALL_HINT,
    ece,
    ece_noise,
    evaluate,
    forecasts_from_file,
    metrics,
    oracle_direction_accuracy,
    reliability,
    risk_coverage,
    summary_table,
    top_recovery,
)
from kernelcast.wire import read_pairs

PAIRS = Path(__file__).parent / "data" / "pairs_small.jsonl"
# One speedup in each of the 8 bins, in bin order.
ONE_PER_BIN = np.array([0.2, 0.3, 0.6, 0.8, 1.2, 1.5, 3.0, 5.0])
PLOTS = ("reliability.png", "risk_coverage.png", "confusion.png")


def test_perfect_forecaster_scores_perfectly() -> None:
    result = metrics(np.eye(8), ONE_PER_BIN, groups=["g"] * 8)
    assert result["n"] == result["n_direction"] == 8
    for key in (
        "direction_accuracy",
        "bin_accuracy",
        "within_one_bin",
        "accuracy_at_half_coverage",
        "accuracy_at_threshold",
        "coverage_at_threshold",
        "top10_recovery_mean",
    ):
        assert result[key] == 1.0, key
    for key in ("direction_ece", "direction_ece_noise", "bin_ece", "brier", "crps", "nll", "aurc"):
        assert result[key] == 0.0, key
    assert result["confusion"] == np.eye(8, dtype=int).tolist()


def test_uniform_forecaster_has_the_textbook_scores() -> None:
    result = metrics(np.full((8, 8), 1 / 8), ONE_PER_BIN, groups=["g"] * 8)
    assert result["brier"] == pytest.approx(0.5 * (7 / 8) ** 2 + 0.5 * 7 * (1 / 8) ** 2)  # 7/16
    # CRPS: (1/448)·Σ_t [Σ_{k<t} k² + Σ_{j≤8−t} j²], averaged over t = 1..8 → 672 / 3584.
    assert result["crps"] == pytest.approx(3 / 16)
    assert result["nll"] == pytest.approx(math.log(8))
    # P(faster) = 0.5 reads "faster" at confidence 0.5 (as Forecast does); half the pairs are faster.
    assert result["direction_accuracy"] == 0.5 and result["direction_ece"] == pytest.approx(0.0)
    # Ties go to the first bin: right for bin 1, within one bin for bins 1 and 2.
    assert result["bin_accuracy"] == 1 / 8 and result["within_one_bin"] == 2 / 8
    assert result["bin_ece"] == pytest.approx(0.0)
    # All confidences tie: one threshold keeps everything, so "50% coverage" is 100%.
    assert result["risk_coverage"] == [{"threshold": 0.5, "coverage": 1.0, "risk": 0.5}]
    assert result["aurc"] == 0.5 and result["accuracy_at_half_coverage"] == 0.5 and result["coverage_at_half_coverage"] == 1.0
    assert result["coverage_at_threshold"] == 0.0 and result["accuracy_at_threshold"] is None
    # Every candidate has E[s] = 0: the one kept is any of the eight, so on average the mean S of a group whose best is 5.
    assert result["top10_recovery_mean"] == pytest.approx(ONE_PER_BIN.mean() / 5.0)


def test_known_direction_ece_selective_prediction_and_brier() -> None:
    confident = [0, 0, 0.1, 0, 0, 0.9, 0, 0]  # faster at 0.9
    hedged = [0, 0, 0.7, 0, 0, 0.3, 0, 0]  # slower at 0.7
    probabilities = [confident] * 4 + [hedged] * 6
    speedups = [1.5, 1.5, 1.5, 0.6] + [0.6] * 6  # one confident forecast is wrong
    result = metrics(probabilities, speedups)
    # Buckets [0.9, 1): conf 0.9, acc 0.75; [0.7, 0.8): conf 0.7, acc 1.0.
    assert result["direction_ece"] == pytest.approx(0.4 * 0.15 + 0.6 * 0.3)
    assert result["bin_ece"] == pytest.approx(0.24)
    assert [(row["n"], row["accuracy"]) for row in result["direction_reliability"]] == [(6, 1.0), (4, 0.75)]
    assert result["direction_accuracy"] == pytest.approx(0.9)
    assert result["risk_coverage"] == [
        {"threshold": 0.9, "coverage": 0.4, "risk": 0.25},
        {"threshold": pytest.approx(0.7), "coverage": 1.0, "risk": pytest.approx(0.1)},
    ]
    assert result["aurc"] == pytest.approx(0.25 * 0.4 + 0.1 * 0.6)
    assert result["accuracy_at_half_coverage"] == pytest.approx(0.9)
    assert result["coverage_at_threshold"] == 0.4 and result["accuracy_at_threshold"] == 0.75
    assert result["brier"] == pytest.approx((3 * 0.01 + 0.81 + 6 * 0.09) / 10)
    assert result["nll"] == pytest.approx((3 * -math.log(0.9) - math.log(0.1) + 6 * -math.log(0.7)) / 10)


def test_near_ties_count_for_calibration_but_not_for_direction_accuracy() -> None:
    slower = [0, 0, 0, 1.0, 0, 0, 0, 0]
    result = metrics([slower, slower], [1.05, 0.5])  # |log2 1.05| = 0.07 < 0.1
    assert result["n"] == 2 and result["n_direction"] == 1
    assert result["direction_accuracy"] == 1.0
    assert result["direction_ece"] == pytest.approx(0.5)  # confidence 1, right on one of the two
    assert result["coverage_at_threshold"] == 1.0 and result["risk_coverage"][-1]["coverage"] == 1.0


def test_a_calibrated_forecaster_exceeds_the_ece_noise_one_time_in_ten() -> None:
    generator = np.random.default_rng(7)
    confidence = generator.uniform(0.5, 1.0, 150)
    noise = ece_noise(confidence)
    observed = [ece(reliability(confidence, generator.random(len(confidence)) < confidence)) for _ in range(400)]
    assert 0.05 <= np.mean(np.array(observed) > noise) <= 0.16
    # Forecasts right less often than they claim exceed it nearly always.
    overconfident = [ece(reliability(confidence, generator.random(len(confidence)) < confidence - 0.15)) for _ in range(50)]
    assert np.mean(np.array(overconfident) > noise) > 0.9


def test_ece_noise_falls_with_the_number_of_pairs_and_is_none_without_pairs() -> None:
    generator = np.random.default_rng(8)
    few, many = ece_noise(generator.uniform(0.5, 1.0, 100)), ece_noise(generator.uniform(0.5, 1.0, 10_000))
    assert many < few / 5
    assert ece_noise(np.full(50, 1.0)) == 0.0 and ece_noise(np.array([])) is None
    result = evaluate(np.eye(8), ONE_PER_BIN, sources=["a"] * 4 + ["b"] * 4)
    assert "ECE noise" in summary_table(result).splitlines()[0]
    assert result["by_source"]["a"]["direction_ece_noise"] == 0.0


def test_top10_recovery_keeps_the_top_tenth_of_each_group() -> None:
    # 12 candidates keep ⌈1.2⌉ = 2: scored best are S = 2 and 1.5, the group's best is 4.
    score = np.array([5.0, 4.0] + [0.0] * 10 + [1.0, 9.0])
    speedups = np.array([2.0, 1.5, 4.0] + [1.0] * 9 + [3.0, 7.0])
    groups = ["a"] * 12 + ["lonely", ""]
    assert top_recovery(score, speedups, groups) == {"a": 0.5}


def test_top10_recovery_of_two_solutions_forecast_alike_is_their_average() -> None:
    # One of the two is kept, either with even chance: (1/3 + 3/3) / 2, whichever comes first.
    assert top_recovery(np.array([0.5, 0.5]), np.array([1.0, 3.0]), ["a", "a"]) == {"a": pytest.approx(2 / 3)}
    assert top_recovery(np.array([0.5, 0.5]), np.array([3.0, 1.0]), ["a", "a"]) == {"a": pytest.approx(2 / 3)}


def test_top10_recovery_with_ties_is_the_mean_over_every_draw_at_the_cut() -> None:
    """Each group as counting every equally likely choice of tied pairs at the cut gives it."""
    rng = np.random.default_rng(0)
    groups = [f"g{index}" for index in rng.integers(0, 40, 600)]
    score, speedups = rng.integers(0, 4, 600).astype(float), rng.uniform(0.2, 5.0, 600)
    expected = {}
    for name in sorted(set(groups)):
        members = [i for i, group in enumerate(groups) if group == name]
        keep = max(1, -(-len(members) // 10))
        cut = sorted((score[i] for i in members), reverse=True)[keep - 1]
        above = [speedups[i] for i in members if score[i] > cut]
        tied = [speedups[i] for i in members if score[i] == cut]
        draws = [max(above + list(drawn)) for drawn in itertools.combinations(tied, keep - len(above))]
        if len(members) >= 2:
            expected[name] = float(np.mean(draws)) / max(speedups[members])
    assert top_recovery(score, speedups, groups) == pytest.approx(expected, rel=1e-12)
    shuffled = rng.permutation(600)
    assert top_recovery(score[shuffled], speedups[shuffled], [groups[i] for i in shuffled]) == pytest.approx(expected, rel=1e-12)


def test_risk_coverage_sweeps_distinct_thresholds() -> None:
    points = risk_coverage(np.array([0.9, 0.6, 0.9, 0.55]), np.array([True, False, False, True]))
    assert points == [
        {"threshold": 0.9, "coverage": 0.5, "risk": 0.5},
        {"threshold": 0.6, "coverage": 0.75, "risk": pytest.approx(2 / 3)},
        {"threshold": 0.55, "coverage": 1.0, "risk": 0.5},
    ]


def test_evaluate_splits_are_the_metrics_of_their_pairs() -> None:
    rng = np.random.default_rng(0)
    probabilities = rng.dirichlet(np.ones(8), size=30)
    speedups = 2.0 ** rng.normal(0, 1.5, size=30)
    languages = ["cuda", "triton", "pytorch"] * 10
    kinds = ["edit"] * 12 + ["cross"] * 18
    groups = [f"g{i % 4}" for i in range(30)]
    result = evaluate(probabilities, speedups, kinds=kinds, languages=languages, groups=groups)
    assert sorted(result["by_language"]) == ["cuda", "pytorch", "triton"] and sorted(result["by_kind"]) == ["cross", "edit"]
    assert sum(split["n"] for split in result["by_kind"].values()) == 30
    edit = metrics(probabilities[:12], speedups[:12], groups[:12])
    assert result["by_kind"]["edit"] == edit
    assert result["overall"] == metrics(probabilities, speedups, groups)


def test_rejects_what_is_not_a_distribution() -> None:
    with pytest.raises(ValueError, match=r"shape \(N, 8\)"):
        metrics(np.ones((2, 7)), [1.0, 2.0])
    with pytest.raises(ValueError, match="non-negative"):
        metrics([[-1.0] + [0.5] * 7], [1.0])
    with pytest.raises(ValueError, match="1 probability rows but 2 speedups"):
        metrics(np.eye(8)[:1], [1.0, 2.0])


# --- the command ---------------------------------------------------------------------------


def _eval(tmp_path: Path, *args: str, block_matplotlib: bool = False) -> subprocess.CompletedProcess[str]:
    # sys.modules[name] = None is Python's own "this module is not installed".
    code = ("import sys; sys.modules['matplotlib'] = None; " if block_matplotlib else "import sys; ") + (
        "from kernelcast.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, "eval", *args], capture_output=True, text=True, timeout=600, env=isolated_env(tmp_path / "home")
    )


def _subset(path: Path, ids: tuple[str, ...]) -> Path:
    """The small file's pairs of `ids`, in that order, written to `path`."""
    lines = {json.loads(line)["id"]: line for line in PAIRS.read_text().splitlines()}
    path.write_text("".join(lines[pair_id] + "\n" for pair_id in ids))
    return path


def _predictions(report: Path) -> list[dict]:
    return [json.loads(line) for line in (report / "predictions.jsonl").read_text().splitlines()]


def test_eval_embedded_writes_metrics_predictions_report_and_plots(tmp_path: Path) -> None:
    report = tmp_path / "report"
    completed = _eval(tmp_path, str(PAIRS), "--report", str(report))
    assert completed.returncode == 0, completed.stderr
    assert "embedded on pairs_small.jsonl: 18 of 18 pairs forecast" in completed.stdout
    assert all(label in completed.stdout for label in ("overall", "cuda", "triton", "pytorch", "edit", "cross", "reference"))

    written = json.loads((report / "metrics.json").read_text())
    assert written["backend"] == "embedded" and written["failed"] == [] and written["overall"]["n"] == 18
    assert {k: v["n"] for k, v in written["by_kind"].items()} == {"cross": 4, "edit": 7, "reference": 7}
    assert {k: v["n"] for k, v in written["by_language"].items()} == {"cuda": 11, "pytorch": 2, "triton": 5}

    # predictions.jsonl alone reproduces every number: other tools can reuse it.
    rows = _predictions(report)
    pairs = list(read_pairs(PAIRS))
    assert [row["id"] for row in rows] == [pair.id for pair in pairs]
    assert [row["true_bin"] for row in rows] == [pair.true_bin for pair in pairs]
    again = evaluate(
        [row["probabilities"] for row in rows],
        [row["speedup"] for row in rows],
        kinds=[row["kind"] for row in rows],
        languages=[row["language"] for row in rows],
        groups=[row["group"] for row in rows],
    )
    assert json.loads(json.dumps(again)) == {key: written[key] for key in again}

    markdown = (report / "report.md").read_text()
    assert "| overall | 18 |" in markdown and "over the 12 pairs with |log2 S| ≥ 0.1" in markdown
    if importlib.util.find_spec("matplotlib") is None:
        assert PLOT_INSTALL_HINT in markdown
        pytest.skip(f"matplotlib is not installed: the plots were not made ({PLOT_INSTALL_HINT})")
    for name in PLOTS:
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({name})" in markdown


def test_eval_without_matplotlib_still_writes_metrics_and_says_how_to_get_plots(tmp_path: Path) -> None:
    """Without compiler facts: the plots are what is missing here, and the test above compiles every pair."""
    report = tmp_path / "report"
    completed = _eval(tmp_path, str(PAIRS), "--no-facts", "--report", str(report), block_matplotlib=True)
    assert completed.returncode == 0, completed.stderr
    assert f"No plots: matplotlib is not installed ({PLOT_INSTALL_HINT} adds it)." in completed.stdout
    assert PLOT_INSTALL_HINT == f"pip install -e '{Path(__file__).resolve().parents[1]}[eval]'", "from this checkout: not on PyPI yet"
    assert (report / "metrics.json").is_file() and (report / "predictions.jsonl").is_file()
    assert not any((report / name).exists() for name in PLOTS)


def test_bad_line_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    lines = PAIRS.read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines[:2] + [lines[2].replace('"speedup": 0.31', '"speedup": -1')] + lines[3:]) + "\n")
    report = tmp_path / "report"
    completed = _eval(tmp_path, str(broken), "--report", str(report))
    assert completed.returncode == 2
    assert f"{broken}:3: speedup must be a positive finite number, got -1" in completed.stderr
    assert not report.exists()

    unknown = _eval(tmp_path, str(PAIRS), "--backend", "oracle", "--report", str(report))
    assert unknown.returncode == 2 and "unknown forecaster backend 'oracle'" in unknown.stderr and not report.exists()


def _forecasts_file(path: Path, pairs: list, drop: int = 0) -> Path:
    """A forecast of each pair but the last `drop`: sure of the true side for every other pair, unsure otherwise."""
    lines = []
    for number, pair in enumerate(pairs[: len(pairs) - drop]):
        probabilities = [0.0] * 8
        probabilities[pair.true_bin - 1] = 0.9 if number % 2 else 0.3
        probabilities[7 - (pair.true_bin - 1)] += 1.0 - probabilities[pair.true_bin - 1]
        lines.append(json.dumps({"id": pair.id, "probabilities": probabilities}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_eval_judges_forecasts_from_a_file_as_it_judges_a_backend(tmp_path: Path) -> None:
    pairs = list(read_pairs(PAIRS))
    forecasts = _forecasts_file(tmp_path / "held_out.jsonl", pairs)
    report = tmp_path / "report"
    completed = _eval(tmp_path, str(PAIRS), "--forecasts", str(forecasts), "--report", str(report), block_matplotlib=True)
    assert completed.returncode == 0, completed.stderr
    assert "forecasts of held_out.jsonl on pairs_small.jsonl: 18 of 18 pairs forecast" in completed.stdout
    written = json.loads((report / "metrics.json").read_text())
    rows = [json.loads(line) for line in forecasts.read_text().splitlines()]
    expected = evaluate(
        [row["probabilities"] for row in rows],
        [pair.speedup for pair in pairs],
        kinds=[pair.kind for pair in pairs],
        languages=[pair.language for pair in pairs],
        groups=[pair.group for pair in pairs],
        sources=[pair.source for pair in pairs],
    )
    assert json.loads(json.dumps(expected)) == {key: written[key] for key in expected}
    assert written["backend"] == "forecasts of held_out.jsonl" and written["calibration_ids"] == []
    assert [row["id"] for row in _predictions(report)] == [pair.id for pair in pairs]


def test_a_distribution_from_a_file_is_judged_as_written_and_weights_are_scaled(tmp_path: Path) -> None:
    pairs = list(read_pairs(PAIRS))[:2]
    even = [0.1, 0.1, 0.1, 0.2, 0.2, 0.1, 0.1, 0.1]  # P(faster) = 0.5 exactly, as written
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps({"id": pair.id, "probabilities": row}) + "\n" for pair, row in zip(pairs, (even, [1.0] * 8))))
    written, weights = forecasts_from_file(path, pairs)
    assert written.probabilities == even and written.provenance == {"backend": "forecasts of two.jsonl"}
    assert weights.probabilities == [0.125] * 8 and weights.confidence == 0.5


def test_eval_forecasts_that_do_not_cover_the_pairs_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    pairs = list(read_pairs(PAIRS))
    report = tmp_path / "report"
    short = _forecasts_file(tmp_path / "short.jsonl", pairs, drop=2)
    missing = _eval(tmp_path, str(PAIRS), "--forecasts", str(short), "--report", str(report))
    assert missing.returncode == 2 and f"{short} has no forecast of 2 of the 18 pairs, first: {pairs[-2].id}" in missing.stderr
    seven = tmp_path / "seven.jsonl"
    seven.write_text(json.dumps({"id": pairs[0].id, "probabilities": [0.5] * 7}) + "\n")
    assert f"{seven}:1: 7 probabilities, not one per bin (8)" in _eval(tmp_path, str(PAIRS), "--forecasts", str(seven)).stderr
    negative = tmp_path / "negative.jsonl"
    negative.write_text(json.dumps({"id": pairs[0].id, "probabilities": [-0.1, 1.1] + [0.0] * 6}) + "\n")
    below_zero = _eval(tmp_path, str(PAIRS), "--forecasts", str(negative))
    assert f"{negative}:1: probabilities must be finite and non-negative" in below_zero.stderr
    zero = tmp_path / "zero.jsonl"
    zero.write_text("".join(json.dumps({"id": pair.id, "probabilities": [0.0] * 8}) + "\n" for pair in pairs))
    refused = _eval(tmp_path, str(PAIRS), "--forecasts", str(zero))
    assert refused.returncode == 2 and f"the forecast of {pairs[0].id}: need 8 non-negative probabilities" in refused.stderr
    both = _eval(tmp_path, str(PAIRS), "--forecasts", str(short), "--backend", "embedded", "--report", str(report))
    assert both.returncode == 2 and "give it or --backend, not both" in both.stderr
    absent = _eval(tmp_path, str(PAIRS), "--forecasts", str(tmp_path / "absent.jsonl"))
    assert absent.returncode == 2 and "cannot read" in absent.stderr and "absent.jsonl" in absent.stderr
    assert not report.exists()


# A CUDA edit, a Triton rewrite and a CUDA kernel against a PyTorch reference: each kind of pair, each side's language.
EACH_KIND_AND_LANGUAGE = ("vadd-float4", "vadd-triton", "vadd-torch-vs-cuda")


@pytest.mark.slow
def test_eval_llama_cpp_on_the_small_file(tmp_path: Path) -> None:
    """The LLM path end to end on a pair of each kind of the small file (each costs a forward pass
    of a few seconds on a 2-core CPU; the embedded test above scores all of them, with compiler facts)."""
    gguf = require_llama_and_model()
    three = _subset(tmp_path / "three.jsonl", EACH_KIND_AND_LANGUAGE)
    report = tmp_path / "report"
    completed = _eval(
        tmp_path, str(three), "--no-facts", "--backend", "llama-cpp", "--gguf", str(gguf), "--llm-ctx", "4096", "--report", str(report)
    )
    assert completed.returncode == 0, completed.stderr
    written = json.loads((report / "metrics.json").read_text())
    assert written["backend"] == "llama-cpp" and written["model_id"] == gguf.name
    assert written["failed"] == [] and written["overall"]["n"] == 3
    assert sorted(written["by_kind"]) == ["cross", "edit", "reference"] and sorted(written["by_language"]) == ["cuda", "triton"]
    rows = _predictions(report)
    assert all(len(row["probabilities"]) == 8 and sum(row["probabilities"]) == pytest.approx(1.0) for row in rows)
    assert "llama-cpp on three.jsonl" in (report / "report.md").read_text()


def test_pairs_the_backend_cannot_forecast_are_named_and_left_out(tmp_path: Path) -> None:
    """A real failure: SmolLM2 with a 1024-token context cannot take the register-blocked SGEMM pair (~1260 tokens
    without compiler facts, which lengthen every prompt)."""
    gguf = require_llama_and_model()
    subset = _subset(tmp_path / "two.jsonl", ("vadd-torch-vs-cuda", "sgemm-regblock"))
    report = tmp_path / "report"
    completed = _eval(
        tmp_path, str(subset), "--no-facts", "--backend", "llama-cpp", "--gguf", str(gguf), "--llm-ctx", "1024", "--report", str(report)
    )
    assert completed.returncode == 0, completed.stderr
    assert "1 of 2 pairs forecast" in completed.stdout and "sgemm-regblock: prompt has" in completed.stderr
    written = json.loads((report / "metrics.json").read_text())
    assert [f["id"] for f in written["failed"]] == ["sgemm-regblock"] and written["overall"]["n"] == 1
    assert "`sgemm-regblock`: prompt has" in (report / "report.md").read_text()

    nothing = _eval(
        tmp_path,
        str(subset),
        "--no-facts",
        "--backend",
        "llama-cpp",
        "--gguf",
        str(gguf),
        "--llm-ctx",
        "256",
        "--report",
        str(tmp_path / "none"),
    )
    assert nothing.returncode == 1 and "could forecast none of the 2 pairs" in nothing.stderr
    assert not (tmp_path / "none").exists()


def test_resolved_direction_accuracy_counts_only_pairs_whose_interval_clears_one() -> None:
    # Four direction pairs, all forecast "faster": two measured faster with intervals clear of 1
    # (right), one measured slower but with an interval across 1 (wrong, unresolved), one slower
    # and clear (wrong, resolved); a near-tie and a pair without an interval count in neither.
    faster_row = np.eye(8)[5]
    speedups = [2.0, 1.5, 0.8, 0.5, 1.02, 3.0]
    intervals = [(1.8, 2.2), (1.2, 1.9), (0.6, 1.1), (0.4, 0.6), (0.9, 1.1), None]
    result = evaluate([faster_row] * 6, speedups, sources=["a"] * 3 + ["b"] * 3, intervals=intervals)
    overall = result["overall"]
    assert overall["direction_accuracy"] == pytest.approx(3 / 5)
    assert overall["n_resolved"] == 3 and overall["resolved_direction_accuracy"] == pytest.approx(2 / 3)
    assert result["by_source"]["a"]["resolved_direction_accuracy"] == 1.0
    assert result["by_source"]["b"]["resolved_direction_accuracy"] == 0.0
    assert result["mean_over_sources"]["n_resolved"] == 3
    assert "resolved" in summary_table(result).splitlines()[0]
    # Without intervals nothing is resolved, and direction accuracy is unchanged.
    plain = evaluate([faster_row] * 6, speedups)["overall"]
    assert plain["n_resolved"] == 0 and plain["resolved_direction_accuracy"] is None
    assert plain["direction_accuracy"] == overall["direction_accuracy"]
    assert plain["oracle_direction_accuracy"] is None


def test_labels_far_apart_for_their_noise_leave_the_oracle_always_right() -> None:
    generator = np.random.default_rng(0)
    log2_s = generator.choice([-1, 1], 400) * generator.uniform(0.5, 3.0, 400)
    assert oracle_direction_accuracy(log2_s, np.full(400, 0.01)) > 0.99


def test_labels_of_kernels_equally_fast_leave_the_oracle_near_a_coin_flip() -> None:
    """Two texts alike but for comments measure apart by their noise alone: no oracle tells which way.
    The estimate errs high there: EM is slow to gather the prior at S = 1."""
    log2_s = np.random.default_rng(1).normal(0.0, 0.3, 1500)
    assert 0.5 < oracle_direction_accuracy(log2_s, np.full(1500, 0.3)) < 0.65


def test_the_oracle_estimate_agrees_with_an_oracle_that_knows_the_truth() -> None:
    """Half the pairs truly alike, half far apart, noise of several sizes: the estimate from the labels
    alone lands near how often the true sign and the measured one agree, where taking each label for
    the truth (0.94 here) would not."""
    generator = np.random.default_rng(2)
    count = 3000
    truth = np.where(generator.random(count) < 0.5, generator.normal(0.0, 0.05, count), generator.normal(0.0, 1.5, count))
    sd = generator.choice([0.02, 0.1, 0.4], count)
    labels = truth + generator.normal(0.0, 1.0, count) * sd
    counted = np.abs(labels) >= 0.1
    known = float(np.mean((truth > 0)[counted] == (labels > 0)[counted]))
    assert known < 0.9
    assert oracle_direction_accuracy(labels, sd) == pytest.approx(known, abs=0.03)


def test_the_oracle_of_many_labels_fits_on_a_draw_of_them_and_reads_them_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """A corpus of 10^5 pairs must not hold a likelihood of every label at once: fitted on 500 of
    3,000 labels and read 500 at a time, the estimate stays near the whole fit's and the truth."""
    generator = np.random.default_rng(3)
    truth = np.where(generator.random(3000) < 0.5, generator.normal(0.0, 0.05, 3000), generator.normal(0.0, 1.5, 3000))
    sd = generator.choice([0.02, 0.1, 0.4], 3000)
    labels = truth + generator.normal(0.0, 1.0, 3000) * sd
    whole = oracle_direction_accuracy(labels, sd)
    monkeypatch.setattr(evaluation, "ORACLE_LABELS_AT_ONCE", 500)
    assert oracle_direction_accuracy(labels, sd) == pytest.approx(whole, abs=0.02)


def test_the_oracle_column_reads_each_pairs_interval_as_its_noise() -> None:
    """Narrow intervals: the oracle is right on every direction pair; a pair without an interval is
    left out of it, and a source of near-ties alone has no oracle to report."""
    faster_row = np.eye(8)[5]
    speedups = [2.0, 0.5, 1.5, 3.0, 1.01, 1.02]
    intervals = [(1.98, 2.02), (0.49, 0.51), (1.48, 1.52), None, (0.99, 1.03), (1.0, 1.04)]
    result = evaluate([faster_row] * 6, speedups, sources=["a"] * 4 + ["b"] * 2, intervals=intervals)
    assert result["by_source"]["a"]["oracle_direction_accuracy"] > 0.99
    assert result["by_source"]["b"]["oracle_direction_accuracy"] is None
    assert result["mean_over_sources"]["oracle_direction_accuracy"] == result["by_source"]["a"]["oracle_direction_accuracy"]
    assert "oracle" in summary_table(result).splitlines()[0]
