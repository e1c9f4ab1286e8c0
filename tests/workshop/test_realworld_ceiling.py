"""`python -m workshop realworld ceiling`: the direction accuracy a source's labels allow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernelcast.wire import ForecastRequest, KernelSide, LabelledPair, write_pairs
from workshop.__main__ import build_parser
from workshop.realworld import ceiling

REQUEST = ForecastRequest(KernelSide("x = 1", "pytorch", "Model"), KernelSide("x = 2", "pytorch", "Model"), {})


def test_labels_far_apart_for_their_noise_are_all_forecastable() -> None:
    generator = np.random.default_rng(0)
    log2_s = generator.choice([-1, 1], 400) * generator.uniform(0.5, 3.0, 400)
    assert ceiling.oracle_direction_accuracy(log2_s, np.full(400, 0.01)) > 0.99


def test_labels_of_kernels_equally_fast_are_a_coin_flip() -> None:
    """Two texts alike but for comments measure apart by their noise alone: no oracle tells which way."""
    log2_s = np.random.default_rng(1).normal(0.0, 0.3, 1500)
    assert 0.45 < ceiling.oracle_direction_accuracy(log2_s, np.full(1500, 0.3)) < 0.6


def test_the_estimate_agrees_with_an_oracle_that_knows_the_truth() -> None:
    """Half the pairs truly alike, half far apart, noise of several sizes: the estimate from the labels
    alone lands near how often the true sign and the measured one agree."""
    generator = np.random.default_rng(2)
    count = 3000
    truth = np.where(generator.random(count) < 0.5, generator.normal(0.0, 0.05, count), generator.normal(0.0, 1.5, count))
    sd = generator.choice([0.02, 0.1, 0.4], count)
    labels = truth + generator.normal(0.0, 1.0, count) * sd
    counted = np.abs(labels) >= 0.1
    known = float(np.mean((truth > 0)[counted] == (labels > 0)[counted]))
    assert known < 0.9
    assert abs(ceiling.oracle_direction_accuracy(labels, sd) - known) < 0.03


def test_a_label_without_an_interval_is_counted_not_guessed() -> None:
    pairs = [
        LabelledPair("a", "variant", REQUEST, 2.0, ci95=(1.9, 2.1), source="one"),
        LabelledPair("b", "variant", REQUEST, 0.5, ci95=(0.45, 0.55), source="one"),
        LabelledPair("c", "variant", REQUEST, 1.02, ci95=(0.98, 1.06), source="one"),
        LabelledPair("d", "variant", REQUEST, 3.0, source="two"),
    ]
    table = ceiling.ceilings(pairs)
    assert table["one"]["pairs"] == 3 and table["one"]["direction_pairs"] == 2 and table["one"]["without_interval"] == 0
    assert table["one"]["oracle_direction"] > 0.99
    assert table["two"] == {"pairs": 0, "direction_pairs": 0, "without_interval": 1, "median_sd_log2": None, "oracle_direction": None}
    assert ceiling.label_sd((1.0, 1.0)) == ceiling.SD_FLOOR_LOG2 and ceiling.label_sd((0.0, 1.0)) is None


def test_the_command_prints_each_source_and_their_mean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pairs.jsonl"
    octaves = range(-2, 3)
    intervals = [(2.0 ** (i - 0.1), 2.0 ** (i + 0.1)) for i in octaves]
    pairs = [LabelledPair(f"{s}{i}", "variant", REQUEST, 2.0**i, ci95=c, source=s) for s in ("p", "q") for i, c in zip(octaves, intervals)]
    write_pairs(path, pairs)
    args = build_parser().parse_args(["realworld", "ceiling", str(path)])
    assert args.run(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:3]] == ["p", "q"] and lines[-1].startswith("mean of 2 sources")
    args = build_parser().parse_args(["realworld", "ceiling", str(path), "--json"])
    assert args.run(args) == 0
    assert json.loads(capsys.readouterr().out)["q"]["direction_pairs"] == 4
