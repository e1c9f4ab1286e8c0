"""Launch specs: what a kernel needs to be run at all (grid, arguments, sizes).

A kernel file says how to launch a kernel in one comment line, the *launch pragma*,
placed above the kernel (decorators and blank lines may sit between):

    # kernelcast: launch grid=(cdiv(N, BLOCK),) args=(x:f32[N], y:f32[N], out:f32[N]:out, N:i32=1<<24) BLOCK=1024 num_warps=4
    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, N, BLOCK: tl.constexpr): ...

    // kernelcast: launch grid=(cdiv(N, 256)) block=(256) smem=0 args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)
    __global__ void scale(const float* x, float* y, int N) { ... }

`kernel=NAME` names the kernel explicitly, so a pragma can sit anywhere in the file.

Keys:
- `grid=(e, ...)`, up to 3 dims; `block=(e, ...)` and `smem=e` (dynamic shared bytes)
  for CUDA only.
- `args=(...)` in the kernel's parameter order. An argument is `name:dtype[shape]` for an
  array or `name:dtype=value` for a scalar. Flags after the type: `:out` (an output,
  poisoned with NaN before each run and compared with the reference), and an init
  `:randn` (floats' default), `:rand` (uniform [0, 1)) or `:randint(lo, hi)` (ints'
  default is randint(0, 100); use it for index arrays).
  Dtypes: f32 f16 bf16 f64 i32 i64 u8 i8 bool.
- Any other `NAME=value`: an int that expressions may use. For Triton, keys that name a
  kernel parameter (constexprs) or a launch option (num_warps, num_stages, num_ctas,
  maxnreg) are also passed to the launch as keywords.

Expressions are ints with + - * / // % << >> ** and parentheses, names bound by scalar
arguments or other keys, and cdiv(a, b), min(...), max(...). They are evaluated by the
evaluator every source reader shares (expressions.py), never with `eval`, so a pragma
cannot run code in the editor.

KernelBench files (`Model`, `ModelNew`, `get_inputs`, `get_init_inputs`) need no pragma:
the file itself says how to run it.
"""

from __future__ import annotations

import ast
import bisect
import functools
import itertools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kernelcast.kernels_runtime.source import cuda_text, expressions, host_values
from kernelcast.kernels_runtime.source.triton_text import triton_kernels

PRAGMA_MARKER = "kernelcast:"
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i32": 4, "i64": 8, "u8": 1, "i8": 1, "bool": 1}
FLOAT_DTYPES = ("f32", "f16", "bf16", "f64")
_TRITON_TYPES = {
    "f32": "fp32",
    "f16": "fp16",
    "bf16": "bf16",
    "f64": "fp64",
    "i32": "i32",
    "i64": "i64",
    "u8": "u8",
    "i8": "i8",
    "bool": "i1",
}
INITS = ("randn", "rand", "randint")
DEFAULT_RANDINT = (0, 100)
# CUDA's limits on launch dimensions (all GPUs since compute capability 3.0).
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024
MAX_DYNAMIC_SMEM = 227 * 1024
MAX_VALUE = host_values.MAX_VALUE
# Parser and evaluator recurse once per bracket, sign, power and chained operator: a pragma
# like `N=((((…1))))` or `1+1+…+1` must be refused, not exhaust Python's stack.
MAX_NESTING = 64
MAX_PRAGMA_CHARS = 4096
# A pragma's arrays may use at most this share of the GPU's memory (two output sets included).
MEMORY_SHARE = 0.9
CUDA_KEYS = ("grid", "block", "smem", "args", "kernel")


# Triton launch keywords; every other option of a Triton pragma is a constexpr.
TRITON_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


class LaunchSpecError(ValueError):
    """A launch pragma that cannot be used; `column` points into the pragma text (0-based)."""

    def __init__(self, message: str, column: int = 0, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.column = column
        self.line = line

    def __str__(self) -> str:
        return f"{self.message} (column {self.column + 1})"


# --- the expression language -------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<number>0[xX][0-9a-fA-F_]+|\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?)"
    r"|(?P<name>[A-Za-z_]\w*)|(?P<op>\*\*|//|<<|>>|[-+*/%()\[\],:=]))"
)


@dataclass(frozen=True)
class _Token:
    kind: str  # number | name | op | end
    text: str
    column: int


def _tokenize(text: str, offset: int) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while position < len(text):
        if _BLANK_REST.match(text, position):
            break
        match = _TOKEN.match(text, position)
        if not match or match.end() == position:
            bad = len(text[position:]) - len(text[position:].lstrip())
            raise LaunchSpecError(f"unexpected character {text[position + bad]!r}", offset + position + bad)
        kind = match.lastgroup or "op"
        tokens.append(_Token(kind, match.group(kind), offset + match.start(kind)))
        position = match.end()
    tokens.append(_Token("end", "", offset + len(text)))
    return tokens


_BLANK_REST = re.compile(r"\s*\Z")

# Expressions are Python trees whose col_offset is the column of their operator, call or name,
# evaluated by the evaluator every reader of kernel text shares, in Python's arithmetic.
_Expr = ast.expr

_BINARY_LEVELS: tuple[tuple[str, ...], ...] = (("<<", ">>"), ("+", "-"), ("*", "/", "//", "%"))
_OPERATORS: dict[str, type[ast.operator]] = {
    "<<": ast.LShift,
    ">>": ast.RShift,
    "+": ast.Add,
    "-": ast.Sub,
    "*": ast.Mult,
    "/": ast.Div,
    "//": ast.FloorDiv,
    "%": ast.Mod,
    "**": ast.Pow,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {"cdiv": expressions.cdiv, "min": min, "max": max}
_DIALECT = expressions.Dialect(expressions.PYTHON_BINARY, expressions.PYTHON_UNARY, _FUNCTIONS, limit=MAX_VALUE)


def _at(node: _Expr, column: int) -> _Expr:
    node.col_offset = column
    return node


class _Parser:
    """Recursive descent over one pragma's tokens."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.index = 0
        self.depth = 0

    @property
    def current(self) -> _Token:
        return self.tokens[self.index]

    def take(self) -> _Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def accept(self, text: str) -> bool:
        if self.current.kind == "op" and self.current.text == text:
            self.index += 1
            return True
        return False

    def enter(self, column: int) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise LaunchSpecError(f"expression nested deeper than {MAX_NESTING} levels", column)

    def expect(self, text: str, what: str) -> _Token:
        if self.current.kind == "op" and self.current.text == text:
            return self.take()
        found = self.current.text or "end of line"
        raise LaunchSpecError(f"expected '{text}' {what}, found '{found}'", self.current.column)

    def expect_name(self, what: str) -> _Token:
        if self.current.kind != "name":
            raise LaunchSpecError(f"expected {what}, found '{self.current.text or 'end of line'}'", self.current.column)
        return self.take()

    def expression(self, level: int = 0) -> _Expr:
        if level == len(_BINARY_LEVELS):
            return self.unary()
        left = self.expression(level + 1)
        chained = 0
        while self.current.kind == "op" and self.current.text in _BINARY_LEVELS[level]:
            operator = self.take()
            self.enter(operator.column)
            chained += 1
            left = _at(ast.BinOp(left, _OPERATORS[operator.text](), self.expression(level + 1)), operator.column)
        self.depth -= chained
        return left

    def unary(self) -> _Expr:
        if self.current.kind == "op" and self.current.text in ("+", "-"):
            operator = self.take()
            self.enter(operator.column)
            operand = self.unary()
            self.depth -= 1
            return _at(ast.UnaryOp(ast.USub(), operand), operator.column) if operator.text == "-" else operand
        base = self.atom()
        if self.current.kind == "op" and self.current.text == "**":
            operator = self.take()
            self.enter(operator.column)
            exponent = self.unary()
            self.depth -= 1
            return _at(ast.BinOp(base, ast.Pow(), exponent), operator.column)
        return base

    def atom(self) -> _Expr:
        token = self.take()
        if token.kind == "number":
            return _at(ast.Constant(_number(token)), token.column)
        if token.kind == "name":
            if self.accept("("):
                if token.text not in _FUNCTIONS:
                    raise LaunchSpecError(f"unknown function '{token.text}'; use cdiv, min or max", token.column)
                self.enter(token.column)
                arguments = [self.expression()]
                while self.accept(","):
                    arguments.append(self.expression())
                self.expect(")", f"to close {token.text}(")
                self.depth -= 1
                return _at(ast.Call(ast.Name(token.text), arguments, []), token.column)
            return _at(ast.Name(token.text), token.column)
        if token.kind == "op" and token.text == "(":
            self.enter(token.column)
            inner = self.expression()
            self.expect(")", "to close '('")
            self.depth -= 1
            return inner
        raise LaunchSpecError(f"expected a number or a name, found '{token.text or 'end of line'}'", token.column)


def _number(token: _Token) -> int | float:
    text = token.text.replace("_", "")
    try:
        return int(text, 0) if not re.search(r"[.eE]", text) or text.lower().startswith("0x") else float(text)
    except ValueError:
        raise LaunchSpecError(f"bad number '{token.text}'", token.column) from None


def _evaluate(expr: _Expr, names: Mapping[str, int | float]) -> int | float:
    try:
        value: int | float = expressions.evaluate(expr, names, _DIALECT)
        return value
    except expressions.UnboundName as error:
        raise LaunchSpecError(
            f"name '{error.name}' is not bound: add a scalar argument like {error.name}:i32=1024 or a key {error.name}=1024",
            error.column or 0,
        ) from None
    except expressions.ExpressionError as error:
        raise LaunchSpecError(error.message, error.column or 0) from None


def _as_int(value: int | float, what: str, column: int) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise LaunchSpecError(f"{what} must be an integer, got {value:g}; use // or cdiv", column)
        return int(value)
    return value


# --- the spec --------------------------------------------------------------------------


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument: an array (shape set) or a scalar (value set)."""

    name: str
    dtype: str
    shape: tuple[int, ...] | None = None
    value: int | float | None = None
    is_output: bool = False
    init: str = "randn"
    init_range: tuple[int, int] | None = None

    @property
    def is_array(self) -> bool:
        return self.shape is not None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape or ()) * DTYPE_BYTES[self.dtype] if self.is_array else 0


# The parts of a launch read from host code (host_launch.py) that it guessed: the grid (from sizes known
# only at run time) and the config (block, shared memory, Triton options).
GUESSED_GRID = "grid"
GUESSED_CONFIG = "config"


@dataclass(frozen=True)
class LaunchSpec:
    """How to run one kernel: `kind` is "kernel" (a pragma) or "kernelbench" (the file says)."""

    kind: str
    language: str
    kernel: str | None = None
    args: tuple[ArgSpec, ...] = ()
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] | None = None
    smem: int = 0
    options: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    pragma: str = ""
    # A launch read from host code (host_launch.py): the parts it assumed rather than read ("grid", "config").
    guessed: tuple[str, ...] = ()
    # A KernelBench file's `get_inputs()` shapes, where literal.
    inputs: tuple[tuple[int, ...], ...] = ()

    @property
    def block_threads(self) -> int | None:
        """The threads of a 1-D block (dims of 1 aside); None for a Triton launch or a 2-D or 3-D block."""
        if self.block is None or sum(d > 1 for d in self.block) > 1:
            return None
        return math.prod(self.block)

    def grid_for_block(self, threads: int) -> tuple[int, ...]:
        """This launch's 1-D grid recast for blocks of `threads`, covering as many threads."""
        return (-(-self.grid[0] * (self.block_threads or 1) // threads),)

    def problem_sizes(self) -> dict[str, Any]:
        """Named ints (N, M, K, batch_size…) for roofline and forecast inputs, and the inputs' shapes
        and element counts where the file states them (a list: the roofline's sizes stay the named ints)."""
        sizes: dict[str, Any] = dict(self.sizes)
        if self.inputs:
            sizes["inputs"] = [{"shape": list(shape), "numel": math.prod(shape)} for shape in self.inputs]
        return sizes

    def float_dtype(self) -> str | None:
        """The dtype of the largest floating array: the precision a problem is named by."""
        floats = [arg for arg in self.args if arg.is_array and arg.dtype in FLOAT_DTYPES]
        return max(floats, key=lambda arg: arg.nbytes).dtype if floats else None

    def as_launch(self) -> dict[str, Any]:
        """The launch as corpus facts list it (grid, block, shared bytes, Triton options and
        constexprs; the arguments in parameter order, arrays by name and scalars with their
        values) plus the bytes its arrays hold, all and the outputs': what the forecaster's features read."""
        num_warps = self.options.get("num_warps")
        return {
            "kernel": self.kernel,
            "grid": list(self.grid),
            "block": list(self.block or (32 * (num_warps or 4),)),
            "shared_bytes": self.smem,
            "num_warps": num_warps,
            "num_stages": self.options.get("num_stages"),
            "constexprs": {name: value for name, value in self.options.items() if name not in TRITON_LAUNCH_OPTIONS} or None,
            "args": [arg.name if arg.is_array else {"ctype": arg.dtype, "value": arg.value} for arg in self.args],
            "bytes": sum(arg.nbytes for arg in self.args),
            "output_bytes": sum(arg.nbytes for arg in self.args if arg.is_output),
        }

    def bytes_needed(self) -> int:
        """Device bytes for one measurement: each side owns a full set of arrays."""
        return 2 * sum(arg.nbytes for arg in self.args)

    def check_fits(self, memory_bytes: int, reserved_bytes: int = 0) -> None:
        """Refuse, with sizes in the message, a spec whose arrays would crowd the GPU."""
        needed = self.bytes_needed() + reserved_bytes
        allowed = int(MEMORY_SHARE * memory_bytes)
        if needed > allowed:
            largest = max(self.args, key=lambda arg: arg.nbytes)
            raise LaunchSpecError(
                f"arrays need {needed / 2**30:.1f} GiB but {MEMORY_SHARE:.0%} of this GPU's "
                f"{memory_bytes / 2**30:.1f} GiB is {allowed / 2**30:.1f} GiB "
                f"(largest: {largest.name}, {largest.nbytes / 2**30:.1f} GiB); lower the sizes"
            )

    def triton_signature(self) -> dict[str, str | int | float]:
        """The arguments as Triton's JIT specialises on them: arrays as pointer types, scalars by their values."""
        signature: dict[str, str | int | float] = {}
        for arg in self.args:
            if arg.is_array:
                signature[arg.name] = f"*{_TRITON_TYPES[arg.dtype]}"
            elif arg.value is not None:  # a host launch's run-time values are not given
                signature[arg.name] = arg.value
        return signature

    def signature(self) -> list[tuple[str, str, tuple[int, ...] | None, bool]]:
        """What two sides must agree on to be compared: names, dtypes, shapes, outputs."""
        return [(arg.name, arg.dtype, arg.shape, arg.is_output) for arg in self.args]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "language": self.language, "kernel": self.kernel, "pragma": self.pragma, "sizes": self.sizes}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LaunchSpec:
        if data["kind"] == "kernel":
            spec = parse_launch_pragma(data["pragma"], language=data["language"])
            return _with_kernel(spec, data.get("kernel") or spec.kernel)
        return cls(kind=data["kind"], language=data["language"], kernel=data.get("kernel"), sizes=dict(data.get("sizes") or {}))


def _with_kernel(spec: LaunchSpec, kernel: str | None) -> LaunchSpec:
    return replace(spec, kernel=kernel)


# --- parsing a pragma ---------------------------------------------------------------------


@dataclass
class _RawArg:
    name: _Token
    dtype: str
    shape: list[_Expr] | None
    value: _Expr | None
    is_output: bool
    init: str | None
    init_range: tuple[_Expr, _Expr] | None


def parse_launch_pragma(text: str, language: str = "cuda") -> LaunchSpec:
    """Parse one pragma line (comment prefix optional); raises LaunchSpecError with a column."""
    if len(text) > MAX_PRAGMA_CHARS:
        raise LaunchSpecError(f"the pragma is {len(text)} characters long; at most {MAX_PRAGMA_CHARS}", MAX_PRAGMA_CHARS)
    items = _items(text)
    if "grid" not in items:
        raise LaunchSpecError("a launch needs grid=(...), e.g. grid=(cdiv(N, 256),)", len(text))
    if "args" not in items:
        raise LaunchSpecError("a launch needs args=(...) in the kernel's parameter order", len(text))
    if language == "cuda":
        if "block" not in items:
            raise LaunchSpecError("a CUDA launch needs block=(...), e.g. block=(256)", len(text))
    elif "block" in items or "smem" in items:
        key = (items["block"] if "block" in items else items["smem"])[0]
        raise LaunchSpecError(f"{key.text}= is for CUDA kernels; Triton takes num_warps= and constexpr keys", key.column)
    return _bind(items, language, text)


def _items(text: str) -> dict[str, tuple[_Token, Any]]:
    """A pragma's keys, each with its token and its parsed value."""
    start = text.find(PRAGMA_MARKER)
    body_start = start + len(PRAGMA_MARKER) if start >= 0 else 0
    tokens = _tokenize(text[body_start:], body_start)
    _check_balanced(tokens)
    parser = _Parser(tokens)
    launch = parser.expect_name("'launch' after 'kernelcast:'")
    if launch.text != "launch":
        raise LaunchSpecError(f"expected 'launch' after 'kernelcast:', found '{launch.text}'", launch.column)

    items: dict[str, tuple[_Token, Any]] = {}
    while parser.current.kind != "end":
        key = parser.expect_name("a key such as grid=, block=, args=")
        if key.text in items:
            raise LaunchSpecError(f"'{key.text}' is given twice", key.column)
        parser.expect("=", f"after '{key.text}'")
        if key.text == "args":
            items["args"] = (key, _parse_args(parser))
        elif key.text == "kernel":
            items["kernel"] = (key, parser.expect_name("a kernel name").text)
        elif key.text in ("grid", "block"):
            items[key.text] = (key, _parse_dims(parser, key.text))
        else:
            items[key.text] = (key, parser.expression())
    return items


def launched_as(spec: LaunchSpec, host: LaunchSpec) -> LaunchSpec:
    """A pragma's launch (`spec`: its problem, arrays and sizes) with the config another launch of the
    same kernel makes (`host`, read from host code): a Triton kernel's num_warps, num_stages and the
    constexprs the pragma names, where the host code passes them, the grid evaluated again with them;
    a CUDA kernel's 1-D block where the host code states it, over as many threads as before. A side
    measured with the other side's pragma so runs as its own file launches it, not at the other's
    config. The result is a pragma too (its text is what travels to the measuring worker)."""
    items = _items(spec.pragma)
    if spec.language == "triton":
        keys = {name: str(value) for name, value in host.options.items() if name in TRITON_LAUNCH_OPTIONS or name in items}
    else:
        block = _stated_block(host)
        if block is None or len(spec.grid) != 1 or spec.block_threads is None:
            return spec
        keys = {"grid": f"({spec.grid_for_block(block)[0]})", "block": f"({block})"}
    text = spec.pragma
    starts = sorted(token.column for token, _ in items.values())
    for name in sorted((name for name in keys if name in items), key=lambda name: -items[name][0].column):
        start = items[name][0].column
        end = next((column for column in starts if column > start), len(text))
        text = f"{text[:start]}{name}={keys[name]} {text[end:]}"
    text = text.rstrip() + "".join(f" {name}={value}" for name, value in keys.items() if name not in items)
    return _with_kernel(parse_launch_pragma(text, spec.language), spec.kernel)


def _stated_block(host: LaunchSpec | None) -> int | None:
    """The threads of the 1-D block a launch read from host code states (read, not guessed), or None."""
    return host.block_threads if host is not None and GUESSED_CONFIG not in host.guessed else None


def _stated_dims(host: LaunchSpec | None) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The grid and block of a 2-D or 3-D launch whose host code states both (nothing guessed), else None."""
    if host is None or host.guessed or host.block is None or host.block_threads is not None:
        return None
    return host.grid, host.block


def _with_stated_value(argument: str, value: int | float | None) -> str:
    """A scalar argument of a template with the value the host code passes, where it passes one it states."""
    if value is None or isinstance(value, bool) or "=" not in argument or "[" in argument:
        return argument
    return f"{argument.split('=', 1)[0]}={value}"


def _check_balanced(tokens: list[_Token]) -> None:
    """Name the bracket that does not close before the parser gets lost in it."""
    closing = {")": "(", "]": "["}
    open_brackets: list[_Token] = []
    for token in tokens:
        if token.kind != "op":
            continue
        if token.text in "([":
            open_brackets.append(token)
        elif token.text in closing:
            if not open_brackets or open_brackets[-1].text != closing[token.text]:
                raise LaunchSpecError(f"unbalanced parentheses: '{token.text}' has no matching '{closing[token.text]}'", token.column)
            open_brackets.pop()
    if open_brackets:
        raise LaunchSpecError(f"unbalanced parentheses: '{open_brackets[-1].text}' is never closed", open_brackets[-1].column)


def _parse_dims(parser: _Parser, what: str) -> list[_Expr]:
    if not parser.accept("("):
        return [parser.expression()]
    dims = [parser.expression()]
    while parser.accept(","):
        if parser.current.kind == "op" and parser.current.text == ")":
            break
        dims.append(parser.expression())
    parser.expect(")", f"to close {what}=(")
    return dims


def _parse_args(parser: _Parser) -> list[_RawArg]:
    parser.expect("(", "to open args=(")
    arguments: list[_RawArg] = []
    while not parser.accept(")"):
        if arguments:
            parser.expect(",", "between arguments")
            if parser.accept(")"):
                break
        arguments.append(_parse_arg(parser))
    return arguments


def _parse_arg(parser: _Parser) -> _RawArg:
    name = parser.expect_name("an argument name")
    parser.expect(":", f"after argument '{name.text}' (name:dtype)")
    dtype = parser.expect_name(f"a dtype for '{name.text}'")
    if dtype.text not in DTYPE_BYTES:
        raise LaunchSpecError(f"unknown dtype '{dtype.text}'; use one of {' '.join(DTYPE_BYTES)}", dtype.column)
    shape = None
    if parser.accept("["):
        shape = [parser.expression()]
        while parser.accept(","):
            shape.append(parser.expression())
        parser.expect("]", f"to close the shape of '{name.text}'")
    is_output, init, init_range = False, None, None
    while parser.accept(":"):
        flag = parser.expect_name(f"a flag for '{name.text}' (out, randn, rand, randint)")
        if flag.text == "out":
            is_output = True
        elif flag.text in INITS:
            init = flag.text
            if flag.text == "randint":
                parser.expect("(", "after randint (randint(lo, hi))")
                low = parser.expression()
                parser.expect(",", "in randint(lo, hi)")
                init_range = (low, parser.expression())
                parser.expect(")", "to close randint(")
        else:
            raise LaunchSpecError(f"unknown flag '{flag.text}'; use out, randn, rand or randint(lo, hi)", flag.column)
    value = parser.expression() if parser.accept("=") else None
    if shape is None and value is None:
        raise LaunchSpecError(f"scalar argument '{name.text}' needs a value, e.g. {name.text}:{dtype.text}=1024", name.column)
    if shape is not None and value is not None:
        raise LaunchSpecError(f"array argument '{name.text}' cannot take a value; inputs are random", name.column)
    return _RawArg(name, dtype.text, shape, value, is_output, init, init_range)


def _bind(items: dict[str, tuple[_Token, Any]], language: str, text: str) -> LaunchSpec:
    """Evaluate every expression once names are known: scalars first, then keys, then shapes."""
    names: dict[str, int | float] = {}
    raw_args: list[_RawArg] = items["args"][1]
    seen: set[str] = set()
    for raw in raw_args:
        if raw.name.text in seen:
            raise LaunchSpecError(f"argument '{raw.name.text}' is given twice", raw.name.column)
        seen.add(raw.name.text)
    pending = [raw for raw in raw_args if raw.value is not None]
    options: dict[str, int] = {}
    keys = [(token, expr) for name, (token, expr) in items.items() if name not in CUDA_KEYS]
    # Scalars and keys may refer to each other in any order: evaluate until nothing changes.
    unresolved: list[tuple[str, _Expr, int]] = [(raw.name.text, raw.value, raw.name.column) for raw in pending if raw.value is not None]
    unresolved += [(token.text, expr, token.column) for token, expr in keys]
    while unresolved:
        progress = []
        for name, expr, _column in unresolved:
            try:
                names[name] = _evaluate(expr, names)
                progress.append(name)
            except LaunchSpecError:
                continue
        if not progress:
            name, expr, _ = unresolved[0]
            _evaluate(expr, names)  # raises the first real error with its column
        unresolved = [entry for entry in unresolved if entry[0] not in progress]
    for token, _ in keys:
        options[token.text] = _as_int(names[token.text], token.text, token.column)

    args = tuple(_bind_arg(raw, names) for raw in raw_args)
    grid = _bind_dims(items["grid"], names, MAX_GRID)
    block = _bind_dims(items["block"], names, MAX_BLOCK) if "block" in items else None
    if block and math.prod(block) > MAX_THREADS_PER_BLOCK:
        raise LaunchSpecError(
            f"block has {math.prod(block)} threads; CUDA allows at most {MAX_THREADS_PER_BLOCK}", items["block"][0].column
        )
    smem = 0
    if "smem" in items:
        token, expr = items["smem"]
        smem = _as_int(_evaluate(expr, names), "smem", token.column)
        if not 0 <= smem <= MAX_DYNAMIC_SMEM:
            raise LaunchSpecError(f"smem={smem} bytes is outside 0..{MAX_DYNAMIC_SMEM} (227 KB, Hopper's maximum)", token.column)
    sizes = {name: value for name, value in names.items() if isinstance(value, int)}
    kernel = items["kernel"][1] if "kernel" in items else None
    return LaunchSpec("kernel", language, kernel, args, grid, block, smem, options, sizes, text.strip())


def _bind_arg(raw: _RawArg, names: dict[str, int | float]) -> ArgSpec:
    floating = raw.dtype in FLOAT_DTYPES
    if raw.shape is None:
        value = names[raw.name.text]
        if not floating:
            value = _as_int(value, f"scalar '{raw.name.text}'", raw.name.column)
        return ArgSpec(raw.name.text, raw.dtype, value=value)
    shape = []
    for expr in raw.shape:
        size = _as_int(_evaluate(expr, names), f"a dimension of '{raw.name.text}'", expr.col_offset)
        if size <= 0:
            raise LaunchSpecError(f"a dimension of '{raw.name.text}' is {size}; sizes must be positive", expr.col_offset)
        shape.append(size)
    init = raw.init or ("randn" if floating else "randint")
    if init in ("randn", "rand") and not floating:
        raise LaunchSpecError(f"'{raw.name.text}' is {raw.dtype}: use randint(lo, hi), not {init}", raw.name.column)
    init_range = None
    if init == "randint":
        if raw.init_range is None:
            init_range = DEFAULT_RANDINT
        else:
            low, high = (_as_int(_evaluate(e, names), "randint bounds", e.col_offset) for e in raw.init_range)
            if low >= high:
                raise LaunchSpecError(f"randint({low}, {high}) is empty; need lo < hi", raw.init_range[0].col_offset)
            init_range = (low, high)
    return ArgSpec(raw.name.text, raw.dtype, tuple(shape), None, raw.is_output, init, init_range)


def _bind_dims(item: tuple[_Token, list[_Expr]], names: dict[str, int | float], limits: tuple[int, ...]) -> tuple[int, ...]:
    token, exprs = item
    if len(exprs) > 3:
        raise LaunchSpecError(f"{token.text} has {len(exprs)} dimensions; CUDA allows at most 3", token.column)
    dims = []
    for axis, (expr, limit) in enumerate(zip(exprs, limits)):
        size = _as_int(_evaluate(expr, names), f"{token.text} dimension {axis}", expr.col_offset)
        if not 1 <= size <= limit:
            raise LaunchSpecError(f"{token.text} dimension {'xyz'[axis]} is {size}; CUDA allows 1..{limit}", expr.col_offset)
        dims.append(size)
    return tuple(dims)


# --- finding a spec in a file ----------------------------------------------------------------

_TRITON_DEFINITION = re.compile(r"^\s*def\s+(\w+)\s*\(")
_COMMENT_PREFIX = re.compile(r"^\s*(?:#|//)\s*kernelcast:\s*launch\b")
_ANY_PRAGMA = re.compile(r"kernelcast:\s*launch\b")
_NAMED_KERNEL = re.compile(r"\bkernel\s*=\s*(\w+)")


def find_launch_spec(file_text: str, kernel_name: str, language: str) -> LaunchSpec | None:
    """The spec for `kernel_name` in a file, or None; a broken pragma raises with its line."""
    if language == "pytorch":
        return _kernelbench_spec(file_text, kernel_name)
    found = launch_specs(file_text, language).get(kernel_name)
    if isinstance(found, LaunchSpecError):
        raise LaunchSpecError(found.message, found.column, found.line)
    return found


def as_cuda_pragma(spec: LaunchSpec, kernel_name: str) -> str:
    """`spec`'s pragma as a CUDA comment that names its kernel, so it can sit anywhere in the kernel's
    source: a kernel in a Python string that the file gives its pragma in a `#` comment outside it."""
    body = _COMMENT_PREFIX.sub("", spec.pragma).strip()
    named = "" if _NAMED_KERNEL.search(body) else f"kernel={kernel_name} "
    return f"// kernelcast: launch {named}{body}"


@functools.lru_cache(maxsize=4)
def launch_specs(file_text: str, language: str) -> dict[str | None, LaunchSpec | LaunchSpecError]:
    """Each kernel's first pragma in the file, parsed (or its error), in one pass: a file with
    thousands of kernels costs one scan, not one per kernel. Read-only: the result is shared."""
    if language not in ("cuda", "triton"):
        raise ValueError(f"language must be cuda, triton or pytorch, got {language!r}")
    specs: dict[str | None, LaunchSpec | LaunchSpecError] = {}
    if not _ANY_PRAGMA.search(file_text):
        return specs
    lines = file_text.splitlines(keepends=True)
    definitions = _definitions(file_text, lines, language)
    pragmas = [number for number, line in enumerate(lines) if _COMMENT_PREFIX.match(line)]
    for index, number in enumerate(pragmas):
        line = lines[number].rstrip("\r\n")
        next_pragma = pragmas[index + 1] if index + 1 < len(pragmas) else len(lines)
        named = _NAMED_KERNEL.search(line)
        target = named.group(1) if named else _next_definition(definitions, number, next_pragma)
        try:
            spec = parse_launch_pragma(line, language)
        except LaunchSpecError as error:
            specs.setdefault(target, LaunchSpecError(error.message, error.column, number))
            continue
        target = spec.kernel or target
        specs.setdefault(target, _with_kernel(spec, target))
    return specs


def _definitions(file_text: str, lines: list[str], language: str) -> tuple[list[int], list[str]]:
    """The line and the name of each kernel definition, in order: CUDA's from the function index
    (so a commented-out or declared kernel is none), Triton's every `def`."""
    if language == "triton":
        found = [(number, match.group(1)) for number, line in enumerate(lines) if (match := _TRITON_DEFINITION.match(line))]
        return [number for number, _ in found], [name for _, name in found]
    line_starts = list(itertools.accumulate((len(line) for line in lines), initial=0))
    kernels = cuda_text.kernels(file_text)
    return [bisect.bisect_right(line_starts, kernel.name_start) - 1 for kernel in kernels], [kernel.name for kernel in kernels]


def _next_definition(definitions: tuple[list[int], list[str]], pragma_line: int, next_pragma_line: int) -> str | None:
    """The kernel a pragma without `kernel=` belongs to: the first defined below it, before the next pragma."""
    lines, names = definitions
    position = bisect.bisect_right(lines, pragma_line)
    if position < len(lines) and lines[position] < next_pragma_line:
        return names[position]
    return None


def kernel_names(file_text: str, language: str) -> list[str]:
    """Kernels defined in a file, in order (Triton: its `@triton.jit` functions)."""
    if language == "cuda":
        return [kernel.name for kernel in cuda_text.kernels(file_text)]
    return [function.name for function in triton_kernels(file_text)]


def kernel_parameters(file_text: str, kernel_name: str, language: str) -> list[str]:
    """Parameter names of one kernel, for the template; empty when it cannot be found."""
    if language == "cuda":
        kernel = cuda_text.function_named(file_text, kernel_name)
        return kernel.parameter_names(file_text) if kernel else []
    found = re.search(r"def\s+" + re.escape(kernel_name) + r"\s*\(([^)]*)\)", file_text)
    if not found:
        return []
    names = []
    for parameter in found.group(1).split(","):
        identifiers = re.findall(r"[A-Za-z_]\w*", parameter.split("=")[0].split(":")[0])
        if identifiers:
            names.append(identifiers[0])
    return names


def _kernelbench_spec(file_text: str, class_name: str | None) -> LaunchSpec | None:
    """KernelBench files carry their own inputs; module-level int constants are the sizes, read as
    the forecast's problem is (`kernelbench_problem`)."""
    if not re.search(r"^def\s+get_inputs\s*\(", file_text, re.MULTILINE) and not re.search(
        r"^class\s+Model(New)?\b", file_text, re.MULTILINE
    ):
        return None
    sizes = {name: value for name, value in kernelbench_problem(file_text).items() if isinstance(value, int)}
    return LaunchSpec("kernelbench", "pytorch", class_name, sizes=sizes, inputs=_kernelbench_inputs(file_text))


# Tensor factories whose positional arguments (or one tuple of them) are the shape; randint's is its third, full's its first.
_SHAPED_FACTORIES = {"randn": None, "rand": None, "zeros": None, "ones": None, "empty": None, "randint": 2, "full": 0}


def _kernelbench_inputs(file_text: str) -> tuple[tuple[int, ...], ...]:
    """The shapes `get_inputs()` returns whose shape is literal, the others left out."""
    return tuple(shape for shape in kernelbench_input_shapes(file_text) if shape)


# How deep wrapping calls (`F.normalize(...)`, `.sigmoid()`), arithmetic and names are looked through to a tensor factory.
_WRAPPING_DEPTH = 4


def kernelbench_input_shapes(file_text: str) -> list[tuple[int, ...] | None]:
    """Each input `get_inputs()` returns, in order: its shape (`[torch.randn(batch_size, dim)]`, or names
    assigned such calls first, with the module's constants), or None where it is not literal. A factory
    wrapped in calls, methods or arithmetic (`torch.randn(n, d).sigmoid()`, `F.normalize(torch.randn(n, d))`,
    `scale * torch.randn(n, d)`) gives its shape: inputs are made so, and a wrapper that reshapes them is rare."""
    found = harness_list(file_text, "get_inputs")
    if found is None:
        return []
    items, values = found
    return [factory_shape(item, values.bound, values, _WRAPPING_DEPTH) for item in items]


def harness_list(file_text: str, function_name: str) -> tuple[list[ast.expr], host_values.Values] | None:
    """The items of the list a module-level function returns (KernelBench's `get_inputs`,
    `get_init_inputs`), and the names they read: the module's and the function's own; None
    where the file has no such function returning a list or tuple display."""
    tree = host_values.parse_module(file_text)
    function = (
        next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == function_name), None) if tree else None
    )
    returned = next((node.value for node in ast.walk(function) if isinstance(node, ast.Return)), None) if function else None
    if tree is None or function is None or not isinstance(returned, (ast.List, ast.Tuple)):
        return None
    bound = {**host_values.bindings(tree.body), **host_values.bindings(function.body)}
    return list(returned.elts), host_values.Values(bound, host_values.PYTHON)


def factory_shape(
    made: ast.expr | None, bound: Mapping[str, ast.expr], values: host_values.Values, depth: int = _WRAPPING_DEPTH
) -> tuple[int, ...] | None:
    """The shape of the tensor factory call `made` is, or is made from within `depth` names, calls and operators."""
    if depth and isinstance(made, ast.Name):
        return factory_shape(bound.get(made.id), bound, values, depth - 1)
    if depth and isinstance(made, ast.BinOp):
        return factory_shape(made.left, bound, values, depth - 1) or factory_shape(made.right, bound, values, depth - 1)
    if not isinstance(made, ast.Call):
        return None
    name = host_values.callee_name(made)
    if name not in _SHAPED_FACTORIES:
        if isinstance(made.func, ast.Attribute) and isinstance(made.func.value, ast.Call):
            wrapped: ast.expr | None = made.func.value
        else:
            wrapped = made.args[0] if made.args else None
        return factory_shape(wrapped, bound, values, depth - 1) if depth else None
    at = _SHAPED_FACTORIES[name]
    keywords = {keyword.arg: keyword.value for keyword in made.keywords}
    shape: ast.expr | list[ast.expr] | None = keywords.get("size") or (made.args[at] if at is not None and len(made.args) > at else None)
    if at is None and shape is None:
        shape = made.args[0] if len(made.args) == 1 and isinstance(made.args[0], (ast.Tuple, ast.List)) else list(made.args)
    dims = shape.elts if isinstance(shape, (ast.Tuple, ast.List)) else shape if isinstance(shape, list) else [shape] if shape else []
    found = [host_values.value(dim, values) for dim in dims]
    return tuple(int(dim or 0) for dim in found) if found and all(isinstance(dim, int) and dim > 0 for dim in found) else None


# --- the code action's text ----------------------------------------------------------------


def template_for(
    file_text: str, kernel_name: str, language: str, host: LaunchSpec | None = None, allocated: Mapping[str, int] | None = None
) -> str:
    """`launch_spec_template` for a kernel of a file: its parameters, for CUDA their declared types,
    what the launch its host code makes (`host`, host_launch.py) states of its config, and the bytes
    a program `cudaMalloc`s for each array (`allocated`, host_launch.allocated_bytes)."""
    kernel = cuda_text.function_named(file_text, kernel_name) if language == "cuda" else None
    declarations = dict(kernel.parameter_declarations(file_text)) if kernel else {}
    parameters = kernel_parameters(file_text, kernel_name, language)
    return launch_spec_template(kernel_name, language, parameters, declarations, host, allocated)


# C types a template reads a parameter's dtype from, longest spelling first ("unsigned char" before "char").
_C_DTYPES = (
    ("__nv_bfloat16", "bf16"),
    ("bfloat16", "bf16"),
    ("__half", "f16"),
    ("half", "f16"),
    ("double", "f64"),
    ("float", "f32"),
    ("int64_t", "i64"),
    ("size_t", "i64"),
    ("ptrdiff_t", "i64"),
    ("long", "i64"),
    ("int32_t", "i32"),
    ("uint32_t", "i32"),
    ("uint8_t", "u8"),
    ("unsigned char", "u8"),
    ("int8_t", "i8"),
    ("char", "i8"),
    ("bool", "bool"),
    ("int", "i32"),
    ("unsigned", "i32"),
)


def declared_dtype(declaration: str) -> str | None:
    """The dtype a C parameter declaration (`const float *`, `int64_t`) holds or points to, else None (a template's T)."""
    return next((dtype for word, dtype in _C_DTYPES if re.search(rf"\b{word}\b", declaration)), None)


def declared_output(name: str, declaration: str, inputs_marked_const: bool) -> bool:
    """Whether a pointer parameter is written: not const where the kernel marks its inputs const, else by its name."""
    return "const" not in declaration if inputs_marked_const else bool(re.search(r"out|dst|result|^(y|c)(_|$)", name, re.IGNORECASE))


def _declared_argument(name: str, declaration: str, size: str, inputs_marked_const: bool, allocated: int | None) -> str | None:
    """One argument of a CUDA template read from its declaration: a pointer is an array of its element
    type (f32 where that is a template's), as long as the program allocates it where it says, an output
    when not const where the kernel marks its inputs const; a float a scalar of 1.0. None for a scalar
    of a type it does not know (a template's T)."""
    dtype = declared_dtype(declaration)
    if "*" in declaration:
        if allocated and allocated % DTYPE_BYTES[dtype or "f32"] == 0:
            size = str(allocated // DTYPE_BYTES[dtype or "f32"])
        return f"{name}:{dtype or 'f32'}[{size}]{':out' if declared_output(name, declaration, inputs_marked_const) else ''}"
    if dtype is None:
        return None
    if dtype in ("f32", "f64", "f16", "bf16"):
        return f"{name}:{dtype}=1.0"
    return f"{name}:{dtype}={'1<<20' if name == size else '1024'}"


# Names that are scalars whatever their first letters say (`in_stride`, `n_cols` are not arrays): strides,
# counts and sizes of a tensor's dims, and a kernel's float knobs.
_INT_SCALAR_NAME = re.compile(r"stride|^(n|num)_|_(size|numel|len|count|rows|cols|dim)$|^(rows|cols|dim|numel)$", re.IGNORECASE)
_FLOAT_SCALAR_NAME = re.compile(r"^(eps|epsilon|alpha|beta|gamma|scale|momentum|temperature|lr|weight_decay)$", re.IGNORECASE)


def launch_spec_template(
    kernel_name: str,
    language: str,
    param_names: list[str],
    declarations: Mapping[str, str] | None = None,
    host: LaunchSpec | None = None,
    allocated: Mapping[str, int] | None = None,
) -> str:
    """A pragma line to insert above a kernel, for the user to edit: a guess from the parameters'
    declarations where known (CUDA), else from their names; its config (a 1-D CUDA block, Triton's
    constexprs, num_warps and num_stages) as the host code launches the kernel, where it does, so
    that measuring the pragma as proposed times the kernel as the file runs it."""
    size_like = re.compile(r"^(n|m|k|size|numel|n_elements|len|length|count)$", re.IGNORECASE)
    size = next((name for name in param_names if size_like.match(name)), "N")
    constexprs = [name for name in param_names if language == "triton" and name.isupper() and len(name) > 1]
    declared, sized = declarations or {}, allocated or {}
    inputs_marked_const = any("const" in each and "*" in each for each in declared.values())
    stated = {arg.name: arg.value for arg in host.args if arg.value is not None} if host is not None else {}
    args = []
    for name in param_names:
        if name in constexprs:
            continue
        if name in declared and (argument := _declared_argument(name, declared[name], size, inputs_marked_const, sized.get(name))):
            args.append(_with_stated_value(argument, stated.get(name)))
        elif name == size:
            args.append(_with_stated_value(f"{name}:i32=1<<20", stated.get(name)))
        elif _FLOAT_SCALAR_NAME.match(name):
            args.append(f"{name}:f32=1.0")
        elif _INT_SCALAR_NAME.search(name):
            args.append(f"{name}:i32=1024")
        elif re.search(r"ptr|_p$", name, re.IGNORECASE) or re.match(r"(in|out|src|dst|[a-z])(_|$)", name):
            flag = ":out" if re.search(r"out|dst|result|^(y|c)(_|$)", name, re.IGNORECASE) else ""
            args.append(f"{name}:f32[{size}]{flag}")
        else:
            args.append(f"{name}:i32=1024")
    options = dict(host.options) if host is not None else {}
    keys = "".join(f" {name}={options.get(name, 1024)}" for name in constexprs)
    if size not in param_names:
        keys = f" {size}=1<<20" + keys
    block = constexprs[0] if constexprs else ("256" if language == "cuda" else "1024")
    comment = "//" if language == "cuda" else "#"
    head = f"{comment} kernelcast: launch kernel={kernel_name}"
    if language == "cuda":
        if (dims := _stated_dims(host)) is not None:  # a 2-D or 3-D launch, as the host code states it
            return f"{head} grid=({', '.join(map(str, dims[0]))}) block=({', '.join(map(str, dims[1]))}) args=({', '.join(args)}){keys}"
        block = str(_stated_block(host) or block)
        return f"{head} grid=(cdiv({size}, {block})) block=({block}) args=({', '.join(args)}){keys}"
    stages = f" num_stages={options['num_stages']}" if "num_stages" in options else ""
    return f"{head} grid=(cdiv({size}, {block}),) args=({', '.join(args)}){keys} num_warps={options.get('num_warps', 4)}{stages}"


# --- The sizes a KernelBench file states ---------------------------------------------------------
# The words in `get_inputs()` that name its inputs' precision (else fp32), as the corpus names problems.
_KERNELBENCH_DTYPES = (("bfloat16", "bf16"), ("float16", "f16"), ("half", "f16"), ("float64", "f64"))
_KERNELBENCH_OPERATIONS: dict[type[ast.operator], Callable[[int, int], int | None]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b if b else None,
    ast.Pow: lambda a, b: a**b if 0 <= b < 64 else None,
    ast.LShift: lambda a, b: a << b if 0 <= b < 64 else None,
}


def kernelbench_problem(file_text: str) -> dict[str, Any]:
    """A KernelBench file's problem as the measured corpora name it: its module-level int constants
    (batch_size, dim, …; `a, b = 1, 2` too) and the precision `get_inputs()` makes its inputs in.
    The editor reads a file's sizes with this very function, so its forecast sees what training saw."""
    tree = host_values.parse_module(file_text)
    if tree is None:
        return {}
    sizes: dict[str, int] = {}
    for statement in tree.body:
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            continue
        target, value = statement.targets[0], statement.value
        pairs: list[tuple[ast.expr, ast.expr]]
        if isinstance(target, ast.Name):
            pairs = [(target, value)]
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            pairs = list(zip(target.elts, value.elts))
        else:
            continue
        for name, expression in pairs:
            number = _module_int(expression, sizes)
            if isinstance(name, ast.Name) and number is not None and number > 0:
                sizes[name.id] = number
    problem: dict[str, Any] = dict(sizes)
    inputs = re.search(r"def get_inputs\(\):(.*?)(?:\ndef |\Z)", file_text, re.S)
    text = inputs.group(1) if inputs else ""
    problem["dtype"] = next((dtype for word, dtype in _KERNELBENCH_DTYPES if word in text), "f32")
    return problem


def _module_int(node: ast.AST, names: dict[str, int]) -> int | None:
    """A module-level size: an int literal, a name already read, or + - * // ** << of those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp):
        left, right = _module_int(node.left, names), _module_int(node.right, names)
        operation = _KERNELBENCH_OPERATIONS.get(type(node.op))
        return operation(left, right) if operation and left is not None and right is not None else None
    return None


# What `with_problem_inputs` puts between a solution and its problem's inputs: a reader finds the seam.
PROBLEM_INPUTS_HEADING = "# The problem's sizes and inputs"
_PROBLEM_INPUTS_FUNCTIONS = ("get_inputs", "get_init_inputs")


def with_problem_inputs(file_text: str, problem_text: str) -> str:
    """A KernelBench solution as it is timed: KernelBench builds and calls it with its problem's
    `get_init_inputs()` and `get_inputs()`, so a solution file that states neither is read with
    the problem's imports, module constants and those two functions after it. A file with its own
    `get_inputs()`, one that does not parse as Python (a .cu file) and a problem without
    `get_inputs()` leave the text as it is."""
    if "def get_inputs" in file_text or host_values.parse_module(file_text) is None:
        return file_text
    inputs = _problem_inputs_part(problem_text)
    return file_text if inputs is None else f"{file_text}\n\n{PROBLEM_INPUTS_HEADING}\n{inputs}"


@functools.lru_cache(maxsize=8)
def _problem_inputs_part(problem_text: str) -> str | None:
    """The problem's imports, module-level assignments and input functions, once per problem text:
    both sides of every request of an edited solution append the same part."""
    tree = host_values.parse_module(problem_text)
    if tree is None or "def get_inputs" not in problem_text:
        return None
    kept = [
        ast.get_source_segment(problem_text, node)
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign))
        or (isinstance(node, ast.FunctionDef) and node.name in _PROBLEM_INPUTS_FUNCTIONS)
    ]
    return "\n".join(segment for segment in kept if segment) + "\n"
