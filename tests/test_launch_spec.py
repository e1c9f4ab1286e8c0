"""Launch pragmas: what parses, what a spec says, and every refusal in words."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcast.kernels_runtime.source.launch_spec import (
    LaunchSpec,
    LaunchSpecError,
    find_launch_spec,
    kernel_names,
    kernel_parameters,
    launch_spec_template,
    parse_launch_pragma,
    template_for,
)

FIXTURES = Path(__file__).parent / "data" / "measure"
CUDA_PRAGMA = "// kernelcast: launch grid=(cdiv(N,256)) block=(256) smem=0 args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)"
TRITON_PRAGMA = "# kernelcast: launch grid=(cdiv(N, BLOCK),) args=(x:f32[N], y:f32[N], out:f32[N]:out, N:i32=1<<24) BLOCK=1024 num_warps=4"


def error_of(text: str, language: str = "cuda") -> LaunchSpecError:
    with pytest.raises(LaunchSpecError) as caught:
        parse_launch_pragma(text, language)
    return caught.value


def test_cuda_pragma_binds_sizes_grid_and_outputs() -> None:
    spec = parse_launch_pragma(CUDA_PRAGMA, "cuda")
    assert spec.grid == (65536,) and spec.block == (256,) and spec.smem == 0
    assert [(a.name, a.dtype, a.shape, a.is_output) for a in spec.args] == [
        ("x", "f32", (1 << 24,), False),
        ("y", "f32", (1 << 24,), True),
        ("N", "i32", None, False),
    ]
    assert spec.args[2].value == 1 << 24
    assert spec.problem_sizes() == {"N": 1 << 24}
    assert spec.bytes_needed() == 2 * 2 * 4 * (1 << 24)
    assert spec.float_dtype() == "f32"
    mixed = parse_launch_pragma(
        "// kernelcast: launch grid=(1) block=(256) args=(idx:i64[4*N], x:f16[N], y:f32[2]:out, N:i32=1024)", "cuda"
    )
    assert mixed.float_dtype() == "f16"  # the largest floating array, never the indices


def test_triton_pragma_keys_are_names_and_launch_options() -> None:
    spec = parse_launch_pragma(TRITON_PRAGMA, "triton")
    assert spec.grid == (16384,)
    assert spec.block is None
    assert spec.options == {"BLOCK": 1024, "num_warps": 4}
    assert [a.name for a in spec.args if a.is_output] == ["out"]


def test_expressions_follow_python_precedence() -> None:
    spec = parse_launch_pragma(
        "// kernelcast: launch grid=(2 + 3 * 4, 2 ** 3, (1 << 4) // 3 % 4) block=(max(1, min(64, 128))) args=(x:f32[cdiv(10, 3)])"
    )
    assert spec.grid == (14, 8, 1)
    assert spec.block == (64,)
    assert spec.args[0].shape == (4,)


def test_names_may_be_used_before_they_are_bound_and_keys_chain() -> None:
    spec = parse_launch_pragma("// kernelcast: launch grid=(T) block=(B) args=(x:f32[M, K], M:i32=B*4, K:i32=8) B=128 T=M//B")
    assert spec.grid == (4,) and spec.args[0].shape == (512, 8)


def test_inits_flags_and_scalar_floats() -> None:
    spec = parse_launch_pragma(
        "// kernelcast: launch grid=(1) block=(32) args=(idx:i64[16]:randint(0, 16), w:bf16[16]:rand, alpha:f32=0.5)"
    )
    idx, w, alpha = spec.args
    assert (idx.init, idx.init_range) == ("randint", (0, 16))
    assert w.init == "rand" and alpha.value == 0.5
    default_int = parse_launch_pragma("// kernelcast: launch grid=(1) block=(32) args=(m:u8[4])").args[0]
    assert (default_int.init, default_int.init_range) == ("randint", (0, 100))


@pytest.mark.parametrize(
    "text, message",
    [
        ("// kernelcast: launch grid=(1<<40) block=(256) args=(x:f32[4])", "grid dimension x is 1099511627776; CUDA allows 1..2147483647"),
        ("// kernelcast: launch grid=(1, 70000) block=(256) args=(x:f32[4])", "grid dimension y is 70000; CUDA allows 1..65535"),
        ("// kernelcast: launch grid=(1) block=(64, 32) args=(x:f32[4])", "block has 2048 threads; CUDA allows at most 1024"),
        (
            "// kernelcast: launch grid=(1) block=(32) args=(x:f33[4])",
            "unknown dtype 'f33'; use one of f32 f16 bf16 f64 i32 i64 u8 i8 bool",
        ),
        ("// kernelcast: launch grid=(cdiv(N,256) block=(256) args=(x:f32[N], N:i32=4)", "unbalanced parentheses: '(' is never closed"),
        ("// kernelcast: launch grid=(1)) block=(32) args=(x:f32[4])", "unbalanced parentheses: ')' has no matching '('"),
        (
            "// kernelcast: launch grid=(cdiv(M, 256)) block=(256) args=(x:f32[N], N:i32=4)",
            "name 'M' is not bound: add a scalar argument like M:i32=1024 or a key M=1024",
        ),
        (
            "// kernelcast: launch grid=(N/3) block=(256) args=(x:f32[N], N:i32=4)",
            "grid dimension 0 must be an integer, got 1.33333; use // or cdiv",
        ),
        ("// kernelcast: launch grid=(1) block=(32) args=(N:i32)", "scalar argument 'N' needs a value, e.g. N:i32=1024"),
        ("// kernelcast: launch grid=(1) block=(32) args=(x:f32[4]=3)", "array argument 'x' cannot take a value; inputs are random"),
        (
            "// kernelcast: launch grid=(1) block=(32) args=(x:f32[4]:inout)",
            "unknown flag 'inout'; use out, randn, rand or randint(lo, hi)",
        ),
        ("// kernelcast: launch grid=(1) block=(32) args=(i:i32[4]:randn)", "'i' is i32: use randint(lo, hi), not randn"),
        ("// kernelcast: launch grid=(1) block=(32) args=(i:i32[4]:randint(5, 5))", "randint(5, 5) is empty; need lo < hi"),
        ("// kernelcast: launch grid=(1) block=(32) args=(x:f32[0])", "a dimension of 'x' is 0; sizes must be positive"),
        ("// kernelcast: launch grid=(4 // 0) block=(32) args=(x:f32[4])", "division by zero"),
        ("// kernelcast: launch grid=(1 << 99) block=(32) args=(x:f32[4])", "shift needs ints and a count in 0..62, got 1 << 99"),
        ("// kernelcast: launch grid=(10 ** 30) block=(32) args=(x:f32[4])", "10 ** 30 is too large"),
        ("// kernelcast: launch grid=(__import__(1)) block=(32) args=(x:f32[4])", "unknown function '__import__'; use cdiv, min or max"),
        (
            "// kernelcast: launch grid=(1) block=(32) smem=300000 args=(x:f32[4])",
            "smem=300000 bytes is outside 0..232448 (227 KB, Hopper's maximum)",
        ),
        ("// kernelcast: launch block=(32) args=(x:f32[4])", "a launch needs grid=(...), e.g. grid=(cdiv(N, 256),)"),
        ("// kernelcast: launch grid=(1) block=(32)", "a launch needs args=(...) in the kernel's parameter order"),
        ("// kernelcast: launch grid=(1) args=(x:f32[4])", "a CUDA launch needs block=(...), e.g. block=(256)"),
        ("// kernelcast: launch grid=(1) block=(32) args=(x:f32[4], x:f32[4])", "argument 'x' is given twice"),
        ("// kernelcast: launch grid=(1) grid=(2) block=(32) args=(x:f32[4])", "'grid' is given twice"),
        ("// kernelcast: launch grid=(1) block=(32) args=(x:f32[4] y:f32[4])", "expected ',' between arguments, found 'y'"),
        ("// kernelcast: run grid=(1)", "expected 'launch' after 'kernelcast:', found 'run'"),
        ("// kernelcast: launch grid=(1) block=(32) args=(x:f32[4]) $", "unexpected character '$'"),
    ],
)
def test_bad_pragmas_say_what_is_wrong(text: str, message: str) -> None:
    assert error_of(text).message == message


def test_error_column_points_at_the_problem() -> None:
    text = "// kernelcast: launch grid=(1) block=(32) args=(x:f33[4])"
    assert text[error_of(text).column :].startswith("f33")
    unbound = "// kernelcast: launch grid=(cdiv(M, 256)) block=(256) args=(x:f32[8])"
    assert unbound[error_of(unbound).column] == "M"


def test_block_and_smem_are_refused_for_triton() -> None:
    assert error_of("# kernelcast: launch grid=(1,) block=(32) args=(x:f32[4])", "triton").message.startswith("block= is for CUDA kernels")


def test_check_fits_refuses_more_than_ninety_percent_of_memory() -> None:
    spec = parse_launch_pragma("// kernelcast: launch grid=(1) block=(32) args=(x:f32[N], y:f32[N]:out, N:i64=1<<33)")
    with pytest.raises(LaunchSpecError, match=r"arrays need 128.0 GiB but 90% of this GPU's 80.0 GiB is 72.0 GiB \(largest: x"):
        spec.check_fits(80 * 2**30)
    parse_launch_pragma(CUDA_PRAGMA).check_fits(80 * 2**30)


def test_json_round_trip_keeps_the_kernel() -> None:
    spec = find_launch_spec((FIXTURES / "copy_coalesced.cu").read_text(), "copy_coalesced", "cuda")
    again = LaunchSpec.from_json(spec.to_json())
    assert again == spec and again.kernel == "copy_coalesced"


def test_find_launch_spec_takes_the_pragma_above_each_kernel() -> None:
    text = """
// kernelcast: launch grid=(1) block=(32) args=(x:f32[32])
__global__ void first(float* x) {}

// kernelcast: launch grid=(2) block=(64) args=(x:f32[128])
extern "C" __global__ void __launch_bounds__(64) second(float* x) {}

__global__ void third(float* x) {}
// kernelcast: launch kernel=third grid=(3) block=(32) args=(x:f32[96])
"""
    assert find_launch_spec(text, "first", "cuda").grid == (1,)
    assert find_launch_spec(text, "second", "cuda").block == (64,)
    assert find_launch_spec(text, "third", "cuda").grid == (3,)
    assert find_launch_spec(text, "fourth", "cuda") is None


def test_find_launch_spec_reports_the_line_of_a_broken_pragma() -> None:
    text = "import triton\n\n# kernelcast: launch grid=(cdiv(N, 64),) args=(x:f32[N])\n@triton.jit\ndef k(x_ptr):\n    pass\n"
    with pytest.raises(LaunchSpecError) as caught:
        find_launch_spec(text, "k", "triton")
    assert caught.value.line == 2 and "name 'N' is not bound" in caught.value.message


def test_triton_fixture_spec_is_found_past_the_decorator() -> None:
    spec = find_launch_spec((FIXTURES / "add_triton.py").read_text(), "add_kernel", "triton")
    assert spec.kernel == "add_kernel" and spec.options["BLOCK"] == 1024


def test_kernelbench_files_need_no_pragma_and_give_sizes() -> None:
    spec = find_launch_spec((FIXTURES / "kernelbench_relu.py").read_text(), "ModelNew", "pytorch")
    assert spec.kind == "kernelbench"
    inputs = [{"shape": [64, 65536], "numel": 64 * 65536}]  # get_inputs() returns torch.randn(batch_size, dim)
    assert spec.problem_sizes() == {"batch_size": 64, "dim": 65536, "inputs": inputs}
    assert find_launch_spec("x = 1\n", "ModelNew", "pytorch") is None
    # The sizes are those the forecast's problem is read with, tuple assignments too.
    unpacked = "class Model:\n    pass\n\nB, T = 4, 1 << 11\ndim = -1\n"
    assert find_launch_spec(unpacked, "Model", "pytorch").sizes == {"B": 4, "T": 2048}


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.cu")), ids=lambda p: p.name)
def test_every_cuda_fixture_has_a_valid_spec(path: Path) -> None:
    text = path.read_text()
    (name,) = kernel_names(text, "cuda")
    assert find_launch_spec(text, name, "cuda") is not None


def test_kernel_names_and_parameters() -> None:
    cuda = 'extern "C" __global__ void __launch_bounds__(256) scale(const float* __restrict__ x, float *y, int n) {}'
    assert kernel_names(cuda, "cuda") == ["scale"]
    assert kernel_parameters(cuda, "scale", "cuda") == ["x", "y", "n"]
    triton = "@triton.jit\ndef add(x_ptr, y_ptr, n, BLOCK: tl.constexpr = 128):\n    pass\ndef helper(a):\n    pass\n"
    assert kernel_names(triton, "triton") == ["add"]
    assert kernel_parameters(triton, "add", "triton") == ["x_ptr", "y_ptr", "n", "BLOCK"]


@pytest.mark.parametrize(
    "language, params",
    [
        ("triton", ["x_ptr", "y_ptr", "out_ptr", "n_elements", "BLOCK_SIZE"]),
        ("triton", ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "BLOCK_M"]),
        ("cuda", ["x", "y", "alpha"]),
        ("cuda", []),
    ],
)
def test_templates_parse_and_name_the_kernel(language: str, params: list[str]) -> None:
    text = launch_spec_template("k", language, params)
    spec = parse_launch_pragma(text, language)
    assert spec.kernel == "k"
    constexprs = [p for p in params if language == "triton" and p.isupper() and len(p) > 1]
    assert [a.name for a in spec.args] == [p for p in params if p not in constexprs]


def test_a_cuda_template_reads_each_parameters_declared_type() -> None:
    """Read from names alone, `float a` was an f32 array and `int* bins` an f32 one: measuring that pragma
    passes a pointer where the kernel takes a float. Inputs marked const say which pointers are outputs."""
    code = (
        'extern "C" __global__ void scale(const float* __restrict__ x, float* y, float a, int n) {}\n'
        "__global__ void hist(const unsigned char* in, int* bins, int n, int nbins) {}\n"
        "__global__ void halves(const __half x[], __half *y, double s, size_t count) {}\n"
        "template <typename T> __global__ void generic(const T* x, T* y, T alpha, int n) {}\n"
    )
    expected = {
        "scale": "x:f32[n], y:f32[n]:out, a:f32=1.0, n:i32=1<<20",
        "hist": "in:u8[n], bins:i32[n]:out, n:i32=1<<20, nbins:i32=1024",
        "halves": "x:f16[count], y:f16[count]:out, s:f64=1.0, count:i64=1<<20",
        "generic": "x:f32[n], y:f32[n]:out, alpha:f32=1.0, n:i32=1<<20",  # T: its name's guess
    }
    for name, args in expected.items():
        text = template_for(code, name, "cuda")
        assert f"args=({args})" in text, text
        assert parse_launch_pragma(text, "cuda").kernel == name


def test_a_triton_template_takes_strides_and_row_lengths_for_scalars() -> None:
    """The tutorial softmax's `in_stride`, `out_stride` and `n_cols` were arrays, `out_stride` an output:
    measuring that pragma hands the kernel tensors where it multiplies a row index by a stride."""
    code = "@triton.jit\ndef softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, eps, BLOCK_SIZE: tl.constexpr):\n    pass\n"
    text = template_for(code, "softmax_kernel", "triton")
    assert "args=(out_ptr:f32[N]:out, in_ptr:f32[N], in_stride:i32=1024, out_stride:i32=1024, n_cols:i32=1024, eps:f32=1.0)" in text
    spec = parse_launch_pragma(text, "triton")
    assert [arg.name for arg in spec.args if arg.shape] == ["out_ptr", "in_ptr"]


def test_a_commented_out_kernel_between_a_pragma_and_its_kernel_takes_nothing() -> None:
    text = (
        "// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<20)\n"
        "// __global__ void old_scale(const float* x, float* y, int n)\n"
        "/* __global__ void older_scale(const float* x, float* y, int n) */\n"
        "__global__ void scale(const float* x, float* y, int N) { int i = threadIdx.x; if (i < N) y[i] = 2.0f * x[i]; }\n"
    )
    assert find_launch_spec(text, "scale", "cuda").kernel == "scale"
    assert find_launch_spec(text, "old_scale", "cuda") is None
    assert kernel_names(text, "cuda") == ["scale"]


def test_a_signature_over_several_lines_and_a_template_kernel_get_their_pragmas() -> None:
    text = (
        "// kernelcast: launch grid=(4) block=(128) args=(x:f32[512])\n"
        "template <int BLOCK>\n"
        "__global__ void\n"
        "__launch_bounds__(BLOCK)\n"
        "tiled(float* x) { x[threadIdx.x] = BLOCK; }\n"
        "// kernelcast: launch grid=(2) block=(64) args=(x:f32[128])\n"
        'extern "C" {\n'
        "__global__ void plain(float* x) { x[threadIdx.x] = 0.0f; }\n"
        "}\n"
    )
    assert find_launch_spec(text, "tiled", "cuda").grid == (4,)
    assert find_launch_spec(text, "plain", "cuda").grid == (2,)
    assert kernel_parameters(text, "tiled", "cuda") == ["x"]
