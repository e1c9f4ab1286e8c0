"""Helpers shared by the data-movement, scan, stencil and sort modules (not an operation);
the ones every operation module uses are in rowkit."""

from __future__ import annotations

from typing import Callable

from kernelcast.models.corpus.ops.rowkit import Check
from kernelcast.models.corpus.spec import CUDA_TYPES, Arg, Launch, Sizes, block1, grid1

MAX_SHARED_BYTES = 227 * 1024  # dynamic shared memory one block may ask for on sm_90
ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8, "u8": 1}


def divisible(name: str, by: int) -> Check:
    """Vector loads need the extent to be a multiple of the vector width."""
    return lambda sizes: None if sizes[name] % by == 0 else f"{name} not a multiple of {by}"


def pack_struct(dtype: str, width: int, name: str = "Pack") -> str:
    """A struct of `width` elements aligned to its size, for one vector load/store."""
    return f"struct __align__({width * ELEMENT_BYTES[dtype]}) {name} {{ {CUDA_TYPES[dtype]} v[{width}]; }};\n"


def one_launch(kernel: str, args: Callable[[Sizes], tuple[Arg, ...]], blocks: Callable[[Sizes], int], threads: int) -> Callable[[Sizes], list[Launch]]:
    """A one-kernel CUDA variant's launches: `blocks(sizes)` blocks of `threads`."""
    return lambda sizes: [Launch(kernel, grid1(blocks(sizes)), args(sizes), block1(threads))]
