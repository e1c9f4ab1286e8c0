"""The spreads local learning assumes, measured (workshop/training/local_learning.py), and its replay:
sources simulated with the three levels of miss give those spreads back, learning from a biased
source's first measurements makes its other forecasts better, and one measurement against a
reference makes the next forecasts against it better."""

from __future__ import annotations

import numpy as np
import pytest

from kernelcast.models.service import calibration
from kernelcast.wire import normal_bin_probabilities
from workshop.training import local_learning


def _source(bias: float, reference_sd: float, pair_sd: float, references: int, per_reference: int, seed: int) -> local_learning.Source:
    """Forecasts N(m, 0.8) of outcomes m + bias + a reference's miss + a pair's miss, m uniform."""
    rng = np.random.default_rng(seed)
    rows, speedups, keys = [], [], []
    for reference in range(references):
        shared = rng.normal(0.0, reference_sd)
        for _ in range(per_reference):
            centre = rng.uniform(-1.5, 1.5)
            rows.append(normal_bin_probabilities(centre, 0.8))
            speedups.append(2.0 ** (centre + bias + shared + rng.normal(0.0, pair_sd)))
            keys.append(f"{seed}/{reference}")
    return local_learning.Source(np.array(rows), np.array(speedups), keys)


def test_the_three_spreads_come_back_from_sources_made_with_them() -> None:
    sources = {f"s{i}": _source(bias, 0.6, 0.3, 120, 4, seed=i) for i, bias in enumerate((0.4, -0.4, 0.4, -0.4))}
    found = local_learning.spreads(sources)
    # The misses are read off the forecasts' medians, a little off their centres: hence the margins.
    assert found["LOCAL_BIAS_SD"] == pytest.approx(0.4, abs=0.08)
    assert found["REFERENCE_MISS_SD"] == pytest.approx(0.6, abs=0.1)
    assert found["PAIR_MISS_SD"] == pytest.approx(0.3, abs=0.08)


def test_learning_from_a_biased_source_s_first_measurements_helps_its_others() -> None:
    biased = _source(-1.0, calibration.REFERENCE_MISS_SD / 2, calibration.PAIR_MISS_SD / 2, 200, 3, seed=7)
    result = local_learning.replay(biased, 100)
    assert result is not None
    without, learnt = result["without"], result["with"]
    assert learnt[0] > without[0] + 0.05, "direction accuracy"
    assert learnt[1] < without[1] - 0.05, "direction ECE"
    unbiased = local_learning.replay(_source(0.0, calibration.REFERENCE_MISS_SD, calibration.PAIR_MISS_SD, 200, 3, seed=8), 30)
    assert unbiased is not None and unbiased["with"][0] == pytest.approx(unbiased["without"][0], abs=0.02)


def test_one_measurement_against_each_reference_helps_the_next_against_it() -> None:
    # Each reference misses by its own octave or so, as real ones do: one pair of each measured
    # tells most of it to the reference's other pairs.
    source = _source(0.0, calibration.REFERENCE_MISS_SD, calibration.PAIR_MISS_SD / 2, 150, 4, seed=9)
    result = local_learning.replay_one_each(source)
    assert result is not None
    without, learnt = result["without"], result["with"]
    assert learnt[0] > without[0] + 0.05 and learnt[2] > without[2] + 0.05, "direction accuracy, within one bin"
    assert learnt[1] < without[1] + 0.01, "direction ECE"
