"""GPUs kernelcast knows: the datasheet table, and detection of the local GPU.

Tensor-core peaks cannot be derived from device properties, so named targets come
from a table (docs/measure.md); a detected GPU is matched to its row and keeps its own
measured clocks and counts in the fingerprint.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    peak_bandwidth_gbs: float
    fp32_tflops: float
    tf32_tflops: float
    bf16_tflops: float
    fp8_tflops: float | None
    l2_mb: float
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm_kb: int
    max_smem_per_block_kb: int
    registers_per_sm: int = 65536
    max_registers_per_thread: int = 255
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    bus_width_bits: int | None = None
    memory_gb: float | None = None
    driver: str | None = None
    source: str = "table"  # table | detected | measured (calibrate-hw)

    @property
    def arch(self) -> str:
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["compute_capability"] = list(self.compute_capability)
        data["arch"] = self.arch
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GpuSpec:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["compute_capability"] = tuple(values["compute_capability"])
        return cls(**values)

    def fingerprint(self) -> str:
        """Stable id of everything about this GPU that changes a kernel's speed."""
        blob = json.dumps(self.to_json(), sort_keys=True).encode()
        return f"{self.key}-{hashlib.sha256(blob).hexdigest()[:12]}"


def _hopper(key: str, name: str, sms: int, bw: float, fp32: float, tf32: float, bf16: float, fp8: float) -> GpuSpec:
    return GpuSpec(key, name, (9, 0), sms, bw, fp32, tf32, bf16, fp8, 50, 2048, 32, 228, 227)


# Dense datasheet peaks (TFLOP/s), bandwidth in GB/s; docs/measure.md "Target GPUs".
SPECS: dict[str, GpuSpec] = {
    spec.key: spec
    for spec in (
        _hopper("H100-SXM", "NVIDIA H100 SXM", 132, 3350, 67, 495, 989, 1979),
        _hopper("H100-PCIe", "NVIDIA H100 PCIe", 114, 2000, 51, 378, 756, 1513),
        _hopper("H200", "NVIDIA H200 SXM", 132, 4800, 67, 495, 989, 1979),
        GpuSpec("A100", "NVIDIA A100 80GB SXM", (8, 0), 108, 2039, 19.5, 156, 312, None, 40, 2048, 32, 164, 163),
        GpuSpec("L40S", "NVIDIA L40S", (8, 9), 142, 864, 91.6, 183, 362, 733, 96, 1536, 24, 100, 99),
        GpuSpec("RTX4090", "NVIDIA GeForce RTX 4090", (8, 9), 128, 1008, 82.6, 82.6, 165, 330, 72, 1536, 24, 100, 99),
        GpuSpec("B200", "NVIDIA B200", (10, 0), 148, 8000, 75, 1125, 2250, 4500, 126, 2048, 32, 228, 227),
        GpuSpec("L4", "NVIDIA L4", (8, 9), 58, 300, 30.3, 60, 121, 242, 48, 1536, 24, 100, 99),
        # Turing and Volta have no TF32 or BF16 tensor cores: a 32-bit matmul runs at the FP32 rate,
        # and the 16-bit rate is FP16's.
        GpuSpec("T4", "NVIDIA T4", (7, 5), 40, 320, 8.1, 8.1, 65, None, 4, 1024, 16, 64, 64),
        GpuSpec("V100", "NVIDIA V100 SXM2", (7, 0), 80, 900, 15.7, 15.7, 125, None, 6, 2048, 32, 96, 96),
    )
}
DEFAULT_TARGET = "H100-SXM"

_ALIASES = {
    "h100": "H100-SXM",
    "h100sxm": "H100-SXM",
    "h10080gbhbm3": "H100-SXM",
    "h100pcie": "H100-PCIe",
    "h200": "H200",
    "h200sxm": "H200",
    "a100": "A100",
    "a10080gbsxm": "A100",
    "a100sxm480gb": "A100",
    "l40s": "L40S",
    "rtx4090": "RTX4090",
    "geforcertx4090": "RTX4090",
    "4090": "RTX4090",
    "b200": "B200",
    "teslat4": "T4",
    "teslav100": "V100",
    "v100sxm2": "V100",
}
# An alias this long or longer also names what starts with it ("A100-SXM4-40GB"); a shorter one only
# itself, or L40 would read as L4.
_PREFIX_ALIAS = 4


def _normalise_name(name: str) -> str:
    return "".join(ch for ch in name.lower().replace("nvidia", "") if ch.isalnum())


def lookup(name: str) -> GpuSpec:
    """The table row for a user-facing GPU name ("H100", "h100-sxm", "NVIDIA H100 80GB HBM3")."""
    if name in SPECS:
        return SPECS[name]
    normalised = _normalise_name(name)
    for key in SPECS:
        if _normalise_name(key) == normalised:
            return SPECS[key]
    if normalised in _ALIASES:
        return SPECS[_ALIASES[normalised]]
    for alias, key in sorted(_ALIASES.items(), key=lambda item: -len(item[0])):
        if len(alias) >= _PREFIX_ALIAS and normalised.startswith(alias):
            return SPECS[key]
    known = ", ".join(SPECS)
    raise KeyError(f"unknown GPU {name!r}; known targets: {known}")


@dataclass
class LocalGpu:
    """What NVML says about a GPU on this machine."""

    index: int
    name: str
    spec: GpuSpec
    details: dict[str, Any] = field(default_factory=dict)


def detect_local_gpus() -> list[LocalGpu]:
    """GPUs visible through nvidia-ml-py; empty when the library or a driver is absent."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver on this machine: NVMLError_LibraryNotFound and friends
        return []
    gpus: list[LocalGpu] = []
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(pynvml.nvmlDeviceGetName(handle))
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            sm_clock = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
            mem_clock = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
            bus_width = _optional(lambda: pynvml.nvmlDeviceGetMemoryBusWidth(handle))
            memory_gb = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
            try:
                base = lookup(name)
            except KeyError:
                base = _nearest_by_capability((major, minor))
            overrides: dict[str, Any] = {
                "name": name,
                "compute_capability": (major, minor),
                "sm_clock_mhz": sm_clock,
                "memory_clock_mhz": mem_clock,
                "bus_width_bits": bus_width,
                "memory_gb": round(memory_gb, 1),
                "driver": driver,
                "source": "detected",
            }
            if bus_width:
                # Peak HBM = 2 · memory clock · bus width / 8 (docs/measure.md).
                overrides["peak_bandwidth_gbs"] = round(2 * mem_clock * 1e6 * bus_width / 8 / 1e9)
            gpus.append(LocalGpu(index, name, replace(base, **overrides)))
    except Exception:  # a half-working driver must not break the editor
        return gpus
    finally:
        _optional(pynvml.nvmlShutdown)
    return gpus


def _nearest_by_capability(cc: tuple[int, int]) -> GpuSpec:
    same = [s for s in SPECS.values() if s.compute_capability == cc]
    if same:
        return same[0]
    return min(SPECS.values(), key=lambda s: abs(s.compute_capability[0] * 10 + s.compute_capability[1] - cc[0] * 10 - cc[1]))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(call: Any) -> Any:
    try:
        return call()
    except Exception:
        return None


def resolve_target(configured: str | None = None, prefer_local: bool = True) -> GpuSpec:
    """The GPU forecasts are for: the configured target, else the local GPU, else H100 SXM."""
    if configured:
        return lookup(configured)
    if prefer_local:
        local = detect_local_gpus()
        if local:
            return with_measured_rates(local[0].spec)
    return SPECS[DEFAULT_TARGET]


def with_measured_rates(spec: GpuSpec) -> GpuSpec:
    """The spec with the rates `kernelcast calibrate-hw` measured on this GPU, if any."""
    from kernelcast.kernels_runtime.calibrate_hw import load_measured

    measured = load_measured().get(spec.name)
    if not measured:
        return spec
    return replace(spec, peak_bandwidth_gbs=measured["copy_gbs"], bf16_tflops=measured["bf16_tflops"], source="measured")
