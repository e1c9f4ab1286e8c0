"""Typed settings and the embedded backend's honesty."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from lsp_support import EXAMPLES

from kernelcast.analysis import analyse_text, build_request, forecast_key, measurement_sides, problem_sizes
from kernelcast.kernels_runtime.hardware import SPECS, lookup
from kernelcast.kernels_runtime.occupancy import occupancy
from kernelcast.kernels_runtime.source.launch_spec import kernelbench_problem
from kernelcast.models.embedded.backend import EmbeddedBackend
from kernelcast.settings import Settings, parse_settings
from kernelcast.wire import ASSUMED_SIZES, Forecast, ForecastRequest, KernelSide


def test_settings_nested_like_vscode_and_flat_defaults() -> None:
    settings, problems = parse_settings(
        {"kernelcast": {"inlayHints": {"enable": False}, "forecaster": {"url": "http://127.0.0.1:1"}, "debounceMs": 50, "python": "/x"}}
    )
    assert problems == []
    assert settings.inlay_hints is False and settings.forecaster_url == "http://127.0.0.1:1" and settings.debounce_ms == 50
    assert settings.hover is True


def test_bad_setting_values_fall_back_with_a_message() -> None:
    settings, problems = parse_settings({"confidenceThreshold": 3, "exclude": "*.cu", "enable": "yes"})
    assert settings == Settings()
    assert len(problems) == 3
    assert any("confidenceThreshold" in p and "0.5 to 1" in p for p in problems)
    settings, problems = parse_settings(["not", "an", "object"])
    assert settings == Settings() and problems


def test_excludes_match_paths_and_names() -> None:
    settings, _ = parse_settings({"exclude": ["*/vendor/*", "*_test.cu"]})
    assert settings.excludes("/w/vendor/a.cu") and settings.excludes("/w/k_test.cu") and not settings.excludes("/w/k.cu")


def test_gpu_names() -> None:
    assert lookup("NVIDIA H100 80GB HBM3").key == "H100-SXM"
    assert lookup("h100-pcie").key == "H100-PCIe"
    with pytest.raises(KeyError, match="known targets"):
        lookup("Voodoo2")
    # The leaderboards' GPUs, as NVML and cloud consoles spell them.
    spelled = ("Tesla T4", "NVIDIA L4", "Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-40GB")
    assert [lookup(name).key for name in spelled] == ["T4", "L4", "V100", "A100"]
    with pytest.raises(KeyError, match="unknown GPU 'NVIDIA L40'"):
        lookup("NVIDIA L40")  # not the L4 it starts with


def test_the_extension_offers_every_gpu_of_the_table() -> None:
    package = json.loads((Path(__file__).parents[1] / "vscode-extension" / "package.json").read_text())
    setting = package["contributes"]["configuration"]["properties"]["kernelcast.targetGpu"]
    assert setting["enum"] == ["", *SPECS] and len(setting["enumDescriptions"]) == len(setting["enum"])


def test_a_turing_sm_holds_a_thousand_threads() -> None:
    full = occupancy(SPECS["T4"], 1024, 32, 0)
    assert (full.active_blocks_per_sm, full.fraction) == (1, 1.0)
    one_warp = occupancy(SPECS["T4"], 32, 32, 0)
    assert (one_warp.limited_by, one_warp.fraction) == ("blocks", 0.5), "16 blocks of one warp fill half of its 32 warps"


NAIVE = """__global__ void t(const float* in, float* out, int n) {
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8) out[x * n + (y + j)] = in[(y + j) * n + x];
}"""
TILED = """__global__ void t(const float* in, float* out, int n) {
  __shared__ float tile[32][33];
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
  __syncthreads();
  for (int j = 0; j < 32; j += 8) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}"""


def _forecast(reference: str, candidate: str) -> Forecast:
    hardware = SPECS["H100-SXM"].to_json()
    raw = EmbeddedBackend().predict(ForecastRequest(KernelSide(reference, "cuda"), KernelSide(candidate, "cuda"), hardware))
    return Forecast.from_probabilities(raw.probabilities, provenance=raw.details)


def test_embedded_is_antisymmetric() -> None:
    forward, backward = _forecast(NAIVE, TILED), _forecast(TILED, NAIVE)
    assert forward.speedup == pytest.approx(1 / backward.speedup, rel=1e-6)
    assert forward.probabilities == pytest.approx(list(reversed(backward.probabilities)))


def test_embedded_reads_the_tiling_edit_the_right_way() -> None:
    assert _forecast(NAIVE, TILED).direction == "faster"


def test_embedded_is_not_confident_about_small_unknown_changes() -> None:
    renamed = NAIVE.replace("int x", "int col").replace("x *", "col *").replace("+ x]", "+ col]")
    forecast = _forecast(NAIVE, renamed)
    assert forecast.defer and 0.5 <= forecast.confidence < 0.6


def test_the_forecaster_sees_each_side_with_its_launch_pragma_and_macros() -> None:
    """The corpus shows the model whole sources and launch lists; the editor's kernel text alone
    would hide `#define TILE 16` and the pragma's grid, and the forecast would miss them."""
    hardware = SPECS["H100-SXM"]
    path = EXAMPLES / "matmul_tiled.cu"

    def request_for(text: str) -> ForecastRequest:
        analysis = analyse_text(path.as_uri(), 1, text, path, EXAMPLES, Settings(), hardware)
        result = analysis.results[0]
        return build_request(analysis, result, problem_sizes(result, path, EXAMPLES), 0.8)

    request = request_for(path.read_text())
    for side in (request.candidate, request.reference):
        (launch,) = side.facts["launches"]
        assert launch["grid"] == [128, 128] and launch["block"] == [16, 16] and launch["bytes"] == 3 * 2048 * 2048 * 4
        assert launch["output_bytes"] == 2048 * 2048 * 4
    assert request.candidate.code.startswith("#define TILE 16\n") and "#define" not in request.reference.code
    assert request.problem == {"N": 2048, "dtype": "f32"}  # the precision, as the corpus names problems
    assert "dtype" not in request_for(path.read_text().replace("f32[", "f16[")).problem  # a precision edit has none
    backend = SimpleNamespace(name="embedded", model_id="m", version="2", calibration_version="c")
    wider = request_for(path.read_text().replace("#define TILE 16", "#define TILE 32"))
    assert forecast_key(wider, backend) != forecast_key(request, backend)


def test_a_reference_file_is_read_once_per_text_version_but_afresh_for_measuring(tmp_path: Path) -> None:
    for name in ("matmul_naive.cu", "matmul_tiled.cu"):
        (tmp_path / name).write_text((EXAMPLES / name).read_text())
    path = tmp_path / "matmul_tiled.cu"
    analysis = analyse_text(path.as_uri(), 1, path.read_text(), path, tmp_path, Settings(), SPECS["H100-SXM"])
    result = analysis.results[0]
    before = build_request(analysis, result, None, 0.8)
    (tmp_path / "matmul_naive.cu").write_text((EXAMPLES / "matmul_naive.cu").read_text().replace("block=(16, 16)", "block=(32, 8)"))
    assert build_request(analysis, result, None, 0.8) == before  # this version's forecasts keep what they read
    _, reference = measurement_sides(analysis, result)
    assert "block=(32, 8)" in reference["code"]  # what runs is what is saved now


def test_a_kernelbench_file_is_forecast_with_the_sizes_it_states_read_as_the_corpora_read_them(tmp_path: Path) -> None:
    """The lines and trees learnt from KernelBench pairs whose problem is the file's module constants
    and input precision (`kernelbench_problem`); the editor sends the same, and assumes no sizes."""
    half_inputs = "torch.randn(batch_size, dim, dtype=torch.float16"
    text = (EXAMPLES / "kernelbench_relu.py").read_text().replace("torch.randn(batch_size, dim", half_inputs)
    path = tmp_path / "relu.py"
    path.write_text(text)
    analysis = analyse_text(path.as_uri(), 1, text, path, tmp_path, Settings(), SPECS["H100-SXM"])
    (result,) = [found for found in analysis.results if found.kernel.name == "ModelNew"]
    request = build_request(analysis, result, problem_sizes(result, path, tmp_path), 0.8)
    assert request.problem == kernelbench_problem(text) == {"batch_size": 4096, "dim": 16384, "dtype": "f16"}
    assert ASSUMED_SIZES not in request.assumed
