"""Occupancy against values worked out by hand from docs/measure.md's formulas and the per-arch limits.

Each case states its arithmetic, so a reader can check it without the calculator.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcast.kernels_runtime.hardware import SPECS, resolve_target
from kernelcast.kernels_runtime.occupancy import occupancy

H100 = SPECS["H100-SXM"]
A100 = SPECS["A100"]
L40S = SPECS["L40S"]
DATA = Path(__file__).parent / "data" / "facts"


@pytest.mark.parametrize(
    ("gpu", "threads", "registers", "shared", "blocks", "fraction", "limited_by"),
    [
        # 8 warps/block; 32 regs → 1024 regs/warp → 16 warps per sub-partition → 64/8 = 8 blocks;
        # warps also allow 64/8 = 8: a tie is reported as the hardware cap.
        (H100, 256, 32, 0, 8, 1.0, "warps"),
        # 128 regs → 4096/warp → 4 warps per sub-partition → 16/8 = 2 blocks = 16 of 64 warps.
        (H100, 256, 128, 0, 2, 0.25, "registers"),
        (H100, 256, 64, 0, 4, 0.5, "registers"),
        # Allocation granularity: 33 regs · 32 = 1056 → 1280/warp → 12 warps/sub-partition → 48/8 = 6.
        (H100, 256, 33, 0, 6, 0.75, "registers"),
        # One warp per block: 32 blocks/SM cap → 32 of 64 warps.
        (H100, 32, 16, 0, 32, 0.5, "blocks"),
        # 48 KB + 1 KB reserved = 50176 B per block; 233472 // 50176 = 4 blocks = 32 warps.
        (H100, 256, 32, 48 * 1024, 4, 0.5, "shared memory"),
        # 32×33 float tile (4224 B), 1024 threads: warps allow 2 blocks → 100%.
        (H100, 1024, 12, 4224, 2, 1.0, "warps"),
        # 255 regs → 8192/warp → 2 warps/sub-partition → 8 warps → 2 blocks of 4 warps = 12.5%.
        (H100, 128, 255, 0, 2, 0.125, "registers"),
        # Over the ISA limit or the per-block shared limit: the launch would fail.
        (H100, 128, 256, 0, 0, 0.0, "registers"),
        (H100, 128, 32, 228 * 1024, 0, 0.0, "shared memory"),
        # A100: 167936 B per SM; 80 KB + 1 KB = 82944 B per block → 2 blocks.
        (A100, 128, 32, 80 * 1024, 2, 8 / 64, "shared memory"),
        # cc 8.9 holds 48 warps: one 1024-thread block is 32/48 (the calculator's 66.7%).
        (L40S, 1024, 32, 0, 1, 32 / 48, "warps"),
        # Non-multiple of 32 threads still takes whole warps: 96+1 threads = 4 warps.
        (H100, 97, 32, 0, 16, 1.0, "warps"),
    ],
)
def test_occupancy_matches_hand_derivation(gpu, threads, registers, shared, blocks, fraction, limited_by):
    result = occupancy(gpu, threads, registers, shared)
    assert result.active_blocks_per_sm == blocks
    assert result.fraction == pytest.approx(fraction)
    assert result.limited_by == limited_by
    assert result.active_warps == blocks * -(-threads // 32)
    assert min(result.per_limit.values()) == blocks


def test_occupancy_json_round_trip():
    result = occupancy(H100, 256, 64, 1000)
    assert type(result).from_json(result.to_json()) == result


@pytest.mark.parametrize("threads", [0, 1025])
def test_impossible_block_size_is_rejected(threads):
    with pytest.raises(ValueError):
        occupancy(H100, threads, 32, 0)


@pytest.mark.gpu
def test_occupancy_matches_the_driver(tmp_path):
    """Our formula against cuOccupancyMaxActiveBlocksPerMultiprocessor on the local GPU."""
    cupy = pytest.importorskip("cupy")
    from kernelcast.kernels_runtime.cuda_facts import compile_cuda

    gpu = resolve_target(None)
    compiled = compile_cuda((DATA / "transpose.cu").read_text(), gpu.arch)
    assert compiled.error is None and compiled.cubins
    cubin = tmp_path / "transpose.cubin"
    cubin.write_bytes(compiled.cubins[0])
    module = cupy.RawModule(path=str(cubin))
    for mangled in compiled.functions:
        kernel = module.get_function(mangled)
        registers = kernel.attributes["num_regs"]
        static_shared = kernel.attributes["shared_size_bytes"]
        for threads in (64, 128, 256, 1024):
            for dynamic in (0, 8192, 40000):
                expected = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, threads, dynamic)
                ours = occupancy(gpu, threads, registers, static_shared + dynamic)
                assert ours.active_blocks_per_sm == expected, (mangled, threads, dynamic)
