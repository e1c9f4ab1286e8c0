"""What a KernelBench model's `__init__` builds, read from its text: layer outputs and parameter shapes
as torch's documentation gives them (checked against torch itself on the GPU machine), and the values
`get_init_inputs()` builds the model with."""

from __future__ import annotations

import ast
import textwrap
from typing import Any

import pytest

from kernelcast.kernels_runtime.source.model_layers import Layer, kernelbench_init_values, model_attributes

# (layer as written, input shape, output shape, weight shape): what torch gives, by its formulas.
LAYERS = [
    ("nn.Linear(64, 10)", (8, 5, 64), (8, 5, 10), (10, 64)),
    ("nn.Conv2d(3, 16, 5)", (2, 3, 32, 40), (2, 16, 28, 36), (16, 3, 5, 5)),
    ("nn.Conv2d(8, 16, (3, 5), stride=2, padding=(1, 2), dilation=(1, 2), groups=4)", (2, 8, 33, 40), (2, 16, 17, 18), (16, 2, 3, 5)),
    ("nn.Conv2d(4, 4, 3, padding='same')", (1, 4, 9, 9), (1, 4, 9, 9), (4, 4, 3, 3)),
    ("nn.Conv1d(6, 12, 4, stride=3)", (2, 6, 100), (2, 12, 33), (12, 6, 4)),
    ("nn.Conv3d(2, 4, 3, padding=1)", (1, 2, 8, 9, 10), (1, 4, 8, 9, 10), (4, 2, 3, 3, 3)),
    ("nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1, output_padding=1)", (2, 16, 10, 12), (2, 8, 21, 25), (16, 8, 4, 4)),
    ("nn.ConvTranspose3d(4, 6, 3, stride=2, groups=2)", (1, 4, 5, 5, 5), (1, 6, 11, 11, 11), (4, 3, 3, 3, 3)),
    ("nn.MaxPool2d(3)", (2, 4, 10, 11), (2, 4, 3, 3), None),
    ("nn.MaxPool2d(2, stride=1, padding=1, dilation=2)", (2, 4, 10, 11), (2, 4, 10, 11), None),
    ("nn.AvgPool1d(4, stride=2)", (3, 5, 20), (3, 5, 9), None),
    ("nn.AdaptiveAvgPool2d((1, 1))", (2, 7, 10, 11), (2, 7, 1, 1), None),
    ("nn.BatchNorm2d(7)", (2, 7, 10, 11), (2, 7, 10, 11), (7,)),
    ("nn.LayerNorm((10, 11))", (2, 7, 10, 11), (2, 7, 10, 11), (10, 11)),
    ("nn.GroupNorm(2, 8)", (2, 8, 5), (2, 8, 5), (8,)),
    ("nn.Flatten()", (2, 7, 10, 11), (2, 770), None),
    ("nn.GELU()", (2, 7), (2, 7), None),
]


def _built(layer: str, init: tuple[Any, ...] = ()) -> dict[str, Any]:
    text = f"import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n        self.layer = {layer}\n"
    tree = ast.parse(text)
    return model_attributes(tree, next(node for node in tree.body if isinstance(node, ast.ClassDef)), init)


@pytest.mark.parametrize(("written", "given", "returned", "weight"), LAYERS, ids=[row[0] for row in LAYERS])
def test_a_layer_returns_and_holds_the_shapes_torch_documents(written: str, given: tuple, returned: tuple, weight: tuple | None) -> None:
    built = _built(written)
    assert isinstance(built["self.layer"], Layer)
    assert built["self.layer"].output(given) == returned
    assert built.get("self.layer.weight") == weight


def test_a_layer_built_without_a_bias_has_none() -> None:
    built = _built("nn.ConvTranspose2d(16, 8, 4, 2, 1, 0, 1, False)")  # bias=False by position
    assert built["self.layer.weight"] == (16, 8, 4, 4) and "self.layer.bias" not in built
    built = _built("nn.Linear(4, 8, bias=False)")
    assert built["self.layer.weight"] == (8, 4) and "self.layer.bias" not in built
    assert _built("nn.Linear(4, 8)")["self.layer.bias"] == (8,)


def test_a_layer_not_read_or_a_size_not_fixed_is_no_shape() -> None:
    assert _built("nn.Sequential(nn.Linear(4, 4))") == {}
    built = _built("nn.Conv2d(3, channels, 3)")  # `channels` bound nowhere
    assert built["self.layer"].output((1, 3, 8, 8)) is None and "self.layer.weight" not in built
    assert _built("nn.MaxPool2d(4)")["self.layer"].output((1, 1, 2, 2)) is None  # no positive size out


MODEL = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, scale=2.0, groups=1):
            super().__init__()
            padding = kernel_size // 2
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding, groups=groups)
            self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))
            self.groups = groups
            self.scale = scale

    batch_size, in_channels, out_channels = 16, 3, 64
    kernel_size = 3

    def get_init_inputs():
        return [in_channels, out_channels, kernel_size, 0.5]
    """
)


def test_init_values_build_the_model_and_defaults_fill_what_they_leave() -> None:
    init = kernelbench_init_values(MODEL)
    assert init == (3, 64, 3, 0.5)
    tree = ast.parse(MODEL)
    built = model_attributes(tree, next(node for node in tree.body if isinstance(node, ast.ClassDef)), init)
    assert built["self.conv.weight"] == (64, 3, 3, 3) and built["self.bias"] == (64, 1, 1)
    assert built["self.conv"].output((16, 3, 32, 32)) == (16, 64, 32, 32)  # padding k // 2 keeps the size
    assert built["self.groups"] == 1 and built["self.conv.out_channels"] == 64
    assert "self.scale" not in built  # a float is no size
    assert kernelbench_init_values(MODEL.replace("kernel_size, 0.5]", "(3, 5), 0.5]")) == (3, 64, (3, 5), 0.5)
    assert kernelbench_init_values(MODEL.split("def get_init_inputs")[0]) == ()


@pytest.mark.gpu
def test_the_shapes_read_are_the_shapes_torch_gives() -> None:
    """The table above against torch itself: each layer built and run on a tensor of the given shape."""
    import torch
    from torch import nn

    for written, given, returned, weight in LAYERS:
        layer = eval(written, {"nn": nn})
        assert tuple(layer(torch.zeros(given)).shape) == returned, written
        assert (tuple(layer.weight.shape) if getattr(layer, "weight", None) is not None else None) == weight, written
