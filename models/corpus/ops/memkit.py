"""Helpers shared by the data-movement, scan, stencil and sort modules (not an operation)."""

from __future__ import annotations

from typing import Callable

from kernelcast.models.corpus.spec import CUDA_TYPES, Sizes

TRITON_HEADER = "import triton\nimport triton.language as tl\n"
SM_COUNT = 132  # H100 SXM: grid-stride and persistent launches size their grids from it
MAX_SHARED_BYTES = 227 * 1024  # dynamic shared memory one block may ask for on sm_90
ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8, "u8": 1}

Check = Callable[[Sizes], "str | None"]


def unsupported(dtype: str | None, *checks: Check) -> Check:
    """A variant's `unsupported`: the problem's dtype must be `dtype` (when given), then every check."""

    def reason(sizes: Sizes) -> str | None:
        if dtype is not None and sizes.get("dtype", "f32") != dtype:
            return f"written for {dtype}"
        for check in checks:
            problem = check(sizes)
            if problem:
                return problem
        return None

    return reason


def divisible(name: str, by: int) -> Check:
    """Vector loads need the extent to be a multiple of the vector width."""
    return lambda sizes: None if sizes[name] % by == 0 else f"{name} not a multiple of {by}"


def pack_struct(dtype: str, width: int, name: str = "Pack") -> str:
    """A struct of `width` elements aligned to its size, for one vector load/store."""
    return f"struct __align__({width * ELEMENT_BYTES[dtype]}) {name} {{ {CUDA_TYPES[dtype]} v[{width}]; }};\n"
