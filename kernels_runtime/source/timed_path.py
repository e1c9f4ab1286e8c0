"""What one timed call of a Python side runs, and how many times.

A KernelBench file's timed call is its model's `forward` (`ModelNew`'s where the file has one).
A script without a model (a Triton tutorial, a benchmark) runs its own module-level code and
`__main__` block, whose tensors torch's constructors make: that run fixes the sizes its launches
read (`with_sizes_known_at`), nothing else.
Three things make the text a poor count of what it runs:

- Files copied from a library carry functions the call never reaches: a library's naive module
  defines the recurrent, the chunked and the parallel form of one operation, and the model calls
  one. `unreached_spans` finds the module's functions that nothing the call can run names.
- References loop in Python: a recurrence over the sequence launches its few ops once per time
  step, thousands of launches a call, where the text shows each op once. `line_repeats` says how
  many times each line runs per call: the product of the trip counts of the `for ... in range(...)`
  loops around it, in `forward` and in the module's functions, the class's methods and the autograd
  Functions' `forward` (through `Owner.apply`) it calls.
  A bound read from a tensor's shape (`b, h, t, d = q.shape`, `x.size(1)`, `*k.shape`) is the size
  of the input `get_inputs()` makes, followed into `forward`'s parameters and through the calls,
  casts, transposes, permutes, reshapes and views between, and into the tensors the call allocates
  from known sizes (`torch.empty_like(x)`, `torch.empty(m, n)`) and the helpers it calls return
  (`y = linear(x, w)`, where each of the helper's `return`s gives one shape): a naive recurrence over the
  sequence runs T steps, not the middle one of B, T, H and D. A bound the text does not fix even
  so is read as the median of the file's size constants: a host loop runs over one of the
  problem's dimensions, and a guess within a few octaves of the truth is all a log-time forecast
  needs.
  Loops over anything but `range` (a module list, a tuple) and `while` loops count once.
- A Triton kernel defined inside a function (its `@triton.jit` indented), in any Python file, is
  a new kernel object each call: Triton finds its binary on disk but loads it again, and an
  `@triton.autotune` around it times every config again. `kernels_built_each_call` finds them.
- An `@triton.autotune` over several configs is timed after its tuning, so its kernel runs the
  fastest of them at the problem's size, where a kernel with one config runs the one its author
  chose. `tuned_share` says how many of a side's kernels are tuned so.
- A call into another package (`from fla.ops.delta_rule import chunk_delta_rule`) runs kernels
  the text does not hold. `calls_out_of_sight` names them.

An entry point imported under another name (`from flag_gems.ops.abs import abs as library_op`,
below the library's module copied into the file) is not followed: that module's functions read as
unreached. Followed, FlagGems' kernels were read and its pairs forecast worse with FlagGems held
out (direction 0.83 -> 0.73): the weights, which learnt from generated kernels, misjudge a
library's.
"""

from __future__ import annotations

import ast
import copy
import functools
import math
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kernelcast.kernels_runtime.source import host_values
from kernelcast.kernels_runtime.source.launch_spec import factory_shape, kernelbench_input_shapes
from kernelcast.kernels_runtime.source.model_layers import InitValue, Layer, flattened, kernelbench_init_values, model_attributes
from kernelcast.kernels_runtime.source.python_ast import line_offsets
from kernelcast.kernels_runtime.source.triton_text import autotune_listing, dotted, kernels_of

# Gradients are not timed: an autograd Function's `backward`, and the functions and kernels named for
# the backward pass (`*_backward*`, `*_bwd*`), are no part of a timed call (match case-insensitively).
BACKWARD_NAME = r"\w*(?:backward|bwd)\w*"

# Past this many trips a host loop is not a loop a timed call runs (and the guess stays bounded).
MAX_TRIPS = 2**16
# Nor is a line run more often than this in one call, however deep its loops nest: products of
# trips stay finite numbers (a hundred nested loops would pass a float's range).
MAX_REPEATS = 2.0**40
# A loop bound the text does not fix, in a file with no size constants to take the median of.
GUESSED_TRIPS = 32
# How deep calls are followed from `forward` (helpers calling helpers).
MAX_DEPTH = 4
# An autotuner's configs the text does not list (a comprehension, a call) are read as this many.
GUESSED_CONFIGS = 4
# The harness calls these itself, outside the timed call; they are not dead code.
_HARNESS_ENTRIES = frozenset({"get_inputs", "get_init_inputs"})
_MODEL_CLASS = re.compile(r"^class\s+Model(?:New)?\b", re.M)


@dataclass(frozen=True)
class Inputs:
    """What the KernelBench harness gives a model, read from a problem file: it builds `Model(*init)`
    and calls it on tensors of `shapes` (None where `get_inputs()` or `get_init_inputs()` is not literal)."""

    shapes: tuple[tuple[int, ...] | None, ...] = ()
    init: tuple[InitValue, ...] = ()


NO_INPUTS = Inputs()

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_BLOCKS = ("body", "orelse", "finalbody", "handlers")


def unreached_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the module-level functions of a KernelBench file that neither its
    classes, nor its module-level code, nor any function they reach names (decorators included)."""
    tree = _kernelbench_tree(text)
    if tree is None:
        return []
    functions = {node.name: node for node in tree.body if isinstance(node, _FUNCTIONS)}
    reached = set(_HARNESS_ENTRIES & functions.keys())
    pending = [name for node in tree.body if not isinstance(node, _FUNCTIONS) and not _main_guard(node) for name in _names(node)]
    while pending:
        name = pending.pop()
        if name in functions and name not in reached:
            reached.add(name)
            pending.extend(_names(functions[name]))
    offsets = line_offsets(text)
    return [
        (offsets[_first_line(node) - 1], offsets[min(node.end_lineno or node.lineno, len(offsets) - 1)])
        for name, node in functions.items()
        if name not in reached
    ]


def line_repeats(text: str) -> dict[int, float]:
    """Line number (from 1) → how many times one timed call runs it, for the lines that run more than once."""
    walk = _walked(text)
    return walk.repeats if walk is not None else {}


def guessed_trips(text: str) -> bool:
    """Whether a loop the timed call runs has a bound the text does not fix (its trips were guessed)."""
    walk = _walked(text)
    return walk is not None and walk.guessed


@functools.lru_cache(maxsize=16)
def _walked(text: str, inputs: Inputs = NO_INPUTS) -> _Walk | None:
    """The timed call of a KernelBench file, walked from what its model's `__init__` built, its inputs
    those its `get_inputs()` makes and its init values those its `get_init_inputs()` returns, else
    `inputs`' (its problem file's); None where the file has no model's `forward`. Shared: read only."""
    tree = _kernelbench_tree(text)
    if tree is None:
        return None
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    timed = next((classes[name] for name in host_values.TIMED_MODELS if name in classes), None)
    forward = next((node for node in timed.body if isinstance(node, _FUNCTIONS) and node.name == "forward"), None) if timed else None
    if timed is None or forward is None:
        return None
    walk = _Walk(tree, timed)
    parameters = [parameter.arg for parameter in forward.args.args[1:]]
    shapes = zip(parameters, kernelbench_input_shapes(text) or inputs.shapes)
    built = model_attributes(tree, timed, kernelbench_init_values(text) or inputs.init)
    walk.statements(forward.body, 1.0, (forward.name,), {**built, **{name: shape for name, shape in shapes if shape}})
    return walk


def with_sizes_known_at(text: str, line: int, expression: ast.expr, inputs: Inputs = NO_INPUTS) -> ast.expr:
    """The expression with each size the timed call knows at that line put in as its number: a name
    read from an input's shape (`n_cols = x.shape[1]` earlier), `x.shape[1]`, `x.size(1)`, `x.numel()`
    of a tensor whose shape `get_inputs()` fixes. `inputs`: the problem's input shapes, for a file
    that has no `get_inputs()` of its own (a `ModelNew` beside its problem's file: KernelBench passes
    both models the same inputs). Unchanged where the call does not reach the line."""
    walk = _walked(text, inputs) or _script_walked(text)
    known = walk.known_at.get(line) if walk is not None else None
    return _SizesRead(known).visit(copy.deepcopy(expression)) if known else expression


def passed_to(text: str, function: str, inputs: Inputs = NO_INPUTS) -> tuple[tuple[int, ...] | int | None, ...] | None:
    """What the timed call passes, positionally, at its first call of `function` by that name, bare or as an
    attribute (`self.ext.sigmoid_cuda(x)`, a load_inline module's C++ function): each argument's shape where
    it is a tensor of known shape, its number where it is a size or a number the text fixes, else None.
    None where the timed call does not reach such a call."""
    walk = _walked(text, inputs)
    if walk is None:
        return None
    calls = sorted(
        (node.lineno, node.col_offset, node)
        for node in ast.walk(walk.tree)
        if isinstance(node, ast.Call) and node.lineno in walk.known_at and dotted(node).rpartition(".")[2] == function
    )
    if not calls:
        return None
    call = calls[0][2]
    known = walk.known_at[call.lineno]
    names = functools.cache(lambda: walk.names_at(call.lineno, known))
    return tuple(
        None if isinstance(argument, ast.Starred) else walk.argument(argument, call.lineno, known, names) for argument in call.args
    )


def with_sizes_of(expression: ast.expr, known: dict[str, tuple[int, ...] | int]) -> ast.expr:
    """The expression with the sizes `known` fixes put in as numbers: a name holding a number, and `x.numel()`,
    `x.size(1)`, `x.sizes()[1]`, `x.dim()` of a name holding a shape."""
    return _SizesRead(dict(known)).visit(copy.deepcopy(expression))


def names_known_at(text: str, line: int, inputs: Inputs = NO_INPUTS) -> frozenset[str]:
    """The names the timed call holds a tensor of known shape or a number in at that line: none of them is None."""
    walk = _walked(text, inputs) or _script_walked(text)
    known = walk.known_at.get(line) if walk is not None else None
    return frozenset(known or ())


@functools.lru_cache(maxsize=16)
def _script_walked(text: str) -> _Walk | None:
    """A script's own run, for a file without a KernelBench model: its module-level statements and
    its `if __name__ == "__main__":` block, in order, with the tensors they make through torch's
    constructors known by shape, as a tutorial makes them (`x = torch.rand(98432, device=DEVICE)`,
    then `add(x, y)`). Only the sizes a launch reads come from it, not how often lines run: the
    calls a script makes to check and to benchmark are not one timed call. Shared: read only."""
    tree = host_values.parse_module(text) if "torch" in text else None
    if tree is None or _MODEL_CLASS.search(text):
        return None
    script: list[ast.stmt] = []
    for node in tree.body:
        if _main_guard(node):
            script.extend(node.body)
        elif not isinstance(node, (*_FUNCTIONS, ast.ClassDef, ast.Import, ast.ImportFrom)):
            script.append(node)
    if not script:
        return None
    walk = _Walk(tree, None)
    walk.statements(script, 1.0, ("<script>",), {})
    return walk


def kernels_built_each_call(text: str) -> list[int]:
    """For each Triton kernel defined inside a function, the configs its `@triton.autotune` times on
    every call: 0 without one or with one config (the autotuner then launches it untimed)."""
    tree = host_values.parse_module(text) if "jit" in text else None
    if tree is None:
        return []
    kernels = {id(kernel): kernel for kernel in kernels_of(tree)}
    module = host_values.bindings(tree.body)
    # Kernel → the function it is defined in (the innermost: ast.walk meets outer functions first).
    enclosing: dict[int, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for function in ast.walk(tree):
        if isinstance(function, _FUNCTIONS) and id(function) not in kernels:
            enclosing.update((id(node), function) for node in ast.walk(function) if id(node) in kernels and node is not function)
    return [_timed_configs(kernels[key], {**module, **host_values.bindings(function.body)}) for key, function in enclosing.items()]


def tuned_share(text: str) -> float:
    """The share of the text's Triton kernels whose `@triton.autotune` chooses among several configs."""
    tree = host_values.parse_module(text) if "autotune" in text else None
    kernels = kernels_of(tree) if tree is not None else []
    if not kernels:
        return 0.0
    module = host_values.bindings(tree.body)
    return sum(_timed_configs(kernel, module) > 1 for kernel in kernels) / len(kernels)


# Packages whose calls the readers account for: PyTorch's ops are read as the launches they make,
# Triton's and NumPy's helpers and the standard library's run on the host.
_SEEN_PACKAGES = frozenset({"torch", "triton", "numpy", *sys.stdlib_module_names})


def calls_out_of_sight(text: str, whole: str | None = None) -> tuple[str, ...]:
    """`callee (module)` of each call the text makes of a name it imports from another package
    (a relative import's module starts with its dots): what such a call launches is not in the text.
    A name imported from a module whose function the whole file (`whole`, else the text) defines is
    in sight: a library's module copied in above the import of its entry point."""
    tree = host_values.parse_module(text) if "import" in text else None
    if tree is None:
        return ()
    shown = host_values.parse_module(whole) if whole is not None else tree
    defined = {node.name for node in ast.walk(shown or tree) if isinstance(node, (*_FUNCTIONS, ast.ClassDef))}
    modules = _imported(tree, defined)
    # A decorator (`@pointwise_dynamic(...)`) makes a kernel of the function it decorates, which is in
    # sight; so is what a kernel's body calls (device helpers, inlined into the kernel).
    functions = [node for node in ast.walk(tree) if isinstance(node, _FUNCTIONS)]
    inside = {id(node) for function in functions for node in function.decorator_list}
    inside.update(id(node) for function in functions if function.decorator_list and _kernel(function) for node in ast.walk(function))
    called = set()
    for node in ast.walk(tree):
        callee = dotted(node) if isinstance(node, ast.Call) and id(node) not in inside else ""
        module = modules.get(callee.split(".")[0])
        if module is not None and module.split(".")[0] not in _SEEN_PACKAGES:
            called.add(f"{callee} ({module})")
    return tuple(sorted(called))


def names_imported_in_class(text: str, class_name: str) -> tuple[str, ...] | None:
    """The names the file's last class `class_name` uses that it imports from another package (a relative
    import's module counts): a `ModelNew(Model)` that uses one wraps the problem around a library's kernel,
    even where the library's module is copied in above. None while the text does not parse."""
    tree = host_values.parse_module(text)
    if tree is None:
        return None
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
    if not classes:
        return ()
    modules = _imported(tree)
    used = {node.id for node in ast.walk(classes[-1]) if isinstance(node, ast.Name)}
    return tuple(sorted(name for name in used if name in modules and modules[name].split(".")[0] not in _SEEN_PACKAGES))


def _imported(tree: ast.Module, defined: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
    """Each name the tree binds by importing -> the module it came from (a relative one starting with
    its dots); a name imported from a module that `defined` holds a function of is left out."""
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            modules.update((alias.asname or alias.name, module) for alias in node.names if alias.name not in defined)
        elif isinstance(node, ast.Import):
            modules.update((alias.asname, alias.name) if alias.asname else (alias.name.split(".")[0],) * 2 for alias in node.names)
    return modules


def _kernel(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A function a decorator makes a device kernel of (`@triton.jit`, `@helion.kernel`, a library's own)."""
    return any(dotted(decorator).split(".")[-1] in ("jit", "kernel", "pointwise_dynamic") for decorator in function.decorator_list)


def _timed_configs(kernel: ast.FunctionDef, names: dict[str, ast.expr]) -> int:
    autotuned, listed = autotune_listing(kernel, names)
    if not autotuned:
        return 0
    configs = len(listed.elts) if isinstance(listed, (ast.List, ast.Tuple)) else GUESSED_CONFIGS
    return configs if configs > 1 else 0


class _Walk:
    """Follows the timed call through its statements, loops and calls, noting how often each line runs."""

    def __init__(self, tree: ast.Module, timed: ast.ClassDef | None) -> None:
        self.tree = tree
        self.functions = {node.name: node for node in tree.body if isinstance(node, _FUNCTIONS)}
        self.methods = {node.name: node for node in timed.body if isinstance(node, _FUNCTIONS)} if timed else {}
        # Module-level objects of the file's own classes (`_perf = Metrics()`), by name: the methods of each.
        classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
        self.instances = {
            name: {node.name: node for node in classes[made.func.id].body if isinstance(node, _FUNCTIONS)}
            for name, made in host_values.bindings(tree.body).items()
            if isinstance(made, ast.Call) and isinstance(made.func, ast.Name) and made.func.id in classes
        }
        # The file's autograd Functions, by name: `Owner.apply(...)` runs the `forward` of each.
        self.applied = {
            name: forward
            for name, node in classes.items()
            if host_values.autograd_function(node)
            for forward in node.body
            if isinstance(forward, _FUNCTIONS) and forward.name == "forward"
        }
        self.guess = _guessed_trips(tree)
        self.repeats: dict[int, float] = {}
        # The most runs a function was walked with: walking it again with as few adds nothing, and
        # a file of helpers each calling the next from many places stays linear, not exponential.
        self.walked: dict[str, float] = {}
        self.guessed = False
        # What was known of shapes and sizes at each line with a call the timed call reaches: a launch there reads its sizes.
        self.known_at: dict[int, _Known] = {}

    def statements(self, statements: list[ast.stmt], factor: float, stack: tuple[str, ...], known: _Known) -> None:
        """`known`: the shapes of the tensors and the sizes read from them so far in this function."""
        for statement in statements:
            if isinstance(statement, (*_FUNCTIONS, ast.ClassDef)):
                continue  # defined here, run only where called
            if isinstance(statement, ast.If):  # a test may read a shape with no call in it (`x.ndim == 2`)
                self.known_at.setdefault(statement.lineno, dict(known))
            for expression in _own_expressions(statement):
                self.calls(expression, factor, stack, known)
            if isinstance(statement, ast.Assign):
                self.assigned(statement, known)
            inner = min(MAX_REPEATS, factor * self.trips(statement, known)) if isinstance(statement, ast.For) else factor
            for block in _BLOCKS:
                for child in getattr(statement, block, None) or []:
                    body = child.body if isinstance(child, ast.ExceptHandler) else [child]
                    runs = inner if block == "body" else factor
                    self.note(body, runs)
                    self.statements(body, runs, stack, known)

    def calls(self, expression: ast.AST, factor: float, stack: tuple[str, ...], known: _Known) -> None:
        """Follow each call of a module function (`helper(x)`), a method (`self.step(x)`), a method of a
        module-level object (`_perf.call_op(x)`) or an autograd Function's `forward` (`Owner.apply(x)`, its
        `ctx` not passed) in the expression, its parameters knowing the shapes and sizes of the arguments passed."""
        if len(stack) > MAX_DEPTH:
            return
        for node in _calls_inside_first(expression):
            self.known_at.setdefault(node.lineno, dict(known))
            function = node.func
            key = ""  # the callee's name, or `Owner.forward` for a Function's, which the model's `forward` shares
            if isinstance(function, ast.Name):
                callee, skipped = self.functions.get(function.id), 0
            elif isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) and function.value.id == "self":
                callee, skipped = self.methods.get(function.attr), 1
            elif isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) and function.value.id in self.instances:
                callee, skipped = self.instances[function.value.id].get(function.attr), 1
            elif isinstance(function, ast.Attribute) and function.attr == "apply" and isinstance(function.value, ast.Name):
                callee, skipped, key = self.applied.get(function.value.id), 1, f"{function.value.id}.forward"
            else:
                callee = None
            if callee is None:
                continue
            key = key or callee.name
            if key in stack or self.walked.get(key, 0.0) >= factor:
                continue
            self.walked[key] = factor
            self.note(callee.body, factor)
            inside = self.passed(callee, skipped, node, known)
            self.statements(callee.body, factor, (*stack, key), inside)
            if (shape := _returned_shape(callee, inside)) is not None:
                known[_returned_key(node)] = shape

    def passed(self, callee: ast.FunctionDef | ast.AsyncFunctionDef, skipped: int, call: ast.Call, known: _Known) -> _Known:
        """The callee's parameters that the call passes a known tensor or size, or a number the text fixes
        (`dim=-1`, `keepdim=True`): a test on one (`if dim is None:`) then reads which way it goes."""
        passed: _Known = {name: found for name, found in known.items() if name.startswith("self.")}  # the model's own
        names = functools.cache(lambda: self.names_at(call.lineno, known))  # read once and only if needed
        for name, argument in host_values.passed_arguments(callee, call, skipped):
            if (found := self.argument(argument, call.lineno, known, names)) is not None:
                passed[name] = found
        return passed

    def argument(
        self, argument: ast.expr, line: int, known: _Known, names: Callable[[], host_values.Values]
    ) -> tuple[int, ...] | int | None:
        """What a call on `line` passes in one argument: a known tensor's shape or a size, a bool as 0 or 1,
        a number the text fixes (`names`: what names mean at the call); None for anything else."""
        if found := _read(argument, known):
            return found
        if isinstance(argument, ast.Constant) and isinstance(argument.value, bool):
            return int(argument.value)
        number = self.value_at(argument, line, known, names())
        return number if isinstance(number, int) else None

    def assigned(self, statement: ast.Assign, known: _Known) -> None:
        target = statement.targets[-1]
        made = self.constructed(statement.value, statement.lineno, known)
        if made is not None and isinstance(target, ast.Name):
            known[target.id] = made
        else:
            _note_assignment(statement, known)

    def constructed(self, value: ast.expr, line: int, known: _Known) -> tuple[int, ...] | None:
        """The shape of a tensor torch makes: `torch.rand(m, n)`, `torch.zeros((m, n))`, `torch.empty(x.shape[0])`,
        `torch.empty_like(x)`, with casts and moves after (`.cuda()`, `.half()`); the factories as get_inputs() reads them."""
        made = value
        while isinstance(made, ast.Call) and isinstance(made.func, ast.Attribute) and made.func.attr in _SAME_SHAPE:
            made = made.func.value
        if not isinstance(made, ast.Call):  # a sum thousands of terms long is no constructor, and too deep to copy
            return None
        if isinstance(made.func, ast.Attribute) and made.func.attr in _LIKE_CONSTRUCTORS:
            return _shape_of(made.args[0], known) if made.args else None
        return factory_shape(_SizesRead(known).visit(copy.deepcopy(made)), {}, self.names_at(line, known), depth=0)

    def value_at(self, expression: ast.expr, line: int, known: _Known, names: host_values.Values | None = None) -> Any:
        """The expression's value on `line`: the names assigned above it (`names`, where already read) and the sizes known there put in."""
        return host_values.value(_SizesRead(known).visit(copy.deepcopy(expression)), self.names_at(line, known) if names is None else names)

    def names_at(self, line: int, known: _Known) -> host_values.Values:
        sizes = {name: ast.Constant(size) for name, size in known.items() if isinstance(size, int)}
        return host_values.Values({**host_values.scope_at(self.tree, line), **sizes}, host_values.PYTHON)

    def note(self, statements: list[ast.stmt], factor: float) -> None:
        if factor <= 1.0 or not statements:
            return
        for line in range(statements[0].lineno, (statements[-1].end_lineno or statements[-1].lineno) + 1):
            self.repeats[line] = max(self.repeats.get(line, 1.0), factor)

    def trips(self, loop: ast.For, known: _Known) -> float:
        """How many times a `for` over `range(...)` goes round, or over a list or tuple the text writes out
        (`for config in configs:` with `configs = [...]` above, `enumerate` of one); 1 for any other iterable."""
        call = loop.iter
        if (listed := self.listed(call, loop.lineno)) is not None:
            return float(listed)
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range"):
            return 1.0
        if call.keywords or not 1 <= len(call.args) <= 3:
            return 1.0
        try:
            bounds = [self.value_at(argument, loop.lineno, known) for argument in call.args]
        except RecursionError:  # a bound nested deeper than the stack: not fixed by the text, as the evaluator reads it
            bounds = [None]
        if not all(isinstance(bound, int) for bound in bounds):
            self.guessed = True
            return self.guess
        start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (bounds[0], bounds[1], bounds[2] if len(bounds) == 3 else 1)
        if step == 0:
            return 1.0
        return float(min(MAX_TRIPS, max(0, -((start - stop) // step))))

    def listed(self, iterable: ast.expr, line: int) -> int | None:
        """The length of a list or tuple written out, directly, through the name bound to it on `line`,
        or under `enumerate`; None for anything else (a starred item leaves the length to run time)."""
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate" and iterable.args:
            iterable = iterable.args[0]
        names = host_values.scope_at(self.tree, line) if isinstance(iterable, ast.Name) else {}
        items = host_values.written_out(iterable, names)
        if items is None or any(isinstance(item, ast.Starred) for item in items):
            return None
        return len(items)


# A name's tensor shape, or the size read from one (`n, d = x.shape`); by its dotted name, what the
# model's `__init__` left on `self` (model_layers.model_attributes: a Layer too).
_Known = dict[str, "tuple[int, ...] | int | Layer"]
# Tensor methods that keep their tensor's shape: casts, copies, moves and elementwise maths.
_SAME_SHAPE = frozenset(
    "float half bfloat16 double to contiguous clone detach cuda cpu type_as abs neg exp log sqrt rsqrt sigmoid tanh relu "
    "sin cos square reciprocal".split()
)
# torch's functions that return their first argument's shape (`torch.relu(x)`, `F.gelu(x)`): the
# methods above, activations, dropout and the norms.
_TORCH_FUNCTIONS = frozenset({"torch", "F", "nn.functional", "torch.nn.functional"})
_SAME_SHAPE_FUNCTIONS = _SAME_SHAPE | frozenset(
    "gelu silu leaky_relu elu selu celu softplus hardtanh hardswish hardsigmoid mish relu6 dropout softmax log_softmax "
    "layer_norm group_norm batch_norm instance_norm rms_norm clamp clip".split()
)


# torch's constructors of a tensor shaped as another.
_LIKE_CONSTRUCTORS = frozenset({"rand_like", "randn_like", "empty_like", "zeros_like", "ones_like", "full_like"})


def _shape_of(expression: ast.expr, known: _Known) -> tuple[int, ...] | None:
    """The shape of a tensor the expression makes from known ones: itself, a cast or elementwise method of
    it, `transpose`, `permute` or `.t()`, or arithmetic with it (read as its shape: broadcasting keeps it).
    A long sum or method chain nests deeper than Python's stack, so both are walked, not recursed."""
    operands = []
    while isinstance(expression, ast.BinOp):
        operands.append(expression.right)
        expression = expression.left
    if operands:
        return next(filter(None, (_shape_of(operand, known) for operand in [expression, *reversed(operands)])), None)
    methods: list[tuple[str, list[ast.expr]]] = []
    while isinstance(expression, ast.Call) and isinstance(expression.func, ast.Attribute) and not _called(expression, known):
        methods.append((expression.func.attr, expression.args))
        expression = expression.func.value
    if isinstance(expression, ast.Call) and _called(expression, known):  # `self.conv(x)`, `F.relu(x)`
        layer = known.get(dotted(expression))
        shape = _shape_of(expression.args[0], known) if expression.args else None
        shape = layer.output(shape) if isinstance(layer, Layer) else shape
    elif isinstance(expression, (ast.Name, ast.Attribute, ast.Call)):  # a call: a helper the walk followed
        found = known.get(_returned_key(expression) if isinstance(expression, ast.Call) else dotted(expression))
        shape = found if isinstance(found, tuple) else None
    else:
        shape = _shape_of(expression, known) if isinstance(expression, ast.BinOp) else None  # `(x * 2).float()`
    for method, arguments in reversed(methods):
        if shape is None:
            return None
        shape = _method_shape(shape, method, _numbers(arguments, known))
    return shape


def _numbers(arguments: list[ast.expr], known: _Known) -> list[int | None]:
    """A method's arguments as the numbers the known sizes make them (`-1, n_cols`), a single tuple or list
    argument spelt out (`.view((b, -1))`); None where one is not fixed."""
    if len(arguments) == 1 and isinstance(arguments[0], (ast.Tuple, ast.List)):
        arguments = list(arguments[0].elts)
    plain = host_values.Values({}, host_values.PYTHON)
    numbers = [host_values.value(_SizesRead(known).visit(copy.deepcopy(argument)), plain) for argument in arguments]
    return [number if isinstance(number, int) and not isinstance(number, bool) else None for number in numbers]


def _method_shape(shape: tuple[int, ...], method: str, arguments: list[int | None]) -> tuple[int, ...] | None:
    """The shape `tensor.method(*arguments)` gives a tensor of `shape`, where the method keeps, reorders or
    regroups it (`reshape`/`view` with at most one -1, `flatten`, `unsqueeze`, `squeeze`)."""
    if method in _SAME_SHAPE:
        return shape
    axes = [axis for axis in arguments if axis is not None]
    if len(axes) < len(arguments):
        return None
    if method in ("reshape", "view"):
        return _regrouped(shape, axes)
    within = all(-len(shape) <= axis < len(shape) for axis in axes)
    if method == "flatten" and len(axes) <= 2:
        return flattened(shape, *(axes + [0, -1][len(axes) :]))
    if method == "unsqueeze" and len(axes) == 1 and -len(shape) - 1 <= axes[0] <= len(shape):
        at = axes[0] % (len(shape) + 1)
        return (*shape[:at], 1, *shape[at:])
    if method == "squeeze" and len(axes) <= 1 and within:
        return tuple(size for at, size in enumerate(shape) if size != 1 or axes and at != axes[0] % len(shape))
    if method in ("transpose", "swapaxes") and len(axes) == 2 and within:
        swapped = list(shape)
        swapped[axes[0]], swapped[axes[1]] = shape[axes[1]], shape[axes[0]]
        return tuple(swapped)
    if method == "permute" and sorted(axis % len(shape) for axis in axes) == list(range(len(shape))):
        return tuple(shape[axis] for axis in axes)
    if method == "t" and len(shape) == 2:
        return shape[::-1]
    return None


def _regrouped(shape: tuple[int, ...], sizes: list[int]) -> tuple[int, ...] | None:
    """`reshape(*sizes)` of a tensor of `shape`: one -1 takes what the others leave; None where they do not fit."""
    count = math.prod(shape)
    rest = math.prod(size for size in sizes if size != -1)
    if sizes.count(-1) > 1 or any(size < -1 for size in sizes):
        return None
    if -1 in sizes:
        if rest == 0 or count % rest:  # an empty tensor's -1 could be anything
            return None
        sizes = [count // rest if size == -1 else size for size in sizes]
    return tuple(sizes) if math.prod(sizes) == count else None


def _size_of(expression: ast.expr, known: _Known) -> int | None:
    """A size read from a known tensor's shape: `x.shape[i]`, `x.size(i)`, `len(x)`, `x.numel()`, and its
    number of dimensions: `x.dim()`, `x.ndim`, `len(x.shape)`."""
    if _method_call(expression, "numel") and not expression.args:  # type: ignore[attr-defined]
        shape = _shape_of(expression.func.value, known)  # type: ignore[attr-defined]
        return math.prod(shape) if shape else None
    if (dimensioned := _dimensioned(expression)) is not None:
        shape = _shape_of(dimensioned, known)
        return len(shape) if shape is not None else None
    if isinstance(expression, ast.Subscript) and isinstance(expression.value, ast.Attribute) and expression.value.attr == "shape":
        shape, index = _shape_of(expression.value.value, known), expression.slice
    elif isinstance(expression, ast.Subscript) and _method_call(expression.value, "sizes") and not expression.value.args:  # type: ignore[attr-defined]
        shape, index = _shape_of(expression.value.func.value, known), expression.slice  # type: ignore[attr-defined]  # C++: x.sizes()[1]
    elif (
        isinstance(expression, ast.Call)
        and isinstance(expression.func, ast.Attribute)
        and expression.func.attr == "size"
        and expression.args
    ):
        shape, index = _shape_of(expression.func.value, known), expression.args[0]
    elif isinstance(expression, ast.Call) and isinstance(expression.func, ast.Name) and expression.func.id == "len" and expression.args:
        shape, index = _shape_of(expression.args[0], known), ast.Constant(0)
    else:
        return None
    axis = _axis(index)
    if shape is None or axis is None or not -len(shape) <= axis < len(shape):
        return None
    return shape[axis]


def _axis(index: ast.expr) -> int | None:
    """An axis written as a literal: `1`, or `-1` (a minus the tree keeps apart from its number)."""
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
        axis = _axis(index.operand)
        return -axis if axis is not None else None
    return index.value if isinstance(index, ast.Constant) and type(index.value) is int else None


def _dimensioned(expression: ast.expr) -> ast.expr | None:
    """The tensor whose number of dimensions `x.dim()`, `x.ndim` or `len(x.shape)` asks for."""
    if _method_call(expression, "dim") and not expression.args:  # type: ignore[attr-defined]
        return expression.func.value  # type: ignore[attr-defined]
    if isinstance(expression, ast.Attribute) and expression.attr == "ndim":
        return expression.value
    if isinstance(expression, ast.Call) and isinstance(expression.func, ast.Name) and expression.func.id == "len" and expression.args:
        argument = expression.args[0]
        return argument.value if isinstance(argument, ast.Attribute) and argument.attr == "shape" else None
    return None


def _read(expression: ast.expr, known: _Known) -> tuple[int, ...] | int | None:
    """What an expression is, of the known shapes and sizes: a name's (`self.weight`'s too), a size read
    from a shape, or a tensor's shape."""
    if isinstance(expression, (ast.Name, ast.Attribute)) and isinstance(found := known.get(dotted(expression)), (tuple, int)):
        return found
    return None if isinstance(expression, ast.Name) else _size_of(expression, known) or _shape_of(expression, known)


def _called(call: ast.Call, known: _Known) -> bool:
    """Whether the call runs a layer `__init__` built (`self.conv(x)`) or a function of torch that keeps its
    first argument's shape (`torch.relu(x)`, `F.gelu(x)`), not a method of the tensor before its dot."""
    callee = dotted(call)
    owner, _, function = callee.rpartition(".")
    return isinstance(known.get(callee), Layer) or owner in _TORCH_FUNCTIONS and function in _SAME_SHAPE_FUNCTIONS


class _SizesRead(ast.NodeTransformer):
    """Puts each size read from a known tensor's shape (`x.shape[1]`), and each name known to hold one, in as its number."""

    def __init__(self, known: _Known) -> None:
        self.known = known

    def generic_visit(self, node: ast.AST) -> ast.AST:
        size = _size_of(node, self.known) if isinstance(node, ast.expr) else None
        return ast.Constant(size) if size is not None else super().generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        size = self.known.get(node.id)
        return ast.Constant(size) if isinstance(size, int) and isinstance(node.ctx, ast.Load) else node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        size = self.known.get(dotted(node))  # `self.out_features`
        return ast.Constant(size) if isinstance(size, int) and isinstance(node.ctx, ast.Load) else self.generic_visit(node)


def _note_assignment(statement: ast.Assign, known: _Known) -> None:
    """What an assignment tells of shapes and sizes: `b, t, d = x.shape`, `n = x.size(0)`, `y = x.transpose(1, 2)`,
    `q, k = (t.float() for t in (q, k))`; a name assigned anything else is no longer known."""
    target, value = statement.targets[-1], statement.value
    if isinstance(target, ast.Name):
        found = _read(value, known)
        if found:
            known[target.id] = found
        else:
            known.pop(target.id, None)
        return
    if not isinstance(target, (ast.Tuple, ast.List)):
        return
    names = [element.id if isinstance(element, ast.Name) else None for element in target.elts]
    if isinstance(value, ast.Attribute) and value.attr == "shape" or _method_call(value, "size") and not value.args:
        shape = _shape_of(value.value if isinstance(value, ast.Attribute) else value.func.value, known)
        values: list[tuple[int, ...] | int | None] = list(shape) if shape and len(shape) == len(names) else [None] * len(names)
    elif isinstance(value, (ast.Tuple, ast.List)) and len(elements := _unpacked(value.elts, known)) == len(names):
        values = [element if isinstance(element, int) else _read(element, known) for element in elements]
    elif (mapped := _mapped_over(value)) is not None and len(mapped[2]) == len(names):
        parameter, body, listed = mapped
        values = [_shape_of(body, {parameter: shape} if (shape := _shape_of(element, known)) else {}) for element in listed]
    else:
        values = [None] * len(names)
    for name, found in zip(names, values):
        if name is not None and found:
            known[name] = found
        elif name is not None:
            known.pop(name, None)


def _method_call(expression: ast.expr, method: str) -> bool:
    return isinstance(expression, ast.Call) and isinstance(expression.func, ast.Attribute) and expression.func.attr == method


def _unpacked(elements: list[ast.expr], known: _Known) -> list[ast.expr | int]:
    """The elements of a tuple display with each `*x.shape` of a known tensor spelt out as its sizes."""
    spelt: list[ast.expr | int] = []
    for element in elements:
        inner = element.value if isinstance(element, ast.Starred) else None
        shape = _shape_of(inner.value, known) if isinstance(inner, ast.Attribute) and inner.attr == "shape" else None
        spelt.extend(shape if shape else [element])
    return spelt


def _mapped_over(value: ast.expr) -> tuple[str, ast.expr, list[ast.expr]] | None:
    """(parameter, body, listed tensors) of `map(lambda x: body, [a, b])` or `(body for x in (a, b))`, or None."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "map" and len(value.args) == 2:
        function, listed = value.args
        if not (isinstance(function, ast.Lambda) and len(function.args.args) == 1):
            return None
        parameter, body = function.args.args[0].arg, function.body
    elif (
        isinstance(value, (ast.GeneratorExp, ast.ListComp))
        and len(value.generators) == 1
        and isinstance(value.generators[0].target, ast.Name)
    ):
        parameter, body, listed = value.generators[0].target.id, value.elt, value.generators[0].iter
    else:
        return None
    return (parameter, body, list(listed.elts)) if isinstance(listed, (ast.Tuple, ast.List)) else None


def _kernelbench_tree(text: str) -> ast.Module | None:
    """The module's tree where the file defines a KernelBench `Model` or `ModelNew` (its timed call is known)."""
    if "class" not in text or not _MODEL_CLASS.search(text):
        return None
    return host_values.parse_module(text)


def _main_guard(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":`: a script's own checks, never part of the timed call."""
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)


def _names(node: ast.AST) -> Iterator[str]:
    return (child.id for child in ast.walk(node) if isinstance(child, ast.Name))


def _calls_inside_first(expression: ast.AST) -> Iterator[ast.Call]:
    """The calls in an expression, each after the calls among its arguments: `g(f(x))` walks `f` first, so
    `g`'s parameter knows the shape `f` returns. Walked, not recursed: a long sum nests deeper than the stack."""
    pending: list[tuple[ast.AST, bool]] = [(expression, False)]
    while pending:
        node, children_done = pending.pop()
        if children_done:
            if isinstance(node, ast.Call):
                yield node
            continue
        pending.append((node, True))
        pending.extend((child, False) for child in reversed(list(ast.iter_child_nodes(node))))


def _returned_key(call: ast.Call) -> str:
    """Where `known` keeps the shape a followed call returned: by the call's place, which no name can spell."""
    return f"{call.lineno}:{call.col_offset}()"


def _returned_shape(function: ast.FunctionDef | ast.AsyncFunctionDef, known: _Known) -> tuple[int, ...] | None:
    """The shape of the tensor a function returns, read after the walk of its body: where each of its
    `return`s gives one known shape, the same one."""
    shapes = {_shape_of(node.value, known) if node.value else None for node in _own_returns(function.body)}
    return shapes.pop() if len(shapes) == 1 else None


def _own_returns(statements: list[ast.stmt]) -> Iterator[ast.Return]:
    """The `return` statements of a function body, not those of the functions and classes it defines."""
    for statement in statements:
        if isinstance(statement, ast.Return):
            yield statement
        elif not isinstance(statement, (*_FUNCTIONS, ast.ClassDef)):
            for block in _BLOCKS:
                for child in getattr(statement, block, None) or []:
                    yield from _own_returns(child.body if isinstance(child, ast.ExceptHandler) else [child])


def _own_expressions(statement: ast.stmt) -> Iterator[ast.AST]:
    """The parts of a statement outside its nested blocks: a loop's iterable, an `if`'s test, a whole simple statement."""
    for field, value in ast.iter_fields(statement):
        if field in _BLOCKS:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, ast.AST):
                yield item


def _guessed_trips(tree: ast.Module) -> float:
    """The upper median of the module's integer constants above 1 (its sizes), else GUESSED_TRIPS."""
    names = host_values.Values(host_values.bindings(tree.body), host_values.PYTHON)
    sizes = sorted(found for name in names if isinstance(found := names.get(name), int) and found > 1)
    return float(min(MAX_TRIPS, sizes[len(sizes) // 2])) if sizes else float(GUESSED_TRIPS)


def _first_line(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
