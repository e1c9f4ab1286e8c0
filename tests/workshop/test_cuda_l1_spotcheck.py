"""benchmarks/cuda_l1_spotcheck.py without a GPU: which rows it picks, and its summary numbers.

The measuring half runs on the H100 (see the script's docstring); here the row choice is
checked on the real CUDA-L1 file (skipped where ../shared/data/cuda-l1 is absent) and on
synthetic rows, and the summary statistics on numbers whose answers are worked out by hand.
"""

from __future__ import annotations

import importlib.util
import math
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "cuda-l1"


def _load_script():
    spec = importlib.util.spec_from_file_location("cuda_l1_spotcheck", ROOT / "benchmarks" / "cuda_l1_spotcheck.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


spot = _load_script()
needs_data = pytest.mark.skipif(
    not (DATA / "h100.jsonl").exists(), reason=f"CUDA-L1 data not found at {DATA} (../shared/data/cuda-l1 beside the checkout)"
)
BUILD_SIGNS = ("load_inline", "cpp_extension", "torch.compile")


def _names(rows):
    return [spot.pair_name(row) for row in rows]


# --- the choice of rows, on the real file -------------------------------------------------------


@needs_data
def test_choice_is_deterministic_seeded_and_spread_over_levels():
    rows = spot.load_rows(DATA)
    first = spot.choose_rows(rows, 40, seed=0)
    assert _names(first) == _names(spot.choose_rows(rows, 40, seed=0))
    assert _names(first) != _names(spot.choose_rows(rows, 40, seed=1))
    assert len(set(_names(first))) == 40
    assert Counter(row["level_id"] for row in first) == {1: 16, 2: 16, 3: 8}  # KernelBench's 2:2:1
    # Any prefix keeps the spread, so a deadline does too; a smaller count is that prefix.
    assert _names(spot.choose_rows(rows, 30, seed=0)) == _names(first)[:30]
    assert Counter(row["level_id"] for row in first[:10]) == {1: 4, 2: 4, 3: 2}
    for row in first:
        assert "class ModelNew" in row["custom_code"] and row["score_default"] is not None


@needs_data
def test_default_choice_leaves_out_rows_that_build():
    rows = spot.load_rows(DATA)
    default = spot.choose_rows(rows, 1000, seed=0)
    assert default, "no row without a build"
    assert not any(sign in row["custom_code"] for row in default for sign in BUILD_SIGNS)
    with_builds = spot.choose_rows(rows, 1000, seed=0, include_inline=True)
    assert set(_names(default)) < set(_names(with_builds))
    assert any("load_inline" in row["custom_code"] for row in with_builds)
    eligible = [row for row in rows if "class ModelNew" in (row["custom_code"] or "") and row["score_default"] is not None]
    assert len(with_builds) == len(eligible)


# --- the choice of rows, on synthetic rows ---------------------------------------------------------


def _row(level, task, code="class ModelNew(nn.Module): pass", score=1.5):
    return {"level_id": level, "task_id": task, "ref_code": "class Model: pass", "custom_code": code, "score_default": score}


def test_choice_skips_empty_none_and_build_rows_and_keeps_the_weights():
    rows = [_row(level, task) for level in (1, 2, 3) for task in range(1, 11)]
    rows += [
        _row(1, 50, code=None, score=None),
        _row(1, 51, code="None"),  # what 17 rows of h100.jsonl hold
        _row(2, 52, code="from torch.utils.cpp_extension import load_inline\nclass ModelNew: pass"),
        _row(2, 53, code="import torch.utils.cpp_extension as ext\nclass ModelNew: pass"),
        _row(3, 54, code="class ModelNew:\n    forward = torch.compile(f)"),
        _row(3, 55, score=None),
    ]
    chosen = spot.choose_rows(rows, 100, seed=3)
    assert sorted(_names(chosen)) == sorted(_names(rows[:30]))
    assert [row["level_id"] for row in chosen[:5]] == [1, 2, 1, 2, 3]
    with_builds = spot.choose_rows(rows, 100, seed=3, include_inline=True)
    assert {"L2-T52", "L2-T53", "L3-T54"} <= set(_names(with_builds))
    assert not {"L1-T50", "L1-T51", "L3-T55"} & set(_names(with_builds))
    # Levels that run out leave their turns to the others.
    assert Counter(row["level_id"] for row in spot.choose_rows(rows[:24], 24, seed=0)) == {1: 10, 2: 10, 3: 4}


# --- the summary statistics -----------------------------------------------------------------


def _record(task, ours, theirs, ci=None, failure=None, level=1):
    result = {"failure": failure} if failure else {}
    if ours is not None:
        result.update(ours=ours, ci95=list(ci))
    return spot.record_for(_row(level, task, score=theirs), result, 1.0, None)


def _synthetic_records():
    return [
        _record(1, 2.0, 2.0, (1.9, 2.1)),  # ratio 1     |log2| 0      in CI  direction agrees
        _record(2, 1.5, 3.0, (1.4, 1.6)),  # ratio 0.5   |log2| 1             agrees
        _record(3, 4.0, 1.0, (3.5, 4.5), level=2),  # ratio 4 |log2| 2       disagrees (theirs is not > 1)
        _record(4, 0.85, 1.0, (0.8, 0.9), level=2),  # ratio 0.85 |log2| 0.234  agrees (both ≤ 1)
        _record(5, 1.2, 1.25, (1.1, 1.3), level=3),  # ratio 0.96 |log2| 0.059  in CI  agrees
        _record(6, None, 2.0, failure={"kind": "wrong", "message": "wrong results: max abs err 1e+00"}),
        _record(7, None, 2.0, failure={"kind": "timeout", "message": "no result after 60 s"}),
        _record(8, 3.0, 1.5, (2.9, 3.1), failure={"kind": "wrong-after-timing", "message": "wrong results"}),
    ]


def test_records_carry_ratio_ci_membership_and_correctness():
    records = _synthetic_records()
    assert records[1]["ratio"] == pytest.approx(0.5) and records[1]["log2_ratio"] == pytest.approx(-1.0)
    assert [record["theirs_in_ci"] for record in records] == [True, False, False, False, True, None, None, False]
    assert [record["correct"] for record in records] == [True] * 5 + [False, None, False]
    assert [record["status"] for record in records[5:]] == ["wrong", "timeout", "wrong-after-timing"]


def test_summary_statistics_follow_their_formulas():
    summary = spot.summarize(_synthetic_records())
    assert (summary["n_records"], summary["n_measured"], summary["n_correct"], summary["n_ok"]) == (8, 6, 5, 5)
    assert summary["failures"] == {"wrong": 1, "timeout": 1, "wrong-after-timing": 1}
    # |log2 ratio| sorted: 0, 0.059, 0.234, 1, 2 -> the middle one is |log2 0.85|.
    assert summary["median_abs_log2_ratio"] == pytest.approx(-math.log2(0.85))
    assert summary["median_ratio"] == pytest.approx(0.96)
    assert summary["geomean_ratio"] == pytest.approx((1 * 0.5 * 4 * 0.85 * 0.96) ** (1 / 5))
    assert summary["share_within_10pct"] == pytest.approx(2 / 5)  # 1 and 0.96
    assert summary["share_within_25pct"] == pytest.approx(3 / 5)  # and 0.85
    assert summary["share_theirs_in_our_ci"] == pytest.approx(2 / 5)
    assert summary["share_direction_agrees"] == pytest.approx(4 / 5)
    # Ranks of ours 4 3 5 1 2, of theirs 4 5 1.5 1.5 3: sxy = 1, sxx = 10, syy = 9.5.
    assert summary["spearman"] == pytest.approx(1 / math.sqrt(95))
    assert summary["by_level"]["2"] == {
        "n": 2,
        "median_ratio": pytest.approx((4 + 0.85) / 2),
        "median_abs_log2_ratio": pytest.approx((2 - math.log2(0.85)) / 2),
    }


def test_spearman_edge_cases_and_empty_summary():
    assert spot.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spot.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spot.spearman([1, 2], [1, 2]) is None
    assert spot.spearman([1, 2, 3], [5, 5, 5]) is None
    assert spot.ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]
    assert spot.within(1.1 - 1e-12, 0.10) and spot.within(1 / 1.1 + 1e-12, 0.10) and not spot.within(0.9, 0.10)
    summary = spot.summarize([_record(1, None, 2.0, failure={"kind": "crash", "message": "child exited with -11"})])
    assert summary == {"n_records": 1, "n_measured": 0, "n_correct": 0, "n_ok": 0, "failures": {"crash": 1}}


def test_markdown_has_a_line_per_pair_and_the_summary():
    records = _synthetic_records()
    text = spot.markdown(records, spot.summarize(records), ["# title"])
    table = [line for line in text.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |") or line.startswith("| 3 |")]
    assert len(table) == len(records)
    assert "| share_theirs_in_our_ci | 0.400 |" in text and "| spearman | 0.103 |" in text


def test_backend_flags_round_trip():
    torch = pytest.importorskip("torch")
    before = spot.read_flags(torch)
    try:
        torch.backends.cudnn.benchmark = not before["cudnn.benchmark"]
        torch.backends.cuda.matmul.allow_tf32 = True
        assert spot.read_flags(torch) != before
        spot.apply_flags(torch, before)
        assert spot.read_flags(torch) == before
    finally:
        spot.apply_flags(torch, before)
