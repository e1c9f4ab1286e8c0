"""The output check for real files, without a GPU: tolerance rules, chunked comparison, precision
explanations and Model/ModelNew parameter differences (the GPU side is in test_measure_kernelbench_gpu.py)."""

from __future__ import annotations

import numpy as np
import pytest

from kernelcast import cli
from kernelcast.kernels_runtime import timing
from kernelcast.kernels_runtime.measure import measurement_notes, outcome_from_reply, prepare_request
from kernelcast.kernels_runtime.worker import parameter_difference
from kernelcast.settings import Settings, parse_settings

TRITON_DOT = "acc += tl.dot(a, b)\n"


def tf32(values: np.ndarray) -> np.ndarray:
    """fp32 values rounded to TF32's 10 explicit mantissa bits, as the tensor cores read them."""
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return rounded.view(np.float32)


def tf32_matmul_pair(inner: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """A linear layer as KernelBench sizes it (torch.rand inputs, nn.Linear's uniform ±1/√K weights), exact and in TF32."""
    rng = np.random.default_rng(3)
    a = rng.random((256, inner), dtype=np.float32)
    b = rng.uniform(-1 / np.sqrt(inner), 1 / np.sqrt(inner), (inner, 256)).astype(np.float32)
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    reduced = (tf32(a).astype(np.float64) @ tf32(b).astype(np.float64)).astype(np.float32)
    return exact, reduced


# --- tolerance rules --------------------------------------------------------------------------------


def test_auto_is_kernelbench_for_kernelbench_files_and_strict_for_kernels() -> None:
    assert timing.resolve_tolerance("auto", "pytorch").for_dtype("f32") == 1e-2
    assert timing.resolve_tolerance("auto", "triton").for_dtype("f32") == 1e-4
    assert timing.resolve_tolerance("auto", "cuda").for_dtype("f16") == 1e-2
    assert timing.resolve_tolerance("kernelbench", "cuda").for_dtype("bf16") == 1e-2
    assert timing.resolve_tolerance("strict", "pytorch").for_dtype("f32") == 1e-4
    custom = timing.resolve_tolerance("3e-3", "cuda")
    assert (custom.for_dtype("f32"), custom.for_dtype("i32")) == (3e-3, 0.0)
    assert custom.describe("f32") == "tolerance 3e-03, set by the user"


@pytest.mark.parametrize("bad", ["loose", 0, -1e-3, 2.0, True, "nan"])
def test_a_bad_tolerance_is_refused_in_words(bad: object) -> None:
    with pytest.raises(ValueError, match=r"expected auto, strict, kernelbench or a number in \(0, 1\]"):
        timing.resolve_tolerance(bad, "cuda")  # type: ignore[arg-type]


def test_the_tolerance_setting_is_typed_and_a_bad_one_falls_back_with_a_message() -> None:
    settings, problems = parse_settings({"kernelcast": {"measure": {"tolerance": "kernelbench"}}})
    assert settings.measure_tolerance == "kernelbench" and problems == []
    assert parse_settings({"measure": {"tolerance": 0.005}})[0].measure_tolerance == 0.005
    settings, problems = parse_settings({"measure": {"tolerance": "loose"}})
    assert settings.measure_tolerance == Settings().measure_tolerance == "auto"
    assert problems == [
        "setting kernelcast.measure.tolerance = 'loose' ignored: expected auto, strict, kernelbench or a number in (0, 1] "
        "(used as atol = rtol), got 'loose'"
    ]


def test_the_cli_refuses_a_bad_tolerance_before_measuring(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["measure", "nothing.py", "--tolerance", "loose"])
    assert stopped.value.code == 2
    assert "argument --tolerance: expected auto, strict, kernelbench" in capsys.readouterr().err


def test_the_tolerance_used_travels_with_the_request_and_comes_back_in_the_result() -> None:
    code = "import torch\nclass Model:\n    pass\n\ndef get_inputs():\n    return []\n"
    request = prepare_request(
        {"code": code, "language": "pytorch", "name": "Model"}, {"code": code, "language": "pytorch", "name": "Model"}
    )
    assert request["tolerance"] == {"rule": "kernelbench", "value": None}
    timing_json = {
        "speedup": 1.5,
        "ci95": [1.4, 1.6],
        "round_ratios": [1.5, 1.5],
        "reference": {"median_ms": 3.0},
        "candidate": {"median_ms": 2.0},
    }
    correctness = {"out": {"dtype": "f32", "max_abs_err": 6e-4, "relative_l2": 3e-4, "note": "within tolerance 1e-02; TF32"}}
    reply = {
        "measurement": {"timing": timing_json, "correctness": correctness, "clocks": {}, "driver": None, "gpu_name": "H100"}
        | {"gpu_short": "H100", "gpu_fingerprint": None, "versions": {}}
    }
    details = outcome_from_reply(reply, request).details
    assert details["tolerance"] == {"rule": "kernelbench", "atol_rtol": {"f32": 0.01}}
    assert measurement_notes(details) == "outputs within atol = rtol = 1e-02 (KernelBench's rule); within tolerance 1e-02; TF32"
    built = {"candidate": 'built by nvcc 13.0: NVRTC could not (catastrophic error: cannot open source file "mma.h")'}
    reply["measurement"]["built"] = built
    assert measurement_notes(outcome_from_reply(reply, request).details).endswith(f"; candidate {built['candidate']}")
    failed = outcome_from_reply({"failure": {"kind": "wrong", "message": "wrong results: ..."}}, request)
    assert failed.details["tolerance"]["atol_rtol"] == {"bf16": 0.01, "f16": 0.01, "f32": 0.01, "f64": 0.01}


# --- TF32-size errors --------------------------------------------------------------------------------


def test_a_tf32_size_error_passes_kernelbench_tolerance_and_is_named() -> None:
    exact, reduced = tf32_matmul_pair()
    tolerance = timing.Tolerance("kernelbench").for_dtype("f32")
    found = timing.compare(np, exact, reduced, tolerance)
    assert found.problem("out", exact.shape, "tolerance 1e-02") is None
    assert 1e-4 < found.max_error < 1e-1 and 1e-5 < found.relative_l2 < timing.TF32_RELATIVE_L2
    explanation = timing.precision_explanation(TRITON_DOT, found.relative_l2)
    assert explanation.startswith(f"‖err‖/‖ref‖ = {found.relative_l2:.1e}, the size TF32 gives: a Triton tl.dot on fp32 inputs")
    assert explanation.endswith("the reference's torch matmuls run in fp32 (allow_tf32 off)")


def test_the_same_error_fails_the_strict_table_and_the_reason_names_tf32() -> None:
    exact, reduced = tf32_matmul_pair()
    found = timing.compare(np, exact, reduced, timing.tolerance_for("f32"))
    assert found.problem("out", exact.shape, "tolerance 1e-04").startswith("wrong results: max abs err")
    assert "TF32" in timing.precision_explanation("tl.dot(a, b, allow_tf32=True)", found.relative_l2)


def test_precision_explains_only_what_it_plausibly_can() -> None:
    assert timing.precision_explanation(TRITON_DOT, 0.2) is None  # far beyond TF32 or half precision: a bug
    assert timing.precision_explanation("y = x + 1\n", 3e-4) is None  # no reduced-precision arithmetic in the code
    assert timing.precision_explanation("tl.dot(a, b, input_precision='ieee')", 3e-4) is None
    assert "half precision" in timing.precision_explanation("x = x.to(torch.bfloat16)\n", 5e-3)
    assert "allow TF32 here too" in timing.precision_explanation(TRITON_DOT, 3e-4, reference_tf32=True)


# --- chunked comparison --------------------------------------------------------------------------------


def test_chunks_give_the_whole_array_answer_with_indices_in_the_whole_array() -> None:
    rng = np.random.default_rng(0)
    expected = rng.standard_normal((50, 200)).astype(np.float32)
    actual = expected.copy()
    actual[37, 150] += 0.5  # the worst element, in chunk 7 of 10
    actual[3, 4] += 0.01
    fractions: list[float] = []
    chunked = timing.compare(np, expected, actual, 1e-4, chunk_elements=1000, on_chunk=fractions.append)
    whole = timing.compare(np, expected, actual, 1e-4, chunk_elements=expected.size)
    assert fractions == [step / 10 for step in range(1, 11)]
    assert (
        (chunked.bad, chunked.worst_bad_index, chunked.max_error)
        == (whole.bad, whole.worst_bad_index, whole.max_error)
        == (2, 37 * 200 + 150, pytest.approx(0.5))
    )
    assert chunked.relative_l2 == pytest.approx(whole.relative_l2)
    assert (
        chunked.problem("out", expected.shape, "tolerance 1e-04")
        == "wrong results: max abs err 5.0e-01 at index (37, 150) (tolerance 1e-04)"
    )


def test_unwritten_elements_are_found_in_a_late_chunk() -> None:
    expected = np.arange(10_000, dtype=np.float32)
    actual = expected.copy()
    actual[9_990:] = np.nan
    found = timing.compare(np, expected, actual, 1e-4, chunk_elements=999)
    assert (found.unwritten, found.first_unwritten) == (10, 9_990)
    assert "10 NaN elements where the reference has numbers (first at index 9990)" in found.problem("out", expected.shape, "")


def test_an_empty_output_and_a_scalar_are_compared() -> None:
    assert timing.compare(np, np.zeros(0), np.zeros(0), 1e-4).problem("out", (0,), "") is None
    found = timing.compare(np, np.array(2.0), np.array(2.5), 1e-2)
    assert found.problem("out", (), "tolerance 1e-02") == "wrong results: max abs err 5.0e-01 at index 0 (tolerance 1e-02)"


# --- Model and ModelNew built from one seed -------------------------------------------------------------


def test_parameters_equal_after_the_same_seed_are_no_difference() -> None:
    weights = {"linear.weight": np.ones((4, 3)), "linear.bias": np.zeros(4)}
    assert parameter_difference(weights, {name: value.copy() for name, value in weights.items()}) is None
    assert parameter_difference({}, {}) is None


def test_parameters_a_model_new_initialises_its_own_way_are_named() -> None:
    reference = {"linear.weight": np.ones((4, 3)), "linear.bias": np.zeros(4)}
    candidate = {"weight": np.full((4, 3), 1.25), "bias": np.zeros(4)}
    message = parameter_difference(reference, candidate)
    assert message == (
        "ModelNew's parameters differ from Model's although both were built right after torch.manual_seed(42), as KernelBench "
        "builds them: weight [4, 3] differs from linear.weight by up to 0.25 (ModelNew initialises them its own way)"
    )


def test_parameters_of_other_shapes_are_listed() -> None:
    message = parameter_difference({"linear.weight": np.ones((4, 3))}, {"weight": np.ones((3, 4)), "scale": np.ones(1)})
    assert (
        message
        == "ModelNew's parameters differ in shape from Model's: Model has linear.weight [4, 3]; ModelNew has weight [3, 4], scale [1]"
    )
