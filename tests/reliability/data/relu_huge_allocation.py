"""KernelBench pair whose ModelNew asks for 4 TiB of GPU memory on every call."""

import torch

batch_size = 64
dim = 4096


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        scratch = torch.empty(1 << 40, dtype=torch.float32, device=x.device)
        return torch.relu(x) + scratch[0] * 0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
