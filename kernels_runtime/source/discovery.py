"""Find the kernels in one file, with exact ranges, without importing or running it.

The server calls this on every keystroke, so it must be cheap (one regex pass to
mask comments and strings, linear scans after that), must never recurse on input
depth, and must keep working on half-typed files: a parse failure falls back to a
tolerant scan and says so in `problems` instead of losing every hint in the file.

Ranges are 0-based lines and columns in Python characters (code points), end
exclusive, with line breaks as LSP counts them (CRLF, CR or LF).
"""

from __future__ import annotations

import ast
import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePath

from kernelcast.kernels_runtime.source import cuda_text
from kernelcast.kernels_runtime.source.cuda_text import trim_end
from kernelcast.kernels_runtime.source.python_ast import parse_python
from kernelcast.kernels_runtime.source.triton_text import dotted, imports_of, is_triton_jit, is_triton_kernel, triton_aliases

MAX_FILE_BYTES = 2 * 1024 * 1024
CUDA_SUFFIXES = frozenset({".cu", ".cuh"})
PYTHON_SUFFIXES = frozenset({".py"})
# Calls that compile CUDA held in Python strings: callee name -> (keyword, position) of the source.
EMBEDDING_CALLS: dict[str, tuple[str, int]] = {
    "load_inline": ("cuda_sources", 2),
    "RawKernel": ("code", 0),
    "RawModule": ("code", 0),
}
# Pragma keys parsed elsewhere (launch configuration, inputs): accepted here without comment.
FOREIGN_PRAGMA_KEYS = frozenset({"launch", "inputs"})


@dataclass(frozen=True)
class Span:
    """0-based lines; columns in code points; end exclusive like LSP."""

    start_line: int
    start_col: int
    end_line: int
    end_col: int


@dataclass(frozen=True)
class DiscoveredKernel:
    name: str
    language: str  # cuda | triton | pytorch
    signature: Span  # the inlay hint goes at its end
    body: Span  # the whole definition, decorators and body included
    code: str  # the kernel's own source, what a forecaster reads
    container: str | None  # None | load_inline | RawKernel | RawModule | kernelbench
    unit: str | None = None  # an embedded CUDA kernel's whole string: its macros, constants and helpers


@dataclass(frozen=True)
class Pragmas:
    off: bool = False
    reference: str | None = None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Discovery:
    kernels: tuple[DiscoveredKernel, ...]
    pragmas: Pragmas
    problems: tuple[str, ...]
    kind: str  # cuda | triton | kernelbench | python | none
    reference_model: DiscoveredKernel | None


# --- public entry points -------------------------------------------------------------


def discover(text: str, path: str) -> Discovery:
    """Kernels, pragmas and problems of one file's text; never raises."""
    try:
        refusal = _refusal_of_text(text)
        if refusal:
            return _refused(refusal)
        pragmas = parse_pragmas(text)
        suffix = PurePath(path).suffix.lower()
        if suffix in CUDA_SUFFIXES:
            kernels, problems = _discover_cuda_file(text)
            return Discovery(tuple(kernels), pragmas, tuple(problems), "cuda", None)
        if suffix in PYTHON_SUFFIXES:
            return _discover_python_file(text, pragmas)
        return Discovery((), pragmas, (), "none", None)
    except Exception as error:  # a safety net: a scanner bug must cost hints, not the server
        return _refused(f"kernelcast could not scan this file ({type(error).__name__}: {error})")


def source_text(data: bytes) -> tuple[str, None] | tuple[None, str]:
    """A file's bytes as an editor shows them, or why not: big and binary files are refused;
    bytes that are not UTF-8 (Latin-1 in a comment) become U+FFFD, as VS Code shows them, so the
    CLI reads every file the editor opens and both see the same text."""
    if len(data) > MAX_FILE_BYTES:
        return None, _too_big(len(data))
    if b"\x00" in data:
        return None, "binary file"
    # Editors hide a byte order mark, so positions must be counted without it.
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff"), None


def discover_bytes(data: bytes, path: str) -> Discovery:
    """`discover` for raw file contents (`source_text`)."""
    text, problem = source_text(data)
    if text is not None:
        return discover(text, path)
    assert problem is not None  # source_text says why whenever it gives no text
    return _refused(problem)


def normalise_code(code: str, language: str) -> str:
    """Code without comments and with whitespace squeezed, for cache keys and "identical" checks.

    Spaces survive only where dropping them would glue two words or two operators
    into another token; string literals are kept verbatim.
    """
    found = cuda_text.trivia(code) if language == "cuda" else ((m.lastgroup, m.start(), m.end()) for m in _PY_TRIVIA.finditer(code))
    pieces: list[str] = []
    last = 0
    for kind, start, end in found:
        if kind == "directive":
            continue  # preprocessor lines are code: squeeze them with the rest
        pieces.append(_squeeze(code[last:start]))
        if kind != "comment":
            pieces.append(code[start:end])
        last = end
    pieces.append(_squeeze(code[last:]))
    return "".join(pieces).strip()


def parse_pragmas(text: str) -> Pragmas:
    """`kernelcast: off` and `kernelcast: reference=path[::kernel]` from `//` or `#` comments."""
    off = False
    reference: str | None = None
    reference_line = 0
    problems: list[str] = []
    lines = None
    for match in _PRAGMA.finditer(text):
        body = match.group("body").strip().removesuffix("*/").strip()
        items = [(m.group("key"), m.group("value")) for m in _PRAGMA_ITEM.finditer(body)]
        if items and items[0][0] in FOREIGN_PRAGMA_KEYS:
            continue
        lines = lines or _LineIndex(text)
        line = lines.position(match.start())[0] + 1
        if not items:
            problems.append(f"line {line}: empty kernelcast pragma; use `kernelcast: off` or `kernelcast: reference=path[::kernel]`")
        for key, value in items:
            if key == "off" and value is None:
                off = True
            elif key == "reference" and value:
                if reference is not None:
                    problems.append(f"line {line}: reference set again (first on line {reference_line}); using line {line}")
                reference, reference_line = value.strip('"'), line
            elif key == "reference":
                problems.append(f"line {line}: `reference` needs a value: `reference=path[::kernel]`")
            elif key == "off":
                problems.append(f"line {line}: `off` takes no value")
            else:
                problems.append(f"line {line}: unknown kernelcast pragma key {key!r}; known: off, reference=path[::kernel]")
    return Pragmas(off=off, reference=reference, problems=tuple(problems))


_PRAGMA = re.compile(r"(?://|#)[ \t]*kernelcast:(?P<body>[^\r\n]*)")
_PRAGMA_ITEM = re.compile(r'(?P<key>[^\s=]+)(?:=(?P<value>"[^"]*"|\S*))?')


def _refusal_of_text(text: str) -> str | None:
    if len(text) > MAX_FILE_BYTES:
        return _too_big(len(text))
    if 4 * len(text) > MAX_FILE_BYTES:  # only then can the UTF-8 size pass the limit
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_FILE_BYTES:
            return _too_big(size)
    if "\x00" in text:
        return "binary file"
    return None


def _too_big(size: int) -> str:
    return f"file is {size / 2**20:.1f} MB; kernelcast reads files up to {MAX_FILE_BYTES // 2**20} MB"


def _refused(problem: str) -> Discovery:
    return Discovery((), Pragmas(), (problem,), "none", None)


# --- positions -----------------------------------------------------------------------


class _LineIndex:
    """Offset <-> (line, column) for one text, with CRLF, CR and LF breaks as LSP counts them."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0, *(m.end() for m in _LINE_BREAK.finditer(text))]

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect_right(self.starts, offset) - 1
        return line, offset - self.starts[line]

    def span(self, start: int, end: int) -> Span:
        return Span(*self.position(start), *self.position(end))

    def line_end(self, line: int) -> int:
        """Offset of the line break ending `line` (or of the end of the text)."""
        if line + 1 < len(self.starts):
            next_start = self.starts[line + 1]
            return next_start - (2 if self.text.startswith("\r\n", next_start - 2) else 1)
        return len(self.text)


_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_NOT_LINE_BREAK = re.compile(r"[^\r\n]")


def _squeeze(code: str) -> str:
    def keep_or_drop(match: re.Match[str]) -> str:
        before = code[match.start() - 1] if match.start() else ""
        after = code[match.end()] if match.end() < len(code) else ""
        glue = (_is_word(before) and _is_word(after)) or (before in _OPERATORS and after in _OPERATORS)
        return " " if before and after and glue else ""

    return _WHITESPACE.sub(keep_or_drop, code)


_WHITESPACE = re.compile(r"\s+")
_OPERATORS = frozenset("+-*/%&|^!~<>=.:?")


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


# --- CUDA ----------------------------------------------------------------------------


def _discover_cuda_file(text: str) -> tuple[list[DiscoveredKernel], list[str]]:
    lines = _LineIndex(text)
    kernels: list[DiscoveredKernel] = []
    problems: list[str] = []
    for found in cuda_text.kernels(text):
        kernels.append(
            DiscoveredKernel(
                found.name,
                "cuda",
                lines.span(found.start, found.signature_end),
                lines.span(found.start, found.end),
                text[found.start : found.end],
                None,
            )
        )
        if found.unfinished:
            problems.append(_unfinished_problem(found, lines.position(found.start)[0]))
    return kernels, problems


def _unfinished_problem(kernel: cuda_text.Function, line: int) -> str:
    return f"kernel `{kernel.name}` at line {line + 1} has an unfinished {kernel.unfinished}; its range is a guess"


# --- Python: masking and string literals ---------------------------------------------


def _string_pattern(quote: str) -> str:
    if len(quote) == 3:
        body = rf"(?:[^{quote[0]}\\]+|\\[\s\S]|{quote[0]}(?!{quote[1:]}))*(?:{quote}|\Z)"
    else:
        body = rf"(?:[^{quote}\\\r\n]+|\\[\s\S])*{quote}?"
    return quote + body


_PY_TRIVIA = re.compile(
    r"(?P<comment>\#[^\r\n]*)|(?P<string>(?P<prefix>(?<!\w)[rRbBuUfF]{1,2})?(?:"
    + "|".join(_string_pattern(q) for q in ("'''", '"""', "'", '"'))
    + "))"
)
_SIMPLE_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_ESCAPE = r"\\(?:\r\n|[\r\n]|[0-7]{1,3}|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}\r\n]*\}|[\\'\"abfnrtv])"
# Sequences whose value differs from their source text, per kind of literal (raw?, f-string?).
_DECODED = {
    (False, False): re.compile(rf"{_ESCAPE}|\r\n?"),
    (False, True): re.compile(rf"{_ESCAPE}|\r\n?|\{{\{{|\}}\}}|(?P<field>[{{}}])"),
    (True, False): re.compile(r"\r\n?"),
    (True, True): re.compile(r"\r\n?|\{\{|\}\}|(?P<field>[{}])"),
}


@dataclass(frozen=True)
class _PyString:
    start: int
    prefix: str
    content_start: int
    content_end: int


class _StringMap:
    """A decoded string literal and where each of its characters sits in the file.

    Stored as runs: (value start, source start, value length, source length); a run
    with equal lengths maps one to one, any other is one escape sequence.
    """

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.runs: list[tuple[int, int, int, int]] = []
        self.length = 0

    def add(self, value: str, source_start: int, source_length: int) -> None:
        if value:
            self.parts.append(value)
            self.runs.append((self.length, source_start, len(value), source_length))
            self.length += len(value)

    @property
    def value(self) -> str:
        return "".join(self.parts)

    def source_range(self, start: int, end: int) -> tuple[int, int]:
        """File offsets of the value's characters [start, end)."""
        source_start = self._source_start(start)
        return source_start, self._source_end(end - 1) if end > start else source_start

    def _run(self, index: int) -> tuple[int, int, int, int]:
        return self.runs[max(bisect_right(self.runs, (index, float("inf"))) - 1, 0)]

    def _source_start(self, index: int) -> int:
        value_start, source_start, value_length, source_length = self._run(index)
        return source_start + (index - value_start if value_length == source_length else 0)

    def _source_end(self, index: int) -> int:
        value_start, source_start, value_length, source_length = self._run(index)
        return source_start + (index - value_start + 1 if value_length == source_length else source_length)


def _mask_python(text: str) -> tuple[str, list[_PyString]]:
    """The text with comments and string contents blanked (quotes kept), and the string literals."""
    pieces: list[str] = []
    strings: list[_PyString] = []
    last = 0
    for match in _PY_TRIVIA.finditer(text):
        pieces.append(text[last : match.start()])
        if match.lastgroup == "comment":
            pieces.append(" " * len(match.group()))
        else:
            literal = _py_string(text, match)
            strings.append(literal)
            pieces.append(text[match.start() : literal.content_start])
            pieces.append(_NOT_LINE_BREAK.sub(" ", text[literal.content_start : literal.content_end]))
            pieces.append(text[literal.content_end : match.end()])
        last = match.end()
    pieces.append(text[last:])
    return "".join(pieces), strings


def _py_string(text: str, match: re.Match[str]) -> _PyString:
    prefix = match.group("prefix") or ""
    content_start = match.start() + len(prefix)
    quote = text[content_start : content_start + 3]
    quote = quote if quote in ("'''", '"""') else quote[0]
    content_start += len(quote)
    end = match.end()
    closed = end - len(quote) >= content_start and text.startswith(quote, end - len(quote))
    return _PyString(match.start(), prefix.lower(), content_start, end - len(quote) if closed else end)


def _decode(text: str, literal: _PyString, into: _StringMap) -> bool:
    """Append the literal's value to `into`; False for bytes and for f-strings with fields."""
    if "b" in literal.prefix:
        return False
    pattern = _DECODED["r" in literal.prefix, "f" in literal.prefix]
    last = literal.content_start
    for match in pattern.finditer(text, literal.content_start, literal.content_end):
        if match.lastgroup == "field":
            return False
        into.add(text[last : match.start()], last, match.start() - last)
        into.add(_escape_value(match.group()), match.start(), match.end() - match.start())
        last = match.end()
    into.add(text[last : literal.content_end], last, literal.content_end - last)
    return True


def _escape_value(sequence: str) -> str:
    if sequence[0] != "\\":
        return "\n" if sequence[0] == "\r" else sequence[0]  # a line break or a doubled f-string brace
    kind = sequence[1]
    if kind in "\r\n":
        return ""  # a backslash-newline continues the literal
    if kind in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[kind]
    if kind in "xuU":
        return chr(int(sequence[2:], 16))
    if kind == "N":
        try:
            return unicodedata.lookup(sequence[3:-1])
        except KeyError:
            return sequence
    return chr(int(sequence[1:], 8))


# --- Python: outline of a module -----------------------------------------------------


@dataclass(frozen=True)
class _Statement:
    """A top-level statement: offsets (decorators included) and what it is."""

    start: int
    end: int
    kind: str  # import | def | class | assign | main | other
    name: str | None
    keyword: int  # offset of `def` / `class` (or of the statement)


@dataclass(frozen=True)
class _TritonFunction:
    name: str
    start: int
    keyword: int
    end: int


@dataclass
class _Outline:
    statements: list[_Statement]
    triton: list[_TritonFunction]
    embedded: list[tuple[_StringMap, str]]  # CUDA source strings and the call they feed


_STATEMENT_KIND = re.compile(
    r"(?P<import>(?:import|from)\b)"
    r"|(?:async[ \t]+)?(?P<def>def)[ \t]+(?P<def_name>\w+)"
    r"|(?P<class>class)[ \t]+(?P<class_name>\w+)"
    r"|(?P<main>if[ \t]+__name__\b)"
    r"|(?P<assign>[\w.]+(?:[ \t]*,[ \t]*[\w.]+)*[ \t]*(?::[^=\r\n]+)?=(?!=))"
)
_DEFINITION_LINE = re.compile(r"^[ \t]*(?P<keyword>(?:async[ \t]+)?(?:def|class))\b", re.MULTILINE)
_DECORATOR = re.compile(r"^[ \t]*@[ \t]*(?P<name>[\w.]+)", re.MULTILINE)
_HEADER_TOKEN = re.compile(r"[(\[{]|[)\]}]|:|\r\n?|\n")


def _classify(masked: str, start: int, end: int) -> _Statement:
    keyword = start
    if masked.startswith("@", start):
        definition = _DEFINITION_LINE.search(masked, start, end)
        keyword = definition.start("keyword") if definition else start
    match = _STATEMENT_KIND.match(masked, keyword, end)
    if match is None:
        return _Statement(start, end, "other", None, keyword)
    kind = next(kind for kind in ("import", "def", "class", "main", "assign") if match.group(kind))
    return _Statement(start, end, kind, match.group("def_name") or match.group("class_name"), keyword)


def _python_header_end(masked: str, keyword: int, limit: int) -> int:
    """End of a `def`/`class` header: after its first `:` outside brackets (or its line, if half-typed)."""
    depth = 0
    for token in _HEADER_TOKEN.finditer(masked, keyword, limit):
        char = token.group()[0]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        elif char == ":" and depth == 0:
            return token.end()
        elif char in "\r\n" and depth == 0 and masked[token.start() - 1] != "\\":
            return trim_end(masked, token.start(), keyword)
    return trim_end(masked, limit, keyword)


class _AstPositions:
    """ast (line, UTF-8 byte column) -> offsets into the text."""

    def __init__(self, lines: _LineIndex, shift: int) -> None:
        self.lines = lines
        self.shift = shift  # 1 when a byte order mark was left out of the parsed text

    def offset(self, lineno: int, col: int) -> int:
        start = self.lines.starts[lineno - 1] + (self.shift if lineno == 1 else 0)
        line = self.lines.text[start : self.lines.line_end(lineno - 1)]
        if line.isascii():
            return start + col
        return start + len(line.encode("utf-8", "surrogatepass")[:col].decode("utf-8", "ignore"))

    def start_of(self, node: ast.stmt | ast.expr) -> int:
        return self.offset(node.lineno, node.col_offset)

    def end_of(self, node: ast.stmt | ast.expr) -> int:
        assert node.end_lineno is not None and node.end_col_offset is not None  # ast.parse sets both
        return self.offset(node.end_lineno, node.end_col_offset)

    def definition_start(self, node: ast.stmt) -> int:
        """Where a statement starts, at the `@` of its first decorator if it has one."""
        decorators = getattr(node, "decorator_list", None)
        if not decorators:
            return self.start_of(node)
        line_start = self.lines.starts[decorators[0].lineno - 1]
        at = self.lines.text.find("@", line_start)
        return at if at >= 0 else self.start_of(decorators[0])


def _outline_from_ast(tree: ast.Module, source: _PythonSource, positions: _AstPositions) -> _Outline:
    statements = [_classify(source.masked, positions.definition_start(node), positions.end_of(node)) for node in tree.body]
    every_statement = list(_all_statements(tree))
    functions = [node for node in every_statement if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.decorator_list]
    # Walking every expression is the slow part of a big file: only do it when CUDA may be compiled.
    needs_calls = _EMBEDDING_CALL_NAME.search(source.masked) is not None
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)] if needs_calls else []
    aliases = triton_aliases(imports_of(every_statement))
    triton = [
        _TritonFunction(node.name, positions.definition_start(node), positions.start_of(node), positions.end_of(node))
        for node in functions
        if is_triton_kernel(node, aliases)
    ]
    return _Outline(statements, triton, _embedded_from_calls(tree, calls, source, positions))


def _all_statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """Every statement at any depth, without descending into expressions (iterative)."""
    stack: list[ast.AST] = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.stmt):
            yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                stack.extend(reversed(children))


def _embedded_from_calls(
    tree: ast.Module, calls: list[ast.Call], source: _PythonSource, positions: _AstPositions
) -> list[tuple[_StringMap, str]]:
    module_values: dict[str, ast.expr] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
            module_values[statement.targets[0].id] = statement.value
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
            module_values[statement.target.id] = statement.value
    embedded: list[tuple[_StringMap, str]] = []
    seen: set[int] = set()
    for call in calls:
        container = dotted(call.func).rpartition(".")[2]
        if container not in EMBEDDING_CALLS:
            continue
        keyword, position = EMBEDDING_CALLS[container]
        argument = next((k.value for k in call.keywords if k.arg == keyword), None)
        if argument is None and len(call.args) > position:
            argument = call.args[position]
        for literal in _string_leaves(argument, module_values):
            if id(literal) not in seen:
                seen.add(id(literal))
                mapped = _literal_map(literal, source, positions)
                if mapped is not None:
                    embedded.append((mapped, container))
    return embedded


def _string_leaves(root: ast.expr | None, module_values: dict[str, ast.expr]) -> Iterator[ast.expr]:
    """String literals that make up an argument: through lists, `+` and module-level names."""
    stack = [root] if root is not None else []
    followed: set[str] = set()
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node
        elif isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
            yield node
        elif isinstance(node, (ast.List, ast.Tuple)):
            stack.extend(reversed(node.elts))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            stack.extend((node.right, node.left))
        elif isinstance(node, ast.Name) and node.id in module_values and node.id not in followed:
            followed.add(node.id)
            stack.append(module_values[node.id])


def _literal_map(node: ast.expr, source: _PythonSource, positions: _AstPositions) -> _StringMap | None:
    """The literal's value mapped to the file: exact when our decoding agrees with Python's."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        expected = node.value
    else:
        assert isinstance(node, ast.JoinedStr)  # _string_leaves yields str constants and f-strings of constants
        expected = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    pieces = source.strings_between(positions.start_of(node), positions.end_of(node))
    if not pieces:
        return None
    mapped = _StringMap()
    if all(_decode(source.text, literal, mapped) for literal in pieces) and mapped.value == expected:
        return mapped
    approximate = _StringMap()  # an escape we decode differently: keep the text, guess positions
    approximate.add(expected, pieces[0].content_start, len(expected))
    return approximate


_STATEMENT_START = re.compile(r"^[^\s)\]}]", re.MULTILINE)
_CONTINUATION = re.compile(r"(?:else|elif|except|finally)\b")
_IMPORT_LINE = re.compile(r"^[ \t]*import[ \t]+(?P<module>[\w.]+)(?:[ \t]+as[ \t]+(?P<alias>\w+))?", re.MULTILINE)
_FROM_LINE = re.compile(r"^[ \t]*from[ \t]+(?P<module>[\w.]+)[ \t]+import[ \t]+\(?(?P<names>[^\r\n)]*)", re.MULTILINE)
_EMBEDDING_CALL_NAME = re.compile(r"\b(?:" + "|".join(EMBEDDING_CALLS) + r")\b")


def _outline_from_scan(source: _PythonSource) -> _Outline:
    """The outline of a file Python cannot parse: top-level statements start at column 0."""
    masked = source.masked
    starts: list[int] = []
    decorating = False  # the last statement is decorators still waiting for their def/class
    for match in _STATEMENT_START.finditer(masked):
        position = match.start()
        joins = decorating or _CONTINUATION.match(masked, position)
        decorating = masked.startswith("@", position) or (decorating and not _DEFINITION_LINE.match(masked, position))
        if not (starts and joins):
            starts.append(position)
    ends = [trim_end(masked, following, start) for start, following in zip(starts, [*starts[1:], len(masked)])]
    statements = [_classify(masked, start, end) for start, end in zip(starts, ends)]
    aliases = triton_aliases(_scanned_imports(masked))
    triton = [
        _TritonFunction(statement.name, statement.start, statement.keyword, statement.end)
        for statement in statements
        if statement.kind == "def"
        and statement.name is not None  # a def always has one
        and any(is_triton_jit(m.group("name"), aliases) for m in _DECORATOR.finditer(masked, statement.start, statement.keyword))
    ]
    return _Outline(statements, triton, _embedded_from_scan(source))


def _scanned_imports(masked: str) -> Iterator[tuple[str, str | None, str | None]]:
    for match in _IMPORT_LINE.finditer(masked):
        yield match.group("module"), None, match.group("alias")
    for match in _FROM_LINE.finditer(masked):
        for item in match.group("names").split(","):
            name, _, alias = item.strip().partition(" as ")
            if name.strip():
                yield match.group("module"), name.strip(), alias.strip() or None


def _embedded_from_scan(source: _PythonSource) -> list[tuple[_StringMap, str]]:
    """CUDA strings of an unparsable file: any literal with `__global__`, if the file compiles CUDA at all.

    The container is a guess: the nearest `load_inline`/`RawKernel`/`RawModule` in the text.
    """
    sites = [(match.start(), match.group()) for match in _EMBEDDING_CALL_NAME.finditer(source.masked)]
    embedded: list[tuple[_StringMap, str]] = []
    if not sites:
        return embedded
    site_offsets = [offset for offset, _ in sites]
    for literal in source.strings:
        if source.text.find("__global__", literal.content_start, literal.content_end) < 0:
            continue
        mapped = _StringMap()
        if _decode(source.text, literal, mapped):
            after = bisect_right(site_offsets, literal.start)
            nearby = sites[max(after - 1, 0) : after + 1]
            embedded.append((mapped, min(nearby, key=lambda site: abs(site[0] - literal.start))[1]))
    return embedded


# --- Python: from outline to kernels -------------------------------------------------

_REFERENCE_FUNCTIONS = frozenset({"get_inputs", "get_init_inputs"})
_CANDIDATE_ONLY = re.compile(r"\b(?:load_inline|RawKernel|RawModule|cpp_extension|triton)\b")


class _PythonSource:
    """A Python file's text with its masked twin, string literals and line index."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = _LineIndex(text)
        self.masked, self.strings = _mask_python(text)
        self.string_starts = [literal.start for literal in self.strings]

    def strings_between(self, start: int, end: int) -> list[_PyString]:
        return self.strings[bisect_left(self.string_starts, start) : bisect_left(self.string_starts, end)]

    def definition(
        self, name: str, language: str, keyword: int, start: int, end: int, container: str | None, code: str | None = None
    ) -> DiscoveredKernel:
        """A kernel for a `def`/`class` whose header starts at `keyword`."""
        header_end = _python_header_end(self.masked, keyword, end)
        return DiscoveredKernel(
            name,
            language,
            self.lines.span(keyword, header_end),
            self.lines.span(start, end),
            self.text[start:end] if code is None else code,
            container,
        )


def _discover_python_file(text: str, pragmas: Pragmas) -> Discovery:
    source = _PythonSource(text)
    problems: list[str] = []
    outline = _parse_outline(source, problems)
    kernels = [source.definition(f.name, "triton", f.keyword, f.start, f.end, None) for f in outline.triton]
    embedded = _embedded_kernels(outline.embedded, source.lines, problems)
    kernels.extend(embedded)
    classes = {s.name: s for s in outline.statements if s.kind == "class"}
    model, model_new = classes.get("Model"), classes.get("ModelNew")
    has_inputs = any(s.kind == "def" and s.name == "get_inputs" for s in outline.statements)
    reference_model = None
    if model_new is not None:
        language = "cuda" if embedded else "triton" if outline.triton else "pytorch"
        code = text[: model.start] + text[model.end :] if model else text
        kernels.append(source.definition("ModelNew", language, model_new.keyword, model_new.start, model_new.end, "kernelbench", code))
    if model is not None and (model_new is not None or has_inputs):
        reference_code = _reference_code(outline.statements, source)
        reference_model = source.definition("Model", "pytorch", model.keyword, model.start, model.end, "kernelbench", reference_code)
    kind = "kernelbench" if model_new or reference_model else "triton" if outline.triton else "python"
    kernels.sort(key=lambda k: (k.body.start_line, k.body.start_col))
    return Discovery(tuple(kernels), pragmas, tuple(problems), kind, reference_model)


def _parse_outline(source: _PythonSource, problems: list[str]) -> _Outline:
    """The ast outline, or the tolerant scan's with a problem saying why."""
    bom = source.text.startswith("\ufeff")
    try:
        tree = parse_python(source.text[1:] if bom else source.text)
        return _outline_from_ast(tree, source, _AstPositions(source.lines, int(bom)))
    except SyntaxError as error:
        problems.append(f"syntax error at line {error.lineno}: kernels found by a tolerant scan")
    except (RecursionError, MemoryError):
        problems.append("nested too deeply for the Python parser: kernels found by a tolerant scan")
    return _outline_from_scan(source)


def _embedded_kernels(embedded: list[tuple[_StringMap, str]], lines: _LineIndex, problems: list[str]) -> list[DiscoveredKernel]:
    kernels: list[DiscoveredKernel] = []
    for mapped, container in embedded:
        value = mapped.value
        for found in cuda_text.kernels(value):
            start, signature_end = mapped.source_range(found.start, found.signature_end)
            end = mapped.source_range(found.start, found.end)[1]
            kernels.append(
                DiscoveredKernel(
                    found.name,
                    "cuda",
                    lines.span(start, signature_end),
                    lines.span(start, end),
                    value[found.start : found.end],
                    container,
                    value,
                )
            )
            if found.unfinished:
                problems.append(_unfinished_problem(found, lines.position(start)[0]))
    return kernels


def _reference_code(statements: list[_Statement], source: _PythonSource) -> str:
    """The KernelBench reference program: the kept statements, with their original spacing between neighbours."""
    pieces: list[str] = []
    previous_kept = False
    for index, statement in enumerate(statements):
        kept = _in_reference(statement, source)
        if kept:
            if pieces:
                pieces.append(source.text[statements[index - 1].end : statement.start] if previous_kept else "\n\n\n")
            pieces.append(source.text[statement.start : statement.end])
        previous_kept = kept
    return "".join(pieces) + "\n"


def _in_reference(statement: _Statement, source: _PythonSource) -> bool:
    """Whether a top-level statement belongs to the KernelBench reference (Model, inputs, imports, constants)."""
    if statement.kind == "import":
        return True
    if statement.kind == "class":
        return statement.name == "Model"
    if statement.kind == "def":
        return statement.name in _REFERENCE_FUNCTIONS
    if statement.kind == "assign":
        return (
            _CANDIDATE_ONLY.search(source.masked, statement.start, statement.end) is None
            and source.text.find("__global__", statement.start, statement.end) < 0
        )
    return False
