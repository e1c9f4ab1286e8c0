"""A KernelBench-style pair: `Model` is the reference, `ModelNew` the candidate."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_source = """
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    }
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

relu_cpp = "torch::Tensor relu_cuda(torch::Tensor x);"


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = load_inline(
            name="relu_inline",
            cpp_sources=relu_cpp,
            cuda_sources=relu_source,
            functions=["relu_cuda"],
        )

    def forward(self, x):
        return self.relu.relu_cuda(x)


batch_size = 4096
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim, device="cuda")]


def get_init_inputs():
    return []
