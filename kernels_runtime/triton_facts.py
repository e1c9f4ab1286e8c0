"""Compile Triton kernels offline (no GPU) the way the JIT would, and read ptxas' report.

The user's module is never imported: the `@triton.jit` functions, triton/math imports and
literal module constants are copied by `ast` into a fresh module that a child interpreter
compiles with `triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))`.

Registers and shared memory depend on the JIT's specialization (docs/measure.md): pointers and
ints divisible by 16 get `tt.divisibility=16`, ints equal to 1 become constexprs. Without a
launch spec the argument values are guessed (pointers 16-byte aligned fp32, sizes multiples
of 16, the last stride of each `stride_<t>*` group equal to 1) and the notes say so; what the
body does with a parameter guides the guess (`_pointers_by_use`, `_numeric_constexprs`).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelcast.kernels_runtime.cuda_facts import (
    CompileReport,
    ToolTimeout,
    parse_ptxas_report,
    readable_compile_error,
    run_tool,
)
from kernelcast.kernels_runtime.source.python_ast import parse_python, parse_python_expression
from kernelcast.kernels_runtime.source.triton_text import constexpr_parameters, dotted, imports_of, is_triton_kernel, triton_aliases
from kernelcast.paths import install_command

NO_TRITON = f"install triton for Triton facts ({install_command('triton')})"
DEFAULT_NUM_WARPS = 4
DEFAULT_NUM_STAGES = 3
POINTER_NAMES = frozenset(
    {
        "x",
        "y",
        "z",
        "a",
        "b",
        "c",
        "out",
        "output",
        "input",
        "inp",
        "src",
        "dst",
        "w",
        "weight",
        "bias",
        "q",
        "k",
        "v",
        "o",
        "result",
        "res",
        "mask",
        "grad",
        "dy",
        "dx",
    }
)
FLOAT_NAMES = frozenset(
    {
        "eps",
        "epsilon",
        "scale",
        "sm_scale",
        "alpha",
        "beta",
        "momentum",
        "p",
        "dropout_p",
        "temperature",
        "negative_slope",
        "lr",
        "weight_decay",
        "softcap",
    }
)
WORKER_ANSWER = "triton.json"


@dataclass
class TritonKernel:
    """A `@triton.jit` function as found in the source, plus what its decorators say."""

    name: str
    params: list[str]
    constexpr_params: set[str]
    defaults: dict[str, Any]
    config_constexprs: dict[str, Any]  # first triton.Config of an @triton.autotune, if literal
    config_num_warps: int | None = None
    config_num_stages: int | None = None
    # Constexprs the body computes with (not modes it tests): a guess of None breaks the compile.
    numeric_constexprs: set[str] = field(default_factory=set)
    # Parameters without a pointer's name that the body loads or stores through (`tl.load(table + i)`),
    # with the pointer type guessed for each.
    pointers_by_use: dict[str, str] = field(default_factory=dict)


def triton_available() -> bool:
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def _literal(node: ast.AST) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _first_autotune_config(function: ast.FunctionDef) -> tuple[dict[str, Any], int | None, int | None]:
    """Constexprs, num_warps and num_stages of the first literal `triton.Config` in @triton.autotune."""
    for decorator in function.decorator_list:
        if not (isinstance(decorator, ast.Call) and dotted(decorator).endswith("autotune")):
            continue
        configs = next((kw.value for kw in decorator.keywords if kw.arg == "configs"), None)
        if configs is None and decorator.args:
            configs = decorator.args[0]
        if not isinstance(configs, (ast.List, ast.Tuple)) or not configs.elts:
            continue
        config = configs.elts[0]
        if not isinstance(config, ast.Call) or not config.args:
            continue
        ok, kwargs = _literal(config.args[0])
        options = {kw.arg: _literal(kw.value)[1] for kw in config.keywords}
        return (kwargs if ok and isinstance(kwargs, dict) else {}), options.get("num_warps"), options.get("num_stages")
    return {}, None, None


def _kernel_of(function: ast.FunctionDef) -> TritonKernel:
    arguments = function.args
    params = [a.arg for a in arguments.posonlyargs + arguments.args]
    constexpr = constexpr_parameters(function)
    defaults: dict[str, Any] = {}
    for param, default in zip(params[len(params) - len(arguments.defaults) :], arguments.defaults):
        ok, value = _literal(default)
        if ok:
            defaults[param] = value
    config, num_warps, num_stages = _first_autotune_config(function)
    numeric = _numeric_constexprs(function, constexpr)
    pointers = _pointers_by_use(function, set(params) - constexpr)
    return TritonKernel(function.name, params, constexpr, defaults, config, num_warps, num_stages, numeric, pointers)


def _numeric_constexprs(function: ast.FunctionDef, constexpr: set[str]) -> set[str]:
    """The constexprs the body computes with: an operand of arithmetic or of an ordering, a
    positional argument (`tl.arange(0, C)`, `range(KH)`) or a shape's entry, where a guessed None
    fails the compile. One only tested (`if HAS_BIAS:`), compared for equality (`ACTIVATION == 1`)
    or passed by keyword (`allow_tf32=ALLOW_TF32`) is a mode: None leaves it off, as the JIT's
    default would."""
    numeric: set[str] = set()

    def add(node: ast.AST) -> None:
        if isinstance(node, ast.Name) and node.id in constexpr:
            numeric.add(node.id)

    for node in ast.walk(function):
        if isinstance(node, ast.BinOp):
            add(node.left)
            add(node.right)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            add(node.operand)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops):
            for operand in (node.left, *node.comparators):
                add(operand)
        elif isinstance(node, ast.Call):
            for argument in node.args:
                add(argument)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                add(element)
        elif isinstance(node, ast.AugAssign):
            add(node.value)
    return numeric


def _pointers_by_use(function: ast.FunctionDef, runtime: set[str]) -> dict[str, str]:
    """Run-time parameters that a `tl.load`/`tl.store` address is the sum of, with the locals it
    was summed into followed: where one such parameter stands alone in an address and none there
    has a pointer's name, it is the pointer (`tl.load(lora_indices + batch)`), whatever it is called.
    One whose loaded values go into another address is a table of indices (`*i32`), else `*fp32`."""
    assigned = {
        target.id: node.value
        for node in ast.walk(function)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def summed(node: ast.AST, seen: frozenset[str]) -> set[str]:
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            return summed(node.left, seen) | summed(node.right, seen)
        if isinstance(node, ast.Name) and node.id in runtime:
            return {node.id}
        if isinstance(node, ast.Name) and node.id in assigned and node.id not in seen:
            return summed(assigned[node.id], seen | {node.id})
        return set()

    accesses = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _accesses_memory(node.func.attr):
            address = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "pointer"), None)
            if address is not None:
                accesses.append((node, address))
    in_addresses = {name.id for _, address in accesses for name in ast.walk(address) if isinstance(name, ast.Name)}
    loaded_into = {id(value): name for name, value in assigned.items()}
    pointers: dict[str, str] = {}
    for call, address in accesses:
        candidates = summed(address, frozenset())
        if len(candidates) != 1:
            continue  # none, or a pointer summed with an offset: the name tells which
        (name,) = candidates
        if _guess_type(name).startswith("*"):
            continue  # a pointer by its name already
        if loaded_into.get(id(call)) in in_addresses:
            pointers[name] = "*i32"
        else:
            pointers.setdefault(name, "*fp32")
    return pointers


def _accesses_memory(call: str) -> bool:
    """`tl.load`, `tl.store` and every `tl.atomic_*`, as loop_trips counts them."""
    return call in ("load", "store") or call.startswith("atomic_")


def extract_kernels(code: str) -> tuple[str, dict[str, TritonKernel]]:
    """A self-contained module text with only the jit functions, and the kernels found.

    Kept: triton/math imports, module constants whose value is a literal (or
    `tl.constexpr(literal)`), and every `@triton.jit` function with its decorators reduced to
    `@triton.jit` (autotune/heuristics run at launch, not at compile). Raises SyntaxError.
    """
    tree = parse_python(code)
    aliases = triton_aliases(imports_of(node for node in ast.walk(tree) if isinstance(node, ast.stmt)))
    lines = ["import triton", "import triton.language as tl"]
    kernels: dict[str, TritonKernel] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and _imports_only_triton_or_math(node):
            lines.append(ast.unparse(node))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _is_constant(node.value):
            lines.append(ast.unparse(node))
        elif isinstance(node, ast.FunctionDef) and is_triton_kernel(node, aliases):
            kernels[node.name] = _kernel_of(node)
            node.decorator_list = [parse_python_expression("triton.jit")]
            _make_header_inert(node)
            lines.append(ast.unparse(node))
    return "\n\n".join(lines) + "\n", kernels


def _make_header_inert(function: ast.FunctionDef) -> None:
    """Defaults and annotations run when the child defines the function: keep only literals and
    dotted names (`tl.constexpr`), so `def k(x, B=open(...).write(...))` cannot run the user's code."""
    arguments = function.args
    arguments.defaults = [d if _inert(d) else ast.Constant(None) for d in arguments.defaults]
    arguments.kw_defaults = [d if d is None or _inert(d) else ast.Constant(None) for d in arguments.kw_defaults]
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    for argument in every:
        if argument is not None and argument.annotation is not None and not _inert(argument.annotation):
            argument.annotation = None
    if function.returns is not None and not _inert(function.returns):
        function.returns = None


def _inert(node: ast.AST) -> bool:
    """A literal, or a plain dotted name: evaluating it calls nothing the user wrote."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) or _literal(node)[0]


def _imports_only_triton_or_math(node: ast.Import | ast.ImportFrom) -> bool:
    modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [alias.name for alias in node.names]
    return all(m.split(".")[0] in ("triton", "math") for m in modules)


def _is_constant(value: ast.AST) -> bool:
    if isinstance(value, ast.Call) and dotted(value.func).endswith("constexpr") and len(value.args) == 1:
        value = value.args[0]
    return _literal(value)[0]


# A constexpr the body computes with and nothing gives (a channel count, a block the host
# computes): a power of two, so a shape or `tl.arange` of it compiles, and a multiple of 16.
NUMERIC_CONSTEXPR_GUESS = 16
# A convolution's kernel extent (`KH`, `K_W`, `KERNEL_SIZE`) is small: its loops are unrolled, and at 16 a
# 2-D or 3-D one took past the compile's time limit.
KERNEL_EXTENT_GUESS = 3
_KERNEL_EXTENT = re.compile(r"K_?[HWD]|KERNEL_?(?:SIZE|[HWD])", re.IGNORECASE)


def _guess_constexpr(name: str, numeric: bool) -> Any:
    upper = name.upper()
    if upper.startswith(("BLOCK", "XBLOCK", "RBLOCK", "YBLOCK")) or upper.endswith("BLOCK_SIZE"):
        return 64 if upper[-2:] in ("_M", "_N", "_K") else 1024
    if upper.startswith("GROUP"):
        return 8
    if not numeric:
        return None  # flags and optional modes: the branch they guard stays off
    return KERNEL_EXTENT_GUESS if _KERNEL_EXTENT.fullmatch(name) else NUMERIC_CONSTEXPR_GUESS


def _guess_type(name: str) -> str:
    if name.lower().endswith("ptr") or name in POINTER_NAMES:  # case matters: `K` is a size, `k` a tensor
        return "*fp32"
    return "fp32" if name.lower() in FLOAT_NAMES else "i32"


def _innermost_strides(params: list[str]) -> set[str]:
    """The last `stride_<t><dim>` of each tensor: 1 for contiguous tensors, so the JIT makes it a constexpr."""
    groups: dict[str, str] = {}
    counts: dict[str, int] = {}
    for param in params:
        if param.startswith("stride") and len(param) > len("stride_") + 1:
            key = param[:-1]
            groups[key] = param
            counts[key] = counts.get(key, 0) + 1
    return {last for key, last in groups.items() if counts[key] > 1}


def _by_parameter_names(kernel: TritonKernel, signature: dict[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """A launch spec's args= keyed by the kernel's parameter names. Arguments are passed by
    position, so args= that name other words but match the runtime parameters in number are
    taken in order; either way a note names the mismatch."""
    signature = dict(signature or {})
    strangers = [name for name in signature if name not in kernel.params]
    if not strangers:
        return signature, []
    runtime = [param for param in kernel.params if param not in kernel.constexpr_params]
    if len(signature) == len(runtime):
        renamed = [f"{name}→{param}" for name, param in zip(signature, runtime) if name != param]
        note = f"{kernel.name}: launch spec args= names differ from the parameters, taken in order ({', '.join(renamed)})"
        return dict(zip(runtime, signature.values())), [note]
    note = (
        f"{kernel.name}: launch spec args= names {', '.join(strangers)}, not parameters of the kernel "
        f"({', '.join(runtime)}), and gives {len(signature)} arguments for {len(runtime)}; args= must use the parameter names"
    )
    return {name: value for name, value in signature.items() if name in kernel.params}, [note]


def specialize(
    kernel: TritonKernel, signature: dict[str, Any] | None, constexprs: dict[str, Any] | None
) -> tuple[dict[str, str], dict[str, Any], list[int], list[str]]:
    """Triton signature, constexpr values and divisible-by-16 argument indices, as the JIT would build them.

    `signature` maps a parameter to a Triton type ("*fp16", "i32") or to a sample value
    (an int or float as it would be passed at launch). Returns notes for every guess.
    """
    constexprs = dict(constexprs or {})
    types: dict[str, str] = {}
    values: dict[str, Any] = {}
    divisible: list[int] = []
    guessed: list[str] = []
    signature, notes = _by_parameter_names(kernel, signature)
    unit_strides = {p for p in _innermost_strides(kernel.params) if p not in signature and p not in constexprs}
    for index, param in enumerate(kernel.params):
        if param in kernel.constexpr_params:
            for source in (constexprs, kernel.config_constexprs, kernel.defaults):
                if param in source:
                    values[param] = source[param]
                    break
            else:
                values[param] = _guess_constexpr(param, param in kernel.numeric_constexprs)
                guessed.append(f"{param}={values[param]}")
            types[param] = "constexpr"
            continue
        given = signature.get(param, constexprs.get(param))
        if given is None:
            if param in unit_strides:
                given = 1
            else:
                given = kernel.pointers_by_use.get(param) or _guess_type(param)
                guessed.append(f"{param}: {given}")
        if isinstance(given, bool):
            types[param] = "i1"
        elif isinstance(given, int):
            if given == 1:
                types[param], values[param] = "constexpr", 1
                continue
            types[param] = "i32" if -(2**31) <= given < 2**31 else "i64"
            if given % 16 == 0:
                divisible.append(index)
        elif isinstance(given, float):
            types[param] = "fp32"
        else:
            types[param] = str(given)
            # Guessed ints are taken as sizes that are multiples of 16; pointers as 16-byte aligned.
            if types[param].startswith("*") or (types[param][0] in "iu" and param not in signature):
                divisible.append(index)
    if guessed:
        why = "not in the launch spec's args=" if signature else "no launch spec"
        notes.append(f"{kernel.name}: {why}, assumed {', '.join(guessed)} (ints multiples of 16)")
    if unit_strides:
        notes.append(f"{kernel.name}: assumed contiguous tensors ({', '.join(sorted(unit_strides))} = 1)")
    return types, values, divisible, notes


def compile_triton(
    code: str,
    capability: int,
    kernel_names: list[str] | None = None,
    signature: dict[str, Any] | None = None,
    constexprs: dict[str, Any] | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    timeout_s: float = 30.0,
) -> CompileReport:
    """Offline-compile the jit kernels of `code` for compute capability `capability` (e.g. 90) in a child process."""
    report = CompileReport(compiler="triton offline")
    if not triton_available():
        report.error = NO_TRITON
        return report
    try:
        module_text, kernels = extract_kernels(code)
    except SyntaxError as problem:
        report.error = f"Python syntax error, line {problem.lineno}: {problem.msg}"
        return report
    wanted = [k for k in kernels if not kernel_names or k in kernel_names]
    if not wanted:
        report.error = "no @triton.jit kernel found" + (f" named {', '.join(kernel_names)}" if kernel_names else "")
        return report
    requests = []
    for name in wanted:
        kernel = kernels[name]
        types, values, divisible, notes = specialize(kernel, signature, constexprs)
        report.notes += notes
        requests.append(
            {
                "kernel": name,
                "signature": types,
                "constexprs": values,
                "divisible": divisible,
                "num_warps": num_warps or kernel.config_num_warps or DEFAULT_NUM_WARPS,
                "num_stages": num_stages or kernel.config_num_stages or DEFAULT_NUM_STAGES,
            }
        )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kernelcast-triton-") as workdir:
        (Path(workdir) / "kernelcast_triton_kernels.py").write_text(module_text)
        (Path(workdir) / "request.json").write_text(json.dumps({"capability": capability, "kernels": requests}))
        env = {**os.environ, "TRITON_CACHE_DIR": os.path.join(workdir, "cache")}
        argv = [sys.executable, "-m", "kernelcast.kernels_runtime.triton_facts", workdir]
        try:
            result = run_tool(argv, timeout_s, cwd=workdir, env=env)
        except (OSError, ToolTimeout) as problem:
            report.error = str(problem)
            return report
        answer_path = Path(workdir) / WORKER_ANSWER
        if not answer_path.exists():
            report.error = readable_compile_error(result.stderr or f"Triton worker exited {result.returncode}")
            return report
        answers = json.loads(answer_path.read_text())
        report.compiler = f"triton {answers['version']} offline"
        errors = []
        for answer in answers["kernels"]:
            if answer["error"]:
                errors.append(f"{answer['kernel']}: {answer['error']}")
                continue
            entries = parse_ptxas_report(answer["ptxas_log"])
            report.functions.update(entries)
            for compiled_name in entries:
                report.threads_per_block[compiled_name] = answer["num_warps"] * 32
                report.dynamic_shared_bytes[compiled_name] = answer["shared"]
            report.cubins.append((Path(workdir) / f"{answer['kernel']}.cubin").read_bytes())
    report.compile_ms = (time.perf_counter() - started) * 1000
    if errors:
        report.error = "\n".join(errors)
    return report


def _worker(workdir: str) -> None:
    """Runs in the child interpreter: compile each requested kernel, write cubins and triton.json."""
    import contextlib
    import io
    import traceback

    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    request = json.loads((Path(workdir) / "request.json").read_text())
    spec = importlib.util.spec_from_file_location("kernelcast_triton_kernels", Path(workdir) / "kernelcast_triton_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    knobs.nvidia.dump_ptxas_log = True  # ptxas -v output is printed to stdout, captured below
    target = GPUTarget("cuda", request["capability"], 32)
    backend = triton.compiler.make_backend(target)
    answers = []
    for item in request["kernels"]:
        answer = {"kernel": item["kernel"], "error": None, "num_warps": item["num_warps"]}
        log = io.StringIO()
        try:
            fn = getattr(module, item["kernel"])
            attrs = {(i,): [["tt.divisibility", 16]] for i in item["divisible"]}
            source = ASTSource(fn, item["signature"], item["constexprs"], attrs)
            options = backend.parse_options({"num_warps": item["num_warps"], "num_stages": item["num_stages"]})
            with contextlib.redirect_stdout(log):
                compiled = triton.compile(source, target=target, options=options.__dict__)
            (Path(workdir) / f"{item['kernel']}.cubin").write_bytes(compiled.asm["cubin"])
            answer.update(shared=compiled.metadata.shared, ptxas_log=log.getvalue())
        except Exception as problem:  # reported per kernel; one bad kernel must not hide the others
            lines = traceback.format_exception_only(type(problem), problem)
            answer["error"] = "".join(lines).strip()[-1500:]
        answers.append(answer)
    (Path(workdir) / WORKER_ANSWER).write_text(json.dumps({"version": triton.__version__, "kernels": answers}))


if __name__ == "__main__":
    _worker(sys.argv[1])
