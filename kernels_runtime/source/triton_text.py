"""What makes a Python function a Triton kernel, decided in one place for discovery, launch
pragmas, the offline compile and loop trips: a decorator that names `triton.jit`, directly
(`@triton.jit`, `@triton.jit(...)`) or through the file's imports (`from triton import jit`,
`import triton as tr` then `@tr.jit`). `@triton.autotune` and `@triton.heuristics` sit on top
of a `@triton.jit`, so they are not kernels alone; nor is numba's or torch's `jit`.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Iterator, Mapping

from kernelcast.kernels_runtime.source.python_ast import parse_python

# A `tl.dot` told to keep fp32 (`allow_tf32=False`, `input_precision="ieee"`) multiplies on the FP32
# cores, not the TF32 tensor cores an fp32 dot uses by default: several times slower on Ampere and
# Hopper. A keyword of a call only: `torch.backends.cuda.matmul.allow_tf32 = False` is torch's.
FP32_DOT = re.compile(r"(?<![\w.])allow_tf32\s*=\s*False|input_precision\s*=\s*['\"]ieee['\"]")


def dotted(node: ast.expr) -> str:
    """`a.b.c` for a name or attribute chain (a call's callee for a call); '' otherwise."""
    if isinstance(node, ast.Call):
        node = node.func
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


def triton_aliases(imports: Iterable[tuple[str, str | None, str | None]]) -> dict[str, str]:
    """Local name -> dotted triton name, from (module, imported name, alias) triples."""
    aliases: dict[str, str] = {}
    for module, name, alias in imports:
        if module.split(".")[0] != "triton":
            continue
        if name is None:
            aliases[alias or module.split(".")[0]] = module if alias else module.split(".")[0]
        else:
            aliases[alias or name] = f"{module}.{name}"
    return aliases


def is_triton_jit(decorator: str, aliases: dict[str, str]) -> bool:
    """Whether a dotted decorator name resolves to Triton's `jit` through the file's imports."""
    head, _, rest = decorator.partition(".")
    resolved = aliases.get(head, head) + (f".{rest}" if rest else "")
    return resolved.startswith("triton.") and resolved.endswith(".jit")


def is_triton_kernel(function: ast.FunctionDef | ast.AsyncFunctionDef, aliases: dict[str, str]) -> bool:
    """A function with a decorator that resolves to `triton.jit`."""
    return any(is_triton_jit(dotted(decorator), aliases) for decorator in function.decorator_list)


def imports_of(statements: Iterable[ast.stmt]) -> Iterator[tuple[str, str | None, str | None]]:
    """(module, imported name or None, alias or None) of each import among the statements."""
    for node in statements:
        if isinstance(node, ast.Import):
            yield from ((alias.name, None, alias.asname) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield from ((node.module, alias.name, alias.asname) for alias in node.names)


def kernels_of(tree: ast.Module) -> list[ast.FunctionDef]:
    """The Triton kernels of a parsed module, at any depth, in the order they are written."""
    nodes = list(ast.walk(tree))
    aliases = triton_aliases(imports_of(node for node in nodes if isinstance(node, ast.stmt)))
    found = [node for node in nodes if isinstance(node, ast.FunctionDef) and is_triton_kernel(node, aliases)]
    return sorted(found, key=lambda node: (node.lineno, node.col_offset))


@functools.lru_cache(maxsize=64)
def triton_kernels(text: str) -> tuple[ast.FunctionDef, ...]:
    """The Triton kernels of a module's text; none if it does not parse. Shared: do not change the nodes."""
    try:
        tree = parse_python(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    return tuple(kernels_of(tree))


def constexpr_parameters(kernel: ast.FunctionDef) -> set[str]:
    """The kernel's compile-time parameters: annotated `tl.constexpr` (or another name ending in
    constexpr), or with that annotation written as a string (`BLOCK: "tl.constexpr"`), which
    Triton reads the same way."""
    arguments = kernel.args.posonlyargs + kernel.args.args
    return {argument.arg for argument in arguments if _names_constexpr(argument.annotation)}


def _names_constexpr(annotation: ast.expr | None) -> bool:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.strip().endswith("constexpr")
    return annotation is not None and dotted(annotation).endswith("constexpr")


def autotune_listing(kernel: ast.FunctionDef, names: Mapping[str, ast.expr]) -> tuple[bool, ast.expr | None]:
    """Whether the kernel has an `@triton.autotune`, and the expression that lists its configs
    (`configs=` or the first argument; a name read through `names`), None where there is none."""
    autotune = next((node for node in kernel.decorator_list if isinstance(node, ast.Call) and dotted(node).endswith("autotune")), None)
    if autotune is None:
        return False, None
    listed = next((keyword.value for keyword in autotune.keywords if keyword.arg == "configs"), autotune.args[0] if autotune.args else None)
    return True, names.get(listed.id) if isinstance(listed, ast.Name) else listed
