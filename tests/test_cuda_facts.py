"""CUDA compiler facts from real compiles (nvcc is on this machine), plus the parsers and facts.py glue."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from analysis_support import with_facts
from machine import limit

from kernelcast.kernels_runtime import cuda_facts, facts, sass
from kernelcast.kernels_runtime.cuda_facts import (
    NO_CUDA_COMPILER,
    ToolTimeout,
    base_name,
    device_source,
    first_error_line,
    global_kernels,
    parse_ptxas_report,
    readable_compile_error,
    run_tool,
)
from kernelcast.kernels_runtime.facts import FactsResult, KernelFacts, cache_key, compile_facts, roofline_floor_ms
from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.kernels_runtime.occupancy import occupancy
from kernelcast.kernels_runtime.sass import NO_DISASSEMBLER, parse_sass

DATA = Path(__file__).parent / "data" / "facts"
H100 = SPECS["H100-SXM"]
needs_nvcc = pytest.mark.skipif(cuda_facts.nvcc_path() is None, reason="nvcc not installed")


def source(name: str) -> str:
    return (DATA / name).read_text()


# --- parsers (no compiler needed) -------------------------------------------------------

NVRTC_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Function properties for _Z6helperv
ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90'
ptxas info    : Function properties for _Z1kPf
ptxas         .     40 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 2 barriers, 2048 bytes smem, 360 bytes cmem[0]
"""


def test_ptxas_report_keeps_entries_and_their_own_frame():
    entries = parse_ptxas_report(NVRTC_LOG)
    assert list(entries) == ["_Z1kPf"]  # the non-inlined device function is not a kernel
    entry = entries["_Z1kPf"]
    assert (entry.registers, entry.barriers, entry.shared_bytes, entry.constant_bytes) == (40, 2, 2048, 360)
    assert (entry.stack_frame_bytes, entry.spill_store_bytes, entry.spill_load_bytes) == (40, 8, 12)


@pytest.mark.parametrize(
    ("mangled", "name"),
    [
        ("saxpy", "saxpy"),
        ("_Z10vector_addPKfS0_Pfi", "vector_add"),
        ("_ZN2ns5innerEPi", "inner"),
        ("_Z5scaleIfLi4EEvPT_S0_i", "scale"),
        ("_ZL6staticPf", "static"),
        ("_ZN12_GLOBAL__N_16kernelEPf", "kernel"),
    ],
)
def test_base_name_of_mangled_symbols(mangled, name):
    assert base_name(mangled) == name


def test_global_kernels_reads_launch_bounds_in_either_position():
    code = (
        "template <int N> __global__ void __launch_bounds__(256, 2) a(float* x) {}\n"
        "__launch_bounds__(128) __global__ void b() {}\n"
        'extern "C" __global__ void c(int n);\n'
        "__global__ void __launch_bounds__(THREADS) d() {}\n"
        "template __global__ void a<4>(float*);\n"
    )
    assert global_kernels(code) == {"a": 256, "b": 128, "c": None, "d": None}


def test_device_source_drops_torch_host_code_only():
    kept, notes = device_source(source("torch_inline.cu"))
    assert "relu_kernel" in kept and "#include <cuda_runtime.h>" in kept
    assert "torch::" not in kept and "torch/extension.h" not in kept and "PYBIND11" not in kept
    assert "relu_cuda" in notes[0]
    assert device_source(source("vector_add.cu")) == (source("vector_add.cu"), [])


def test_parse_sass_counts_by_opcode_root_and_modifiers():
    listing = """
        Function : k
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/              @!P0 LDG.E.64 R8, desc[UR4][R2.64] ;
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24 ;
        /*0030*/                   STL [R1+0x10], R4 ;
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0050*/                   RED.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR4][R2.64], R0 ;
        /*0060*/                   NOP;
"""
    mix = parse_sass(listing)["k"]
    assert (mix.total, mix.global_loads, mix.vector_loads_128, mix.vector_loads_64) == (6, 2, 1, 1)
    assert (mix.tensor_core, mix.tensor_core_ops, mix.local_stores, mix.barriers, mix.atomics) == (1, {"HGMMA": 1}, 1, 1, 1)


def test_run_tool_kills_a_hanging_process_group():
    started = time.perf_counter()
    with pytest.raises(ToolTimeout):
        run_tool(["sh", "-c", "sleep 30 & sleep 30"], timeout_s=0.5)
    assert time.perf_counter() - started < limit(5)


# --- real compiles ------------------------------------------------------------------------


@needs_nvcc
def test_vector_add_facts_and_json_round_trip():
    result = compile_facts(source("vector_add.cu"), "cuda", H100, threads_per_block=256)
    assert result.error is None
    kernel = result.kernels["vector_add"]
    assert kernel.arch == "sm_90" and 0 < kernel.registers <= 32
    assert (kernel.shared_static_bytes, kernel.spill_store_bytes, kernel.barriers) == (0, 0, 0)
    assert kernel.occupancy == occupancy(H100, 256, kernel.registers, 0)
    assert kernel.hint_problems() == []
    assert any("registers/thread" in line for line in kernel.hover_lines())
    assert FactsResult.from_json(json.loads(json.dumps(result.to_json()))) == result


@needs_nvcc
@pytest.mark.parametrize("name", ["transpose.cu", "spill.cu"])
def test_facts_agree_with_a_direct_ptxas_report(name, tmp_path):
    """Parse-consistency: our numbers equal what `nvcc -Xptxas -v` prints for the same file."""
    (tmp_path / name).write_text(source(name))
    printed = subprocess.run(
        [cuda_facts.nvcc_path(), "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-o", "k.cubin", name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    log = printed.stdout + printed.stderr
    registers = int(re.search(r"Used (\d+) registers", log).group(1))
    smem = re.search(r"(\d+) bytes smem", log)
    spill_stores = int(re.search(r"(\d+) bytes spill stores", log).group(1))
    result = compile_facts(source(name), "cuda", H100, kernel_names=None)
    (kernel,) = result.kernels.values()
    assert kernel.registers == registers
    assert kernel.shared_static_bytes == (int(smem.group(1)) if smem else 0)
    assert kernel.spill_store_bytes == spill_stores


@needs_nvcc
def test_transpose_tile_and_launch_bounds():
    kernel = compile_facts(source("transpose.cu"), "cuda", H100).kernels["transpose"]
    assert kernel.shared_static_bytes == 32 * 33 * 4 == 4224
    assert kernel.barriers == 1
    assert kernel.threads_per_block == 1024  # from __launch_bounds__
    assert kernel.occupancy.fraction == 1.0
    with_dynamic = compile_facts(source("transpose.cu"), "cuda", H100, dynamic_smem_bytes=120_000).kernels["transpose"]
    assert with_dynamic.shared_dynamic_bytes == 120_000
    # 120000 + 4224 + 1024 reserved = 125248 B per block: one of 1024 threads fits in 228 KB.
    assert (with_dynamic.occupancy.active_blocks_per_sm, with_dynamic.occupancy.limited_by) == (1, "shared memory")


@needs_nvcc
def test_spills_become_hints():
    kernel = compile_facts(source("spill.cu"), "cuda", H100).kernels["spill_heavy"]
    assert kernel.registers <= 32 and kernel.spill_store_bytes > 0 and kernel.stack_frame_bytes > 0
    assert kernel.hint_problems()[0].startswith("spills ")
    if kernel.sass is not None:
        assert kernel.sass.local_stores > 0 and kernel.sass.local_loads > 0


@needs_nvcc
def test_template_instantiations_are_told_apart():
    result = compile_facts(source("templated.cu"), "cuda", H100, threads_per_block=128)
    assert result.error is None
    assert {k.name for k in result.kernels.values()} == {"scale"}
    assert len(result.kernels) == 2
    if cuda_facts.demangler():
        assert set(result.kernels) == {"scale<float, 4>", "scale<double, 2>"}
    assert compile_facts(source("templated.cu"), "cuda", H100, kernel_names=["scale"]).kernels.keys() == result.kernels.keys()


@needs_nvcc
def test_extern_c_kernel_keeps_its_plain_name():
    assert list(compile_facts(source("extern_c.cu"), "cuda", H100).kernels) == ["saxpy"]


@needs_nvcc
def test_syntax_error_is_readable():
    result = compile_facts(source("syntax_error.cu"), "cuda", H100)
    assert result.kernels == {}
    assert "kernel.cu(" in result.error and "error" in result.error
    assert "kernelcast-" not in result.error  # temp paths are shortened
    assert len(result.error.splitlines()) <= cuda_facts.ERROR_LINES


@needs_nvcc
def test_load_inline_source_compiles_its_device_code():
    result = compile_facts(source("torch_inline.cu"), "cuda", H100, threads_per_block=256)
    assert result.error is None
    kernel = result.kernels["relu_kernel"]
    assert kernel.registers > 0
    assert any("torch host code" in note for note in kernel.notes)


@needs_nvcc
def test_nvcc_is_used_when_nvrtc_is_absent(monkeypatch):
    monkeypatch.setattr(cuda_facts, "cuda_core_available", lambda: False)
    report = cuda_facts.compile_cuda(source("extern_c.cu"), "sm_80")
    assert report.compiler.startswith("nvcc") and report.error is None and "saxpy" in report.functions


@needs_nvcc
def test_results_are_cached_by_content():
    code = source("vector_add.cu") + "\n// cache probe\n"
    first = compile_facts(code, "cuda", H100)
    started = time.perf_counter()
    again = compile_facts(code, "cuda", H100)
    assert time.perf_counter() - started < limit(0.05) and again == first and again is not first


def test_no_cuda_compiler_is_a_readable_error(monkeypatch):
    monkeypatch.setattr(cuda_facts, "cuda_core_available", lambda: False)
    monkeypatch.setattr(cuda_facts, "nvcc_path", lambda: None)
    result = compile_facts(source("vector_add.cu") + "// no compiler\n", "cuda", H100)
    assert result.error == NO_CUDA_COMPILER and result.kernels == {}
    assert compile_facts(source("vector_add.cu") + "// no compiler\n", "cuda", H100).error == NO_CUDA_COMPILER


@needs_nvcc
def test_missing_disassembler_is_noted(monkeypatch):
    monkeypatch.setattr(sass, "find_disassembler", lambda: None)
    kernel = compile_facts(source("vector_add.cu") + "// no sass\n", "cuda", H100).kernels["vector_add"]
    assert kernel.sass is None and NO_DISASSEMBLER in kernel.notes


def test_installing_a_disassembler_changes_the_facts_key(tmp_path, monkeypatch):
    """Facts cached without a SASS mix must not be served once the tool the note asks for is on PATH."""
    before = cache_key(source("vector_add.cu"), "cuda", "sm_90", {})
    tool = tmp_path / "cuobjdump"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    sass.find_disassembler.cache_clear()
    facts.toolchain.cache_clear()
    try:
        assert facts.toolchain()["disassembler"] == str(tool)
        assert cache_key(source("vector_add.cu"), "cuda", "sm_90", {}) != before
    finally:
        monkeypatch.undo()
        sass.find_disassembler.cache_clear()
        facts.toolchain.cache_clear()
    assert cache_key(source("vector_add.cu"), "cuda", "sm_90", {}) == before


def _cubin(folder: Path, name: str) -> bytes:
    """The data file `name` compiled by nvcc to an sm_90 cubin in `folder`."""
    (folder / name).write_text(source(name))
    cubin = folder / f"{name}.cubin"
    subprocess.run([str(cuda_facts.nvcc_path()), "-arch=sm_90", "-cubin", "-o", str(cubin), str(folder / name)], check=True)
    return cubin.read_bytes()


@needs_nvcc
def test_the_base_install_brings_its_own_disassembler(tmp_path, monkeypatch):
    """Without triton and with no CUDA tool on PATH, the nvidia-cuda-nvdisasm wheel (a base
    dependency on Linux) still reads the SASS mix: the embedded forecaster learnt from facts that
    had one, and without it a fresh install forecast the README's SGEMM 1.9x where one with triton said 1.6x."""
    cubin = _cubin(tmp_path, "vector_add.cu")
    found_in_packages = sass._package_directories
    monkeypatch.setattr(sass, "_package_directories", lambda package: [] if package == "triton" else found_in_packages(package))
    monkeypatch.setenv("PATH", str(tmp_path))
    sass.find_disassembler.cache_clear()
    try:
        tool = sass.find_disassembler()
        assert tool is not None and Path(tool).parent.parent.parent.name == "nvidia" and Path(tool).name == "nvdisasm", tool
        mix, problem = sass.disassemble(cubin)
        assert problem is None and mix is not None
        (kernel,) = mix.values()
        assert kernel.global_loads >= 2 and kernel.global_stores >= 1
    finally:
        monkeypatch.undo()
        sass.find_disassembler.cache_clear()


@needs_nvcc
def test_nvdisasm_without_data_flow_counts_what_cuobjdump_counts(tmp_path, monkeypatch):
    """nvdisasm is asked first and run without its data-flow analysis; the mix must be the one
    cuobjdump -sass gives, or the facts the weights learnt from would change with the tool."""
    found = sass.find_disassembler()
    if found is None or Path(found).name != "nvdisasm" or not (Path(found).parent / "cuobjdump").exists():
        pytest.skip(f"needs nvdisasm found first with cuobjdump beside it (found {found})")
    mixes = []
    for name in ("transpose.cu", "spill.cu"):
        cubin = _cubin(tmp_path, name)
        by_nvdisasm, problem = sass.disassemble(cubin)
        assert problem is None and by_nvdisasm
        with monkeypatch.context() as patched:
            patched.setattr(sass, "find_disassembler", lambda: str(Path(found).parent / "cuobjdump"))
            by_cuobjdump, problem = sass.disassemble(cubin)
        assert problem is None and by_cuobjdump == by_nvdisasm, name
        mixes += by_nvdisasm.values()
    assert any(mix.shared_loads for mix in mixes) and any(mix.local_loads for mix in mixes)


# --- facts wording and roofline ------------------------------------------------------------


def test_low_occupancy_hint_names_its_limit():
    low = occupancy(H100, 256, 168, 0)  # 168 regs → 5376/warp → 3 warps per sub-partition → 1 block = 12.5%
    kernel = KernelFacts("k", "cuda", "sm_90", 168, 0, None, 0, 0, 0, 0, 256, low, None, "nvcc 13.0", 1.0)
    assert kernel.hint_problems() == ["occupancy 12% (limited by registers)"]
    assert KernelFacts.from_json(kernel.to_json()) == kernel


def test_roofline_floor_picks_the_slower_side():
    # 3.35e12 B/s: 3.35 GB takes 1 ms; 67e12 fp32 FLOP/s: 6.7e9 FLOP take 0.1 ms.
    assert roofline_floor_ms(3.35e9, 6.7e9, H100) == (pytest.approx(1.0), "memory-bound")
    # bf16 tensor cores at 989 TFLOP/s: 2·8192³ FLOP ≈ 1.11 ms vs 3·8192²·2 B ≈ 0.12 ms of traffic.
    ms, label = roofline_floor_ms(3 * 8192**2 * 2, 2 * 8192**3, H100, tensor_cores=True, dtype="bf16")
    assert label == "compute-bound" and ms == pytest.approx(2 * 8192**3 / 989e12 * 1e3)
    # Without tensor cores the same matmul is held to the fp32 CUDA-core rate ×2 for packed bf16.
    assert roofline_floor_ms(0, 2 * 8192**3, H100, dtype="bf16")[0] == pytest.approx(2 * 8192**3 / 134e12 * 1e3)
    assert roofline_floor_ms(0, 1e12, SPECS["A100"], tensor_cores=True, dtype="fp8")[0] == pytest.approx(1e3 / 312)


def test_compile_error_starts_at_its_first_error_line_for_the_hover():
    """A warning's caret above the error once became the hover's `Compiler facts unavailable: | ^`."""
    log = (
        '/tmp/kernelcast-ab12/kernel.cu(2): warning #177-D: variable "unused" was declared but never referenced\n'
        "      int unused;\n          ^\n\n"
        '/tmp/kernelcast-ab12/kernel.cu(3): error: identifier "undeclared_name" is undefined\n'
        '    x[0] = undeclared_name;\n           ^\n\n1 error detected in the compilation of "kernel.cu".\n'
    )
    readable = readable_compile_error(log)
    assert readable.splitlines()[0] == 'kernel.cu(3): error: identifier "undeclared_name" is undefined'
    assert first_error_line(readable) == first_error_line(log.replace("/tmp/kernelcast-ab12/", "")) == readable.splitlines()[0]


EMBEDDED_WITH_HELPERS = '''
import cupy as cp
import torch
from torch.utils.cpp_extension import load_inline

scale_source = """
#include <torch/extension.h>
#define FACTOR 3.0f

__device__ __forceinline__ float scaled(float v) { return v * FACTOR; }

__global__ void scale_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = scaled(x[i]);
}

torch::Tensor scale_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    scale_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""
module = load_inline("scale", "torch::Tensor scale_cuda(torch::Tensor x);", cuda_sources=scale_source, functions=["scale_cuda"])

raw = cp.RawKernel(r"""
#define HALF 0.5f
__device__ float halved(float v) { return v * HALF; }
extern "C" __global__ void halve_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = halved(x[i]);
}
""", "halve_kernel")
'''


@needs_nvcc
def test_an_embedded_kernel_compiles_with_its_strings_macros_and_helpers(tmp_path: Path) -> None:
    """A load_inline or RawKernel kernel that uses its string's #define and __device__ helper gets
    facts: compiled alone it names what it cannot see, and with torch's headers it needs PyTorch."""
    path = tmp_path / "embedded.py"
    path.write_text(EMBEDDED_WITH_HELPERS)
    analysis = with_facts(path, tmp_path)
    by_name = {result.kernel.name: result for result in analysis.results}
    for name in ("scale_kernel", "halve_kernel"):
        assert by_name[name].facts is not None and by_name[name].facts.registers, by_name[name].facts_error


@needs_nvcc
def test_a_cuda_file_compiles_with_its_local_headers(tmp_path: Path) -> None:
    """`#include "common/helpers.cuh"`: the facts compiled in a folder of their own, so neither side had
    any (nvcc: No such file or directory), and a block-size edit read 1.5× slower at conf 0.92."""
    from test_measure_cpu import _project_with_headers

    _project_with_headers(tmp_path)
    (tmp_path / "missing.cuh").write_text("")  # every header present: the file compiles
    (result,) = with_facts(tmp_path / "edit.cu", tmp_path).results
    assert result.facts is not None and result.reference_facts is not None, result.facts_error


def _extension_facts(tmp_path: Path, source: str, function: str) -> tuple[Any, Any]:
    """The one kernel of a torch extension's CUDA, with its facts: read as a `.cu` file, and as the
    load_inline string of a Python file."""
    as_file = tmp_path / "extension.cu"
    as_file.write_text(source)
    (from_file,) = with_facts(as_file, tmp_path).results
    in_python = tmp_path / "extension.py"
    load = f'module = load_inline(name="{function}", cpp_sources="", cuda_sources=cuda_source, functions=["{function}"])'
    in_python.write_text(f'from torch.utils.cpp_extension import load_inline\n\ncuda_source = r"""\n{source}"""\n{load}\n')
    (inline,) = with_facts(in_python, tmp_path).results
    return from_file, inline


DISPATCHED = """#include <torch/extension.h>
#define BLOCK 256

template <typename scalar_t, int THREADS>
__global__ void relu_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ in, const int64_t n) {
    const int64_t i = blockIdx.x * THREADS + threadIdx.x;
    if (i < n) out[i] = in[i] > 0 ? in[i] : 0;
}

torch::Tensor forward(torch::Tensor input) {
    auto output = torch::empty_like(input);
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "relu", ([&] {
        relu_kernel<scalar_t, BLOCK><<<(input.numel() + BLOCK - 1) / BLOCK, BLOCK>>>(
            output.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), input.numel());
    }));
    return output;
}
"""


@needs_nvcc
def test_a_template_kernel_only_torch_host_code_instantiates_gets_facts(tmp_path: Path) -> None:
    """AT_DISPATCH is how LLM-written extensions launch their kernels: with the torch host code left
    out nothing instantiated the template, and the kernel had no facts."""
    result, inline = _extension_facts(tmp_path, DISPATCHED, "forward")
    assert result.facts is not None and result.facts.registers, result.facts_error
    assert "template kernels instantiated as the torch host code launched them (scalar_t read as float)" in result.facts.notes
    assert inline.facts is not None and inline.facts.registers == result.facts.registers, inline.facts_error


@needs_nvcc
def test_an_instantiation_that_does_not_compile_costs_only_itself(tmp_path: Path) -> None:
    broken = DISPATCHED.replace("const int64_t i =", 'static_assert(sizeof(scalar_t) == 8, "doubles only");\n    const int64_t i =')
    broken += "__global__ void other(float* x) { x[threadIdx.x] = 1.0f; }\n"
    result = compile_facts(broken, "cuda", H100)
    assert result.error is None and "other" in result.kernels and "relu_kernel" not in result.kernels


HALF_EXTENSION = """#include <torch/extension.h>
__global__ void add_halves(const half* a, const half* b, half* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = __hadd(a[i], b[i]);
}
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty_like(a);
    add_halves<<<(a.numel() + 255) / 256, 256>>>((const half*)a.data_ptr(), (const half*)b.data_ptr(), (half*)c.data_ptr(), a.numel());
    return c;
}
"""


@needs_nvcc
def test_a_kernel_of_half_types_gets_the_headers_torch_gave_it(tmp_path: Path) -> None:
    """torch/extension.h brings cuda_fp16.h: left out, `half` was undefined and the kernel had no facts."""
    result, inline = _extension_facts(tmp_path, HALF_EXTENSION, "add")
    assert result.facts is not None and result.facts.registers, result.facts_error
    assert "included cuda_fp16.h and cuda_bf16.h, as torch's headers do" in result.facts.notes
    assert inline.facts is not None and inline.facts.registers == result.facts.registers, inline.facts_error
    # The kernel's own line numbers stand in a compile error.
    broken = compile_facts(HALF_EXTENSION.replace("__hadd(a[i], b[i])", "undefined_thing"), "cuda", H100)
    assert broken.error is not None and "kernel.cu(4): error" in broken.error, broken.error


@needs_nvcc
def test_a_pair_side_named_by_its_launcher_gets_its_kernels_facts(tmp_path: Path) -> None:
    """`kernelcast eval` adds facts to sides named as TritonBench names them: by the host function."""
    from kernelcast.analysis import read_as_the_editor
    from kernelcast.cache import ResultCache
    from kernelcast.wire import ForecastRequest, KernelSide

    code = (
        source("vector_add.cu")
        + "\nvoid launch_add(const float* a, float* c, int n) { vector_add<<<(n + 255) / 256, 256>>>(a, a, c, n); }\n"
    )
    torch = KernelSide("def add(a, b):\n    return a + b\n", "pytorch", None)
    named = ForecastRequest(torch, KernelSide(code, "cuda", "launch_add"), {})
    read, problems = read_as_the_editor(named, H100, ResultCache(tmp_path / "cache"))
    assert problems == [] and read.candidate.facts is not None and read.candidate.facts["registers"] > 0
    missing = ForecastRequest(torch, KernelSide(code, "cuda", "no_such_function"), {})
    _, problems = read_as_the_editor(missing, H100, ResultCache(tmp_path / "cache"))
    assert problems == ["no facts: no kernel named 'no_such_function', and no function of that name launches one (kernels: vector_add)"]


@needs_nvcc
def test_torch_half_types_in_a_load_inline_string_compile_once_mapped(tmp_path: Path) -> None:
    """The stand-in for torch's headers is not itself taken for torch host code and left out."""
    kernel = "__global__ void scale_half(at::Half* x, int n) { x[threadIdx.x] = __float2half(2.0f * __half2float(x[threadIdx.x])); }"
    _, inline = _extension_facts(tmp_path, f"#include <torch/extension.h>\n{kernel}\n", "scale")
    assert inline.facts is not None and inline.facts.registers, inline.facts_error
    assert not any("left out torch host code" in note for note in inline.facts.notes), inline.facts.notes


@needs_nvcc
def test_the_device_part_of_a_program_compiles_alone() -> None:
    """What the GPU runtime hands NVRTC of a whole program (cuda_text.device_part) is CUDA that compiles."""
    from test_cuda_text import PROGRAM

    from kernelcast.kernels_runtime.source.cuda_text import device_part

    result = compile_facts(device_part(PROGRAM), "cuda", H100)
    assert result.error is None and "scale" in result.kernels, result.error


MEASURE = Path(__file__).parent / "data" / "measure"


@needs_nvcc
@pytest.mark.parametrize(
    ("name", "kernel", "built"),
    [("block_sum_cub.cu", "block_sum", "block_sum"), ("wmma_gemm.cu", "wmma_gemm", "wmma_gemm")],
)
def test_files_nvrtc_cannot_compile_are_built_by_nvcc_for_their_launch(name: str, kernel: str, built: str) -> None:
    """cub, cstdint, cfloat and mma.h: headers NVRTC cannot open, which the measuring worker then builds with nvcc."""
    report, symbols = cuda_facts.built_for_launch((MEASURE / name).read_text(), kernel, "sm_90", 120)
    assert report.error is None and report.compiler.startswith("nvcc") and report.cubins, report.error
    assert list(symbols.values()) == [built] and set(symbols) <= set(report.functions)


@needs_nvcc
def test_a_template_kernel_named_with_its_arguments_is_instantiated_for_its_launch() -> None:
    code = source("templated.cu")
    _, every = cuda_facts.built_for_launch(code, "scale", "sm_90", 60)
    assert len(every) == 2  # a plain name of two instantiations: the worker asks which
    if cuda_facts.demangler():
        _, one = cuda_facts.built_for_launch(code, "scale<float,4>", "sm_90", 60)
        assert list(one.values()) == ["scale<float, 4>"]
        _, new = cuda_facts.built_for_launch(code, "scale<float, 8>", "sm_90", 60)
        assert list(new.values()) == ["scale<float, 8>"]
