"""Compile CUDA source for a target arch without a GPU and read ptxas' resource report.

Compilers always run in a child process (user code never enters the editor's process, and
a crashing compiler cannot take the server down): NVRTC through cuda.core in a worker
interpreter when cuda.core is importable, else (or when NVRTC rejects the file, e.g. host
code) `nvcc -cubin -Xptxas -v`.

Embedded load_inline sources are supported by stripping what only a torch build can
compile: `#include`s of torch/ATen/c10/pybind11 and top-level host functions or
declarations that mention torch (the Python binding wrappers). `at::Half`/`c10::Half`
in device code are mapped to `__half` (and BFloat16 to `__nv_bfloat16`). Template kernels
that only the stripped wrappers instantiated (AT_DISPATCH) are instantiated as those wrappers
launched them (`cuda_text.template_instances`), where their arguments can be spelled without them.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelcast.kernels_runtime.source import cuda_text

DEFAULT_TIMEOUT_S = 30.0
ERROR_LINES = 12
NO_CUDA_COMPILER = "no CUDA compiler: install nvcc or `pip install cuda-python cuda-core`"
NVRTC_COMPILER = "nvrtc (cuda.core)"
# Inline PTX that only the arch-specific ("a") targets accept.
ARCH_SPECIFIC_PTX = re.compile(r"\b(wgmma|setmaxnreg|tcgen05)\b")


class ToolTimeout(Exception):
    """A compiler or disassembler ran past its time limit and was killed."""


def run_tool(
    argv: list[str], timeout_s: float, cwd: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one compiler/disassembler in its own process group, killing the whole group on timeout.

    Shared by every toolchain call so none can hang the editor (nvcc forks cicc/ptxas;
    killing only the parent would leave them running).
    """
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise ToolTimeout(f"{Path(argv[0]).name} timed out after {timeout_s:g} s and was killed") from None
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


@dataclass
class PtxasEntry:
    """ptxas' resource report for one entry function (a kernel)."""

    mangled: str
    registers: int = 0
    barriers: int = 0
    shared_bytes: int = 0
    constant_bytes: int | None = None
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0


@dataclass
class CompileReport:
    """What one compile produced, keyed by the compiled (mangled) function name."""

    compiler: str
    functions: dict[str, PtxasEntry] = field(default_factory=dict)
    cubins: list[bytes] = field(default_factory=list)  # one for CUDA; one per kernel for Triton
    compile_ms: float = 0.0
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    threads_per_block: dict[str, int] = field(default_factory=dict)  # known at compile time (Triton)
    dynamic_shared_bytes: dict[str, int] = field(default_factory=dict)


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_ptxas_report(log: str) -> dict[str, PtxasEntry]:
    """Per-kernel resources from `ptxas -v` output (nvcc, NVRTC and Triton print the same lines)."""
    entries: dict[str, PtxasEntry] = {}
    frames: dict[str, tuple[int, int, int]] = {}
    current_entry: str | None = None
    current_properties: str | None = None
    for line in log.splitlines():
        if match := _ENTRY.search(line):
            current_entry = match.group(1)
            entries[current_entry] = PtxasEntry(current_entry)
        elif match := _PROPERTIES.search(line):
            current_properties = match.group(1)
        elif (match := _FRAME.search(line)) and current_properties:
            frames[current_properties] = tuple(int(g) for g in match.groups())  # type: ignore[assignment]
        elif (match := _USED.search(line)) and current_entry:
            entry = entries[current_entry]
            entry.registers = int(match.group(1))
            entry.barriers = _int_or(_BARRIERS, line, 0)
            entry.shared_bytes = _int_or(_SMEM, line, 0)
            entry.constant_bytes = _int_or(_CMEM, line, None)
    for name, entry in entries.items():
        entry.stack_frame_bytes, entry.spill_store_bytes, entry.spill_load_bytes = frames.get(name, (0, 0, 0))
    return entries


def _int_or(pattern: re.Pattern[str], line: str, default: int | None) -> int | None:
    match = pattern.search(line)
    return int(match.group(1)) if match else default


# --- names -----------------------------------------------------------------------------


def global_kernels(code: str) -> dict[str, int | None]:
    """`__global__` function names in the source (declared or defined; explicit instantiations name
    one already listed), with their `__launch_bounds__` thread count if literal."""
    kernels: dict[str, int | None] = {}
    for kernel in cuda_text.functions(code, cuda_text.KERNEL, declarations=True):
        threads = kernel.launch_bounds[0] if kernel.launch_bounds else ""
        kernels.setdefault(kernel.name, int(threads, 0) if re.fullmatch(r"\d+|0x[0-9a-fA-F]+", threads) else None)
    return kernels


def base_name(mangled: str) -> str:
    """The unqualified function name inside an Itanium-mangled symbol (`_ZN2ns6kernelEPf` → `kernel`).

    extern "C" symbols are returned unchanged.
    """
    if not mangled.startswith("_Z"):
        return mangled
    position = 2
    if mangled[position : position + 1] == "L":  # internal linkage (static)
        position += 1
    nested = mangled[position : position + 1] == "N"
    if nested:
        position += 1
        while position < len(mangled) and mangled[position] in "KVr":
            position += 1
    name = mangled
    while match := re.match(r"\d+", mangled[position:]):
        length = int(match.group())
        start = position + len(match.group())
        name = mangled[start : start + length]
        position = start + length
        if not nested:
            break
    return name


@functools.lru_cache(maxsize=1)
def demangler() -> str | None:
    """cu++filt (CUDA toolkit) or binutils c++filt: both read nvcc's Itanium symbols."""
    return shutil.which("cu++filt") or shutil.which("c++filt")


def demangle(names: list[str], timeout_s: float = 5.0) -> dict[str, str]:
    """Readable C++ names (`scale<float, 2>`) for mangled symbols; symbols unchanged without a demangler."""
    tool = demangler()
    mangled = [n for n in names if n.startswith("_Z")]
    readable = {n: n for n in names}
    if not tool or not mangled:
        return readable
    try:
        result = run_tool([tool, *mangled], timeout_s)
    except (OSError, ToolTimeout):
        return readable
    for symbol, text in zip(mangled, result.stdout.splitlines()):
        readable[symbol] = _without_signature(text.strip())
    return readable


def _without_signature(demangled: str) -> str:
    """`void ns::scale<float, 2>(float*, float, int)` → `ns::scale<float, 2>`."""
    depth = 0
    for index, ch in enumerate(demangled):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            demangled = demangled[:index]
            break
    return re.sub(r"^(void|auto)\s+", "", demangled)


def kernel_keys(mangled_names: list[str]) -> dict[str, str]:
    """Plain kernel names where unique; demangled names (`scale<float, 2>`) for instantiations and overloads."""
    bases = [base_name(m) for m in mangled_names]
    clashing = [m for m, b in zip(mangled_names, bases) if bases.count(b) > 1]
    readable = demangle(clashing) if clashing else {}
    return {m: readable.get(m, b) for m, b in zip(mangled_names, bases)}


def symbols_named(name: str, mangled_names: list[str]) -> dict[str, str]:
    """The compiled symbols a launch's kernel name means, each with its readable key: the one of that
    plain name, or the instantiation it spells (`scale<float,2>` in any spacing); several when a plain
    name has several instantiations."""
    keys = kernel_keys(mangled_names)
    wanted = name.replace(" ", "")
    exact = {m: key for m, key in keys.items() if key.replace(" ", "") == wanted}
    return exact or {m: key for m, key in keys.items() if base_name(m) == wanted}


# --- preparing embedded (load_inline) sources -------------------------------------------

_TORCH_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"](torch|ATen|c10|pybind11|Python)[/.][^>\"]*[>\"].*$", re.MULTILINE)
_TORCH_MARKERS = re.compile(r"\b(torch|at|c10|py|pybind11)::|\bTORCH_\w+|\bAT_\w+|\bPYBIND11_\w+|\bC10_\w+")
_DEVICE_MARKERS = re.compile(r"\b(__global__|__device__|__constant__|__shared__)\b")
# What torch's headers give a kernel: the 16-bit types (`half`, `__hadd`, ...) and torch's names for
# them. `#line 1` keeps the kernel's own line numbers in compile errors.
TORCH_TYPES_PRELUDE = """#include <cuda_fp16.h>
#include <cuda_bf16.h>
namespace c10 { using Half = __half; using BFloat16 = __nv_bfloat16; }
namespace at { using Half = __half; using BFloat16 = __nv_bfloat16; }
#line 1
"""
_TORCH_TYPES = re.compile(r"\b(at|c10)::(Half|BFloat16)\b")
_SIXTEEN_BIT = re.compile(
    r"\b(?:half2?|__half2?|(?:__)?nv_bfloat162?|__h(?:add|sub|mul|div|fma|max|min)2?|__float2half\w*|__half2float|__float2bfloat16\w*|__bfloat162float)\b"
)
_SIXTEEN_BIT_HEADER = re.compile(r"#\s*include\s*[<\"]cuda_(?:fp16|bf16)\.h")


def device_source(code: str, instantiate: bool = True) -> tuple[str, list[str]]:
    """The source with torch-only host parts removed, and notes saying what was removed; with
    `instantiate`, the template kernels those parts launched are instantiated as they launched them."""
    without_includes, include_count = _TORCH_INCLUDE.subn("", code)
    kept: list[str] = []
    dropped: list[str] = []
    for chunk in _top_level_chunks(without_includes):
        head = chunk.split("{", 1)[0]
        if not _DEVICE_MARKERS.search(head) and _TORCH_MARKERS.search(chunk):
            dropped.append(_chunk_label(head))
            continue
        kept.append(chunk)
    if not include_count and not dropped:
        return code, []
    source, typed = with_torch_types("".join(kept))
    notes = [f"compiled device code only: left out torch host code ({', '.join(dropped) or 'includes'})", *typed]
    instances = cuda_text.template_instances(code) if instantiate else ""
    if instances:
        source += f"\n{instances}\n"
        notes.append(INSTANTIATED_NOTE)
    return source, notes


def torch_included(code: str) -> bool:
    """Whether the code includes torch's, ATen's, c10's or pybind11's headers."""
    return _TORCH_INCLUDE.search(code) is not None


def with_torch_types(source: str) -> tuple[str, list[str]]:
    """Device code that torch's headers were left out of, with what they gave it where it uses that:
    torch's names for the 16-bit types, or those types without their CUDA headers; and a note."""
    if source.startswith(TORCH_TYPES_PRELUDE):
        return source, []
    if _TORCH_TYPES.search(source):
        return TORCH_TYPES_PRELUDE + source, ["mapped at::Half/at::BFloat16 to __half/__nv_bfloat16"]
    if _SIXTEEN_BIT.search(source) and not _SIXTEEN_BIT_HEADER.search(source):
        return TORCH_TYPES_PRELUDE + source, ["included cuda_fp16.h and cuda_bf16.h, as torch's headers do"]
    return source, []


INSTANTIATED_NOTE = "template kernels instantiated as the torch host code launched them (scalar_t read as float)"


def _chunk_label(head: str) -> str:
    name = re.search(r"([A-Za-z_]\w*)\s*\(", head)
    return name.group(1) if name else head.strip().split("\n")[0][:40]


def _top_level_chunks(code: str) -> list[str]:
    """Split C++ source into top-level statements/definitions, skipping comments, strings and preprocessor lines.

    A chunk ends at a `;` or a closing `}` at brace depth 0 (a `}` followed by `;` keeps the `;`).
    """
    chunks: list[str] = []
    depth = 0
    start = 0
    index = 0
    length = len(code)
    while index < length:
        ch = code[index]
        if code.startswith("//", index):
            index = _end_of_line(code, index)
            continue
        if code.startswith("/*", index):
            end = code.find("*/", index + 2)
            index = length if end < 0 else end + 2
            continue
        if ch == "#" and code[code.rfind("\n", 0, index) + 1 : index].strip() == "":
            index = _end_of_directive(code, index)
            if depth == 0:  # a directive is a chunk of its own
                chunks.append(code[start:index])
                start = index
            continue
        if ch in "\"'":
            index = _end_of_literal(code, index)
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                end = index + 1
                following = code[end:].lstrip(" \t")
                if following.startswith(";"):
                    end = len(code) - len(following) + 1
                chunks.append(code[start:end])
                start = index = end
                continue
        elif ch == ";" and depth == 0:
            chunks.append(code[start : index + 1])
            start = index + 1
        index += 1
    chunks.append(code[start:])
    return chunks


def _end_of_line(code: str, index: int) -> int:
    end = code.find("\n", index)
    return len(code) if end < 0 else end


def _end_of_directive(code: str, index: int) -> int:
    while True:
        end = _end_of_line(code, index)
        if end >= len(code) or not code[:end].rstrip(" \t\r").endswith("\\"):
            return end
        index = end + 1


def _end_of_literal(code: str, index: int) -> int:
    quote = code[index]
    index += 1
    while index < len(code) and code[index] != quote and code[index] != "\n":
        index += 2 if code[index] == "\\" else 1
    return index + 1


# --- compilers --------------------------------------------------------------------------


def cuda_core_available() -> bool:
    """Whether the NVRTC path can run; checked without importing cuda.core here."""
    try:
        return importlib.util.find_spec("cuda.core") is not None
    except (ImportError, ValueError):
        return False


@functools.lru_cache(maxsize=1)
def nvcc_path() -> str | None:
    candidates = [shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


@functools.lru_cache(maxsize=1)
def nvcc_label() -> str:
    """`nvcc 13.0`, from `nvcc --version`."""
    try:
        version = run_tool([nvcc_path() or "nvcc", "--version"], 10).stdout
    except (OSError, ToolTimeout):
        return "nvcc"
    match = re.search(r"release (\d+\.\d+)", version)
    return f"nvcc {match.group(1)}" if match else "nvcc"


def target_arch(arch: str, code: str) -> str:
    """sm_90 → sm_90a when the source has inline PTX only the arch-specific target accepts."""
    if arch in ("sm_90", "sm_100") and ARCH_SPECIFIC_PTX.search(code):
        return arch + "a"
    return arch


def compile_cuda(code: str, arch: str, timeout_s: float = DEFAULT_TIMEOUT_S, nvrtc: bool = True) -> CompileReport:
    """Compile to a cubin for `arch` (e.g. "sm_90"): NVRTC first when available (unless `nvrtc` is
    False), nvcc as fallback. Where the instantiations of template kernels break the compile, the
    source is compiled without them."""
    source, notes = device_source(code)
    report = _compiled(source, notes, arch, timeout_s, nvrtc)
    if report.error and INSTANTIATED_NOTE in notes:
        report = _compiled(*device_source(code, instantiate=False), arch, timeout_s, nvrtc)
    return report


def built_for_launch(code: str, kernel: str, arch: str, timeout_s: float) -> tuple[CompileReport, dict[str, str]]:
    """The file built by nvcc, as its author builds it, to launch `kernel`, and the compiled symbols
    that name means (symbols_named). A template kernel named with its arguments (`scale<float, 2>`)
    is instantiated there: taking its address in host code makes nvcc do so, as a launch would."""
    instance = f"\n[[maybe_unused]] static auto kernelcast_instance = &{kernel};\n" if "<" in kernel else ""
    report = compile_cuda(code + instance, arch, timeout_s, nvrtc=False)
    return report, ({} if report.error else symbols_named(kernel, list(report.functions)))


def _compiled(source: str, notes: list[str], arch: str, timeout_s: float, nvrtc: bool) -> CompileReport:
    arch = target_arch(arch, source)
    attempts: list[CompileReport] = []
    with tempfile.TemporaryDirectory(prefix="kernelcast-cuda-") as workdir:
        (Path(workdir) / "kernel.cu").write_text(source)
        if nvrtc and cuda_core_available():
            attempts.append(_compile_in_worker(workdir, arch, timeout_s))
        if (not attempts or attempts[-1].error) and nvcc_path():
            attempts.append(_compile_with_nvcc(workdir, arch, timeout_s))
    if not attempts:
        return CompileReport(compiler="none", error=NO_CUDA_COMPILER)
    report = attempts[-1]
    if len(attempts) > 1 and report.error is None:
        report.notes.append(f"NVRTC rejected the file, used {report.compiler}: {first_error_line(attempts[0].error)}")
    report.notes[:0] = notes
    if arch.endswith("a"):
        report.notes.append(f"compiled for {arch} (arch-specific PTX in source)")
    return report


def _compile_with_nvcc(workdir: str, arch: str, timeout_s: float) -> CompileReport:
    argv = [nvcc_path() or "nvcc", "-cubin", f"-arch={arch}", "-Xptxas", "-v", "-o", "kernel.cubin", "kernel.cu"]
    return _timed_compile(argv, workdir, timeout_s, nvcc_label(), log_of=lambda result: result.stdout + result.stderr)


def _compile_in_worker(workdir: str, arch: str, timeout_s: float) -> CompileReport:
    argv = [sys.executable, "-m", "kernelcast.kernels_runtime.cuda_facts", workdir, arch]

    def log_of(result: subprocess.CompletedProcess[str]) -> str:
        answer = Path(workdir) / "nvrtc.json"
        if not answer.exists():
            raise RuntimeError(result.stderr.strip()[-2000:] or f"NVRTC worker exited {result.returncode}")
        data = json.loads(answer.read_text())
        if data["error"]:
            raise RuntimeError(data["error"])
        return data["log"]

    return _timed_compile(argv, workdir, timeout_s, NVRTC_COMPILER, log_of)


def _timed_compile(argv: list[str], workdir: str, timeout_s: float, compiler: str, log_of) -> CompileReport:
    """Run one compiler, then read its ptxas report and cubin from `workdir`."""
    started = time.perf_counter()
    report = CompileReport(compiler=compiler)
    try:
        result = run_tool(argv, timeout_s, cwd=workdir)
        log = log_of(result)
        if result.returncode != 0:
            raise RuntimeError(log)
    except (OSError, ToolTimeout, RuntimeError) as problem:
        report.error = readable_compile_error(str(problem))
    else:
        report.functions = parse_ptxas_report(log)
        cubin = Path(workdir) / "kernel.cubin"
        report.cubins = [cubin.read_bytes()] if cubin.exists() else []
    report.compile_ms = (time.perf_counter() - started) * 1000
    return report


def readable_compile_error(log: str) -> str:
    """The first lines that say what is wrong, with temp paths shortened to the file name."""
    lines = [re.sub(r"\S*/kernelcast-[\w-]+/", "", line) for line in log.strip().splitlines()]
    # From the first error line: the line above it is often the caret of a warning before it.
    errors = [i for i, line in enumerate(lines) if re.search(r"\berror\b", line, re.IGNORECASE)]
    first = errors[0] if errors else 0
    return "\n".join(lines[first : first + ERROR_LINES]) or "compiler failed without a message"


def first_error_line(error: str | None) -> str:
    """The line of a compile log that says what is wrong, for one-line messages (hover, notes)."""
    lines = [line for line in (error or "").splitlines() if "error" in line.lower()]
    return (lines or [error or ""])[0].strip()[:120]


def cuda_include_dirs() -> list[str]:
    """Folders holding cuda_fp16.h & co. for NVRTC, which searches none by itself: the
    toolkit's, then those of pip's nvidia-* and cupy wheels (GPU machines often have only these)."""
    import glob
    import site

    roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    found = [os.path.join(root, "include") for root in roots if root]
    for packages in [*site.getsitepackages(), site.getusersitepackages(), *sys.path]:
        found += sorted(glob.glob(os.path.join(packages, "nvidia", "*", "include")))
        found += sorted(glob.glob(os.path.join(packages, "cupy", "_core", "include", "cupy", "_cuda", "cuda-*")))
    unique: list[str] = []
    for folder in found:
        if os.path.isfile(os.path.join(folder, "cuda_fp16.h")) and folder not in unique:
            unique.append(folder)
    return unique


def _nvrtc_worker(workdir: str, arch: str) -> None:
    """Runs in the child interpreter: NVRTC-compile kernel.cu, write kernel.cubin and nvrtc.json."""
    import io

    answer: dict[str, str | None] = {"log": "", "error": None}
    try:
        try:
            from cuda.core import Program, ProgramOptions
        except ImportError:
            from cuda.core.experimental import Program, ProgramOptions
        source = (Path(workdir) / "kernel.cu").read_text()
        options = ProgramOptions(name="kernel.cu", arch=arch, ptxas_options="-v", include_path=cuda_include_dirs() or None)
        program = Program(source, "c++", options=options)
        logs = io.StringIO()
        compiled = program.compile("cubin", logs=logs)
        (Path(workdir) / "kernel.cubin").write_bytes(bytes(compiled.code))
        answer["log"] = logs.getvalue()
    except Exception as problem:  # any NVRTC failure is reported to the parent as text
        answer["error"] = str(problem)
    (Path(workdir) / "nvrtc.json").write_text(json.dumps(answer))


if __name__ == "__main__":
    _nvrtc_worker(sys.argv[1], sys.argv[2])
