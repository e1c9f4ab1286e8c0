"""How far apart neighbouring threads' memory accesses are, read statically from CUDA text.

Whether the threads of a warp read one contiguous stretch of global memory (coalesced),
one address (broadcast) or addresses far apart (uncoalesced), and how many of them fall on
one shared-memory bank, often decides a memory-bound kernel's speed, yet token counts
cannot see it: `threadIdx.x * 4 + k` and `k * blockDim.x + threadIdx.x` hold the same
words. So this module finds each access to a kernel's pointer parameters and `__shared__`
arrays (also through pointers derived from them, vector casts, `__ldg` and atomics),
writes its address in terms of the definitions that precede it, and evaluates it for
threadIdx.x = 0 and threadIdx.x = 1; the difference is the distance between neighbours.

Evaluation runs on a small C expression parser (no compiler, no `eval`), on pairs of
values (one per thread) with C's integer division and remainder. What the text does not
say gets a fixed value: blockIdx 1, blockDim.x from `__launch_bounds__` (else
DEFAULT_BLOCK_X), a loop variable its first value plus LOOP_ITERATIONS steps, any
other name (sizes, scalar parameters) FREE_VALUE. A value loaded from memory is the same
for both threads when its address is; an address that depends on per-thread data (a
scatter, a register array) is *unresolved*, counted as such and never guessed. Given the
side's launches (corpus facts, or a launch pragma's), a launched kernel is read with its
block's extents and its scalar arguments' values instead: `idx % segments` is a stride or
a constant depending on how many segments there are, which only the launch says.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kernelcast.kernels_runtime.source import cuda_text
from kernelcast.kernels_runtime.source.expressions import C_BINARY, C_FUNCTIONS, C_UNARY, ExpressionError

ACCESS_NAMES: tuple[str, ...] = (
    "access_analysed",  # 1 when at least one global access was evaluated
    "global_coalesced_share",  # neighbours 0 < distance <= access width: no gaps between them
    "global_broadcast_share",  # distance 0: the whole warp reads one address
    "global_uncoalesced_share",  # distance > access width: sectors fetched for unused bytes
    "global_stride_log2",  # mean log2(1 + distance / 4 bytes)
    "store_uncoalesced_share",  # the uncoalesced share among global stores only
    "shared_conflict_log2",  # mean log2 of the shared-memory bank-conflict degree
    "unresolved_share",  # accesses found whose address could not be evaluated
)
NEUTRAL: tuple[float, ...] = (0.0,) * len(ACCESS_NAMES)

# Values of what the text leaves open; only differences between the two threads matter.
# A size is larger than any in-bounds index the other values produce (even a grid-stride
# loop's third step), so bounds checks in `i < n ? … : …` and `min(n, …)` take the branch
# that nearly all threads take at run time.
FREE_VALUE = 1 << 24
LOOP_ITERATIONS = 3
DEFAULT_BLOCK_X = 256
GRID_DIM = 1024
BANKS = 32
BANK_BYTES = 4
WARP_SIZE = 32
# Guards against hostile or huge input: definitions followed, parser nesting (macro output: cuda_text's budget).
MAX_DEFINITION_DEPTH = 24
MAX_NESTING = 64
# Functions read per text: a kernel file has a handful; a generated one with hundreds is
# summarised by its first kernels at a bounded cost per keystroke (~0.2 ms a function).
MAX_FUNCTIONS = 32

TYPE_BYTES: dict[str, int] = {
    **dict.fromkeys(("char", "bool", "int8_t", "uint8_t", "uchar", "char1", "uchar1"), 1),
    **dict.fromkeys(("short", "int16_t", "uint16_t", "ushort", "half", "__half", "__nv_bfloat16", "nv_bfloat16", "char2", "uchar2"), 2),
    **dict.fromkeys(
        (
            "int",
            "unsigned",
            "float",
            "int32_t",
            "uint32_t",
            "uint",
            "half2",
            "__half2",
            "__nv_bfloat162",
            "nv_bfloat162",
            "char4",
            "uchar4",
            "short2",
            "ushort2",
        ),
        4,
    ),
    **dict.fromkeys(("long", "double", "size_t", "ptrdiff_t", "int64_t", "uint64_t", "float2", "int2", "uint2", "short4", "ushort4"), 8),
    **dict.fromkeys(("float3", "int3", "uint3"), 12),
    **dict.fromkeys(("float4", "int4", "uint4", "double2", "longlong2", "ulonglong2", "long2", "ulong2"), 16),
    "double4": 32,
}
UNKNOWN_TYPE_BYTES = 4
_FLOAT_TYPES = frozenset(("float", "double", "half", "__half", "__nv_bfloat16", "nv_bfloat16"))
_INTEGER_TYPES = frozenset(
    (
        "char",
        "bool",
        "int8_t",
        "uint8_t",
        "uchar",
        "short",
        "int16_t",
        "uint16_t",
        "ushort",
        "int",
        "unsigned",
        "signed",
        "int32_t",
        "uint32_t",
        "uint",
        "long",
        "size_t",
        "ptrdiff_t",
        "int64_t",
        "uint64_t",
    )
)
_TYPE_WORDS = frozenset(("unsigned", "signed", "long", "short", "int", "char"))
_QUALIFIERS = frozenset(
    (
        "const",
        "constexpr",
        "static",
        "volatile",
        "register",
        "extern",
        "inline",
        "__restrict__",
        "__restrict",
        "restrict",
        "__shared__",
        "__constant__",
        "__device__",
        "__forceinline__",
        "struct",
        "typename",
        "mutable",
    )
)
_BUILTIN_TYPES = frozenset(TYPE_BYTES) | {"void", "auto", "dim3"}
_LOAD_CALLS = frozenset(("__ldg", "__ldca", "__ldcg", "__ldcs", "__ldlu", "__ldcv"))
_STORE_CALLS = frozenset(("__stcg", "__stcs", "__stwb", "__stwt"))
_CONTROL = frozenset(("if", "while", "switch"))
_SKIPPED_WORDS = frozenset(("else", "do", "return", "break", "continue", "goto"))

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {")": "(", "]": "[", "}": "{"}

_PRECEDENCE = {
    "||": 1,
    "&&": 2,
    "|": 3,
    "^": 4,
    "&": 5,
    "==": 6,
    "!=": 6,
    "<": 7,
    "<=": 7,
    ">": 7,
    ">=": 7,
    "<<": 8,
    ">>": 8,
    "+": 9,
    "-": 9,
    "*": 10,
    "/": 10,
    "%": 10,
}
_ASSIGNMENTS = frozenset(("=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^="))

Pair = tuple[float, float]  # (value for threadIdx.x = 0, value for threadIdx.x = 1)


class _Unresolved(ExpressionError):
    """An address that depends on something this analysis cannot know."""


class _TooDeep(_Unresolved):
    """Definitions nested beyond MAX_DEFINITION_DEPTH (not remembered: a shallower path may succeed)."""


class _Unparsable(Exception):
    """Text that is not an expression this parser knows."""


# --- values of the two threads ---------------------------------------------------------------


def _uniform(pair: Pair) -> Pair:
    """A value both threads share (a load from one address, a call with equal arguments)."""
    if pair[0] != pair[1]:
        raise _Unresolved("depends on per-thread data")
    return (FREE_VALUE, FREE_VALUE)


# --- what names stand for ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pointer:
    """Where a pointer points: a memory space and a byte offset Σ node × bytes from its base.

    `pointee_dims` are the remaining dimensions of a multi-dimensional `__shared__` array
    (None where a dimension could not be evaluated); an element is reached when none remain.
    """

    space: str  # "global" | "shared"
    terms: tuple[tuple[_Node, int], ...]
    element_bytes: int
    pointee_dims: tuple[int | None, ...] = ()

    def advanced(self, count: _Node) -> _Pointer:
        if None in self.pointee_dims:
            return replace(self, terms=self.terms + ((_UNKNOWN_NODE, 1),))
        return replace(self, terms=self.terms + ((count, self.element_bytes * math.prod(self.pointee_dims)),))  # type: ignore[arg-type]

    def retyped(self, element_bytes: int) -> _Pointer:
        return replace(self, element_bytes=element_bytes, pointee_dims=())


class _Definition:
    """A local value: the expression it was given, evaluated once per kernel and remembered."""

    __slots__ = ("node", "pair", "failed")

    def __init__(self, node: _Node) -> None:
        self.node = node
        self.pair: Pair | None = None
        self.failed = False

    def evaluate(self, depth: int) -> Pair:
        if self.pair is not None:
            return self.pair
        if self.failed:
            raise _Unresolved("unresolved definition")
        if depth > MAX_DEFINITION_DEPTH:
            raise _TooDeep("definitions nested too deep")
        try:
            self.pair = self.node.evaluate(depth + 1)
        except _TooDeep:
            raise
        except ExpressionError:  # unresolved here, or C arithmetic without a value (a division by zero)
            self.failed = True
            raise
        return self.pair


class _Opaque:
    """A name whose value only the run knows: UNIFORM across threads (a size, a scalar
    parameter) or PER_THREAD (a register array, a struct, a variable declared but not set)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNIFORM = _Opaque("UNIFORM")
PER_THREAD = _Opaque("PER_THREAD")
Binding = _Definition | _Pointer | _Opaque


# --- expression nodes ----------------------------------------------------------------------------


class _Node:
    """An expression; `pointer` when it is one into tracked memory, `location` when it is an access."""

    __slots__ = ("pointer", "location")

    def __init__(self) -> None:
        self.pointer: _Pointer | None = None
        self.location: _Pointer | None = None

    def evaluate(self, depth: int) -> Pair:
        raise _Unresolved(type(self).__name__)

    def children(self) -> tuple[_Node, ...]:
        return ()


_UNKNOWN_NODE = _Node()  # evaluates to unresolved


class _Constant(_Node):
    __slots__ = ("pair",)

    def __init__(self, pair: Pair) -> None:
        super().__init__()
        self.pair = pair

    def evaluate(self, depth: int) -> Pair:
        return self.pair


class _Reference(_Node):
    __slots__ = ("name", "binding")

    def __init__(self, name: str, binding: Binding | None) -> None:
        super().__init__()
        self.name = name
        self.binding = binding
        if isinstance(binding, _Pointer):
            self.pointer = binding

    def evaluate(self, depth: int) -> Pair:
        if isinstance(self.binding, _Definition):
            return self.binding.evaluate(depth)
        if self.binding is None or self.binding is UNIFORM:
            return (FREE_VALUE, FREE_VALUE)
        raise _Unresolved(f"{self.name} is known only at run time")


class _Unary(_Node):
    __slots__ = ("operator", "operand")

    def __init__(self, operator: str, operand: _Node) -> None:
        super().__init__()
        self.operator = operator
        self.operand = operand

    def evaluate(self, depth: int) -> Pair:
        operation = C_UNARY[self.operator]
        first, second = self.operand.evaluate(depth)
        return (operation(first), operation(second))

    def children(self) -> tuple[_Node, ...]:
        return (self.operand,)


class _Binary(_Node):
    __slots__ = ("operator", "left", "right")

    def __init__(self, operator: str, left: _Node, right: _Node) -> None:
        super().__init__()
        self.operator = operator
        self.left = left
        self.right = right
        if operator in ("+", "-") and left.pointer is not None and right.pointer is None:
            self.pointer = left.pointer.advanced(right if operator == "+" else _Unary("-", right))
        elif operator == "+" and right.pointer is not None and left.pointer is None:
            self.pointer = right.pointer.advanced(left)

    def evaluate(self, depth: int) -> Pair:
        left = self.left.evaluate(depth)
        if self.operator in ("&&", "||"):  # the right side only for the threads it decides
            short_circuit = int(self.operator == "||")
            needs_right = [bool(value) != bool(short_circuit) for value in left]
            right = self.right.evaluate(depth) if any(needs_right) else left
            values = [int(bool(right[lane])) if needs_right[lane] else short_circuit for lane in (0, 1)]
            return (values[0], values[1])
        right = self.right.evaluate(depth)
        operation = C_BINARY[self.operator]
        return (operation(left[0], right[0]), operation(left[1], right[1]))

    def children(self) -> tuple[_Node, ...]:
        return (self.left, self.right)


class _Conditional(_Node):
    __slots__ = ("condition", "then", "otherwise")

    def __init__(self, condition: _Node, then: _Node, otherwise: _Node) -> None:
        super().__init__()
        self.condition = condition
        self.then = then
        self.otherwise = otherwise

    def evaluate(self, depth: int) -> Pair:
        chosen = [self.then if value else self.otherwise for value in self.condition.evaluate(depth)]
        first = chosen[0].evaluate(depth)
        second = first if chosen[1] is chosen[0] else chosen[1].evaluate(depth)
        return (first[0], second[1])

    def children(self) -> tuple[_Node, ...]:
        return (self.condition, self.then, self.otherwise)


class _Cast(_Node):
    """`(T)x`, `T(x)`, `static_cast<T>(x)`: a pointer cast changes the element size."""

    __slots__ = ("convert", "operand")

    def __init__(self, type_words: list[str], is_pointer: bool, operand: _Node, sizes: dict[str, int]) -> None:
        super().__init__()
        self.operand = operand
        last = next((word for word in reversed(type_words) if word not in _QUALIFIERS), "")
        self.convert: Callable[[float], float] | None = None
        if is_pointer:
            if operand.pointer is not None:
                self.pointer = operand.pointer.retyped(_type_bytes(type_words, sizes))
        elif last in _FLOAT_TYPES:
            self.convert = float
        elif last in _INTEGER_TYPES:
            self.convert = _truncate

    def evaluate(self, depth: int) -> Pair:
        first, second = self.operand.evaluate(depth)
        if self.convert is None:
            return (first, second)
        return (self.convert(first), self.convert(second))

    def children(self) -> tuple[_Node, ...]:
        return (self.operand,)


def _truncate(value: float) -> int:
    if isinstance(value, float) and not math.isfinite(value):
        raise _Unresolved("not a finite number")
    return int(value)


class _Call(_Node):
    """A call: min/max/abs computed; `__ldg`-like loads and atomics/stores are accesses; any
    other call with arguments equal for both threads is uniform, else unresolved."""

    __slots__ = ("name", "arguments", "writes")

    def __init__(self, name: str, arguments: list[_Node]) -> None:
        super().__init__()
        self.name = name
        self.arguments = arguments
        self.writes = name.startswith("atomic") or name in _STORE_CALLS
        target = arguments[0].pointer if arguments else None
        if (self.writes or name in _LOAD_CALLS) and target is not None and not target.pointee_dims:
            self.location = target

    def evaluate(self, depth: int) -> Pair:
        if self.name in _LOAD_CALLS and self.location is not None:
            return _uniform(_offset(self.location, depth))
        values = [argument.evaluate(depth) for argument in self.arguments]
        operation = C_FUNCTIONS.get(self.name)
        if operation is not None and values:
            return (operation(*(value[0] for value in values)), operation(*(value[1] for value in values)))
        if not values:
            raise _Unresolved(f"{self.name}() may differ between threads")
        for value in values:
            _uniform(value)
        return (FREE_VALUE, FREE_VALUE)

    def children(self) -> tuple[_Node, ...]:
        return tuple(self.arguments)


class _Subscript(_Node):
    __slots__ = ("base", "index")

    def __init__(self, base: _Node, index: _Node) -> None:
        super().__init__()
        self.base = base
        self.index = index
        pointer = base.pointer
        if pointer is not None:
            if pointer.pointee_dims:  # a row of a multi-dimensional array: still a pointer
                self.pointer = replace(pointer.advanced(index), pointee_dims=pointer.pointee_dims[1:])
            else:
                self.location = pointer.advanced(index)

    def evaluate(self, depth: int) -> Pair:
        if self.location is None:
            raise _Unresolved("an element of a per-thread array")
        return _uniform(_offset(self.location, depth))

    def children(self) -> tuple[_Node, ...]:
        return (self.base, self.index)


class _Dereference(_Node):
    __slots__ = ("operand",)

    def __init__(self, operand: _Node) -> None:
        super().__init__()
        self.operand = operand
        if operand.pointer is not None and not operand.pointer.pointee_dims:
            self.location = operand.pointer

    def evaluate(self, depth: int) -> Pair:
        if self.location is None:
            raise _Unresolved("dereference of an untracked pointer")
        return _uniform(_offset(self.location, depth))

    def children(self) -> tuple[_Node, ...]:
        return (self.operand,)


class _AddressOf(_Node):
    __slots__ = ("operand",)

    def __init__(self, operand: _Node) -> None:
        super().__init__()
        self.operand = operand
        if operand.location is not None:
            self.pointer = operand.location

    def children(self) -> tuple[_Node, ...]:
        return (self.operand,)


class _Member(_Node):
    """`s.field`: uniform when `s` is, per thread otherwise."""

    __slots__ = ("base",)

    def __init__(self, base: _Node) -> None:
        super().__init__()
        self.base = base

    def evaluate(self, depth: int) -> Pair:
        return _uniform(self.base.evaluate(depth))

    def children(self) -> tuple[_Node, ...]:
        return (self.base,)


class _Assignment(_Node):
    """`target op= value`, and `++`/`--` as `+= 1`/`-= 1`; recorded as definitions or stores."""

    __slots__ = ("operator", "target", "value")

    def __init__(self, operator: str, target: _Node, value: _Node) -> None:
        super().__init__()
        self.operator = operator
        self.target = target
        self.value = value

    def children(self) -> tuple[_Node, ...]:
        return (self.target, self.value)


def _evaluated(evaluate: Callable[[], Pair]) -> Pair | None:
    """A value for the two threads, or None where C arithmetic on it fails or is unknown."""
    try:
        return evaluate()
    except (RecursionError, ArithmeticError, TypeError, ValueError):  # ExpressionError and _Unresolved are ValueErrors
        return None


def _offset(pointer: _Pointer, depth: int) -> Pair:
    first: float = 0
    second: float = 0
    for node, scale in pointer.terms:
        a, b = node.evaluate(depth)
        first += a * scale
        second += b * scale
    return (first, second)


def _type_bytes(words: list[str], sizes: dict[str, int]) -> int:
    for word in reversed(words):
        if word in sizes:
            return sizes[word]
        if word not in _QUALIFIERS:
            break
    return UNKNOWN_TYPE_BYTES


# --- text to tokens ------------------------------------------------------------------------------


def _tokens(code: str, language: str) -> list[str]:
    """Tokens of the text after comments, directives and object/function-like macros."""
    if language != "cuda":  # CUDA in a one-line Python string spells its line breaks \n
        code = code.replace("\\n", "\n").replace("\\t", " ")
    return cuda_text.MacroTable.of(code).expand(cuda_text.tokens(cuda_text.mask(code, strings=False)))


# --- parsing -------------------------------------------------------------------------------------


class _Scope:
    """Bindings by block; the latest definition of a name before an access is the one it sees.

    A `for` header's variables go one block deeper, into the loop body's block.
    """

    def __init__(self, outer: dict[str, Binding]) -> None:
        self.blocks: list[dict[str, Binding]] = [dict(outer)]
        self.depth = 0

    def open(self) -> None:
        self.depth += 1
        if len(self.blocks) <= self.depth:
            self.blocks.append({})

    def close(self) -> None:
        if self.depth > 0:
            del self.blocks[self.depth :]
            self.depth -= 1

    def define(self, name: str, binding: Binding, deeper: bool = False) -> None:
        level = self.depth + 1 if deeper else self.depth
        while len(self.blocks) <= level:
            self.blocks.append({})
        self.blocks[level][name] = binding
        for block in self.blocks[level + 1 :]:
            block.pop(name, None)

    def assign(self, name: str, binding: Binding) -> None:
        for block in reversed(self.blocks):
            if name in block:
                block[name] = binding
                return
        self.define(name, binding)

    def lookup(self, name: str) -> Binding | None:
        for block in reversed(self.blocks):
            found = block.get(name)
            if found is not None:
                return found
        return None


@dataclass
class _Access:
    space: str
    store: bool
    width: int
    distance: int | None  # bytes between threadIdx.x = 0 and 1; None: unresolved


class _Reader:
    """Parses one function body (or the file's constants) and records its accesses."""

    def __init__(
        self,
        tokens: list[str],
        partner: list[int],
        types: set[str],
        sizes: dict[str, int],
        scope: _Scope,
        block: tuple[int, int, int],
        accesses: list[_Access],
    ) -> None:
        self.tokens = tokens
        self.partner = partner
        self.types = types
        self.sizes = sizes
        self.scope = scope
        self.accesses = accesses
        self.builtins = {
            "threadIdx": {"x": (0, 1), "y": (0, 0), "z": (0, 0)},
            "blockIdx": {"x": (1, 1), "y": (1, 1), "z": (1, 1)},
            "blockDim": {axis: (extent, extent) for axis, extent in zip("xyz", block)},
            "gridDim": {"x": (GRID_DIM, GRID_DIM), "y": (GRID_DIM, GRID_DIM), "z": (GRID_DIM, GRID_DIM)},
        }
        self.position = 0
        self.limit = 0
        self.nesting = 0

    # statements

    def walk(self, index: int, end: int) -> None:
        tokens = self.tokens
        while index < end:
            token = tokens[index]
            following = tokens[index + 1] if index + 1 < end else ""
            if token == "{":
                self.scope.open()
                index += 1
            elif token == "}":
                self.scope.close()
                index += 1
            elif token in _CONTROL and "(" in tokens[index + 1 : index + 3]:  # also `if constexpr (`
                opening = index + 1 if following == "(" else index + 2
                close = min(self.partner[opening], end)
                self.expression_statement(opening + 1, close)
                index = close + 1
            elif token == "for" and following == "(":
                close = min(self.partner[index + 1], end)
                self.for_header(index + 2, close)
                index = close + 1
            elif token in ("asm", "__asm__", "__asm"):
                while index < end and tokens[index] != "(":
                    index += 1
                index = min(self.partner[index], end) + 1 if index < end else end
            elif token in ("case", "default"):
                while index < end and tokens[index] not in (":", ";", "{", "}"):
                    index += 1
                index += 1
            elif token in _SKIPPED_WORDS or token == ";":
                index += 1
            else:
                stop = self.statement_end(index, end)
                self.statement(index, stop)
                index = max(stop, index + 1)

    def statement_end(self, index: int, end: int) -> int:
        tokens = self.tokens
        while index < end:
            token = tokens[index]
            if token == "(" or token == "[":
                index = self.partner[index] + 1
            elif token in (";", "{", "}"):
                return index
            else:
                index += 1
        return end

    def statement(self, start: int, stop: int) -> None:
        try:
            if self.declaration(start, stop):
                return
        except _Unparsable:
            self.count_unparsed(start, stop)
            return
        self.expression_statement(start, stop)

    def count_unparsed(self, start: int, stop: int) -> None:
        """Text the parser does not know: its subscripts of tracked pointers are unresolved."""
        for index in range(start, stop - 1):
            if self.tokens[index + 1] == "[" and (index == start or self.tokens[index - 1] not in (".", "->")):
                binding = self.scope.lookup(self.tokens[index])
                if isinstance(binding, _Pointer):
                    self.accesses.append(_Access(binding.space, False, binding.element_bytes, None))

    def expression_statement(self, start: int, stop: int) -> None:
        try:
            nodes = self.expression_list(start, stop)
        except _Unparsable:
            self.count_unparsed(start, stop)
            return
        for node in nodes:
            self.record(node)
            if isinstance(node, _Assignment) and isinstance(node.target, _Reference):
                self.scope.assign(node.target.name, self.assigned(node.target, node))

    def assigned(self, target: _Reference, node: _Assignment) -> Binding:
        """What a name stands for after `name op= value`."""
        if node.operator == "=":
            if node.value.pointer is not None:
                return node.value.pointer
            return PER_THREAD if isinstance(target.binding, _Pointer) else _Definition(node.value)
        if isinstance(target.binding, _Pointer):
            if node.operator in ("+=", "-="):
                step = node.value if node.operator == "+=" else _Unary("-", node.value)
                return target.binding.advanced(step)
            return PER_THREAD
        return _Definition(_Binary(node.operator[:-1], target, node.value))

    def for_header(self, start: int, stop: int) -> None:
        """`for (init; condition; step)`: a loop variable is its first value plus LOOP_ITERATIONS steps."""
        parts = self.split(start, stop, ";")
        if len(parts) != 3:  # a range-for
            return
        (init_start, init_stop), (condition_start, condition_stop), (step_start, step_stop) = parts
        steps: dict[str, _Node] = {}
        try:
            for node in self.expression_list(step_start, step_stop):
                if isinstance(node, _Assignment) and isinstance(node.target, _Reference):
                    if node.operator in ("+=", "-="):
                        steps[node.target.name] = node.value if node.operator == "+=" else _Unary("-", node.value)
        except _Unparsable:
            pass
        try:
            declared = self.declaration(init_start, init_stop, loop_steps=steps)
            if not declared:
                for node in self.expression_list(init_start, init_stop):
                    self.record(node)
                    if isinstance(node, _Assignment) and node.operator == "=" and isinstance(node.target, _Reference):
                        self.scope.define(node.target.name, self.loop_binding(node.target.name, node.value, steps), deeper=True)
        except _Unparsable:
            self.count_unparsed(init_start, init_stop)
        for start, stop in ((condition_start, condition_stop), (step_start, step_stop)):
            try:
                for node in self.expression_list(start, stop):
                    self.record(node)
            except _Unparsable:
                self.count_unparsed(start, stop)

    def loop_binding(self, name: str, first: _Node, steps: dict[str, _Node]) -> Binding:
        if first.pointer is not None:
            return first.pointer
        step = steps.get(name)
        if step is None:
            return _Definition(first)
        return _Definition(_Binary("+", first, _Binary("*", _Constant((LOOP_ITERATIONS, LOOP_ITERATIONS)), step)))

    def declaration(self, start: int, stop: int, loop_steps: dict[str, _Node] | None = None) -> bool:
        """Binds the names a declaration statement declares; False when it is not one."""
        tokens = self.tokens
        index = start
        shared = False
        while index < stop and (tokens[index] in _QUALIFIERS or tokens[index] in ("__align__", "alignas")):
            shared = shared or tokens[index] == "__shared__"
            if tokens[index] in ("__align__", "alignas") and index + 1 < stop and tokens[index + 1] == "(":
                index = self.partner[index + 1]
            index += 1
        type_start = index
        if index < stop and tokens[index] in _TYPE_WORDS:
            while index < stop and tokens[index] in _TYPE_WORDS:
                index += 1
        elif index < stop and _is_identifier(tokens[index]):
            while index + 2 < stop and tokens[index + 1] == "::" and _is_identifier(tokens[index + 2]):
                index += 2
            index += 1
            if tokens[index - 1] not in self.types:
                lookahead = index
                while lookahead < stop and tokens[lookahead] in ("*", "&", "const", "__restrict__"):
                    lookahead += 1
                if not (
                    lookahead < stop
                    and _is_identifier(tokens[lookahead])
                    and (lookahead + 1 >= stop or tokens[lookahead + 1] in ("=", ";", ",", "[", "(", ":"))
                ):
                    return False
        else:
            return False
        type_words = [word for word in tokens[type_start:index] if word != "::"]
        element_bytes = _type_bytes(type_words, self.sizes)
        for declarator_start, declarator_stop in self.split(index, stop, ","):
            self.declarator(declarator_start, declarator_stop, type_words, element_bytes, shared, loop_steps)
        return True

    def declarator(
        self, start: int, stop: int, type_words: list[str], element_bytes: int, shared: bool, loop_steps: dict[str, _Node] | None
    ) -> None:
        tokens = self.tokens
        index = start
        is_pointer = False
        while index < stop and tokens[index] in ("*", "&", "const", "__restrict__", "__restrict"):
            is_pointer = is_pointer or tokens[index] == "*"
            index += 1
        if index >= stop or not _is_identifier(tokens[index]):
            raise _Unparsable("declarator without a name")
        name = tokens[index]
        index += 1
        dims: list[int | None] = []
        while index < stop and tokens[index] == "[":
            close = min(self.partner[index], stop)
            dims.append(self.dimension(index + 1, close))
            index = close + 1
        if index < stop and tokens[index] == "(" and not dims:  # constructor-style initialiser
            init = (index + 1, min(self.partner[index], stop))
        elif index < stop and tokens[index] == "=":
            init = (index + 1, stop)
        elif index < stop:
            raise _Unparsable("unexpected text in a declarator")
        else:
            init = None
        if dims:
            if shared:
                self.scope.define(name, _Pointer("shared", (), element_bytes, tuple(dims[1:])))
            else:
                self.scope.define(name, PER_THREAD)
            return
        if init is None:
            self.scope.define(name, PER_THREAD)
            return
        try:
            value = self.parse(*init)
        except _Unparsable:
            self.count_unparsed(*init)
            self.scope.define(name, PER_THREAD)
            return
        self.record(value)
        if loop_steps is not None:
            self.scope.define(name, self.loop_binding(name, value, loop_steps), deeper=True)
        elif value.pointer is not None and (is_pointer or type_words[-1:] == ["auto"]):
            pointer = value.pointer if type_words[-1:] == ["auto"] else value.pointer.retyped(element_bytes)
            self.scope.define(name, pointer)
        elif is_pointer:
            self.scope.define(name, PER_THREAD)
        else:
            self.scope.define(name, _Definition(value))

    def dimension(self, start: int, stop: int) -> int | None:
        """An array dimension, when the text fixes it (a template parameter does not)."""
        if start == stop:
            return None
        try:
            node = self.parse(start, stop)
        except _Unparsable:
            return None
        pair = None if _has_free_name(node) else _evaluated(lambda: node.evaluate(0))
        return pair[0] if pair is not None and isinstance(pair[0], int) and pair[0] == pair[1] and pair[0] > 0 else None

    def split(self, start: int, stop: int, separator: str) -> list[tuple[int, int]]:
        parts: list[tuple[int, int]] = []
        index = part_start = start
        while index < stop:
            token = self.tokens[index]
            if token in _OPENERS:
                index = self.partner[index]
            elif token == separator:
                parts.append((part_start, index))
                part_start = index + 1
            index += 1
        parts.append((part_start, stop))
        return parts

    def record(self, node: _Node) -> None:
        found: list[tuple[_Pointer, bool]] = []
        _collect(node, False, found)
        for location, store in found:
            offsets = _evaluated(functools.partial(_offset, location, 0))
            distance: int | None = None
            if offsets is not None:
                difference = offsets[1] - offsets[0]
                if isinstance(difference, int):
                    distance = abs(difference)
            self.accesses.append(_Access(location.space, store, location.element_bytes, distance))

    # expressions

    def expression_list(self, start: int, stop: int) -> list[_Node]:
        return [self.parse(part_start, part_stop) for part_start, part_stop in self.split(start, stop, ",") if part_start < part_stop]

    def parse(self, start: int, stop: int) -> _Node:
        self.position, self.limit, self.nesting = start, stop, 0
        node = self.assignment()
        if self.position != stop:
            raise _Unparsable(f"unexpected {self.peek()!r}")
        return node

    def peek(self, ahead: int = 0) -> str:
        index = self.position + ahead
        return self.tokens[index] if index < self.limit else ""

    def take(self) -> str:
        token = self.peek()
        if not token:
            raise _Unparsable("unexpected end")
        self.position += 1
        return token

    def expect(self, token: str) -> None:
        if self.take() != token:
            raise _Unparsable(f"expected {token!r}")

    def assignment(self) -> _Node:
        target = self.conditional()
        if self.peek() in _ASSIGNMENTS:
            operator = self.take()
            return _Assignment(operator, target, self.assignment())
        return target

    def conditional(self) -> _Node:
        condition = self.binary(1)
        if self.peek() != "?":
            return condition
        self.take()
        then = self.assignment()
        self.expect(":")
        return _Conditional(condition, then, self.conditional())

    def binary(self, lowest: int) -> _Node:
        left = self.unary()
        while True:
            precedence = _PRECEDENCE.get(self.peek(), 0)
            if precedence < lowest:
                return left
            operator = self.take()
            left = _Binary(operator, left, self.binary(precedence + 1))

    def unary(self) -> _Node:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise _Unparsable("nested too deep")
        try:
            token = self.peek()
            if token in ("-", "+", "!", "~"):
                self.take()
                return _Unary(token, self.unary())
            if token == "*":
                self.take()
                return _Dereference(self.unary())
            if token == "&":
                self.take()
                return _AddressOf(self.unary())
            if token in ("++", "--"):
                self.take()
                operand = self.unary()
                return _Assignment(token[0] + "=", operand, _Constant((1, 1)))
            if token == "(" and self.is_type_start(self.peek(1)):
                self.take()
                type_words, is_pointer = self.type_name(")")
                return _Cast(type_words, is_pointer, self.unary(), self.sizes)
            if token == "sizeof":
                return self.size_of()
            return self.postfix(self.primary())
        finally:
            self.nesting -= 1

    def size_of(self) -> _Node:
        self.take()
        if self.peek() == "(" and self.is_type_start(self.peek(1)):
            self.take()
            type_words, is_pointer = self.type_name(")")
            size = 8 if is_pointer else _type_bytes(type_words, self.sizes)
            return _Constant((size, size))
        self.unary()
        return _UNKNOWN_NODE

    def is_type_start(self, token: str) -> bool:
        return token in self.types or token in _TYPE_WORDS or token in ("const", "volatile", "unsigned", "signed", "struct")

    def type_name(self, closer: str) -> tuple[list[str], bool]:
        """Type words up to `closer` (consumed) and whether the type is a pointer."""
        words: list[str] = []
        is_pointer = False
        while True:
            token = self.take()
            if token == closer:
                return words, is_pointer
            if token == "*":
                is_pointer = True
            elif _is_identifier(token):
                if token not in _QUALIFIERS:
                    words.append(token)
            elif token not in ("&", "::"):
                raise _Unparsable("not a type")

    def postfix(self, node: _Node) -> _Node:
        while True:
            token = self.peek()
            if token == "[":
                self.take()
                index = self.assignment()
                self.expect("]")
                node = _Subscript(node, index)
            elif token in (".", "->"):
                self.take()
                member = self.take()
                if not _is_identifier(member):
                    raise _Unparsable("member name expected")
                node = _Member(node)
                if self.peek() == "(":
                    node = _Call(member, self.arguments())
            elif token in ("++", "--"):
                self.take()
                node = _Assignment(token[0] + "=", node, _Constant((1, 1)))
            elif token == "(":
                node = _Call("", self.arguments())
            else:
                return node

    def arguments(self) -> list[_Node]:
        self.expect("(")
        found: list[_Node] = []
        if self.peek() == ")":
            self.take()
            return found
        while True:
            found.append(self.assignment())
            token = self.take()
            if token == ")":
                return found
            if token != ",":
                raise _Unparsable("expected ',' or ')'")

    def primary(self) -> _Node:
        token = self.take()
        if token == "(":
            node = self.assignment()
            self.expect(")")
            return node
        if token[0].isdigit() or (token[0] == "." and token[1:2].isdigit()):
            value = _number(token)
            return _Constant((value, value))
        if token == "::":
            token = self.take()
        if not _is_identifier(token):
            raise _Unparsable(f"unexpected {token!r}")
        while self.peek() == "::" and _is_identifier(self.peek(1)):
            self.take()
            token = self.take()
        if token in ("static_cast", "reinterpret_cast", "const_cast") and self.peek() == "<":
            self.take()
            type_words, is_pointer = self.type_name(">")
            self.expect("(")
            operand = self.assignment()
            self.expect(")")
            return _Cast(type_words, is_pointer, operand, self.sizes)
        components = self.builtins.get(token)
        if components is not None and self.peek() == "." and self.peek(1) in components:
            self.take()
            pair = components[self.take()]
            return _Constant(pair)
        if token == "warpSize":
            return _Constant((32, 32))
        if self.peek() == "(":
            if token in self.types or token in _TYPE_WORDS:  # T(x)
                self.take()
                operand = self.assignment()
                self.expect(")")
                return _Cast([token], False, operand, self.sizes)
            return _Call(token, self.arguments())
        return _Reference(token, self.scope.lookup(token))


def _collect(node: _Node, store: bool, found: list[tuple[_Pointer, bool]]) -> None:
    """The accesses in an expression: (location, is a store); `&p[i]` alone is no access."""
    if isinstance(node, _Assignment):
        _collect(node.target, True, found)
        _collect(node.value, False, found)
        return
    if isinstance(node, _AddressOf):
        inner = node.operand
        for child in inner.children() if inner.location is not None else (inner,):
            _collect(child, False, found)
        return
    if node.location is not None:
        found.append((node.location, store or (isinstance(node, _Call) and node.writes)))
    for child in node.children():
        _collect(child, False, found)


def _has_free_name(node: _Node) -> bool:
    if isinstance(node, _Reference) and (node.binding is None or node.binding is UNIFORM):
        return True
    return any(_has_free_name(child) for child in node.children())


def _is_identifier(token: str) -> bool:
    return bool(token) and (token[0].isalpha() or token[0] == "_")


def _number(token: str) -> float:
    """A C literal's value: hex, octal, decimal integers (suffixes dropped) and floats."""
    lowered = token.lower()
    if lowered.startswith("0x"):
        return int(lowered[2:].rstrip("ul") or "0", 16)
    digits = lowered.rstrip("ulf")
    try:
        if "." in digits or "e" in digits or lowered.endswith("f"):
            return float(digits)
        return int(digits, 8) if len(digits) > 1 and digits.startswith("0") else int(digits)
    except ValueError as error:
        raise _Unparsable(f"not a number: {token}") from error


# --- the file ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Function:
    kernel: bool
    name: str
    parameters: tuple[int, int]
    body: tuple[int, int]
    launch_bounds: tuple[int, int] | None


def _scan(tokens: list[str], partner: list[int], types: set[str], sizes: dict[str, int]) -> tuple[list[_Function], list[tuple[int, int]]]:
    """Functions with bodies, and the file-level `const`/`constexpr` declarations; also
    records typedefs, `using` aliases, struct sizes and template type parameters."""
    functions: list[_Function] = []
    constants: list[tuple[int, int]] = []
    count = len(tokens)
    index = 0
    while index < count:
        token = tokens[index]
        if token in ("__global__", "__device__"):
            function, index = _function_at(tokens, partner, index)
            if function is not None:
                functions.append(function)
            continue
        if token == "typedef" or (token == "using" and index + 2 < count and tokens[index + 2] == "="):
            end = index
            while end < count and tokens[end] != ";" and tokens[end] != "{":
                end += 1
            words = [word for word in tokens[index + 1 : end] if _is_identifier(word) and word not in _QUALIFIERS]
            if token == "using" and len(words) >= 2:
                name, aliased = words[0], words[1:]
            elif len(words) >= 2:
                name, aliased = words[-1], words[:-1]
            else:
                index = end + 1
                continue
            types.add(name)
            if "*" not in tokens[index:end]:
                sizes[name] = _type_bytes(aliased, sizes)
            index = end + 1
            continue
        if token in ("struct", "class") and index + 1 < count:
            index = _struct_at(tokens, partner, index, types, sizes)
            continue
        if token == "template" and index + 1 < count and tokens[index + 1] == "<":
            end = index + 2
            while end < count and tokens[end] != ">":
                if tokens[end] in ("typename", "class") and end + 1 < count and _is_identifier(tokens[end + 1]):
                    types.add(tokens[end + 1])
                end += 1
            index = end
            continue
        if token in ("const", "constexpr") and (index == 0 or tokens[index - 1] in (";", "}", "{", "static")):
            end = index
            while end < count and tokens[end] not in (";", "{", "}"):
                end += 1
            constants.append((index, end))
            index = end
            continue
        index += 1
    return functions, constants


def _function_at(tokens: list[str], partner: list[int], index: int) -> tuple[_Function | None, int]:
    kernel = tokens[index] == "__global__"
    count = len(tokens)
    launch_bounds = None
    position = index + 1
    while position < count and tokens[position] not in ("(", ";", "{", "}", "=", "["):
        if tokens[position] == "__launch_bounds__" and position + 1 < count and tokens[position + 1] == "(":
            launch_bounds = (position + 2, partner[position + 1])
            position = partner[position + 1]
        position += 1
    if position >= count or position == index + 1 or tokens[position] != "(" or not _is_identifier(tokens[position - 1]):
        return None, position
    name = tokens[position - 1]
    parameters = (position + 1, partner[position])
    body = partner[position] + 1
    while body < count and tokens[body] not in ("{", ";", "}"):
        body += 1
    if body >= count or tokens[body] != "{":
        return None, body
    return _Function(kernel, name, parameters, (body + 1, partner[body]), launch_bounds), partner[body] + 1


def _struct_at(tokens: list[str], partner: list[int], index: int, types: set[str], sizes: dict[str, int]) -> int:
    """`struct __align__(N) Name { members }`: its size is N, else the sum of its members."""
    count = len(tokens)
    position = index + 1
    alignment = None
    if position + 2 < count and tokens[position] in ("__align__", "alignas") and tokens[position + 1] == "(":
        value = tokens[position + 2]
        alignment = int(value) if value.isdigit() else None
        position = partner[position + 1] + 1
    if position + 1 >= count or not _is_identifier(tokens[position]) or tokens[position + 1] != "{":
        return position
    name = tokens[position]
    close = partner[position + 1]
    types.add(name)
    if alignment is not None:
        sizes[name] = alignment
        return close + 1
    total = 0
    member_start = position + 2
    for member_end in range(position + 2, min(close, count) + 1):
        if member_end == close or tokens[member_end] == ";":
            member = tokens[member_start:member_end]
            words = [word for word in member if _is_identifier(word) and word not in _QUALIFIERS]
            if len(words) >= 2:
                names = 1 + member.count(",")
                elements = math.prod(int(token) for token in member if token.isdigit()) if "[" in member else 1
                total += _type_bytes(words[:1], sizes) * names * elements
            member_start = member_end + 1
    if total:
        sizes[name] = total
    return close + 1


def _parameters(tokens: list[str], start: int, stop: int, sizes: dict[str, int]) -> dict[str, Binding]:
    bindings: dict[str, Binding] = {}
    for part in _split_tokens(tokens[start:stop]):
        if "=" in part:
            part = part[: part.index("=")]
        words = [word for word in part if _is_identifier(word)]
        if not words or words == ["void"]:
            continue
        name = words[-1]
        if "*" in part or "[" in part:
            type_words = [word for word in words[:-1] if word not in _QUALIFIERS]
            bindings[name] = _Pointer("global", (), _type_bytes(type_words, sizes))
        else:
            bindings[name] = UNIFORM
    return bindings


def _split_tokens(tokens: list[str]) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    depth = 0
    for token in tokens:
        if token in _OPENERS or token == "<":
            depth += 1
        elif token in _CLOSERS or token == ">":
            depth -= 1
        elif token == "," and depth == 0:
            parts.append([])
            continue
        parts[-1].append(token)
    return parts


@dataclass(frozen=True)
class _LaunchShape:
    """What a launch tells the reader of its kernel: the block's extents and, by parameter position, the scalar values."""

    block: tuple[int, int, int]
    scalars: tuple[int | float | None, ...]


def _launch_shapes(launches: Sequence[dict[str, Any]]) -> tuple[tuple[str, _LaunchShape], ...]:
    """Each launched kernel's first launch, hashable (the summary is cached on it)."""
    shapes: dict[str, _LaunchShape] = {}
    for launch in launches:
        kernel = launch.get("kernel") if isinstance(launch, dict) else None
        if not isinstance(kernel, str) or kernel in shapes:
            continue
        shapes[kernel] = _LaunchShape(launch_extents(launch.get("block")) or (0, 0, 0), launch_scalars(launch))
    return tuple(shapes.items())


def launch_extents(values: Any) -> tuple[int, int, int] | None:
    """A grid's or block's x, y, z (missing ones 1), or None when the launch gives none."""
    found = [int(v) for v in values or () if _is_number(v) and v >= 1]
    return tuple((found + [1, 1, 1])[:3]) if found else None  # type: ignore[return-value]


def launch_scalars(launch: dict[str, Any]) -> tuple[int | float | None, ...]:
    """Each argument's scalar value by position; None for an array or a value the launch does not give."""
    values = (arg.get("value") if isinstance(arg, dict) else None for arg in launch.get("args") or ())
    return tuple(value if _is_number(value) else None for value in values)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _block(reader: _Reader, function: _Function, shape: _LaunchShape | None) -> tuple[int, int, int]:
    """blockDim: the launch's block, else `__launch_bounds__`'s first argument as x, else DEFAULT_BLOCK_X."""
    if shape is not None and shape.block[0]:
        return shape.block
    if function.launch_bounds is not None:
        start, stop = function.launch_bounds
        first_stop = reader.split(start, stop, ",")[0][1]
        try:
            node = reader.parse(start, first_stop)
        except _Unparsable:
            node = None
        pair = _evaluated(lambda: node.evaluate(0)) if node is not None else None
        if pair is not None and isinstance(pair[0], int) and pair[0] == pair[1] and 1 <= pair[0] <= 1024:
            return (pair[0], 1, 1)
    return (DEFAULT_BLOCK_X, 1, 1)


def _bound_parameters(parameters: dict[str, Binding], shape: _LaunchShape | None) -> dict[str, Binding]:
    """Scalar parameters the launch gives a value become that value for both threads."""
    if shape is None:
        return parameters
    bound = dict(parameters)
    for name, value in zip(parameters, shape.scalars):
        if value is not None and bound[name] is UNIFORM:
            bound[name] = _Definition(_Constant((value, value)))
    return bound


def _accesses(code: str, language: str, launches: tuple[tuple[str, _LaunchShape], ...]) -> list[_Access]:
    tokens = _tokens(code, language)
    partner = cuda_text.token_partners(tokens)
    types = set(_BUILTIN_TYPES)
    sizes = dict(TYPE_BYTES)
    functions, constants = _scan(tokens, partner, types, sizes)
    constant_scope = _Scope({})
    accesses: list[_Access] = []
    constant_reader = _Reader(tokens, partner, types, sizes, constant_scope, (DEFAULT_BLOCK_X, 1, 1), [])
    for start, stop in constants:
        constant_reader.statement(start, stop)
    shapes = dict(launches)
    # Kernels first (stable: in file order), then helpers; past MAX_FUNCTIONS the rest of a
    # generated file adds little to the shares and would cost every keystroke.
    for function in sorted(functions, key=lambda function: not function.kernel)[:MAX_FUNCTIONS]:
        shape = shapes.get(function.name) if function.kernel else None
        parameters = _bound_parameters(_parameters(tokens, *function.parameters, sizes), shape)
        scope = _Scope({**constant_scope.blocks[0], **parameters})
        reader = _Reader(tokens, partner, types, sizes, scope, _block(constant_reader, function, shape), accesses)
        reader.walk(*function.body)
    return accesses


@functools.cache  # a few dozen (distance, width) pairs occur
def _conflict_degree(distance: int, width: int) -> int:
    """Distinct 4-byte words on the busiest bank among the threads served together (a warp; a
    half or a quarter of one for 8- and 16-byte accesses); threads on one word share it."""
    together = WARP_SIZE // max(1, width // BANK_BYTES)
    words_by_bank: dict[int, set[int]] = {}
    for lane in range(together):
        start = lane * abs(distance)
        for word in range(start // BANK_BYTES, (start + max(width, 1) - 1) // BANK_BYTES + 1):
            words_by_bank.setdefault(word % BANKS, set()).add(word)
    return max(len(words) for words in words_by_bank.values())


def access_summary(code: str, language: str, launches: Sequence[dict[str, Any]] = ()) -> tuple[float, ...]:
    """One number per ACCESS_NAMES entry for the CUDA kernels in `code`.

    The embedded forecaster's other features cannot tell a coalesced from a strided index
    or a padded from a conflicting shared tile; these can. Any language is read (CUDA
    also lives in Python strings); text without `__global__` gets NEUTRAL. `launches` are
    the side's launches as corpus facts list them (`LaunchSpec.as_launch` for a pragma).
    Never raises on bad text: what it cannot evaluate counts in `unresolved_share`.
    """
    if "__global__" not in code:
        return NEUTRAL
    return _summary(code, language, _launch_shapes(launches))


def clear_cache() -> None:
    """Forget every text read so far: a benchmark of a fresh edit starts from nothing."""
    _summary.cache_clear()


@functools.lru_cache(maxsize=512)
def _summary(code: str, language: str, launches: tuple[tuple[str, _LaunchShape], ...]) -> tuple[float, ...]:
    accesses = _accesses(code, language, launches)
    global_known = [access for access in accesses if access.space == "global" and access.distance is not None]
    shared_known = [access for access in accesses if access.space == "shared" and access.distance is not None]
    unresolved = sum(access.distance is None for access in accesses)

    def uncoalesced(access: _Access) -> bool:
        return access.distance is not None and access.distance > access.width

    stores = [access for access in global_known if access.store]
    count = len(global_known)
    broadcast = sum(access.distance == 0 for access in global_known)
    scattered = sum(uncoalesced(access) for access in global_known)
    return (
        float(count > 0),
        (count - broadcast - scattered) / count if count else 0.0,
        broadcast / count if count else 0.0,
        scattered / count if count else 0.0,
        sum(math.log2(1 + access.distance / 4) for access in global_known if access.distance is not None) / count if count else 0.0,
        sum(uncoalesced(access) for access in stores) / len(stores) if stores else 0.0,
        sum(math.log2(_conflict_degree(access.distance, access.width)) for access in shared_known if access.distance is not None)
        / len(shared_known)
        if shared_known
        else 0.0,
        unresolved / len(accesses) if accesses else 0.0,
    )
