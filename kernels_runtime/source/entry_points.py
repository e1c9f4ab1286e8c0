"""Kernels named by the host code that launches them.

People name the function they call, not the kernel it launches: `def add(x, y)` whose body runs
`add_kernel[grid](...)`, a `class RMSNorm` whose `forward` does, an autograd Function's `apply`, a
C++ `torch::Tensor launch(...)` with `k<<<grid, block>>>(...)` in a `.cu` file or in the CUDA
strings of `load_inline`. TritonBench's files and many agents' search loops name kernels so. A batch
line, `--kernel`, a reference's `::name` and `kernelcast rank --kernel` may therefore name either
the kernel or such an entry point. Pure functions of text, no IO.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import PurePath

from kernelcast.kernels_runtime.source import cuda_text, host_values
from kernelcast.kernels_runtime.source.discovery import PYTHON_SUFFIXES
from kernelcast.kernels_runtime.source.host_launch import cuda_text_of, cupy_kernel_name
from kernelcast.kernels_runtime.source.timed_path import BACKWARD_NAME
from kernelcast.kernels_runtime.source.triton_text import dotted, triton_kernels

# Host functions followed from the one named (entry -> helper -> launcher), so a search stays small.
MAX_CALL_DEPTH = 4
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# After a name, what makes it a call: template arguments (`f<half, 256>(`), then the parameter list.
_CALLED = re.compile(r"\s*(?:<[^<>;{}]*(?:<[^<>;{}]*>[^<>;{}]*)*>\s*)?\(")
_NOT_CALLS = frozenset(
    {"if", "for", "while", "switch", "catch", "return", "sizeof", "alignof", "decltype", "static_cast", "reinterpret_cast"}
)
# What may stand between a C++ definition's parameter list and its body.
_BEFORE_BODY = re.compile(r"\s*(?:(?:const|noexcept|override|final)\b\s*)*(?:->\s*[^{};()]*)?\{")


def launched_by(text: str, python_file: bool, name: str) -> tuple[str, ...]:
    """The kernels the host function or class `name` launches, directly or through the file's other
    functions, in the order their launches are met; () where `name` is no such function."""
    found = _python_launches(text, name) if python_file else _cuda_launches(text, name, 0, set())
    return tuple(dict.fromkeys(found))


def _python_launches(text: str, name: str) -> list[str]:
    tree = host_values.parse_module(text)
    return _PythonHostCode(text, tree).launches(name, 0, set()) if tree is not None else []


class _PythonHostCode:
    """What a Python file defines and binds, read once for a walk through its calls."""

    def __init__(self, text: str, tree: ast.Module) -> None:
        self.triton = {kernel.name for kernel in triton_kernels(text)}
        self.raw_kernels: dict[str, str] = {}  # `k = cupy.RawKernel(code, "name")`: k -> name
        self.defined: dict[str, list[ast.AST]] = defaultdict(list)
        bindings: list[tuple[int, list[ast.expr], str]] = []  # `chosen = gelu_none_kernel`, then `chosen[grid](...)`
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and (kernel := cupy_kernel_name(node.value)):
                self.raw_kernels.update((dotted(target), kernel) for target in node.targets if dotted(target))
            elif isinstance(node, ast.Assign) and (kernel := dotted(node.value).rsplit(".", 1)[-1]) in self.triton:
                bindings.append((node.lineno, node.targets, kernel))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name not in self.triton:
                self.defined[node.name].append(node)
        self.aliases: dict[str, str] = {}  # a name bound to a Triton kernel: its first binding in the text
        for _, targets, kernel in sorted(bindings, key=lambda binding: binding[0]):
            self.aliases.update((target.id, kernel) for target in targets if isinstance(target, ast.Name) and target.id not in self.aliases)
        self.renamed = _other_names(tree)
        self.embedded_cuda = cuda_text_of(text)

    def launches(self, name: str, depth: int, seen: set[str]) -> list[str]:
        """The kernels function or class `name` launches, its calls followed where they are met."""
        if name in seen or depth > MAX_CALL_DEPTH:
            return []
        seen.add(name)
        if name not in self.defined:  # a load_inline binding names a C++ function of the strings
            return _cuda_launches(self.embedded_cuda, name, 0, set()) if self.embedded_cuda else []
        launched: list[str] = []
        for node in self.defined[name]:
            walked = [node] if not isinstance(node, ast.ClassDef) else _run_methods(node)
            calls = sorted(
                (call for each in walked for call in ast.walk(each) if isinstance(call, ast.Call)),
                key=lambda call: (call.lineno, call.col_offset),
            )
            for call in calls:
                function = call.func
                if isinstance(function, ast.Subscript) and (kernel := self._triton_named(dotted(function.value))):
                    launched.append(kernel)
                elif kernel := self.raw_kernels.get(dotted(function)):
                    launched.append(kernel)
                elif callee := self._callee(call):
                    launched += self.launches(callee, depth + 1, seen)
        return launched

    def _callee(self, call: ast.Call) -> str:
        """The function or class a call runs, through the names the file gives them where the call
        uses one itself (`op(x)`, `self.act(x)`, `op.apply(x)`; not `self.ext.act(x)`)."""
        callee = _callee(call)
        function = call.func
        used = function.value if isinstance(function, ast.Attribute) and function.attr == "apply" else function
        by_name = isinstance(used, ast.Name) or (isinstance(used, ast.Attribute) and dotted(used.value) == "self")
        return self.renamed.get(callee, callee) if by_name else callee

    def _triton_named(self, launched: str) -> str | None:
        """The Triton kernel `launched[grid]` runs: `kernel`, `module.kernel`, or a name bound to one."""
        name = launched.rsplit(".", 1)[-1]
        return name if name in self.triton else self.aliases.get(launched)


# A class runs these when called (a module, an autograd Function's apply); a backward pass is not timed.
_RUN_METHODS = ("forward", "__call__")
_BACKWARD = re.compile(BACKWARD_NAME, re.IGNORECASE)


def _run_methods(node: ast.ClassDef) -> list[ast.stmt]:
    """What calling the class runs: its `forward` or `__call__`, else every method but backward ones
    and `__init__` (a class's other methods run where forward calls them, followed as calls)."""
    methods = [each for each in node.body if isinstance(each, (ast.FunctionDef, ast.AsyncFunctionDef))]
    run = [each for each in methods if each.name in _RUN_METHODS]
    return run or [each for each in methods if each.name != "__init__" and not _BACKWARD.search(each.name)]


def _other_names(tree: ast.Module) -> dict[str, str]:
    """Names a file gives its functions and classes: `from m import Fused as op` (op -> Fused), and
    in a class `self.act = ext.sigmoid_cuda`, `self.loss = Loss.apply` or `self.fc = Fused(...)`
    (act -> sigmoid_cuda, loss -> Loss, fc -> Fused)."""
    renamed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            renamed.update((alias.asname, alias.name) for alias in node.names if alias.asname and alias.asname != alias.name)
        elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute, ast.Call)):
            value = node.value.func if isinstance(node.value, ast.Call) else node.value
            if isinstance(node.value, ast.Call) and not isinstance(value, ast.Name):
                continue  # `self.fc = Fused(...)` names the class; `nn.Linear(...)`, `x.cuda()` no function of the file
            parts = dotted(value).split(".")
            bound = parts[-2] if parts[-1] == "apply" and len(parts) > 1 else parts[-1]
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self" and bound:
                    renamed.setdefault(target.attr, bound)
    return {name: bound for name, bound in renamed.items() if name != bound}


def _callee(call: ast.Call) -> str:
    """The function or class a call runs: `helper(x)` and `self.helper(x)` -> helper, `Fused.apply(x)` -> Fused."""
    function = call.func
    if isinstance(function, ast.Attribute) and function.attr == "apply":
        return dotted(function.value).rsplit(".", 1)[-1]
    return host_values.callee_name(call)


def _cuda_launches(text: str, name: str, depth: int, seen: set[str]) -> list[str]:
    """The kernels the C/C++ function `name` of `text` launches, and those of the functions it calls.
    A kernel counts as launched where the body names it: `k<<<...>>>`, and also `&k<T>` handed to
    `cudaLaunchKernel` or a CUTLASS launcher. A body is read with its function-like macros expanded:
    a wrapper that picks its launcher through `#define LAUNCH(stages) launch<half, stages>(...)`
    calls what the macro calls."""
    if name in seen or depth > MAX_CALL_DEPTH:
        return []
    seen.add(name)
    masked = cuda_text.masked(text)
    kernels = {kernel.name for kernel in cuda_text.kernels(text)}
    macros = cuda_text.MacroTable.of(text)
    launched: list[str] = []
    for body in map(macros.expand_calls, _cuda_bodies(masked, name)):
        for word in _IDENTIFIER.finditer(body):
            if word.group() in kernels:
                launched.append(word.group())
            elif word.group() not in _NOT_CALLS and _CALLED.match(body, word.end()):
                launched += _cuda_launches(text, word.group(), depth + 1, seen)
    return launched


def _cuda_bodies(masked: str, name: str) -> list[str]:
    """The bodies of the definitions of function `name` (every overload) in masked C/C++."""
    bodies: list[str] = []
    if name in _NOT_CALLS:
        return bodies
    for match in re.finditer(rf"\b{re.escape(name)}\s*\(", masked):
        close = cuda_text.match_close(masked, match.end() - 1, len(masked))
        opening = _BEFORE_BODY.match(masked, close) if close is not None else None
        if opening is not None:
            end = cuda_text.match_close(masked, opening.end() - 1, len(masked))
            bodies.append(masked[opening.end() : end if end is not None else len(masked)])
    return bodies


def kernel_meant(text: str, path: str, wanted: str, kernels: Sequence[str]) -> tuple[str | None, str | None]:
    """The one of `kernels` (a file's, at `path`) that `wanted` means: itself, else the first the host
    function or class `wanted` launches; and, for the second, a note that says which was read. (None,
    None) where it means none."""
    if wanted in kernels:
        return wanted, None
    launched = [kernel for kernel in launched_by(text, PurePath(path).suffix.lower() in PYTHON_SUFFIXES, wanted) if kernel in kernels]
    if not launched:
        return None, None
    others = f" (it launches {', '.join(launched)}; the first is read, name one to choose)" if len(launched) > 1 else ""
    return launched[0], f"`{wanted}` read as the kernel it launches, `{launched[0]}`{others}"


def no_kernel_meant(wanted: str, kernels: Sequence[str]) -> str:
    """What to tell a user whose name means none of a file's kernels."""
    return f"no kernel named {wanted!r}, and no function of that name launches one (kernels: {', '.join(kernels) or 'none'})"
