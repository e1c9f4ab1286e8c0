"""Theoretical occupancy, as the CUDA 13 occupancy calculator (cuda_occupancy.h) computes it.

Occupancy needs no GPU: it follows from the per-SM limits in the GpuSpec table and the
kernel's registers, shared memory and block size, so the editor can show it for any target.
Formulas: docs/measure.md "Occupancy".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelcast.kernels_runtime.hardware import GpuSpec

WARP_SIZE = 32
MAX_THREADS_PER_BLOCK = 1024
# Registers are handed to warps in chunks of 256, out of 4 sub-partitions of the register file.
REGISTER_ALLOCATION_UNIT = 256
SUB_PARTITIONS = 4
# Every block reserves 1 KB of shared memory for the system (cc ≥ 8.0); blocks get shared
# memory in 128-byte units.
RESERVED_SHARED_PER_BLOCK = 1024
SHARED_ALLOCATION_UNIT = 128

# Order in which ties are named: a hardware cap the user cannot lift comes first, so a
# kernel at 100% reads "limited by warps", not by registers that merely also fit.
LIMITS = ("warps", "blocks", "registers", "shared memory")


@dataclass
class Occupancy:
    active_blocks_per_sm: int
    active_warps: int
    max_warps: int
    fraction: float
    limited_by: str  # one of LIMITS
    per_limit: dict[str, int] = field(default_factory=dict)  # blocks/SM each resource allows

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Occupancy:
        return cls(
            active_blocks_per_sm=int(data["active_blocks_per_sm"]),
            active_warps=int(data["active_warps"]),
            max_warps=int(data["max_warps"]),
            fraction=float(data["fraction"]),
            limited_by=str(data["limited_by"]),
            per_limit={str(k): int(v) for k, v in data.get("per_limit", {}).items()},
        )


def _round_up(value: int, unit: int) -> int:
    return math.ceil(value / unit) * unit


def blocks_allowed_by_registers(gpu: GpuSpec, warps_per_block: int, registers: int) -> int:
    """Blocks/SM the register file holds; 0 when a thread needs more than the ISA allows."""
    if registers > gpu.max_registers_per_thread:
        return 0
    if registers <= 0:  # unknown or none: registers do not limit
        return gpu.max_blocks_per_sm
    registers_per_warp = _round_up(registers * WARP_SIZE, REGISTER_ALLOCATION_UNIT)
    warps_per_sub_partition = (gpu.registers_per_sm // SUB_PARTITIONS) // registers_per_warp
    return (warps_per_sub_partition * SUB_PARTITIONS) // warps_per_block


def blocks_allowed_by_shared_memory(gpu: GpuSpec, shared_bytes: int) -> int:
    """Blocks/SM the shared memory holds, counting the 1 KB each block reserves."""
    if shared_bytes > gpu.max_smem_per_block_kb * 1024:
        return 0
    per_block = _round_up(shared_bytes + RESERVED_SHARED_PER_BLOCK, SHARED_ALLOCATION_UNIT)
    return (gpu.smem_per_sm_kb * 1024) // per_block


def occupancy(gpu: GpuSpec, threads_per_block: int, registers: int, shared_bytes: int) -> Occupancy:
    """Resident blocks and warps per SM for one kernel launch shape, and what caps them.

    `shared_bytes` is static plus dynamic shared memory per block. A shape that cannot launch
    at all (too many registers or too much shared memory) gives 0 blocks, limited by that
    resource. Raises ValueError for block sizes a launch would reject.
    """
    if not 1 <= threads_per_block <= MAX_THREADS_PER_BLOCK:
        raise ValueError(f"threads per block must be 1..{MAX_THREADS_PER_BLOCK}, got {threads_per_block}")
    warps_per_block = math.ceil(threads_per_block / WARP_SIZE)
    max_warps = gpu.max_threads_per_sm // WARP_SIZE
    per_limit = {
        "warps": max_warps // warps_per_block,
        "blocks": gpu.max_blocks_per_sm,
        "registers": blocks_allowed_by_registers(gpu, warps_per_block, registers),
        "shared memory": blocks_allowed_by_shared_memory(gpu, max(shared_bytes, 0)),
    }
    active_blocks = min(per_limit.values())
    limited_by = next(name for name in LIMITS if per_limit[name] == active_blocks)
    active_warps = active_blocks * warps_per_block
    return Occupancy(
        active_blocks_per_sm=active_blocks,
        active_warps=active_warps,
        max_warps=max_warps,
        fraction=active_warps / max_warps,
        limited_by=limited_by,
        per_limit=per_limit,
    )
