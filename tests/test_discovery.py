"""Kernel discovery: every kernel form with exact ranges, pragmas, and inputs that must not break it."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from machine import limit

from kernelcast.kernels_runtime.source.discovery import (
    Discovery,
    Span,
    discover,
    discover_bytes,
    normalise_code,
)

DATA = Path(__file__).parent / "data" / "discovery"


def text_of(text: str, span: Span) -> str:
    """The text an editor would select for `span` (LSP line breaks)."""
    starts = [0, *(m.end() for m in re.finditer(r"\r\n|\r|\n", text))]
    return text[starts[span.start_line] + span.start_col : starts[span.end_line] + span.end_col]


def fixture(name: str) -> tuple[str, Discovery]:
    text = (DATA / name).read_text()
    return text, discover(text, str(DATA / name))


def by_name(found: Discovery) -> dict:
    return {kernel.name: kernel for kernel in found.kernels}


# --- CUDA files ------------------------------------------------------------------------


def test_cuda_file_finds_each_global_with_exact_ranges() -> None:
    text, found = fixture("kernels.cu")
    assert found.kind == "cuda" and found.problems == ()
    kernels = by_name(found)
    assert list(kernels) == ["scale", "vector_add", "raw_string_kernel"]  # not the comment, declaration or __device__

    scale = kernels["scale"]
    assert scale.signature == Span(4, 0, 6, 80)
    assert scale.body == Span(4, 0, 11, 1)
    assert text_of(text, scale.signature).startswith("template <typename T, int N = 4>\n__global__ void __launch_bounds__")
    assert text_of(text, scale.signature).endswith("/* ) */ float factor)")
    assert scale.code == text_of(text, scale.body) and scale.code.endswith("// }\n}")
    assert (scale.language, scale.container) == ("cuda", None)

    add = kernels["vector_add"]
    assert add.signature == Span(15, 0, 15, 86)
    assert add.body == Span(15, 0, 18, 1)
    assert text_of(text, add.signature) == 'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)'

    raw = kernels["raw_string_kernel"]
    assert raw.body == Span(22, 0, 24, 1)
    assert text_of(text, raw.signature) == "[[maybe_unused]] static __global__ void raw_string_kernel()"


def test_half_typed_kernel_keeps_the_next_kernel() -> None:
    text = "__global__ void first(float* x) {\n    if (x) {\n        x[0] = 1;\n\n__global__ void second(float* y) { y[0] = 2; }\n"
    found = discover(text, "k.cu")
    first, second = found.kernels
    assert first.body == Span(0, 0, 2, 17)  # cut before the next kernel, trailing blank line dropped
    assert second.body == Span(4, 0, 4, 46) and second.code == "__global__ void second(float* y) { y[0] = 2; }"
    assert found.problems == ("kernel `first` at line 1 has an unfinished body; its range is a guess",)


def test_unterminated_body_runs_to_end_of_file() -> None:
    text = "__global__ void k(float* x) {\n  x[0] = 1;\n  for (;;) {"
    found = discover(text, "k.cu")
    (kernel,) = found.kernels
    assert kernel.signature == Span(0, 0, 0, 27)
    assert kernel.body == Span(0, 0, 2, 12)
    assert "unfinished body" in found.problems[0]


def test_unfinished_parameter_list_and_missing_body() -> None:
    found = discover("__global__ void k(float* x,\n", "k.cu")
    assert found.kernels[0].signature == Span(0, 0, 0, 27)
    assert "unfinished parameter list" in found.problems[0]
    found = discover("__global__ void k(float* x)", "k.cu")
    assert found.kernels[0].body == Span(0, 0, 0, 27)
    assert "unfinished body" in found.problems[0]


def test_crlf_tabs_and_unicode_columns_are_code_points() -> None:
    text = "// ünïcode 😀 comment\r\n\t/*😀*/ __global__ void ñame(float* x) {\r\n\tx[0] = 1; // 😀 }\r\n}\r\n"
    (kernel,) = discover(text, "u.cu").kernels
    assert kernel.name == "ñame"
    assert kernel.signature == Span(1, 7, 1, 37)  # tab and emoji count one each
    assert kernel.body == Span(1, 7, 3, 1)
    assert text_of(text, kernel.signature) == "__global__ void ñame(float* x)"
    lone_cr = "\r__global__ void k() {\r}\r"
    assert discover(lone_cr, "k.cuh").kernels[0].body == Span(1, 0, 2, 1)


# --- Triton ----------------------------------------------------------------------------


def test_triton_decorator_forms_with_exact_ranges() -> None:
    text, found = fixture("triton_kernels.py")
    assert found.kind == "triton" and found.problems == ()
    kernels = by_name(found)
    assert list(kernels) == ["add_kernel", "scale_kernel", "bare_jit_kernel", "aliased_kernel"]  # not numba's jit
    add = kernels["add_kernel"]
    assert add.signature == Span(8, 0, 8, 62)
    assert add.body == Span(7, 0, 11, 102)
    assert text_of(text, add.signature) == "def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):"
    assert add.code.startswith("@triton.jit\ndef add_kernel") and add.code.endswith("mask=offsets < n)")
    scale = kernels["scale_kernel"]
    assert scale.signature == Span(20, 0, 24, 10)
    assert text_of(text, scale.signature).endswith(") -> None:")
    assert scale.body == Span(14, 0, 25, 26)
    assert scale.code.startswith("@triton.autotune(")
    assert kernels["bare_jit_kernel"].body == Span(28, 0, 30, 8)
    assert all(k.language == "triton" and k.container is None for k in found.kernels)


def test_half_typed_triton_file_uses_tolerant_scan() -> None:
    text = (DATA / "triton_kernels.py").read_text().replace("pid = tl.program_id(0)\n    offsets", "pid = tl.program_id(0\n    offsets")
    found = discover(text, "t.py")
    assert found.problems == ("syntax error at line 10: kernels found by a tolerant scan",)
    kernels = by_name(found)
    assert list(kernels) == ["add_kernel", "scale_kernel", "bare_jit_kernel", "aliased_kernel"]
    assert kernels["add_kernel"].body == Span(7, 0, 11, 102)
    assert kernels["scale_kernel"].signature == Span(20, 0, 24, 10)
    assert kernels["scale_kernel"].body == Span(14, 0, 25, 26)


def test_jit_without_triton_import_is_not_triton() -> None:
    assert discover("from numba import jit\n\n@jit\ndef f(x):\n    return x\n", "n.py").kernels == ()


# --- CUDA inside Python strings ------------------------------------------------------


def test_load_inline_triple_quoted_module_variable_is_exact() -> None:
    text, found = fixture("kernelbench_new.py")
    relu = by_name(found)["relu_kernel"]
    assert relu.container == "load_inline" and relu.language == "cuda"
    assert relu.signature == Span(10, 0, 10, 60)
    assert relu.body == Span(10, 0, 13, 1)
    assert relu.code == text_of(text, relu.body)
    assert "relu_cuda" not in by_name(found)  # host code in the source is not a kernel


def test_raw_kernel_with_escapes_maps_into_the_literal() -> None:
    text = 'import cupy\nk = cupy.RawKernel("extern \\"C\\" __global__ void k2(float* x) {\\n x[0] = 2;\\n}", "k2")\n'
    (kernel,) = discover(text, "c.py").kernels
    assert kernel.container == "RawKernel"
    assert kernel.code == 'extern "C" __global__ void k2(float* x) {\n x[0] = 2;\n}'
    assert kernel.signature == Span(1, 20, 1, 61)
    assert text_of(text, kernel.signature) == 'extern \\"C\\" __global__ void k2(float* x)'
    assert text_of(text, kernel.body).endswith("2;\\n}")


def test_raw_module_fstring_lists_and_positional_load_inline() -> None:
    text = (
        "import cupy as cp\n"
        "from torch.utils import cpp_extension\n"
        'HEAD = r"""__global__ void a(int* p) { p[0] = 0; }"""\n'
        'mod = cp.RawModule(code=f"""\n__global__ void b(int* p) {{ p[1] = 1; }}\n""")\n'
        'ext = cpp_extension.load_inline("e", "", [HEAD, "__global__ void c() {}"])\n'
    )
    found = discover(text, "m.py")
    kernels = by_name(found)
    assert {k: v.container for k, v in kernels.items()} == {"a": "load_inline", "b": "RawModule", "c": "load_inline"}
    assert kernels["a"].body == Span(2, 11, 2, 50)
    assert kernels["b"].body == Span(4, 0, 4, 41) and kernels["b"].code == "__global__ void b(int* p) { p[1] = 1; }"
    assert text_of(text, kernels["c"].body) == "__global__ void c() {}"
    assert found.kind == "python"


def test_crlf_python_with_embedded_cuda_is_exact() -> None:
    text = (
        'from torch.utils.cpp_extension import load_inline\r\nsrc = """\r\n__global__ void k(float* x) {\r\n  x[0] = 1;\r\n}\r\n"""\r\n'
        'm = load_inline("m", "", cuda_sources=src)\r\n'
    )
    (kernel,) = discover(text, "w.py").kernels
    assert kernel.body == Span(2, 0, 4, 1)
    assert kernel.code == "__global__ void k(float* x) {\n  x[0] = 1;\n}"


def test_embedded_cuda_survives_a_syntax_error_elsewhere() -> None:
    text = 'import cupy\nsrc = """\n__global__ void k(float* x) { x[0] = 1; }\n"""\nker = cupy.RawKernel(src, "k")\ndef broken(:\n'
    found = discover(text, "b.py")
    assert found.problems == ("syntax error at line 6: kernels found by a tolerant scan",)
    (kernel,) = found.kernels
    assert (kernel.container, kernel.body) == ("RawKernel", Span(2, 0, 2, 41))


# --- KernelBench -----------------------------------------------------------------------


def test_kernelbench_candidate_and_reference_model() -> None:
    text, found = fixture("kernelbench_new.py")
    assert found.kind == "kernelbench"
    model_new = by_name(found)["ModelNew"]
    assert (model_new.language, model_new.container) == ("cuda", "kernelbench")
    assert model_new.signature == Span(40, 0, 40, 26)
    assert text_of(text, model_new.signature) == "class ModelNew(nn.Module):"
    assert model_new.body == Span(40, 0, 45, 32)
    assert "class Model(" not in model_new.code and "class ModelNew(" in model_new.code and "def get_inputs" in model_new.code

    reference = found.reference_model
    assert reference is not None and (reference.name, reference.language) == ("Model", "pytorch")
    assert reference.signature == Span(30, 0, 30, 23) and reference.body == Span(30, 0, 37, 28)
    assert reference.code.startswith("import torch\nimport torch.nn as nn\n")
    for kept in ("batch_size = 16", "class Model(", "def get_inputs", "def get_init_inputs"):
        assert kept in reference.code
    for dropped in ("__global__", "load_inline(", "class ModelNew"):
        assert dropped not in reference.code


def test_reference_file_only_and_pytorch_candidate() -> None:
    _, found = fixture("reference.py")
    assert (found.kind, found.kernels) == ("kernelbench", ())
    assert found.reference_model is not None and found.reference_model.body == Span(4, 0, 6, 28)
    candidate = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.clamp_min(0)\n"
    (model_new,) = discover(candidate, "new.py").kernels
    assert (model_new.language, model_new.code, found.kind) == ("pytorch", candidate, "kernelbench")
    assert discover(candidate + "    def half(", "new.py").kernels[0].name == "ModelNew"  # half-typed


# --- pragmas ---------------------------------------------------------------------------


def test_pragmas() -> None:
    text = (
        "// kernelcast: off reference=base.cu::add\n"
        "/* kernelcast: launch grid=(4,1,1) block=(256,1,1) */\n"
        "// kernelcast: inputs N=1024\n"
        "// kernelcast: colour=blue\n"
        "// kernelcast: reference=\n"
        "// kernelcast:\n"
    )
    pragmas = discover(text, "p.cu").pragmas
    assert (pragmas.off, pragmas.reference) == (True, "base.cu::add")
    assert pragmas.problems == (
        "line 4: unknown kernelcast pragma key 'colour'; known: off, reference=path[::kernel]",
        "line 5: `reference` needs a value: `reference=path[::kernel]`",
        "line 6: empty kernelcast pragma; use `kernelcast: off` or `kernelcast: reference=path[::kernel]`",
    )
    python = discover('# kernelcast: reference="my dir/base.py::add"\n', "p.py").pragmas
    assert python.reference == "my dir/base.py::add" and python.problems == ()


# --- robustness ------------------------------------------------------------------------


def test_big_file_is_refused_quickly() -> None:
    data = b"__global__ void k() {}\n" * (10 * 2**20 // 23 + 1)
    started = time.perf_counter()
    found = discover_bytes(data, "big.cu")
    text_found = discover(data.decode(), "big.cu")
    assert time.perf_counter() - started < limit(0.1)
    assert found.problems == ("file is 10.0 MB; kernelcast reads files up to 2 MB",) and found.kernels == ()
    assert text_found.problems == found.problems


def test_binary_invalid_utf8_empty_and_bom() -> None:
    assert discover_bytes(b"\x7fELF\x00\x01", "a.cu").problems == ("binary file",)
    assert discover("x\x00y", "a.py").problems == ("binary file",)
    latin1_comment = discover_bytes("// café\n".encode("latin-1") + b"__global__ void k() {}\n", "a.cu")
    assert latin1_comment.problems == () and [k.name for k in latin1_comment.kernels] == ["k"]
    for path in ("e.cu", "e.py", "e.txt"):
        found = discover("", path)
        assert found.kernels == () and found.problems == ()
    found = discover_bytes(b"\xef\xbb\xbf@triton.jit\ndef k(x):\n    pass\n", "bom.py")
    assert found.kernels[0].body == Span(0, 0, 2, 8) and found.problems == ()
    in_text = discover("\ufeff@triton.jit\ndef k(x):\n    pass\n", "bom.py")
    assert in_text.kernels[0].body == Span(0, 1, 2, 8) and in_text.problems == ()


def test_deep_nesting_does_not_recurse() -> None:
    depth = 100_000
    braces = discover("__global__ void k() " + "{" * depth + "}" * depth, "d.cu")
    assert braces.kernels[0].body == Span(0, 0, 0, 20 + 2 * depth) and braces.problems == ()
    parens = discover("__global__ void k(" + "(" * depth, "d.cu")
    assert parens.kernels[0].name == "k" and "unfinished parameter list" in parens.problems[0]
    for python in ("x = " + "(" * depth + ")" * depth, "x = " + "-" * depth + "1", "x = " + "[" * depth):
        found = discover("@triton.jit\ndef k(x):\n    pass\n" + python, "d.py")
        assert [k.name for k in found.kernels] == ["k"]
        assert found.problems and "tolerant scan" in found.problems[0]


def test_many_non_kernel_keywords_stay_linear() -> None:
    started = time.perf_counter()
    found = discover("__global__ " * 150_000, "many.cu")
    assert found.kernels == () and time.perf_counter() - started < limit(2.0)


@pytest.mark.parametrize("name", ["kernels.cu", "triton_kernels.py", "kernelbench_new.py"])
def test_every_prefix_of_a_file_is_handled(name: str) -> None:
    """Half-typed files: every truncation returns a Discovery without the safety net firing."""
    text = (DATA / name).read_text()
    for end in range(0, len(text), 7):
        found = discover(text[:end], name)
        assert not any(p.startswith("kernelcast could not scan") for p in found.problems), (end, found.problems)


def test_unknown_extension_has_no_kernels() -> None:
    assert discover("__global__ void k() {}", "notes.txt").kind == "none"


# --- normalise_code --------------------------------------------------------------------


def test_normalise_code_ignores_comments_and_spacing_only() -> None:
    a = "__global__ void k(float* x) {\n  // comment\n  x[0] = x[1] + 2; /* more */\n}\n"
    b = "__global__ void k(float *x){ x[0]=x[1]+2; }"
    assert normalise_code(a, "cuda") == normalise_code(b, "cuda") == "__global__ void k(float*x){x[0]=x[1]+2;}"
    assert normalise_code('s = "a  b" # c', "triton") == 's="a  b"'
    assert normalise_code("y = a - -b", "pytorch") != normalise_code("y = a--b", "pytorch")
    assert normalise_code('const char* s = "//not a comment";', "cuda") == 'const char*s="//not a comment";'
