"""Kernels named by the host code that launches them: TritonBench's files, agents' candidates and
C++ wrappers name the function people call, not the kernel."""

from __future__ import annotations

import pytest

from kernelcast.kernels_runtime.source.entry_points import kernel_meant, launched_by

TRITON = """
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets), mask=offsets < n)


@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets) * 2, mask=offsets < n)


def _launch_add(x, y, out):
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)
    add_kernel[grid](x, y, out, x.numel(), BLOCK=1024)


def add(x, y):
    out = torch.empty_like(x)
    _launch_add(x, y, out)
    return out


def add_then_scale(x, y):
    out = add(x, y)
    scale_kernel[(triton.cdiv(out.numel(), 256),)](out, out.numel(), BLOCK=256)
    return out


def scale_or_add(x, y, fast=True):
    if fast:
        chosen = scale_kernel
    else:
        chosen = add_kernel
    chosen[(1,)](x, x.numel(), BLOCK=256)


class Add(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return add(x, y)


class AddModule(torch.nn.Module):
    def forward(self, x, y):
        return Add.apply(x, y)


def plain(x):
    return torch.relu(x)
"""


@pytest.mark.parametrize(
    ("name", "kernels"),
    [
        ("add", ("add_kernel",)),  # through a helper
        ("add_then_scale", ("add_kernel", "scale_kernel")),  # in the order met
        ("scale_or_add", ("scale_kernel",)),  # a name bound to a kernel: its first binding
        ("AddModule", ("add_kernel",)),  # a module's forward, an autograd Function's apply
        ("plain", ()),
        ("missing", ()),
    ],
)
def test_a_python_host_function_or_class_names_the_triton_kernels_it_launches(name: str, kernels: tuple[str, ...]) -> None:
    assert launched_by(TRITON, True, name) == kernels


def test_a_cupy_wrapper_and_a_load_inline_binding_name_their_cuda_kernels() -> None:
    cupy = '''
import cupy as cp
_saxpy = cp.RawKernel(r"""extern "C" __global__ void saxpy(float* y, float a, int n) { y[threadIdx.x] *= a; }""", "saxpy")

def saxpy(y, a):
    _saxpy((y.size // 256,), (256,), (y, cp.float32(a), cp.int32(y.size)))
'''
    assert launched_by(cupy, True, "saxpy") == ("saxpy",)
    inline = '''
from torch.utils.cpp_extension import load_inline
cuda_source = """
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0 ? x[i] : 0;
}
static int blocks_for(int n) { return (n + 255) / 256; }
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    for (int repeat = 0; repeat < 1; ++repeat) {
        relu_kernel<<<blocks_for(x.numel()), 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    }
    return y;
}
"""
cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"
module = load_inline(name="relu", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["relu_cuda"])

def relu(x):
    return module.relu_cuda(x)
'''
    assert launched_by(inline, True, "relu") == ("relu_kernel",)
    assert launched_by(inline, True, "relu_cuda") == ("relu_kernel",), "the C++ binding's own name"


def _model(init: str, returned: str) -> str:
    return f"class ModelNew:\n    def __init__(self):\n        {init}\n    def forward(self, x):\n        return {returned}\n"


def test_a_model_is_followed_through_the_names_it_gives_and_only_into_forward() -> None:
    """What a KernelBench ModelNew's forward launches, followed as people write it: an autograd
    Function with a backward kernel, an import alias, a bound extension function, a module built in
    __init__. Each was read as launching nothing, or a backward kernel as timed too."""
    library = TRITON.replace(
        "class Add(torch.autograd.Function):",
        "class Scaled(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        return add(x, x)\n\n    @staticmethod\n    def backward(ctx, grad):\n"
        "        scale_kernel[(1,)](grad, grad.numel(), BLOCK=256)\n        return grad\n\n\n"
        "class Add(torch.autograd.Function):",
    )
    models = [
        "from lib import Scaled as op\nclass ModelNew:\n    def forward(self, x):\n        return op.apply(x)\n",
        _model("self.loss = Scaled.apply", "self.loss(x)"),
        _model("self.inner = AddModule()", "self.inner(x, x)"),
        "from lib import add as add_op\nclass ModelNew:\n    def forward(self, x, y):\n        return add_op(x, y)\n",
    ]
    for model in models:
        assert launched_by(library + model, True, "ModelNew") == ("add_kernel",), model
    assert launched_by(library, True, "Scaled") == ("add_kernel",), "a backward pass is not what calling the class runs"
    inline = (
        "from torch.utils.cpp_extension import load_inline\n"
        'cuda_source = """\n'
        "__global__ void sigmoid_kernel(const float* x, float* y) { y[threadIdx.x] = x[threadIdx.x]; }\n"
        "torch::Tensor sigmoid(torch::Tensor x) {\n"
        "    auto y = torch::empty_like(x);\n"
        "    sigmoid_kernel<<<1, 256>>>(x.data_ptr<float>(), y.data_ptr<float>());\n"
        "    return y;\n"
        "}\n"
        '"""\n'
        'ext = load_inline(name="s", cpp_sources="torch::Tensor sigmoid(torch::Tensor x);", cuda_sources=cuda_source)\n'
    )
    assert launched_by(inline + _model("self.act = ext.sigmoid", "self.act(x)"), True, "ModelNew") == ("sigmoid_kernel",)
    # `self.sigmoid = ext`, then `self.sigmoid.sigmoid(x)`: the extension's function, not the module's name again
    assert launched_by(inline + _model("self.sigmoid = ext", "self.sigmoid.sigmoid(x)"), True, "ModelNew") == ("sigmoid_kernel",)


def test_a_cuda_host_function_names_what_it_launches_through_helpers_and_templates() -> None:
    text = """
template <int BLOCK> __global__ void scale(float* x, int n) { x[blockIdx.x * BLOCK + threadIdx.x] *= 2; }
__global__ void shift(float* x, int n) { for (int i = 0; i < n; ++i) x[i] += 1; }
__global__ void unused(float* x) {}

template <typename T> void launch_scale(T* x, int n) { scale<256><<<(n + 255) / 256, 256>>>(x, n); }

void scale_then_shift(float* x, int n) {
    if (n > 0) {
        launch_scale<float>(x, n);
    }
    void* args[] = {&x, &n};
    cudaLaunchKernel((void*)&shift, dim3(1), dim3(1), args, 0, 0);
}

void loops_only(float* x, int n) {
    for (int i = 0; i < n; ++i) { x[i] = 0; }
}
"""
    assert launched_by(text, False, "scale_then_shift") == ("scale", "shift")
    assert launched_by(text, False, "loops_only") == (), "a loop is not a call of a function named `for`"
    assert launched_by(text, False, "nowhere") == ()


# CUDA-L2's wrappers pick a launcher's template arguments through a function-like macro.
MACRO_LAUNCHED = """
__global__ void scale_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

template <int THREADS> void launch_scale(const float* x, float* y, int n) {
    scale_kernel<<<(n + THREADS - 1) / THREADS, THREADS>>>(x, y, n);
}

#define LAUNCH_SCALE(threads)                                                  \\
  launch_scale<(threads)>(x, y, n);

void scale(const float* x, float* y, int n) {
  LAUNCH_SCALE(256)
}
"""


def test_a_cuda_host_function_names_what_it_launches_through_a_macro() -> None:
    """A wrapper that calls its launcher only inside a `#define` was read as launching nothing, so a
    `kernelcast eval` side named by it got no launch and no facts while its pair's other side had both."""
    assert launched_by(MACRO_LAUNCHED, False, "scale") == ("scale_kernel",)
    assert kernel_meant(MACRO_LAUNCHED, "f.cu", "scale", ["scale_kernel"])[0] == "scale_kernel"


def test_the_kernel_meant_is_the_name_itself_else_the_first_launched_and_says_so() -> None:
    kernels = ["add_kernel", "scale_kernel"]
    assert kernel_meant(TRITON, "f.py", "scale_kernel", kernels) == ("scale_kernel", None)
    assert kernel_meant(TRITON, "f.py", "add", kernels) == ("add_kernel", "`add` read as the kernel it launches, `add_kernel`")
    meant, note = kernel_meant(TRITON, "f.py", "add_then_scale", kernels)
    assert meant == "add_kernel" and note is not None and "it launches add_kernel, scale_kernel; the first is read" in note
    assert kernel_meant(TRITON, "f.py", "plain", kernels) == (None, None)
    assert kernel_meant(TRITON, "f.py", "add", ["scale_kernel"]) == (None, None), "only the kernels offered"
