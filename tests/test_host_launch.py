"""Launches read from host code as people write them (kernels_runtime/source/host_launch.py), and
the forecast that follows them: issue 34 found every block-size edit in host code forecast 1.00×."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench_few_value_programs import FILE as RELU_FILE
from benchmarks.bench_repeated_grid import FILE as REPEATED_GRID_FILE
from kernelcast.analysis import analyse_text, build_request, problem_sizes
from kernelcast.batch import request_with_facts
from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.kernels_runtime.source.host_launch import (
    DEFAULT_ELEMENTS,
    FewValuePrograms,
    RepeatedGrid,
    autotune_configs,
    few_value_programs,
    host_launch,
    repeated_grids,
)
from kernelcast.kernels_runtime.source.launch_spec import PROBLEM_INPUTS_HEADING, find_launch_spec, with_problem_inputs
from kernelcast.models.embedded.backend import EmbeddedBackend
from kernelcast.settings import Settings
from kernelcast.wire import ASSUMED_CANDIDATE_CONFIG, ASSUMED_CANDIDATE_GRID, ASSUMED_REFERENCE_GRID, ForecastRequest, KernelSide

SCALE = """__global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""


def _cuda(host: str, prelude: str = "") -> str:
    return prelude + SCALE + "\nvoid run(const float* x, float* y, int n) {\n" + host + "\n}\n"


def _cuda_launch(host: str, prelude: str = "", elements: int | None = None) -> Any:
    return host_launch(_cuda(host, prelude), "scale", "cuda", python_file=False, elements=elements)


def test_literals_give_the_whole_launch() -> None:
    launch = _cuda_launch("    scale<<<4096, 256, 1024>>>(x, y, 1 << 20);")
    assert (launch.grid, launch.block, launch.smem, launch.guessed) == ((4096,), (256,), 1024, ())
    assert launch.kind == "kernel" and launch.pragma == "" and launch.sizes == {"n": 1 << 20}


@pytest.mark.parametrize(
    "prelude, host",
    [
        ("#define THREADS 128\n", "    scale<<<1024, THREADS>>>(x, y, n);"),
        ("constexpr int THREADS = 128;\n", "    scale<<<1024, THREADS>>>(x, y, n);"),
        ("", "    const int threads = 128;\n    scale<<<1024, threads>>>(x, y, n);"),
        ("", "    dim3 block(128);\n    scale<<<1024, block>>>(x, y, n);"),
        ("", "    dim3 block = {128, 1, 1};\n    scale<<<1024, block>>>(x, y, n);"),
        ("#define BLOCK_DIM 128\n", "    scale<<<dim3(1024), dim3(BLOCK_DIM)>>>(x, y, n);"),
        ("", "    int threads = 64;\n    threads = 128;\n    scale<<<1024, threads>>>(x, y, n);"),  # the last assignment counts
    ],
    ids=["define", "constexpr", "const-local", "dim3-ctor", "dim3-braces", "dim3-inline", "reassigned"],
)
def test_the_block_is_read_through_names_macros_and_dim3(prelude: str, host: str) -> None:
    launch = _cuda_launch(host, prelude)
    assert launch.block in ((128,), (128, 1, 1)) and launch.grid in ((1024,), (1024, 1, 1)) and launch.guessed == ()


def test_a_name_declared_in_another_function_is_not_seen() -> None:
    other = "void other() { const int threads = 512; }\n"
    assert _cuda_launch("    scale<<<1024, threads>>>(x, y, n);", other).guessed == ("config",)


@pytest.mark.parametrize(
    "prelude, grid",
    [
        ("", "(N + 255) / 256"),
        ("", "at::ceil_div(N, 256)"),
        ("static inline int div_round(int a, int b) { return (a + b - 1) / b; }\n", "div_round(N, 256)"),
        ("#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))\n", "CEIL_DIV(N, 256)"),
    ],
    ids=["ceil-div", "at-ceil-div", "helper", "macro"],
)
def test_ceil_divisions_of_known_sizes_give_the_grid(prelude: str, grid: str) -> None:
    launch = _cuda_launch(f"    const int N = 1000000;\n    scale<<<{grid}, 256>>>(x, y, N);", prelude)
    assert launch.grid == (3907,) and launch.guessed == () and launch.sizes == {"n": 1000000}


def test_a_run_time_size_keeps_the_block_and_guesses_the_grid_for_the_problem() -> None:
    host = "    int size = x.numel();\n    int blocks = (size + 255) / 256;\n    scale<<<blocks, 256>>>(x, y, size);"
    launch = _cuda_launch(host)
    assert launch.block == (256,) and launch.guessed == ("grid",) and launch.grid == (DEFAULT_ELEMENTS // 256,)
    assert _cuda_launch(host, elements=4096).grid == (16,)  # the problem's elements, when stated


def test_a_grid_that_guessing_would_blow_up_covers_the_elements_one_thread_each() -> None:
    launch = _cuda_launch("    dim3 grid(x.size(0), x.size(1));\n    scale<<<grid, dim3(16, 16)>>>(x, y, n);")
    assert launch.block == (16, 16, 1) and launch.grid == (DEFAULT_ELEMENTS // 256,) and launch.guessed == ("grid",)


def test_a_templated_kernel_with_a_stream_and_shared_memory_is_read() -> None:
    text = SCALE.replace("__global__", "template <typename T>\n__global__") + (
        "void run(float* x, float* y, int n, cudaStream_t stream) {\n"
        "    scale<float><<<64, 128, 32 * sizeof(float), stream>>>(x, y, n);\n}\n"
    )
    launch = host_launch(text, "scale", "cuda", python_file=False)
    assert (launch.grid, launch.block, launch.smem) == ((64,), (128,), 128)


def test_a_kernel_launched_nowhere_has_no_host_launch() -> None:
    assert host_launch(SCALE, "scale", "cuda", python_file=False) is None
    assert _cuda_launch("    other<<<1, 32>>>(x);") is None


LOAD_INLINE = '''import torch
from torch.utils.cpp_extension import load_inline

cuda_source = """
#define BLOCK 512
__global__ void relu_kernel(const float* x, float* y, int size) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < size) y[i] = x[i] > 0 ? x[i] : 0;
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto size = x.numel();
    auto y = torch::empty_like(x);
    const int block_size = BLOCK;
    const int num_blocks = (size + block_size - 1) / block_size;
    relu_kernel<<<num_blocks, block_size>>>(x.data_ptr<float>(), y.data_ptr<float>(), size);
    return y;
}
"""
relu = load_inline(name="relu", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);", cuda_sources=cuda_source, functions=["relu_cuda"])
'''


def test_the_wrapper_in_a_load_inline_string_gives_the_launch() -> None:
    launch = host_launch(LOAD_INLINE, "relu_kernel", "cuda", python_file=True, elements=16 * 16384)
    assert launch.block == (512,) and launch.grid == (512,) and launch.guessed == ("grid",)


RELU_MODEL = """

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return relu.relu_cuda(x.contiguous())


def get_inputs():
    return [torch.rand(4096, 1000)]
"""


@pytest.mark.parametrize(
    ("wrapper", "grid"),
    [
        ("", (8000,)),  # x.numel(): 4096 x 1000 elements, 512 threads a block
        ("auto size = x.numel();", (8000,)),
        ("auto size = x.size(0) * x.size(-1);", (8000,)),  # a negative axis counts from the last
        ("int64_t size = x.sizes()[0];", (8,)),  # C++'s own spelling of a shape
        ("int size = 7 * 512;", (7,)),  # a local value stands: only the wrapper's parameters are read from the caller
    ],
)
def test_a_load_inline_wrapper_reads_its_sizes_from_what_the_timed_call_passes_it(wrapper: str, grid: tuple[int, ...]) -> None:
    """`relu.relu_cuda(x)` in `forward` passes the wrapper a tensor of the shape `get_inputs()` makes: the
    launch's grid is read off `x.numel()` or `x.size(i)` in the C++, not guessed."""
    text = (LOAD_INLINE + RELU_MODEL).replace("auto size = x.numel();", wrapper or "auto size = x.numel();")
    launch = host_launch(text, "relu_kernel", "cuda", python_file=True)
    assert (launch.grid, launch.block, launch.guessed) == (grid, (512,), ())


def test_a_number_the_timed_call_passes_a_load_inline_wrapper_reaches_its_launch() -> None:
    """An int parameter of the C++ wrapper is what the Python call passes it; a call the timed path does not
    make, or a file with no inputs, leaves the grid guessed."""
    passed = (LOAD_INLINE + RELU_MODEL).replace("relu_cuda(torch::Tensor x)", "relu_cuda(torch::Tensor x, int64_t block)")
    passed = passed.replace("const int block_size = BLOCK;", "const int block_size = block;").replace("(x.contiguous())", "(x, 2 * 128)")
    launch = host_launch(passed, "relu_kernel", "cuda", python_file=True)
    assert (launch.grid, launch.block, launch.guessed) == ((16000,), (256,), ())
    not_timed = (LOAD_INLINE + RELU_MODEL).replace("return relu.relu_cuda(x.contiguous())", "return x")
    assert host_launch(not_timed, "relu_kernel", "cuda", python_file=True).guessed == ("grid",)
    no_inputs = (LOAD_INLINE + RELU_MODEL).split("\n\ndef get_inputs")[0]
    assert host_launch(no_inputs, "relu_kernel", "cuda", python_file=True).guessed == ("grid",)


CUPY = '''import cupy

source = r"""
extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""
N = 1 << 22
THREADS = 128
scale = cupy.RawKernel(source, "scale")


def run(x, y):
    scale(((N + THREADS - 1) // THREADS,), (THREADS,), (x, y, N), shared_mem=64)
'''


def test_a_cupy_raw_kernel_call_gives_the_launch() -> None:
    launch = host_launch(CUPY, "scale", "cuda", python_file=True)
    assert (launch.grid, launch.block, launch.smem, launch.guessed) == ((32768,), (128,), 64, ())
    assert launch.sizes == {"n": 1 << 22}


TRITON = """import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    n = 1 << 24
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=BLOCK, num_warps=8)
    return out
"""


def test_a_triton_launch_reads_its_keywords_module_constants_and_grid_lambda() -> None:
    launch = host_launch(TRITON, "add_kernel", "triton", python_file=True)
    assert launch.options == {"BLOCK_SIZE": 1024, "num_warps": 8} and launch.grid == (1 << 14,) and launch.guessed == ()
    assert launch.triton_signature() == {"n": 1 << 24}  # the pointers' types are the compiler's to guess
    launched = launch.as_launch()
    assert launched["block"] == [256] and launched["constexprs"] == {"BLOCK_SIZE": 1024}
    unknown = host_launch(TRITON.replace("n = 1 << 24", "n = out.numel()"), "add_kernel", "triton", python_file=True)
    assert unknown.guessed == ("grid",) and unknown.grid == (DEFAULT_ELEMENTS // 1024,)
    default_warps = host_launch(TRITON.replace(", num_warps=8", ""), "add_kernel", "triton", python_file=True)
    assert default_warps.options["num_warps"] == 4  # what Triton launches with


# `kernel[grid, BLOCK]`: a CUDA launch's block written as the second axis of a Triton grid.
REPEATED = REPEATED_GRID_FILE.format(block=1024, copies="BLOCK", elements="1 << 20")
HELPER_READS_AXIS_1 = """
@triton.jit
def _column():
    return tl.program_id(1)
"""


def test_a_triton_grid_axis_its_kernel_never_reads_repeats_the_whole_grid() -> None:
    """`kernel[grid, BLOCK]`, a CUDA launch's block written as Triton's grid, launches BLOCK copies of
    the grid: TritonBench's LLM-written kernels that did it measured up to 1,000x slower."""
    written = "scale_kernel[(n + BLOCK - 1) // BLOCK, BLOCK]"
    assert repeated_grids(REPEATED) == (RepeatedGrid("scale_kernel", copies=1024, programs=1024, launch=written, unread_axes=(1,)),)
    unsized = REPEATED.replace('[torch.randn(1 << 20, device="cuda")]', "[]")
    assert [(grid.copies, grid.programs) for grid in repeated_grids(unsized)] == [(1024, None)]
    assert repeated_grids(REPEATED.replace(", BLOCK](", "](")) == ()
    assert repeated_grids(REPEATED.replace(", BLOCK](", ", 1](")) == ()  # an axis of one program repeats nothing
    # The axis is read, in the kernel or in a @triton.jit function it calls: a real second dimension.
    reads_both = REPEATED.replace("* 2.0", "* tl.program_id(axis=1)")
    assert repeated_grids(reads_both) == ()
    with_helper = REPEATED.replace("@triton.jit\ndef scale", HELPER_READS_AXIS_1 + "\n\n@triton.jit\ndef scale")
    through_helper = with_helper.replace("* 2.0", "* _column()")
    assert repeated_grids(through_helper) == ()
    # A function the file does not define may read any axis; an axis held in a variable, any axis.
    assert repeated_grids(REPEATED.replace("* 2.0", "* imported_helper()")) == ()
    assert repeated_grids(REPEATED.replace("tl.program_id(0)", "tl.program_id(AXIS)")) == ()
    # A kernel that reads no axis takes its work another way (an atomic ticket): not judged either.
    assert repeated_grids(REPEATED.replace("tl.program_id(0)", "tl.atomic_add(x_ptr, 1)")) == ()
    # An extent left to run time is not judged.
    assert repeated_grids(REPEATED.replace("BLOCK = 1024", "BLOCK = pick_block(x)")) == ()


def test_triton_programs_that_work_on_a_few_values_each_are_found_with_their_block() -> None:
    """A kernel with no `tl.arange` loads and stores single values, one lane's work for a program of 4
    warps, and one whose blocks are one-dimensional and hold at most FEW_VALUES values as the launch
    fixes them leaves most lanes idle too: TritonBench's ReLU and abs written with one value a program
    measured about 100x slower than eager, its sine with blocks of 4 on a program per element as slow."""
    text = RELU_FILE.format(block=1024, elements="1 << 20")
    assert few_value_programs(text) == (FewValuePrograms("relu_kernel", values=1, programs=1 << 20, launch="relu_kernel[n,]"),)
    # A grid left to run time grows with the problem: a program per element here.
    unsized = text.replace('[torch.randn(1 << 20, device="cuda")]', "[]")
    (launch,) = few_value_programs(unsized)
    assert (launch.programs, launch.per_element, launch.programs_at(4096.0)) == (None, 1.0, 4096.0)
    # The block kernel with blocks of 16 values a program, and of 4 on a program per element.
    sixteen = few_value_programs(RELU_FILE.format(block=16, elements="1 << 20"))
    # (the model calls relu alone, so the sizes relu_blocks reads are not known: its grid grows with them).
    assert [(launch.kernel, launch.values, launch.programs_at(1 << 20)) for launch in sixteen] == [
        ("relu_kernel", 1, 1 << 20),
        ("relu_block_kernel", 16, 1 << 16),
    ]
    over = unsized.replace("relu_block_kernel[(triton.cdiv(n, 1024),)]", "relu_block_kernel[(n,)]").replace("BLOCK=1024", "BLOCK=4")
    assert [(launch.values, launch.programs_at(4096.0)) for launch in few_value_programs(over)] == [(1, 4096.0), (4, 4096.0)]
    blocked = unsized.replace("relu_block_kernel[(triton.cdiv(n, 1024),)]", "relu_block_kernel[(triton.cdiv(n, 16),)]")
    assert [launch.per_element for launch in few_value_programs(blocked.replace("BLOCK=1024", "BLOCK=16"))] == [1.0, 1 / 16]
    # Not judged: a block the launch leaves to run time, one of two dimensions, a block pointer.
    assert len(few_value_programs(unsized.replace("BLOCK=1024", "BLOCK=pick_block(x)"))) == 1
    two_dimensional = over.replace("mask = offsets < n", "mask = (offsets[:, None] < n) & (offsets[None, :] < n)")
    assert [launch.kernel for launch in few_value_programs(two_dimensional)] == ["relu_kernel"]
    # A block made in a @triton.jit function of the file the kernel calls counts as the kernel's own.
    helper = "@triton.jit\ndef _lanes(n):\n    return tl.arange(0, {lanes}) < n\n\n\n"
    calls_helper = text.replace("    if index < n:\n", "    keep = _lanes(n)\n    if index < n:\n")
    for lanes, found in ((16, [("relu_kernel", 16)]), (1024, [])):
        with_helper = calls_helper.replace("@triton.jit\ndef relu_kernel", helper.format(lanes=lanes) + "@triton.jit\ndef relu_kernel")
        assert [(launch.kernel, launch.values) for launch in few_value_programs(with_helper)] == found
    pointer = text.replace("tl.maximum(tl.load(x_ptr + index), 0.0)", "tl.load(tl.make_block_ptr(x_ptr, (n,), (1,), (index,), (1,), (0,)))")
    assert few_value_programs(pointer) == ()
    # A function the file does not define may build the block; a kernel that loads nothing is not judged.
    assert few_value_programs(text.replace("tl.load(x_ptr + index)", "imported_load(x_ptr, index)")) == ()
    assert few_value_programs(text.replace("tl.load(x_ptr + index)", "1.0")) == ()


def test_a_grid_function_that_returns_its_grid_reads_as_the_lambda_would() -> None:
    """`def grid(meta): return (...)` is how many LLM-written wrappers spell the grid lambda; a grid
    function that computes more than one expression is left to run time, and so is the name of a
    grid rebound by such a function after an assignment."""
    as_function = TRITON.replace(
        '    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)\n',
        '    def grid(meta):\n        """One program a block."""\n        return (triton.cdiv(n, meta["BLOCK_SIZE"]),)\n\n',
    )
    assert as_function != TRITON
    launch = host_launch(as_function, "add_kernel", "triton", python_file=True)
    assert launch.grid == (1 << 14,) and launch.guessed == ()
    two_steps = as_function.replace("        return (triton.cdiv(", "        blocks = 1\n        return (triton.cdiv(")
    assert host_launch(two_steps, "add_kernel", "triton", python_file=True).guessed == ("grid",)
    rebound = two_steps.replace("    def grid(meta):", "    grid = (7,)\n    def grid(meta):")
    assert host_launch(rebound, "add_kernel", "triton", python_file=True).guessed == ("grid",)


def test_a_block_size_passed_by_position_and_a_wrappers_default_are_read() -> None:
    """`BLOCK_SIZE: "tl.constexpr"` (a string annotation, as Triton also reads it) passed by position,
    its value a default of the wrapper no call overrides: TritonBench's human add kernel launches
    4 elements a program and an LLM's rewrite 1024, 41x apart when measured."""
    string_annotated = TRITON.replace("BLOCK_SIZE: tl.constexpr", 'BLOCK_SIZE: "tl.constexpr"')
    by_position = string_annotated.replace("BLOCK_SIZE=BLOCK, num_warps=8", "BLOCK")
    launch = host_launch(by_position, "add_kernel", "triton", python_file=True)
    assert launch.options == {"BLOCK_SIZE": 1024, "num_warps": 4} and "BLOCK_SIZE" not in [arg.name for arg in launch.args]
    defaulted = by_position.replace("def add(x, y):", "def add(x, y, block=4):").replace("n, BLOCK)", "n, block)")
    assert host_launch(defaulted, "add_kernel", "triton", python_file=True).options["BLOCK_SIZE"] == 4
    called = defaulted + "\n\ndef run(x, y):\n    return add(x, y, 256)\n"
    assert "BLOCK_SIZE" not in host_launch(called, "add_kernel", "triton", python_file=True).options
    by_keyword = defaulted + "\n\ndef run(x, y):\n    return add(x, y, block=256)\n"
    assert "config" in host_launch(by_keyword, "add_kernel", "triton", python_file=True).guessed


ROW_SUMS = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sums(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc))


def summed(x):
    rows, n_cols = x.shape
    out = torch.empty(x.numel() // n_cols, device=x.device)
    row_sums[(rows,)](x, out, n_cols, BLOCK=1024)
    return out


class ModelNew(nn.Module):
    def forward(self, x):
        return summed(x.contiguous())


def get_inputs():
    return [torch.rand(4096, 65536)]
"""


def test_a_triton_launch_in_a_kernelbench_file_reads_its_sizes_from_the_inputs_get_inputs_makes() -> None:
    """The sizes reach the launch from `get_inputs()` through `forward`, a helper's parameter and `x.shape`:
    the grid and the loop's bound are known, nothing guessed. Without `get_inputs()` they stay run-time sizes."""
    launch = host_launch(ROW_SUMS, "row_sums", "triton", python_file=True)
    assert (launch.grid, launch.sizes, launch.guessed) == ((4096,), {"n_cols": 65536}, ())
    inline = host_launch(ROW_SUMS.replace("[(rows,)]", "[(x.numel() // x.shape[1],)]"), "row_sums", "triton", python_file=True)
    assert (inline.grid, inline.guessed) == ((4096,), ())
    unknown = host_launch(ROW_SUMS.split("\n\ndef get_inputs")[0], "row_sums", "triton", python_file=True)
    assert unknown.guessed == ("grid",) and unknown.sizes == {}


@pytest.mark.parametrize(
    "sized",
    [
        "out = torch.empty_like(x)\n    rows = out.numel() // n_cols",  # a tensor the helper allocates
        "out = torch.empty(x.shape[0], n_cols, device=x.device)\n    rows = out.size(0)",
        "rows = x.reshape(-1, 16, n_cols).shape[0] * 16",  # regrouped: the -1 takes what is left
        "rows = x.view(x.shape[0] // 2, 2 * n_cols).flatten().numel() // n_cols",
        "rows = x.unsqueeze(0).squeeze().unsqueeze(-1).shape[0]",
        "rows = x.shape[-2] * x.size(-1) // n_cols",  # a negative axis counts from the last
    ],
)
def test_sizes_read_through_tensors_the_timed_call_allocates_and_reshapes_reach_the_grid(sized: str) -> None:
    """A helper that reads its grid off an output it allocates, or off a reshaped view of its input,
    launches a grid the inputs fix; a reshape that does not fit its tensor leaves the grid guessed."""
    text = ROW_SUMS.replace("    row_sums[(rows,)]", f"    {sized}\n    row_sums[(rows,)]")
    assert host_launch(text, "row_sums", "triton", python_file=True).grid == (4096,)
    misfit = ROW_SUMS.replace("    row_sums[(rows,)]", "    rows = x.reshape(-1, 3).shape[0]\n    row_sums[(rows,)]")
    assert host_launch(misfit, "row_sums", "triton", python_file=True).guessed == ("grid",)


def test_a_tensor_made_and_then_reshaped_is_not_read_as_the_shape_it_was_made_with() -> None:
    """`torch.zeros(x.numel()).view(rows, -1)` is not the flat tensor the factory makes: its rows are not
    4096 x 65536, and a grid read off them is left to run time, not misread."""
    made = "    flat = torch.zeros(x.numel()).view(x.shape[0], -1)\n    rows = flat.shape[0] * 2\n    row_sums[(rows,)]"
    text = ROW_SUMS.replace("    row_sums[(rows,)]", made)
    assert host_launch(text, "row_sums", "triton", python_file=True).guessed == ("grid",)


HALVES = """

def halves(x):
    if x.dim() == 2:
        return x.reshape(x.shape[0] * 2, -1)
    return {other}
"""


@pytest.mark.parametrize(
    ("forward", "other", "grid"),
    [
        ("return summed(halves(x))", "x.reshape(x.shape[0] * 2, -1)", (8192,)),  # a call's argument is walked first
        ("y = halves(x)\n        return summed(y)", "x.reshape(-1, x.shape[1] // 2)", (8192,)),  # both returns agree
        ("y = halves(x).float()\n        return summed(y)", "x.reshape(-1, x.shape[1] // 2)", (8192,)),
        ("y = halves(x)\n        return summed(y)", "x.t()", None),  # the returns disagree
        ("y = halves(x)\n        return summed(y)", "None", None),
    ],
)
def test_the_shape_a_helper_returns_reaches_the_launches_after_it(forward: str, other: str, grid: tuple[int, ...] | None) -> None:
    """`y = helper(x)` in a timed call knows the shape the helper returns where each of its `return`s gives
    the same known shape, so a later launch reads its grid off `y`; where they differ it stays guessed."""
    helper = HALVES.format(other=other)
    text = ROW_SUMS.replace("return summed(x.contiguous())", forward).replace("\n\nclass ModelNew", helper + "\n\nclass ModelNew")
    launch = host_launch(text, "row_sums", "triton", python_file=True)
    assert (launch.grid, launch.guessed) == ((grid, ()) if grid else (launch.grid, ("grid",)))


def test_a_number_the_timed_call_passes_a_wrapper_reaches_its_launch() -> None:
    """`summed(x, 256)` from `forward`: the wrapper's block parameter is 256 at its launch, not unknown."""
    passed = ROW_SUMS.replace("def summed(x):", "def summed(x, block):").replace("BLOCK=1024)", "BLOCK=block)")
    passed = passed.replace("summed(x.contiguous())", "summed(x.contiguous(), 256)")
    assert host_launch(passed, "row_sums", "triton", python_file=True).options["BLOCK"] == 256
    by_keyword = passed.replace("summed(x.contiguous(), 256)", "summed(x.contiguous(), block=2 * 64)")
    assert host_launch(by_keyword, "row_sums", "triton", python_file=True).options["BLOCK"] == 128


AUTOTUNED = """import triton
import triton.language as tl


@triton.autotune(configs=[{configs}], key=["n"])
@triton.jit
def tuned(x_ptr, n, BLOCK: tl.constexpr):
    pass


def run(x, n):
    tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, n)
"""
ONE = "triton.Config({'BLOCK': 256}, num_warps=4)"
TWO = "triton.Config({'BLOCK': 128}, num_warps=2), triton.Config({'BLOCK': 512}, num_warps=8, num_stages=3)"


def test_autotune_configs_are_a_set_one_is_known_several_are_partly_assumed() -> None:
    text = AUTOTUNED.format(configs=TWO)
    assert autotune_configs(text, "tuned") == (({"BLOCK": 128, "num_warps": 2}, {"BLOCK": 512, "num_warps": 8, "num_stages": 3}), False)
    several = host_launch(text, "tuned", "triton", python_file=True)
    assert several.options == {"BLOCK": 128, "num_warps": 2} and several.guessed == ("config", "grid")
    one = host_launch(AUTOTUNED.format(configs=ONE), "tuned", "triton", python_file=True)
    assert one.options == {"BLOCK": 256, "num_warps": 4} and one.guessed == ("grid",)
    assert one.grid == (DEFAULT_ELEMENTS // 256,)


def test_kernelbench_constants_and_get_inputs_give_the_problem() -> None:
    text = """import torch
import torch.nn as nn

batch_size = 16
dim = 16384
M = 1024 * 2


class Model(nn.Module):
    def forward(self, x, w):
        return x @ w


class ModelNew(Model):
    pass


def get_inputs():
    w = torch.rand((dim, M))
    return [torch.randn(batch_size, dim), w]


def get_init_inputs():
    return []
"""
    for name in ("Model", "ModelNew"):
        sizes = find_launch_spec(text, name, "pytorch").problem_sizes()
        assert sizes == {
            "batch_size": 16,
            "dim": 16384,
            "M": 2048,
            "inputs": [{"shape": [16, 16384], "numel": 16 * 16384}, {"shape": [16384, 2048], "numel": 16384 * 2048}],
        }


# --- through the analysis, to the forecast ----------------------------------------------------------------


def _request(folder: Path, name: str, text: str, reference: str, kernel: str | None = None) -> ForecastRequest:
    path = folder / name
    path.write_text(text)
    analysis = analyse_text(path.as_uri(), 1, text, path, folder, Settings(), SPECS["H100-SXM"], str(folder / reference))
    (result,) = [result for result in analysis.results if kernel in (None, result.kernel.name)]
    assert result.reference is not None and not result.unchanged
    return build_request(analysis, result, problem_sizes(result, path, folder), 0.8)


def _speedup(request: ForecastRequest) -> float:
    return float(EmbeddedBackend().predict(request).details["mean_log2"])


def test_a_block_size_edit_in_host_code_moves_the_forecast(tmp_path: Path) -> None:
    """Issue 34: `<<<(n+255)/256, 256>>>` against `<<<(n+31)/32, 32>>>` forecast exactly 1.00×."""
    reference = _cuda("    scale<<<(n + 255) / 256, 256>>>(x, y, n);")
    (tmp_path / "reference.cu").write_text(reference)
    edited = reference.replace("2.0f * x[i]", "x[i] * 2.0f")  # a change the analysis forecasts rather than calls unchanged
    same = _request(tmp_path, "same.cu", edited, "reference.cu")
    narrow = _request(tmp_path, "narrow.cu", edited.replace("(n + 255) / 256, 256", "(n + 31) / 32, 32"), "reference.cu")
    (launch,) = narrow.candidate.facts["launches"]
    assert launch["block"] == [32] and launch["grid"] == [DEFAULT_ELEMENTS // 32]
    assert narrow.reference.facts["launches"][0]["block"] == [256]
    assert set(narrow.assumed) >= {ASSUMED_CANDIDATE_GRID, ASSUMED_REFERENCE_GRID}
    assert abs(_speedup(narrow) - _speedup(same)) > 0.1  # log2 of the speedup


def test_a_triton_num_warps_edit_moves_the_forecast_and_autotune_is_marked(tmp_path: Path) -> None:
    (tmp_path / "reference.py").write_text(TRITON)
    edited = TRITON.replace("offs < n", "n > offs")
    same = _request(tmp_path, "same.py", edited, "reference.py::add_kernel")
    one_warp = _request(tmp_path, "one_warp.py", edited.replace("num_warps=8", "num_warps=1"), "reference.py::add_kernel")
    assert one_warp.candidate.facts["launches"][0]["num_warps"] == 1
    assert abs(_speedup(one_warp) - _speedup(same)) > 0.05
    tuned = edited.replace(
        "@triton.jit\ndef add_kernel",
        "@triton.autotune(configs=[" + TWO.replace("'BLOCK'", "'BLOCK_SIZE'") + "], key=['n'])\n@triton.jit\ndef add_kernel",
    )
    assert (
        ASSUMED_CANDIDATE_CONFIG
        in _request(tmp_path, "tuned.py", tuned.replace(", BLOCK_SIZE=BLOCK, num_warps=8", ""), "reference.py::add_kernel").assumed
    )


def test_the_same_code_launched_otherwise_is_not_unchanged(tmp_path: Path) -> None:
    reference = _cuda("    scale<<<(n + 255) / 256, 256>>>(x, y, n);")
    (tmp_path / "reference.cu").write_text(reference)
    for name, text, unchanged in (("copy.cu", reference, True), ("narrow.cu", reference.replace("255) / 256, 256", "31) / 32, 32"), False)):
        path = tmp_path / name
        path.write_text(text)
        analysis = analyse_text(path.as_uri(), 1, text, path, tmp_path, Settings(), SPECS["H100-SXM"], str(tmp_path / "reference.cu"))
        assert analysis.results[0].unchanged is unchanged


def test_the_hover_says_which_parts_of_a_host_launch_were_guessed() -> None:
    from kernelcast.server.hover import _assumed_words

    words = _assumed_words([ASSUMED_REFERENCE_GRID, ASSUMED_CANDIDATE_GRID, ASSUMED_CANDIDATE_CONFIG])
    assert words.startswith("Assumed, not read from the code: reference grid, candidate grid, candidate launch config.")
    assert "grid computed from run-time sizes" in words and "first" in words and "spread covers" in words
    # A grid alone is read for the problem's elements, and the block it is launched with is read as written.
    assert "spread covers" not in _assumed_words([ASSUMED_REFERENCE_GRID, ASSUMED_CANDIDATE_GRID])


PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=1)


def get_inputs():
    return [torch.rand(4096, 65536)]


def get_init_inputs():
    return []
"""


def _modelnew_launches_in_the_editor_and_the_batch(solution: str, folder: Path, problem: str = PROBLEM) -> tuple[list[dict], list[dict]]:
    """The launches a `ModelNew` solution beside its problem's file is read as making: as the editor builds
    its request, and as the batch computes them for the same pair sent bare."""
    (folder / "problem.py").write_text(problem)
    path = folder / "solution.py"
    path.write_text(solution)
    analysis = analyse_text(path.as_uri(), 1, solution, path, folder, Settings(), SPECS["H100-SXM"], str(folder / "problem.py::Model"))
    (result,) = [result for result in analysis.results if result.kernel.name == "ModelNew"]
    request = build_request(analysis, result, problem_sizes(result, path, folder), 0.8)
    bare = ForecastRequest(KernelSide(problem, "pytorch", "Model"), KernelSide(solution, "triton", "ModelNew"), request.hardware)
    batch = ForecastRequest.from_json(request_with_facts(bare.to_json())["request"])
    return request.candidate.facts["launches"], batch.candidate.facts["launches"]


def test_a_modelnew_counts_only_the_launches_its_forward_makes_in_the_editor_and_the_batch(tmp_path: Path) -> None:
    """A file holding a backward kernel (or one nothing calls) beside the forward one was read as
    making both launches, so a fused library kernel was forecast as two passes."""
    backward = (
        "\n\n@triton.jit\ndef row_sums_backward(grad_ptr, x_grad_ptr, n_cols, BLOCK: tl.constexpr):\n"
        "    row = tl.program_id(0)\n    offs = tl.arange(0, BLOCK)\n"
        "    tl.store(x_grad_ptr + row * n_cols + offs, tl.load(grad_ptr + row) + offs * 0.0, mask=offs < n_cols)\n\n\n"
        "def summed_backward(grad, x):\n    x_grad = torch.empty_like(x)\n"
        "    row_sums_backward[(x.shape[0],)](grad, x_grad, x.shape[1], BLOCK=1024)\n    return x_grad\n"
    )
    solution = ROW_SUMS.replace("\n\nclass ModelNew", backward + "\n\nclass ModelNew")
    editor, batch = _modelnew_launches_in_the_editor_and_the_batch(solution, tmp_path)
    assert [launch["kernel"] for launch in editor] == ["row_sums"]
    assert batch == editor


def test_a_modelnew_that_chooses_between_two_kernels_counts_one_launch_in_the_editor_and_the_batch(tmp_path: Path) -> None:
    """Host code that picks a kernel for narrow rows or another for wide ones runs one of them a
    call; read as launching both, the solution was forecast as two passes (the code counts already
    read one path). The inputs' 65,536 columns take the wide one."""
    narrow = (
        "\n\n@triton.jit\ndef row_sums_narrow(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n"
        "    x = tl.load(x_ptr + tl.program_id(0) * n_cols + offs, mask=offs < n_cols, other=0.0)\n"
        "    tl.store(out_ptr + tl.program_id(0), tl.sum(x))\n"
    )
    chosen = (
        "    if n_cols <= 1024:\n        row_sums_narrow[(rows,)](x, out, n_cols, BLOCK=1024)\n"
        "    else:\n        row_sums[(rows,)](x, out, n_cols, BLOCK=1024)\n"
    )
    solution = ROW_SUMS.replace("\n\ndef summed", narrow + "\n\ndef summed").replace(
        "    row_sums[(rows,)](x, out, n_cols, BLOCK=1024)\n", chosen
    )
    editor, batch = _modelnew_launches_in_the_editor_and_the_batch(solution, tmp_path)
    assert [launch["kernel"] for launch in editor] == ["row_sums"]
    assert batch == editor


def test_a_modelnew_without_get_inputs_reads_its_launch_sizes_from_its_problems_in_the_editor_and_the_batch(tmp_path: Path) -> None:
    """KernelBench passes both models the same inputs, so a `ModelNew` file beside its problem's file
    launches on the shapes the problem's `get_inputs()` makes; read alone it would guess them."""
    solution = ROW_SUMS.split("\n\ndef get_inputs")[0]
    (tmp_path / "problem.py").write_text(PROBLEM)
    path = tmp_path / "solution.py"
    path.write_text(solution)
    settings = Settings()
    analysis = analyse_text(path.as_uri(), 1, solution, path, tmp_path, settings, SPECS["H100-SXM"], str(tmp_path / "problem.py::Model"))
    (result,) = [result for result in analysis.results if result.kernel.name == "ModelNew"]
    request = build_request(analysis, result, problem_sizes(result, path, tmp_path), 0.8)
    (launch,) = request.candidate.facts["launches"]
    assert launch["grid"] == [4096] and [arg["value"] for arg in launch["args"]] == [None, None, 65536]
    bare = ForecastRequest(KernelSide(PROBLEM, "pytorch", "Model"), KernelSide(solution, "triton", "ModelNew"), request.hardware)
    batch = ForecastRequest.from_json(request_with_facts(bare.to_json())["request"])
    assert batch.candidate.facts["launches"] == request.candidate.facts["launches"]
    alone = host_launch(solution, "row_sums", "triton", python_file=True)
    assert alone.guessed == ("grid",) and alone.sizes == {}


def test_two_solutions_of_one_problem_are_read_on_its_inputs_in_the_editor_and_as_the_pairs_show_them(tmp_path: Path) -> None:
    """A solution measured against another solution is timed on the problem's inputs, which neither
    file states: beside `reference.py` both are read with them, as the real-world pairs show such
    pairs to training (`with_problem_inputs`); without it the launch stays a guess."""
    solution = ROW_SUMS.split("\n\ndef get_inputs")[0]
    other = solution.replace("BLOCK=1024", "BLOCK=256")
    (tmp_path / "other.py").write_text(other)
    (tmp_path / "reference.py").write_text(PROBLEM)
    request = _request(tmp_path, "solution.py", solution, "other.py::ModelNew", "ModelNew")
    (launch,) = request.candidate.facts["launches"]
    assert launch["grid"] == [4096] and [arg["value"] for arg in launch["args"]] == [None, None, 65536]
    assert all(
        side.code.endswith(with_problem_inputs(code, PROBLEM)[len(code) :])
        for side, code in ((request.candidate, solution), (request.reference, other))
    )
    assert PROBLEM_INPUTS_HEADING in request.candidate.code and PROBLEM_INPUTS_HEADING in request.reference.code
    as_paired = ForecastRequest(
        KernelSide(with_problem_inputs(other, PROBLEM), "triton", "ModelNew"),
        KernelSide(with_problem_inputs(solution, PROBLEM), "triton", "ModelNew"),
        request.hardware,
    )
    batch = ForecastRequest.from_json(request_with_facts(as_paired.to_json())["request"])
    assert (batch.reference.facts["launches"], batch.candidate.facts["launches"]) == (
        request.reference.facts["launches"],
        request.candidate.facts["launches"],
    )

    from kernelcast.server.hover import render

    path = tmp_path / "solution.py"
    analysis = analyse_text(path.as_uri(), 1, solution, path, tmp_path, Settings(), SPECS["H100-SXM"], str(tmp_path / "other.py::ModelNew"))
    (result,) = [result for result in analysis.results if result.kernel.name == "ModelNew"]
    assert "Inputs: the problem's, from Model in reference.py" in render(result, analysis)

    (tmp_path / "reference.py").unlink()
    alone = _request(tmp_path, "solution.py", solution, "other.py::ModelNew", "ModelNew")
    assert PROBLEM_INPUTS_HEADING not in alone.candidate.code and _speedup(alone) != _speedup(request)
    (tmp_path / "reference.py").write_text(PROBLEM)
    against_the_problem = _request(tmp_path, "solution.py", solution, "reference.py::Model", "ModelNew")
    assert PROBLEM_INPUTS_HEADING not in against_the_problem.candidate.code, "the problem as reference gives its inputs already"


def test_a_solution_takes_its_problems_inputs_only_where_it_states_none_and_is_python() -> None:
    solution = ROW_SUMS.split("\n\ndef get_inputs")[0]
    timed = with_problem_inputs(solution, "N = 8\nx = 2 * N\n" + PROBLEM)
    added = timed[len(solution) :]
    assert timed.startswith(solution) and added.startswith(f"\n\n{PROBLEM_INPUTS_HEADING}\n")
    assert "N = 8" in added and "def get_inputs" in added and "def get_init_inputs" in added and "import torch" in added
    assert "class Model" not in added, "the problem's model is not the solution's"
    assert with_problem_inputs(ROW_SUMS, PROBLEM) == ROW_SUMS, "its own get_inputs() stands"
    assert with_problem_inputs(SCALE, PROBLEM) == SCALE, "a .cu file"
    assert with_problem_inputs(solution, PROBLEM.split("\n\ndef get_inputs")[0]) == solution, "a problem without inputs"


CONV_PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride)

    def forward(self, x):
        return torch.relu(self.conv(x))


batch_size, in_channels, out_channels, kernel_size = 16, 32, 64, 3


def get_inputs():
    return [torch.rand(batch_size, in_channels, 130, 258)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, 2]
"""
CONV_SOLUTION = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_relu(x_ptr, bias_ptr, n, plane, channels, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    b = tl.load(bias_ptr + (offs // plane) % channels, mask=offs < n)
    tl.store(x_ptr + offs, tl.maximum(x + b, 0.0), mask=offs < n)


def fused(y, bias):
    n = y.numel()
    bias_relu[(triton.cdiv(n, 1024),)](y, bias, n, y.shape[2] * y.shape[3], bias.shape[0], BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x):
        return fused(self.conv(x), self.bias)
"""


def test_a_modelnew_reads_its_sizes_through_the_layers_and_parameters_its_problem_builds(tmp_path: Path) -> None:
    """The launch's grid is the conv's output, (16, 64, 64, 128) for a 130 x 258 input, 3 x 3 kernel,
    stride 2 as get_init_inputs() builds it, and its channels the parameter's: read in the editor and
    the batch alike, where the solution alone guesses them."""
    editor, batch = _modelnew_launches_in_the_editor_and_the_batch(CONV_SOLUTION, tmp_path, CONV_PROBLEM)
    (launch,) = editor
    assert launch["grid"] == [16 * 64 * 64 * 128 // 1024]
    assert [arg["value"] for arg in launch["args"]] == [None, None, 16 * 64 * 64 * 128, 64 * 128, 64]
    assert batch == editor
    assert host_launch(CONV_SOLUTION, "bias_relu", "triton", python_file=True).guessed == ("grid",)


SOFTMAX = """import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_cols
    x = tl.load(in_ptr + tl.program_id(0) * in_stride + offsets, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + tl.program_id(0) * out_stride + offsets, num / tl.sum(num, axis=0), mask=mask)


def softmax(x):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
    return y
"""


def test_a_block_size_computed_at_run_time_widens_the_forecast_to_cover_it(tmp_path: Path) -> None:
    """A num_warps edit of the tutorial softmax, whose BLOCK_SIZE the host code computes from the
    row length: timed on an H200 at 8192 x 4096 (do_bench), 4 -> 16 warps was 1.01x faster, while
    the forecast at the guessed BLOCK_SIZE of 1024 read 3.1x slower at confidence 0.94."""
    (tmp_path / "reference.py").write_text(SOFTMAX)
    request = _request(tmp_path, "wide.py", SOFTMAX.replace("num_warps=4", "num_warps=16"), "reference.py::softmax_kernel")
    assert ASSUMED_CANDIDATE_CONFIG in request.assumed
    backend = EmbeddedBackend()
    guessed, as_if_read = backend.predict(request).details, backend.predict(replace(request, assumed=())).details
    assert guessed["spread_log2"] > as_if_read["spread_log2"]
    assert abs(guessed["mean_log2"]) < abs(as_if_read["mean_log2"])


def test_a_pragma_and_a_host_launch_of_one_kernel_are_read_on_one_problem(tmp_path: Path) -> None:
    """The softmax given the pragma Measure's message proposes (1024 rows of 1024, 16 warps), against
    its reference without one: the reference's launch, read from host code, took its row count for
    the element count the pragma's sizes multiply to (2^30 rows) and its tensors for nothing, and
    the same kernel under the pragma read 3.6x faster."""
    pragma = (
        "# kernelcast: launch kernel=softmax_kernel grid=(cdiv(N, BLOCK_SIZE),) args=(out_ptr:f32[N]:out, in_ptr:f32[N],"
        " in_stride:i32=1024, out_stride:i32=1024, n_cols:i32=1024) N=1<<20 BLOCK_SIZE=1024 num_warps=16\n"
    )
    (tmp_path / "reference.py").write_text(SOFTMAX)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(SOFTMAX.replace("@triton.jit\n", pragma + "@triton.jit\n"))
    analysis = analyse_text(
        candidate.as_uri(), 1, candidate.read_text(), candidate, tmp_path, Settings(), SPECS["H100-SXM"], str(tmp_path / "reference.py")
    )
    (result,) = analysis.results
    request = build_request(analysis, result, problem_sizes(result, candidate, tmp_path), 0.8)
    (reference,), (stated,) = request.reference.facts["launches"], request.candidate.facts["launches"]
    assert reference["grid"] == stated["grid"] == [1024]
    assert reference["bytes"] == stated["bytes"] == 8 << 20
    assert reference["num_warps"] == 4 and stated["num_warps"] == 16
    # CUDA: the reference's guessed grid covers the stated threads in its own blocks, its `n` the stated one.
    (tmp_path / "reference.cu").write_text(_cuda("    scale<<<(n + 255) / 256, 256>>>(x, y, n);"))
    narrow = tmp_path / "narrow.cu"
    narrow.write_text(
        "// kernelcast: launch kernel=scale grid=(cdiv(N, 32)) block=(32) args=(x:f32[N], y:f32[N]:out, n:i32=N) N=1<<24\n"
        + _cuda("    scale<<<(n + 31) / 32, 32>>>(x, y, n);")
    )
    analysis = analyse_text(
        narrow.as_uri(), 1, narrow.read_text(), narrow, tmp_path, Settings(), SPECS["H100-SXM"], str(tmp_path / "reference.cu")
    )
    (result,) = analysis.results
    request = build_request(analysis, result, problem_sizes(result, narrow, tmp_path), 0.8)
    (reference,), (stated,) = request.reference.facts["launches"], request.candidate.facts["launches"]
    assert (reference["grid"], reference["block"], stated["grid"]) == ([1 << 16], [256], [1 << 19])
    assert reference["args"][2] == stated["args"][2] == {"ctype": "i32", "value": 1 << 24}


def test_the_proposed_pragma_keeps_the_config_the_host_code_launches_with() -> None:
    """Measure's message proposed num_warps=4 for the tutorial softmax its host code launches with 16
    warps: the pragma, measured as proposed, would time another config than the file runs."""
    from kernelcast.kernels_runtime.source.launch_spec import template_for

    softmax = SOFTMAX.replace("num_warps=4", "num_warps=16")
    text = template_for(softmax, "softmax_kernel", "triton", host_launch(softmax, "softmax_kernel", "triton", python_file=True))
    assert text.endswith("BLOCK_SIZE=1024 num_warps=16")  # BLOCK_SIZE is computed at run time: left at the guess
    add = TRITON.replace("BLOCK = 1024", "BLOCK = 512")
    assert template_for(add, "add_kernel", "triton", host_launch(add, "add_kernel", "triton", python_file=True)).endswith(
        "BLOCK_SIZE=512 num_warps=8"
    )
    narrow = _cuda("    scale<<<(n + 127) / 128, 128>>>(x, y, n);")
    cuda = template_for(narrow, "scale", "cuda", host_launch(narrow, "scale", "cuda", python_file=False))
    assert "grid=(cdiv(n, 128)) block=(128)" in cuda
    assert "block=(256)" in template_for(narrow, "scale", "cuda")  # no host launch read: the default


def test_the_proposed_pragma_of_a_2d_launch_keeps_its_grid_block_and_stated_scalars() -> None:
    """A transpose launched as dim3(nx / 32, ny / 32) blocks of (32, 8): the proposal was a 1-D launch of
    256 threads, which leaves threadIdx.y at 0, and width and height at 1024 where the program states 8192."""
    from kernelcast.kernels_runtime.source.launch_spec import parse_launch_pragma, template_for

    program = (
        "#define TILE 32\n#define ROWS 8\n"
        "__global__ void transpose(float* out, const float* in, int width, int height) {}\n"
        "int main() {\n    const int nx = 8192, ny = 8192;\n    float *d_in, *d_out;\n"
        "    dim3 grid(nx / TILE, ny / TILE), block(TILE, ROWS);\n    transpose<<<grid, block>>>(d_out, d_in, nx, ny);\n}\n"
    )
    text = template_for(program, "transpose", "cuda", host_launch(program, "transpose", "cuda", python_file=False))
    spec = parse_launch_pragma(text, "cuda")
    assert (spec.grid, spec.block) == ((256, 256, 1), (32, 8, 1))
    assert [(arg.name, arg.value) for arg in spec.args if not arg.is_array] == [("width", 8192), ("height", 8192)]
    vector = _cuda("    scale<<<((1 << 24) + 255) / 256, 256>>>(x, y, 1 << 24);")
    assert "n:i32=16777216" in template_for(vector, "scale", "cuda", host_launch(vector, "scale", "cuda", python_file=False))


def test_the_proposed_pragma_sizes_arrays_as_the_program_allocates_them() -> None:
    """A matrix multiply passed its side n: the proposal made every matrix n elements long, so the
    kernel, run as proposed, read and wrote n² of them out of bounds. The allocations say n²."""
    from kernelcast.kernels_runtime.source.host_launch import proposed_pragma
    from kernelcast.kernels_runtime.source.launch_spec import parse_launch_pragma

    program = (
        "__global__ void matmul(const float* a, const float* b, float* c, int n) {}\n"
        "int main() {\n    int n = 1024;\n    size_t bytes = n * n * sizeof(float);\n    float *a, *b, *c;\n"
        "    cudaMalloc(&a, bytes);\n    cudaMalloc((void**)&b, bytes);\n    CHECK(cudaMalloc(&c, bytes));\n"
        "    dim3 block(16, 16), grid(n / 16, n / 16);\n    matmul<<<grid, block>>>(a, b, c, n);\n}\n"
    )
    spec = parse_launch_pragma(
        proposed_pragma(program, "matmul", "cuda", host_launch(program, "matmul", "cuda", python_file=False)), "cuda"
    )
    assert [(arg.name, arg.shape, arg.is_output) for arg in spec.args if arg.is_array] == [
        ("a", (1 << 20,), False),
        ("b", (1 << 20,), False),
        ("c", (1 << 20,), True),
    ]
    unsized = program.replace("size_t bytes = n * n * sizeof(float);", "size_t bytes = read_size();")
    text = proposed_pragma(unsized, "matmul", "cuda", host_launch(unsized, "matmul", "cuda", python_file=False))
    assert "a:f32[n]" in text  # a size the text does not fix is left to the user, as before


def test_a_side_without_a_pragma_is_measured_at_the_config_its_own_host_code_launches() -> None:
    """Measuring a num_warps or block-size edit whose pragma only the candidate carries timed the
    reference at the candidate's config too: the same launch on both sides, 1.00x."""
    from kernelcast.kernels_runtime.measure import prepare_request
    from kernelcast.kernels_runtime.source.launch_spec import LaunchSpec

    def specs(candidate: str, reference: str, language: str, name: str) -> tuple[LaunchSpec, LaunchSpec]:
        request = prepare_request(
            {"code": candidate, "language": language, "name": name}, {"code": reference, "language": language, "name": name}
        )
        assert isinstance(request, dict), request
        return LaunchSpec.from_json(request["candidate"]["spec"]), LaunchSpec.from_json(request["reference"]["spec"])

    pragma = (
        "# kernelcast: launch kernel=softmax_kernel grid=(cdiv(N, BLOCK_SIZE),) args=(out_ptr:f32[N]:out, in_ptr:f32[N],"
        " in_stride:i32=1024, out_stride:i32=1024, n_cols:i32=1024) N=1<<20 BLOCK_SIZE=1024 num_warps=16\n"
    )
    wide = pragma + SOFTMAX.replace("num_warps=4", "num_warps=16")
    candidate, reference = specs(wide, SOFTMAX, "triton", "softmax_kernel")
    assert (candidate.options["num_warps"], reference.options["num_warps"]) == (16, 4)
    assert candidate.grid == reference.grid == (1024,) and candidate.signature() == reference.signature()

    committed = _cuda("    scale<<<(n + 255) / 256, 256>>>(x, y, n);")
    narrow = "// kernelcast: launch kernel=scale grid=(cdiv(N, 128)) block=(128) args=(x:f32[N], y:f32[N]:out, n:i32=N) N=1<<20\n"
    candidate, reference = specs(narrow + committed.replace("255) / 256, 256", "127) / 128, 128"), committed, "cuda", "scale")
    assert (candidate.block, candidate.grid) == ((128,), (8192,))
    assert (reference.block, reference.grid) == ((256,), (4096,))
    # The pragma on the reference alone: the candidate runs on it at its own block.
    stated = "// kernelcast: launch kernel=scale grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N]:out, n:i32=N) N=1<<20\n"
    candidate, reference = specs(committed.replace("255) / 256, 256", "127) / 128, 128"), stated + committed, "cuda", "scale")
    assert (candidate.block, candidate.grid, reference.block) == ((128,), (8192,), (256,))


def test_a_program_whose_host_code_fixes_its_launch_runs_as_written() -> None:
    """A hand-written CUDA program allocates its buffers and launches its kernel with sizes it states:
    read from there, the launch equals what its pragma states, so Measure needs none."""
    from kernelcast.kernels_runtime.source.host_launch import runnable_host_launch
    from kernelcast.kernels_runtime.source.launch_spec import find_launch_spec

    program = (Path(__file__).parent / "data" / "measure" / "program_vec_add.cu").read_text()
    as_written, stated = runnable_host_launch(program, "vecAdd"), find_launch_spec(program, "vecAdd", "cuda")
    assert as_written is not None and stated is not None
    assert (as_written.grid, as_written.block, as_written.signature()) == (stated.grid, stated.block, stated.signature())
    assert [arg.value for arg in as_written.args] == [arg.value for arg in stated.args]
    checked = program.replace("cudaMalloc(&d_a, bytes);", "CUDA_CHECK(cudaMalloc((void**)&d_a, bytes));")
    assert runnable_host_launch(checked, "vecAdd") == as_written, "a cast and an error-checking macro around the allocation"
    # A buffer the text does not size, or a scalar left to run time, leaves the launch to a pragma.
    assert runnable_host_launch(program.replace("cudaMalloc(&d_b, bytes);", "d_b = d_a;"), "vecAdd") is None
    assert runnable_host_launch(program.replace("(d_a, d_b, d_c, N)", "(d_a, d_b, d_c, atoi(argv[1]))"), "vecAdd") is None


def _wrapped(threads: int, through_macro: bool) -> str:
    """SCALE launched by a launcher that a wrapper `scale_in` calls, directly or through a macro, as CUDA-L2 writes them."""
    launcher = (
        f"void launch_scale(const float* x, float* y, int n) {{\n    const int threads = {threads};\n"
        "    scale<<<(n + threads - 1) / threads, threads>>>(x, y, n);\n}\n"
    )
    call = "launch_scale(x, y, n);"
    if through_macro:
        launcher += "\n#define LAUNCH_SCALE() \\\n  launch_scale(x, y, n);\n"
        call = "LAUNCH_SCALE()"
    return SCALE + "\n" + launcher + "\nvoid scale_in(const float* x, float* y, int n) {\n    " + call + "\n}\n"


def test_kernelcast_eval_reads_two_host_launched_kernels_as_the_editor_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kernelcast eval` read each side of a pair alone: a kernel named by its wrapper was launched on a
    grid guessed for a million elements whatever the pair's problem said, and what was guessed never
    reached `assumed`. A CUDA-L2 pair whose one wrapper hid its launcher in a macro read 3.7x faster at
    conf 0.99 (measured 0.72x); the editor's reading of the same two files is the one to give."""
    from kernelcast.batch import editor_request
    from kernelcast.models.service.calibrated import Forecaster

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    elements = 4_000_000
    line = {
        "reference": {"code": _wrapped(128, through_macro=False), "language": "cuda", "name": "scale_in"},
        "candidate": {"code": _wrapped(256, through_macro=True), "language": "cuda", "name": "scale_in"},
        "problem": {"n": elements},
        "gpu": "H100-SXM",
    }
    editor, _ = editor_request(line, 0.8, True)
    bare = ForecastRequest(KernelSide(**line["reference"]), KernelSide(**line["candidate"]), editor.hardware, {"n": elements})
    evaluated = ForecastRequest.from_json(request_with_facts(bare.to_json())["request"])
    grids = [side.facts["launches"][0]["grid"] for side in (evaluated.reference, evaluated.candidate)]
    assert grids == [[-(-elements // 128)], [-(-elements // 256)]], "read on the pair's problem"
    assert {ASSUMED_REFERENCE_GRID, ASSUMED_CANDIDATE_GRID} <= set(evaluated.assumed)
    for read in (evaluated, editor):
        read.reference.facts.pop("elapsed_ms", None), read.candidate.facts.pop("elapsed_ms", None)
    assert (evaluated.reference, evaluated.candidate, evaluated.problem, evaluated.assumed) == (
        editor.reference,
        editor.candidate,
        editor.problem,
        editor.assumed,
    )
    forecaster = Forecaster(["embedded"])
    assert forecaster.forecast(evaluated).probabilities == forecaster.forecast(editor).probabilities
