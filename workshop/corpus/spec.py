"""What an operation of the corpus is made of: its tensors, reference and variants.

Operations are plain data plus a PyTorch reference, so one runner can build, check and
time every variant the same way, and a record can say exactly how a kernel was launched.
Sizes are dicts of named integers; shapes and launches are functions of them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelcast.kernels_runtime.source.launch_spec import DTYPE_BYTES

# Named extents, plus "dtype" where the operation comes in several precisions.
Sizes = Mapping[str, Any]

# Element types a tensor may have; floats are compared with timing.TOLERANCES.
DTYPES = ("f32", "f16", "bf16", "i32", "i64", "u8", "i8")


@dataclass(frozen=True)
class TensorSpec:
    """One buffer a kernel reads or writes.

    `init` says how inputs are filled: "randn" (normal), "rand" (uniform [0,1)),
    "randint:LOW:HIGH" (integers in [LOW, HIGH)), "zeros". Outputs are poisoned (NaN or a
    byte pattern) before a correctness run, so an element never written shows up.
    """

    shape: tuple[int, ...]
    dtype: str = "f32"
    init: str = "randn"

    def numel(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count

    def nbytes(self) -> int:
        return self.numel() * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Scalar:
    """A by-value kernel argument: CUDA gets it with this C type, Triton as a Python number."""

    ctype: str  # "i32" | "i64" | "f32"
    value: int | float


# A launch argument: a tensor's name (input, output or scratch) or a by-value scalar.
Arg = str | Scalar


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a variant. Grid/block are 3-tuples (block ignored by Triton).

    kernel == ZERO means "fill args[0] with zeros" (atomics need a cleared output each
    call), timed as part of the variant, as a user would have to do it too.
    """

    kernel: str
    grid: tuple[int, int, int]
    args: tuple[Arg, ...]
    block: tuple[int, int, int] = (1, 1, 1)
    shared_bytes: int = 0  # dynamic shared memory (CUDA)
    constexprs: Mapping[str, Any] = field(default_factory=dict)  # Triton meta-parameters
    num_warps: int | None = None
    num_stages: int | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kernel": self.kernel,
            "grid": list(self.grid),
            "args": [arg if isinstance(arg, str) else {"ctype": arg.ctype, "value": arg.value} for arg in self.args],
        }
        if self.kernel != ZERO:
            data["block"] = list(self.block)
        if self.shared_bytes:
            data["shared_bytes"] = self.shared_bytes
        if self.constexprs:
            data["constexprs"] = dict(self.constexprs)
        if self.num_warps is not None:
            data["num_warps"] = self.num_warps
        if self.num_stages is not None:
            data["num_stages"] = self.num_stages
        return data


ZERO = "__zero__"


@dataclass(frozen=True)
class Variant:
    """One implementation of an operation.

    `family` groups variants that share a code skeleton, so that two variants of one
    family that differ in a single entry of `params` form an edit pair. `params` holds
    every variation axis of the family, also those left at their default.
    """

    family: str
    language: str  # "cuda" | "triton"
    params: Mapping[str, Any]
    code: str
    launches: Callable[[Sizes], list[Launch]]
    scratch: Callable[[Sizes], dict[str, TensorSpec]] = lambda sizes: {}
    # Sizes this variant cannot run (e.g. a tile larger than the matrix): a reason, or None.
    unsupported: Callable[[Sizes], str | None] = lambda sizes: None


@dataclass(frozen=True)
class Op:
    """An operation: its tensors as functions of the sizes, a PyTorch reference, variants.

    `reference(torch, inputs, sizes)` returns the outputs by name; `reference_code` is
    that function's source as a user would write it (the "pytorch" side of reference
    pairs). `tolerance` overrides timing.TOLERANCES per output dtype when an operation's
    accumulation order legitimately differs (e.g. fp16 GEMM with K=4096).
    """

    name: str
    bound: str  # "memory" | "compute" | "latency": what limits it at large sizes
    sizes: Sequence[Mapping[str, Any]]  # ≥ 3: launch-bound, middle, bandwidth/compute-bound
    inputs: Callable[[Sizes], dict[str, TensorSpec]]
    outputs: Callable[[Sizes], dict[str, TensorSpec]]
    reference: Callable[[Any, dict[str, Any], Sizes], dict[str, Any]]
    reference_code: str
    variants: Callable[[], Iterable[Variant]]
    tolerance: Mapping[str, float] = field(default_factory=dict)
    # Outputs compared as sorted multisets per last-dim row (top-k with ties, unstable sorts).
    compare_sorted: bool = False


def variant_id(op: str, variant: Variant) -> str:
    """Stable id from what defines a variant (op, family, language, params, code)."""
    digest = hashlib.sha256(
        json.dumps([op, variant.family, variant.language, dict(variant.params), variant.code], sort_keys=True, default=str).encode()
    ).hexdigest()
    return f"{op}-{variant.language}-{digest[:12]}"


def size_label(sizes: Sizes) -> str:
    return ",".join(f"{name}={value}" for name, value in sizes.items())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def grid1(blocks: int) -> tuple[int, int, int]:
    return (blocks, 1, 1)


def block1(threads: int) -> tuple[int, int, int]:
    return (threads, 1, 1)


def i32(value: int) -> Scalar:
    return Scalar("i32", value)


def f32(value: float) -> Scalar:
    return Scalar("f32", value)


CUDA_TYPES = {
    "f32": "float",
    "f16": "__half",
    "bf16": "__nv_bfloat16",
    "i32": "int",
    "i64": "long long",
    "u8": "unsigned char",
    "i8": "signed char",
}
TRITON_TYPES = {"f32": "tl.float32", "f16": "tl.float16", "bf16": "tl.bfloat16"}
# What a CUDA source needs included to use these element types.
CUDA_HEADER = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"


def cuda_load_as_float(dtype: str, expr: str) -> str:
    """C expression reading an element of `dtype` as float (fp32 math for half types)."""
    return {"f32": expr, "f16": f"__half2float({expr})", "bf16": f"__bfloat162float({expr})"}[dtype]


def cuda_pointer(ctype: str, name: str, restrict: bool, const: bool = True) -> str:
    """A kernel's pointer parameter, `__restrict__` or not: a variation axis of its own."""
    return f"{'const ' if const else ''}{ctype}* {'__restrict__ ' if restrict else ''}{name}"


def cuda_store_from_float(dtype: str, expr: str) -> str:
    return {"f32": expr, "f16": f"__float2half({expr})", "bf16": f"__float2bfloat16({expr})"}[dtype]


def product(axes: Mapping[str, Sequence[Any]]) -> Iterable[dict[str, Any]]:
    """Every combination of the axes' values, in a fixed order (deterministic corpus)."""
    names = list(axes)
    combos: list[dict[str, Any]] = [{}]
    for name in names:
        combos = [{**combo, name: value} for combo in combos for value in axes[name]]
    return combos


def around(base: dict[str, Any], **alternatives: Sequence[Any]) -> list[dict[str, Any]]:
    """`base` and every setting that changes exactly one of its axes: a star of edit pairs."""
    settings = [dict(base)]
    for name, values in alternatives.items():
        settings += [{**base, name: value} for value in values if value != base[name]]
    return settings
