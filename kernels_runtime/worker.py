"""The process that owns one GPU: loads user kernels, checks them, times them.

User code runs only here, never in the editor process: an illegal address poisons a CUDA
context for good and a spinning kernel never returns, so the parent (measure.py) must be
able to kill this process and start another. Protocol: JSON lines in on `--request-fd`,
JSON lines out on `--result-fd`; stdout is pointed at stderr (the log), so a kernel that
prints cannot corrupt the results.

Out-messages: {"type": "ready", "gpu": bool, "reason": str}; for a request `id`:
{"type": "progress", "message", "percent", "running", "deadline_s"} — the parent kills
the worker when the next message is later than `deadline_s` — and one
{"type": "result", "measurement": {...}} or {"type": "result", "failure": {kind, message, fatal}}.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import inspect
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast import paths
from kernelcast.kernels_runtime import timing
from kernelcast.kernels_runtime.source.cuda_text import device_part
from kernelcast.kernels_runtime.source.launch_spec import FLOAT_DTYPES, TRITON_LAUNCH_OPTIONS, LaunchSpec, LaunchSpecError

# Seed for the re-check after timing: fresh inputs the correctness seeds did not see.
RECHECK_SEED = 44
INT_POISON = 0x5A
# Each array of a launch sits between two guard zones filled with GUARD_BYTE: a kernel that
# writes a little past an array (no fault: the memory is ours) is caught instead of timed.
GUARD_BYTES = 2 << 20  # a large page: the arrays keep the alignment a plain allocation has
GUARD_BYTE = 0xA5


def cache_dir() -> Path:
    """kernelcast's per-user state folder (0700): user modules, torch extension builds, worker logs."""
    return paths.state_home()


class Failure(Exception):
    """A measurement that cannot go on; `fatal` means this process's CUDA context is gone."""

    def __init__(self, kind: str, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.fatal = fatal


class Channel:
    """The result pipe, plus the heartbeat that tells the parent how long to wait.

    Phase "load" (exec, compile, first JIT call) may take up to the load timeout; phase
    "run" allows one kernel launch (or one ~50 ms batch of them) up to the kernel timeout.
    """

    def __init__(self, fd: int) -> None:
        self.stream = os.fdopen(fd, "w", buffering=1)
        self.request_id: int | None = None
        self.deadlines = {"load": 600.0, "run": 11.0}
        self.last_sent = 0.0
        self.last_running: str | None = None
        self.phase = "load"

    def send(self, message: dict[str, Any]) -> None:
        if self.request_id is not None:
            message = {"id": self.request_id, **message}
        self.stream.write(json.dumps(message) + "\n")
        self.stream.flush()
        self.last_sent = time.monotonic()

    def progress(self, message: str | None, percent: float | None, running: str | None, phase: str = "run") -> None:
        self.last_running, self.phase = running, phase
        self.send(
            {
                "type": "progress",
                "message": message,
                "percent": percent,
                "running": running,
                "phase": phase,
                "deadline_s": self.deadlines[phase],
            }
        )

    def heartbeat(self, running: str) -> None:
        """Before each launch or batch; sent at most twice a second unless the side changes."""
        if running != self.last_running or time.monotonic() - self.last_sent >= 0.5:
            self.progress(None, None, running)


# --- the GPU, as far as torch sees it ------------------------------------------------------


def probe_gpu() -> tuple[Any, str]:
    """torch with a usable CUDA device, or None and why not (said to the user as is)."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed in the Python that runs kernelcast (it allocates and times on the GPU): pip install torch"
    if not torch.cuda.is_available():
        return None, "torch sees no CUDA GPU (driver missing, CUDA_VISIBLE_DEVICES empty, or a CPU-only torch build)"
    torch.cuda.init()
    return torch, ""


TORCH_DTYPE_NAMES = {
    "f32": "float32",
    "f16": "float16",
    "bf16": "bfloat16",
    "f64": "float64",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "i8": "int8",
    "bool": "bool",
}


def dtype_name(torch: Any, dtype: Any) -> str:
    for short, long in TORCH_DTYPE_NAMES.items():
        if getattr(torch, long) == dtype:
            return short
    return str(dtype).replace("torch.", "")


def to_numpy(torch: Any, tensor: Any) -> np.ndarray:
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.cpu().numpy()


def make_buffers(torch: Any, spec: LaunchSpec, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fresh random inputs (never zeros) and poisoned outputs, each inside guard zones; equal
    seeds give equal inputs. Returns the arrays and, by name, their whole guarded allocations."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    buffers, guarded = {}, {}
    for arg in spec.args:
        if not arg.is_array:
            continue
        dtype = getattr(torch, TORCH_DTYPE_NAMES[arg.dtype])
        guard = GUARD_BYTES // torch.empty(0, dtype=dtype).element_size()
        whole = torch.empty(math.prod(arg.shape) + 2 * guard, dtype=dtype, device="cuda")
        whole.view(torch.uint8).fill_(GUARD_BYTE)
        array = whole[guard : whole.numel() - guard].view(arg.shape)
        if arg.is_output:
            array.fill_(float("nan") if arg.dtype in FLOAT_DTYPES else INT_POISON)
        elif arg.init == "randn":
            torch.randn(arg.shape, generator=generator, dtype=dtype, device="cuda", out=array)
        elif arg.init == "rand":
            torch.rand(arg.shape, generator=generator, dtype=dtype, device="cuda", out=array)
        else:
            low, high = arg.init_range
            array.copy_(torch.randint(low, high, arg.shape, generator=generator, dtype=torch.int64, device="cuda"))
        buffers[arg.name], guarded[arg.name] = array, whole
    return buffers, guarded


def stray_writes(torch: Any, spec: LaunchSpec, buffers: dict[str, Any], guarded: dict[str, Any], inputs: dict[str, Any]) -> str | None:
    """Where a run wrote outside its outputs: a changed guard zone or input, else None.

    `inputs` are the input arrays' checksums from before the run (checksums()).
    """
    for arg in spec.args:
        if not arg.is_array:
            continue
        whole, array = guarded[arg.name].view(torch.uint8), buffers[arg.name]
        guard = (whole.numel() - array.numel() * array.element_size()) // 2
        for side, zone in (("before", whole[:guard]), ("after", whole[whole.numel() - guard :])):
            changed = int((zone != GUARD_BYTE).sum())
            if changed:
                return f"wrote outside its arrays: {changed} bytes in the {guard >> 20} MiB {side} '{arg.name}' changed"
    changed_inputs = [name for name, total in checksums(torch, spec, buffers).items() if total != inputs[name]]
    if changed_inputs:
        return f"wrote to its input {', '.join(repr(n) for n in changed_inputs)}; mark arrays a kernel writes :out"
    return None


def checksums(torch: Any, spec: LaunchSpec, buffers: dict[str, Any]) -> dict[str, int]:
    """A byte sum of each input array, to notice a kernel that writes where it only should read."""
    return {
        arg.name: int(torch.sum(buffers[arg.name].view(torch.uint8), dtype=torch.int64))
        for arg in spec.args
        if arg.is_array and not arg.is_output
    }


# --- loading one side -----------------------------------------------------------------------


class Side:
    """One loaded variant: `prepare(seed)` gives a zero-argument launch on fresh inputs."""

    label: str
    # Triton and torch compile on the first call: it may take the load timeout, not the kernel's.
    compiles_on_first_call = True
    # How it was built where that is news: nvcc for a file NVRTC could not compile.
    built_by: str | None = None

    def prepare(self, torch: Any, seed: int) -> Callable[[], Any]:
        raise NotImplementedError

    def outputs(self, torch: Any, result: Any) -> dict[str, tuple[Any, str]]:
        """Output tensors (on the GPU) and their dtypes by name."""
        raise NotImplementedError

    def stray_writes(self, torch: Any) -> str | None:
        """After a checked run: where it wrote outside its outputs, if anywhere."""
        return None


class KernelSide(Side):
    """A CUDA or Triton kernel launched by its pragma."""

    def __init__(self, label: str, spec: LaunchSpec, launch: Callable[[list[Any]], None]) -> None:
        self.label, self.spec, self.launch = label, spec, launch
        self.compiles_on_first_call = spec.language != "cuda"  # NVRTC compiled it at load
        self.buffers: dict[str, Any] = {}
        self.guarded: dict[str, Any] = {}
        self.input_sums: dict[str, int] = {}

    def prepare(self, torch: Any, seed: int) -> Callable[[], Any]:
        self.buffers, self.guarded = make_buffers(torch, self.spec, seed)
        self.input_sums = checksums(torch, self.spec, self.buffers)
        values = [self.buffers[arg.name] if arg.is_array else arg.value for arg in self.spec.args]
        return lambda: self.launch(values)

    def outputs(self, torch: Any, result: Any) -> dict[str, tuple[Any, str]]:
        return {arg.name: (self.buffers[arg.name], arg.dtype) for arg in self.spec.args if arg.is_output}

    def stray_writes(self, torch: Any) -> str | None:
        return stray_writes(torch, self.spec, self.buffers, self.guarded, self.input_sums)


# KernelBench builds Model and ModelNew each right after set_seed(42) (src/eval.py,
# eval_kernel_against_ref), so that layers both declare alike get equal weights.
MODEL_SEED = 42


class ModelInputs:
    """get_inputs() of one seed, kept on the GPU; each side gets its own copy, so a model that
    changes its inputs in place cannot change the other's.

    The factories in get_inputs() run on the GPU (torch.device("cuda") as the default device):
    KernelBench draws on the CPU, where 1.6 billion random floats take seconds per seed; the
    values differ from KernelBench's, their distribution does not, and both sides get the same.
    A get_inputs() that fails there (e.g. it calls .numpy()) runs on the CPU instead.
    """

    def __init__(self, get_inputs: Callable[[], list[Any]], channel: Channel) -> None:
        self.get_inputs, self.channel = get_inputs, channel
        self.seed: int | None = None
        self.pristine: list[Any] = []

    def copy_for(self, torch: Any, seed: int) -> list[Any]:
        if seed != self.seed:
            resume = (self.channel.last_running, self.channel.phase)
            self.pristine, self.seed = [], None  # the old seed's tensors go before the new ones come
            # User code, not a kernel: it gets the load timeout.
            self.channel.progress(f"making inputs for seed {seed} (get_inputs())", None, self.channel.last_running, "load")
            self.pristine = [value.cuda() if hasattr(value, "cuda") else value for value in self.draw(torch, seed)]
            self.seed = seed
            self.channel.progress(None, None, *resume)
        return [value.clone() if hasattr(value, "clone") else value for value in self.pristine]

    def draw(self, torch: Any, seed: int) -> list[Any]:
        torch.manual_seed(seed)
        try:
            with torch.device("cuda"):
                return list(self.get_inputs())
        except Exception:
            torch.manual_seed(seed)
            return list(self.get_inputs())


class ModelSide(Side):
    """A KernelBench model on inputs from get_inputs(), built from MODEL_SEED like the other side."""

    def __init__(self, label: str, model_class: Any, init_inputs: list[Any], inputs: ModelInputs | None) -> None:
        self.label, self.model_class, self.init_inputs, self.inputs = label, model_class, init_inputs, inputs
        self.model: Any = None

    def build(self, torch: Any) -> None:
        # Left in training mode, as KernelBench leaves both models (batch norm on batch statistics);
        # the runs are under torch.no_grad().
        torch.manual_seed(MODEL_SEED)
        self.model = self.model_class(*self.init_inputs).cuda()

    def prepare(self, torch: Any, seed: int) -> Callable[[], Any]:
        inputs = self.inputs.copy_for(torch, seed)

        def run() -> Any:
            with torch.no_grad():
                return self.model(*inputs)

        return run

    def outputs(self, torch: Any, result: Any) -> dict[str, tuple[Any, str]]:
        tensors = list(result) if isinstance(result, (tuple, list)) else [result]
        names = ["out"] if len(tensors) == 1 else [f"output[{i}]" for i in range(len(tensors))]
        for name, tensor in zip(names, tensors):
            if not hasattr(tensor, "dtype"):
                raise Failure("wrong", f"wrong results: {self.label} returned {type(tensor).__name__} as {name}, not a tensor")
        return {name: (tensor.detach(), dtype_name(torch, tensor.dtype)) for name, tensor in zip(names, tensors)}


# Parameters laid out differently cannot be compared value by value: initialisation may or may not
# explain a difference in the outputs, so such a file is judged on its outputs alone.
SHAPES_DIFFER = "ModelNew's parameters differ in shape from Model's"


def parameter_difference(reference: dict[str, Any], candidate: dict[str, Any], seed: int = MODEL_SEED) -> str | None:
    """How ModelNew's parameters and buffers differ from Model's after both were built from `seed`, or None.

    Arrays (torch tensors or numpy) are matched by name, then what is left by shape in order.
    """
    if not reference and not candidate:
        return None
    shapes = {
        label: {name: tuple(value.shape) for name, value in arrays.items()}
        for label, arrays in (("Model", reference), ("ModelNew", candidate))
    }
    if sorted(shapes["Model"].values()) != sorted(shapes["ModelNew"].values()):
        listed = {label: ", ".join(f"{name} {list(shape)}" for name, shape in named.items()) or "none" for label, named in shapes.items()}
        return f"{SHAPES_DIFFER}: Model has {listed['Model']}; ModelNew has {listed['ModelNew']}"
    pairs = [(name, name) for name in reference if name in candidate and shapes["Model"][name] == shapes["ModelNew"][name]]
    left = [name for name in candidate if name not in dict(pairs).values()]
    for name in reference:
        if name not in dict(pairs):
            match = next(other for other in left if shapes["ModelNew"][other] == shapes["Model"][name])
            left.remove(match)
            pairs.append((name, match))
    differing = []
    for ours, theirs in pairs:
        a, b = reference[ours], candidate[theirs]
        gap = float(abs(a.reshape(-1) * 1.0 - b.reshape(-1) * 1.0).max()) if a.reshape(-1).shape[0] else 0.0
        if gap > 0.0:
            differing.append(
                f"{theirs} {list(b.shape)} differs from {ours} by up to {gap:.2g}"
                if ours != theirs
                else f"{ours} {list(b.shape)} differs by up to {gap:.2g}"
            )
    if not differing:
        return None
    more = f" and {len(differing) - 3} more" if len(differing) > 3 else ""
    return (
        f"ModelNew's parameters differ from Model's although both were built right after torch.manual_seed({seed}), "
        f"as KernelBench builds them: {'; '.join(differing[:3])}{more} (ModelNew initialises them its own way)"
    )


def import_user_module(code: str) -> Any:
    """Import file text as a module from the cache, so Triton and inspect can read its source."""
    digest = hashlib.sha256(code.encode()).hexdigest()[:16]
    name = f"kernelcast_user_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    path = cache_dir() / "modules" / f"{name}.py"
    path.parent.mkdir(exist_ok=True)
    if not path.exists():
        # Written whole under a temporary name, then renamed: processes importing the same
        # code at once read a half-written file otherwise (seen as "no attribute" errors).
        partial = path.with_name(f"{name}.{os.getpid()}.tmp")
        partial.write_text(code)
        os.replace(partial, path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_cuda(label: str, code: str, spec: LaunchSpec, torch: Any) -> Side:
    """Compile with NVRTC through cupy (nvcc where NVRTC cannot); launch on the default stream that torch also uses."""
    try:
        import cupy
    except ImportError:
        raise Failure("compile", "measuring .cu kernels needs cupy: pip install cupy-cuda12x (or cupy-cuda13x)") from None
    from cupy.cuda.compiler import CompileException

    # extern "C" kernels keep their names; C++ ones are found through NVRTC's lowered names.
    unmangled = re.search(r'extern\s+"C"[^;{]*\b' + re.escape(spec.kernel) + r"\s*\(", code)
    built_by = None
    try:
        # A whole program's host part (main, stdio.h) is not NVRTC's to compile: the kernels are.
        module = cupy.RawModule(code=device_part(code), options=("-std=c++17",), name_expressions=None if unmangled else [spec.kernel])
        kernel = module.get_function(spec.kernel)
    except CompileException as error:
        kernel, built_by = built_by_nvcc(label, code, spec, cupy, str(error))
    if spec.smem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = spec.smem
    scalar_types = {
        "f32": np.float32,
        "f16": np.float16,
        "f64": np.float64,
        "i32": np.int32,
        "i64": np.int64,
        "u8": np.uint8,
        "i8": np.int8,
        "bool": np.bool_,
    }
    for arg in spec.args:
        if not arg.is_array and arg.dtype not in scalar_types:
            raise Failure("no-launch-spec", f"{arg.dtype} scalars cannot be passed to a CUDA launch; use f32 for '{arg.name}'")

    def launch(values: list[Any]) -> None:
        args = [np.uint64(value.data_ptr()) if arg.is_array else scalar_types[arg.dtype](value) for arg, value in zip(spec.args, values)]
        kernel(spec.grid, spec.block, tuple(args), shared_mem=spec.smem)

    side = KernelSide(label, spec, launch)
    side.built_by = built_by
    return side


# nvcc on a file of cub or many templates takes minutes of a core, not the 30 s a facts compile gets.
NVCC_BUILD_TIMEOUT_S = 180.0


def built_by_nvcc(label: str, code: str, spec: LaunchSpec, cupy: Any, nvrtc_error: str) -> tuple[Any, str]:
    """The kernel built as its author builds the file, by nvcc, and how it was built: NVRTC opens
    none of the C/C++ standard headers (cstdint, cfloat), nor mma.h, cub or thrust."""
    from kernelcast.kernels_runtime.cuda_facts import built_for_launch, first_error_line, kernel_keys, nvcc_path

    # cupy compiles a copy in a temporary folder; its lines are the file's own.
    nvrtc_error = re.sub(r"(?m)^\S+\.cu\((\d+)\):\s*", r"line \1: ", nvrtc_error)
    rejected = f"{label} does not compile (NVRTC):\n{_first_lines(nvrtc_error, 12)}"
    if nvcc_path() is None:
        raise Failure("compile", f"{rejected}\n(with the CUDA toolkit's nvcc installed, files NVRTC cannot compile are built by nvcc)")
    report, symbols = built_for_launch(code, spec.kernel, f"sm_{cupy.cuda.Device().compute_capability}", NVCC_BUILD_TIMEOUT_S)
    if report.error or not report.cubins:
        raise Failure("compile", f"{rejected}\nnor with {report.compiler}:\n{report.error or 'no cubin written'}")
    if len(symbols) != 1:
        built = ", ".join(sorted(symbols.values() or kernel_keys(list(report.functions)).values())) or "none"
        raise Failure(
            "no-launch-spec",
            f"{label}: '{spec.kernel}' names {len(symbols) or 'no'} compiled kernel(s) (built: {built});"
            " name one with kernel= in the launch pragma",
        )
    with tempfile.TemporaryDirectory(prefix="kernelcast-cubin-") as folder:
        cubin = Path(folder) / "kernel.cubin"
        cubin.write_bytes(report.cubins[0])
        kernel = cupy.RawModule(path=str(cubin)).get_function(next(iter(symbols)))
        kernel.attributes  # noqa: B018 - loads the module while its file is there
    return kernel, f"built by {report.compiler}: NVRTC could not ({first_error_line(nvrtc_error)})"


def load_triton(label: str, code: str, spec: LaunchSpec) -> Side:
    module = import_user_module(code)
    kernel = getattr(module, spec.kernel or "", None)
    if kernel is None:
        raise Failure("compile", f"{label}: no function named '{spec.kernel}' in the file")
    parameters = set(getattr(kernel, "arg_names", []) or [])
    keywords = {name: value for name, value in spec.options.items() if name in parameters or name in TRITON_LAUNCH_OPTIONS}

    def launch(values: list[Any]) -> None:
        kernel[spec.grid](*values, **keywords)

    return KernelSide(label, spec, launch)


# Where the user keeps torch's extension builds, if they say so; kernelcast's state folder otherwise.
_USER_EXTENSIONS_DIR = os.environ.get("TORCH_EXTENSIONS_DIR")
# What load_inline's arguments may differ in without changing what is built.
_NOT_BUILT = ("name", "build_directory", "verbose", "keep_intermediates")


def extensions_root() -> Path:
    return Path(_USER_EXTENSIONS_DIR) if _USER_EXTENSIONS_DIR else cache_dir() / "torch_extensions"


# torch's own marker of a build in progress (cpp_extension's FileBaton), and ours beside it.
TORCH_BUILD_LOCK = "lock"
BUILDER_LOCK = ".kernelcast-builder"


@contextlib.contextmanager
def _sole_builder(folder: Path) -> Iterator[None]:
    """Held while this process builds in `folder`, one of kernelcast's own build folders.

    torch marks a build with a `lock` file that a killed build leaves behind (a load limit
    reached, a worker killed), and every later load of that extension then waits on it for ever.
    An flock dies with its process: whoever holds ours is alive, so a `lock` found while holding
    it was left by a build that died, and goes."""
    import fcntl

    with open(folder / BUILDER_LOCK, "a") as marker:
        fcntl.flock(marker, fcntl.LOCK_EX)
        try:
            (folder / TORCH_BUILD_LOCK).unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(marker, fcntl.LOCK_UN)


def with_own_extension_name(load_inline: Callable[..., Any]) -> Callable[..., Any]:
    """load_inline giving each distinct extension a name and a build folder of its own.

    LLM-written files often call theirs `matmul` or `l2norm`. torch builds a second extension of
    a name already loaded in the process as `name_v1`, from scratch, although it was built in its
    folder already (ahead of time, or by an earlier worker); and one folder per name would have two
    files rebuild over each other. The name gets the digest of what is built, so equal sources
    share one build and different ones never meet. A `build_directory` the file gives is kept, and
    left to torch's own lock (another program may be building there)."""
    signature = inspect.signature(load_inline)

    def load_own(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        built = {key: value for key, value in bound.arguments.items() if key not in _NOT_BUILT}
        digest = hashlib.sha256(repr(sorted(built.items())).encode()).hexdigest()[:12]
        bound.arguments["name"] = f"{bound.arguments['name']}_{digest}"
        if bound.arguments.get("build_directory"):
            return load_inline(*bound.args, **bound.kwargs)
        folder = extensions_root() / bound.arguments["name"]
        folder.mkdir(parents=True, exist_ok=True)
        bound.arguments["build_directory"] = str(folder)
        with _sole_builder(folder):
            return load_inline(*bound.args, **bound.kwargs)

    load_own.own_extension_name = True  # type: ignore[attr-defined]
    return load_own


def give_extensions_own_names() -> None:
    """Route every load_inline of the files this process loads through `with_own_extension_name`."""
    from torch.utils import cpp_extension

    if not getattr(cpp_extension.load_inline, "own_extension_name", False):
        cpp_extension.load_inline = with_own_extension_name(cpp_extension.load_inline)


def load_kernelbench(label: str, code: str, class_name: str) -> tuple[Any, Any]:
    """The model class and the module it came from."""
    if "load_inline" in code:
        give_extensions_own_names()
    module = import_user_module(code)
    model_class = getattr(module, class_name, None)
    if model_class is None:
        raise Failure("compile", f"{label}: no class named '{class_name}' in the file")
    return model_class, module


def _first_lines(text: str, count: int) -> str:
    return "\n".join(text.strip().splitlines()[:count])


# --- one measurement -----------------------------------------------------------------------


class Measurer:
    """Runs one request: load, check on several seeds, time interleaved, re-check."""

    def __init__(self, channel: Channel, torch: Any, gpu_reason: str, gpu_index: int) -> None:
        self.channel, self.torch, self.gpu_reason, self.gpu_index = channel, torch, gpu_reason, gpu_index
        self.tolerance = timing.Tolerance("strict")
        self.candidate_code = ""
        self.parameters_note: str | None = None
        self.correctness: dict[str, Any] = {}

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        timeouts = request["timeouts"]
        # One second of slack: a kernel that takes exactly the limit still reports in time.
        self.channel.deadlines = {"load": float(timeouts["load_s"]), "run": float(timeouts["kernel_s"]) + 1.0}
        self.tolerance = timing.Tolerance.from_json(request.get("tolerance") or {"rule": "strict"})
        self.candidate_code = request["candidate"]["code"]
        self.parameters_note, self.correctness = None, {}
        sides = self.load_sides(request)
        torch = self.require_gpu()
        watch_triton_compiles(self.channel)
        reference, candidate = sides
        flush_bytes = max(2 * torch.cuda.get_device_properties(0).L2_cache_size, 256 * 2**20)
        for side in sides:
            if isinstance(side, KernelSide):
                side.spec.check_fits(torch.cuda.get_device_properties(0).total_memory, reserved_bytes=flush_bytes)
        if isinstance(candidate, ModelSide):
            self.build_models(torch, reference, candidate)
        clocks_before = clock_state(self.gpu_index)
        self.check(torch, reference, candidate, timing.SEEDS, first_percent=10.0, span=15.0)
        rounds = int(request.get("rounds", 5))
        fns = {side.label: side.prepare(torch, timing.SEEDS[-1]) for side in sides}
        self.channel.progress(f"timing {rounds} interleaved rounds", 25.0, None)
        result = timing.time_pair(
            torch,
            fns["reference"],
            fns["candidate"],
            rounds=rounds,
            on_call=self.channel.heartbeat,
            on_round=lambda done: self.channel.progress(f"timing: round {done}/{rounds} done", 25 + 70 * done / rounds, None),
        )
        del fns
        self.check(torch, reference, candidate, (RECHECK_SEED,), first_percent=95.0, span=5.0, after_timing=True)
        self.channel.progress("reading clocks and GPU properties", 99.0, None, "load")  # NVML and nvidia-smi, not a kernel
        return {
            "timing": result.to_json(),
            "correctness": self.correctness,
            "clocks": {"before": clocks_before, "after": clock_state(self.gpu_index)},
            "built": {side.label: side.built_by for side in sides if side.built_by},
            **self.environment(torch),
        }

    def load_sides(self, request: dict[str, Any]) -> tuple[Side, Side]:
        reference_request, candidate_request = request["reference"], request["candidate"]
        if candidate_request["language"] == "pytorch":
            return self.load_models(reference_request, candidate_request)
        loaded = []
        for label, side_request, percent in (("reference", reference_request, 2.0), ("candidate", candidate_request, 6.0)):
            spec = LaunchSpec.from_json(side_request["spec"])
            self.channel.progress(self.load_message(side_request, label), percent, label, "load")
            if side_request["language"] == "cuda":
                torch = self.require_gpu()
                loaded.append(self.guarded_load(label, lambda: load_cuda(label, side_request["code"], spec, torch)))
            else:
                loaded.append(self.guarded_load(label, lambda: load_triton(label, side_request["code"], spec)))
        return loaded[0], loaded[1]

    def load_models(self, reference_request: dict[str, Any], candidate_request: dict[str, Any]) -> tuple[ModelSide, ModelSide]:
        """Both classes, and get_inputs/get_init_inputs from the reference's file (a ModelNew file often has none)."""
        self.channel.progress(self.load_message(reference_request, "reference"), 2.0, "reference", "load")
        reference_class, reference_module = self.guarded_load(
            "reference", lambda: load_kernelbench("reference", reference_request["code"], reference_request.get("name") or "Model")
        )
        self.channel.progress(self.load_message(candidate_request, "candidate"), 6.0, "candidate", "load")
        candidate_class_name = candidate_request.get("name") or ("ModelNew" if "class ModelNew" in candidate_request["code"] else "Model")
        candidate_class, candidate_module = self.guarded_load(
            "candidate", lambda: load_kernelbench("candidate", candidate_request["code"], candidate_class_name)
        )
        source = next((module for module in (reference_module, candidate_module) if hasattr(module, "get_inputs")), None)
        if source is None:
            raise Failure("no-launch-spec", "KernelBench files need get_inputs() (and get_init_inputs()) in the reference or the candidate")
        torch = self.require_gpu()
        torch.manual_seed(MODEL_SEED)  # as KernelBench seeds before get_init_inputs(); one list for both sides
        init_inputs = self.guarded_load("reference", lambda: list(source.get_init_inputs()) if hasattr(source, "get_init_inputs") else [])
        inputs = ModelInputs(source.get_inputs, self.channel)
        return ModelSide("reference", reference_class, init_inputs, inputs), ModelSide("candidate", candidate_class, init_inputs, inputs)

    def build_models(self, torch: Any, reference: ModelSide, candidate: ModelSide) -> None:
        """Model and ModelNew, each right after the same seed; how their parameters differ, if they do."""
        for side in (reference, candidate):
            self.channel.progress(f"building {side.label}'s model (torch.manual_seed({MODEL_SEED}) first)", 8.0, side.label, "load")
            self.guarded_load(side.label, lambda side=side: side.build(torch))
        arrays = [
            {name: value for name, value in side.model.state_dict().items() if hasattr(value, "shape")} for side in (reference, candidate)
        ]
        self.parameters_note = parameter_difference(*arrays)

    @staticmethod
    def load_message(side_request: dict[str, Any], label: str) -> str:
        if "load_inline" in side_request["code"]:
            where = extensions_root()
            return f"building {label}'s CUDA extension with load_inline (a first build can take a minute; cached under {where})"
        return f"loading {label} ({side_request['language']})"

    @staticmethod
    def guarded_load(label: str, load: Callable[[], Any]) -> Any:
        try:
            return load()
        except Failure:
            raise
        except Exception as error:  # the user's file: syntax errors, imports, build failures
            raise Failure("compile", f"{label} failed to load: {type(error).__name__}: {_first_lines(str(error), 8)}") from None

    def require_gpu(self) -> Any:
        if self.torch is None:
            raise Failure("no-gpu", self.gpu_reason)
        return self.torch

    def check(
        self,
        torch: Any,
        reference: Side,
        candidate: Side,
        seeds: tuple[int, ...],
        first_percent: float,
        span: float,
        after_timing: bool = False,
    ) -> None:
        """Reference and candidate on the same fresh inputs must agree on every output, compared on the GPU."""
        for number, seed in enumerate(seeds):
            percent = first_percent + span * number / len(seeds)
            outputs = {}
            for side in (reference, candidate):
                compiling = number == 0 and not after_timing and side.compiles_on_first_call
                note = " (first call: JIT compile)" if compiling else ""
                self.channel.progress(f"checking {side.label} on seed {seed}{note}", percent, side.label, "load" if compiling else "run")
                fn = side.prepare(torch, seed)
                result = fn()
                torch.cuda.synchronize()
                del fn
                stray = side.stray_writes(torch)
                if stray:  # other allocations of this process may be damaged too: start afresh
                    raise Failure("wrong", f"{side.label} {stray} (seed {seed})", fatal=True)
                outputs[side.label] = side.outputs(torch, result)
                del result
            for name, (expected, dtype) in outputs["reference"].items():
                actual = outputs["candidate"].get(name)
                if actual is None:
                    raise Failure("wrong", f"wrong results: candidate has no output '{name}'")
                when = " after timing" if after_timing else ""
                self.compare_output(torch, name, expected, actual[0], dtype, f"{when} (seed {seed})", percent)
            del outputs

    def compare_output(self, torch: Any, name: str, expected: Any, actual: Any, dtype: str, when: str, percent: float) -> None:
        """One output against the reference's, chunk by chunk on the GPU; raise the reason when they disagree."""
        if tuple(expected.shape) != tuple(actual.shape):
            raise Failure("wrong", f"wrong results: {name} has shape {tuple(actual.shape)}, reference {tuple(expected.shape)}{when}")
        if actual.device != expected.device:
            actual = actual.to(expected.device)
        tolerance = self.tolerance.for_dtype(dtype)
        numel = int(expected.numel())
        size = f" ({numel / 1e9:.2f}e9 elements)" if numel >= 1e8 else ""
        self.channel.progress(f"comparing {name}{size}", percent, None)
        last_sent = [time.monotonic()]

        def on_chunk(done: float) -> None:
            if time.monotonic() - last_sent[0] >= 0.5:
                self.channel.progress(f"comparing {name}{size}: {100 * done:.0f}%", percent, None)
                last_sent[0] = time.monotonic()

        found = timing.compare(torch, expected, actual, tolerance, on_chunk=on_chunk)
        reference_tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
        explanation = timing.precision_explanation(self.candidate_code, found.relative_l2, reference_tf32)
        problem = found.problem(name, tuple(expected.shape), self.tolerance.describe(dtype))
        if problem and self.parameters_note and not self.parameters_note.startswith(SHAPES_DIFFER):
            raise Failure(
                "parameters", f"{self.parameters_note}; so the outputs differ too ({problem.removeprefix('wrong results: ')}{when})"
            )
        if problem and self.parameters_note:
            note = f"; {self.parameters_note}, so initialisation alone cannot be told from a different computation"
            raise Failure("wrong", f"{problem}{when}{note}")
        if problem:
            because = f"; {explanation}" if explanation and not found.unwritten else ""
            raise Failure("wrong", f"{problem}{when}{because}")
        entry = self.correctness.setdefault(name, {"dtype": dtype, "max_abs_err": 0.0, "relative_l2": 0.0})
        entry["max_abs_err"] = max(entry["max_abs_err"], found.max_error)
        entry["relative_l2"] = max(entry["relative_l2"], found.relative_l2)
        entry["tolerance"] = self.tolerance.to_json([dtype])
        if explanation and found.max_error > timing.tolerance_for(dtype):
            entry["note"] = explanation
        if self.parameters_note:
            entry["parameters"] = self.parameters_note

    def environment(self, torch: Any) -> dict[str, Any]:
        from kernelcast.kernels_runtime.hardware import detect_local_gpus

        properties = torch.cuda.get_device_properties(0)
        local = next((gpu for gpu in detect_local_gpus() if gpu.index == self.gpu_index), None)
        versions = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda}
        for name in ("triton", "cupy"):
            module = sys.modules.get(name)
            if module is not None:
                versions[name] = getattr(module, "__version__", "?")
        return {
            "gpu_name": properties.name,
            "gpu_short": local.spec.key.split("-")[0] if local else properties.name.replace("NVIDIA ", ""),
            "gpu_fingerprint": local.spec.fingerprint() if local else None,
            "driver": local.spec.driver if local else None,
            "sm_count": properties.multi_processor_count,
            "l2_bytes": properties.L2_cache_size,
            "memory_bytes": properties.total_memory,
            "versions": versions,
        }


def watch_triton_compiles(channel: Channel) -> None:
    """While Triton compiles a kernel (first call, a new specialisation, each autotune config),
    the parent waits the load timeout, not a kernel's: a JIT compile is not a hang.

    Uses the JIT hooks of Triton >= 3.4 (triton.knobs), once per process, keeping hooks already
    there; older Tritons keep the first-call rule.
    """
    triton = sys.modules.get("triton")
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    if runtime is None or not hasattr(runtime, "jit_post_compile_hook") or getattr(runtime.jit_cache_hook, "kernelcast", False):
        return
    earlier_before, earlier_after = runtime.jit_cache_hook, runtime.jit_post_compile_hook
    resume: list[tuple[str | None, str]] = []

    def before(**hook: Any) -> bool:
        resume.append((channel.last_running, channel.phase))
        function = hook.get("fn")
        name = getattr(function, "name", None) or getattr(getattr(function, "jit_function", None), "__name__", "a kernel")
        channel.progress(f"compiling Triton kernel {name} (a JIT compile: the load timeout applies)", None, channel.last_running, "load")
        return bool(earlier_before and earlier_before(**hook))  # True would skip the compile

    def after(**hook: Any) -> Any:
        if resume:
            channel.progress(None, None, *resume.pop())
        return earlier_after(**hook) if earlier_after else None

    before.kernelcast = True  # type: ignore[attr-defined]
    runtime.jit_cache_hook, runtime.jit_post_compile_hook = before, after


def clock_state(gpu_index: int) -> dict[str, Any]:
    """SM clock and throttle reasons from NVML; clocks are read, never set."""
    try:
        import pynvml
    except ImportError:
        return {"unavailable": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as error:
        return {"unavailable": f"NVML: {error}"}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu_index)
        return {
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "memory_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "throttle_reasons": _throttle_reasons(pynvml, handle),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
        }
    except Exception as error:
        return {"unavailable": f"NVML: {error}"}
    finally:
        pynvml.nvmlShutdown()


def _throttle_reasons(pynvml: Any, handle: Any) -> list[str] | str:
    """Names of the active clock-event (throttle) reasons; NVML renamed them in 12.5."""
    for getter, prefix in (
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlClocksEventReason"),
        ("nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlClocksThrottleReason"),
    ):
        if hasattr(pynvml, getter):
            try:
                mask = getattr(pynvml, getter)(handle)
            except Exception as error:
                return f"unavailable: {error}"
            names = [name for name in dir(pynvml) if name.startswith(prefix) and not name.endswith(("All", "None"))]
            return sorted(
                {name.removeprefix(prefix) for name in names if isinstance(getattr(pynvml, name), int) and mask & getattr(pynvml, name)}
            )
    return "unavailable in this nvidia-ml-py"


def cuda_alive(torch: Any) -> bool:
    """After an error: can this process still use CUDA? (An illegal address is sticky.)"""
    try:
        torch.cuda.synchronize()
        return torch.ones(1, device="cuda").add(1).item() == 2.0
    except Exception:
        return False


def describe_cuda_error(error: BaseException, running: str | None) -> str:
    text = str(error)
    where = f" in {running}" if running else ""
    # cudaErrorIllegalAddress, or cudaErrorInvalidAddressSpace when a wild pointer lands in
    # the shared/local window (seen on the H100 for a write 4 GiB past an output).
    if any(sign in text for sign in ("illegal memory access", "illegal address", "global/shared address space")):
        return f"illegal memory access{where}"
    return f"CUDA error{where}: {_first_lines(text, 3)}"


def handle(channel: Channel, measurer: Measurer, request: dict[str, Any]) -> bool:
    """Answer one request; False when this process must exit (its CUDA context is broken)."""
    try:
        channel.send({"type": "result", "measurement": measurer.run(request)})
        return True
    except Failure as failure:
        channel.send({"type": "result", "failure": {"kind": failure.kind, "message": failure.message, "fatal": failure.fatal}})
        return not failure.fatal
    except KeyboardInterrupt:  # the parent's cancel
        channel.send({"type": "result", "failure": {"kind": "cancelled", "message": "measurement cancelled", "fatal": False}})
        return True
    except LaunchSpecError as error:
        channel.send({"type": "result", "failure": {"kind": "no-launch-spec", "message": str(error), "fatal": False}})
        return True
    except Exception as error:
        torch = measurer.torch
        alive = torch is not None and cuda_alive(torch)
        running = channel.last_running
        kind = "compile" if "Compilation" in type(error).__name__ else "runtime"
        if torch is not None and not alive:
            message = describe_cuda_error(error, running)
        else:
            message = f"{running or 'kernel'} raised {type(error).__name__}: {_first_lines(str(error), 6)}"
        channel.send({"type": "result", "failure": {"kind": kind, "message": message, "fatal": not alive and torch is not None}})
        return alive or torch is None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="kernelcast GPU worker (started by kernelcast.kernels_runtime.measure)")
    parser.add_argument("--request-fd", type=int, required=True)
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--gpu-index", type=int, default=0)
    options = parser.parse_args(argv)
    os.dup2(2, 1)  # user prints go to the log, never into the protocol
    channel = Channel(options.result_fd)
    torch, reason = probe_gpu()
    channel.send({"type": "ready", "gpu": torch is not None, "reason": reason, "pid": os.getpid()})
    measurer = Measurer(channel, torch, reason, options.gpu_index)
    requests = os.fdopen(options.request_fd, "r")
    while True:
        try:
            line = requests.readline()
        except KeyboardInterrupt:  # a cancel that arrived after the result was sent
            continue
        if not line:
            return 0
        request = json.loads(line)
        channel.request_id = request.get("id")
        channel.last_running = None
        keep_going = handle(channel, measurer, request)
        channel.request_id = None
        if keep_going and torch is not None:
            # Blocks a huge measurement cached go back to the driver: the user's other GPU work
            # needs them, and a later kernel's far stray write must fault, not land in them.
            torch.cuda.empty_cache()
        if not keep_going:
            return 3


if __name__ == "__main__":
    sys.exit(main())
