"""KernelBench-style pair in one file: Model is torch.relu, ModelNew clamps instead."""

import torch

batch_size = 64
dim = 65536


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.clamp(x, min=0.0)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
