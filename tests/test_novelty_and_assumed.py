"""Confidence that knows what it does not know: the shipped novelty table, and launches the editor guessed."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from analysis_support import measure_request
from lsp_support import EXAMPLES, initialize_in_workspace, isolated_env, stop_service
from lsprotocol import types
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient

from kernelcast.kernels_runtime.cuda_facts import nvcc_path
from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.kernels_runtime.source.discovery import discover
from kernelcast.models.embedded.backend import EmbeddedBackend, even_mixture
from kernelcast.models.embedded.features import pair_features, templates_out_of_sight
from kernelcast.models.embedded.novelty import FAMILIAR, NOVELTY_PATH, NoveltyTable
from kernelcast.models.service.calibration import CalibrationTable
from kernelcast.wire import (
    ASSUMED_CANDIDATE_LAUNCH,
    ASSUMED_REFERENCE_LAUNCH,
    ASSUMED_REFERENCE_LOOPS,
    ASSUMED_SIZES,
    TEMPLATES_OUT_OF_SIGHT,
    ForecastRequest,
    KernelSide,
    normal_bin_probabilities,
)
from workshop.training import CLIP_LOG2
from workshop.training.novelty import error_bins, fit_k

HARDWARE = {**SPECS["H100-SXM"].to_json(), "fingerprint": SPECS["H100-SXM"].fingerprint()}
# The KernelBench example with a reference that loops as often as its first element says: a bound known only at run time.
RELU_WITH_LOOP = (
    (EXAMPLES / "kernelbench_relu.py")
    .read_text()
    .replace(
        "    def forward(self, x):\n        return torch.relu(x)",
        "    def forward(self, x):\n        for step in range(int(x[0, 0])):\n            x = torch.relu(x) * 0.5\n        return x",
    )
)
# A KernelBench ModelNew whose work is all in a library it imports: nothing of what it runs is in the file.
RELU_FROM_A_LIBRARY = """import torch
import torch.nn as nn
from fastlib.ops.relu import fused_relu


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


class ModelNew(nn.Module):
    def forward(self, x):
        return fused_relu(x)


batch_size = 4096
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]
"""
SCALE_LAUNCH = "// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], out:f32[N]:out, N:i32=1048576)\n"
SCALE = (
    SCALE_LAUNCH
    + """__global__ void scale(const float* x, float* out, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = 2.0f * x[i];
}
"""
)
# The same kernel written over CuTe's tensors, against the plain one.
SCALE_CUTE = (
    "// kernelcast: reference=scale.cu::scale\n#include <cute/tensor.hpp>\n"
    + SCALE_LAUNCH
    + """__global__ void scale(const float* x, float* out, int N) {
    using namespace cute;
    Tensor gx = make_tensor(make_gmem_ptr(x), make_shape(N));
    Tensor gout = make_tensor(make_gmem_ptr(out), make_shape(N));
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) gout(i) = 2.0f * gx(i);
}
"""
)
needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed: compiler facts need it")
VECTOR_ADD = (EXAMPLES / "vector_add.cu").read_text()
# vector_add.cu with a no-op `* 1.0f` and without the reference's launch comment, as a new user writes it.
VECTOR_ADD_COPY = """// kernelcast: reference=vector_add.cu::vector_add
__global__ void vector_add(const float* x, const float* y, float* out, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        out[i] = (x[i] + y[i]) * 1.0f;
    }
}
"""
TRANSPOSE_LAUNCH = "// kernelcast: launch grid=(cdiv(N, 32), cdiv(N, 32)) block=(32, 32) args=(in:f32[N*N], out:f32[N*N]:out, N:i32=8192)\n"
NAIVE_TRANSPOSE = (
    TRANSPOSE_LAUNCH
    + """__global__ void transpose(const float* in, float* out, int N) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < N && y < N) out[x * N + y] = in[y * N + x];
}
"""
)
TILED_TRANSPOSE_KERNEL = """#define TILE 32
extern "C" __global__ void transpose(const float* in, float* out, int N) {
    __shared__ float tile[TILE][TILE + 1];
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    if (x < N && y < N) tile[threadIdx.y][threadIdx.x] = in[y * N + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    if (x < N && y < N) out[y * N + x] = tile[threadIdx.x][threadIdx.y];
}
"""


def _cupy_file(launch: str) -> str:
    """The tiled transpose pasted into a cupy.RawKernel string, with `launch` (a pragma or nothing) inside it."""
    return (
        '# kernelcast: reference=transpose_naive.cu::transpose\nimport cupy\n\nsource = r"""\n'
        + launch
        + TILED_TRANSPOSE_KERNEL
        + '"""\ntranspose = cupy.RawKernel(source, "transpose")\n'
    )


def _cli_json(folder: Path, *arguments: str) -> dict:
    """`kernelcast ARGUMENTS --json` run in `folder` with a home of its own: the real CLI."""
    run = subprocess.run(
        [sys.executable, "-m", "kernelcast", *arguments, "--json"],
        cwd=folder,
        env=isolated_env(folder / ".home"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _forecast(folder: Path, name: str, facts: bool = False) -> dict:
    """`kernelcast forecast --json` on one file: the real CLI, analysis, model and calibration (`facts`: compiled, with nvcc)."""
    (kernel,) = _cli_json(folder, "forecast", name, *(() if facts else ("--no-facts",)))["kernels"]
    return kernel["forecast"]


def _facts(folder: Path, name: str) -> dict:
    """`kernelcast facts --json` of a file of one kernel: its facts and its reference's."""
    (kernel,) = _cli_json(folder, "facts", name)["kernels"].values()
    return kernel


def test_the_shipped_table_is_small_records_its_origin_and_leaves_familiar_pairs_alone() -> None:
    assert NOVELTY_PATH.stat().st_size < 200_000
    table = NoveltyTable.load()
    assert table.k > 0 and {"corpus", "cuda_l1", "weights"} <= set(table.meta["derived_from"])
    request = ForecastRequest(
        KernelSide(VECTOR_ADD, "cuda", "vector_add"), KernelSide((EXAMPLES / "vector_add_float4.cu").read_text(), "cuda"), HARDWARE
    )
    features = pair_features(request)[None]
    novelty = table.scores(features)
    assert np.allclose(novelty, table.scores(features[:, ::-1]))  # the same read either way round
    assert novelty[0] <= FAMILIAR
    sd = np.array([0.4])
    assert table.widened(sd, novelty)[0] == sd[0]
    assert table.widened(sd, np.array([FAMILIAR + 2.0]))[0] == pytest.approx(np.hypot(0.4, 2.0 * table.k))


def test_a_pair_past_the_stated_novelty_defers_whatever_the_model_forecasts(tmp_path: Path) -> None:
    """defers_past and below_90_past (derived with the table) are where the widened spread makes even the largest
    trained forecast (|log2 S| = CLIP_LOG2) defer at 0.8, or stay below 0.9, once the shipped calibration has had its say."""
    table = NoveltyTable.load()
    calibration = CalibrationTable(local=tmp_path / "no-local-learning.json")
    for limit, key in ((0.8, "defers_past"), (0.9, "below_90_past")):
        novelty = np.array([float(table.meta[key])])
        for learned_sd in (0.05, 0.5, 1.5):
            sd = table.widened(np.array([learned_sd]), novelty)[0]
            for gpu in ("sm8x", "sm9x"):
                for mean in (-CLIP_LOG2, -1.0, 0.5, CLIP_LOG2):
                    probabilities, _ = calibration.calibrate("embedded", gpu, normal_bin_probabilities(mean, sd))
                    p_faster = sum(probabilities[4:]) / sum(probabilities)
                    assert max(p_faster, 1.0 - p_faster) < limit, (key, mean, learned_sd, gpu)
    assert FAMILIAR < table.meta["below_90_past"] < table.meta["defers_past"]


def test_an_assumed_launch_is_mixed_with_both_sides_read_from_their_code() -> None:
    backend = EmbeddedBackend()
    reference = KernelSide(NAIVE_TRANSPOSE, "cuda", "transpose")
    launch = {"launches": [{"kernel": "transpose", "grid": [256, 256, 1], "block": [32, 32, 1]}]}
    sure = ForecastRequest(reference, KernelSide(TILED_TRANSPOSE_KERNEL, "cuda", "transpose", launch), HARDWARE, {"N": 8192})
    guessed = ForecastRequest(sure.reference, sure.candidate, HARDWARE, {"N": 8192}, assumed=(ASSUMED_CANDIDATE_LAUNCH,))
    from_code = ForecastRequest(sure.reference, KernelSide(TILED_TRANSPOSE_KERNEL, "cuda", "transpose"), HARDWARE, {"N": 8192})
    sure_raw, guessed_raw, code_raw = backend.predict_many([sure, guessed, from_code])
    parts = [(raw.details["mean_log2"], raw.details["spread_log2"]) for raw in (sure_raw, code_raw)]
    mean, sd = even_mixture(*parts[0], *parts[1])
    assert guessed_raw.details["mean_log2"] == pytest.approx(mean, abs=1e-3)
    assert guessed_raw.details["spread_log2"] == pytest.approx(sd, abs=1e-3)
    assert guessed_raw.details["spread_log2"] > max(spread for _, spread in parts) or parts[0] == parts[1]


def test_a_guessed_loop_is_mixed_with_the_reading_that_goes_round_once() -> None:
    backend = EmbeddedBackend()
    # The reference as the editor sends it (the file without ModelNew), against a rewrite that goes round once.
    discovery = discover(RELU_WITH_LOOP, "relu.py")
    assert discovery.reference_model is not None
    looped = KernelSide(discovery.reference_model.code, "pytorch", "Model")
    once = replace(looped, code=looped.code.replace("range(int(x[0, 0]))", "range(1)"))
    sure, guessed, single = (
        ForecastRequest(reference, once, HARDWARE, {"batch_size": 4096, "dim": 16384}, assumed=assumed)
        for reference, assumed in ((looped, ()), (looped, (ASSUMED_REFERENCE_LOOPS,)), (once, ()))
    )
    sure_raw, guessed_raw, once_raw = backend.predict_many([sure, guessed, single])
    parts = [(raw.details["mean_log2"], raw.details["spread_log2"]) for raw in (sure_raw, once_raw)]
    assert parts[0][0] > parts[1][0] + 1  # a reference that goes round thousands of times is the slower
    mean, sd = even_mixture(*parts[0], *parts[1])
    assert guessed_raw.details["mean_log2"] == pytest.approx(mean, abs=1e-3)
    assert guessed_raw.details["spread_log2"] == pytest.approx(sd, abs=1e-3)


def test_a_loop_bound_only_known_at_run_time_is_marked_assumed(tmp_path: Path) -> None:
    (tmp_path / "relu.py").write_text(RELU_WITH_LOOP)
    (tmp_path / "fixed.py").write_text(RELU_WITH_LOOP.replace("range(int(x[0, 0]))", "range(8)"))
    # A loop over the batch: its size is read from the shape get_inputs() makes, nothing is assumed.
    (tmp_path / "batch.py").write_text(RELU_WITH_LOOP.replace("range(int(x[0, 0]))", "range(x.shape[0])"))
    assert ASSUMED_REFERENCE_LOOPS in _forecast(tmp_path, "relu.py")["provenance"]["assumed"]
    assert ASSUMED_REFERENCE_LOOPS not in _forecast(tmp_path, "fixed.py")["provenance"].get("assumed", [])
    assert ASSUMED_REFERENCE_LOOPS not in _forecast(tmp_path, "batch.py")["provenance"].get("assumed", [])


def test_a_request_names_only_inputs_it_may_assume() -> None:
    data = ForecastRequest(KernelSide("a", "cuda"), KernelSide("b", "cuda"), HARDWARE, assumed=(ASSUMED_CANDIDATE_LAUNCH,)).to_json()
    assert ForecastRequest.from_json(data).assumed == (ASSUMED_CANDIDATE_LAUNCH,)
    with pytest.raises(ValueError, match="assumed must be a list of"):
        ForecastRequest.from_json({**data, "assumed": ["the weather"]})


def test_a_copy_of_vector_add_without_its_launch_is_not_a_confident_speedup(tmp_path: Path) -> None:
    """Issue 34: read as 2.4× faster at conf 0.87 when the missing launch was read from the code alone."""
    (tmp_path / "vector_add.cu").write_text(VECTOR_ADD)
    (tmp_path / "copy.cu").write_text(VECTOR_ADD_COPY)
    forecast = _forecast(tmp_path, "copy.cu")
    assert forecast["provenance"]["assumed"] == [ASSUMED_CANDIDATE_LAUNCH]
    assert forecast["defer"] or abs(np.log2(forecast["speedup"])) < 0.25


def _threads_compiled(folder: Path, name: str) -> tuple[int | None, int | None]:
    """The threads a block each side's facts were compiled for (reference, candidate)."""
    kernel = _facts(folder, name)
    return kernel["reference_facts"]["threads_per_block"], kernel["facts"]["threads_per_block"]


@needs_nvcc
def test_a_copy_without_its_launch_is_compiled_with_the_launch_that_stands_in(tmp_path: Path) -> None:
    """Issue 34, with compiler facts on: the reference's launch stood in for the copy's in the request, but the
    copy was compiled without it, so its occupancy was unknown where the reference's was full, and the copy
    read `likely 1.9× slower than reference (conf 0.89)`."""
    (tmp_path / "vector_add.cu").write_text(VECTOR_ADD)
    (tmp_path / "copy.cu").write_text(VECTOR_ADD_COPY)
    assert _threads_compiled(tmp_path, "copy.cu") == (256, 256)
    forecast = _forecast(tmp_path, "copy.cu", facts=True)
    assert forecast["provenance"]["facts_used"] == ["reference", "candidate"]
    assert forecast["defer"] or abs(np.log2(forecast["speedup"])) < 0.25


@needs_nvcc
def test_a_reference_is_compiled_with_its_own_launch_not_the_candidates(tmp_path: Path) -> None:
    """A block-size edit: the reference keeps its 256 threads a block, the candidate its 128 (the reference
    was compiled with the candidate's launch, so both sides' occupancy was the candidate's)."""
    launch = VECTOR_ADD.splitlines()[1]
    edited = launch.replace("cdiv(N, 256)", "cdiv(N, 128)").replace("block=(256)", "block=(128)")
    (tmp_path / "vector_add.cu").write_text(VECTOR_ADD)
    (tmp_path / "edit.cu").write_text(VECTOR_ADD_COPY.replace("\n", f"\n{edited}\n", 1))
    assert _threads_compiled(tmp_path, "edit.cu") == (256, 128)


def _committed(folder: Path, name: str, text: str) -> None:
    """`name` in a new git repository at `folder`, committed with `text`: git HEAD is its reference."""
    (folder / name).write_text(text)
    for command in (["init", "-q"], ["add", name], ["commit", "-q", "-m", "base"]):
        identity = ["-c", "user.name=kernelcast tests", "-c", "user.email=tests@kernelcast.invalid"]
        subprocess.run(["git", *identity, *command], cwd=folder, check=True, capture_output=True)


@needs_nvcc
def test_a_git_head_reference_compiles_as_committed(tmp_path: Path) -> None:
    """The naive SGEMM committed, the tiled one in the working tree: the reference's facts were the edited
    file's (its shared-memory tiles), so both sides read alike, and the forecast was 2.5× (conf 0.94) where
    the same pair with a reference pragma reads as the README says."""
    _committed(tmp_path, "sgemm.cu", (EXAMPLES / "matmul_naive.cu").read_text())
    tiled = (EXAMPLES / "matmul_tiled.cu").read_text()
    (tmp_path / "sgemm.cu").write_text(tiled.split("\n", 1)[1])  # without its reference pragma
    (tmp_path / "matmul_naive.cu").write_text((EXAMPLES / "matmul_naive.cu").read_text())
    (tmp_path / "matmul_tiled.cu").write_text(tiled)
    kernel = _facts(tmp_path, "sgemm.cu")
    assert (kernel["reference_facts"]["shared_static_bytes"], kernel["facts"]["shared_static_bytes"]) == (0, 2 * 16 * 16 * 4)
    from_head, from_pragma = _forecast(tmp_path, "sgemm.cu", facts=True), _forecast(tmp_path, "matmul_tiled.cu", facts=True)
    assert from_head["probabilities"] == pytest.approx(from_pragma["probabilities"])


def test_a_launch_only_edit_against_git_head_is_forecast(tmp_path: Path) -> None:
    """Only the launch pragma's block changed since git HEAD: the reference's launch was read from the edited
    file, so the launches matched and the kernel read `same code as the reference`."""
    naive = (EXAMPLES / "matmul_naive.cu").read_text()
    _committed(tmp_path, "sgemm.cu", naive)
    (tmp_path / "sgemm.cu").write_text(naive.replace("block=(16, 16)", "block=(8, 8)").replace("cdiv(N, 16)", "cdiv(N, 8)"))
    assert _forecast(tmp_path, "sgemm.cu")["provenance"]["backend"] == "embedded"


@needs_nvcc
def test_a_reference_in_a_cupy_string_compiles_from_its_string(tmp_path: Path) -> None:
    """A RawKernel reference was compiled from its whole Python file, which nvcc cannot read, so only the
    candidate had facts, and a copy with a no-op `* 1.0f` read `likely 2.2× faster (conf 0.94)`."""
    base = (
        'import cupy as cp\n\nsource = r"""\nextern "C" __global__ void scale(const float* x, float* y, float a, int n) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = a * x[i];\n}\n"
        '"""\nscale = cp.RawKernel(source, "scale")\n\n\ndef run(x, y):\n    n = x.size\n    threads = 256\n'
        "    scale(((n + threads - 1) // threads,), (threads,), (x, y, cp.float32(2.0), cp.int32(n)))\n"
    )
    (tmp_path / "base.py").write_text(base)
    (tmp_path / "edited.py").write_text("# kernelcast: reference=base.py::scale\n" + base.replace("a * x[i]", "a * x[i] * 1.0f"))
    assert _threads_compiled(tmp_path, "edited.py") == (256, 256)
    forecast = _forecast(tmp_path, "edited.py", facts=True)
    assert forecast["defer"] or abs(np.log2(forecast["speedup"])) < 0.25


@needs_nvcc
def test_a_kernel_in_a_cupy_string_is_sent_to_be_measured_as_its_string(tmp_path: Path) -> None:
    """The runtime compiles what `measurement_sides` gives it: it was the whole Python file. Now the string,
    which compiles, with the launch pragma that the file gives the kernel above the RawKernel call."""
    from kernelcast.kernels_runtime.facts import compile_facts

    (tmp_path / "transpose_naive.cu").write_text(NAIVE_TRANSPOSE)
    pragma = "# kernelcast: launch kernel=transpose" + TRANSPOSE_LAUNCH.split("launch", 1)[1]
    text = _cupy_file("").replace("transpose = cupy.RawKernel", pragma + "transpose = cupy.RawKernel")
    (tmp_path / "outside.py").write_text(text)
    request = measure_request(tmp_path / "outside.py", tmp_path)
    code = request["candidate"]["code"]
    assert "import cupy" not in code and request["candidate"]["spec"]["kernel"] == "transpose"
    assert compile_facts(code, "cuda", SPECS["H100-SXM"], ["transpose"]).error is None


def test_a_tiled_transpose_in_a_cupy_string_without_a_launch_reads_as_with_one(tmp_path: Path) -> None:
    """Issue 34: read as ~5× at conf ≥ 0.96 without a launch, against ~3× with one; now the reference's launch
    stands in (same parameters), marked assumed, and the spread covers the sides read from their code alone."""
    (tmp_path / "transpose_naive.cu").write_text(NAIVE_TRANSPOSE)
    (tmp_path / "without.py").write_text(_cupy_file(""))
    (tmp_path / "with.py").write_text(_cupy_file(TRANSPOSE_LAUNCH))
    guessed, stated = _forecast(tmp_path, "without.py"), _forecast(tmp_path, "with.py")
    assert "assumed" not in stated["provenance"] and guessed["provenance"]["assumed"] == [ASSUMED_CANDIDATE_LAUNCH]
    assert guessed["speedup"] <= stated["speedup"] * 1.05
    assert guessed["confidence"] < 0.96
    assert guessed["interval"][0] < stated["interval"][0]
    assert guessed["interval"][0] <= stated["speedup"] <= guessed["interval"][1]


def test_the_readme_sgemm_stays_a_confident_faster_forecast(tmp_path: Path) -> None:
    for name in ("matmul_naive.cu", "matmul_tiled.cu"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    forecast = _forecast(tmp_path, "matmul_tiled.cu")
    assert forecast["direction"] == "faster" and not forecast["defer"] and forecast["speedup"] > 1.2
    assert "assumed" not in forecast["provenance"] and forecast["provenance"]["details"]["novelty"] <= FAMILIAR


def test_a_model_that_only_calls_into_a_library_defers_and_says_which_calls(tmp_path: Path) -> None:
    (tmp_path / "relu_lib.py").write_text(RELU_FROM_A_LIBRARY)
    (tmp_path / "relu_shown.py").write_text(RELU_FROM_A_LIBRARY.replace("return fused_relu(x)", "return torch.relu(x) * 1.0"))
    hidden, shown = _forecast(tmp_path, "relu_lib.py"), _forecast(tmp_path, "relu_shown.py")
    assert hidden["provenance"]["details"]["out_of_sight"] == ["candidate: fused_relu (fastlib.ops.relu)"]
    assert hidden["defer"] and hidden["confidence"] < 0.8
    assert "out_of_sight" not in shown["provenance"]["details"]


def test_a_kernel_built_on_cute_templates_defers_and_says_which_header(tmp_path: Path) -> None:
    (tmp_path / "scale.cu").write_text(SCALE)
    (tmp_path / "scale_cute.cu").write_text(SCALE_CUTE)
    (tmp_path / "scale_plain.cu").write_text(SCALE_CUTE.replace("#include <cute/tensor.hpp>\n", ""))
    cute, plain = _forecast(tmp_path, "scale_cute.cu"), _forecast(tmp_path, "scale_plain.cu")
    assert cute["provenance"]["details"]["out_of_sight"] == [f"candidate: cute/tensor.hpp ({TEMPLATES_OUT_OF_SIGHT})"]
    assert cute["defer"] and cute["confidence"] < 0.8
    assert "out_of_sight" not in plain["provenance"]["details"]


def test_only_an_included_template_header_counts_in_cuda_and_in_a_python_string() -> None:
    inline = 'import torch\nsource = """\n#include <cutlass/gemm/device/gemm.h>\n__global__ void k() {}\n"""\n'
    assert templates_out_of_sight(inline, "pytorch") == (f"cutlass/gemm/device/gemm.h ({TEMPLATES_OUT_OF_SIGHT})",)
    assert templates_out_of_sight(SCALE_CUTE.replace("#include", "// #include"), "cuda") == ()
    assert templates_out_of_sight(SCALE_CUTE.replace("<cute/", "<cub/"), "cuda") == ()


@pytest.mark.parametrize(
    ("files", "opened", "language", "expected"),
    [
        ({"vector_add.cu": VECTOR_ADD, "copy.cu": VECTOR_ADD_COPY}, "copy.cu", "cuda", ["Assumed, not read", "candidate launch"]),
        ({"relu.py": RELU_WITH_LOOP}, "relu.py", "python", ["Assumed, not read", "reference loop trips", "goes round once"]),
        ({"relu_lib.py": RELU_FROM_A_LIBRARY}, "relu_lib.py", "python", ["Kernels out of sight", "fused_relu (fastlib.ops.relu)"]),
        (
            {"scale.cu": SCALE, "scale_cute.cu": SCALE_CUTE},
            "scale_cute.cu",
            "cuda",
            ["Kernels out of sight", "cute/tensor.hpp", "Its kernels copy"],
        ),
    ],
)
async def test_the_hover_says_which_inputs_were_assumed_or_out_of_sight(
    tmp_path: Path, files: dict[str, str], opened: str, language: str, expected: list[str]
) -> None:
    root, home = tmp_path / "workspace", tmp_path / "home"
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    text = files[opened]
    hovered = "class ModelNew" if "class ModelNew" in text else "__global__"
    line = next(number for number, found in enumerate(text.splitlines()) if hovered in found)
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "kernelcast", "lsp"],
        server_env=isolated_env(home),
        client_factory=lambda: LanguageClient(converter_factory=default_converter),
    )
    client = await config.start()
    try:
        settings = {"kernelcast": {"debounceMs": 0, "compilerFacts": {"enable": False}}}
        await initialize_in_workspace(client, root, settings)
        uri = (root / opened).as_uri()
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text))
        )
        markdown = ""
        for _ in range(200):  # the forecast arrives in the background: ask until the hover holds it
            hover = await client.text_document_hover_async(
                types.HoverParams(types.TextDocumentIdentifier(uri=uri), types.Position(line=line, character=8))
            )
            markdown = hover.contents.value if hover is not None else ""
            if "Point estimate" in markdown:
                break
            await asyncio.sleep(0.1)
        said = next((found for found in markdown.splitlines() if found.startswith(expected[0])), "")
        assert all(words in said for words in expected), markdown
        assert "spread covers" in said or "defers to measurement" in said
    finally:
        await client.shutdown_session()
        await client.stop()
        stop_service(home)


def test_a_launch_stands_in_only_for_a_kernel_with_the_same_parameters(tmp_path: Path) -> None:
    (tmp_path / "vector_add.cu").write_text(VECTOR_ADD)
    (tmp_path / "same.cu").write_text(VECTOR_ADD_COPY)
    (tmp_path / "other.cu").write_text(VECTOR_ADD_COPY.replace("int N)", "int count)").replace("< N", "< count"))
    same, other = _forecast(tmp_path, "same.cu"), _forecast(tmp_path, "other.cu")
    assert same["provenance"]["assumed"] == other["provenance"]["assumed"] == [ASSUMED_CANDIDATE_LAUNCH]
    assert same["provenance"]["facts_used"] == ["reference", "candidate"]  # the reference's launch, as the candidate's
    assert other["provenance"]["facts_used"] == ["reference"]  # read from its code alone


def test_sizes_nothing_states_are_marked_assumed(tmp_path: Path) -> None:
    """No launch pragma and no sizes on either side: the forecast is made without sizes, as the weights
    learnt on copies of the corpus without them, and the request says so."""
    plain = VECTOR_ADD.split("\n", 2)[2]  # without its comment and launch pragma
    (tmp_path / "vector_add.cu").write_text(plain)
    (tmp_path / "copy.cu").write_text(VECTOR_ADD_COPY)
    forecast = _forecast(tmp_path, "copy.cu")
    assert forecast["provenance"]["assumed"] == [ASSUMED_SIZES]


def test_k_is_recovered_from_error_that_grows_with_novelty() -> None:
    rng = np.random.default_rng(0)
    bins = {}
    for source, low, high in (("near", 0.2, 1.0), ("far", 0.8, 2.5)):
        novelty = rng.uniform(low, high, 20_000)
        squared_error = (0.3 + 0.25 * novelty**2) * rng.chisquare(1, novelty.size)
        bins[source] = error_bins(novelty, squared_error, np.full(novelty.size, 0.3))
    k, intercept = fit_k(bins)
    assert k == pytest.approx(0.5, abs=0.05) and intercept == pytest.approx(0.3, abs=0.05)


def test_a_reference_without_a_launch_takes_the_candidates(tmp_path: Path) -> None:
    launch = VECTOR_ADD.splitlines()[1]
    (tmp_path / "vector_add.cu").write_text(VECTOR_ADD.replace(launch + "\n", ""))
    (tmp_path / "copy.cu").write_text(VECTOR_ADD_COPY.replace("\n", f"\n{launch}\n", 1))
    forecast = _forecast(tmp_path, "copy.cu")
    assert forecast["provenance"]["assumed"] == [ASSUMED_REFERENCE_LAUNCH]
    assert forecast["provenance"]["facts_used"] == ["reference", "candidate"]


def _block_128(script: str) -> str:
    return script.replace("(n_elements, 1024),)", "(n_elements, 128),)").replace("BLOCK_SIZE=1024)", "BLOCK_SIZE=128, num_warps=8)")


def test_a_script_that_makes_its_own_tensors_is_forecast_at_their_size(tmp_path: Path) -> None:
    """The Triton tutorial's vector add, its block edited from 1024 to 128 with 8 warps: sized at the
    2^20 elements nothing stated it read `likely 1.7× slower (conf 0.91)`; the script adds 98,432."""
    from test_timed_path import TUTORIAL_SCRIPT

    _committed(tmp_path, "add.py", TUTORIAL_SCRIPT)
    (tmp_path / "add.py").write_text(_block_128(TUTORIAL_SCRIPT))
    sized = _forecast(tmp_path, "add.py")
    assert "assumed" not in sized["provenance"], "the grid and the sizes are the script's"
    unsized = tmp_path / "unsized"
    unsized.mkdir()
    without_script = TUTORIAL_SCRIPT.split("torch.manual_seed(0)")[0]
    _committed(unsized, "add.py", without_script)
    (unsized / "add.py").write_text(_block_128(without_script))
    guessed = _forecast(unsized, "add.py")
    assert guessed["provenance"]["assumed"] == ["reference grid", "candidate grid", ASSUMED_SIZES]
    assert sized["probabilities"] != guessed["probabilities"]
