"""The probe of the kinds read by the weights alone: each source forecast by lines fitted on the others."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_kernelbench_prior import COMPILED, HARDWARE, PROBLEM, TRITON_SOLUTION

from kernelcast.models.service.calibrated import Forecaster
from kernelcast.wire import ForecastRequest, KernelSide, LabelledPair, write_pairs
from workshop.training import weights_only_probe


def _pair(source: str, n: int, candidate: KernelSide, speedup: float) -> LabelledPair:
    request = ForecastRequest(KernelSide(PROBLEM, "pytorch", "Model"), candidate, HARDWARE, None)
    return LabelledPair(f"{source}:{n}", "inductor-vs-eager", request, speedup, op=f"{source}/relu", group=f"{source}/{n}", source=source)


def _rows(printed: str) -> dict[str, list[str]]:
    return {line.split()[1]: line.split()[2:] for line in printed.splitlines() if line.startswith("source: ")}


def test_each_source_is_forecast_by_lines_fitted_on_the_others(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Sources a, b and c measured torch.compile 2x faster than eager, d 2x slower: held out, a, b and c
    # are read faster by lines fitted on the rest (two of three faster), d wrongly so. A solution with
    # its own kernel is a kind the trees read, and is left out.
    compiled = KernelSide(COMPILED, "pytorch", "ModelNew")
    pairs = [_pair(source, n, compiled, 2.0 + 0.01 * n) for source in "abc" for n in range(8)]
    pairs += [_pair("d", n, compiled, 0.5 - 0.01 * n) for n in range(8)]
    pairs.append(_pair("a", 99, KernelSide(TRITON_SOLUTION, "triton", "ModelNew"), 3.0))
    path = tmp_path / "pairs.jsonl"
    write_pairs(path, pairs)
    assert weights_only_probe.main(["--pairs", str(path)]) == 0
    rows = _rows(capsys.readouterr().out)
    assert set(rows) == {"a", "b", "c", "d"}
    assert [rows[source][0] for source in "abcd"] == ["8"] * 4, "N: the solution's pair is left out"
    assert [float(rows[source][1]) for source in "abcd"] == [1.0, 1.0, 1.0, 0.0], "direction accuracy"


def test_a_source_held_out_is_forecast_the_same_whatever_it_measured() -> None:
    compiled = KernelSide(COMPILED, "pytorch", "ModelNew")
    pairs = [_pair(source, n, compiled, 2.0 + 0.01 * n) for source in "abc" for n in range(8)]
    faster = weights_only_probe.held_out_forecasts(pairs, Forecaster(["embedded"]))
    slower = weights_only_probe.held_out_forecasts(
        [dataclasses.replace(pair, speedup=0.25) if pair.source == "c" else pair for pair in pairs], Forecaster(["embedded"])
    )
    for pair, before, after in zip(pairs, faster, slower):
        if pair.source == "c":
            assert after.probabilities == before.probabilities, "c's own labels never reach its forecast"
        else:
            assert sum(after.probabilities[4:]) < sum(before.probabilities[4:]), "a and b read c's labels"


def test_pairs_of_one_source_are_refused_in_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pairs.jsonl"
    write_pairs(path, [_pair("a", n, KernelSide(COMPILED, "pytorch", "ModelNew"), 2.0) for n in range(3)])
    assert weights_only_probe.main(["--pairs", str(path)]) == 2
    assert "fewer than two sources: none to hold out" in capsys.readouterr().err
