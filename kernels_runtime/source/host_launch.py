"""Launches as people write them, read from the file that holds the kernel, so that a side without a
launch pragma is forecast with the launch its code makes (issue 34: block-size edits in host code
all read as 1.00×):

- CUDA host code: `kernel<<<grid, block[, smem[, stream]]>>>(args)`, the grid and block spelled as
  literals, `const`/`constexpr` ints, `#define`s, `dim3 b(x, y)` / `dim3 b = {x, y}`, ceil
  divisions (`(n + b - 1) / b`, `at::ceil_div`, one-line helpers such as `cdiv`), in a `.cu` file
  or in the CUDA strings of a Python file (`load_inline(cuda_sources=...)`);
- CuPy: `kern((grid,), (block,), (args...), shared_mem=...)` for `kern = cupy.RawKernel(src, "name")`
  or `module.get_function("name")`;
- Triton: `kernel[grid](args, BLOCK=1024, num_warps=4)`, a grid lambda over `meta['BLOCK']`, and the
  configs of `@triton.autotune` (one config is known; several make the launch one of them).

In a KernelBench file, a size read from the inputs its `get_inputs()` makes (`rows, n_cols = x.shape`
in a helper `forward` calls, `x.numel()`), or from what its model's `__init__` built with the values
`get_init_inputs()` returns (`self.conv.weight.shape`, the output of `self.conv(x)`), is fixed by
the text too: the timed call's walk (timed_path.py) knows it at the launch. A launch in a load_inline
wrapper's C++ reads `x.numel()`, `x.size(0)` and the wrapper's int parameters off what the timed call
passes the wrapper (`ext.relu_cuda(x)`). A `ModelNew` file
without those functions of its own is read with its problem file's (`inputs`): KernelBench builds
and calls both models alike.

What the code fixes is kept, what it leaves to run time is guessed and named in `guessed`:
`"grid"` where the grid depends on sizes the text does not state (`n = x.numel()`; the unknowns
then read as the problem's elements, one thread per element when that gives no sane grid), and
`"config"` where the block, shared memory or Triton options are one of several or computed at run
time. The first launch site of a kernel is the one read. Pure functions of text, no IO.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kernelcast.kernels_runtime.source import cuda_text, expressions, host_values
from kernelcast.kernels_runtime.source.launch_spec import (
    DTYPE_BYTES,
    GUESSED_CONFIG,
    GUESSED_GRID,
    MAX_BLOCK,
    MAX_DYNAMIC_SMEM,
    MAX_GRID,
    MAX_THREADS_PER_BLOCK,
    TRITON_LAUNCH_OPTIONS,
    ArgSpec,
    LaunchSpec,
    declared_dtype,
    declared_output,
    parse_launch_pragma,
    template_for,
)
from kernelcast.kernels_runtime.source.loop_trips import block_shape
from kernelcast.kernels_runtime.source.timed_path import NO_INPUTS, Inputs, passed_to, with_sizes_known_at, with_sizes_of
from kernelcast.kernels_runtime.source.triton_text import autotune_listing, constexpr_parameters, dotted, triton_kernels

# Elements a grid is guessed for when nothing states the problem's size (the pragma template's N).
DEFAULT_ELEMENTS = 1 << 20
TRITON_DEFAULT_WARPS = 4  # what Triton launches with when num_warps is not given

Dims = tuple[ast.expr, ...]
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*$")


@dataclass(frozen=True)
class _Site:
    """One launch as written: its dims as expression trees, what names meant there, how to evaluate them."""

    kernel: str
    grid: Dims
    block: Dims | None  # None: Triton (num_warps instead)
    smem: ast.expr | None
    args: tuple[ast.expr, ...]
    keywords: Mapping[str, ast.expr]  # Triton's keywords; CuPy's shared_mem is `smem`
    names: Mapping[str, ast.expr]
    dialect: expressions.Dialect
    configs: tuple[Mapping[str, int], ...] = ()  # Triton autotune configs: constexprs with num_warps/num_stages
    configs_unread: bool = False  # an autotune whose configs are not literal
    # CUDA: the host function the launch is in, and its parameters' names (a load_inline wrapper Python calls).
    host_function: tuple[str, tuple[str, ...]] | None = None
    written: str = ""  # Triton: the launch as the text writes it, `kernel[grid]`


def host_launch(
    file_text: str, kernel_name: str, language: str, *, python_file: bool, elements: int | None = None, inputs: Inputs = NO_INPUTS
) -> LaunchSpec | None:
    """The kernel's first launch in its file as a launch spec (`kind` "kernel", `pragma` ""), or None
    where the file launches it nowhere this reader understands. `elements`: the problem's size,
    which unknown sizes in a grid are read as (DEFAULT_ELEMENTS when None); `inputs`: what the
    problem file gives its models (timed_path.Inputs), for a KernelBench file without its own."""
    if language == "cuda":
        site = next(iter(_cupy_sites(file_text, inputs).get(kernel_name, ())), None) if python_file else None
        site = site or next(iter(_cuda_sites(cuda_text_of(file_text) if python_file else file_text).get(kernel_name, ())), None)
        if python_file and site is not None:
            site = _sized_by_the_caller(site, file_text, inputs)
    elif language == "triton":
        site = next(iter(_triton_sites(file_text, inputs).get(kernel_name, ())), None)
    else:
        return None
    if site is None:
        return None
    return _bind(site, language, file_text, python_file, elements or DEFAULT_ELEMENTS)


def runnable_host_launch(file_text: str, kernel_name: str) -> LaunchSpec | None:
    """A CUDA program's own launch of the kernel, whole enough to run with no pragma: its grid, block
    and every scalar fixed by the text, and each pointer it passes a buffer `cudaMalloc`ed with a
    size the text fixes (an array of the parameter's type, written where the kernel does not mark
    it const); None where anything is left to run time."""
    site, declarations = _first_site(file_text, kernel_name)
    if site is None or site.block is None:
        return None
    spec = _bind(site, "cuda", file_text, False, DEFAULT_ELEMENTS)
    if spec.guessed:
        return None
    allocated = _allocated_bytes(site, declarations)
    inputs_marked_const = any("const" in declaration and "*" in declaration for _, declaration in declarations)
    args = []
    for (name, declaration), read in zip(declarations, spec.args):
        dtype = declared_dtype(declaration)
        if dtype is None:
            return None
        if "*" not in declaration:
            if read.value is None:
                return None
            args.append(f"{name}:{dtype}={read.value}")
            continue
        size = allocated.get(name)
        if not size or size % DTYPE_BYTES[dtype]:
            return None
        written = declared_output(name, declaration, inputs_marked_const)
        args.append(f"{name}:{dtype}[{size // DTYPE_BYTES[dtype]}]{':out' if written else ''}")
    dims = [", ".join(map(str, spec.grid)), ", ".join(map(str, spec.block or ()))]
    # As a pragma's text, which is what travels to the measuring worker: the program runs as one stating it would.
    pragma = f"// kernelcast: launch kernel={kernel_name} grid=({dims[0]}) block=({dims[1]}) smem={spec.smem} args=({', '.join(args)})"
    return parse_launch_pragma(pragma, "cuda")


def allocated_bytes(file_text: str, kernel_name: str) -> dict[str, int]:
    """The bytes a CUDA program `cudaMalloc`s for each pointer parameter of its first launch of the
    kernel, where the text fixes them: what a proposed pragma sizes that parameter's array by."""
    site, declarations = _first_site(file_text, kernel_name)
    return _allocated_bytes(site, declarations) if site is not None else {}


def proposed_pragma(file_text: str, kernel_name: str, language: str, host: LaunchSpec | None) -> str:
    """The pragma "Add a launch spec" inserts and a measure without one proposes (template_for), the
    arrays a CUDA program allocates sized as it allocates them: a matrix passed with its side `n`
    is n² elements, not n."""
    allocated = allocated_bytes(file_text, kernel_name) if language == "cuda" else {}
    return template_for(file_text, kernel_name, language, host, allocated)


def _first_site(file_text: str, kernel_name: str) -> tuple[_Site | None, list[tuple[str, str]]]:
    """A CUDA program's first launch of the kernel, and the kernel's parameter declarations; no site
    where there is none, or where it passes another number of arguments than the kernel declares."""
    site = next(iter(_cuda_sites(file_text).get(kernel_name, ())), None)
    function = cuda_text.function_named(file_text, kernel_name)
    declarations = function.parameter_declarations(file_text) if function else []
    return (site if site is not None and len(declarations) == len(site.args) else None), declarations


def _allocated_bytes(site: _Site, declarations: Sequence[tuple[str, str]]) -> dict[str, int]:
    exact = host_values.Values(site.names, site.dialect)
    sizes = {}
    for (name, declaration), passed in zip(declarations, site.args):
        allocated = site.names.get(_ALLOCATED + passed.id) if "*" in declaration and isinstance(passed, ast.Name) else None
        size = _int(host_values.value(allocated, exact)) if allocated is not None else None
        if size:
            sizes[name] = size
    return sizes


def _sized_by_the_caller(site: _Site, file_text: str, inputs: Inputs) -> _Site:
    """A launch in a load_inline wrapper (`torch::Tensor f(torch::Tensor x, int dim)`) with the sizes of what the
    timed call passes `f` put in for its parameters: `x.numel()`, `x.size(0)`, `dim`. A parameter the wrapper
    declares again locally keeps the local value; a launch in no function is as it was."""
    if site.host_function is None:
        return site
    name, parameters = site.host_function
    passed = passed_to(file_text, name, inputs) or ()
    known = {parameter: found for parameter, found in zip(parameters, passed) if found is not None and parameter not in site.names}
    if not known:
        return site

    def sized(expression: ast.expr) -> ast.expr:
        return with_sizes_of(expression, known)

    return dataclasses.replace(
        site,
        grid=tuple(map(sized, site.grid)),
        block=tuple(map(sized, site.block)) if site.block is not None else None,
        smem=sized(site.smem) if site.smem is not None else None,
        args=tuple(map(sized, site.args)),
        names={bound: sized(expression) for bound, expression in site.names.items()},
    )


# --- binding a site ----------------------------------------------------------------------------------


def _bind(site: _Site, language: str, file_text: str, python_file: bool, elements: int) -> LaunchSpec:
    """Evaluate the site's expressions: first as the text fixes them, then, for what it does not, with the guess."""
    exact = host_values.Values(site.names, site.dialect)
    parameters = _parameters(file_text, site.kernel, language, python_file)
    constexprs = _triton_constexprs(file_text, site.kernel) if language == "triton" else set()
    keywords = {name: bound for name, bound in site.keywords.items() if name in parameters or name in TRITON_LAUNCH_OPTIONS}
    given = {**dict(zip(parameters, site.args)), **keywords}
    options, guessed = _options(site, language, given, constexprs, exact)
    args = tuple(
        _argument(name, host_values.value(given[name], exact) if name in given else None) for name in parameters if name not in constexprs
    )
    sizes = {arg.name: arg.value for arg in args if isinstance(arg.value, int) and not isinstance(arg.value, bool)}
    block = None
    if site.block is not None:
        block = _dims(site.block, exact, MAX_BLOCK, options)
        if block is None or math.prod(block) > MAX_THREADS_PER_BLOCK:
            guessed.append(GUESSED_CONFIG)
            block = _dims(site.block, host_values.Values(site.names, site.dialect, elements), MAX_BLOCK, options)
            block = block if block is not None and math.prod(block) <= MAX_THREADS_PER_BLOCK else None
    smem = 0
    if site.smem is not None:
        found = _int(host_values.value(site.smem, exact))
        if found is None or not 0 <= found <= MAX_DYNAMIC_SMEM:
            guessed.append(GUESSED_CONFIG)
        else:
            smem = found
    grid = _dims(site.grid, exact, MAX_GRID, options)
    if grid is None:
        guessed.append(GUESSED_GRID)
        grid = _guessed_grid(site, elements, options, block)
    return LaunchSpec("kernel", language, site.kernel, args, grid, block, smem, options, sizes, guessed=tuple(dict.fromkeys(guessed)))


def _options(
    site: _Site, language: str, given: Mapping[str, ast.expr], constexprs: set[str], exact: host_values.Values
) -> tuple[dict[str, int], list[str]]:
    """The launch's constexprs and Triton options (num_warps, ...) as the text fixes them, the first autotune
    config filling the rest, and GUESSED_CONFIG where one is left to run time or to the autotuner."""
    guessed: list[str] = []
    if len(site.configs) > 1 or site.configs_unread:
        guessed.append(GUESSED_CONFIG)
    options: dict[str, int] = {}
    for name, bound in given.items():
        if name in constexprs or name in TRITON_LAUNCH_OPTIONS:
            number = _int(host_values.value(bound, exact))
            if number is None:
                guessed.append(GUESSED_CONFIG)
            else:
                options[name] = number
    for name, number in (site.configs[0] if site.configs else {}).items():
        options.setdefault(name, number)
    if language == "triton":
        options.setdefault("num_warps", TRITON_DEFAULT_WARPS)
    return options, guessed


def _guessed_grid(site: _Site, elements: int, options: Mapping[str, int], block: tuple[int, ...] | None) -> tuple[int, ...]:
    """The grid with every unknown read as `elements`, when that asks for no more blocks than elements
    (`cdiv(n, BLOCK)`); else one thread (CUDA) or one tile of the largest constexpr (Triton) per element.
    Bounded by threads instead (blocks × threads ≤ elements), CUDA-L2's CuTe GEMMs, whose tile counts
    `dim3 grid(BX, BY, BZ)` divide by template arguments and read as a block per output element, were
    launched 128x fewer threads: within one bin 0.367 -> 0.516 and NLL 2.09 -> 1.89, but direction
    0.669 -> 0.618 (their variant pairs, now read alike, 0.598 -> 0.512) and ECE 0.048 -> 0.064; no other
    measured source has a guessed grid, so the bound stayed."""
    guessed = _dims(site.grid, host_values.Values(site.names, site.dialect, elements), MAX_GRID, options)
    if guessed is not None and math.prod(guessed) <= elements:
        return guessed
    if block is not None:
        share = math.prod(block)
    else:
        share = max((value for name, value in options.items() if name not in TRITON_LAUNCH_OPTIONS), default=1024)
    return (min(expressions.cdiv(elements, max(1, share)), MAX_GRID[0]),)


def _dims(dims: Dims, names: host_values.Values, limits: tuple[int, ...], options: Mapping[str, int]) -> tuple[int, ...] | None:
    """The dims' ints within CUDA's limits, or None; Triton's `meta['BLOCK']` reads the launch's options."""
    found = _extents(dims, names, options)
    if not found or len(found) > 3 or any(value is None or not 1 <= value <= limit for value, limit in zip(found, limits)):
        return None
    return tuple(value for value in found if value is not None)


def _extents(dims: Dims, names: host_values.Values, options: Mapping[str, int]) -> list[int | None]:
    """Each dim's int, or None where the text does not fix it; `meta['BLOCK']` reads the launch's options."""
    values = host_values.Values(
        {**names.bound, **{name: ast.Constant(number) for name, number in options.items()}}, names.dialect, names.guess
    )
    return [_int(host_values.value(dim, values)) for dim in dims]


def _int(number: int | float | None) -> int | None:
    if isinstance(number, float):
        return int(number) if number.is_integer() else None
    return number


def _argument(name: str, number: int | float | None) -> ArgSpec:
    """A kernel argument as launch specs hold one: a scalar with its value where the text fixes one, else
    a value the launch does not give (an array, a run-time size)."""
    return ArgSpec(name, "f32" if isinstance(number, float) else "i32", value=number)


def _parameters(file_text: str, kernel_name: str, language: str, python_file: bool) -> list[str]:
    if language == "triton":
        kernel = next((kernel for kernel in triton_kernels(file_text) if kernel.name == kernel_name), None)
        return [argument.arg for argument in kernel.args.args] if kernel else []
    code = cuda_text_of(file_text) if python_file else file_text
    function = cuda_text.function_named(code, kernel_name)
    return function.parameter_names(code) if function else []


def _triton_constexprs(file_text: str, kernel_name: str) -> set[str]:
    kernel = next((kernel for kernel in triton_kernels(file_text) if kernel.name == kernel_name), None)
    return constexpr_parameters(kernel) if kernel is not None else set()


# --- CUDA host code --------------------------------------------------------------------------------

_DECLARATION_WORDS = frozenset(
    "const constexpr static inline volatile register unsigned signed int long short char size_t ssize_t int64_t int32_t "
    "uint64_t uint32_t uint auto dim3 unsigned_int index_t __host__".split()
)
_CONTROL = frozenset({"if", "for", "while", "switch", "return", "sizeof", "else", "do", "case"})
_HELPER = re.compile(
    r"\b([A-Za-z_]\w*)\s*\(([^()]*)\)\s*(?:const\s*)?(?:noexcept\s*)?\{\s*return\b([^;{}]*);\s*\}",
)
_QUALIFIER = re.compile(r"\b(?:[A-Za-z_]\w*\s*::\s*)+(?=[A-Za-z_])")
_SIZEOF = re.compile(r"\bsizeof\s*\(\s*(float|int|double|half|__half|__nv_bfloat16|char|short|long)\s*\)")
_SIZES_OF = {"float": 4, "int": 4, "double": 8, "half": 2, "__half": 2, "__nv_bfloat16": 2, "char": 1, "short": 2, "long": 8}
_STATIC_CAST = re.compile(r"\b(?:static_cast|reinterpret_cast)\s*<[^<>]*>")


@functools.lru_cache(maxsize=16)
def cuda_text_of(python_text: str) -> str:
    """The CUDA a Python file holds in its strings (load_inline's sources, CuPy's code): every string
    constant that reads as CUDA or C++, joined, so their macros and helpers meet their launches."""
    tree = host_values.parse_module(python_text)
    if tree is None:
        return ""
    pieces = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(r"<<<|__global__|#\s*define|#include", node.value)
    ]
    return "\n".join(pieces)


@functools.lru_cache(maxsize=16)
def _cuda_sites(text: str) -> dict[str, tuple[_Site, ...]]:
    """Each kernel's `<<<...>>>` launches in the text, in order, with what names meant at each."""
    if "<<<" not in text:
        return {}
    code = cuda_text.masked(text)
    tokens = cuda_text.tokens(code)
    partners = cuda_text.token_partners(tokens)
    macros = cuda_text.MacroTable.of(text)
    dialect = _c_dialect(code, macros)
    sites: dict[str, list[_Site]] = {}
    scopes: list[dict[str, ast.expr | Dims]] = [{}]
    statement: list[str] = []
    host_function: tuple[str, tuple[str, ...]] | None = None  # the function whose body the scan is in
    function_depth = 0  # how many scopes are open with its body's
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == "<<" and index + 1 < len(tokens) and tokens[index + 1] == "<":
            site, index = _cuda_site(tokens, partners, index, scopes, macros, dialect)
            if site is not None:
                sites.setdefault(site.kernel, []).append(dataclasses.replace(site, host_function=host_function))
            statement = []
            continue
        if token == "{" and _initializer(statement):
            end = min(partners[index], len(tokens) - 1)
            statement.extend(tokens[index : end + 1])
            index = end + 1
            continue
        if token in ("{", "}", ";"):
            if token == ";":
                _declare(statement, scopes, macros)
                _allocate(statement, scopes, macros)
            elif token == "{":
                scopes.append({})
                if host_function is None and (host_function := _function_header(statement)) is not None:
                    function_depth = len(scopes)
            elif len(scopes) > 1:
                scopes.pop()
                if len(scopes) < function_depth:
                    host_function, function_depth = None, 0
            statement = []
        else:
            statement.append(token)
        index += 1
    return {name: tuple(found) for name, found in sites.items()}


def _function_header(statement: Sequence[str]) -> tuple[str, tuple[str, ...]] | None:
    """(name, parameter names) of a function definition's tokens before its `{`: `torch::Tensor f(torch::Tensor x,
    int64_t dim)` gives ("f", ("x", "dim")); None for anything else (a namespace, a struct, a control statement)."""
    opening = next((index for index, token in enumerate(statement) if token == "("), None)
    if opening is None or opening == 0 or not _IDENTIFIER.match(name := statement[opening - 1]) or name in _CONTROL:
        return None
    closing = next((index for index in range(len(statement) - 1, opening, -1) if statement[index] == ")"), None)
    if closing is None or any(token not in _AFTER_PARAMETERS for token in statement[closing + 1 :]):
        return None
    declared = cuda_text.parameter_declarations(" ".join(statement[opening + 1 : closing]))
    return name, tuple(parameter for parameter, _ in declared)


# What may stand between a function's parameter list and its body.
_AFTER_PARAMETERS = frozenset({"const", "noexcept", "override"})


def _initializer(statement: Sequence[str]) -> bool:
    """Whether a `{` opens a value (`= {...}`, `dim3 g{...}`, a braced argument) rather than a block."""
    if not statement:
        return False
    return statement[-1] in ("=", "(", ",") or ("dim3" in statement and _IDENTIFIER.match(statement[-1]) is not None)


def _c_dialect(code: str, macros: cuda_text.MacroTable) -> expressions.Dialect:
    """C's arithmetic with ceil divisions and the text's own one-line helpers (`int cdiv(int a, int b) { return ...; }`)
    as functions; a helper is evaluated without the other helpers, so helpers cannot recurse."""
    helpers: dict[str, Callable[..., int | float]] = {}
    for found in _HELPER.finditer(code):
        name, parameters, body = found.groups()
        if name in _CONTROL or name in host_values.C.functions:
            continue
        names = [words[-1] for part in cuda_text.split_top_level(parameters, ",") if (words := re.findall(r"[A-Za-z_]\w*", part))]
        tree = _c_expression(cuda_text.tokens(body), macros)
        if tree is not None:
            helpers[name] = _helper(tree, names)
    return expressions.Dialect(
        host_values.C.binary, host_values.C.unary, {**host_values.C.functions, **helpers}, host_values.C.forms, host_values.C.limit
    )


def _helper(tree: ast.expr, parameters: list[str]) -> Callable[..., int | float]:
    def call(*arguments: int | float) -> int | float:
        if len(arguments) != len(parameters):
            raise expressions.ExpressionError("a helper called with the wrong number of arguments")
        bound = {name: ast.Constant(argument) for name, argument in zip(parameters, arguments)}
        found = host_values.value(tree, host_values.Values(bound, host_values.C))
        if found is None:
            raise expressions.ExpressionError("a helper without a value here")
        return found

    return call


def _c_expression(tokens: Sequence[str], macros: cuda_text.MacroTable) -> ast.expr | None:
    """A C expression's tokens as a tree: macros expanded, `sizeof(float)` as 4, `std::`/`at::`
    qualifiers, `static_cast<T>` and `->` dropped."""
    if not tokens:
        return None
    text = " ".join(macros.expand(tokens)).replace("->", ".")
    text = _SIZEOF.sub(lambda found: str(_SIZES_OF[found.group(1)]), text)  # before parse_c reads `(float)` as a cast
    text = _QUALIFIER.sub("", _STATIC_CAST.sub("", text.replace(" :: ", "::")))
    try:
        return expressions.parse_c(text)
    except expressions.ExpressionError:
        return None


def _declare(statement: list[str], scopes: list[dict[str, ast.expr | Dims]], macros: cuda_text.MacroTable) -> None:
    """Record what a statement binds: `T n = e`, `n = e`, `dim3 g(a, b)`, `dim3 g = {a, b}`, `g.x = e`, `T a = 1, b = 2`;
    a declaration of another type (`torch::Tensor t = ...`), a call or an element store binds nothing."""
    declaration = is_dim3 = False
    for number, part in enumerate(_split(statement, ",")):
        equals = _first_top_level(part, "=")
        left, right = (part, None) if equals is None else (part[:equals], part[equals + 1 :])
        if len(left) == 3 and left[1] == "." and left[2] in ("x", "y", "z") and number == 0:  # g.x = e
            dims, tree = _lookup(scopes, left[0]), _c_expression(right or [], macros)
            if isinstance(dims, tuple) and tree is not None:
                axis = "xyz".index(left[2])
                _assign(scopes, left[0], dims[:axis] + (tree,) + dims[axis + 1 :], False)
            return
        cut = next((index for index, token in enumerate(left) if token in ("(", "{")), len(left))
        head = [token for index, token in enumerate(left[:cut]) if token != "::" and left[index + 1 : index + 2] != ["::"]]
        if not head or not _IDENTIFIER.match(head[-1]) or head[-1] in _CONTROL:
            return
        if number == 0:
            if any(token not in _DECLARATION_WORDS for token in head[:-1]) or (len(head) == 1 and (right is None or cut < len(left))):
                return
            declaration, is_dim3 = len(head) > 1, "dim3" in head
        elif not declaration or len(head) != 1:
            return
        name = head[-1]
        if is_dim3:
            _assign(scopes, name, _dim3(left[cut:] or right or [], macros), declaration)
        elif right is not None:
            _assign(scopes, name, _c_expression(right, macros) or host_values.UNKNOWN, declaration)


# `cudaMalloc(&buffer, bytes)` (any cast, any error-checking macro around it): the buffer's bytes are
# kept under _ALLOCATED + its name, beside the names a launch reads.
_ALLOCATORS = frozenset({"cudaMalloc", "cudaMallocManaged", "cudaMallocAsync"})
_ALLOCATED = "&"


def _allocate(statement: list[str], scopes: list[dict[str, ast.expr | Dims]], macros: cuda_text.MacroTable) -> None:
    """Record the bytes each `cudaMalloc` of the statement gives its buffer, in the innermost block."""
    for at, token in enumerate(statement[:-1]):
        if token not in _ALLOCATORS or statement[at + 1] != "(":
            continue
        depth, close = 0, None
        for index in range(at + 1, len(statement)):
            depth += 1 if statement[index] == "(" else -1 if statement[index] == ")" else 0
            if depth == 0:
                close = index
                break
        arguments = _split(statement[at + 2 : close], ",") if close is not None else []
        names = [word for word in arguments[0] if _IDENTIFIER.match(word) and word != "void"] if arguments else []
        size = _c_expression(arguments[1], macros) if len(arguments) > 1 else None
        if names and "&" in arguments[0] and size is not None:
            scopes[-1][_ALLOCATED + names[-1]] = size


def _first_top_level(tokens: Sequence[str], wanted: str) -> int | None:
    depth = 0
    for index, token in enumerate(tokens):
        if token == wanted and depth == 0:
            return index
        depth += 1 if token in ("(", "[", "{") else -1 if token in (")", "]", "}") else 0
    return None


def _dim3(tokens: Sequence[str], macros: cuda_text.MacroTable) -> Dims:
    """`(a, b)`, `{a, b}`, `dim3(a, b)` or a scalar `e`: x, y, z (missing ones 1)."""
    tokens = list(tokens)
    if tokens[:1] == ["dim3"]:
        tokens = tokens[1:]
    if tokens[:1] in (["("], ["{"]) and tokens[-1:] in ([")"], ["}"]):
        pieces = _split(tokens[1:-1], ",")
    else:
        pieces = [tokens] if tokens else []
    dims = [_c_expression(piece, macros) or host_values.UNKNOWN for piece in pieces[:3]]
    return tuple(dims + [ast.Constant(1)] * (3 - len(dims)))


def _split(tokens: Sequence[str], separator: str) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    depth = 0
    for token in tokens:
        depth += 1 if token in ("(", "[", "{") else -1 if token in (")", "]", "}") else 0
        if token == separator and depth == 0:
            parts.append([])
        else:
            parts[-1].append(token)
    return parts if parts != [[]] else []


def _lookup(scopes: list[dict[str, ast.expr | Dims]], name: str) -> ast.expr | Dims | None:
    return next((scope[name] for scope in reversed(scopes) if name in scope), None)


def _assign(scopes: list[dict[str, ast.expr | Dims]], name: str, bound: ast.expr | Dims, declaration: bool) -> None:
    """A declaration binds in the innermost block; an assignment rebinds where the name lives (the file's scope if nowhere)."""
    if declaration:
        scopes[-1][name] = bound
        return
    next((scope for scope in reversed(scopes) if name in scope), scopes[0])[name] = bound


def _cuda_site(
    tokens: Sequence[str],
    partners: Sequence[int],
    open_at: int,
    scopes: list[dict[str, ast.expr | Dims]],
    macros: cuda_text.MacroTable,
    dialect: expressions.Dialect,
) -> tuple[_Site | None, int]:
    """The launch whose `<<<` starts at `open_at`, and the token index after it."""
    close = next((index for index in range(open_at + 2, len(tokens) - 1) if tokens[index] == ">>" and tokens[index + 1] == ">"), None)
    if close is None:
        return None, open_at + 2
    name_at = open_at - 1
    if name_at >= 0 and tokens[name_at] == ">":  # kernel<T><<<: skip the template arguments
        depth = 0
        while name_at >= 0:
            depth += {">": 1, "<": -1}.get(tokens[name_at], 0)
            name_at -= 1
            if depth == 0:
                break
    after = close + 2
    if name_at < 0 or not _IDENTIFIER.match(tokens[name_at]) or after >= len(tokens) or tokens[after] != "(":
        return None, after
    end = min(partners[after], len(tokens))
    config = _split(tokens[open_at + 2 : close], ",")
    if len(config) < 2:
        return None, end
    flat: dict[str, ast.expr | Dims] = {}
    for scope in scopes:
        flat.update(scope)
    names = {name: bound for name, bound in flat.items() if isinstance(bound, ast.expr)}
    grid, block = (_launch_dims(part, flat, macros) for part in config[:2])
    smem = _c_expression(config[2], macros) if len(config) > 2 else None
    args = tuple(_c_expression(part, macros) or host_values.UNKNOWN for part in _split(tokens[after + 1 : end], ","))
    return _Site(tokens[name_at], grid, block, smem, args, {}, names, dialect), end + 1


def _launch_dims(tokens: Sequence[str], flat: Mapping[str, ast.expr | Dims], macros: cuda_text.MacroTable) -> Dims:
    """A launch's grid or block: a dim3 variable, an inline `dim3(...)`, or one expression (x)."""
    if len(tokens) == 1 and isinstance(bound := flat.get(tokens[0]), tuple):
        return bound
    if tokens[:1] == ["dim3"]:
        return _dim3(tokens, macros)
    tree = _c_expression(tokens, macros)
    return (tree if tree is not None else host_values.UNKNOWN,)


# --- Python call sites: CuPy and Triton ------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _cupy_sites(text: str, inputs: Inputs) -> dict[str, tuple[_Site, ...]]:
    """Calls of CuPy kernels: `k = cupy.RawKernel(code, "name")` or `k = module.get_function("name")`, then `k(grid, block, args)`."""
    tree = host_values.parse_module(text) if "RawKernel" in text or "get_function" in text else None
    if tree is None:
        return {}
    kernels: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and (name := cupy_kernel_name(node.value)):
            kernels.update((dotted(target), name) for target in node.targets if dotted(target))
    sites: dict[str, list[_Site]] = {}
    for node in _calls_in_order(tree):
        name = kernels.get(dotted(node.func))
        if name is None or len(node.args) < 3:
            continue
        read = functools.partial(with_sizes_known_at, text, node.lineno, inputs=inputs)
        names = {name: read(bound) for name, bound in host_values.scope_at(tree, node.lineno).items()}
        grid, block = (_python_dims(read(argument), names) for argument in node.args[:2])
        args = _python_items(read(node.args[2]), names)
        smem = next((read(keyword.value) for keyword in node.keywords if keyword.arg == "shared_mem"), None)
        sites.setdefault(name, []).append(_Site(name, grid, block, smem, args, {}, names, host_values.PYTHON))
    return {name: tuple(found) for name, found in sites.items()}


def cupy_kernel_name(call: ast.Call) -> str | None:
    """The kernel a `cupy.RawKernel(code, "name")` or `module.get_function("name")` call makes, else None."""
    callee = host_values.callee_name(call)
    arguments = {keyword.arg: keyword.value for keyword in call.keywords}
    if callee == "RawKernel":
        found = call.args[1] if len(call.args) > 1 else arguments.get("name")
    elif callee == "get_function":
        found = call.args[0] if call.args else arguments.get("name")
    else:
        return None
    return found.value if isinstance(found, ast.Constant) and isinstance(found.value, str) else None


def _calls_in_order(tree: ast.Module) -> list[ast.Call]:
    return sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call)), key=lambda node: (node.lineno, node.col_offset))


def _python_items(node: ast.expr, names: Mapping[str, ast.expr]) -> tuple[ast.expr, ...]:
    """A tuple's or list's items (through a name bound to one); one item otherwise."""
    items = host_values.written_out(node, names)
    return items if items is not None else (node,)


def _python_dims(node: ast.expr, names: Mapping[str, ast.expr]) -> Dims:
    """A grid or block: a tuple, a name bound to one, or a lambda over `meta` whose `meta['X']` reads option X."""
    if isinstance(node, ast.Name) and isinstance(names.get(node.id), ast.Lambda):
        node = names[node.id]
    if isinstance(node, ast.Lambda):
        meta = {argument.arg for argument in node.args.args}
        node = _MetaReads(meta).visit(ast.fix_missing_locations(ast.Expression(copy.deepcopy(node.body)))).body
    return _python_items(node, names)


class _MetaReads(ast.NodeTransformer):
    """`meta['BLOCK']` as the name BLOCK, bound to the launch's option."""

    def __init__(self, meta: set[str]) -> None:
        self.meta = meta

    def visit_Subscript(self, node: ast.Subscript) -> ast.expr:
        key = node.slice
        if isinstance(node.value, ast.Name) and node.value.id in self.meta and isinstance(key, ast.Constant) and isinstance(key.value, str):
            return ast.copy_location(ast.Name(key.value), node)
        return self.generic_visit(node)  # type: ignore[return-value]


@functools.lru_cache(maxsize=16)
def _triton_sites(text: str, inputs: Inputs) -> dict[str, tuple[_Site, ...]]:
    """Calls `kernel[grid](...)` of the file's Triton kernels, with their autotune configs."""
    tree = host_values.parse_module(text)
    kernels = {kernel.name: kernel for kernel in triton_kernels(text)}
    if tree is None or not kernels:
        return {}
    sites: dict[str, list[_Site]] = {}
    for node in _calls_in_order(tree):
        launched = node.func
        if not isinstance(launched, ast.Subscript) or (name := dotted(launched.value).rsplit(".", 1)[-1]) not in kernels:
            continue
        read = functools.partial(with_sizes_known_at, text, node.lineno, inputs=inputs)
        names = {name: read(bound) for name, bound in host_values.scope_at(tree, node.lineno).items()}
        configs, unread = _autotune_configs(kernels[name], host_values.bindings(tree.body))
        keywords = {keyword.arg: read(keyword.value) for keyword in node.keywords if keyword.arg}
        args = tuple(read(argument) for argument in node.args)
        grid = _python_dims(read(launched.slice), names)
        site = _Site(name, grid, None, None, args, keywords, names, host_values.PYTHON, configs, unread, written=ast.unparse(launched))
        sites.setdefault(name, []).append(site)
    return {name: tuple(found) for name, found in sites.items()}


@dataclass(frozen=True)
class RepeatedGrid:
    """A Triton launch whose grid runs axes its kernel never reads: every program along them does what
    the first one does (`kernel[grid, BLOCK]`, written as a CUDA launch's block, launches BLOCK copies of
    the whole grid)."""

    kernel: str
    copies: int  # the programs along the axes the kernel never reads
    programs: int | None  # the programs along the axes it reads, where the text fixes them
    launch: str  # as the text writes it, `kernel[grid, BLOCK_SIZE]`
    unread_axes: tuple[int, ...]


@functools.lru_cache(maxsize=64)
def repeated_grids(file_text: str, inputs: Inputs = NO_INPUTS) -> tuple[RepeatedGrid, ...]:
    """The launches of the file's Triton kernels that repeat their work, where the text fixes how often.
    A kernel's axes are those `tl.program_id` reads in it and in the file's @triton.jit functions it calls;
    a kernel that calls a function the file does not define, or reads an axis not written as a number,
    is not judged: that function may read the other axes. Nor is one that reads no axis at all: its
    programs take their work some other way (a ticket from an atomic counter) or it is one program."""
    kernels = {kernel.name: kernel for kernel in triton_kernels(file_text)}
    found = []
    for name, sites in _triton_sites(file_text, inputs).items():
        read = _axes_read(name, kernels)
        for site in sites:
            if not read or all(axis in read for axis in range(len(site.grid))):
                continue
            names, options, _ = _site_options(file_text, name, site)
            extents = _extents(site.grid, names, options)
            axes = tuple(axis for axis in range(len(extents)) if axis not in read)
            copies = [extents[axis] for axis in axes]
            known_copies = [extent for extent in copies if extent is not None]
            if len(known_copies) < len(copies) or math.prod(known_copies) <= 1:
                continue
            used = [extent for axis, extent in enumerate(extents) if axis in read]
            known_used = [extent for extent in used if extent is not None]
            programs = math.prod(known_used) if len(known_used) == len(used) else None
            found.append(RepeatedGrid(name, math.prod(known_copies), programs, site.written, axes))
    return tuple(found)


def _site_options(file_text: str, name: str, site: _Site) -> tuple[host_values.Values, dict[str, int], list[str]]:
    """What a Triton launch site's names hold, its options (constexprs, num_warps) as passed, and
    GUESSED_CONFIG where one is left to run time or to the autotuner (_options)."""
    exact = host_values.Values(site.names, site.dialect)
    given = {**dict(zip(_parameters(file_text, name, "triton", True), site.args)), **site.keywords}
    options, guessed = _options(site, "triton", given, _triton_constexprs(file_text, name), exact)
    return exact, options, guessed


@dataclass(frozen=True)
class FewValuePrograms:
    """A Triton launch whose programs each work on a few values: its kernel builds no block (no
    `tl.arange`, `tl.zeros`, `tl.full`, block pointer or tensor descriptor, in it or in the file's
    @triton.jit functions it calls), so each program loads and stores single values, or builds only
    one-dimensional blocks of at most FEW_VALUES values, as the launch fixes them. Either way most
    lanes of a program of Triton's warps idle, and the call costs the waves of programs it starts."""

    kernel: str
    values: int  # the longest block a program builds; 1 where it builds none
    programs: int | None  # the grid's programs, where the text fixes them
    launch: str  # as ast.unparse writes it, `kernel[n_elements,]`
    # Where the grid is left to run time: the programs it starts per element of the problem, reading
    # what the text leaves unknown as the problem's elements (`(n,)` 1, `(cdiv(n, 16),)` 1/16); None
    # where the grid does not grow so.
    per_element: float | None = None

    def programs_at(self, elements: float) -> float:
        """The programs the launch starts on a problem of `elements` elements: as the text fixes them,
        else as its grid grows, else one a block of the elements."""
        if self.programs is not None:
            return float(self.programs)
        return self.per_element * elements if self.per_element is not None else elements / self.values


# The most values a block may hold for its programs to be counted at the waves they start rather than
# the bytes they move: blocks of 4 and of 16 values a program cost what a wave of one-value programs
# costs (models/embedded/features.FEW_VALUE_WAVE_US). Blocks of 64 still cost 0.75-0.90 µs a wave on
# the H100 (benchmarks/results/few_value_programs.md), but counting a wave cost for blocks of up to 256
# values, whole or beyond the side's bandwidth time, got no more of the 311 real-world pairs with such
# a block right: half of those kernels loop over a row, so their programs are not one a block of elements.
FEW_VALUES = 16


@functools.lru_cache(maxsize=64)
def few_value_programs(file_text: str, inputs: Inputs = NO_INPUTS) -> tuple[FewValuePrograms, ...]:
    """The launches of the file's Triton kernels whose programs work on a few values each, and how many
    programs each starts where the text fixes it. A kernel that calls a function the file does not
    define is not judged (that function may build a block), nor one that loads nothing, nor a launch
    whose block the text leaves to run time or to an autotuner."""
    kernels = {kernel.name: kernel for kernel in triton_kernels(file_text)}
    found = []
    for name, sites in _triton_sites(file_text, inputs).items():
        functions = _reached(name, kernels)
        if functions is None:
            continue
        calls = _calls_in(functions)
        attributes = _attributes(calls)
        builds_blocks = bool(attributes & _BLOCK_MAKERS)
        if "load" not in attributes or (builds_blocks and not _one_dimensional(functions, attributes)):
            continue
        for site in sites:
            names, options, guessed = _site_options(file_text, name, site)
            if not builds_blocks:
                values: int | None = 1
            elif guessed:  # a block whose length the launch leaves to run time or to an autotuner is not judged
                continue
            else:
                values = _longest_block(calls, options)
            if values is None or values > FEW_VALUES:
                continue
            extents = _extents(site.grid, names, options)
            known = [extent for extent in extents if extent is not None]
            programs = math.prod(known) if len(known) == len(extents) else None
            per_element = _programs_per_element(site, options) if programs is None else None
            found.append(FewValuePrograms(name, values, programs, site.written, per_element))
    return tuple(found)


# Two problem sizes at which a grid left to run time is read, to tell how it grows with the problem.
_PROBED_ELEMENTS = (1 << 20, 1 << 22)


def _programs_per_element(site: _Site, options: Mapping[str, int]) -> float | None:
    """The programs a grid left to run time starts per element, its unknowns read as the problem's
    elements; None where it does not grow in proportion (a fixed grid over a loop, a square root)."""
    shares = []
    for elements in _PROBED_ELEMENTS:
        extents = _extents(site.grid, host_values.Values(site.names, site.dialect, elements), options)
        if None in extents:
            return None
        shares.append(math.prod(extents) / elements)  # type: ignore[arg-type]
    return shares[0] if math.isclose(shares[0], shares[1], rel_tol=0.01) else None


# Triton calls that make a block of values: a kernel that makes none works on single values.
_BLOCK_MAKERS = frozenset({"arange", "make_block_ptr", "make_tensor_descriptor", "zeros", "full", "zeros_like", "full_like"})
# Of those, the ones whose block's length the call states: `tl.arange(0, BLOCK)`, `tl.zeros((BLOCK,), ...)`.
_SIZED_BLOCK_MAKERS = frozenset({"arange", "zeros", "full"})


def _attributes(calls: list[ast.Call]) -> set[str]:
    return {node.func.attr for node in calls if isinstance(node.func, ast.Attribute)}


def _one_dimensional(functions: list[ast.FunctionDef], attributes: set[str]) -> bool:
    """Whether every block the kernel builds is one-dimensional and states its length: no block pointer
    or descriptor, no `x[:, None]`."""
    return not attributes & (_BLOCK_MAKERS - _SIZED_BLOCK_MAKERS) and not any(_broadcasts(function) for function in functions)


def _longest_block(calls: list[ast.Call], options: Mapping[str, int]) -> int | None:
    """The longest block the kernel's calls build, each one-dimensional with its length read from
    the constexprs the launch fixes; None where one is not."""
    lengths = []
    for node in calls:
        if not (isinstance(node.func, ast.Attribute) and node.func.attr in _SIZED_BLOCK_MAKERS):
            continue
        shape = block_shape(node, options)
        if len(shape) != 1:
            return None
        lengths.append(shape[0])
    return max(lengths, default=None)


def _broadcasts(function: ast.FunctionDef) -> bool:
    """Whether the function indexes with `None` (`offs[:, None]`): its blocks have two dimensions."""
    for node in ast.walk(function):
        if isinstance(node, ast.Subscript):
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if any(isinstance(part, ast.Constant) and part.value is None for part in parts):
                return True
    return False


def _axes_read(name: str, kernels: Mapping[str, ast.FunctionDef]) -> set[int] | None:
    """The grid axes `tl.program_id` reads in the kernel and the @triton.jit functions it calls; None
    where that cannot be told (an axis not written as a number, a call of a function not in `kernels`)."""
    functions = _reached(name, kernels)
    if functions is None:
        return None
    axes: set[int] = set()
    for node in _calls_in(functions):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "program_id":
            axis = node.args[0] if node.args else next((keyword.value for keyword in node.keywords if keyword.arg == "axis"), None)
            if not (isinstance(axis, ast.Constant) and isinstance(axis.value, int)):
                return None
            axes.add(axis.value)
    return axes


def _reached(name: str, kernels: Mapping[str, ast.FunctionDef]) -> list[ast.FunctionDef] | None:
    """The kernel and the file's @triton.jit functions it calls, directly or not, each once; None where
    it calls a function the file does not define (what that function does cannot be read)."""
    reached = {name: kernels[name]}
    pending = [kernels[name]]
    while pending:
        for node in ast.walk(pending.pop()):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in _KERNEL_BUILTINS:
                called = node.func.id
                if called not in kernels:
                    return None
                if called not in reached:
                    reached[called] = kernels[called]
                    pending.append(kernels[called])
    return list(reached.values())


def _calls_in(functions: list[ast.FunctionDef]) -> list[ast.Call]:
    return [node for function in functions for node in ast.walk(function) if isinstance(node, ast.Call)]


# Names a Triton kernel calls that are not functions of the file: they read no grid axis and build no block.
_KERNEL_BUILTINS = frozenset({"range", "min", "max", "len", "int", "float", "bool", "abs", "print", "isinstance"})


def autotune_configs(file_text: str, kernel_name: str) -> tuple[tuple[Mapping[str, int], ...], bool]:
    """The configs of the kernel's `@triton.autotune` (each its constexprs with num_warps/num_stages), and
    whether some could not be read (not literal); ((), False) where it has none."""
    kernel = next((kernel for kernel in triton_kernels(file_text) if kernel.name == kernel_name), None)
    tree = host_values.parse_module(file_text)
    if kernel is None or tree is None:
        return (), False
    return _autotune_configs(kernel, host_values.bindings(tree.body))


def _autotune_configs(kernel: ast.FunctionDef, module: Mapping[str, ast.expr]) -> tuple[tuple[Mapping[str, int], ...], bool]:
    autotuned, listed = autotune_listing(kernel, module)
    if not autotuned:
        return (), False
    if not isinstance(listed, (ast.List, ast.Tuple)):
        return (), True
    values = host_values.Values(module, host_values.PYTHON)
    configs: list[Mapping[str, int]] = []
    unread = False
    for element in listed.elts:
        config = _config(element, values)
        if config is None:
            unread = True
        else:
            configs.append(config)
    return tuple(configs), unread


def _config(node: ast.expr, values: host_values.Values) -> Mapping[str, int] | None:
    """`triton.Config({'BLOCK': 128}, num_warps=4, num_stages=2)` as {'BLOCK': 128, 'num_warps': 4, 'num_stages': 2}."""
    if (
        not isinstance(node, ast.Call)
        or host_values.callee_name(node) != "Config"
        or not node.args
        or not isinstance(node.args[0], ast.Dict)
    ):
        return None
    pairs: list[tuple[ast.expr | None, ast.expr]] = [*zip(node.args[0].keys, node.args[0].values)]
    pairs += [(ast.Constant(keyword.arg), keyword.value) for keyword in node.keywords if keyword.arg in TRITON_LAUNCH_OPTIONS]
    config = {}
    for key, bound in pairs:
        number = _int(host_values.value(bound, values))
        if not isinstance(key, ast.Constant) or not isinstance(key.value, str) or number is None:
            return None
        config[key.value] = number
    return config
