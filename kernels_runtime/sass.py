"""Instruction mix of a cubin's SASS: what the hardware will actually execute.

ptxas' report gives resources; the SASS tells whether tensor cores and wide loads were
used and how many local-memory (spill) instructions ended up in the code. A disassembler
is looked for on PATH, then in the triton wheel (which ships cuobjdump/nvdisasm), then in
the nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels. nvdisasm comes first: cuobjdump -sass
runs it anyway, and read directly without its data-flow analysis (`-ndf`, which only annotates)
it gives the same counts in about 30% less CPU, and every compile is disassembled.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelcast.kernels_runtime.cuda_facts import ToolTimeout, run_tool

NO_DISASSEMBLER = "SASS mix unavailable: no nvdisasm/cuobjdump found (pip install triton or nvidia-cuda-nvdisasm)"
TOOLS = ("nvdisasm", "cuobjdump")
TENSOR_CORE_OPCODES = frozenset(
    {
        "HMMA",
        "IMMA",
        "DMMA",
        "BMMA",
        "QMMA",
        "OMMA",
        "HGMMA",
        "IGMMA",
        "QGMMA",
        "BGMMA",
        "UTCHMMA",
        "UTCIMMA",
        "UTCQMMA",
        "UTCOMMA",
        "UTCMMA",
    }
)
ATOMIC_OPCODES = frozenset({"ATOM", "ATOMG", "ATOMS", "RED", "REDG", "REDS"})


@dataclass
class SassMix:
    """Counts of SASS instructions of one kernel (NOP padding not counted)."""

    total: int = 0
    tensor_core: int = 0
    tensor_core_ops: dict[str, int] = field(default_factory=dict)  # e.g. {"HGMMA": 8}
    global_loads: int = 0
    global_stores: int = 0
    vector_loads_128: int = 0
    vector_loads_64: int = 0
    shared_loads: int = 0
    shared_stores: int = 0
    local_loads: int = 0  # LDL: spill reloads (or local arrays)
    local_stores: int = 0  # STL
    barriers: int = 0
    shuffles: int = 0
    atomics: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SassMix:
        known = cls.__dataclass_fields__
        return cls(**{k: (dict(v) if k == "tensor_core_ops" else int(v)) for k, v in data.items() if k in known})

    def count(self, opcode: str) -> None:
        """Add one instruction, given its full opcode with modifiers (`LDG.E.128.CONSTANT`)."""
        root, *modifiers = opcode.split(".")
        if root == "NOP":
            return
        self.total += 1
        if root in TENSOR_CORE_OPCODES:
            self.tensor_core += 1
            self.tensor_core_ops[root] = self.tensor_core_ops.get(root, 0) + 1
        elif root == "LDG":
            self.global_loads += 1
            self.vector_loads_128 += "128" in modifiers
            self.vector_loads_64 += "64" in modifiers
        elif root in ATOMIC_OPCODES:
            self.atomics += 1
        else:
            attribute = _SIMPLE_COUNTS.get(root)
            if attribute:
                setattr(self, attribute, getattr(self, attribute) + 1)


_SIMPLE_COUNTS = {
    "STG": "global_stores",
    "LDS": "shared_loads",
    "LDSM": "shared_loads",
    "STS": "shared_stores",
    "LDL": "local_loads",
    "STL": "local_stores",
    "BAR": "barriers",
    "SHFL": "shuffles",
}

# `Function : name` (cuobjdump -sass) or `.text.name:` (nvdisasm).
_FUNCTION = re.compile(r"^\s*(?:Function\s*:\s*(\S+)|\.text\.(\S+):)")
# `/*0040*/  @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;`
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def parse_sass(listing: str) -> dict[str, SassMix]:
    """Per-function instruction counts from a cuobjdump -sass or nvdisasm listing."""
    mixes: dict[str, SassMix] = {}
    current: SassMix | None = None
    for line in listing.splitlines():
        if header := _FUNCTION.match(line):
            current = mixes.setdefault(header.group(1) or header.group(2), SassMix())
        elif current is not None and (instruction := _INSTRUCTION.search(line)):
            current.count(instruction.group(1))
    return mixes


@functools.lru_cache(maxsize=1)
def find_disassembler() -> str | None:
    """Path of cuobjdump or nvdisasm: PATH, then the triton wheel, then nvidia-cuda-* wheels."""
    for directory in _candidate_directories():
        for tool in TOOLS:
            path = shutil.which(tool) if directory is None else os.path.join(directory, tool)
            if path and os.access(path, os.X_OK):
                return path
    return None


def _candidate_directories() -> list[str | None]:
    """None stands for PATH. Wheels are located with find_spec, which does not import them."""
    directories: list[str | None] = [None]
    triton = _package_directories("triton")
    directories += [os.path.join(d, "backends", "nvidia", "bin") for d in triton]
    for nvidia in _package_directories("nvidia"):
        directories += sorted(str(p) for p in Path(nvidia).glob("*/bin"))
    return directories


def _package_directories(package: str) -> list[str]:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec else []


def disassemble(cubin: bytes, timeout_s: float = 30.0) -> tuple[dict[str, SassMix] | None, str | None]:
    """SASS mix per (mangled) function name, or None and a readable reason."""
    tool = find_disassembler()
    if tool is None:
        return None, NO_DISASSEMBLER
    with tempfile.TemporaryDirectory(prefix="kernelcast-sass-") as workdir:
        path = os.path.join(workdir, "kernel.cubin")
        Path(path).write_bytes(cubin)
        argv = [tool, "-sass", path] if Path(tool).name.startswith("cuobjdump") else [tool, "-c", "-ndf", path]
        try:
            result = run_tool(argv, timeout_s)
        except (OSError, ToolTimeout) as problem:
            return None, f"SASS mix unavailable: {problem}"
    if result.returncode != 0:
        return None, f"SASS mix unavailable: {Path(tool).name} failed: {result.stderr.strip()[:200]}"
    return parse_sass(result.stdout), None
