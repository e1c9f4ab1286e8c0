"""One evaluator for the numbers kernel text spells as expressions: launch pragmas and
KernelBench sizes, C loop bounds and constants, Triton ranges.

Expressions are Python `ast` trees: the pragma parser builds them (with the column of each
operator, call and name), C text is translated first (`parse_c`: casts and literal suffixes
dropped, `threadIdx.x` as `threadIdx_x`, `c ? a : b` as `a if c else b`). Only the node kinds
listed here are evaluated, never with `eval`, so text cannot run code in the editor.

Two arithmetics, one walk: C's (integer division truncates toward zero, `%` keeps the
dividend's sign, bit operations need integers), which loop trips and access patterns read
kernel code with, and Python's with sanity limits (`/` divides exactly, `//` and `%` floor,
`**` powers; a result past a limit is refused), which launch pragmas are written in.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelcast.kernels_runtime.source.cuda_text import split_top_level
from kernelcast.kernels_runtime.source.python_ast import parse_python_expression

MAX_SHIFT = 63  # C: a 64-bit shift count
PYTHON_MAX_SHIFT = 62  # pragmas: sizes stay below 2**62


class ExpressionError(ValueError):
    """An expression without a value here: an unbound name, a division by zero, an operation or
    a node kind this evaluator does not do. `column`: where in the text, when the tree knows."""

    def __init__(self, message: str, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.column = column


class UnboundName(ExpressionError):
    def __init__(self, name: str, column: int | None) -> None:
        super().__init__(f"name '{name}' is not bound", column)
        self.name = name


# --- C arithmetic ------------------------------------------------------------------------------


def c_divide(a: Any, b: Any) -> Any:
    """C's `/`: integers truncate toward zero (exactly, however large)."""
    if b == 0:
        raise ExpressionError("division by zero")
    if isinstance(a, int) and isinstance(b, int):
        quotient = abs(a) // abs(b)
        return quotient if (a >= 0) == (b > 0) else -quotient
    return a / b


def c_remainder(a: Any, b: Any) -> Any:
    """C's `%`: the sign of the dividend."""
    if isinstance(a, int) and isinstance(b, int):
        return a - c_divide(a, b) * b
    if b == 0:
        raise ExpressionError("remainder by zero")
    return math.fmod(a, b)


def _floor_divide(a: Any, b: Any) -> Any:
    if b == 0:
        raise ExpressionError("division by zero")
    return a // b


def _integers(operation: Callable[[int, int], int]) -> Callable[[Any, Any], int]:
    def checked(a: Any, b: Any) -> int:
        if not (isinstance(a, int) and isinstance(b, int)):
            raise ExpressionError("bit operation on a non-integer")
        return operation(a, b)

    return checked


def _shift(operation: Callable[[int, int], int]) -> Callable[[Any, Any], int]:
    def checked(a: Any, b: Any) -> int:
        if not (isinstance(a, int) and isinstance(b, int)) or not 0 <= b <= MAX_SHIFT:
            raise ExpressionError("shift out of range")
        return operation(a, b)

    return checked


def _complement(a: Any) -> int:
    if not isinstance(a, int):
        raise ExpressionError("bit operation on a non-integer")
    return ~a


def cdiv(*values: Any) -> Any:
    """⌈a / b⌉, Triton's and the pragmas' `cdiv`."""
    if len(values) != 2:
        raise ExpressionError("cdiv takes two arguments: cdiv(n, block)")
    if values[1] == 0:
        raise ExpressionError("division by zero in cdiv")
    return -(-values[0] // values[1])


_COMPARISONS: dict[str, Callable[[Any, Any], int]] = {
    "==": lambda a, b: int(a == b),
    "!=": lambda a, b: int(a != b),
    "<": lambda a, b: int(a < b),
    "<=": lambda a, b: int(a <= b),
    ">": lambda a, b: int(a > b),
    ">=": lambda a, b: int(a >= b),
}
C_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": c_divide,
    "//": _floor_divide,  # Triton text's
    "%": c_remainder,
    "<<": _shift(lambda a, b: a << b),
    ">>": _shift(lambda a, b: a >> b),
    "&": _integers(lambda a, b: a & b),
    "|": _integers(lambda a, b: a | b),
    "^": _integers(lambda a, b: a ^ b),
    **_COMPARISONS,
}
C_UNARY: dict[str, Callable[[Any], Any]] = {"-": lambda a: -a, "+": lambda a: a, "!": lambda a: int(not a), "~": _complement}
# Math calls of CUDA and Triton code whose value is plain arithmetic on their arguments.
C_FUNCTIONS: dict[str, Callable[..., Any]] = {
    **dict.fromkeys(("min", "umin", "llmin", "ullmin", "fminf", "fmin"), min),
    **dict.fromkeys(("max", "umax", "llmax", "ullmax", "fmaxf", "fmax"), max),
    **dict.fromkeys(("abs", "labs", "llabs", "fabsf", "fabs"), abs),
    **dict.fromkeys(("__mul24", "__umul24"), lambda a, b: a * b),
}
# Triton's (tl.minimum, tl.maximum, triton.cdiv), for Triton text read with C's arithmetic.
TRITON_FUNCTIONS: dict[str, Callable[..., Any]] = {**C_FUNCTIONS, "minimum": min, "maximum": max, "cdiv": cdiv}


# --- Python arithmetic (pragmas) ------------------------------------------------------------------


def _python_division(operation: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def checked(a: Any, b: Any) -> Any:
        if b == 0:
            raise ExpressionError("division by zero")
        return operation(a, b)

    return checked


def _python_shift(symbol: str, operation: Callable[[int, int], int]) -> Callable[[Any, Any], int]:
    def checked(a: Any, b: Any) -> int:
        if not (isinstance(a, int) and isinstance(b, int) and 0 <= b <= PYTHON_MAX_SHIFT):
            raise ExpressionError(f"shift needs ints and a count in 0..{PYTHON_MAX_SHIFT}, got {a!r} {symbol} {b!r}")
        return operation(a, b)

    return checked


def _power(a: Any, b: Any) -> Any:
    if not (abs(b) <= 64 and (abs(a) <= 1 or b * math.log2(abs(a)) < 63)):
        raise ExpressionError(f"{a!r} ** {b!r} is too large")
    return a**b


PYTHON_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _python_division(lambda a, b: a / b),
    "//": _python_division(lambda a, b: a // b),
    "%": _python_division(lambda a, b: a % b),
    "<<": _python_shift("<<", lambda a, b: a << b),
    ">>": _python_shift(">>", lambda a, b: a >> b),
    "**": _power,
    **_COMPARISONS,
}
PYTHON_UNARY: dict[str, Callable[[Any], Any]] = {"-": lambda a: -a, "+": lambda a: a}


# --- the walk ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    """What the operators mean and which calls have values."""

    binary: Mapping[str, Callable[[Any, Any], Any]]
    unary: Mapping[str, Callable[[Any], Any]]
    functions: Mapping[str, Callable[..., Any]]  # called with the arguments' values
    # Called with the call node, a function evaluating a node, and the names (Triton's program_id, x.to(...)).
    forms: Mapping[str, Callable[[ast.Call, Callable[[ast.AST], Any], Mapping[str, Any]], Any]] = field(default_factory=dict)
    limit: float | None = None  # results of operations and calls past this are refused

    def checked(self, value: Any) -> Any:
        if self.limit is not None and abs(value) > self.limit:
            raise ExpressionError(f"value {value:.3g} is beyond any GPU's sizes")
        return value


_SYMBOLS: dict[type, str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.USub: "-",
    ast.UAdd: "+",
    ast.Not: "!",
    ast.Invert: "~",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
}


def evaluate(node: ast.AST, names: Mapping[str, Any], dialect: Dialect) -> Any:
    """The value of an expression tree; ExpressionError (with the column of the innermost node that knows one) if it has none."""
    try:
        return _value(node, names, dialect)
    except ExpressionError as error:
        if error.column is None:
            error.column = getattr(node, "col_offset", None)
        raise


def _operation(table: Mapping[str, Callable[..., Any]], operator: ast.AST) -> Callable[..., Any]:
    operation = table.get(_SYMBOLS.get(type(operator), ""))
    if operation is None:
        raise ExpressionError(f"operator {type(operator).__name__} has no value here")
    return operation


def _value(node: ast.AST, names: Mapping[str, Any], dialect: Dialect) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise UnboundName(node.id, getattr(node, "col_offset", None))
        return names[node.id]
    if isinstance(node, ast.BinOp):
        operation = _operation(dialect.binary, node.op)
        left, right = evaluate(node.left, names, dialect), evaluate(node.right, names, dialect)
        return dialect.checked(operation(left, right))
    if isinstance(node, ast.UnaryOp):
        return _operation(dialect.unary, node.op)(evaluate(node.operand, names, dialect))
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        operation = _operation(dialect.binary, node.ops[0])
        return operation(evaluate(node.left, names, dialect), evaluate(node.comparators[0], names, dialect))
    if isinstance(node, ast.IfExp):
        return evaluate(node.body if evaluate(node.test, names, dialect) else node.orelse, names, dialect)
    if isinstance(node, ast.Call):
        function = node.func
        name = function.attr if isinstance(function, ast.Attribute) else function.id if isinstance(function, ast.Name) else ""
        form = dialect.forms.get(name)
        if form is not None:
            return form(node, lambda inner: evaluate(inner, names, dialect), names)
        value_of = dialect.functions.get(name)
        if value_of is None:
            raise ExpressionError(f"function '{name}' has no value here")
        values = [evaluate(argument, names, dialect) for argument in node.args]
        try:
            return dialect.checked(value_of(*values))
        except (TypeError, ArithmeticError) as error:
            raise ExpressionError(f"{name}() of {values}: {error}") from None
    raise ExpressionError(f"{type(node).__name__} has no value here")


C = Dialect(C_BINARY, C_UNARY, C_FUNCTIONS)


# --- C text as a tree ------------------------------------------------------------------------------

_CAST = re.compile(
    r"\(\s*(?:const\s+)?(?:unsigned\s+)?(?:long\s+long|long|int|short|char|size_t|int64_t|uint64_t|int32_t|uint32_t|unsigned|float|double)\s*\)"
)
_LITERAL_SUFFIX = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b")
_BUILTIN = re.compile(r"\b(threadIdx|blockIdx|blockDim|gridDim)\.([xyz])\b")


@functools.lru_cache(maxsize=8192)
def parse_c(text: str) -> ast.expr:
    """A C (or Python) expression as a Python tree; ExpressionError if it does not read as one. Shared: do not change it."""
    translated = _LITERAL_SUFFIX.sub(r"\1", _BUILTIN.sub(r"\1_\2", _CAST.sub("", text))).strip()
    try:
        return parse_python_expression(_conditional(translated))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise ExpressionError(f"not an expression: {text[:80]!r}") from error


def _conditional(text: str) -> str:
    """C's `c ? a : b` (right-associative, at any bracket depth) as Python's `(a if c else b)`."""
    parts = split_top_level(text, ",")
    if len(parts) > 1:
        return ", ".join(_conditional(part) for part in parts)
    depth, question, nested = 0, -1, 0
    for index, character in enumerate(text):
        depth += (character in "([{") - (character in ")]}")
        if depth or character not in "?:":
            continue
        if question < 0:
            question = index if character == "?" else -1
        elif character == "?":
            nested += 1
        elif nested:
            nested -= 1
        else:
            return f"({_conditional(text[question + 1 : index])} if {_conditional(text[:question])} else {_conditional(text[index + 1 :])})"
    pieces, start, depth = [], 0, 0
    for index, character in enumerate(text):
        if character == "(" and depth == 0:
            pieces.append(text[start : index + 1])
            start = index + 1
        depth += (character == "(") - (character == ")")
        if character == ")" and depth == 0:
            pieces.append(_conditional(text[start:index]))
            start = index
    return "".join(pieces) + text[start:]
