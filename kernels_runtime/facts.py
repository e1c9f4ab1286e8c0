"""Compiler facts of each kernel for a target GPU: the one entry point for the hover, hints and forecasters.

Compilation runs in child processes (cuda_facts / triton_facts); this module only joins
their reports with the SASS mix and the occupancy calculator, and caches results in memory.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.metadata
import json
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelcast.kernels_runtime.cuda_facts import (
    DEFAULT_TIMEOUT_S,
    CompileReport,
    PtxasEntry,
    base_name,
    compile_cuda,
    cuda_core_available,
    global_kernels,
    kernel_keys,
    nvcc_path,
)
from kernelcast.kernels_runtime.hardware import GpuSpec
from kernelcast.kernels_runtime.occupancy import Occupancy, occupancy
from kernelcast.kernels_runtime.sass import SassMix, disassemble, find_disassembler
from kernelcast.kernels_runtime.triton_facts import compile_triton

LOW_OCCUPANCY = 0.25
CACHE_ENTRIES = 256
CUDA_LANGUAGES = frozenset({"cuda", "cuda-cpp", "cu", "c++", "cpp"})


@dataclass
class KernelFacts:
    name: str
    language: str
    arch: str
    registers: int | None
    shared_static_bytes: int | None
    shared_dynamic_bytes: int | None
    spill_store_bytes: int | None
    spill_load_bytes: int | None
    stack_frame_bytes: int | None
    barriers: int | None
    threads_per_block: int | None
    occupancy: Occupancy | None
    sass: SassMix | None
    compiler: str
    compile_ms: float
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["occupancy"] = self.occupancy.to_json() if self.occupancy else None
        data["sass"] = self.sass.to_json() if self.sass else None
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelFacts:
        values = {name: data.get(name) for name in cls.__dataclass_fields__}
        values["occupancy"] = Occupancy.from_json(data["occupancy"]) if data.get("occupancy") else None
        values["sass"] = SassMix.from_json(data["sass"]) if data.get("sass") else None
        values["notes"] = tuple(data.get("notes") or ())
        values["compile_ms"] = float(data.get("compile_ms") or 0.0)
        return cls(**values)

    @property
    def shared_total_bytes(self) -> int:
        return (self.shared_static_bytes or 0) + (self.shared_dynamic_bytes or 0)

    def hover_lines(self, markdown: bool = True) -> list[str]:
        """Short lines for the LSP hover (markdown) or a terminal (plain), most decisive first."""
        name = f"**{self.name}**" if markdown else self.name
        lines = [f"{name} on {self.arch} · {self.compiler} · {self.compile_ms:.0f} ms"]
        resources = []
        if self.registers is not None:
            resources.append(f"{self.registers} registers/thread")
        if self.shared_static_bytes is not None or self.shared_dynamic_bytes is not None:
            shared = f"shared {_bytes(self.shared_static_bytes or 0)} static"
            if self.shared_dynamic_bytes:
                shared += f" + {_bytes(self.shared_dynamic_bytes)} dynamic"
            resources.append(shared)
        if self.barriers:
            resources.append(f"{self.barriers} barrier{'s' if self.barriers > 1 else ''}")
        if self.stack_frame_bytes:
            resources.append(f"stack {_bytes(self.stack_frame_bytes)}")
        if resources:
            lines.append(" · ".join(resources))
        if self.spill_store_bytes or self.spill_load_bytes:
            lines.append(f"⚠ spills: {_bytes(self.spill_store_bytes or 0)} stored, {_bytes(self.spill_load_bytes or 0)} loaded")
        if self.occupancy and self.threads_per_block:
            occ = self.occupancy
            lines.append(
                f"occupancy {occ.fraction:.0%} ({occ.active_warps}/{occ.max_warps} warps, "
                f"{occ.active_blocks_per_sm} blocks/SM of {self.threads_per_block} threads; limited by {occ.limited_by})"
            )
        if self.sass:
            lines.append(_sass_summary(self.sass))
        lines += [f"ℹ {note}" for note in self.notes]
        return lines

    def hint_problems(self) -> list[str]:
        """Problems worth a Hint diagnostic: spills and occupancy below 25%."""
        problems = []
        spilled = max(self.spill_store_bytes or 0, self.spill_load_bytes or 0)
        if spilled:
            problems.append(f"spills {spilled} B to local memory")
        if self.occupancy and self.occupancy.fraction < LOW_OCCUPANCY:
            problems.append(f"occupancy {self.occupancy.fraction:.0%} (limited by {self.occupancy.limited_by})")
        return problems


def _bytes(count: int) -> str:
    return f"{count} B" if count < 10 * 1024 else f"{count / 1024:.1f} KB"


def _sass_summary(mix: SassMix) -> str:
    parts = [f"SASS {mix.total} instr"]
    if mix.tensor_core:
        parts.append(", ".join(f"{n} {op}" for op, n in sorted(mix.tensor_core_ops.items())))
    if mix.global_loads:
        parts.append(f"{mix.global_loads} LDG ({mix.vector_loads_128}×128-bit, {mix.vector_loads_64}×64-bit)")
    if mix.local_loads or mix.local_stores:
        parts.append(f"{mix.local_loads} LDL / {mix.local_stores} STL")
    return " · ".join(parts)


@dataclass
class FactsResult:
    kernels: dict[str, KernelFacts] = field(default_factory=dict)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kernels": {name: facts.to_json() for name, facts in self.kernels.items()}, "error": self.error}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FactsResult:
        kernels = {name: KernelFacts.from_json(facts) for name, facts in (data.get("kernels") or {}).items()}
        return cls(kernels=kernels, error=data.get("error"))


_cache: OrderedDict[str, FactsResult] = OrderedDict()


@functools.lru_cache(maxsize=1)
def toolchain() -> dict[str, Any]:
    """Which compilers and disassembler would take the facts, as found when first asked.

    Part of every cache key: facts taken before nvdisasm was installed have no SASS mix,
    and a user who follows the note that says so must get facts with it, not the cached ones.
    """
    nvcc = nvcc_path()
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = None
    return {
        "nvcc": [nvcc, os.stat(nvcc).st_mtime_ns] if nvcc else None,
        "nvrtc": cuda_core_available(),
        "triton": triton,
        "disassembler": find_disassembler(),
    }


# Raised when the way facts are read from a compile changes, so facts cached before are made again.
FACTS_VERSION = 4


def cache_key(code: str, language: str, arch: str, options: dict[str, Any]) -> str:
    """sha256 of everything that changes the compile, the toolchain and FACTS_VERSION included; also the server's disk-cache key."""
    blob = json.dumps([FACTS_VERSION, code, language, arch, options, toolchain()], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def compile_facts(
    code: str,
    language: str,
    gpu: GpuSpec,
    kernel_names: Sequence[str] | None = None,
    threads_per_block: int | None = None,
    dynamic_smem_bytes: int = 0,
    *,
    signature: dict[str, Any] | None = None,
    constexprs: dict[str, Any] | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> FactsResult:
    """Compile `code` ("cuda" or "triton") for `gpu` in a child process and return per-kernel facts.

    `threads_per_block` / `dynamic_smem_bytes` come from a launch spec when there is one;
    `signature`, `constexprs`, `num_warps`, `num_stages` describe a Triton launch. Results of
    real compiles (including compile errors) are cached in memory; a missing or timed-out
    compiler is not cached, so installing one or retrying takes effect.
    """
    language = language.lower()
    options = {
        "kernel_names": sorted(kernel_names) if kernel_names else None,
        "threads_per_block": threads_per_block,
        "dynamic_smem_bytes": dynamic_smem_bytes,
        "signature": signature,
        "constexprs": constexprs,
        "num_warps": num_warps,
        "num_stages": num_stages,
    }
    key = cache_key(code, language, gpu.fingerprint(), options)
    if key in _cache:
        _cache.move_to_end(key)
        return copy.deepcopy(_cache[key])
    if language in CUDA_LANGUAGES:
        report = compile_cuda(code, gpu.arch, timeout_s)
        declared = global_kernels(code)
    elif language == "triton":
        major, minor = gpu.compute_capability
        if num_warps is None and threads_per_block:
            num_warps = max(threads_per_block // 32, 1)
        report = compile_triton(
            code, major * 10 + minor, list(kernel_names or []) or None, signature, constexprs, num_warps, num_stages, timeout_s
        )
        declared = {}
    else:
        return FactsResult(error=f"no compiler facts for language {language!r} (cuda or triton)")
    result = _facts_of(report, language, gpu, declared, kernel_names, threads_per_block, dynamic_smem_bytes)
    if report.functions or _is_compile_error(report):
        _cache[key] = copy.deepcopy(result)
        if len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    return result


def _is_compile_error(report: CompileReport) -> bool:
    """An error the compiler gave about the code (cacheable), not a missing or killed tool."""
    return bool(report.error) and report.compiler != "none" and "timed out" not in report.error


def _facts_of(
    report: CompileReport,
    language: str,
    gpu: GpuSpec,
    declared: dict[str, int | None],
    kernel_names: Sequence[str] | None,
    threads_per_block: int | None,
    dynamic_smem_bytes: int,
) -> FactsResult:
    sass_by_function: dict[str, SassMix] = {}
    sass_note = None
    for cubin in report.cubins:
        mixes, sass_note = disassemble(cubin)
        sass_by_function.update(mixes or {})
    names = kernel_keys(list(report.functions))
    kernels: dict[str, KernelFacts] = {}
    for mangled, entry in report.functions.items():
        name = base_name(mangled)
        if kernel_names and name not in kernel_names and names[mangled] not in kernel_names:
            continue
        threads = threads_per_block or declared.get(name) or report.threads_per_block.get(mangled)
        dynamic = dynamic_smem_bytes or report.dynamic_shared_bytes.get(mangled) or None
        notes = list(report.notes)
        if sass_note:
            notes.append(sass_note)
        kernels[names[mangled]] = KernelFacts(
            name=name,
            language=language,
            arch=gpu.arch,
            registers=entry.registers,
            shared_static_bytes=entry.shared_bytes,
            shared_dynamic_bytes=dynamic,
            spill_store_bytes=entry.spill_store_bytes,
            spill_load_bytes=entry.spill_load_bytes,
            stack_frame_bytes=entry.stack_frame_bytes,
            barriers=entry.barriers,
            threads_per_block=threads,
            occupancy=_occupancy_or_note(gpu, threads, entry, (dynamic or 0), notes),
            sass=sass_by_function.get(mangled),
            compiler=report.compiler,
            compile_ms=report.compile_ms,
            notes=tuple(notes),
        )
    error = report.error
    compiled = {facts.name for facts in kernels.values()}
    missing = [n for n in declared if n not in compiled and (not kernel_names or n in kernel_names)]
    if missing and not error:
        note = f"no code compiled for {', '.join(missing)}: a template nothing instantiates (only a removed torch wrapper?)"
        for facts in kernels.values():
            facts.notes += (note,)
        error = None if kernels else note
    return FactsResult(kernels=kernels, error=error)


def _occupancy_or_note(gpu: GpuSpec, threads: int | None, entry: PtxasEntry, dynamic: int, notes: list[str]) -> Occupancy | None:
    if not threads:
        notes.append("occupancy needs threads per block (a launch spec or __launch_bounds__)")
        return None
    try:
        return occupancy(gpu, threads, entry.registers, entry.shared_bytes + dynamic)
    except ValueError as problem:
        notes.append(f"no occupancy: {problem}")
        return None


def roofline_floor_ms(bytes_moved: float, flops: float, gpu: GpuSpec, tensor_cores: bool = False, dtype: str = "fp32") -> tuple[float, str]:
    """No kernel can beat max(bytes / peak bandwidth, flops / peak math): the floor and which side sets it.

    Tensor-core peaks by dtype: fp32 → TF32, fp16/bf16 → BF16, fp8/int8 → FP8 (BF16 where the
    GPU has no FP8). CUDA-core math: fp32 rate; fp16/bf16 at twice it (packed half2).
    """
    dtype = dtype.lower()
    sixteen_bit = dtype in ("fp16", "bf16", "float16", "bfloat16", "half")
    eight_bit = dtype in ("fp8", "int8", "e4m3", "e5m2")
    if tensor_cores:
        if eight_bit:
            tflops = gpu.fp8_tflops or gpu.bf16_tflops
        elif sixteen_bit:
            tflops = gpu.bf16_tflops
        else:
            tflops = gpu.tf32_tflops
    else:
        tflops = gpu.fp32_tflops * (2 if sixteen_bit else 1)
    memory_ms = bytes_moved / (gpu.peak_bandwidth_gbs * 1e9) * 1e3
    compute_ms = flops / (tflops * 1e12) * 1e3
    if memory_ms >= compute_ms:
        return memory_ms, "memory-bound"
    return compute_ms, "compute-bound"
