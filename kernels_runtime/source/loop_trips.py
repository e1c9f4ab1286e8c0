"""How often a thread (CUDA) or a program (Triton) goes round its loops and touches memory, read from the kernel's text and its launch.

Token counts and the SASS mix see a loop body once, but the time depends on how often it
runs: a grid-stride loop over n elements, a row walked blockDim.x elements at a time,
O(n²) rank counting. With the launch's scalar arguments, grid, block and constexprs bound,
`for (int i = a; i < b; i += c)` or `for i in range(a, b, c)` runs ⌈(b − a) / c⌉ times
(`*=`, `<<=` and `>>=` steps logarithmically often); nested loops multiply, loops in
sequence add; a body is read at its loop variable's values (all of a doubling or halving
loop's, the middle one of a counting loop's), so a bitonic network's inner loop or a
triangle's counts its mean. The thread read is the first one (threadIdx = blockIdx =
program_id = 0), and an `else` branch, the tail path of a vectorised kernel, is skipped.
`for (; j < n; j += 32)` goes on from where the loop before left j (an unrolled loop's
remainder); `while (np < n) np <<= 1;` is the `for` it spells, and a bisection of [lo, hi]
runs log2 of the range. A loop whose trips cannot be evaluated (a bound loaded from memory,
a CAS retry, a quickselect) counts once. A Triton kernel's scalar assignments
(`k_begin = pid * chunk`) bound its ranges as the launch's arguments do. A call of
one of the file's `__device__` helpers (CUDA) or other `@triton.jit` functions (Triton) counts
the helper's work, read with the call's arguments (two levels deep).

Memory accesses are counted the same way, each weighted by the trips of the loops around
it: a CUDA subscript of a pointer (global) or of a `__shared__` array (shared), a Triton
`tl.load`, `tl.store` or `tl.atomic_*` as the elements of its block (shapes followed
through `tl.arange`, `[:, None]`, broadcasting, `tl.zeros` and `tl.dot`). Times the
threads or programs launched, that is the traffic the caches see, which the arrays' bytes
do not: a naive matrix product reads each input row once per output element, a tiled one
once per tile.

Triton's block-wide sorts and scans (`tl.sort`, `tl.cumsum`, `tl.associative_scan`) do
work no loop shows: a bitonic network of log n · (log n + 1) / 2 stages, each a step all
the program's threads wait for, over the elements shared among its num_warps · 32 threads.

Expressions are read with Python's `ast` (C first loses its casts and literal suffixes) and
evaluated in C's arithmetic by the shared evaluator (expressions.py), never with `eval`;
kernels, `__device__` helpers and macros come from cuda_text, Triton kernels from triton_text.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, NamedTuple

from kernelcast.kernels_runtime.source import cuda_text, expressions
from kernelcast.kernels_runtime.source.access_pattern import launch_extents, launch_scalars
from kernelcast.kernels_runtime.source.cuda_text import match_close, split_top_level
from kernelcast.kernels_runtime.source.expressions import ExpressionError
from kernelcast.kernels_runtime.source.triton_text import triton_kernels

_DECLARATION = re.compile(
    r"\b(?:const\s+|constexpr\s+|static\s+)*(?:unsigned\s+)?(?:long\s+long|long|int|size_t|int64_t|int32_t|uint32_t|unsigned|auto)"
    r"\s+([A-Za-z_]\w*)\s*=\s*([^;{}]+);"
)
_STEP = re.compile(r"(\+=|-=|\*=|<<=|>>=|/=)\s*(.+)")
_AXES = "xyz"


class ThreadWork(NamedTuple):
    """What the first thread (CUDA) or program (Triton) of a launch does."""

    iterations: float  # loop iterations, nested ones included
    global_accesses: float  # subscripts of global pointers; Triton: elements loaded and stored
    shared_accesses: float  # subscripts of __shared__ arrays (Triton's shared memory is the compiler's)
    network_stages: float  # Triton: stages of block-wide sorts and scans, each a step all threads wait for
    network_steps: float  # Triton: a thread's steps through them, its share of the elements at each stage
    # Atomics by where they land: contention on one global address costs a round trip to L2
    # each, on a shared-memory address a retry in the SM; Triton's atomics are all global.
    global_atomics: float = 0.0
    shared_atomics: float = 0.0

    def __add__(self, other: tuple[float, ...]) -> ThreadWork:  # type: ignore[override]
        return ThreadWork(*(a + b for a, b in zip(self, other)))

    def times(self, factor: float) -> ThreadWork:
        return ThreadWork(*(value * factor for value in self))


NO_WORK = ThreadWork(0.0, 0.0, 0.0, 0.0, 0.0)


def thread_work(code: str, language: str, launch: dict[str, Any] | None) -> ThreadWork:
    """Loop iterations and memory accesses of the launched kernel's first thread (CUDA) or program (Triton)."""
    if not isinstance(launch, dict) or not isinstance(launch.get("kernel"), str) or language not in ("cuda", "triton"):
        return NO_WORK
    args = launch_scalars(launch)
    constexprs = tuple(sorted((name, value) for name, value in (launch.get("constexprs") or {}).items() if isinstance(value, (int, float))))
    # A Triton program's threads are its warps' (default 4): they share its block-wide sorts and scans.
    block = (32 * int(launch.get("num_warps") or 4), 1, 1) if language == "triton" else launch_extents(launch.get("block")) or (1, 1, 1)
    return _cached(code, language, launch["kernel"], args, launch_extents(launch.get("grid")) or (1, 1, 1), block, constexprs)


def clear_cache() -> None:
    """Forget every kernel read so far: a benchmark of a fresh edit starts from nothing."""
    _cached.cache_clear()
    _triton_functions.cache_clear()
    triton_kernels.cache_clear()
    cuda_text.clear_cache()


@functools.lru_cache(maxsize=65536)
def _cached(
    code: str,
    language: str,
    kernel: str,
    args: tuple[Any, ...],
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    constexprs: tuple[tuple[str, Any], ...],
) -> ThreadWork:
    names: dict[str, Any] = {f"gridDim_{axis}": extent for axis, extent in zip(_AXES, grid)}
    if language == "triton":
        return _triton(code, kernel, args, dict(constexprs), names, block[0])
    names.update({f"blockDim_{axis}": extent for axis, extent in zip(_AXES, block)})
    names.update({f"{builtin}_{axis}": 0 for builtin in ("threadIdx", "blockIdx") for axis in _AXES}, warpSize=32)
    return _cuda(code, kernel, args, names)


# --- expressions -----------------------------------------------------------------------------


def _num_programs(node: ast.Call, value: Callable[[ast.AST], Any], names: Mapping[str, Any]) -> Any:
    axis = value(node.args[0]) if node.args else 0
    return names.get(f"gridDim_{_AXES[axis]}", 1) if axis in (0, 1, 2) else 1


def _converted(node: ast.Call, value: Callable[[ast.AST], Any], names: Mapping[str, Any]) -> Any:
    """Triton's `x.to(dtype)`: the value of x."""
    if not isinstance(node.func, ast.Attribute):
        raise ExpressionError("to() is a method")
    return value(node.func.value)


# C's arithmetic, with Triton's program_id (the first program's: 0), num_programs (the grid's) and x.to().
_DIALECT = replace(
    expressions.C,
    functions=expressions.TRITON_FUNCTIONS,
    forms={"program_id": lambda node, value, names: 0, "num_programs": _num_programs, "to": _converted},
)


def _value(node: ast.AST, names: dict[str, Any]) -> Any:
    """A tree's value with the names bound so far, or ExpressionError."""
    try:
        return expressions.evaluate(node, names, _DIALECT)
    except (TypeError, OverflowError, RecursionError, ZeroDivisionError) as error:
        raise ExpressionError(str(error)) from error


def _evaluate(expression: str, names: dict[str, Any]) -> Any:
    """A C or Python expression's value, or ExpressionError."""
    return _value(expressions.parse_c(expression), names)


def _trips(start: Any, relation: str, bound: Any, step: str, amount: Any) -> float | None:
    """Iterations of `for (i = start; i relation bound; i step amount)`, or None if the loop is not of that form."""
    inclusive = relation in ("<=", ">=")
    upward, downward = relation in ("<", "<=", "!="), relation in (">", ">=")
    try:
        if step == "+=" and amount > 0 and upward:
            counted_up: int = max(0, math.ceil((bound - start + inclusive) / amount))
            return counted_up
        if step == "-=" and amount > 0 and (downward or relation == "!="):
            counted_down: int = max(0, math.ceil((start - bound + inclusive) / amount))
            return counted_down
        factor = amount if step == "*=" else 2**amount if step == "<<=" and amount < 63 else 0
        if factor > 1 and upward and start > 0:
            return _geometric(start, lambda value: value * factor, lambda value: value <= bound if inclusive else value < bound)
        divisor = amount if step == "/=" else 2**amount if step == ">>=" and amount < 63 else 0
        if divisor > 1 and downward and start > 0:
            return _geometric(start, lambda value: value // divisor, lambda value: value >= bound if inclusive else value > bound)
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        return None
    return None


def _geometric(start: Any, step: Callable[[Any], Any], running: Callable[[Any], bool]) -> float:
    """Trips of a loop that multiplies or divides its variable (at most 64: a 64-bit range)."""
    trips, value = 0, start
    while running(value) and trips < 64:
        value, trips = step(value), trips + 1
    return float(trips)


# --- CUDA ------------------------------------------------------------------------------------


def _cuda(code: str, kernel: str, args: tuple[Any, ...], names: dict[str, Any]) -> ThreadWork:
    text = cuda_text.mask(code, strings=False, directives=False)
    macros = cuda_text.MacroTable.of(code)
    for name, replacement in macros.objects().items():
        _bind(names, name, replacement)
    found = cuda_text.function_named(code, kernel)
    if found is None or found.body is None:
        return NO_WORK
    declared = split_top_level(found.parameter_text(text), ",")
    parameters = [words[-1] for part in declared if (words := re.findall(r"[A-Za-z_]\w*", part))]
    names.update({name: value for name, value in zip(parameters, args) if value is not None})
    body = macros.expand_calls(text[found.body[0] : found.body[1]])
    pointers = {words[-1] for part in declared if "*" in part and (words := re.findall(r"[A-Za-z_]\w*", part))}
    helpers = {
        helper.name: (split_top_level(helper.parameter_text(text), ","), macros.expand_calls(text[helper.body[0] : helper.body[1]]))
        for helper in cuda_text.functions(code, cuda_text.DEVICE)
        if helper.body is not None
    }
    return _cuda_span(body, names, _Memory.of(body, pointers, helpers))


class _Memory(NamedTuple):
    """Which names a CUDA kernel subscripts into global memory and which into shared memory."""

    global_names: frozenset[str]
    shared_names: frozenset[str]
    helpers: dict[str, tuple[list[str], str]]  # the file's __device__ functions: parameters and body
    depth: int = 0  # helpers called from helpers are read two levels deep

    @staticmethod
    def of(body: str, parameter_pointers: set[str], helpers: dict[str, tuple[list[str], str]], depth: int = 0) -> _Memory:
        shared: set[str] = set()
        for declaration in _SHARED.finditer(body):  # `__shared__ float a[N], b[N];` declares a and b
            shared.update(
                found.group(1) for part in split_top_level(declaration.group(1), ",") if (found := re.match(r"\s*([A-Za-z_]\w*)", part))
            )
        pointers = set(parameter_pointers)
        for local in _POINTER.finditer(body):  # `T* row = x + ...`: global unless it points into a shared array
            used = set(re.findall(r"[A-Za-z_]\w*", local.group(2)))
            (shared if used & shared else pointers).add(local.group(1))
        return _Memory(frozenset(pointers - shared), frozenset(shared), helpers, depth)

    def calls(self, text: str, names: dict[str, Any], spread: int) -> ThreadWork:
        """Work of the file's __device__ helpers called in `text`, each read with the caller's arguments."""
        total = NO_WORK
        if self.depth >= 2:
            return total
        for call in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", text):
            if call.group(1) not in self.helpers:
                continue
            parameters, body = self.helpers[call.group(1)]
            arguments = split_top_level(text[call.end() : _matching(text, call.end() - 1)], ",")
            bound, shared, pointers = dict(names), set(), set()
            for parameter, argument in zip(parameters, arguments):
                words = re.findall(r"[A-Za-z_]\w*", parameter)
                if not words:
                    continue
                if "*" in parameter:  # a pointer parameter is memory of the kind its argument is (a register array: none)
                    first = next(iter(re.findall(r"[A-Za-z_]\w*", argument)), "")
                    if first in self.shared_names:
                        shared.add(words[-1])
                    elif first in self.global_names:
                        pointers.add(words[-1])
                else:
                    _bind(bound, words[-1], argument)
            own = _Memory.of(body, pointers, self.helpers, self.depth + 1)
            total = total + _cuda_span(body, bound, own._replace(shared_names=own.shared_names | shared), spread)
        return total

    def accesses(self, text: str) -> ThreadWork:
        text = _SHARED.sub("", text)
        found = [match.group(1) for match in _SUBSCRIPT.finditer(text)]
        found += [match.group(1) for match in _INTRINSIC_ACCESS.finditer(text)]  # __ldcg(x + i)
        for cast in _CAST_ACCESS.finditer(text):  # *reinterpret_cast<const float4*>(x + i) or reinterpret_cast<…>(x)[i]
            after = text[_matching(text, cast.end() - 1) + 1 :].lstrip()
            if cast.group(1) or after.startswith("["):
                found.append(cast.group(2))
        targets = [
            self.target(split_top_level(text[call.end() : _matching(text, call.end() - 1)], ",")[0]) for call in _ATOMIC_CALL.finditer(text)
        ]
        return ThreadWork(
            0.0,
            float(sum(name in self.global_names for name in found)),
            float(sum(name in self.shared_names for name in found)),
            0.0,
            0.0,
            float(targets.count("global")),
            float(targets.count("shared")),
        )

    def target(self, address: str) -> str:
        """Where an atomic's address points: the first global or shared name in it (`&t[i]`, `t + i`, a cast of `t`)."""
        for name in re.findall(r"[A-Za-z_]\w*", address):
            if name in self.global_names:
                return "global"
            if name in self.shared_names:
                return "shared"
        return ""


_SHARED = re.compile(r"__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?(?:const\s+)?(?:unsigned\s+)?[A-Za-z_][\w:]*\s+([^;]+);")
_POINTER = re.compile(r"[A-Za-z_][\w:<>]*\s*\*\s*(?:const\s+)?(?:__restrict__\s+)?([A-Za-z_]\w*)\s*=(?!=)\s*([^;]+);")
_SUBSCRIPT = re.compile(r"\b([A-Za-z_]\w*)\s*\[")
_ATOMIC_CALL = re.compile(r"\batomic[A-Z]\w*\s*\(")
_INTRINSIC_ACCESS = re.compile(r"\b__(?:ld|st)(?:g|cg|ca|cs|lu|cv|wb|wt)\s*\(\s*([A-Za-z_]\w*)\s*[+)]")
_CAST_ACCESS = re.compile(r"(\*\s*)?\breinterpret_cast\s*<[^>]*>\s*\((?=\s*([A-Za-z_]\w*))")


def _bind(names: dict[str, Any], name: str, expression: str) -> None:
    try:
        names[name] = _evaluate(expression, names)
    except ExpressionError:
        names.pop(name, None)


def _cuda_span(body: str, names: dict[str, Any], memory: _Memory, spread: int = 0) -> ThreadWork:
    """Work of a stretch of statements: straight-line accesses once, each loop its trips × (1 + its body's).

    `spread`: how many loops around it are read at several values; past two, a loop is read at
    its middle value only, so nested doubling loops cost at most 16² readings, not 64ⁿ.
    """
    total, done = NO_WORK, 0
    skipped = [(branch.end(), _statement_end(body, branch.end())) for branch in re.finditer(r"\belse\b", body)]
    blanked = list(body)
    for start, stop in skipped:
        blanked[start : stop + 1] = " " * (stop + 1 - start)
    visible = "".join(blanked)
    for loop in re.finditer(r"\b(for|while)\s*\(", body):
        if loop.start() < done or any(start <= loop.start() <= stop for start, stop in skipped):
            continue
        close = _matching(body, loop.end() - 1)
        if loop.group(1) == "while" and body[close + 1 :].lstrip().startswith(";"):
            continue  # the condition of a `do { … } while (…);`, whose body was read once
        for declaration in _DECLARATION.finditer(body, done, loop.start()):
            first, *others = split_top_level(declaration.group(2), ",")  # `int tx = threadIdx.x, ty = threadIdx.y;`
            _bind(names, declaration.group(1), first)
            for other in others:
                if named := re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=\s*(.+)", other, re.S):
                    _bind(names, named.group(1), named.group(2))
        end = _statement_end(body, close + 1)
        loop_body = body[close + 1 : end + 1]
        read = (
            _cuda_for(body[loop.end() : close], names)
            if loop.group(1) == "for"
            else _cuda_while(body[loop.end() : close], loop_body, names)
        )
        # The body is read at the variable's values (all of a doubling or halving loop's, the middle
        # one of a counting loop's), so an inner loop bounded by it, a bitonic network's
        # `for (j = k >> 1; j > 0; j >>= 1)` or a triangle's `for (j = i + 1; j < n; ++j)`, counts its mean.
        values = read.values
        if len(values) > 1:
            values = (values[len(values) // 2],) if spread >= 2 else values[:: -(-len(values) // _MOST_READINGS)]
        readings = [_cuda_span(loop_body, {**names, read.variable: value}, memory, spread + (len(values) > 1)) for value in values] or [
            _cuda_span(loop_body, dict(names), memory, spread)
        ]
        inner = sum(readings, NO_WORK).times(1.0 / len(readings))
        total = (
            total
            + memory.accesses(visible[done : close + 1])
            + memory.calls(visible[done : close + 1], names, spread)
            + (ThreadWork(1.0, 0.0, 0.0, 0.0, 0.0) + inner).times(1.0 if read.trips is None else read.trips)
        )
        for variable in read.outliving:  # `for (; j < n; j += 32)` after a loop that left j where it stopped
            if variable == read.variable and read.after is not None:
                names[variable] = read.after
            else:
                names.pop(variable, None)
        done = end + 1
    return total + memory.accesses(visible[done:]) + memory.calls(visible[done:], names, spread)


_MOST_READINGS = 16  # values a loop body is read at (evenly spaced when a loop has more)


class _Loop(NamedTuple):
    """What is read of one loop: its trips (None: unknown), its variable, the values its body is read
    at (none if the trips are unknown), and the variables it leaves changed, with the loop
    variable's value after it where that is known."""

    trips: float | None
    variable: str = ""
    values: tuple[Any, ...] = ()
    outliving: tuple[str, ...] = ()
    after: Any = None


def _cuda_for(header: str, names: dict[str, Any]) -> _Loop:
    """A `for (init; condition; step)`: an init without a type steps a variable that outlives the loop,
    an empty one goes on from the variable's value."""
    parts = split_top_level(header, ";")
    if len(parts) != 3:
        return _Loop(None)
    init, condition, step = (part.strip() for part in parts)
    declared = re.match(r"((?:[\w\s]*\s)?)([A-Za-z_]\w*)\s*=\s*(.+)$", init, re.S)
    if declared:
        variable, start_text, outliving = declared.group(2), declared.group(3), not declared.group(1).strip()
    elif not init and (named := re.match(r"([A-Za-z_]\w*)", condition)):
        variable, start_text, outliving = named.group(1), named.group(1), True
    else:
        return _Loop(None)
    changed = (variable,) if outliving else ()
    stepped = _step(variable, step)
    if stepped is None:
        return _Loop(None, variable, (), changed)
    return _counted(variable, start_text, condition, *stepped, names, changed)


def _cuda_while(condition: str, body: str, names: dict[str, Any]) -> _Loop:
    """A `while`: read as the `for` it is when its body steps the compared variable once by a constant
    (`while (np < n) np <<= 1;`); a bisection of [lo, hi] (`mid` from lo + hi or hi − lo, halved) runs
    log2 of the range times; any other counts once, as a `for` of unknown trips does."""
    assigned = set(re.findall(r"(?<![\w.>])([A-Za-z_]\w*)\s*(?:\+\+|--|[-+*/|&^]=|<<=|>>=|=(?!=))", body)) | set(
        re.findall(r"(?:\+\+|--)\s*([A-Za-z_]\w*)", body)
    )
    outliving = tuple(sorted(assigned))
    bisected = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(<|<=)\s*([A-Za-z_]\w*)\s*", condition)
    if bisected:
        lo, hi = bisected.group(1), bisected.group(3)
        halved = rf"(?:{lo}\s*\+\s*{hi}|{hi}\s*\+\s*{lo}|{hi}\s*-\s*{lo})\s*\)\s*(?:>>\s*1\b|/\s*2\b)"
        if re.search(halved, body) and {lo, hi} <= assigned:
            try:
                width = _evaluate(hi, names) - _evaluate(lo, names) + (bisected.group(2) == "<=")
            except (ExpressionError, TypeError):
                return _Loop(None, outliving=outliving)
            return _Loop(float(min(64, math.ceil(math.log2(width)))) if width > 1 else float(width > 0), outliving=outliving)
    named = re.match(r"\s*([A-Za-z_]\w*)", condition)
    variable = named.group(1) if named else ""
    updates = (
        re.findall(rf"(?<![\w.>])(?:(?:\+\+|--)\s*{variable}\b|{variable}\s*(?:\+\+|--|[-+*/|&^]=|<<=|>>=|=(?!=))[^;]*)", body)
        if variable
        else []
    )
    stepped = _step(variable, updates[0].strip()) if len(updates) == 1 else None
    if stepped is None:
        return _Loop(None, variable, (), outliving)
    return _counted(variable, variable, condition, *stepped, names, outliving)


def _step(variable: str, text: str) -> tuple[str, str] | None:
    """`i++`, `--i`, `i += 4 * 32` or `k >>= 1` as (operator, amount); None for any other update of `variable`."""
    if re.fullmatch(rf"(\+\+|--)\s*{variable}|{variable}\s*(\+\+|--)", text):
        return ("+=" if "++" in text else "-="), "1"
    stepped = re.fullmatch(rf"{variable}\s*{_STEP.pattern}", text, re.S)
    return (stepped.group(1), stepped.group(2)) if stepped else None


def _counted(
    variable: str,
    start_text: str,
    condition: str,
    operator: str,
    amount_text: str,
    names: dict[str, Any],
    changed: tuple[str, ...],
) -> _Loop:
    """Trips of a loop stepping `variable` from `start_text` by `operator amount` while `condition`
    (`i < n`, or `i + 3 * 32 < n`: the offset moves to the bound) holds; `changed`: the names it
    leaves changed behind it."""
    compared = re.match(rf"{variable}\s*(?:([+-])\s*([^<>=!]+?))?\s*(<=|<|>=|>|!=)\s*(.+)$", condition.split("&&")[0].strip(), re.S)
    if not compared:
        return _Loop(None, variable, (), changed)
    sign, offset, relation, bound_text = compared.groups()
    if offset:
        bound_text = f"({bound_text}) {'-' if sign == '+' else '+'} ({offset})"
    try:
        start, bound, amount = (_evaluate(text, names) for text in (start_text, bound_text, amount_text))
    except ExpressionError:
        return _Loop(None, variable, (), changed)
    trips = _trips(start, relation, bound, operator, amount)
    if not trips:
        return _Loop(trips, variable, (), changed, start if trips == 0 else None)
    if operator in ("+=", "-="):
        middle, last = int(trips - 1) // 2 * amount, int(trips) * amount
        return _Loop(
            trips,
            variable,
            (start + middle if operator == "+=" else start - middle,),
            changed,
            start + last if operator == "+=" else start - last,
        )
    if not isinstance(start, int) or not isinstance(amount, int):
        return _Loop(trips, variable, (), changed)
    values = [start]
    for _ in range(int(trips)):
        previous = values[-1]
        values.append(
            previous * amount
            if operator == "*="
            else previous << amount
            if operator == "<<="
            else previous // amount
            if operator == "/="
            else previous >> amount
        )
    return _Loop(trips, variable, tuple(values[:-1]), changed, values[-1])


def _matching(text: str, opening: int) -> int:
    """Index of the bracket closing the one at `opening` (the text's end if unbalanced)."""
    close = match_close(text, opening, len(text))
    return len(text) - 1 if close is None else close - 1


def _statement_end(text: str, index: int) -> int:
    """Index of the last character of the statement starting at `index` (a block, a control statement, or up to `;`).

    A `#pragma unroll` line between a loop header and its body is not the body.
    """
    while index < len(text) and (text[index].isspace() or text[index] == "#"):
        index = text.find("\n", index) if text[index] == "#" else index + 1
        index = len(text) if index < 0 else index
    if index < len(text) and text[index] == "{":
        return _matching(text, index)
    control = re.match(r"(?:for|while|if)\s*\(", text[index:])
    if control:
        return _statement_end(text, _matching(text, index + control.end() - 1) + 1)
    depth = 0
    for position in range(index, len(text)):
        if text[position] in "([":
            depth += 1
        elif text[position] in ")]":
            depth -= 1
        elif text[position] == ";" and depth == 0:
            return position
    return len(text) - 1


# --- Triton ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _triton_functions(code: str) -> dict[str, ast.FunctionDef]:
    """The file's `@triton.jit` functions by name: the kernels and the helpers they call."""
    return {node.name: node for node in triton_kernels(code)}


class _Program(NamedTuple):
    """What every statement of one Triton program is read against."""

    functions: dict[str, ast.FunctionDef]  # the file's jitted functions, for the helpers it calls
    threads: int  # num_warps · 32: they share the block-wide sorts and scans
    depth: int = 0  # helpers entered so far


_HELPER_DEPTH = 2  # as for CUDA's __device__ helpers


def _triton(code: str, kernel: str, args: tuple[Any, ...], constexprs: dict[str, Any], names: dict[str, Any], threads: int) -> ThreadWork:
    functions = _triton_functions(code)
    function = functions.get(kernel)
    if function is None:
        return NO_WORK
    parameters = [arg.arg for arg in function.args.args if arg.arg not in constexprs]
    names.update(constexprs)
    names.update({name: value for name, value in zip(parameters, args) if value is not None})
    return _triton_span(function.body, names, {}, _Program(functions, threads))


def _triton_span(body: list[ast.stmt], names: dict[str, Any], shapes: dict[str, tuple[int, ...]], program: _Program) -> ThreadWork:
    """Work of a block of statements; `shapes` follows the block shape of each name assigned so far."""
    total = NO_WORK
    for statement in body:
        if isinstance(statement, ast.For):
            trips = _triton_trips(statement.iter, names)
            total = total + (ThreadWork(1.0, 0.0, 0.0, 0.0, 0.0) + _triton_span(statement.body, names, shapes, program)).times(
                1.0 if trips is None else trips
            )
        elif isinstance(statement, (ast.If, ast.While, ast.With)):
            total = (
                total
                + _triton_span(statement.body, names, shapes, program)
                + _triton_span(getattr(statement, "orelse", []), names, shapes, program)
            )
        else:
            every_call = [node for node in ast.walk(statement) if isinstance(node, ast.Call)]
            calls = [node for node in every_call if node.args]
            atomics = sum(math.prod(_shape(node.args[0], names, shapes)) for node in calls if _called(node).startswith("atomic_"))
            elements = atomics + sum(math.prod(_shape(node.args[0], names, shapes)) for node in calls if _called(node) in ("load", "store"))
            networks = [_network(node, names, shapes, program.threads) for node in calls]
            total = total + ThreadWork(
                0.0, float(elements), 0.0, sum(stages for stages, _ in networks), sum(steps for _, steps in networks), float(atomics), 0.0
            )
            for node in every_call:
                total = total + _helper_call(node, names, shapes, program)
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
                shapes[statement.targets[0].id] = _shape(statement.value, names, shapes)
            _assign_scalars(statement, names)
    return total


def _helper_call(node: ast.Call, names: dict[str, Any], shapes: dict[str, tuple[int, ...]], program: _Program) -> ThreadWork:
    """The work of a call of one of the file's jitted helpers, its parameters bound to the call's
    values and block shapes: decode attention's key loop may live wholly in a helper."""
    helper = program.functions.get(node.func.id) if isinstance(node.func, ast.Name) else None
    if helper is None or program.depth >= _HELPER_DEPTH:
        return NO_WORK
    parameters = [parameter.arg for parameter in helper.args.args]
    defaulted = parameters[len(parameters) - len(helper.args.defaults) :]  # defaults belong to the last parameters
    bound: dict[str, ast.expr] = dict(zip(defaulted, helper.args.defaults))
    bound.update(zip(parameters, node.args))
    bound.update((keyword.arg, keyword.value) for keyword in node.keywords if keyword.arg)
    helper_names = {name: value for name, value in names.items() if name.startswith("gridDim_")}
    helper_shapes: dict[str, tuple[int, ...]] = {}
    for parameter, argument in bound.items():
        helper_shapes[parameter] = _shape(argument, names, shapes)
        try:
            helper_names[parameter] = _value(argument, names)
        except (ExpressionError, TypeError, ValueError, OverflowError, ZeroDivisionError, RecursionError):
            pass
    return _triton_span(helper.body, helper_names, helper_shapes, program._replace(depth=program.depth + 1))


def _assign_scalars(statement: ast.stmt, names: dict[str, Any]) -> None:
    """`first = pid * TILES * BLOCK_R` binds first, so `range(first, first + TILES * BLOCK_R, BLOCK_R)` counts;
    a name assigned what cannot be evaluated, or updated in place, is unknown from there on."""
    targets = (
        statement.targets
        if isinstance(statement, ast.Assign)
        else [statement.target]
        if isinstance(statement, (ast.AugAssign, ast.AnnAssign))
        else []
    )
    for target in targets:
        for name in (node.id for node in ast.walk(target) if isinstance(node, ast.Name)):
            names.pop(name, None)
    if isinstance(statement, ast.Assign) and len(targets) == 1 and isinstance(targets[0], ast.Name):
        try:
            names[targets[0].id] = _value(statement.value, names)
        except (ExpressionError, TypeError, ValueError, OverflowError, ZeroDivisionError, RecursionError):
            pass


def _called(node: ast.Call) -> str:
    function = node.func
    return function.attr if isinstance(function, ast.Attribute) else function.id if isinstance(function, ast.Name) else ""


def block_shape(node: ast.AST, constexprs: Mapping[str, int]) -> tuple[int, ...]:
    """The shape of the block a Triton expression builds from nothing but `constexprs` (a launch's
    BLOCK_SIZE=...): `tl.arange(0, BLOCK)` is (BLOCK,); () for a scalar or what cannot be followed.
    The one reading of block lengths: host_launch judges a program's width by it."""
    return _shape(node, dict(constexprs), {})


def _shape(node: ast.AST, names: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The block shape of a Triton expression; () for a scalar or what cannot be followed."""
    if isinstance(node, ast.Name):
        return shapes.get(node.id, ())
    if isinstance(node, ast.BinOp):
        return _broadcast(_shape(node.left, names, shapes), _shape(node.right, names, shapes))
    if isinstance(node, (ast.UnaryOp, ast.Compare)):
        operands = [node.operand] if isinstance(node, ast.UnaryOp) else [node.left, *node.comparators]
        return _broadcast(*(_shape(operand, names, shapes) for operand in operands))
    if isinstance(node, ast.Subscript):  # x[:, None]: a slice keeps a dimension, None inserts one
        inner = list(_shape(node.value, names, shapes))
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        shape = []
        for item in items:
            if isinstance(item, ast.Slice) and inner:
                shape.append(inner.pop(0))
            elif isinstance(item, ast.Constant) and item.value is None:
                shape.append(1)
        return tuple(shape + inner)
    if not isinstance(node, ast.Call):
        return ()
    name, arguments = _called(node), node.args
    try:
        if name == "arange" and len(arguments) == 2:
            return (max(1, int(_value(arguments[1], names)) - int(_value(arguments[0], names))),)
        if name in ("zeros", "full") and arguments and isinstance(arguments[0], (ast.Tuple, ast.List)):
            return tuple(max(1, int(_value(extent, names))) for extent in arguments[0].elts)
    except (ExpressionError, TypeError, ValueError, OverflowError):
        return ()
    if name == "dot" and len(arguments) >= 2:
        left, right = _shape(arguments[0], names, shapes), _shape(arguments[1], names, shapes)
        return (left[0], right[-1]) if len(left) == 2 and len(right) == 2 else ()
    if name in ("sum", "max", "min", "argmax", "argmin", "xor_sum"):
        return _reduced(node, names, shapes)
    if name == "to" and isinstance(node.func, ast.Attribute):
        return _shape(node.func.value, names, shapes)
    return _broadcast(*(_shape(argument, names, shapes) for argument in arguments))


class _Network(NamedTuple):
    """A block-wide network call: where its dimension argument sits and which dimension it takes by default."""

    dim_position: int
    default_dim: int
    sort: bool  # a bitonic sort (log n · (log n + 1) / 2 stages) rather than a scan (log n)


_NETWORKS = {
    "sort": _Network(1, -1, True),
    "argsort": _Network(1, -1, True),
    "topk": _Network(2, -1, True),
    "cumsum": _Network(1, 0, False),
    "cumprod": _Network(1, 0, False),
    "associative_scan": _Network(1, 0, False),
}


def _network(node: ast.Call, names: dict[str, Any], shapes: dict[str, tuple[int, ...]], threads: int) -> tuple[float, float]:
    """Stages of a block-wide sort (a bitonic network: log n · (log n + 1) / 2) or scan (log n), and the
    steps one thread of the program takes through them: its share of the elements at each stage, at least one.

    A loop of chunked sorts does the same loads as one sort of the row but more stages, and
    a chunk smaller than the program's threads leaves most of them idle at every stage.
    """
    network = _NETWORKS.get(_called(node))
    shape = _shape(node.args[0], names, shapes) if network else ()
    if not network or not shape:
        return 0.0, 0.0
    positional = node.args[network.dim_position] if len(node.args) > network.dim_position else None
    chosen = next((keyword.value for keyword in node.keywords if keyword.arg in ("dim", "axis")), positional)
    try:
        axis = (
            network.default_dim
            if chosen is None or (isinstance(chosen, ast.Constant) and chosen.value is None)
            else int(_value(chosen, names))
        )
        length = shape[axis % len(shape)]
    except (ExpressionError, TypeError, ValueError):
        return 0.0, 0.0
    levels = math.ceil(math.log2(length)) if length > 1 else 0
    stages = levels * (levels + 1) // 2 if network.sort else levels
    return float(stages), stages * max(1.0, math.prod(shape) / threads)


def _reduced(node: ast.Call, names: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """`tl.sum(x, axis=k)` drops dimension k of x; without an axis it is a scalar."""
    axis = next((keyword.value for keyword in node.keywords if keyword.arg == "axis"), node.args[1] if len(node.args) > 1 else None)
    shape = _shape(node.args[0], names, shapes) if node.args else ()
    try:
        dropped = int(_value(axis, names)) % len(shape) if axis is not None and shape else None
    except (ExpressionError, TypeError, ValueError):
        return ()
    return () if dropped is None else shape[:dropped] + shape[dropped + 1 :]


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max((len(shape) for shape in shapes), default=0)
    padded = [(1,) * (rank - len(shape)) + shape for shape in shapes]
    return tuple(max(extents) for extents in zip(*padded)) if padded else ()


def _triton_trips(iterator: ast.expr, names: dict[str, Any]) -> float | None:
    """Trips of `range`, `tl.range` or `tl.static_range` with evaluable bounds."""
    function = iterator.func if isinstance(iterator, ast.Call) else None
    name = function.attr if isinstance(function, ast.Attribute) else function.id if isinstance(function, ast.Name) else ""
    if name not in ("range", "static_range") or not isinstance(iterator, ast.Call) or not 1 <= len(iterator.args) <= 3:
        return None
    try:
        values = [_value(arg, names) for arg in iterator.args]
    except (ExpressionError, TypeError, ValueError, OverflowError, ZeroDivisionError):
        return None
    start, stop, step = (0, values[0], 1) if len(values) == 1 else (*values, 1)[:3] if len(values) == 2 else values
    if not step:
        return None
    return _trips(start, "<" if step > 0 else ">", stop, "+=" if step > 0 else "-=", abs(step))
