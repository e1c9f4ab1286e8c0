"""The one reader of CUDA text: masking, macros, the function index (tree-sitter and the scanner alike)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from machine import limit

from kernelcast.kernels_runtime.cuda_facts import global_kernels
from kernelcast.kernels_runtime.source import cuda_text
from kernelcast.kernels_runtime.source.discovery import discover
from kernelcast.kernels_runtime.source.triton_text import triton_kernels

ROOT = Path(__file__).resolve().parents[1]
WELL_FORMED = sorted([*ROOT.glob("examples/*.cu"), *(ROOT / "tests" / "data").rglob("*.cu")])
SIGNATURES = """
#define THREADS 128
// __global__ void commented(float* x) {}
template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK, 2) tiled(const T* __restrict__ x, T* y, int n) { y[threadIdx.x] = x[threadIdx.x]; }
extern "C" __global__ void plain(float* x) { x[0] = 1.0f; }
extern "C" {
__global__ void __launch_bounds__(THREADS) in_block(float* x, int n = 4) { x[1] = 2.0f; }
}
__host__ __device__ inline float twice(float v) { return 2.0f * v; }
__global__ void declared(float* x);
"""


def readers() -> list[str]:
    return ["tree-sitter", "scanner"] if cuda_text.tree_sitter_available() else ["scanner"]


def index(text: str, reader: str, qualifier: str = cuda_text.KERNEL, declarations: bool = False) -> tuple[cuda_text.Function, ...]:
    found = cuda_text.parsed_functions(text) if reader == "tree-sitter" else cuda_text.scanned_functions(text, qualifier)
    assert found is not None, "tree-sitter should parse this text"
    return tuple(f for f in found if f.qualifier == qualifier and (declarations or f.definition))


def test_masking_blanks_comments_strings_and_directives_and_keeps_offsets() -> None:
    text = '#define A "//"\nint a = 1; // note\n/* x\ny */ char* s = "/*";\n'
    masked = cuda_text.mask(text)
    assert len(masked) == len(text) and masked.count("\n") == text.count("\n")
    assert "note" not in masked and "define" not in masked and "/*" not in masked and "int a = 1;" in masked
    assert cuda_text.mask(text, strings=False, directives=False).startswith('#define A "//"')


@pytest.mark.parametrize("reader", readers())
def test_the_index_reads_templates_launch_bounds_extern_c_and_helpers(reader: str) -> None:
    kernels = {f.name: f for f in index(SIGNATURES, reader)}
    assert list(kernels) == ["tiled", "plain", "in_block"]
    assert kernels["tiled"].template == "<typename T, int BLOCK>" and kernels["tiled"].launch_bounds == ("BLOCK", "2")
    assert SIGNATURES[kernels["tiled"].start :].startswith("template <typename T, int BLOCK>")
    assert kernels["tiled"].parameter_names(SIGNATURES) == ["x", "y", "n"]
    assert kernels["plain"].extern_c and SIGNATURES[kernels["plain"].start :].startswith('extern "C" __global__')
    assert kernels["in_block"].launch_bounds == ("THREADS",) and kernels["in_block"].parameter_names(SIGNATURES) == ["x", "n"]
    assert SIGNATURES[slice(*kernels["plain"].body)].strip() == "x[0] = 1.0f;"
    assert [f.name for f in index(SIGNATURES, reader, cuda_text.DEVICE)] == ["twice"]
    assert [f.name for f in index(SIGNATURES, reader, declarations=True) if not f.definition] == ["declared"]


def test_in_block_extern_c_is_seen_by_tree_sitter() -> None:
    if not cuda_text.tree_sitter_available():
        pytest.skip("tree-sitter-cuda is not installed")
    assert {f.name: f.extern_c for f in index(SIGNATURES, "tree-sitter")} == {"tiled": False, "plain": True, "in_block": True}


@pytest.mark.parametrize("path", WELL_FORMED, ids=lambda p: p.name)
def test_tree_sitter_and_the_scanner_agree_on_well_formed_files(path: Path) -> None:
    if not cuda_text.tree_sitter_available():
        pytest.skip("tree-sitter-cuda is not installed")
    text = path.read_text()
    parsed = cuda_text.parsed_functions(text)
    if parsed is None:
        pytest.skip(f"{path.name} does not parse cleanly: the scanner alone reads it")
    for qualifier in (cuda_text.KERNEL, cuda_text.DEVICE):
        ours = index(text, "scanner", qualifier)
        theirs = index(text, "tree-sitter", qualifier)
        spans = [(f.name, f.start, f.signature_end, f.end, f.parameters, f.body, f.launch_bounds) for f in ours]
        assert spans == [(f.name, f.start, f.signature_end, f.end, f.parameters, f.body, f.launch_bounds) for f in theirs]


def test_a_half_typed_kernel_is_found_by_the_scanner_where_tree_sitter_has_an_error() -> None:
    text = SIGNATURES + "__global__ void scale(const float* x, float* y, int n) {\n    int i = blockIdx.x * blockDim.x + thr"
    assert cuda_text.parsed_functions(text) is None  # an ERROR node: the scanner reads the file
    kernels = {f.name: f for f in cuda_text.kernels(text)}
    assert list(kernels) == ["tiled", "plain", "in_block", "scale"] and kernels["scale"].unfinished == "body"
    found = discover(text, "half.cu")
    assert [k.name for k in found.kernels] == ["tiled", "plain", "in_block", "scale"]
    assert any("scale" in problem and "unfinished body" in problem for problem in found.problems)


def test_kernels_in_load_inline_strings_are_indexed_like_a_cu_file() -> None:
    source = SIGNATURES.replace("\\", "\\\\").replace('"', '\\"')
    text = f'from torch.utils.cpp_extension import load_inline\nsrc = "{source}"\nmod = load_inline("m", "", cuda_sources=src)\n'
    text = text.replace("\n", "\\n").replace("\\nsrc = ", "\nsrc = ").replace('\\nmod = load_inline("m"', '\nmod = load_inline("m"')
    found = discover(text, "inline.py")
    assert [(k.name, k.container) for k in found.kernels] == [
        ("tiled", "load_inline"),
        ("plain", "load_inline"),
        ("in_block", "load_inline"),
    ]


def test_global_kernels_lists_declarations_and_not_comments() -> None:
    assert global_kernels(SIGNATURES) == {"tiled": None, "plain": None, "in_block": None, "declared": None}
    assert global_kernels("__global__ void __launch_bounds__(0x100) k(float* x) {}") == {"k": 256}


def test_object_and_function_like_macros_expand_on_tokens_and_on_text() -> None:
    text = "#define CDIV(a, b) (((a) + (b) - 1) / (b))\n#define TILE 32\n#define SQUARE(x) ((x) * (x))\nint t = CDIV(N, TILE);\n"
    macros = cuda_text.MacroTable.of(text)
    assert macros.objects() == {"TILE": "32"}
    assert macros.expand(cuda_text.tokens("CDIV(N, TILE) + SQUARE(CDIV(1, 2))")) == cuda_text.tokens(
        "(((N) + (32) - 1) / (32)) + (((((1) + (2) - 1) / (2))) * ((((1) + (2) - 1) / (2))))"
    )
    assert macros.expand_calls("for (t = 0; t < CDIV(N, 32); ++t)") == "for (t = 0; t < ( ( ( N ) + ( 32 ) - 1 ) / ( 32 ) ); ++t)"
    assert macros.expand(["CDIV"]) == ["CDIV"]  # a function-like macro without arguments is a plain name


def test_hostile_macros_expand_in_bounded_time() -> None:
    doubling = "".join(f"#define M{i} M{i + 1} M{i + 1}\n" for i in range(60)) + "#define M60\n"
    recursive = "#define A B(A)\n#define B(x) A x A\n"
    for text in (doubling, recursive):
        started = time.perf_counter()
        expanded = cuda_text.MacroTable.of(text).expand(["M0", "A", ";"])
        assert time.perf_counter() - started < limit(5.0) and len(expanded) <= cuda_text.MAX_EXPANDED_TOKENS + 64


def test_one_triton_kernel_rule() -> None:
    text = (
        "import triton\nfrom triton import jit as tjit\nfrom numba import jit\n"
        "@triton.jit\ndef a(x): pass\n@tjit\ndef b(x): pass\n@jit\ndef not_triton(x): pass\n"
        "@triton.autotune(configs=[], key=[])\n@triton.jit\ndef c(x): pass\n"
    )
    assert [f.name for f in triton_kernels(text)] == ["a", "b", "c"]
    assert [k.name for k in discover(text, "k.py").kernels] == ["a", "b", "c"]


def test_tree_sitter_is_loaded_on_the_first_cuda_text_and_optional() -> None:
    """The editor pays for tree-sitter only once a CUDA text is read, and without the wheel the scanner reads alone."""
    lazy = (
        "import sys\n"
        "from kernelcast.kernels_runtime.source.discovery import discover\n"
        "discover('def f():\\n    pass\\n', 'f.py')\n"
        "assert 'tree_sitter' not in sys.modules\n"
        "discover('__global__ void k(float* x) { x[0] = 1; }', 'k.cu')\n"
        "print('tree_sitter' in sys.modules)\n"
    )
    missing = (
        "import sys\n"
        "sys.modules['tree_sitter'] = None\n"
        "from kernelcast.kernels_runtime.source import cuda_text\n"
        "print(cuda_text.tree_sitter_available(), [k.name for k in cuda_text.kernels(sys.argv[1])])\n"
    )
    loaded = subprocess.run([sys.executable, "-c", lazy], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == str(cuda_text.tree_sitter_available())
    alone = subprocess.run([sys.executable, "-c", missing, SIGNATURES], capture_output=True, text=True, check=True).stdout.strip()
    assert alone == "False ['tiled', 'plain', 'in_block']"


@pytest.mark.parametrize(
    "text, expected",
    [
        ('x = R"tag(a "// b)tag"; // c', [("string", 4, 22), ("comment", 24, 28)]),
        ('xR"(a)"', [("string", 2, 7)]),  # an identifier ending in R is no raw-string prefix
        ("int n = 1'000'000; char c = '/';", [("string", 28, 31)]),  # digit separators are not quotes
        ('  #define S "/*" // note\n#pragma unroll', [("directive", 0, 17), ("comment", 17, 24), ("directive", 25, 39)]),
        ('"unclosed\n/* open', [("string", 0, 9), ("comment", 10, 17)]),
    ],
)
def test_trivia_finds_each_comment_literal_and_directive(text: str, expected: list[tuple[str, int, int]]) -> None:
    assert list(cuda_text.trivia(text)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "#if 1\n" * 4_900 + "__global__ void k(float* x) { }\n" + "#endif\n" * 4_900,
        'extern "C" {\n' * 3_000 + "__global__ void k(float* x) { }\n" + "}\n" * 3_000,
    ],
    ids=["4,900 nested #if", "3,000 nested extern C"],
)
def test_deeply_nested_text_is_indexed_in_linear_time(text: str) -> None:
    """A tree-sitter node's parent is found by a walk from the root: enclosing declarations are carried down instead."""
    assert len(text) <= cuda_text.MAX_PARSED_CHARS
    cuda_text.clear_cache()
    started = time.perf_counter()
    assert [f.name for f in cuda_text.kernels(text)] == ["k"]
    assert time.perf_counter() - started < limit(0.5)  # asking each node for its parent took over a second here


def test_offsets_count_code_points_around_non_ascii_text() -> None:
    text = "// é ✓ 𝄞\n__global__ void kä(float* x /* ✓ */) { x[0] = 1; } // 𝄞\n__global__ void k2(float* y) { y[0] = 2; }\n"
    spans = [[(f.name, f.start, f.signature_end, f.end, f.body) for f in index(text, reader)] for reader in readers()]
    assert all(found == spans[0] for found in spans)
    assert [text[start:end] for _, start, _, end, _ in spans[0]] == [
        "__global__ void kä(float* x /* ✓ */) { x[0] = 1; }",
        "__global__ void k2(float* y) { y[0] = 2; }",
    ]


EXTENSION_SOURCE = """
#include <torch/extension.h>
#include <cuda_runtime.h>
#define TILE 64
constexpr float SCALE = 1.0507f;

__device__ __forceinline__ float selu(float x) { return x > 0.0f ? SCALE * x : SCALE * 1.6733f * (expf(x) - 1.0f); }

__global__ void selu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * TILE + threadIdx.x;
    if (i < n) y[i] = selu(x[i]);
}

torch::Tensor selu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    selu_kernel<<<(n + TILE - 1) / TILE, TILE>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("selu_cuda", &selu_cuda); }
"""


def test_a_load_inline_string_keeps_its_device_code_and_loses_its_torch_host_code() -> None:
    """What nvcc compiles for an embedded kernel's facts: the macros, constants and device helpers
    the kernel uses, none of what needs PyTorch's headers; lines stay where they were."""
    unit = cuda_text.without_extension_code(EXTENSION_SOURCE)
    assert len(unit) == len(EXTENSION_SOURCE) and unit.count("\n") == EXTENSION_SOURCE.count("\n")
    for kept in (
        "#include <cuda_runtime.h>",
        "#define TILE 64",
        "constexpr float SCALE",
        "float selu(float x)",
        "selu_kernel(const float* x",
    ):
        assert kept in unit
    for dropped in ("torch/extension.h", "torch::Tensor", "data_ptr", "PYBIND11_MODULE"):
        assert dropped not in unit
    assert [k.name for k in cuda_text.kernels(unit)] == ["selu_kernel"]


def test_template_kernels_launched_with_arguments_the_text_fixes_are_instantiated() -> None:
    text = """#define BLOCK 256
constexpr int TILE = 16;
template <typename T, int B> __global__ void k(T* x, const T* __restrict__ y, int n) {}
template <typename T> __global__ void never(T* x) {}
template <int N> __global__ void local(float* x) {}
template <typename... Ts> __global__ void pack(Ts... xs) {}
void host(float* x) {
    const int threads = 128;
    k<scalar_t, BLOCK><<<1, BLOCK>>>(x, x, 3);
    k<double, TILE><<<1, 1>>>(0, 0, 0);
    k<float, BLOCK><<<2, BLOCK>>>(x, x, 3);
    local<threads><<<1, 1>>>(x);
    pack<float, int><<<1, 1>>>(1.0f, 2);
}
"""
    assert cuda_text.template_instances(text).splitlines() == [
        "template __global__ void k<float, BLOCK>(float*, const float* __restrict__, int);",
        "template __global__ void k<double, TILE>(double*, const double* __restrict__, int);",
    ], "scalar_t read as float, once; a local constant and a pack left alone"
    assert cuda_text.template_instances("template <typename T> __global__ void k(T* x) {}") == ""


PROGRAM = """#include <stdio.h>
#include <cuda_runtime.h>
#include <vector>
#define N (1 << 20)
struct Pair { float a, b; };
__host__ __device__ inline float twice(float x) { return 2.0f * x; }
__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = twice(x[i]); }
template <typename T> void launch(T* x, int n) { scale<<<(n + 255) / 256, 256>>>(x, n); }
static void check(cudaError_t error) {
    if (error != cudaSuccess) { printf("%s\\n", cudaGetErrorString(error)); }
}
int main() {
    std::vector<float> host(N);
    float* x;
    check(cudaMalloc(&x, N * sizeof(float)));
    launch(x, N);
    return 0;
}
"""


def test_the_device_part_of_a_program_keeps_kernels_types_and_macros_and_blanks_host_code() -> None:
    part = cuda_text.device_part(PROGRAM)
    assert len(part) == len(PROGRAM) and part.count("\n") == PROGRAM.count("\n"), "offsets and lines kept"
    kept = [line for line in part.splitlines() if line.strip()]
    assert kept == [
        "#include <cuda_runtime.h>",
        "#define N (1 << 20)",
        "struct Pair { float a, b; };",
        "__host__ __device__ inline float twice(float x) { return 2.0f * x; }",
        "__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = twice(x[i]); }",
    ]
    assert cuda_text.device_part(part) == part, "a device-only text stands as it is"
