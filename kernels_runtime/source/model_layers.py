"""What a KernelBench model builds before it is timed, read from its text, never run.

The harness builds `Model(*get_init_inputs())` and then times `forward`. So `__init__` fixes the
layers a timed call runs (`self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)`), the
shapes of its parameters (`self.weight = nn.Parameter(torch.randn(out_features, in_features))`,
`self.conv.weight`) and the numbers it keeps (`self.eps = eps`). A launch whose grid reads
`weight.shape` of a parameter forward passes it, or the shape of what `self.conv(x)` returns,
then launches a grid the problem fixes: the walk of the timed call (timed_path.py) starts from
what `model_attributes` finds.

`__init__`'s parameters are bound to the values `get_init_inputs()` returns (the file's own, else
its problem file's), else to their defaults. Read: `nn.Linear`, `nn.Conv{1,2,3}d`,
`nn.ConvTranspose{1,2,3}d`, pools, norms, `nn.Embedding`, `nn.Flatten` and the layers that keep
their input's shape; an `nn.Sequential` and anything else is left unknown.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernelcast.kernels_runtime.source import host_values
from kernelcast.kernels_runtime.source.launch_spec import factory_shape, harness_list
from kernelcast.kernels_runtime.source.triton_text import dotted

# A value get_init_inputs() returns: a number, a tuple of numbers (`kernel_size=(3, 5)`), None where not literal.
InitValue = Any

# Each layer's constructor parameters in order, as torch.nn declares them (the ones read here).
_CONVOLUTION = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups")
_TRANSPOSED = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "output_padding", "groups", "bias", "dilation")
_SIGNATURES: dict[str, tuple[str, ...]] = {
    "Linear": ("in_features", "out_features"),
    "Embedding": ("num_embeddings", "embedding_dim"),
    "LayerNorm": ("normalized_shape",),
    "GroupNorm": ("num_groups", "num_channels"),
    "Flatten": ("start_dim", "end_dim"),
    **{f"Conv{n}d": _CONVOLUTION for n in (1, 2, 3)},
    **{f"ConvTranspose{n}d": _TRANSPOSED for n in (1, 2, 3)},
    **{f"MaxPool{n}d": ("kernel_size", "stride", "padding", "dilation") for n in (1, 2, 3)},
    **{f"AvgPool{n}d": ("kernel_size", "stride", "padding") for n in (1, 2, 3)},
    **{f"Adaptive{kind}Pool{n}d": ("output_size",) for kind in ("Avg", "Max") for n in (1, 2, 3)},
    **{f"{kind}Norm{n}d": ("num_features",) for kind in ("Batch", "Instance") for n in (1, 2, 3)},
}
# Layers whose output has their input's shape (norms have their parameters besides).
_SAME_SHAPE = frozenset(
    "ReLU ReLU6 GELU Sigmoid Tanh SiLU LeakyReLU ELU SELU CELU Softplus Softsign Hardtanh Hardswish Hardsigmoid Mish "
    "Dropout Dropout1d Dropout2d Dropout3d Identity Softmax LogSoftmax LayerNorm GroupNorm".split()
) | {f"{kind}Norm{n}d" for kind in ("Batch", "Instance") for n in (1, 2, 3)}
_DEFAULTS = {"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "output_padding": 0, "start_dim": 1, "end_dim": -1}


@dataclass(frozen=True)
class Layer:
    """One `nn` layer `__init__` builds: its class and the constructor arguments the text fixes."""

    kind: str
    arguments: Mapping[str, InitValue]

    def parameters(self) -> dict[str, tuple[int, ...]]:
        """Its weight's and bias's shapes (`nn.Conv2d(3, 64, 5).weight`: (64, 3, 5, 5)), where known."""
        found = self._weight()
        if found is None:
            return {}
        weight, bias = found
        return {"weight": weight, **({"bias": bias} if bias and self.arguments.get("bias") is not False else {})}

    def _weight(self) -> tuple[tuple[int, ...], tuple[int, ...] | None] | None:
        given = self.arguments
        if self.kind in ("Linear", "Embedding"):
            first, second = _ints(given, *_SIGNATURES[self.kind])
            if first is None or second is None:
                return None
            return ((second, first), (second,)) if self.kind == "Linear" else ((first, second), None)
        if self.kind.startswith(("Conv", "ConvTranspose")):
            spatial = int(self.kind[-2])
            in_channels, out_channels, groups = _ints(given, "in_channels", "out_channels", "groups")
            kernel = _per_dimension(given.get("kernel_size"), spatial)
            if in_channels is None or out_channels is None or groups is None or groups <= 0 or kernel is None:
                return None
            if self.kind.startswith("ConvTranspose"):
                return (in_channels, out_channels // groups, *kernel), (out_channels,)
            return (out_channels, in_channels // groups, *kernel), (out_channels,)
        if self.kind in ("LayerNorm",):
            shape = given.get("normalized_shape")
            shape = (shape,) if isinstance(shape, int) else shape
            return (tuple(shape), tuple(shape)) if isinstance(shape, tuple) and all(isinstance(size, int) for size in shape) else None
        channels = _ints(given, "num_channels" if self.kind == "GroupNorm" else "num_features")[0]
        return ((channels,), (channels,)) if channels is not None and "Norm" in self.kind else None

    def output(self, shape: tuple[int, ...] | None) -> tuple[int, ...] | None:
        """The shape it returns for an input of `shape`, as torch's documentation gives it; None where not read."""
        if shape is None:
            return None
        if self.kind in _SAME_SHAPE:
            return shape
        given = self.arguments
        if self.kind == "Linear":
            out_features = _ints(given, "out_features")[0]
            return (*shape[:-1], out_features) if out_features is not None and shape else None
        if self.kind == "Embedding":
            dimension = _ints(given, "embedding_dim")[0]
            return (*shape, dimension) if dimension is not None else None
        if self.kind == "Flatten":
            first, last = _ints(given, "start_dim", "end_dim")
            return flattened(shape, first, last) if first is not None and last is not None else None
        spatial = int(self.kind[-2]) if self.kind[-1] == "d" and self.kind[-2].isdigit() else 0
        if not spatial or len(shape) < spatial + 1:
            return None
        leading, sizes = shape[:-spatial], shape[-spatial:]
        if self.kind.startswith("Adaptive"):
            wanted = _per_dimension(given.get("output_size"), spatial)
            return (*leading, *wanted) if wanted is not None else None
        if self.kind.startswith(("Conv", "ConvTranspose")):
            channels = _ints(given, "out_channels")[0]
            if channels is None or len(leading) < 1:
                return None
            leading = (*leading[:-1], channels)
        computed = self._spatial(sizes, spatial)
        return (*leading, *computed) if computed is not None and all(size > 0 for size in computed) else None

    def _spatial(self, sizes: tuple[int, ...], spatial: int) -> tuple[int, ...] | None:
        """Each spatial size out of a convolution or a pool (floor division, as ceil_mode=False gives)."""
        given = self.arguments
        kernel = _per_dimension(given.get("kernel_size"), spatial)
        stride_given = given.get("stride")
        stride = (
            kernel if stride_given is None and "Pool" in self.kind else _per_dimension(1 if stride_given is None else stride_given, spatial)
        )
        dilation = _per_dimension(given.get("dilation", 1), spatial)
        padding_given = given.get("padding", 0)
        if padding_given == "same":
            return sizes if not self.kind.startswith("ConvTranspose") else None
        padding = _per_dimension(0 if padding_given == "valid" else padding_given, spatial)
        if kernel is None or stride is None or dilation is None or padding is None:
            return None
        if self.kind.startswith("ConvTranspose"):
            extra = _per_dimension(given.get("output_padding", 0), spatial)
            if extra is None:
                return None
            return tuple(
                (size - 1) * s - 2 * p + d * (k - 1) + e + 1 for size, k, s, p, d, e in zip(sizes, kernel, stride, padding, dilation, extra)
            )
        if any(s <= 0 for s in stride):
            return None
        return tuple((size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, s, p, d in zip(sizes, kernel, stride, padding, dilation))


def flattened(shape: tuple[int, ...], first: int, last: int) -> tuple[int, ...] | None:
    """`flatten(first, last)` of a tensor of `shape` (negative dims count from the end); None out of range."""
    if not all(-len(shape) <= dim < len(shape) for dim in (first, last)):
        return None
    first, last = first % len(shape), last % len(shape)
    return (*shape[:first], math.prod(shape[first : last + 1]), *shape[last + 1 :]) if first <= last else None


def _ints(given: Mapping[str, InitValue], *names: str) -> list[int | None]:
    """Each named argument as an int (its default where it has one), or None."""
    found = [given.get(name, _DEFAULTS.get(name)) for name in names]
    return [value if isinstance(value, int) and not isinstance(value, bool) else None for value in found]


def _per_dimension(value: InitValue, spatial: int) -> tuple[int, ...] | None:
    """An int or a tuple of ints as one int per spatial dimension (`kernel_size=3` of a Conv2d: (3, 3))."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * spatial
    if isinstance(value, tuple) and len(value) == spatial and all(isinstance(each, int) for each in value):
        return value
    return None


def kernelbench_init_values(file_text: str) -> tuple[InitValue, ...]:
    """Each value `get_init_inputs()` returns, in order (`[in_channels, out_channels, kernel_size]` with
    the module's constants): a number, a tuple of numbers, or None where not literal; () without one."""
    found = harness_list(file_text, "get_init_inputs")
    if found is None:
        return ()
    items, values = found
    return tuple(_number_or_numbers(item, values) for item in items)


def model_attributes(tree: ast.Module, model: ast.ClassDef, init: Sequence[InitValue]) -> dict[str, Any]:
    """What the model's `__init__` leaves on `self`, by dotted name: a Layer (`self.conv`), a parameter's
    or a layer's parameter's shape (`self.weight`, `self.conv.weight`), a number (`self.eps`, and a
    layer's int arguments: `self.conv.out_channels`). `init`: the values it is built with."""
    constructor = next((node for node in model.body if isinstance(node, ast.FunctionDef) and node.name == "__init__"), None)
    if constructor is None:
        return {}
    names = _parameters_bound(constructor, init)
    values = host_values.Values({**host_values.bindings(tree.body), **host_values.bindings(constructor.body), **names}, host_values.PYTHON)
    found: dict[str, Any] = {}
    for statement in constructor.body:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
            continue
        target = dotted(statement.targets[0]) if isinstance(statement.targets[0], ast.Attribute) else ""
        if not target.startswith("self."):
            continue
        found.update(_attribute(target, statement.value, values))
    return found


def _attribute(name: str, value: ast.expr, values: host_values.Values) -> dict[str, Any]:
    """What `self.name = value` leaves: a layer and its parameters, a parameter's shape, or a number."""
    callee = dotted(value) if isinstance(value, ast.Call) else ""
    kind = callee.rsplit(".", 1)[-1]
    a_layer = callee.startswith(("nn.", "torch.nn.")) or callee == kind
    if isinstance(value, ast.Call) and a_layer and (kind in _SIGNATURES or kind in _SAME_SHAPE):
        layer = Layer(kind, _arguments(value, _SIGNATURES.get(kind, ()), values))
        numbers = {f"{name}.{key}": number for key, number in layer.arguments.items() if type(number) is int}  # not bias=False
        return {name: layer, **numbers, **{f"{name}.{key}": shape for key, shape in layer.parameters().items()}}
    if isinstance(value, ast.Call) and kind == "Parameter" and value.args:
        shape = factory_shape(value.args[0], values.bound, values)
        return {name: shape} if shape else {}
    number = host_values.value(value, values)
    return {name: number} if isinstance(number, int) and not isinstance(number, bool) else {}


def _arguments(call: ast.Call, signature: Sequence[str], values: host_values.Values) -> dict[str, InitValue]:
    given = {**dict(zip(signature, call.args)), **{keyword.arg: keyword.value for keyword in call.keywords if keyword.arg}}
    read = {name: _number_or_numbers(expression, values) for name, expression in given.items()}
    return {name: value for name, value in read.items() if value is not None}


def _number_or_numbers(expression: ast.expr, values: host_values.Values) -> InitValue:
    """A number, a tuple of numbers, or a string or bool constant (`padding="same"`, `bias=False`); None otherwise."""
    if isinstance(expression, ast.Constant) and isinstance(expression.value, (str, bool)):
        return expression.value
    if isinstance(expression, ast.Name) and isinstance(values.bound.get(expression.id), (ast.Tuple, ast.List)):
        expression = values.bound[expression.id]
    if isinstance(expression, (ast.Tuple, ast.List)):
        items = tuple(host_values.value(item, values) for item in expression.elts)
        return items if all(isinstance(item, int) for item in items) else None
    return host_values.value(expression, values)


def _parameters_bound(constructor: ast.FunctionDef, init: Sequence[InitValue]) -> dict[str, ast.expr]:
    """`__init__`'s parameters as the values it is built with, else as their defaults (unknown otherwise)."""
    parameters = constructor.args.args[1:]
    defaulted = parameters[len(parameters) - len(constructor.args.defaults) :]
    defaults = dict(zip([parameter.arg for parameter in defaulted], constructor.args.defaults))
    bound: dict[str, ast.expr] = {}
    for index, parameter in enumerate(parameters):
        if index < len(init) and init[index] is not None:
            bound[parameter.arg] = _literal(init[index])
        elif parameter.arg in defaults:
            bound[parameter.arg] = defaults[parameter.arg]
    return bound


def _literal(value: InitValue) -> ast.expr:
    if isinstance(value, tuple):
        return ast.Tuple([ast.Constant(each) for each in value], ast.Load())
    return ast.Constant(value)
