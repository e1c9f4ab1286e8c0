"""Host code that chooses one of several launches: only one of them runs a call.

Solutions written by people and by LLMs wrap their kernels in host code that picks a path: a
vectorised kernel when the pointers are aligned, else a scalar one (`if (...) { k4<<<...>>> }
else { k1<<<...>>> }`); a Triton kernel for large inputs, another for small; and, in Python, a
PyTorch fallback for tensors on the CPU (`if not x.is_cuda: return F.conv2d(...)`). Counted as
written, each such file launches every path and pays for each, and a CPU fallback reads as a
cuDNN call. `one_path_each` blanks all paths of such a choice but one, and every CPU-only path:
the path the text decides (its tests read with the sizes the timed call knows, as `x.dim() == 2`
of a 2-D input), else the one with the most launches (the first on a tie). A Python test the text
decides is read whether or not its branches launch: a guard on what the timed call passes
(`if dim is None: return torch.mean(x)` under `mean_dim(x, dim=-1)`) or on a default no call
overrides (`if not keepdim:`) runs one way, and the other branch's PyTorch ops are no part of the
call. It keeps offsets and line breaks (and a `pass` in a blanked Python branch, so the text still
parses), so the counts read from the text are those of one call on the GPU.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kernelcast.kernels_runtime.source import host_values
from kernelcast.kernels_runtime.source.cuda_text import blank
from kernelcast.kernels_runtime.source.python_ast import line_offsets
from kernelcast.kernels_runtime.source.timed_path import names_known_at, with_sizes_known_at

_C_IF = re.compile(r"\bif\s*\(")
_C_ELSE = re.compile(r"\s*else\b\s*")
_C_IF_HERE = re.compile(r"if\s*\(")
_AFTER_ELSE = re.compile(r"\belse\s*$")
_SPACE = re.compile(r"\s*")
_BRACKET = re.compile(r"[(){}]")
_OPENER = {")": "(", "}": "{"}
_C_LAUNCH = "<<<"
_PASS = "pass"
# Tests whose true branch runs only on the CPU (`not x.is_cuda`, `x.device.type == "cpu"`) ...
_CPU_WHEN_TRUE = re.compile(
    r"^not [\w.\[\]]+\.is_cuda$|\.is_cuda == False$|\.type == ['\"]cpu['\"]$|^not torch\.cuda\.is_available\(\)$|\.device == ['\"]cpu['\"]$"
)
# ... and whose false branch does (`x.is_cuda`, `x.device.type != "cpu"`).
_CPU_WHEN_FALSE = re.compile(r"^[\w.\[\]]+\.is_cuda$|\.type != ['\"]cpu['\"]$|^torch\.cuda\.is_available\(\)$")


def one_path_each(text: str, python: bool) -> str:
    """The text with the paths a call does not take on the GPU blanked (see the module's docstring)."""
    spans = _c_alternatives(text)
    branches = _python_alternatives(text) if python and ("if " in text) else []
    if not spans and not branches:
        return text
    blanked = blank(text, spans + [span for span, _ in branches])
    # A blanked Python branch keeps a `pass` where its first statement began, so the text still parses
    # for the readers after this one (host loops, the timed call); a branch inside one blanked is gone with it.
    outer_end = -1
    for (start, end), column in sorted(branches):
        at = start + column
        if start >= outer_end and "\n" not in blanked[at : at + len(_PASS)]:
            blanked = blanked[:at] + _PASS + blanked[at + len(_PASS) :]
        outer_end = max(outer_end, end)
    return blanked


# --- C and C++: if / else if / else chains whose branches launch ------------------------------------


def _c_alternatives(text: str) -> list[tuple[int, int]]:
    if _C_LAUNCH not in text or "else" not in text:
        return []
    closers = _closers(text)
    spans: list[tuple[int, int]] = []
    for found in _C_IF.finditer(text):
        if _AFTER_ELSE.search(text, max(0, found.start() - 16), found.start()):
            continue  # an `else if`: read with the chain its first `if` starts
        branches = _c_chain(text, found.end() - 1, closers)
        if len(branches) < 2:
            continue
        launches = [text.count(_C_LAUNCH, start, end) for start, end in branches]
        if sum(count > 0 for count in launches) < 2:
            continue
        kept = launches.index(max(launches))
        spans += [branch for index, branch in enumerate(branches) if index != kept]
    return spans


def _closers(text: str) -> dict[int, int]:
    """For each `(` and `{` that closes, the offset after its partner: one pass, so a text of many
    unclosed `if (...) {` costs linear time, not a scan to the end for each."""
    open_at: dict[str, list[int]] = {"(": [], "{": []}
    closers: dict[int, int] = {}
    for found in _BRACKET.finditer(text):
        bracket = found.group()
        if bracket in open_at:
            open_at[bracket].append(found.start())
        elif open_at[_OPENER[bracket]]:
            closers[open_at[_OPENER[bracket]].pop()] = found.end()
    return closers


def _c_chain(text: str, open_paren: int, closers: dict[int, int]) -> list[tuple[int, int]]:
    """The (start, end) of each branch of the chain whose first condition opens at `open_paren`."""
    branches: list[tuple[int, int]] = []
    while True:
        after_condition = closers.get(open_paren)
        if after_condition is None:
            return []
        branch = _c_statement(text, after_condition, closers)
        if branch is None:
            return []
        branches.append(branch)
        otherwise = _C_ELSE.match(text, branch[1])
        if otherwise is None:
            return branches
        chained = _C_IF_HERE.match(text, otherwise.end())
        if chained is None:
            last = _c_statement(text, otherwise.end(), closers)
            return branches + [last] if last is not None else []
        open_paren = chained.end() - 1


def _c_statement(text: str, position: int, closers: dict[int, int]) -> tuple[int, int] | None:
    """A block `{ ... }` or one statement up to its `;`, from the first non-space at `position`."""
    start = _SPACE.match(text, position).end()  # type: ignore[union-attr]  # \s* always matches
    if start >= len(text):
        return None
    if text[start] == "{":
        end = closers.get(start)
        return (start, end) if end is not None else None
    end = text.find(";", start)
    return (start, end + 1) if end >= 0 else None


# --- Python: if / elif / else chains that launch, and CPU-only paths --------------------------------


def _python_alternatives(text: str) -> list[tuple[tuple[int, int], int]]:
    """The spans of the branches a call does not take, each with its first statement's column."""
    tree = host_values.parse_module(text)
    if tree is None:
        return []
    offsets = line_offsets(text)
    spans: list[tuple[tuple[int, int], int]] = []
    chained: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If) or id(node) in chained:
            continue
        test = ast.unparse(node.test)
        if _CPU_WHEN_TRUE.search(test):
            spans.append(_lines(node.body, offsets))
            continue
        if _CPU_WHEN_FALSE.search(test) and node.orelse:
            spans.append(_lines(node.orelse, offsets))
            continue
        branches, tests = [node.body], [node.test]
        tail = node
        while len(tail.orelse) == 1 and isinstance(tail.orelse[0], ast.If):
            tail = tail.orelse[0]
            chained.add(id(tail))
            branches.append(tail.body)
            tests.append(tail.test)
        if tail.orelse:
            branches.append(tail.orelse)
        launches = [sum(_launches(statement) for statement in branch) for branch in branches]
        taken = _taken(text, tree, tests)
        if taken is None and not any(launches):
            continue
        if taken is None and (not tail.orelse or sum(count > 0 for count in launches) < 2):
            continue
        kept = launches.index(max(launches)) if taken is None else taken
        spans += [_lines(branch, offsets) for index, branch in enumerate(branches) if index != kept]
    return spans


def _taken(text: str, tree: ast.Module, tests: list[ast.expr]) -> int | None:
    """The branch of an if/elif chain a call takes where the text decides its tests, with the sizes the
    timed call knows put in (`x.dim() == 2` for a 2-D input); len(tests) where none holds (the else,
    or nothing); None where a test before the one that holds is not decided."""
    for index, test in enumerate(tests):
        known = names_known_at(text, test.lineno)
        rebound = host_values.rebound_names(tree, test.lineno) - known
        if any(isinstance(node, ast.Name) and node.id in rebound for node in ast.walk(test)):
            return None  # its value at the test depends on the path taken to it
        names = host_values.Values(host_values.scope_at(tree, test.lineno), host_values.PYTHON)
        holds = _holds(test, _Reading(text, names, known))
        if holds is None:
            return None
        if holds:
            return index
    return len(tests)


@dataclass(frozen=True)
class _Reading:
    """What a test is read with: the text, the names in scope at its line, and the names the timed call knows there."""

    text: str
    names: host_values.Values
    known: frozenset[str]


def _holds(test: ast.expr, reading: _Reading) -> bool | None:
    """Whether a test holds: `and`, `or` and `not` of tests, whether a name is None (a parameter the call
    passes a number or a tensor is not; one no call passes is its default), a name bound to True or
    False, and the numbers the text fixes; None where the text does not decide it."""
    if isinstance(test, ast.BoolOp):
        values = [_holds(operand, reading) for operand in test.values]
        deciding = isinstance(test.op, ast.Or)  # `or` holds once one operand holds, `and` fails once one fails
        return deciding if deciding in values else (not deciding if all(value is not None for value in values) else None)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _holds(test.operand, reading)
        return None if inner is None else not inner
    if _is_none_test(test):
        present = _present(test.left, reading)  # type: ignore[attr-defined]  # a Compare, as _is_none_test found
        return None if present is None else present == isinstance(test.ops[0], ast.IsNot)  # type: ignore[attr-defined]
    if isinstance(test, ast.Name) and test.id not in reading.known:
        bound = reading.names.bound.get(test.id)
        if isinstance(bound, ast.Constant) and (bound.value is None or isinstance(bound.value, bool)):
            return bool(bound.value)
    number = host_values.value(with_sizes_known_at(reading.text, test.lineno, test), reading.names)
    return None if number is None else bool(number)


def _is_none_test(test: ast.expr) -> bool:
    """`x is None` or `x is not None`."""
    return (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.Is, ast.IsNot))
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    )


def _present(expression: ast.expr, reading: _Reading) -> bool | None:
    """Whether a name holds something other than None where it is tested; None where the text does not say."""
    if not isinstance(expression, ast.Name):
        return None
    if expression.id in reading.known:
        return True
    bound = reading.names.bound.get(expression.id)
    if isinstance(bound, ast.Constant):
        return bound.value is not None
    return True if isinstance(bound, (ast.Tuple, ast.List, ast.Dict)) else None


def _launches(statement: ast.stmt) -> int:
    """Triton launches (`kernel[grid](...)`) in a statement."""
    return sum(isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) for node in ast.walk(statement))


def _lines(statements: list[ast.stmt], offsets: list[int]) -> tuple[tuple[int, int], int]:
    """The text span of the whole lines the statements take, and the column the first begins at."""
    first, last = statements[0].lineno, statements[-1].end_lineno or statements[-1].lineno
    return (offsets[first - 1], offsets[min(last, len(offsets) - 1)]), statements[0].col_offset
