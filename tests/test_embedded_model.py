"""The embedded forecaster without torch: features and the shipped weights (CUDA-L1 conversion: tests/workshop)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.bench_few_value_programs import FILE as RELU_FILE
from benchmarks.bench_repeated_grid import FILE as REPEATED_GRID_FILE
from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.kernels_runtime.source.launch_spec import parse_launch_pragma
from kernelcast.models.embedded.backend import (
    LABEL_BOUND_LOG2,
    READER_MODULES,
    WEIGHTS_PATH,
    EmbeddedBackend,
    TimeModel,
    source_digest,
    weights_forecast,
    with_pair_term,
)
from kernelcast.models.embedded.features import (
    CODE_PATTERNS,
    DEFINED_IN_CALL_US,
    DISPATCH_US,
    FEATURE_NAMES,
    FEW_VALUE_WAVE_US,
    FLOOR_INDEX,
    Hardware,
    few_value_program_us,
    host_shift,
    pair_features,
    programs_at_once,
    read_code,
    repeated_grid_octaves,
)
from kernelcast.wire import ForecastRequest, KernelSide

HARDWARE = SPECS["H100-SXM"].to_json()


def test_weights_trained_on_other_features_are_refused() -> None:
    with pytest.raises(ValueError, match="other features"):
        TimeModel({}, {"features": ["something else"]})


def test_swapping_the_sides_swaps_the_feature_rows() -> None:
    request = ForecastRequest(
        KernelSide("__global__ void a(float* x) { __shared__ float t[32]; }", "cuda"),
        KernelSide("def reference(x):\n    return torch.relu(x)", "pytorch"),
        HARDWARE,
        {"n": 4096},
    )
    swapped = ForecastRequest(request.candidate, request.reference, HARDWARE, {"n": 4096})
    assert np.array_equal(pair_features(request), pair_features(swapped)[::-1])


def test_code_reading_ignores_comments_and_python_floor_division() -> None:
    cuda = read_code("// __shared__ float t[32];\n/* atomicAdd(x, 1) */\n__global__ void k(float4* x) {}", "cuda")
    assert cuda["shared_decl"] == 0 and cuda["atomics"] == 0 and cuda["vector_types"] == 1
    triton = read_code("grid = (n // 256,)\n# tl.dot(a, b)\nacc = tl.dot(a, b)\n", "triton")
    assert triton["tl_dot"] == 1


# One use of each spelling the code patterns know, for the ones no shipped kernel uses.
PATTERN_CATALOGUE = """
float2 a; int4 b; uint2 c; int2 i; half2 d; __half2 e; nv_bfloat162 f; __nv_bfloat162 g; double2 h;
wmma::load_matrix_sync(a); mma.sync; wgmma; mma_sync(a); cublasSgemm(h); cute::copy(a, b);
__syncthreads(); __syncwarp(); tl.debug_barrier(); grid.sync();
atomicAdd(p, 1); tl.atomic_add(p, 1); __shfl_down_sync(m, v, 1); __reduce_add_sync(m, v);
tl.atomic_add(p, 1, sem="relaxed"); atomicAdd_block(p, 1);
__ldcg(p); __stcs(p, v); __ldlu(p); __stwt(p, v); tl.load(p, cache_modifier=".cg"); tl.load(p, eviction_policy="evict_first");
for (;;) {} while (x) {} for i in range(4): pass
#pragma unroll
tl.static_range(4); half __half __nv_bfloat16 bfloat16 float16 fp16 bf16 x.half() double x; torch.float64
gridDim.x * blockDim.x; blockDim.x * gridDim.x
cp.async; memcpy_async; cuda::pipeline; tl.make_block_ptr; tl.make_tensor_descriptor; _tma_load
__expf __fdividef __frcp_rn rsqrtf __logf __sinf __cosf __tanhf tl.math.exp libdevice
torch.cuda.CUDAGraph() torch.cuda.graph(g) torch.cuda.make_graphed_callables(m)
torch.backends.cudnn.benchmark = True; allow_tf32 = True; torch.set_float32_matmul_precision("high")
torch.cuda.Stream(); cudaStream_t s; load_inline(); cupy.RawKernel(); cupy.RawModule(); cpp_extension
"""


def test_a_pattern_skips_only_texts_without_its_matches() -> None:
    """A pattern's anchors name strings every match contains: on every kernel text we ship (the
    examples, the test data, the corpus's operation sources) and a catalogue of spellings, the
    anchored count is the regex's, and every anchor is in some match (none is dead)."""
    root = Path(__file__).resolve().parents[1]
    folders = (root / "examples", root / "tests" / "data", root / "workshop" / "corpus" / "ops")
    shipped = [
        path.read_text(errors="replace")
        for folder in folders
        for path in sorted(folder.rglob("*"))
        if path.suffix in (".cu", ".cuh", ".py", ".jsonl")
    ]
    assert len(shipped) > 50
    texts = [*shipped, PATTERN_CATALOGUE]
    for name, pattern in CODE_PATTERNS.items():
        assert [pattern(text) for text in texts] == [float(len(pattern.regex.findall(text))) for text in texts], name
        matched = [match.group() for text in texts for match in pattern.regex.finditer(text)]
        assert all(any(anchor in match for anchor in pattern.anchors) for match in matched) or not pattern.anchors, name
        dead = [anchor for anchor in pattern.anchors if not any(anchor in match for match in matched)]
        assert not dead, f"{name}: no match holds {dead}"


@pytest.mark.parametrize(
    ("call", "kind"),
    [
        ("torch.argsort(x, dim=1)", "sort"),
        ("x.kthvalue(k, dim=1).values", "sort"),
        ("torch.topk(x, 8).values", "sort"),
        ("torch.cummax(x, dim=1).values", "scan"),
        ("torch.nonzero(x)", "scan"),
        ("torch.bincount(x, minlength=256)", "scatter"),
        ("out.index_add_(0, idx, x)", "scatter"),
        ("x.sum(dim=1)", "reduction"),
    ],
)
def test_library_calls_that_are_not_one_pass_over_memory_have_kinds_of_their_own(call: str, kind: str | None) -> None:
    """Sorting, scans and binned atomics cost what a sum does not: a held-out sort reference must not read as a sum."""
    counts = read_code(f"def reference(x, k=3, out=None, idx=None):\n    return {call}\n", "pytorch")
    found = {name for name in ("sort", "scan", "scatter", "reduction", "movement") if counts[f"torch_{name}"] > 0}
    assert found == ({kind} if kind else set())


@pytest.mark.parametrize(
    ("allocation", "fills"),
    [
        ("auto out = torch::empty_like(x);", 0),
        ("auto out = torch::zeros_like(x);", 1),
        ("auto out = at::zeros({n}, x.options());", 1),
        ("auto out = torch::empty_like(x); out.zero_();", 1),
        ("auto out = torch::empty_like(x); cudaMemset(out.data_ptr<float>(), 0, n * 4);", 1),
    ],
)
def test_a_load_inline_wrapper_that_zero_fills_its_output_reads_as_one_more_launch(allocation: str, fills: int) -> None:
    """A wrapper that zero-fills its output launches a fill before its kernel, as `torch.zeros` in Python does:
    on the real-world corpus such a solution lost to its twin that allocated with empty_like in 3 of 4 pairs."""
    wrapper = (
        f'source = """\ntorch::Tensor run(torch::Tensor x) {{\n    int n = x.numel();\n    {allocation}\n'
        '    k<<<n / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);\n    return out;\n}\n"""\n'
        'module = load_inline(name="m", cpp_sources="", cuda_sources=source)\n'
    )
    counts = read_code("import torch\nfrom torch.utils.cpp_extension import load_inline\n" + wrapper, "cuda")
    assert counts["torch_creation"] == fills


def test_the_calls_that_make_a_kernelbench_files_inputs_and_parameters_are_not_launches_of_the_timed_call() -> None:
    """`get_inputs` and `__init__` run once before timing: a ModelNew file that keeps KernelBench's
    `get_inputs` must read as the same file without it, and `torch.randn` there is no launch."""
    model = (
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
        "    def __init__(self, n):\n        super().__init__()\n        self.weight = nn.Parameter(torch.randn(n, n))\n\n"
        "    def forward(self, x):\n        return torch.relu(torch.matmul(x, self.weight))\n\n"
    )
    inputs = (
        "batch = 16\n\ndef get_inputs():\n    return [torch.randn(batch, 4096)]\n\n"
        "def get_init_inputs():\n    return [torch.zeros(1).shape[0]]\n"
    )
    with_inputs, alone = read_code(model + inputs, "pytorch"), read_code(model, "pytorch")
    assert with_inputs == alone
    assert with_inputs["torch_creation"] == 0 and with_inputs["torch_heavy"] == 1 and with_inputs["torch_elementwise"] == 1


MODULE_STYLE_PROBLEM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(channels, channels, kernel_size=3)
        self.norm: nn.BatchNorm3d = nn.BatchNorm3d(channels)
        self.act = nn.ReLU()
        self.head = nn.Sequential(nn.Linear(channels, channels), nn.GELU(), nn.Dropout(p=0.1))
        self.scale = 2.0

    def forward(self, x):
        x = self.conv_transpose(x)
        x = self.norm(x)
        x = self.act(x)
        return self.head(x * self.scale)
"""


def test_a_module_built_in_init_and_called_in_forward_reads_as_what_its_type_launches() -> None:
    """KernelBench's level-2 and level-3 problems build their layers in `__init__` and call them by
    attribute: `self.conv_transpose(x)` launches a cuDNN convolution whatever the attribute's name, and
    a `nn.Sequential` runs each module it holds. Read by name alone, such a problem had no GEMM or
    convolution at all, so an LLM's hand-written convolution was forecast against elementwise work."""
    counts = read_code(MODULE_STYLE_PROBLEM, "pytorch")
    assert counts["torch_heavy"] == 2  # the transposed convolution and the Linear inside the Sequential
    assert counts["torch_reduction"] == 1  # the batch norm
    assert counts["torch_elementwise"] == 4  # ReLU, GELU, Dropout and `x * self.scale`
    unscaled = read_code(MODULE_STYLE_PROBLEM.replace("self.head(x * self.scale)", "self.head(x)"), "pytorch")
    assert unscaled["torch_elementwise"] == 3
    # An attribute that holds no module (`self.scale`) is no launch; a module never called is none either.
    unused = read_code(MODULE_STYLE_PROBLEM.replace("        x = self.norm(x)\n", ""), "pytorch")
    assert unused["torch_reduction"] == 0


def _problem(forward: str, shape: str) -> str:
    return (
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
        f"    def forward(self, x):\n        {forward}\n\n"
        f"def get_inputs():\n    return [torch.randn({shape})]\n"
    )


COMPILED = (
    "\n\nclass ModelNew(Model):\n    def __init__(self):\n        super().__init__()\n"
    "        self._compiled_forward = torch.compile(super().forward)\n\n"
    "    def forward(self, *inputs):\n        return self._compiled_forward(*inputs)\n"
)


def _compiled_against_eager(forward: str, shape: str, sizes: dict) -> float:
    """The weights' forecast (log2 S) of the problem under torch.compile against the problem eager."""
    problem = _problem(forward, shape)
    request = ForecastRequest(KernelSide(problem, "pytorch"), KernelSide(problem + COMPILED, "pytorch"), HARDWARE, sizes)
    return float(EmbeddedBackend().model.predict(pair_features(request)[None]).mean[0])


def test_compiling_one_small_op_costs_a_compiled_call_and_fusing_a_long_chain_pays() -> None:
    """A compiled call's guards and wrapper cost more than one eager op: FlagGems' operators at their
    benchmark sizes measured slower compiled than eager in 81% of 382 pairs, where the weights, which
    saw it in few pairs, called four in five faster. Fusing eight elementwise passes over 256 MiB
    into one pays whatever the call costs."""
    assert _compiled_against_eager("return torch.abs(x)", "64, 64", {"dim0": 64, "dim1": 64}) < -0.5
    chain = "return torch.relu(torch.sigmoid(torch.tanh(torch.exp(torch.abs(torch.neg(torch.sin(torch.cos(x))))))))"
    assert _compiled_against_eager(chain, "8192, 8192", {"dim0": 8192, "dim1": 8192}) > 1.0


def test_a_compiled_pair_reads_its_bytes_from_the_shapes_get_inputs_makes() -> None:
    """A batch of images named by two of its four sizes reads 2^16 times too small; a compiled call's
    fixed cost would then swamp work that takes milliseconds."""
    problem = "batch, channels = 16, 64\n" + _problem("return torch.relu(x)", "batch, channels, 256, 256")
    sizes = {"batch": 16, "channels": 64}
    bytes_index = FEATURE_NAMES.index("bytes_log2")
    eager = pair_features(ForecastRequest(KernelSide(problem, "pytorch"), KernelSide(problem, "pytorch"), HARDWARE, sizes))
    compiled = pair_features(ForecastRequest(KernelSide(problem, "pytorch"), KernelSide(problem + COMPILED, "pytorch"), HARDWARE, sizes))
    assert eager[0, bytes_index] == pytest.approx(np.log2(1 + 2 * 16 * 64 * 4))  # the two sizes, as the weights were fitted
    assert compiled[0, bytes_index] == pytest.approx(np.log2(1 + 2 * 16 * 64 * 256 * 256 * 4))


HELION_BMM = """import torch
import helion
import helion.language as hl


@helion.kernel(static_shapes=True)
def bmm(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    b, m, k = A.size()
    b, k, n = B.size()
    out = torch.empty([b, m, n], device=A.device, dtype=A.dtype)
    for tile_b, tile_m, tile_n in hl.tile([b, m, n]):
        acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.baddbmm(acc, A[tile_b, tile_m, tile_k], B[tile_b, tile_k, tile_n])
        out[tile_b, tile_m, tile_n] = acc
    return out


def check(b: int, m: int, k: int, n: int) -> None:
    x = torch.randn([b, m, k], device="cuda", dtype=torch.float16)
    y = torch.randn([b, k, n], device="cuda", dtype=torch.float16)
    torch.testing.assert_close(bmm(x, y), torch.bmm(x, y))
"""


def _weights_forecast(reference: str, candidate: str, language: str, sizes: dict) -> float:
    """The weights' forecast (log2 S) of a candidate against an eager PyTorch reference."""
    request = ForecastRequest(KernelSide(reference, "pytorch"), KernelSide(candidate, language), HARDWARE, sizes)
    return float(weights_forecast(EmbeddedBackend().model, [request], pair_features(request)[None]).mean[0])


def test_a_helion_kernel_reads_as_one_triton_kernel_whose_matmuls_use_tensor_cores() -> None:
    """Helion's torch calls inside `@helion.kernel` are tile operations of one generated kernel, and
    its examples check themselves with eager calls no timed call makes. Read as eager launches,
    every Helion kernel measured was forecast 2-3x slower than eager (68 pairs, direction 0.51)."""
    counts = read_code(HELION_BMM, "triton")
    assert counts["triton_launch_sites"] == 1 and counts["mma"] == 1
    assert all(counts[f"torch_{kind}"] == 0 for kind in ("heavy", "creation", "elementwise"))
    # Measured on the H200: 0.81x eager cuBLAS at these sizes; read as launches, forecast 0.36x.
    eager = "import torch\n\ndef reference(a, b):\n    return torch.bmm(a, b)\n"
    assert _weights_forecast(eager, HELION_BMM, "triton", {"B": 16, "M": 512, "K": 768, "N": 1024, "dtype": "f16"}) > -0.5


FLAGGEMS_ABS = """import triton
import triton.language as tl

from flag_gems.utils import pointwise_dynamic


@pointwise_dynamic(promotion_methods=[(0, "COMPLEX_TO_FLOAT")])
@triton.jit
def abs_func(x):
    return tl.abs(x)


def abs(A):
    return abs_func(A)
"""


def test_a_kernel_behind_a_librarys_dispatch_layer_pays_its_host_time() -> None:
    """FlagGems' generated wrappers cost tens of microseconds a call on the host: its operators
    measured slower than aten eager in 92% of 370 pairs, most at small sizes, where the weights,
    reading a bare Triton launch, called them faster."""
    eager = "import torch\n\ndef reference(x):\n    return torch.abs(x)\n"
    small, large = ({"M": n, "N": n, "dtype": "bf16"} for n in (64, 4096))
    assert _weights_forecast(eager, FLAGGEMS_ABS, "triton", small) < -2.0
    assert _weights_forecast(eager, FLAGGEMS_ABS, "triton", large) < -0.5
    bare = FLAGGEMS_ABS.replace('@pointwise_dynamic(promotion_methods=[(0, "COMPLEX_TO_FLOAT")])\n', "")
    # The layer's 20 µs lengthen the call by what they add to its floor, whatever the weights read.
    bare_small = ForecastRequest(KernelSide(eager, "pytorch"), KernelSide(bare, "triton"), HARDWARE, small)
    floor_us = 2.0 ** pair_features(bare_small)[1, FLOOR_INDEX]
    layer = np.log2((floor_us + DISPATCH_US["@pointwise_dynamic"]) / floor_us)
    assert layer > 2.0
    assert _weights_forecast(eager, bare, "triton", small) - _weights_forecast(eager, FLAGGEMS_ABS, "triton", small) == pytest.approx(layer)
    # A layer commented out is no layer, as everything else the reader counts.
    commented = FLAGGEMS_ABS.replace("@pointwise_dynamic", "# @pointwise_dynamic")
    assert _weights_forecast(eager, commented, "triton", small) == pytest.approx(_weights_forecast(eager, bare, "triton", small))


TRITON_MATMUL = (
    "import torch\n"
    + (Path(__file__).parent / "data" / "facts" / "triton_matmul.py").read_text()
    + """

def matmul(a, b):
    M, K = a.shape
    K, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return c
"""
)


def test_a_triton_dot_kept_in_fp32_is_read_at_the_fp32_rate() -> None:
    """An fp32 `tl.dot` runs on TF32 tensor cores unless told `input_precision="ieee"` (or
    `allow_tf32=False`), as LLM solutions often do to pass a tolerance: LLMKernel's solutions that
    did measured 0.79 octaves slower than eager on average (17 pairs), and were forecast faster."""
    eager = "import torch\n\ndef reference(a, b):\n    return torch.matmul(a, b)\n"
    ieee = TRITON_MATMUL.replace("tl.dot(a, b, accumulator)", 'tl.dot(a, b, accumulator, input_precision="ieee")')
    assert ieee != TRITON_MATMUL
    fp32, bf16 = ({"M": 4096, "N": 4096, "K": 4096, "dtype": dtype} for dtype in ("f32", "bf16"))
    assert _weights_forecast(eager, TRITON_MATMUL, "triton", fp32) - _weights_forecast(eager, ieee, "triton", fp32) > 1.0
    # Half-precision dots use the tensor cores whatever the keyword says.
    assert _weights_forecast(eager, ieee, "triton", bf16) == pytest.approx(_weights_forecast(eager, TRITON_MATMUL, "triton", bf16))
    # torch's own switch is not a keyword of the dot.
    assert read_code("torch.backends.cuda.matmul.allow_tf32 = False\n" + TRITON_MATMUL, "triton")["fp32_dots"] == 0.0
    assert read_code(TRITON_MATMUL.replace("accumulator)", "accumulator, allow_tf32=False)"), "triton")["fp32_dots"] == 1.0


RELU_AT_MODULE = """import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


def relu(x):
    relu_kernel[(1,)](x, x.numel(), BLOCK=1024)
    return x
"""
RELU_BUILT_IN_CALL = """import triton
import triton.language as tl


def relu(x):
    @triton.jit
    def relu_kernel(x_ptr, n, BLOCK: tl.constexpr):
        pass

    relu_kernel[(1,)](x, x.numel(), BLOCK=1024)
    return x
"""


def test_a_grid_that_repeats_its_work_lengthens_the_call_by_the_waves_the_copies_add() -> None:
    """`kernel[grid, BLOCK]` runs BLOCK copies of the grid (host_launch.repeated_grids). No generated kernel
    repeats its grid, so the weights cannot read it: measured on TritonBench's LLM-written kernels
    (H200), 1,000-1,070x slower than `kernel[grid]` over 2^27-2^28 elements, 2.6x over 4,096."""
    from kernelcast.models.service.calibrated import Forecaster
    from kernelcast.server.hover import _forecast_lines

    repeated = REPEATED_GRID_FILE.format(block=1024, copies="BLOCK", elements="1 << 20")
    once = repeated.replace(", BLOCK](", "](")
    hardware = Hardware.from_json(HARDWARE)
    at_once = hardware.sm_count * hardware.threads_per_sm // 128  # programs of Triton's 4 warps at a time
    # 1 << 20 elements: 1,024 programs, one wave; their 1,024 copies take ceil(2^20 / at_once) waves.
    assert repeated_grid_octaves(repeated, hardware) == pytest.approx(math.log2(math.ceil((1 << 20) / at_once)))
    small = repeated.replace("1 << 20", "4096")  # 4 programs: the copies fill about two waves
    assert repeated_grid_octaves(small, hardware) == pytest.approx(math.log2(math.ceil(4096 / at_once)))
    assert repeated_grid_octaves(once, hardware) == 0.0
    request = ForecastRequest(KernelSide(once, "triton", "ModelNew"), KernelSide(repeated, "triton", "ModelNew"), HARDWARE)
    shift = host_shift(request, pair_features(request))
    assert shift[1] - shift[0] == pytest.approx(repeated_grid_octaves(repeated, hardware))
    forecast = Forecaster(["embedded"]).forecast(request)
    assert forecast.direction == "slower" and forecast.speedup < 0.5
    swapped = Forecaster(["embedded"]).forecast(ForecastRequest(request.candidate, request.reference, HARDWARE))
    assert swapped.direction == "faster" and swapped.speedup > 2.0
    # The hover says which launch repeats and why the forecast moved so far.
    hover = "\n".join(_forecast_lines(forecast))
    assert "The candidate's `scale_kernel[(n + BLOCK - 1) // BLOCK, BLOCK]` runs 1,024 copies of its grid" in hover
    assert "never reads `tl.program_id` of axis 1" in hover
    assert "The reference's `scale_kernel[" in "\n".join(_forecast_lines(swapped))


def test_programs_of_a_few_values_each_lengthen_the_call_by_the_waves_they_start() -> None:
    """A Triton kernel with no `tl.arange`, or with blocks of a few values (host_launch.few_value_programs),
    costs FEW_VALUE_WAVE_US a wave of its programs; no generated kernel is written so, and the weights read
    it as moving its bytes at bandwidth. TritonBench's ReLU written so measured 104x slower than eager at
    2^20 elements."""
    from kernelcast.models.service.calibrated import Forecaster
    from kernelcast.server.hover import _forecast_lines

    text = RELU_FILE.format(block=1024, elements="1 << 20")
    # The same file with the block kernel alone, called by the model.
    blocks = (
        text[: text.index("@triton.jit\ndef relu_kernel")]
        + text[text.index("@triton.jit\ndef relu_block_kernel") : text.index("def relu(x):")]
        + text[text.index("def relu_blocks(x):") :].replace("return relu(x)", "return relu_blocks(x)")
    )
    hardware = Hardware.from_json(HARDWARE)
    waves = math.ceil((1 << 20) / programs_at_once(hardware))
    assert programs_at_once(hardware) == hardware.sm_count * hardware.threads_per_sm // 128
    assert few_value_program_us(text, hardware, 0.0) == waves * FEW_VALUE_WAVE_US
    assert few_value_program_us(blocks, hardware, 0.0) == 0.0
    # Where the text leaves the grid to run time, as many programs as it starts on the problem's elements.
    unsized = text.replace('[torch.randn(1 << 20, device="cuda")]', "[]")
    assert few_value_program_us(unsized, hardware, 4096.0) == math.ceil(4096 / programs_at_once(hardware)) * FEW_VALUE_WAVE_US
    # The block kernel alone with blocks of 16 values a program: 2^16 programs over 2^20 elements.
    sixteen = blocks.replace("BLOCK=1024", "BLOCK=16").replace("triton.cdiv(n, 1024)", "triton.cdiv(n, 16)")
    assert few_value_program_us(sixteen, hardware, 0.0) == math.ceil((1 << 16) / programs_at_once(hardware)) * FEW_VALUE_WAVE_US
    request = ForecastRequest(KernelSide(blocks, "triton", "ModelNew"), KernelSide(text, "triton", "ModelNew"), HARDWARE)
    rows = pair_features(request)
    shift = host_shift(request, rows)
    floor_us = 2.0 ** rows[1, FLOOR_INDEX]
    assert shift[0] == 0.0 and shift[1] == pytest.approx(math.log2((floor_us + waves * FEW_VALUE_WAVE_US) / floor_us))
    forecast = Forecaster(["embedded"]).forecast(request)
    assert forecast.direction == "slower" and forecast.probabilities[0] > 0.5  # most of it in the slowest bin
    swapped = Forecaster(["embedded"]).forecast(ForecastRequest(request.candidate, request.reference, HARDWARE))
    assert swapped.direction == "faster" and swapped.probabilities[-1] > 0.5
    hover = "\n".join(_forecast_lines(forecast))
    assert "Few values a program: the candidate's `relu_kernel[n,]` (one value, 1,048,576 programs)" in hover
    assert "Few values a program: the reference's `relu_kernel[n,]`" in "\n".join(_forecast_lines(swapped))


def test_a_kernel_built_inside_the_call_pays_the_build_on_top_of_the_weights_forecast() -> None:
    """Building a Triton kernel each call costs milliseconds (DEFINED_IN_CALL_US); read through the floor,
    LLMKernel's solutions that did it were forecast about 2.5x slower than eager where they measured 45x."""
    eager = "import torch\n\ndef reference(x):\n    return torch.relu(x)\n"
    sizes = {"N": 1 << 20, "dtype": "f32"}
    built = ForecastRequest(KernelSide(eager, "pytorch"), KernelSide(RELU_BUILT_IN_CALL, "triton"), HARDWARE, sizes)
    rows = pair_features(built)
    shift = host_shift(built, rows)
    assert read_code(RELU_BUILT_IN_CALL, "triton")["built_us"] == DEFINED_IN_CALL_US
    floor_us = 2.0 ** rows[1, FLOOR_INDEX]
    assert shift[0] == 0.0 and shift[1] == pytest.approx(np.log2((floor_us + DEFINED_IN_CALL_US) / floor_us))
    assert shift[1] > 8.0
    once = _weights_forecast(eager, RELU_AT_MODULE, "triton", sizes)
    assert once - _weights_forecast(eager, RELU_BUILT_IN_CALL, "triton", sizes) == pytest.approx(shift[1], abs=0.25)


def test_launch_pragma_and_corpus_launches_are_read() -> None:
    code = "// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<20)\n__global__ void k() {}"
    from_pragma = pair_features(ForecastRequest(KernelSide(code, "cuda"), KernelSide(code, "cuda"), HARDWARE, {"N": 1 << 20}))
    row = dict(zip(FEATURE_NAMES, from_pragma[0]))
    assert (
        row["launch_from_pragma"] == 1
        and row["blocks"] == pytest.approx(np.log2(1 + 4096))
        and row["threads_per_block"] == pytest.approx(np.log2(257))
    )
    assert row["bytes_log2"] == pytest.approx(np.log2(1 + 8 * (1 << 20)))  # the pragma's two f32 arrays
    facts = {
        "launches": [
            {"kernel": "__zero__", "grid": [1, 1, 1], "args": ["y"]},
            {"kernel": "k", "grid": [64, 1, 1], "num_warps": 8, "args": []},
        ]
    }
    side = KernelSide("@triton.jit\ndef k(): pass", "triton", facts=facts)
    row = dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(side, side, HARDWARE))[0]))
    assert row["launch_from_facts"] == 1 and row["zero_fills"] == 1 and row["launches"] == 1.0
    assert row["threads_per_block"] == pytest.approx(np.log2(1 + 256))


def test_each_side_reads_its_own_bytes_from_its_launches() -> None:
    """A float → half edit keeps the shape (one problem) but halves one side's traffic."""

    def side(nbytes: int) -> KernelSide:
        return KernelSide(
            "__global__ void k() {}",
            "cuda",
            facts={"launches": [{"kernel": "k", "grid": [4096, 1, 1], "block": [256, 1, 1], "bytes": nbytes}]},
        )

    rows = pair_features(ForecastRequest(side(1 << 24), side(1 << 23), HARDWARE, {"n": 1 << 20}))
    wide, narrow = (dict(zip(FEATURE_NAMES, row)) for row in rows)
    assert wide["bytes_log2"] == narrow["bytes_log2"] == pytest.approx(np.log2(1 + (1 << 24)))  # the shared context
    assert wide["memory_log2_us"] > narrow["memory_log2_us"] > 0


def test_a_scatter_reads_how_many_updates_each_output_word_takes() -> None:
    """One atomicAdd a thread into 16 keys or into 2^20: the same code, the outputs' bytes tell them apart."""
    code = "__global__ void k(const float* src, float* out) { atomicAdd(out + (threadIdx.x & 15), src[threadIdx.x]); }"

    def row(output_words: int) -> dict[str, float]:
        launch = {
            "kernel": "k",
            "grid": [1 << 14, 1, 1],
            "block": [256, 1, 1],
            "bytes": (1 << 24) + 4 * output_words,
            "output_bytes": 4 * output_words,
            "args": ["src", "out"],
        }
        side = KernelSide(code, "cuda", facts={"launches": [launch]})
        return dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(side, side, HARDWARE))[0]))

    few, many = row(16), row(1 << 20)
    assert few["atomics_per_output_word"] == pytest.approx(np.log2(1 + (1 << 22) / 16))  # 2^22 threads, one atomic each
    assert many["atomics_per_output_word"] == pytest.approx(np.log2(1 + 4))
    assert few["output_log2"] == pytest.approx(np.log2(1 + 64))
    assert few["bytes_per_output_log2"] == pytest.approx(np.log2(1 + (1 << 24) + 64) - np.log2(1 + 64))
    unknown = dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(KernelSide(code, "cuda"), KernelSide(code, "cuda"), HARDWARE))[0]))
    assert unknown["atomics_per_output_word"] == unknown["output_log2"] == unknown["bytes_per_output_log2"] == 0.0


def test_a_small_second_pass_adds_its_own_bytes_not_a_full_pass() -> None:
    """A reduction that finishes with a tiny pass over partial sums moves about one pass of data, not two."""
    main = {"kernel": "partial", "grid": [1024, 1, 1], "block": [256, 1, 1], "bytes": 1 << 26}
    one_pass = KernelSide("__global__ void partial() {}", "cuda", facts={"launches": [main]})
    two_pass = KernelSide(
        "__global__ void partial() {}", "cuda", facts={"launches": [main, {**main, "kernel": "finish", "grid": [1, 1, 1], "bytes": 4096}]}
    )
    single, finished = (dict(zip(FEATURE_NAMES, row)) for row in pair_features(ForecastRequest(one_pass, two_pass, HARDWARE)))
    assert finished["passes"] == 1.0 and single["passes"] == 0.0  # log2 of the launches
    assert finished["memory_log2_us"] - single["memory_log2_us"] < 0.01  # not log2(2) = 1 more


def test_bytes_in_flight_follow_resident_threads_and_load_width() -> None:
    """Little's law: an SM's outstanding bytes are its resident threads times each one's loads and their width."""
    sms = SPECS["H100-SXM"].sm_count

    def side(blocks: int, threads: int, resident_blocks: int, wide_loads: int) -> dict[str, float]:
        facts = {
            "registers": 32,
            "occupancy": {"active_blocks_per_sm": resident_blocks},
            "sass": {"total": 40, "global_loads": 2, "vector_loads_128": wide_loads},
            "launches": [{"kernel": "k", "grid": [blocks, 1, 1], "block": [threads, 1, 1]}],
        }
        code = KernelSide("__global__ void k() {}", "cuda", facts=facts)
        return dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(code, code, HARDWARE, {"n": 1 << 24}))[0]))

    full = side(64 * sms, 256, 8, 0)
    assert full["bytes_in_flight"] == pytest.approx(np.log2(1 + 8 * 256 * 2 * 4))
    assert side(64 * sms, 256, 8, 2)["bytes_in_flight"] == pytest.approx(np.log2(1 + 8 * 256 * 2 * 16))  # 128-bit loads
    assert side(2 * sms, 256, 8, 0)["bytes_in_flight"] == pytest.approx(np.log2(1 + 2 * 256 * 2 * 4))  # too few blocks to fill an SM
    assert full["wave_fill"] == 1.0 and side(12 * sms, 256, 8, 0)["wave_fill"] == pytest.approx(1.5 / 2)  # half the second wave idles
    assert full["instructions_per_sm"] == pytest.approx(np.log2(1 + 64 * 256 * 40))


def test_the_heaviest_launch_not_the_widest_gives_a_side_its_shape() -> None:
    """A wide column-means pass before a one-block kernel that walks every row: the one block is the time."""
    code = """
__global__ void means(const float* x, float* mean, int n, int d) { mean[threadIdx.x] = x[threadIdx.x]; }
__global__ void walk(const float* x, float* out, int n, int d) {
    float s = 0.0f;
    for (int r = 0; r < n; ++r) s += x[r * d + threadIdx.x];
    out[threadIdx.x] = s;
}
"""
    launches = [
        {
            "kernel": "means",
            "grid": [64, 1, 1],
            "block": [256, 1, 1],
            "args": ["x", "mean", {"ctype": "i32", "value": 5000}, {"ctype": "i32", "value": 100}],
        },
        {
            "kernel": "walk",
            "grid": [1, 1, 1],
            "block": [128, 1, 1],
            "args": ["x", "out", {"ctype": "i32", "value": 5000}, {"ctype": "i32", "value": 100}],
        },
    ]
    # A corpus side's facts are its first kernel's, with each kernel's own beside them.
    kernels = {"means": {"registers": 16, "occupancy": {"fraction": 1.0}}, "walk": {"registers": 48, "occupancy": {"fraction": 0.5}}}
    side = KernelSide(code, "cuda", facts={**kernels["means"], "launches": launches, "kernels": kernels})
    found = dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(side, side, HARDWARE, {"n": 5000, "d": 100}))[0]))
    assert found["loop_iterations"] == pytest.approx(np.log2(1 + 5000))
    assert found["blocks"] == pytest.approx(1.0) and found["threads_per_block"] == pytest.approx(np.log2(1 + 128))
    assert found["registers"] == 48 / 64 and found["occupancy"] == 0.5


def test_the_kernel_issuing_the_most_instructions_gives_a_side_its_facts() -> None:
    """A Triton tile product (thousands of SASS instructions a thread) beside a wider row softmax: the product is the time.

    Counting threads alone picked the softmax, so a tf32 → ieee edit (tensor cores lost, spills) read as no change.
    """
    code = "@triton.jit\ndef scores(q_ptr, p_ptr):\n    pass\n@triton.jit\ndef softmax(p_ptr):\n    pass\n"
    launches = [{"kernel": "scores", "grid": [8, 16, 16], "num_warps": 8}, {"kernel": "softmax", "grid": [16384, 1, 1], "num_warps": 8}]

    def row(scores_sass: int) -> dict[str, float]:
        kernels = {"scores": {"registers": 96, "sass": {"total": scores_sass}}, "softmax": {"registers": 20, "sass": {"total": 129}}}
        side = KernelSide(code, "triton", facts={**kernels["scores"], "launches": launches, "kernels": kernels})
        return dict(zip(FEATURE_NAMES, pair_features(ForecastRequest(side, side, HARDWARE, {"n": 1 << 24}))[0]))

    tile = row(2872)  # 2,048 programs × 2,872 instructions against 16,384 × 129
    assert tile["blocks"] == pytest.approx(np.log2(1 + 2048)) and tile["registers"] == 96 / 64
    assert row(100)["registers"] == 20 / 64  # a light tile: the softmax takes the time


def test_shipped_weights_are_small_and_forecast_a_300_kernel_file() -> None:
    """Its speed (under 20 ms a pair) is measured by benchmarks/bench_embedded.py, not here."""
    assert WEIGHTS_PATH.stat().st_size < 20 * 2**20
    code = "\n".join(f"__global__ void k{i}(float* x) {{ __shared__ float t[32]; x[threadIdx.x] = t[{i}]; }}" for i in range(300))
    request = ForecastRequest(KernelSide(code, "cuda"), KernelSide(code.replace("t[", "t [", 1), "cuda"), HARDWARE, {"N": 4096})
    raw = EmbeddedBackend().predict(request)
    assert sum(raw.probabilities) == pytest.approx(1.0)


def test_the_pair_term_may_pull_a_wide_difference_back_to_the_label_bound_but_never_reverse_it() -> None:
    """Its labels stopped at ±LABEL_BOUND_LOG2, so past the bound it learnt only to pull back; on
    naive references looping thousands of times in Python it overshot and reversed a 10-octave
    difference. Within the bound it may still reverse one: there it learnt from real labels."""
    sides = np.array([10.0, 10.0, -10.0, 2.0, 10.0])
    pair = np.array([-12.0, -5.0, 12.0, -3.0, 1.0])
    assert with_pair_term(sides, pair).tolist() == [LABEL_BOUND_LOG2, 5.0, -LABEL_BOUND_LOG2, -1.0, 11.0]
    # Swapping the sides negates both, and the forecast with them.
    assert with_pair_term(-sides, -pair).tolist() == (-with_pair_term(sides, pair)).tolist()


GELU = """// kernelcast: launch grid=(cdiv(N, 1024),) block=(256,) args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)
extern "C" __global__ void gelu(const float* __restrict__ x, float* __restrict__ y, int n) {
    long long base = (long long)blockIdx.x * blockDim.x * 4;
    #pragma unroll
    for (int k = 0; k < 4; ++k) {
        long long j = base + INDEX;
        if (j < n) { float v = x[j]; y[j] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))); }
    }
}
"""


def test_the_shipped_model_sees_that_neighbouring_threads_should_touch_neighbouring_elements() -> None:
    """Four elements per thread, read blocked (k·blockDim + tid) or strided (tid·4 + k): the same
    tokens, yet 1.3–2.1× apart on the H100 (the corpus's gelu at 2^26 fp32 elements)."""
    strided = KernelSide(GELU.replace("INDEX", "threadIdx.x * 4 + k"), "cuda")
    blocked = KernelSide(GELU.replace("INDEX", "k * blockDim.x + threadIdx.x"), "cuda")
    request = ForecastRequest(strided, blocked, HARDWARE, {"N": 1 << 24, "dtype": "f32"})
    rows = pair_features(request)
    uncoalesced = FEATURE_NAMES.index("global_uncoalesced_share")
    assert rows[0, uncoalesced] == 1.0 and rows[1, uncoalesced] == 0.0
    # The blocked candidate is faster, by more than 1.19×. The corpus measures 1.3–2.1×; the MLP
    # alone read 1.24× here, its blend with the trees (0.4 of it theirs) reads 1.22× (the trees: 1.19×).
    assert EmbeddedBackend().model.predict(rows[None]).mean[0] > 0.25


def test_a_launch_pragma_brings_its_kernels_loops_and_accesses() -> None:
    """The corpus's launches name their kernel, so its loops and global accesses are counted; a
    pragma written above the kernel names none, and must count the same."""
    side = KernelSide(GELU.replace("INDEX", "k * blockDim.x + threadIdx.x"), "cuda")
    named = KernelSide(side.code, "cuda", facts={"launches": [{**_pragma_launch(side), "kernel": "gelu"}]})
    rows = pair_features(ForecastRequest(side, named, HARDWARE, {"N": 1 << 24, "dtype": "f32"}))
    for name in ("loop_iterations", "global_accesses"):
        column = FEATURE_NAMES.index(name)
        assert rows[0, column] == rows[1, column] > 0, name


def _pragma_launch(side: KernelSide) -> dict:
    (pragma,) = [line for line in side.code.splitlines() if "kernelcast: launch" in line]
    return parse_launch_pragma(pragma, "cuda").as_launch()


def test_the_backend_version_changes_with_the_feature_reader(tmp_path: Path) -> None:
    """Forecasts are cached under the backend's version: the same weights behind an edited
    feature reader give other forecasts, so the version must change with its source."""
    version = EmbeddedBackend().version
    copies = []
    for index, name in enumerate(READER_MODULES):
        copies.append(tmp_path / f"{index}.py")
        copies[-1].write_bytes(Path(str(sys.modules[name].__file__)).read_bytes())
    assert version == "2." + source_digest(copies)
    features = copies[READER_MODULES.index("kernelcast.models.embedded.features")]
    features.write_text(features.read_text() + "\n# a changed reader\n")
    assert "2." + source_digest(copies) != version


def test_every_module_the_backend_reads_requests_with_is_in_its_version() -> None:
    """A reader left out of READER_MODULES could change a forecast while cached ones are still served."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, kernelcast.models.embedded.backend\n"
            "print('\\n'.join(name for name, module in sys.modules.items() if name.startswith(('kernelcast.kernels_runtime', "
            "'kernelcast.models', 'kernelcast.wire')) and not str(getattr(module, '__file__', '')).endswith('__init__.py')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(set(loaded) - {*READER_MODULES, "kernelcast.models.embedded.backend"}) == []


LIGER_STYLE_RELU_SQUARED = """import torch
import triton
import triton.language as tl


@triton.jit
def _relu_squared_forward_kernel(Y, X, n_cols: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    x = tl.load(X + row * n_cols + offsets, mask=offsets < n_cols, other=0)
    tl.store(Y + row * n_cols + offsets, tl.maximum(x, 0) * tl.maximum(x, 0), mask=offsets < n_cols)


@triton.jit
def _relu_squared_backward_kernel(DX, DY, X, n_cols: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    dy = tl.load(DY + row * n_cols + offsets, mask=offsets < n_cols, other=0)
    x = tl.load(X + row * n_cols + offsets, mask=offsets < n_cols, other=0)
    tl.store(DX + row * n_cols + offsets, 2 * dy * tl.maximum(x, 0), mask=offsets < n_cols)


def relu_squared_backward(X, dY):
    dX, rows = torch.empty_like(X), (X.shape[0],)
    _relu_squared_backward_kernel[rows](dX, dY, X, n_cols=X.shape[1], BLOCK=4096)
    return dX


class ReLUSquared(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X):
        Y, rows = torch.empty_like(X), (X.shape[0],)
        _relu_squared_forward_kernel[rows](Y, X, n_cols=X.shape[1], BLOCK=4096)
        ctx.save_for_backward(X)
        return Y

    @staticmethod
    def backward(ctx, dY):
        (X,) = ctx.saved_tensors
        return relu_squared_backward(X, dY)
"""


def test_the_backward_pass_of_a_kernel_file_is_not_read_as_timed() -> None:
    """Libraries (Liger, fla) and some LLM-written solutions define their gradients beside the
    forward kernel; a forward call runs none of them. Read as timed, Liger's files were two
    launches and twice the loads and stores they run."""
    counts = read_code(LIGER_STYLE_RELU_SQUARED, "triton")
    assert counts["triton_launch_sites"] == 1 and counts["tl_loads"] == 1 and counts["tl_stores"] == 1
    kernel, rest = LIGER_STYLE_RELU_SQUARED.split("@triton.jit\ndef _relu_squared_backward_kernel")
    function = rest[rest.index("class ReLUSquared") :]
    forward_only = kernel + "@triton.jit\n" + function[: function.index("    @staticmethod\n    def backward")]
    assert counts == read_code(forward_only, "triton")


def test_a_triton_launch_is_read_however_its_grid_is_written() -> None:
    """A launch's grid across lines or indexing a shape is one launch site; a subscript that ends a
    line before a parenthesised statement is none."""
    launches = """
def run(x, out):
    copy[(
        x.shape[0],
        triton.cdiv(x.shape[1], 256),
    )](x, out, BLOCK=256)
    copy[(x.shape[0],)](x, out, BLOCK=256)
    first = x[0]
    (a, b) = out.shape
"""
    assert read_code(launches, "triton")["triton_launch_sites"] == 2
