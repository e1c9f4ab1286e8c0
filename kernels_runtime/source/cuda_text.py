"""The one reader of CUDA/C++ text that discovery, launch pragmas, compiler facts, access
patterns and loop trips share: comment and string masking (offsets kept), tokens, a macro
table with bounded expansion, and an index of the functions a text defines.

The function index comes from tree-sitter's CUDA grammar when the text parses without an
error (and the wheel is installed), else from a tolerant scanner that finds half-typed
kernels too: tree-sitter files an unfinished kernel under an ERROR node, the editor still
needs its name and range. Both give the same spans on well-formed text (a test checks
them on the examples). tree-sitter is imported on the first CUDA text read, not before.

Nothing here recurses on input depth, and macro expansion stops after a fixed budget of
tokens, so hostile text (self-referencing, exponentially growing macros) costs bounded time.
"""

from __future__ import annotations

import bisect
import functools
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

KERNEL = "__global__"
DEVICE = "__device__"
# Texts larger than this are indexed by the scanner alone: tree-sitter's parse and the walk of
# its tree grow with the text (~0.4 ms a KB, 9 ms for 300 small kernels), and a kernel file
# this big is generated (thousands of kernels) or hostile, where the scanner's answer is as
# good and a keystroke must not wait for a parse.
MAX_PARSED_CHARS = 64 * 1024
# Tokens that macro expansion may produce, and tokens it may push while expanding (bodies
# and substituted arguments): past either, the rest of the text is kept unexpanded.
MAX_EXPANDED_TOKENS = 200_000
MAX_EXPANSION_WORK = 4 * MAX_EXPANDED_TOKENS

# --- masking -------------------------------------------------------------------------------

# Comments, literals and preprocessor lines, each found from its first character: a search for
# those characters is a fast scan, where one pattern of all three kinds is tried at every offset.
_COMMENT = re.compile(r"//[^\r\n]*|/\*[\s\S]*?(?:\*/|\Z)")
_RAW_STRING = re.compile(r'(?:u8|[uUL])?R"(?P<delim>[^()\\\s]{0,16})\([\s\S]*?(?:\)(?P=delim)"|\Z)')
_RAW_PREFIXES = ("u8R", "uR", "UR", "LR", "R")
_STRING = re.compile(r'"(?:[^"\\\r\n]+|\\[\s\S])*"?')
_CHARACTER = re.compile(r"'(?:[^'\\\r\n]+|\\[\s\S])*'?")
_DIRECTIVE = re.compile(r'[ \t]*\#(?:[^\r\n\\/"]+|"(?:[^"\\\r\n]|\\.)*"?|\\[\s\S]|/(?![/*]))*')
_TRIVIA_START = re.compile(r"""/[/*]|["']|\n[ \t]*\#""")
_WORD = re.compile(r"\w")
_NOT_LINE_BREAK = re.compile(r"[^\r\n]")


def trivia(text: str) -> Iterator[tuple[str, int, int]]:
    """(kind, start, end) of each comment, string or character literal and preprocessor line, in order.

    A directive runs to the end of its line (continuations included) or to a comment; a `'`
    after a digit is a digit separator; an unclosed literal or comment ends at its line or the text's end.
    """
    position = 0
    if (found := _DIRECTIVE.match(text)) is not None:
        yield "directive", 0, found.end()
        position = found.end()
    while (candidate := _TRIVIA_START.search(text, position)) is not None:
        start = candidate.start()
        first = text[start]
        if first == "\n":
            kind, start = "directive", start + 1
            found = _DIRECTIVE.match(text, start)
        elif first == "/":
            kind, found = "comment", _COMMENT.match(text, start)
        elif first == "'":
            if start and "0" <= text[start - 1] <= "9":
                position = start + 1
                continue
            kind, found = "string", _CHARACTER.match(text, start)
        else:
            kind, found = "string", None
            for prefix in _RAW_PREFIXES:
                raw_start = start - len(prefix)
                if raw_start >= position and text.startswith(prefix, raw_start) and not (raw_start and _WORD.match(text, raw_start - 1)):
                    found = _RAW_STRING.match(text, raw_start)
                    if found is not None:
                        start = raw_start
                    break
            found = found or _STRING.match(text, start)
        assert found is not None
        yield kind, start, found.end()
        position = max(found.end(), start + 1)


def mask(text: str, *, strings: bool = True, directives: bool = True) -> str:
    """The text with comments (and, unless told otherwise, literals and preprocessor lines) blanked; offsets and line breaks kept."""
    blanked = {"comment"} | ({"string"} if strings else set()) | ({"directive"} if directives else set())
    return blank(text, [(start, end) for kind, start, end in trivia(text) if kind in blanked])


def blank(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """The text with each (start, end) span turned to spaces, line breaks kept, so offsets and line
    numbers still point where they did; overlapping spans are blanked once."""
    pieces: list[str] = []
    last = 0
    for start, end in sorted(spans):
        if end <= last:
            continue
        start = max(start, last)
        pieces += [text[last:start], _NOT_LINE_BREAK.sub(" ", text[start:end])]
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def directives(text: str) -> list[str]:
    """The preprocessor lines of a text, continuation lines joined, trailing comments left out."""
    return [text[start:end].replace("\\\r\n", " ").replace("\\\n", " ") for kind, start, end in trivia(text) if kind == "directive"]


def match_close(masked: str, open_at: int, limit: int) -> int | None:
    """Offset after the bracket closing the one at `open_at` (counting, no recursion); None if unclosed before `limit`."""
    opener = masked[open_at]
    depth = 0
    for match in _BRACKETS[opener].finditer(masked, open_at, limit):
        depth += 1 if match.group() == opener else -1
        if depth == 0:
            return match.end()
    return None


_BRACKETS = {"(": re.compile(r"[()]"), "{": re.compile(r"[{}]"), "[": re.compile(r"[\[\]]"), "<": re.compile(r"[<>]")}


def trim_end(text: str, end: int, floor: int) -> int:
    """Move `end` back over whitespace, not below `floor`."""
    while end > floor and text[end - 1].isspace():
        end -= 1
    return end


# --- tokens --------------------------------------------------------------------------------

TOKEN = re.compile(
    r""""(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'"""
    r"|0[xX][0-9a-fA-F]+[uUlL]*|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFuUlL]*"
    r"|[A-Za-z_]\w*"
    r"|<<=|>>=|->|::|\+\+|--|<<|>>|&&|\|\||[-+*/%&|^!=<>]="
    r"|\S"
)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def tokens(code: str) -> list[str]:
    """C tokens of code that has no comments or directives left (see `mask`)."""
    return TOKEN.findall(code)


_TOKEN_OPENERS = {"(": ")", "[": "]", "{": "}"}
_TOKEN_CLOSERS = {")": "(", "]": "[", "}": "{"}
_TOKEN_BRACKETS = _TOKEN_OPENERS.keys() | _TOKEN_CLOSERS.keys()


def token_partners(tokens: Sequence[str]) -> list[int]:
    """For each opening bracket the index of its closing one (len(tokens) when unclosed)."""
    partner = [len(tokens)] * len(tokens)
    stack: list[int] = []
    # Only brackets matter, a quarter of a kernel's tokens: found first in one comprehension.
    for index in [index for index, token in enumerate(tokens) if token in _TOKEN_BRACKETS]:
        token = tokens[index]
        if token in _TOKEN_OPENERS:
            stack.append(index)
        else:
            # A stray closer (unbalanced text) closes the nearest opener of its kind, if near.
            for depth in range(len(stack) - 1, max(len(stack) - 5, -1), -1):
                if tokens[stack[depth]] == _TOKEN_CLOSERS[token]:
                    for opener in stack[depth:]:
                        partner[opener] = index
                    del stack[depth:]
                    break
    return partner


# --- macros --------------------------------------------------------------------------------

_DEFINE = re.compile(r"#\s*define\s+([A-Za-z_]\w*)(\([^)]*\))?(.*)", re.S)


@dataclass(frozen=True)
class Macro:
    """One `#define`: `parameters` is None for an object-like macro."""

    name: str
    parameters: tuple[str, ...] | None
    body: tuple[str, ...]
    text: str  # the replacement as written, stripped


class MacroTable:
    """A text's `#define`s (object- and function-like; a later definition wins), expanded on tokens or on text."""

    def __init__(self, macros: dict[str, Macro]) -> None:
        self.macros = macros

    @classmethod
    def of(cls, text: str) -> MacroTable:
        return _macro_table(text)

    @functools.cached_property
    def _call_pattern(self) -> re.Pattern[str] | None:
        calls = [name for name, macro in self.macros.items() if macro.parameters is not None]
        return re.compile(r"(?<![\w.])(?:" + "|".join(map(re.escape, calls)) + r")\s*\(") if calls else None

    def objects(self) -> dict[str, str]:
        """Object-like macros: name -> replacement text."""
        return {name: macro.text for name, macro in self.macros.items() if macro.parameters is None}

    def expand(self, sequence: Sequence[str]) -> list[str]:
        """The tokens with every macro expanded (a macro is not expanded inside itself), within the budgets."""
        out: list[str] = []
        if not self.macros:
            return list(sequence)
        work = 0
        stack: list[tuple[Sequence[str], int, frozenset[str]]] = [(sequence, 0, frozenset())]
        while stack:
            current, index, active = stack.pop()
            while index < len(current):
                token = current[index]
                index += 1
                macro = self.macros.get(token)
                if macro is None or token in active or len(out) > MAX_EXPANDED_TOKENS or work > MAX_EXPANSION_WORK:
                    out.append(token)
                    continue
                if macro.parameters is None:
                    body: Sequence[str] = macro.body
                else:
                    if index >= len(current) or current[index] != "(":
                        out.append(token)
                        continue
                    arguments, index = _macro_arguments(current, index)
                    values = dict(zip(macro.parameters, arguments))
                    body = [piece for word in macro.body for piece in values.get(word, (word,))]
                work += len(body) + 1
                stack.append((current, index, active))
                stack.append((body, 0, active | {token}))
                break
        return out

    def expand_calls(self, code: str) -> str:
        """Code with each call of a function-like macro replaced by its expansion (tokens joined by spaces)."""
        pattern = self._call_pattern
        if pattern is None:
            return code
        pieces: list[str] = []
        last = 0
        position = 0
        while (call := pattern.search(code, position)) is not None:
            close = match_close(code, call.end() - 1, len(code))
            if close is None:
                break
            pieces.append(code[last : call.start()])
            pieces.append(" ".join(self.expand(tokens(code[call.start() : close]))))
            last = position = close
        pieces.append(code[last:])
        return "".join(pieces)


@functools.lru_cache(maxsize=64)
def _macro_table(text: str) -> MacroTable:
    macros: dict[str, Macro] = {}
    if "define" in text:
        for directive in directives(mask(text, strings=False, directives=False)):
            found = _DEFINE.match(directive.strip())
            if found:
                parameters = None
                if found.group(2) is not None:
                    parameters = tuple(name.strip() for name in found.group(2)[1:-1].split(",") if name.strip())
                macros[found.group(1)] = Macro(found.group(1), parameters, tuple(tokens(found.group(3))), found.group(3).strip())
    return MacroTable(macros)


def _macro_arguments(sequence: Sequence[str], index: int) -> tuple[list[list[str]], int]:
    """The comma-separated arguments of a macro call starting at its '(' and the index after ')'."""
    arguments: list[list[str]] = [[]]
    depth = 0
    for position in range(index, len(sequence)):
        token = sequence[position]
        if token in _TOKEN_OPENERS:
            depth += 1
            if depth == 1:
                continue
        elif token in _TOKEN_CLOSERS:
            depth -= 1
            if depth == 0:
                return arguments, position + 1
        elif token == "," and depth == 1:
            arguments.append([])
            continue
        arguments[-1].append(token)
    return arguments, len(sequence)


# --- the function index ----------------------------------------------------------------------


@dataclass(frozen=True)
class Function:
    """A function definition (or a half-typed one) as offsets into the indexed text."""

    name: str
    qualifier: str  # __global__ | __device__
    start: int  # the declaration's first character: `template`, `extern "C"` and specifiers included
    name_start: int
    signature_end: int  # after the parameter list's `)` (or the end of the name's line while it is unclosed)
    end: int
    parameters: tuple[int, int] | None  # inside the parentheses; None while unclosed
    body: tuple[int, int] | None  # inside the braces; None while missing or unclosed
    template: str | None  # the template parameter list as written, `<...>` included
    launch_bounds: tuple[str, ...] | None  # the arguments of `__launch_bounds__(...)` as written
    extern_c: bool
    unfinished: str | None  # what is missing: "parameter list" | "body" | None
    definition: bool = True  # False: a declaration (`__global__ void k(float*);`), which has no body

    def parameter_text(self, text: str) -> str:
        return text[self.parameters[0] : self.parameters[1]] if self.parameters else ""

    def parameter_names(self, text: str) -> list[str]:
        """The declared names, in order (the last word of each parameter before any default)."""
        return [name for name, _ in self.parameter_declarations(text)]

    def parameter_declarations(self, text: str) -> list[tuple[str, str]]:
        return parameter_declarations(self.parameter_text(text))


def parameter_declarations(parameter_text: str) -> list[tuple[str, str]]:
    """Each parameter's name and its declaration without it (`const float *`), in order, of the text
    inside a parameter list's parentheses; an array parameter (`float x[N]`) reads as a pointer, its
    extent not taken for its name."""
    found = []
    for parameter in split_top_level(mask(parameter_text), ","):
        declared = parameter.split("=")[0]
        extent = declared.find("[")
        words = list(_IDENTIFIER.finditer(declared[: extent if extent >= 0 else None]))
        if words and [word.group() for word in words] != ["void"]:
            name = words[-1]
            found.append((name.group(), declared[: name.start()].strip() + (" *" if extent >= 0 else "")))
    return found


def split_top_level(text: str, separator: str) -> list[str]:
    """`text` split at `separator` outside brackets (`<>` of templates included only when balanced on the way)."""
    parts, depth, start = [], 0, 0
    for index, character in enumerate(text):
        if character in "([{":
            depth += 1
        elif character in ")]}":
            depth -= 1
        elif character == separator and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts


def functions(text: str, qualifier: str = KERNEL, *, declarations: bool = False) -> tuple[Function, ...]:
    """The `__global__` (or `__device__`) functions a text defines (and declares, if asked), in order:
    tree-sitter's reading when it parses, else the scanner's."""
    parsed = parsed_functions(text) if _balanced(text) else None
    found = scanned_functions(text, qualifier) if parsed is None else parsed
    return tuple(function for function in found if function.qualifier == qualifier and (declarations or function.definition))


@functools.lru_cache(maxsize=16)
def masked(text: str) -> str:
    """`mask(text)`, kept for the few texts being read now."""
    return mask(text)


def _balanced(text: str) -> bool:
    """Whether every bracket outside comments and literals closes: text that does not cannot
    parse without an ERROR node, so tree-sitter's time on a half-typed file is saved."""
    code = masked(text)
    return code.count("{") == code.count("}") and code.count("(") == code.count(")")


# What a load_inline string holds for PyTorch's C++ extension, not for the device: nvcc cannot
# compile it without torch's headers, and the kernels never need it.
_EXTENSION_HEADER = re.compile(r"[ \t]*#\s*include\s*[<\"](?:torch|ATen|c10|pybind11|THC)\b")
_STATEMENT_END = re.compile(r"[{};]")
_EXTENSION_NAMES = re.compile(r"\b(?:torch|at|c10|pybind11|py)::|\bPYBIND11_MODULE\b|\bTORCH_[A-Z_]+\b|\bTensor\b")


@functools.lru_cache(maxsize=16)
def without_extension_code(text: str) -> str:
    """A load_inline CUDA string as nvcc can compile it alone: its includes of torch, ATen, c10 and
    pybind11 blanked, and so is every top-level statement or definition naming their types or
    macros (the host wrappers, the module definition) unless it is a kernel or device function.
    The kernels keep their macros, constants and device helpers; offsets and lines are kept.
    Kept for the few strings being read now: each of a string's kernels asks, on every edit."""
    return _blanked(text, _EXTENSION_HEADER, lambda code, start, _, end: _EXTENSION_NAMES.search(code, start, end) is not None)


# Headers NVRTC cannot open (the C and C++ libraries, the driver API, host libraries), as the GPU
# runtime compiles a `.cu` file; the CUDA runtime's and the device headers it can.
_HOST_HEADER = re.compile(
    r"[ \t]*#\s*include\s*<(?:(?:std(?:io|lib|def|arg|bool)|string|math|assert|time|float|limits|errno|signal|unistd)\.h"
    r"|c(?:stdio|stdlib|stddef|string|math|assert|time|float|limits|errno|signal)|iostream|iomanip|fstream|sstream|string"
    r"|vector|array|map|set|unordered_map|algorithm|numeric|functional|memory|chrono|random|thread|mutex|tuple"
    r"|cuda\.h|cublas\w*\.h|cudnn\w*\.h|curand\.h|cufft\w*\.h|cusparse\w*\.h|nvtx\w*\.h|helper_\w+\.h|thrust/[\w/.]+)>"
)
# A host function's definition: a parameter list, then its body (after `const`, `noexcept`, `-> T`).
_FUNCTION_DEFINITION = re.compile(r"\)\s*(?:(?:const|noexcept|override)\b\s*)*(?:->\s*[^{};()]*)?\{$")


@functools.lru_cache(maxsize=16)
def device_part(text: str) -> str:
    """A `.cu` program as NVRTC compiles it for the GPU runtime: the includes it cannot open (stdio.h,
    iostream, cuda.h, ...) and every host function (`main`, its helpers) blanked, kernels, device
    functions, macros, types and constants kept; offsets and lines are kept."""
    return _blanked(text, _HOST_HEADER, lambda code, start, body, _: _FUNCTION_DEFINITION.search(code[start : body + 1]) is not None)


def _blanked(text: str, header: re.Pattern[str], host_only: Callable[[str, int, int, int], bool]) -> str:
    """The text with the includes `header` matches and each top-level statement or definition that
    `host_only(masked code, start, where it ends or its body opens, end)` names, and that holds no
    kernel or device function, blanked."""
    spans = [(start, end) for kind, start, end in trivia(text) if kind == "directive" and header.match(text, start)]
    code = masked(text)
    device = sorted((function.start, function.end) for qualifier in (KERNEL, DEVICE) for function in functions(text, qualifier))
    device_starts = [first for first, _ in device]
    start = 0
    while (found := _STATEMENT_END.search(code, start)) is not None:
        position = found.start()
        if found.group() == "}":  # a stray closer: the statement before it ends here
            start = position + 1
            continue
        end = (match_close(code, position, len(code)) or len(code)) if found.group() == "{" else position + 1
        before = bisect.bisect_left(device_starts, end) - 1  # the last kernel or helper starting inside or before
        holds_device_code = before >= 0 and device[before][1] > start
        if not holds_device_code and host_only(code, start, position, end):
            spans.append((start, end))
        start = end
    return blank(text, spans)


# What a template kernel's launch in host code may pass that the compiler of facts can spell alone:
# AT_DISPATCH's `scalar_t` is read as float (KernelBench's inputs are float32), built-in types and
# integer literals stand as written, and a name only where a `#define` or top-level constant fixes it.
_DISPATCHED_TYPES = {"scalar_t": "float"}
_BUILT_IN_TYPES = frozenset(
    {"float", "double", "int", "unsigned", "long", "short", "char", "bool", "half", "__half", "__nv_bfloat16"}
    | {"int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "size_t", "true", "false"}
)
_TEMPLATE_ARGUMENT = re.compile(r"(?:[A-Za-z_]\w*|\d+[uUlL]*)(?:\s+(?:[A-Za-z_]\w*))*\s*\**")


def template_instances(text: str) -> str:
    """Explicit instantiations of the template kernels that host code launches with arguments the text
    fixes, e.g. `template __global__ void relu<float>(float*, const float*, int);` for a
    `relu<scalar_t><<<...>>>` inside AT_DISPATCH: the compiler of facts leaves out torch host code,
    and with it the only instantiation. One line per kernel and argument list; "" where none."""
    code = masked(text)
    constants = _fixed_names(text, code)
    lines: list[str] = []
    for kernel in kernels(text):
        if not kernel.template or kernel.parameters is None:
            continue
        names = [_declared_name(part) for part in split_top_level(kernel.template[1:-1], ",")]
        declarations = [declaration for _, declaration in kernel.parameter_declarations(text)]
        for match in re.finditer(rf"\b{re.escape(kernel.name)}\s*<(?!<)", code):
            close = match_close(code, match.end() - 1, len(code))
            if close is None or not code.startswith("<<<", _skip_spaces(code, close)):
                continue
            arguments = [_fixed_argument(part.strip(), constants) for part in split_top_level(text[match.end() : close - 1], ",")]
            if len(arguments) != len(names) or None in arguments or None in names:
                continue
            fixed = [argument for argument in arguments if argument is not None]
            bound = {name: argument for name, argument in zip(names, fixed) if name is not None}
            spelled = [re.sub(r"\b[A-Za-z_]\w*\b", lambda word: bound.get(word.group(), word.group()), d) for d in declarations]
            line = f"template __global__ void {kernel.name}<{', '.join(fixed)}>({', '.join(spelled)});"
            if line not in lines:
                lines.append(line)
    return "\n".join(lines)


def _skip_spaces(code: str, position: int) -> int:
    while position < len(code) and code[position].isspace():
        position += 1
    return position


def _declared_name(parameter: str) -> str | None:
    """The name a template parameter declares (`typename T`, `int BLOCK = 256`), None for a pack."""
    if "..." in parameter:
        return None
    words = re.findall(r"[A-Za-z_]\w*", parameter.split("=")[0])
    return words[-1] if len(words) >= 2 else None


def _fixed_argument(argument: str, constants: frozenset[str]) -> str | None:
    """A template argument as the compiler of facts can spell it without the host code, else None."""
    if argument in _DISPATCHED_TYPES:
        return _DISPATCHED_TYPES[argument]
    if not _TEMPLATE_ARGUMENT.fullmatch(argument):
        return None
    words = re.findall(r"[A-Za-z_]\w*", argument)
    return argument if all(word in _BUILT_IN_TYPES or word in constants for word in words) else None


def _fixed_names(text: str, code: str) -> frozenset[str]:
    """Names a `#define` or a constant at file scope (outside every brace) fixes."""
    names = {match.group(1) for match in re.finditer(r"(?m)^\s*#\s*define\s+([A-Za-z_]\w*)\b(?!\()", text)}
    depth = 0
    for match in re.finditer(r"[{}]|\b(?:constexpr|const)\b[^;{}=]*?\b([A-Za-z_]\w*)\s*=", code):
        if match.group() in "{}":
            depth += 1 if match.group() == "{" else -1
        elif depth == 0:
            names.add(match.group(1))
    return frozenset(names)


def kernels(text: str) -> tuple[Function, ...]:
    """The `__global__` functions of a text."""
    return functions(text, KERNEL)


def function_named(text: str, name: str, qualifier: str = KERNEL) -> Function | None:
    return next((function for function in functions(text, qualifier) if function.name == name), None)


# --- the scanner -------------------------------------------------------------------------------

_HEAD_TOKEN = re.compile(r"(?P<word>[^\W\d]\w*)|(?P<open>\()|(?P<attribute>\[\[)|(?P<stop>[;{}])")
# Words followed by a parenthesised argument that are part of a signature, not its name.
_SIGNATURE_CALLS = frozenset(
    {"__launch_bounds__", "__cluster_dims__", "__maxnreg__", "__attribute__", "__declspec", "alignas", "__align__", "decltype"}
)
_BODY_OR_END = re.compile(r"[;{}]")
_EXTERN_C = re.compile(r'\bextern\s*"C"')
_LEADING_BOUNDS = re.compile(r"\b__launch_bounds__\s*\(")


@functools.lru_cache(maxsize=16)
def scanned_functions(text: str, qualifier: str = KERNEL) -> tuple[Function, ...]:
    """Definitions after each `qualifier`, each scanned only up to the next one (linear time).

    A body that does not close before the next definition (or the end) is half-typed: it is
    cut just before the next declaration so that one stays visible.
    """
    masked_text = masked(text)
    keyword_pattern = re.compile(rf"(?<!\w){qualifier}(?!\w)")
    keywords = [match.start() for match in keyword_pattern.finditer(masked_text)]
    found: list[Function] = []
    floor = 0
    for index, keyword in enumerate(keywords):
        limit = keywords[index + 1] if index + 1 < len(keywords) else len(masked_text)
        if keyword < floor:
            continue
        function = _scan_one(text, masked_text, qualifier, keyword, floor, limit)
        if function is None:
            floor = keyword + len(qualifier)  # keeps every backward look short: linear time
            continue
        if function.unfinished and limit < len(masked_text):
            next_start = _declaration_start(masked_text, limit, function.signature_end)
            function = _replace_end(function, trim_end(masked_text, next_start, function.signature_end))
        found.append(function)
        floor = function.end
    return tuple(found)


def _replace_end(function: Function, end: int) -> Function:
    return Function(**{**function.__dict__, "end": end})


def _declaration_start(masked: str, keyword: int, floor: int) -> int:
    """Start of the declaration holding `keyword`: after the last `;`, `{` or `}` before it."""
    boundary = max(masked.rfind(";", floor, keyword), masked.rfind("{", floor, keyword), masked.rfind("}", floor, keyword))
    start = boundary + 1 if boundary >= 0 else floor
    while masked[start].isspace():
        start += 1
    return start


def _scan_one(text: str, masked: str, qualifier: str, keyword: int, floor: int, limit: int) -> Function | None:
    start = _declaration_start(masked, keyword, floor)
    head = _scan_head(masked, keyword + len(qualifier), limit)
    if head is None:
        return None  # not a function (a macro, a variable, a typo): nothing to index
    name, name_start, params_open, bounds = head
    head_text = text[start:name_start]
    template = _template_of(masked, start, name_start)
    extern_c = _EXTERN_C.search(head_text) is not None
    if bounds is None and (before := _LEADING_BOUNDS.search(masked, start, keyword)) is not None:
        bounds = before.end() - 1  # `__launch_bounds__(128) __global__ void k()`
    launch_bounds = _arguments(text, masked, bounds) if bounds is not None else None

    def function(
        signature_end: int, end: int, parameters: tuple[int, int] | None, body: tuple[int, int] | None, unfinished: str | None
    ) -> Function:
        return Function(
            name, qualifier, start, name_start, signature_end, end, parameters, body, template, launch_bounds, extern_c, unfinished
        )

    params_close = match_close(masked, params_open, limit)
    if params_close is None:
        name_line_end = masked.find("\n", params_open, limit)
        signature_end = trim_end(masked, name_line_end if name_line_end >= 0 else limit, params_open)
        return function(signature_end, trim_end(masked, limit, signature_end), None, None, "parameter list")
    parameters = (params_open + 1, params_close - 1)
    after = _BODY_OR_END.search(masked, params_close, limit)
    if after is not None and after.group() == ";":
        return Function(**{**function(params_close, after.end(), parameters, None, None).__dict__, "definition": False})
    if after is None or after.group() == "}":
        return function(params_close, trim_end(masked, limit, params_close), parameters, None, "body")
    body_close = match_close(masked, after.start(), limit)
    if body_close is None:
        return function(params_close, trim_end(masked, limit, params_close), parameters, None, "body")
    return function(params_close, body_close, parameters, (after.start() + 1, body_close - 1), None)


def _scan_head(masked: str, position: int, limit: int) -> tuple[str, int, int, int | None] | None:
    """The name after the qualifier, where it starts, the offset of its `(` and of `__launch_bounds__`'s `(`; attributes skipped."""
    last_word: str | None = None
    last_start = position
    bounds: int | None = None
    while True:
        token = _HEAD_TOKEN.search(masked, position, limit)
        if token is None or token.lastgroup == "stop":
            return None
        if token.lastgroup == "word":
            last_word, last_start = token.group(), token.start()
            position = token.end()
        elif token.lastgroup == "attribute":
            attribute_close = masked.find("]]", token.end(), limit)
            if attribute_close < 0:
                return None
            position = attribute_close + 2
        elif last_word in _SIGNATURE_CALLS:
            close = match_close(masked, token.start(), limit)
            if close is None:
                return None
            if last_word == "__launch_bounds__":
                bounds = token.start()
            position, last_word = close, None
        elif last_word is None:
            return None
        else:
            return last_word, last_start, token.start(), bounds


def _arguments(text: str, masked: str, open_at: int) -> tuple[str, ...]:
    close = match_close(masked, open_at, len(masked)) or open_at + 1
    return tuple(part.strip() for part in split_top_level(text[open_at + 1 : close - 1], ","))


def _template_of(masked: str, start: int, name_start: int) -> str | None:
    """`<...>` of a `template <...>` heading the declaration."""
    found = re.match(r"template\s*(<)", masked[start:name_start])
    if not found:
        return None
    close = match_close(masked, start + found.start(1), name_start)
    return masked[start + found.start(1) : close] if close else None


def clear_cache() -> None:
    """Forget every text read so far: a benchmark of a fresh edit starts from nothing."""
    for cached in (masked, scanned_functions, parsed_functions, _macro_table):
        cached.cache_clear()


# --- tree-sitter ------------------------------------------------------------------------------


@functools.cache
def _language() -> Any:
    """tree-sitter's CUDA grammar, or None when the wheels are not installed (the scanner then reads alone)."""
    try:
        import tree_sitter
        import tree_sitter_cuda
    except ImportError:
        return None
    return tree_sitter.Language(tree_sitter_cuda.language())


_PARSERS = threading.local()


def _parser() -> Any:
    """This thread's parser: tree-sitter's parsers are not meant to be shared between threads, and
    the server reads several files at once in threads."""
    parser = getattr(_PARSERS, "parser", None)
    if parser is None and (language := _language()) is not None:
        import tree_sitter

        parser = _PARSERS.parser = tree_sitter.Parser(language)
    return parser


def tree_sitter_available() -> bool:
    return _language() is not None


@functools.lru_cache(maxsize=16)
def parsed_functions(text: str) -> tuple[Function, ...] | None:
    """Every `__global__` and `__device__` definition as tree-sitter reads it; None when tree-sitter is
    missing, the text is too big, or it does not parse cleanly (then the scanner reads it)."""
    if len(text) > MAX_PARSED_CHARS or (KERNEL not in text and DEVICE not in text):
        return None if len(text) > MAX_PARSED_CHARS else ()
    parser = _parser()
    if parser is None:
        return None
    data = text.encode("utf-8", "surrogatepass")
    tree = parser.parse(data)
    root = tree.root_node
    if root.has_error:
        return None
    offset = _CharOffsets(text, data)
    found: list[Function] = []
    # What a node's enclosing declarations say, carried down (a node's parent costs a walk from the root):
    # where a `template <...>` or `extern "C"` heading its declaration starts, its template list, extern "C".
    stack: list[tuple[Any, _Enclosing]] = [(root, _Enclosing())]
    while stack:
        node, enclosing = stack.pop()
        if node.type in ("function_definition", "declaration"):
            function = _function_of(node, text, offset, enclosing)
            if function is not None:
                found.append(function)
            continue  # nothing we index lives inside a function
        stack.extend((child, enclosing.inside(node, child, text, offset)) for child in reversed(node.named_children))
    return tuple(found)


@dataclass(frozen=True)
class _Enclosing:
    start: int | None = None
    template: str | None = None
    extern_c: bool = False

    def inside(self, node: Any, child: Any, text: str, offset: _CharOffsets) -> _Enclosing:
        """What `child` of `node` is enclosed by."""
        if node.type == "template_declaration":
            parameters = node.child_by_field_name("parameters")
            template = text[offset(parameters.start_byte) : offset(parameters.end_byte)] if parameters else None
            return _Enclosing(offset(node.start_byte) if self.start is None else self.start, template, self.extern_c)
        if node.type == "linkage_specification":
            extern_c = self.extern_c or '"C"' in text[offset(node.start_byte) : offset(child.start_byte)]
            heading = child.type != "declaration_list"  # `extern "C" __global__ void k()`, not `extern "C" { ... }`
            start = (offset(node.start_byte) if self.start is None else self.start) if heading else None
            return _Enclosing(start, self.template if heading else None, extern_c)
        return _Enclosing(extern_c=self.extern_c) if self.start is not None or self.template is not None else self


class _CharOffsets:
    """tree-sitter's byte offsets as offsets into the text (code points): each byte offset less
    the extra bytes of the non-ASCII characters that end at or before it."""

    def __init__(self, text: str, data: bytes) -> None:
        self.ends: list[int] = []  # byte offset just after each non-ASCII character
        self.extra: list[int] = []  # extra bytes of the non-ASCII characters up to and including it
        extra = 0
        if len(data) != len(text):
            for found in _NON_ASCII.finditer(text):
                width = len(found.group().encode("utf-8", "surrogatepass"))
                self.ends.append(found.start() + extra + width)
                extra += width - 1
                self.extra.append(extra)

    def __call__(self, byte: int) -> int:
        before = bisect.bisect_right(self.ends, byte)
        return byte - self.extra[before - 1] if before else byte


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _function_of(node: Any, text: str, offset: _CharOffsets, enclosing: _Enclosing) -> Function | None:
    qualifiers = {child.type for child in node.children if not child.is_named}
    qualifier = KERNEL if KERNEL in qualifiers else DEVICE if DEVICE in qualifiers else None
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "function_declarator":
        declarator = declarator.child_by_field_name("declarator")
    body = node.child_by_field_name("body")
    if qualifier is None or declarator is None or (body is None) != (node.type == "declaration"):
        return None
    name_node = declarator.child_by_field_name("declarator")
    while name_node is not None and name_node.type in ("template_function", "qualified_identifier"):
        name_node = name_node.child_by_field_name("name")
    parameters = declarator.child_by_field_name("parameters")
    if name_node is None or parameters is None:
        return None
    bounds = next((child for child in node.named_children if child.type == "launch_bounds"), None)
    launch_bounds = (
        tuple(text[offset(child.start_byte) : offset(child.end_byte)] for child in bounds.named_children) if bounds is not None else None
    )
    return Function(
        name=text[offset(name_node.start_byte) : offset(name_node.end_byte)],
        qualifier=qualifier,
        start=offset(node.start_byte) if enclosing.start is None else enclosing.start,
        name_start=offset(name_node.start_byte),
        signature_end=offset(parameters.end_byte),
        end=offset((body or node).end_byte),
        parameters=(offset(parameters.start_byte) + 1, offset(parameters.end_byte) - 1),
        body=(offset(body.start_byte) + 1, offset(body.end_byte) - 1) if body else None,
        template=enclosing.template,
        launch_bounds=launch_bounds,
        extern_c=enclosing.extern_c,
        unfinished=None,
        definition=body is not None,
    )
