"""The calibration layer on synthetic forecasters whose miscalibration is known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernelcast.evaluation import metrics
from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.models.service import calibration
from kernelcast.wire import ForecastRequest, KernelSide, normal_bin_probabilities

RNG_SEED = 7


def _gaussian_forecaster(
    n: int, true_sd: float, claimed_sd: float, bias: float = 0.0, seed: int = RNG_SEED
) -> tuple[np.ndarray, np.ndarray]:
    """Forecasts N(μ + bias, claimed_sd) of outcomes s ~ N(μ, true_sd): over-confident when claimed < true."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-2.0, 2.0, n)
    outcomes = centres + rng.normal(0.0, true_sd, n)
    probabilities = np.array([normal_bin_probabilities(m + bias, claimed_sd) for m in centres])
    return probabilities, 2.0**outcomes


def _direction_ece(probabilities: np.ndarray, speedups: np.ndarray) -> float:
    return metrics(probabilities, speedups)["direction_ece"]


def test_an_over_confident_forecaster_gets_the_temperature_that_fixes_it() -> None:
    probabilities, speedups = _gaussian_forecaster(4000, true_sd=1.0, claimed_sd=0.4)
    temperature = calibration.fit_temperature(probabilities, speedups)
    # p^(1/T) of a normal density is a normal with sd·√T: T ≈ (1.0 / 0.4)² = 6.25, up to binning.
    assert 4.5 < temperature.value < 8.0 and temperature.fitted_on == 4000
    before = _direction_ece(probabilities, speedups)
    after = _direction_ece(temperature.apply_rows(probabilities), speedups)
    assert before > 0.08 and after < 0.03


def test_a_calibrated_forecaster_keeps_temperature_one_and_an_under_confident_one_is_sharpened() -> None:
    calibrated = calibration.fit_temperature(*_gaussian_forecaster(4000, true_sd=0.6, claimed_sd=0.6))
    assert calibrated.value == pytest.approx(1.0, abs=0.15)
    under = calibration.fit_temperature(*_gaussian_forecaster(4000, true_sd=0.4, claimed_sd=1.0))
    assert under.value < 0.5


def test_isotonic_cdf_map_fixes_direction_confidence_and_keeps_distributions() -> None:
    probabilities, speedups = _gaussian_forecaster(4000, true_sd=1.0, claimed_sd=0.3)
    fitted = calibration.fit_isotonic(probabilities, speedups)
    calibrated = fitted.apply_rows(probabilities)
    assert np.allclose(calibrated.sum(axis=1), 1.0) and (calibrated >= 0).all()
    assert np.all(np.diff(fitted.knots_y) >= 0) and fitted.knots_y[0] == 0.0 and fitted.knots_y[-1] == 1.0
    assert _direction_ece(probabilities, speedups) > 0.1 and _direction_ece(calibrated, speedups) < 0.03


def test_isotonic_map_calibrates_a_swapped_pair_into_the_swapped_forecast() -> None:
    # Fitted on one-sided data (the forecaster leans "faster"), the map must still commute
    # with swapping the sides, or the editor would show both kernels faster than each other.
    probabilities, speedups = _gaussian_forecaster(3000, true_sd=0.8, claimed_sd=0.4, bias=0.7)
    fitted = calibration.fit_isotonic(probabilities, speedups)
    assert fitted.fitted_on == 3000
    rows = probabilities[:50]
    assert np.allclose(fitted.apply_rows(rows[:, ::-1]), fitted.apply_rows(rows)[:, ::-1], atol=1e-6)


def test_shift_moves_the_median_by_the_bias_and_zero_is_the_identity() -> None:
    rows = np.array([normal_bin_probabilities(0.2, 0.5)])
    assert np.allclose(calibration.shift(rows, 0.0), rows)
    moved = calibration.shift(rows, 0.5)
    assert calibration.median_log2(moved)[0] == pytest.approx(calibration.median_log2(rows)[0] + 0.5, abs=1e-6)
    assert calibration.shift(rows, 0.5).sum() == pytest.approx(1.0)


def test_table_without_files_is_the_identity(tmp_path: Path) -> None:
    table = calibration.CalibrationTable(tmp_path / "none.json", local=tmp_path / "local.json")
    probabilities = [0.1, 0.1, 0.1, 0.2, 0.2, 0.1, 0.1, 0.1]
    calibrated, identifier = table.calibrate("embedded", "sm9x", probabilities)
    assert identifier == calibration.IDENTITY_ID and calibrated == pytest.approx(probabilities)
    assert table.version == calibration.IDENTITY_ID and not table.is_local("embedded", "sm9x")


def test_shipped_maps_round_trip_through_json(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    calibration.write_shipped({"embedded/sm9x": calibration.Temperature(2.0, 100)}, path)
    table = calibration.CalibrationTable(path, local=tmp_path / "local.json")
    calibrated, identifier = table.calibrate("embedded", "sm9x", normal_bin_probabilities(1.0, 0.3))
    assert identifier == "T2.000-n100"
    assert max(calibrated) < max(normal_bin_probabilities(1.0, 0.3))  # flattened
    assert table.calibrate("embedded", "sm8x", [1 / 8] * 8)[1] == calibration.IDENTITY_ID


def _pooled(misses_by_reference: list[list[float]]) -> float:
    """The bias the model of local learning gives, written out: each reference's mean miss weighed by
    its variance, against the prior's."""
    weights = [1 / (calibration.REFERENCE_MISS_SD**2 + calibration.PAIR_MISS_SD**2 / len(m)) for m in misses_by_reference]
    weighted = sum(w * float(np.mean(m)) for w, m in zip(weights, misses_by_reference))
    return weighted / (sum(weights) + 1 / calibration.LOCAL_BIAS_SD**2)


def test_local_learning_finds_the_bias_of_this_gpu_persists_it_and_resets(tmp_path: Path) -> None:
    local = tmp_path / "local.json"
    table = calibration.CalibrationTable(tmp_path / "none.json", local=local)
    before = table.version
    # The backend says s ≈ 0 (median 0); this GPU measures s = 0.6 against each of 15 references.
    observations = [(normal_bin_probabilities(0.0, 0.4), 2.0**0.6, f"reference {i}") for i in range(15)]
    correction = calibration.update_local(observations, "embedded", "sm9x", local, table)
    assert correction.bias_log2 == pytest.approx(_pooled([[0.6]] * 15), abs=1e-3)
    assert 0.15 < correction.bias_log2 < 0.6  # shrunk toward 0 by the prior (LOCAL_BIAS_SD), not to it
    assert correction.direction_temperature is None  # too few pairs for a temperature
    assert json.loads(local.read_text())["embedded/sm9x"]["fitted_on"] == 15
    assert table.is_local("embedded", "sm9x") and not table.is_local("embedded", "sm8x")
    assert table.version != before
    calibrated, identifier = table.calibrate("embedded", "sm9x", normal_bin_probabilities(0.0, 0.4))
    assert identifier.startswith(f"local+{correction.bias_log2:.3f}")
    assert calibration.median_log2(np.array([calibrated]))[0] == pytest.approx(correction.bias_log2, abs=0.01)
    assert calibration.reset_local(local) and not table.is_local("embedded", "sm9x")
    assert not calibration.reset_local(local)


def test_local_bias_counts_references_not_measurements() -> None:
    # Fifteen kernels measured against one reference, all 1.5 octaves above their forecasts, say
    # less about the next reference's kernels than fifteen references measured once each.
    forecast = normal_bin_probabilities(0.0, 0.4)
    one_reference = calibration.fit_local([(forecast, 2.0**1.5, "one")] * 15).bias_log2
    fifteen = calibration.fit_local([(forecast, 2.0**1.5, f"reference {i}") for i in range(15)]).bias_log2
    assert one_reference == pytest.approx(_pooled([[1.5] * 15]), abs=1e-3)
    assert 0 < one_reference < 0.15 and 3 * one_reference < fifteen
    # Misses beyond MISS_CLIP octaves count as MISS_CLIP: one wild measurement cannot move it further.
    wild = calibration.fit_local([(forecast, 2.0**12, "one")]).bias_log2
    assert wild == pytest.approx(_pooled([[calibration.MISS_CLIP]]), abs=1e-3)


def test_local_direction_temperature_with_enough_pairs_widens_an_over_confident_backend(tmp_path: Path) -> None:
    probabilities, speedups = _gaussian_forecaster(200, true_sd=1.0, claimed_sd=0.4)
    local = tmp_path / "local.json"
    no_shipped_map = calibration.CalibrationTable(tmp_path / "none.json", local=local)
    observations = [(p, s, f"reference {i}") for i, (p, s) in enumerate(zip(probabilities, speedups))]
    correction = calibration.update_local(observations, "embedded", "sm9x", local, no_shipped_map)
    assert abs(correction.bias_log2) < 0.15 and correction.direction_temperature is not None
    assert correction.direction_temperature > 1.5
    fresh, fresh_speedups = _gaussian_forecaster(2000, true_sd=1.0, claimed_sd=0.4, seed=RNG_SEED + 1)
    learnt = np.array([no_shipped_map.calibrate("embedded", "sm9x", row)[0] for row in fresh])
    assert _direction_ece(learnt, fresh_speedups) < _direction_ece(fresh, fresh_speedups) / 2


def test_a_measured_reference_s_own_miss_moves_and_narrows_the_next_forecast_against_it(tmp_path: Path) -> None:
    local = tmp_path / "local.json"
    table = calibration.CalibrationTable(tmp_path / "none.json", local=local)
    forecast = normal_bin_probabilities(0.0, 1.0)
    # One kernel measured 1.5 octaves above its forecast against "a"; against nine others as forecast.
    observations = [(forecast, 2.0**1.5, "a")] + [(forecast, 1.0, f"other {i}") for i in range(9)]
    correction = calibration.update_local(observations, "embedded", "sm9x", local, table)
    own, count = correction.references["a"]
    share = calibration.REFERENCE_MISS_SD**2 / (calibration.REFERENCE_MISS_SD**2 + calibration.PAIR_MISS_SD**2)
    assert count == 1 and own == pytest.approx(share * (1.5 - correction.bias_log2), abs=1e-3)
    assert 0.5 < own < 1.5 and correction.references["other 0"][0] < 0

    against_a, identifier = table.calibrate("embedded", "sm9x", forecast, "a")
    assert identifier.endswith(f"+ref{own:+.3f}-n1")
    elsewhere, plain = table.calibrate("embedded", "sm9x", forecast, "never measured")
    assert "+ref" not in plain and plain == table.calibrate("embedded", "sm9x", forecast)[1]
    median = calibration.median_log2(np.array([against_a, elsewhere]))
    assert median[0] - median[1] == pytest.approx(own, abs=0.02)
    # Narrower: a tenth more of its mass within half an octave of its median.
    assert _central_mass(against_a, median[0]) > 1.1 * _central_mass(elsewhere, median[1])


def _central_mass(row: list[float], median: float) -> float:
    """P(|s − median| < 0.5), reading the CDF as linear within bins."""
    cdf = np.concatenate([[0.0], np.cumsum(row)])
    edges = [-3.0, *calibration.LOG2_EDGES, 3.0]
    return float(np.interp(median + 0.5, edges, cdf) - np.interp(median - 0.5, edges, cdf))


def test_each_measurement_against_a_reference_narrows_less_and_never_below_the_pair_s_own_miss() -> None:
    scales = [calibration.reference_scale(n) for n in (0, 1, 2, 5, 1000)]
    assert scales[0] == pytest.approx(1.0) and all(a > b for a, b in zip(scales, scales[1:]))
    floor = calibration.PAIR_MISS_SD / np.hypot(calibration.REFERENCE_MISS_SD, calibration.PAIR_MISS_SD)
    assert scales[-1] == pytest.approx(floor, abs=1e-3)
    # A measurement kept before references were keyed has none to learn.
    assert calibration.fit_local([(normal_bin_probabilities(0.0, 1.0), 4.0, "")]).references == {}


def test_the_direction_temperature_moves_confidence_and_keeps_each_side_s_shape() -> None:
    rows = np.array([normal_bin_probabilities(0.4, 0.5), normal_bin_probabilities(-1.0, 0.8)])
    tempered = calibration.with_direction_temperature(rows, 2.0)
    assert tempered.sum(axis=1) == pytest.approx([1.0, 1.0])
    for before, after in zip(rows, tempered):
        p, q = before[4:].sum(), after[4:].sum()
        assert np.log(q / (1 - q)) == pytest.approx(np.log(p / (1 - p)) / 2.0)
        assert after[4:] / q == pytest.approx(before[4:] / p) and after[:4] / (1 - q) == pytest.approx(before[:4] / (1 - p))
    assert calibration.with_direction_temperature(rows, 1.0) == pytest.approx(rows)


def test_a_broken_local_file_is_ignored(tmp_path: Path) -> None:
    local = tmp_path / "local.json"
    local.write_text("{not json")
    table = calibration.CalibrationTable(tmp_path / "none.json", local=local)
    assert table.calibrate("embedded", "sm9x", [1 / 8] * 8)[1] == calibration.IDENTITY_ID


def test_forecast_provenance_says_when_local_learning_was_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelcast.models.service.calibrated import Forecaster

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    hardware = SPECS["H100-SXM"].to_json()
    request = ForecastRequest(KernelSide("__global__ void k() {}", "cuda"), KernelSide("__global__ void k() { }", "cuda"), hardware)
    forecaster = Forecaster(["embedded"])
    assert forecaster.forecast(request).provenance["local_learning"] is False
    calibration.update_local([(normal_bin_probabilities(0.0, 0.4), 1.5, "a reference")] * 3, "embedded", "sm9x")
    forecast = forecaster.forecast(request)
    assert forecast.provenance["local_learning"] is True and "local" in forecast.provenance["calibration_id"]
