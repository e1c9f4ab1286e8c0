import torch
from torch.utils.cpp_extension import load_inline

source = """
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    const int threads = 256;
    relu_kernel<<<(n + threads - 1) / threads, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
relu = load_inline("relu", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=source, functions=["relu"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return relu.relu(x)
