"""The values host code gives names, for launch sites and KernelBench inputs: Python modules read
with `ast`, C host code handed in as expression trees (host_launch.py), both evaluated by the one
evaluator (expressions.py), never run.

Host code computes a launch from sizes it only knows at run time (`n = x.numel()`); such a
value is *unknown*, not an error, and what depends on it is unknown too. `Values` evaluates
names lazily through the assignments that bind them, and, given a guess, reads every unknown
(a run-time size, a parameter, a method call) as that guess: a grid `(n + 255) / 256` is then
one thread per guessed element, and the caller says the grid was assumed.
"""

from __future__ import annotations

import ast
import copy
import functools
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from kernelcast.kernels_runtime.source import expressions
from kernelcast.kernels_runtime.source.python_ast import parse_python
from kernelcast.kernels_runtime.source.triton_text import dotted

# Values past this cannot be sizes on any GPU; refusing early keeps arithmetic sane.
MAX_VALUE = 2**62


def _next_power_of_2(value: Any) -> int:
    """`triton.next_power_of_2`: block sizes are often spelled with it."""
    if not isinstance(value, int) or value < 0:
        raise expressions.ExpressionError("next_power_of_2 needs a non-negative int")
    return 1 << (value - 1).bit_length() if value > 1 else 1


_COMMON: dict[str, Any] = {"cdiv": expressions.cdiv, "min": min, "max": max}
# Ceil-division helpers as people name them (`at::ceil_div`, `cute::ceil_div`, `DIV_UP` macros expand first).
CEIL_DIVISIONS = ("cdiv", "ceil_div", "ceildiv", "div_up", "divup", "DivUp", "ceilDiv", "div_round_up", "round_up_div")
PYTHON = expressions.Dialect(
    expressions.PYTHON_BINARY,
    expressions.PYTHON_UNARY,
    {**_COMMON, "next_power_of_2": _next_power_of_2, "ceil": math.ceil, "int": int},
    limit=MAX_VALUE,
)
C = expressions.Dialect(
    expressions.C_BINARY,
    expressions.C_UNARY,
    {**expressions.C_FUNCTIONS, **dict.fromkeys(CEIL_DIVISIONS, expressions.cdiv)},
    limit=MAX_VALUE,
)


class Values(Mapping[str, Any]):
    """Names bound to expression trees, evaluated on first use; with `guess`, a name that has no
    value (unbound, or bound to something unknown) reads as the guess."""

    def __init__(self, bound: Mapping[str, ast.expr], dialect: expressions.Dialect, guess: int | None = None) -> None:
        self.bound = bound
        self.dialect = dialect
        self.guess = guess
        self.known: dict[str, Any] = {}
        self.active: set[str] = set()  # names being evaluated: `n = n * 2` is unknown, not a loop

    def __getitem__(self, name: str) -> Any:
        if name in self.known:
            return self.known[name]
        expression = self.bound.get(name)
        found = None
        if expression is not None and name not in self.active:
            self.active.add(name)
            try:
                found = value(expression, self)
            finally:
                self.active.discard(name)
        if found is None:
            if self.guess is None:
                raise KeyError(name)
            found = self.guess
        self.known[name] = found
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self.bound)

    def __len__(self) -> int:
        return len(self.bound)


def value(expression: ast.expr, names: Values) -> int | float | None:
    """The expression's number, or None where the text does not fix it (with no guess)."""
    try:
        found = expressions.evaluate(opaque(expression, names.dialect), names, names.dialect)
    except (expressions.ExpressionError, KeyError, TypeError, ArithmeticError, RecursionError):
        return None
    return found if isinstance(found, (int, float)) and not isinstance(found, bool) else None


def opaque(expression: ast.expr, dialect: expressions.Dialect) -> ast.expr:
    """A copy where what the evaluator cannot know (attributes, subscripts, calls of other functions,
    strings) is a name spelled as the source: `x.numel()` is one unknown, the same each time it appears."""
    return _Opaque(dialect).visit(copy.deepcopy(expression))  # type: ignore[no-any-return]


class _Opaque(ast.NodeTransformer):
    def __init__(self, dialect: expressions.Dialect) -> None:
        self.dialect = dialect

    def _unknown(self, node: ast.expr) -> ast.Name:
        return ast.copy_location(ast.Name(ast.unparse(node)), node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        return self._unknown(node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.expr:
        return self._unknown(node)

    def visit_Constant(self, node: ast.Constant) -> ast.expr:
        return node if isinstance(node.value, (int, float)) and not isinstance(node.value, bool) else self._unknown(node)

    def visit_Call(self, node: ast.Call) -> ast.expr:
        name = callee_name(node)
        if name in self.dialect.forms:
            return node
        if name not in self.dialect.functions or node.keywords:
            return self._unknown(node)
        node.args = [self.visit(argument) for argument in node.args]
        return node


def callee_name(call: ast.Call) -> str:
    """The last part of a call's callee: `triton.cdiv` -> `cdiv`."""
    function = call.func
    return function.attr if isinstance(function, ast.Attribute) else function.id if isinstance(function, ast.Name) else ""


# --- Python modules ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def parse_module(text: str) -> ast.Module | None:
    """The module's tree, or None while it does not parse (a half-typed file has no launches to read). Shared: do not change it."""
    try:
        return parse_python(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def bindings(statements: list[ast.stmt], before_line: int | None = None) -> dict[str, ast.expr]:
    """Names the statements assign (`a = e`, `a: int = e`, `a, b = e1, e2`), nested blocks included, the
    last assignment above `before_line` winning; a name assigned otherwise (`a += 1`, a loop) is unknown.
    A function that only returns an expression (`def grid(meta): return (cdiv(n, meta["BLOCK"]),)`) is
    bound as the lambda it is; any other function defined here binds its name to nothing known."""
    found: dict[str, ast.expr] = {}
    for node in sorted(_assignments(statements), key=lambda node: (node.lineno, node.col_offset)):
        if before_line is not None and node.lineno >= before_line:
            break
        for name, bound in _bound(node):
            found[name] = bound
    return found


def _assignments(statements: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Assignments among the statements and inside their blocks, and the functions they define; not
    what nested functions or classes assign."""
    stack = list(statements)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))


# A value the text does not give: never bound, so it reads as unknown, or as the guess.
UNKNOWN = ast.Name("<unknown>")


def _bound(node: ast.stmt) -> Iterator[tuple[str, ast.expr]]:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from _pairs(target, node.value)
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        yield from _pairs(node.target, node.value)
    elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        yield node.target.id, UNKNOWN
    elif isinstance(node, ast.For):
        yield from ((name.id, UNKNOWN) for name in ast.walk(node.target) if isinstance(name, ast.Name))
    elif isinstance(node, ast.FunctionDef):
        yield node.name, _as_lambda(node) or UNKNOWN
    elif isinstance(node, ast.AsyncFunctionDef):
        yield node.name, UNKNOWN


def _as_lambda(function: ast.FunctionDef) -> ast.Lambda | None:
    """`def f(meta): return e` (a docstring allowed, no decorator) as `lambda meta: e`, else None."""
    body = function.body[1:] if ast.get_docstring(function, clean=False) is not None else function.body
    if function.decorator_list or len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    return ast.copy_location(ast.Lambda(args=function.args, body=body[0].value), function)


def _pairs(target: ast.expr, bound: ast.expr) -> Iterator[tuple[str, ast.expr]]:
    if isinstance(target, ast.Name):
        yield target.id, bound
    elif isinstance(target, (ast.Tuple, ast.List)):
        items = bound.elts if isinstance(bound, (ast.Tuple, ast.List)) and len(bound.elts) == len(target.elts) else None
        for index, element in enumerate(target.elts):
            yield from _pairs(element, items[index] if items else UNKNOWN)


def scope_at(tree: ast.Module, line: int) -> dict[str, ast.expr]:
    """What names mean on `line`: the module's assignments, then, for each function around the line,
    its parameters' defaults that no call passes and its assignments above the line."""
    names = bindings(tree.body)
    body: list[ast.stmt] = tree.body
    enclosing: ast.AST = tree
    while True:
        around = _around(body, line)
        if around is None:
            return names
        if not isinstance(around, ast.ClassDef):
            parameters = around.args.posonlyargs + around.args.args + around.args.kwonlyargs
            names = {name: bound for name, bound in names.items() if name not in {parameter.arg for parameter in parameters}}
            names.update(_defaults_never_passed(tree, around, enclosing if isinstance(enclosing, ast.ClassDef) else None))
            names.update(bindings(around.body, line))
        enclosing = around
        body = around.body


# Methods Python runs through an instance or the class (`layer(x)`, `Layer(dim)`), not by their own name.
_CALLED_THROUGH_INSTANCES = frozenset({"forward", "__call__", "__init__"})
# The models whose `forward` a KernelBench harness calls, with get_inputs()'s tensors and nothing else.
TIMED_MODELS = ("ModelNew", "Model")


def rebound_names(tree: ast.Module, line: int) -> frozenset[str]:
    """The names bound more than once in the innermost function around `line` (the module, outside any),
    a parameter counting as one binding: `use_triton = x.is_cuda` then `use_triton = False` under an
    `if`. `scope_at` gives such a name its last binding above the line, which holds on one path only."""
    return _rebound_in(tree, _innermost_function(tree, line))


@functools.lru_cache(maxsize=64)
def _rebound_in(tree: ast.Module, function: ast.FunctionDef | ast.AsyncFunctionDef | None) -> frozenset[str]:
    """rebound_names of one scope, read once: a function's tests are read many times an edit."""
    parameters = function.args.posonlyargs + function.args.args + function.args.kwonlyargs if function is not None else []
    counts = Counter(parameter.arg for parameter in parameters)
    counts.update(name for node in _assignments(function.body if function is not None else tree.body) for name, _ in _bound(node))
    return frozenset(name for name, count in counts.items() if count > 1)


def _innermost_function(tree: ast.Module, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function around `line` whose scope `scope_at` reads, through classes and functions defined inside."""
    found, body = None, tree.body
    while (around := _around(body, line)) is not None:
        found = around if not isinstance(around, ast.ClassDef) else found
        body = around.body
    return found


def _around(body: list[ast.stmt], line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None:
    """The function or class among the statements whose lines hold `line`."""
    definitions = (node for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
    return next((node for node in definitions if node.lineno <= line <= (node.end_lineno or node.lineno)), None)


def _defaults_never_passed(
    tree: ast.Module, function: ast.FunctionDef | ast.AsyncFunctionDef, owner: ast.ClassDef | None
) -> dict[str, ast.expr]:
    """The function's parameters that no call in the file passes, bound to their defaults: what they
    are whenever it runs (`def add(x, y, BLOCK=1024)` called as `add(x, y)`). A parameter some call
    passes, or a call with `*args`/`**kwargs`, leaves it to the caller (unknown). `owner`: the class of
    a method; an autograd Function's `forward` is called through `Owner.apply(...)`, its `ctx` not passed,
    and a module's `forward` through its instances, unknown but for the harness's model."""
    positional = [parameter.arg for parameter in function.args.posonlyargs + function.args.args]
    defaults = dict(zip(positional[len(positional) - len(function.args.defaults) :], function.args.defaults))
    keyword_only = zip(function.args.kwonlyargs, function.args.kw_defaults)
    defaults.update((parameter.arg, default) for parameter, default in keyword_only if default is not None)
    if not defaults or _tuned(function):
        return {}
    skipped = 1 if owner is not None and positional and not _static(function) else 0
    callers = [(call, skipped) for call in _calls_by_callee(tree).get(function.name, ())]
    if owner is not None and function.name in _CALLED_THROUGH_INSTANCES:
        autograd = function.name == "forward" and autograd_function(owner)
        applied = _applied(tree, owner.name) if autograd else None
        if applied is not None:
            callers += [(call, 1) for call in applied]
        elif not (function.name == "forward" and owner.name in TIMED_MODELS):
            return {}  # `self.attn(x, mask=m)` runs `forward` through the module: its callers are not found by name
    for call, before in callers:
        if any(isinstance(argument, ast.Starred) for argument in call.args) or any(keyword.arg is None for keyword in call.keywords):
            return {}
        passed = {name for name, _ in passed_arguments(function, call, before)}
        defaults = {name: default for name, default in defaults.items() if name not in passed}
    return defaults


def autograd_function(node: ast.ClassDef) -> bool:
    """A class deriving from an autograd Function (`torch.autograd.Function`, `Function`): its
    `forward` runs through `Owner.apply(...)`, not by its name."""
    return any(dotted(base).endswith("Function") for base in node.bases)


@functools.lru_cache(maxsize=16)
def _applied(tree: ast.Module, owner: str) -> tuple[ast.Call, ...] | None:
    """The calls `Owner.apply(...)` of an autograd Function; None where `Owner.apply` is also named
    without being called (`fn = Owner.apply`): those calls cannot all be found."""
    calls = [call for call in _calls_by_callee(tree).get("apply", ()) if dotted(call.func) == f"{owner}.apply"]
    named = sum(isinstance(node, ast.Attribute) and dotted(node) == f"{owner}.apply" for node in ast.walk(tree))
    return tuple(calls) if named == len(calls) else None


def passed_arguments(function: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, skipped: int = 0) -> list[tuple[str, ast.expr]]:
    """Each parameter the call passes, with what it passes: by position (after `skipped` ones, `self`
    for a method) and by keyword."""
    positional = [parameter.arg for parameter in function.args.posonlyargs + function.args.args][skipped:]
    return [*zip(positional, call.args), *((keyword.arg, keyword.value) for keyword in call.keywords if keyword.arg)]


def written_out(node: ast.expr, names: Mapping[str, ast.expr]) -> tuple[ast.expr, ...] | None:
    """The items of a tuple or list the text writes out, directly or through the name bound to one; None otherwise."""
    if isinstance(node, ast.Name) and isinstance(names.get(node.id), (ast.Tuple, ast.List)):
        node = names[node.id]
    return tuple(node.elts) if isinstance(node, (ast.Tuple, ast.List)) else None


@functools.lru_cache(maxsize=16)
def _calls_by_callee(tree: ast.Module) -> dict[str, list[ast.Call]]:
    """The module's calls by the last part of their callee, found in one pass: every `scope_at` of a
    function with defaults looks up its callers, many times an edit in a file of many launches."""
    calls: dict[str, list[ast.Call]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            # A Triton launch, `kernel[grid](...)`, calls the kernel.
            callee = dotted(function.value).split(".")[-1] if isinstance(function, ast.Subscript) else callee_name(node)
            calls.setdefault(callee, []).append(node)
    return calls


def _tuned(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A kernel under `@triton.autotune` or `@triton.heuristics`: they set its parameters, not its launches."""
    return any(dotted(decorator).split(".")[-1] in ("autotune", "heuristics") for decorator in function.decorator_list)


def _static(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(decorator, ast.Name) and decorator.id == "staticmethod" for decorator in function.decorator_list)
