"""The shared definitions: bins, quantiles, wording, request parsing."""

from __future__ import annotations

import math

import pytest

from kernelcast.wire import (
    BIN_WORDS,
    Forecast,
    ForecastRequest,
    Measurement,
    bin_of_speedup,
    normal_bin_probabilities,
)


@pytest.mark.parametrize(
    "speedup, expected",
    [
        (0.1, 1),
        (0.25, 2),
        (0.49, 2),
        (0.5, 3),
        (0.7071, 3),
        (0.7072, 4),
        (0.99, 4),
        (1.0, 5),
        (1.4142, 5),
        (1.4143, 6),
        (2.0, 7),
        (3.99, 7),
        (4.0, 8),
        (1e6, 8),
    ],
)
def test_bins_follow_the_forecast_table(speedup: float, expected: int) -> None:
    assert bin_of_speedup(speedup) == expected


def test_bins_are_symmetric_under_swapping_sides() -> None:
    for speedup in (0.3, 0.6, 0.8, 1.2, 1.7, 3.0, 5.0):
        assert bin_of_speedup(speedup) + bin_of_speedup(1 / speedup) == 9


def test_bad_speedups_are_refused() -> None:
    for bad in (0, -1, math.inf, math.nan):
        with pytest.raises(ValueError):
            bin_of_speedup(bad)


def test_median_and_interval_come_from_the_distribution() -> None:
    forecast = Forecast.from_probabilities(normal_bin_probabilities(-0.5, 0.2))
    assert forecast.direction == "slower" and forecast.confidence > 0.98 and not forecast.defer
    assert forecast.speedup == pytest.approx(2**-0.5, rel=0.05)
    low, high = forecast.interval
    assert low < forecast.speedup < high
    assert forecast.message() == f"likely 1.4× slower than reference (conf {forecast.confidence:.2f})"
    assert forecast.inlay_label() == f"⏱ 1.4× slower · {round(100 * forecast.confidence)}%"


def test_wide_forecasts_defer_with_an_interval() -> None:
    forecast = Forecast.from_probabilities(normal_bin_probabilities(0.1, 1.5))
    assert forecast.defer
    assert forecast.message().startswith("uncertain: ") and forecast.message().endswith("× · measure?")
    assert forecast.inlay_label() == "⏱ uncertain · measure?"
    assert not forecast.with_threshold(0.5).defer


def test_about_the_same() -> None:
    forecast = Forecast.from_probabilities(normal_bin_probabilities(0.0, 0.05), threshold=0.5)
    assert forecast.message().startswith("about the same as reference (conf ")


def test_labels_fit_thirty_characters() -> None:
    for mean in (-3, -1.2, -0.3, 0.0, 0.4, 1.1, 2.5):
        for spread in (0.05, 0.3, 2.0):
            assert len(Forecast.from_probabilities(normal_bin_probabilities(mean, spread)).inlay_label()) <= 30
    assert len(BIN_WORDS) == 8


def test_json_round_trip() -> None:
    forecast = Forecast.from_probabilities(normal_bin_probabilities(0.7, 0.4), provenance={"backend": "x"})
    again = Forecast.from_json(forecast.to_json())
    assert again == forecast
    assert forecast.to_json()["bin"] == 6


def test_measurement_message() -> None:
    measured = Measurement(speedup=1 / 1.37, ci95=(0.7222, 0.7378), gpu="H100", t_reference_ms=1.0, t_candidate_ms=1.37)
    assert measured.message() == "measured 1.37× slower ±1.1% (H100)"
    assert Measurement.from_json(measured.to_json()) == measured


def test_request_parsing_explains_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="needs 'candidate'"):
        ForecastRequest.from_json({"reference": {"code": "x"}})
    with pytest.raises(ValueError, match="language must be one of cuda, triton, pytorch, got 'Rust'"):
        ForecastRequest.from_json({"reference": {"code": "x"}, "candidate": {"code": "y", "language": "Rust"}})
    with pytest.raises(ValueError, match="got 3"):
        ForecastRequest.from_json({"reference": {"code": "x"}, "candidate": {"code": "y", "language": 3}})
    spelled = ForecastRequest.from_json({"reference": {"code": "x", "language": "Python"}, "candidate": {"code": "y", "language": "CUDA"}})
    assert (spelled.reference.language, spelled.candidate.language) == ("pytorch", "cuda"), "as people write them"
    with pytest.raises(ValueError, match="threshold"):
        ForecastRequest.from_json({"reference": {"code": "x"}, "candidate": {"code": "y"}, "threshold": 2})
