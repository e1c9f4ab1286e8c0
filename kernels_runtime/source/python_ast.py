"""`ast.parse` that threads may share.

The language server reads files on worker threads. CPython 3.11 keeps the recursion depth of its
tree builder in one per-interpreter counter, so two parses that interleave (a garbage collection
in one lets the other run) can fail with `SystemError: AST constructor recursion depth mismatch`.
Every parse of user text goes through here, one at a time; a parse takes milliseconds.
"""

from __future__ import annotations

import ast
import re
import threading
import warnings

_ONE_AT_A_TIME = threading.Lock()
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def parse_python(text: str) -> ast.Module:
    """`ast.parse(text)` without its SyntaxWarnings (the user's escapes are not ours to print).

    Raises what ast.parse raises: SyntaxError, ValueError, RecursionError, MemoryError.
    """
    tree = _parse(text, "exec")
    assert isinstance(tree, ast.Module)
    return tree


def parse_python_expression(text: str) -> ast.expr:
    """One expression's tree, read as parse_python reads a module."""
    tree = _parse(text, "eval")
    assert isinstance(tree, ast.Expression)
    return tree.body


def _parse(text: str, mode: str) -> ast.AST:
    with _ONE_AT_A_TIME, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(text, mode=mode)


def line_offsets(text: str) -> list[int]:
    """Where each line starts, lines broken as Python's parser breaks them, and the text's end:
    `offsets[node.lineno - 1]` is where a node's first line starts."""
    return [0, *(found.end() for found in _LINE_BREAK.finditer(text)), len(text)]
