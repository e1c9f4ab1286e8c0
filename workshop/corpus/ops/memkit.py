"""Helpers shared by the data-movement, scan, stencil, sort and compaction modules (not an operation);
the ones every operation module uses are in rowkit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workshop.corpus.ops.rowkit import ELEMENT_BYTES
from workshop.corpus.spec import CUDA_TYPES, Arg, Launch, Sizes, TensorSpec, block1, cdiv, grid1, i32

MAX_SHARED_BYTES = 227 * 1024  # dynamic shared memory one block may ask for on sm_90
SCAN_STEP = 1024  # tile counts a one-program Triton scan takes per step


def pack_struct(dtype: str, width: int, name: str = "Pack") -> str:
    """A struct of `width` elements aligned to its size, for one vector load/store."""
    return f"struct __align__({width * ELEMENT_BYTES[dtype]}) {name} {{ {CUDA_TYPES[dtype]} v[{width}]; }};\n"


def one_launch(
    kernel: str, args: Callable[[Sizes], tuple[Arg, ...]], blocks: Callable[[Sizes], int], threads: int
) -> Callable[[Sizes], list[Launch]]:
    """A one-kernel CUDA variant's launches: `blocks(sizes)` blocks of `threads`."""
    return lambda sizes: [Launch(kernel, grid1(blocks(sizes)), args(sizes), block1(threads))]


def tile_count_scratch(names: tuple[str, str], tile: int) -> Callable[[Sizes], dict[str, TensorSpec]]:
    """A count-scan-scatter pass's scratch over s["n"] elements: per-tile counts, then their offsets."""
    return lambda s: {name: TensorSpec((cdiv(s["n"], tile),), "i32") for name in names}


def three_pass_launches(
    kernels: tuple[str, str, str], counts: tuple[str, str], tile: int, block: int | None = None, num_warps: int | None = None
) -> Callable[[Sizes], list[Launch]]:
    """Count each tile of s["n"] elements, scan the counts (one block or program), scatter from
    the offsets: CUDA blocks of `block` threads, or Triton programs of `num_warps` (the scan
    steps over SCAN_STEP counts). The kernels take ("x", "y", …, "count", n) as compaction does."""
    count, scan, scatter = kernels
    tile_counts, tile_offsets = counts

    def launch(kernel: str, grid: int, args: tuple[Any, ...], width: int) -> Launch:
        if num_warps is None:
            return Launch(kernel, grid1(grid), args, block1(block))
        return Launch(kernel, grid1(grid), args, constexprs={"BLOCK": width}, num_warps=num_warps)

    def launches(s: Sizes) -> list[Launch]:
        tiles = cdiv(s["n"], tile)
        return [
            launch(count, tiles, ("x", tile_counts, i32(s["n"])), tile),
            launch(scan, 1, (tile_counts, tile_offsets, "count", i32(tiles)), SCAN_STEP),
            launch(scatter, tiles, ("x", "y", tile_offsets, "count", i32(s["n"])), tile),
        ]

    return launches
