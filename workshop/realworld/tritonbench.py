"""TritonBench: LLM-written Triton candidates measured against the kernel they were written to replace.

thunlp/TritonBench holds 184 Triton kernels from GitHub (track G), 166 torch operators (track T),
a perf script per kernel (`performance_metrics/perf_{G,T}/golden_metrics/<kernel>_perf.py`: a
`performance_metrics` class whose `get_input_tensors()` sweeps one loop over sizes and whose
`call_op()` calls the kernel's entry functions) and 7,752 LLM candidates (`LLM_generated/*/*.jsonl`,
`predict`). A unit here is one distinct candidate of one kernel at one value of its perf script's
sweep. Two files are generated per unit from our template and the perf script (read from the mirror
when a batch is packed, never committed): the reference, whose `Model` runs `call_op` with the
entry functions taken from the human kernel (G) or the torch operator (T), and the candidate, the
same with the entry functions taken from the LLM's text. The kernels' texts go to `BATCH/lib/` as
modules named by their SHA-256 (`tritonbench_v1_code.k_<sha>`), which the generated files import.

The manifest (`data/tritonbench_manifest.jsonl.gz`) holds no code: per unit the source files'
paths and SHA-256 (candidate JSONL, kernel file, perf script, performance_utils.py), the row, the
digests of the candidate's and the kernel's module texts and of the two generated files, the sweep
value and the largest input's element count.

    python -m workshop realworld tritonbench-manifest --mirrors /work/.mirror
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelcast.wire import KernelSide
from workshop.realworld.library import MAX_ELEMENTS, sha256_of
from workshop.realworld.manifest import DATA, Mirror, write_rows

REPO = "thunlp/TritonBench"
COMMIT = "603e28a5050e8c268f6883a69709d477a272d49a"
LICENCE = "Apache-2.0"
SOURCE = "tritonbench"
TRITONBENCH_MANIFEST = DATA / "tritonbench_manifest.jsonl.gz"
# The package pack writes into BATCH/lib: one module per kernel text, named by its SHA-256.
CODE_PACKAGE = "tritonbench_v1_code"
# The keys a TritonBench entry adds to the KernelBench entry's (manifest.Entry); records keep them.
TRITONBENCH_KEYS = ("op", "track", "row", "files", "kernel_sha256", "candidate_sha256")
# Sizes a kernel is measured at: the sweep's smallest, middle and largest value under MAX_ELEMENTS.
SIZES_PER_KERNEL = 3
# What separates a kernel file's code from the tests TritonBench appends to it.
TEST_SEPARATOR = "#" * 146
# The torch factories whose shape argument counts towards an input's elements (like-factories copy
# a counted tensor; tensor() and arange() build small index and scalar inputs in these scripts).
FACTORIES = {"rand", "randn", "zeros", "ones", "empty", "full", "randint", "eye"}


def perf_path(track: str, kernel: str) -> str:
    return f"performance_metrics/perf_{track}/golden_metrics/{kernel}_perf.py"


def utils_path(track: str) -> str:
    return f"performance_metrics/perf_{track}/performance_utils.py"


def kernel_path(track: str, kernel: str) -> str:
    return f"data/TritonBench_{track}_v1/{kernel}.py"


def kernel_code(text: str) -> str:
    """A kernel file's code without the tests TritonBench appends (as its own evaluation splits it)."""
    return text.split(TEST_SEPARATOR)[0]


def candidate_code(predict: str) -> str:
    """An LLM's answer as code: the last ```python block if it has one (as TritonBench's evaluation
    takes it), its closing fence and the chat models' end tokens removed."""
    code = predict.split("```python")[-1] if "```python" in predict else predict
    return code.split("```")[0].replace("<|im_end|>", "").replace("<|EOT|>", "")


@dataclass(frozen=True)
class Sweep:
    """What a perf script calls and the sizes it builds, read from its syntax tree."""

    entry_names: tuple[tuple[str, str], ...]  # (name in the kernel's module, name the script binds)
    variable: str  # the sweep loop's variable
    values: tuple[int, ...]  # the values measured (at most SIZES_PER_KERNEL, inputs within MAX_ELEMENTS)
    elements: tuple[int, ...]  # the largest input's elements at each value
    item: str  # how one input reaches call_op: tuple, list or single


class Unmappable(Exception):
    """A perf script whose harness cannot be generated mechanically; the message says why."""


@functools.cache
def read_sweep(text: str) -> Sweep:
    """The entry functions, the chosen sweep values and the input's form of one perf script."""
    tree = ast.parse(text)
    entry = [node for node in tree.body if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in KERNEL_PACKAGES]
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "performance_metrics"]
    if len(entry) != 1 or len(classes) != 1:
        raise Unmappable("not one kernel import and one performance_metrics class")
    methods = {node.name: node for node in classes[0].body if isinstance(node, ast.FunctionDef)}
    if not {"get_input_tensors", "to_cuda", "call_op"} <= set(methods):
        raise Unmappable("no get_input_tensors, to_cuda or call_op")
    body = methods["get_input_tensors"].body
    loops = [node for node in body if isinstance(node, ast.For)]
    if len(loops) != 1 or not isinstance(loops[0].target, ast.Name):
        raise Unmappable("the sweep is not one loop over one variable")
    loop = loops[0]
    bounds = _range_of(loop.iter)
    constants: dict[str, Any] = {}
    for statement in body[: body.index(loop)]:
        _bind(statement, constants)
    measured = []
    for value in range(*bounds):
        elements = _largest_input(loop, {**constants, loop.target.id: value})
        if elements <= MAX_ELEMENTS:
            measured.append((value, elements))
    if not measured:
        raise Unmappable(f"every input over {MAX_ELEMENTS} elements")
    chosen = _spread(measured)
    names = tuple((alias.name, alias.asname or alias.name) for alias in entry[0].names)
    return Sweep(names, loop.target.id, tuple(value for value, _ in chosen), tuple(count for _, count in chosen), _item_form(loop))


KERNEL_PACKAGES = ("TritonBench_v1", "TorchBench_v1")


def _range_of(node: ast.expr) -> tuple[int, ...]:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"):
        raise Unmappable("the sweep loop is not over range()")
    bounds = tuple(_evaluate(arg, {}) for arg in node.args)
    if not all(isinstance(bound, int) for bound in bounds):
        raise Unmappable("the sweep's range is not constant")
    return bounds


def _spread(measured: list[tuple[int, int]]) -> list[tuple[int, int]]:
    if len(measured) <= SIZES_PER_KERNEL:
        return measured
    return [measured[0], measured[len(measured) // 2], measured[-1]]


def _bind(statement: ast.stmt, names: dict[str, Any]) -> None:
    """Record a simple assignment's value in `names` where it evaluates to numbers."""
    if not isinstance(statement, ast.Assign):
        return
    pairs: list[tuple[ast.expr, ast.expr]] = []
    for target in statement.targets:  # M = N = K = 128 * i binds all three
        if isinstance(target, ast.Tuple) and isinstance(statement.value, ast.Tuple) and len(target.elts) == len(statement.value.elts):
            pairs += zip(target.elts, statement.value.elts)
        else:
            pairs.append((target, statement.value))
    for name, value in pairs:
        if isinstance(name, ast.Name):
            number = _evaluate(value, names)
            if number is not None:
                names[name.id] = number
            else:
                names.pop(name.id, None)


def _largest_input(loop: ast.For, names: dict[str, Any]) -> int:
    """Elements of the largest tensor a torch factory makes in one pass of the loop's body."""
    largest = 0
    for statement in loop.body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and _factory(node):
                shape = _shape(node, names)
                if shape is None:
                    raise Unmappable(f"an input's shape is not known before running: {ast.unparse(node)[:80]}")
                count = 1
                for dim in shape:
                    count *= dim
                largest = max(largest, count)
        _bind(statement, names)
    return largest


def _factory(node: ast.Call) -> bool:
    func = node.func
    return isinstance(func, ast.Attribute) and func.attr in FACTORIES and isinstance(func.value, ast.Name) and func.value.id == "torch"


def _shape(node: ast.Call, names: dict[str, Any]) -> tuple[int, ...] | None:
    name = node.func.attr  # type: ignore[attr-defined]
    keywords = {keyword.arg: keyword.value for keyword in node.keywords}
    if "size" in keywords:
        args = [keywords["size"]]
    elif name == "randint":
        args = [arg for arg in node.args if isinstance(arg, (ast.Tuple, ast.List))] or node.args[-1:]
    elif name == "full":
        args = node.args[:1]
    elif name == "eye":
        args = node.args[:2] if len(node.args) > 1 else node.args[:1] * 2
    else:
        args = node.args
    values = [_evaluate(arg.value if isinstance(arg, ast.Starred) else arg, names) for arg in args]
    dims: list[int] = []
    for value in values:
        if isinstance(value, tuple):
            dims.extend(value)
        elif isinstance(value, int):
            dims.append(value)
        else:
            return None
    return tuple(dims) if all(isinstance(dim, int) for dim in dims) else None


OPERATORS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a**b,
    ast.Mod: lambda a, b: a % b,
}


def _evaluate(node: ast.expr, names: dict[str, Any]) -> Any:
    """The value of a numeric expression over known names (ints, tuples of them, int(), min, max), or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_evaluate(item, names) for item in node.elts]
        return tuple(items) if all(isinstance(item, int) for item in items) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _evaluate(node.operand, names)
        return -value if isinstance(value, (int, float)) else None
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = _evaluate(node.left, names), _evaluate(node.right, names)
        if isinstance(left, (int, float)) and isinstance(right, (int, float)):
            try:
                return OPERATORS[type(node.op)](left, right)
            except ZeroDivisionError:
                return None
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "min", "max") and not node.keywords:
        args = [_evaluate(arg, names) for arg in node.args]
        if args and all(isinstance(arg, (int, float)) for arg in args):
            return {"int": int, "min": min, "max": max}[node.func.id](*args)
    return None


def _item_form(loop: ast.For) -> str:
    """How one appended input is shaped: a tuple or list call_op unpacks, or a single value."""
    appended = [
        node.args[0]
        for node in ast.walk(loop)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append" and len(node.args) == 1
        if isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "input_tensors"
    ]
    if len(appended) != 1:
        raise Unmappable("not one self.input_tensors.append() in the sweep")
    value = appended[0]
    if isinstance(value, ast.Name):
        assigned = [
            node.value
            for node in loop.body
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == value.id for t in node.targets)
        ]
        value = assigned[-1] if assigned else value
    return "tuple" if isinstance(value, ast.Tuple) else "list" if isinstance(value, ast.List) else "single"


@functools.cache
def perf_body(text: str, value: int) -> str:
    """The perf script without its path set-up, imports of the kernel and of performance_utils and its
    __main__ block, its sweep loop cut to one value: text spliced by position, so the result is the
    same whichever Python unparses."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        return starts[line - 1] + len(lines[line - 1].encode()[:column].decode())

    cuts: list[tuple[int, int, str]] = []
    for node in tree.body:
        dropped = (
            (isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in (*KERNEL_PACKAGES, "performance_utils"))
            or (isinstance(node, ast.Expr) and "sys.path" in ast.unparse(node))
            or (isinstance(node, ast.If) and "__main__" in ast.unparse(node.test))
        )
        if dropped:
            cuts.append((starts[node.lineno - 1], starts[node.end_lineno], ""))  # type: ignore[index]
    method = next(
        node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == "get_input_tensors"
    )
    loop = next(node for node in method.body if isinstance(node, ast.For))
    sweep = loop.iter
    cuts.append((offset(sweep.lineno, sweep.col_offset), offset(sweep.end_lineno, sweep.end_col_offset), f"({value},)"))  # type: ignore[arg-type]
    for start, end, replacement in sorted(cuts, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


HARNESS = '''"""TritonBench {track} {kernel} at {variable} = {value}: {whose} under TritonBench's perf script.

Generated by kernelcast's workshop. The perf script's class follows our header, its sweep cut to this one value; its entry functions come
from the module `pack` wrote into BATCH/lib. Model runs call_op; its output is what call_op returns,
or, where that holds no tensor (an in-place kernel), the input tensors after the call."""

{kernel_import}import torch
import torch.nn as nn

from {package}.k_{utils} import Performance_Metrics, do_bench_config  # noqa: F401

{bindings}

# --- TritonBench's {perf_path} ---
{body}
# --- kernelcast's harness ---
ITEM = "{item}"  # how the perf script hands one input to call_op
_perf = performance_metrics()


def _item(inputs):
    return tuple(inputs) if ITEM == "tuple" else list(inputs) if ITEM == "list" else inputs[0]


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [tensor for part in value for tensor in _tensors(part)]
    return []


class {model_class}(nn.Module):
    def forward(self, *inputs):
        returned = _tensors(_perf.call_op(_item(inputs)))
        found = returned or _tensors(inputs)
        return found[0] if len(found) == 1 else tuple(found)


def get_inputs():
    _perf.get_input_tensors()
    item = _perf.to_cuda(_perf.input_tensors[0])
    return list(item) if ITEM != "single" else [item]


def get_init_inputs():
    return []
'''

CANDIDATE = '''

class ModelNew(Model):
    """The LLM's kernel: the same perf call, with the entry functions taken from its text."""
'''


def harness(
    track: str, kernel: str, sweep: Sweep, value: int, perf: str, utils_sha: str, module_sha: str, whose: str, as_written: bool = False
) -> str:
    """A generated file whose Model calls the perf script's call_op on the entry functions of one module.
    `as_written`: the file as it reads below that module's text, as a user writes a solution: the entry
    functions are the ones defined above (no module import) and the class is a `ModelNew`."""
    if as_written:
        kernel_import, model_class = "", "ModelNew"
        bindings = "\n".join(f"{bound} = {name}" for name, bound in sweep.entry_names if bound != name)
    else:
        kernel_import, model_class = "import importlib\n\n", "Model"
        imported = f'_kernel = importlib.import_module("{CODE_PACKAGE}.k_{module_sha}")'
        bindings = "\n".join([imported, *(f"{bound} = _kernel.{name}" for name, bound in sweep.entry_names)])
    return HARNESS.format(
        track=track,
        kernel=kernel,
        variable=sweep.variable,
        value=value,
        whose=whose,
        package=CODE_PACKAGE,
        utils=utils_sha,
        kernel_import=kernel_import,
        bindings=bindings,
        model_class=model_class,
        perf_path=perf_path(track, kernel),
        body=perf_body(perf, value).strip("\n"),
        item=sweep.item,
    )


@dataclass(frozen=True)
class Row:
    """One candidate as the JSONL holds it."""

    path: str
    row: int
    track: str
    code: str
    label: str
    instruction: str


def candidate_files(mirror: Mirror) -> list[str]:
    return sorted(path for path in mirror.paths() if re.fullmatch(r"LLM_generated/Bench_[GT]_[^/]+/[^/]+\.jsonl", path))


def rows_of(mirror: Mirror, path: str) -> tuple[Row, ...]:
    return _rows(mirror.git_dir, mirror.commit, path)


@functools.cache
def _rows(git_dir: Path, commit: str, path: str) -> tuple[Row, ...]:
    """A JSONL file's rows, parsed once per process."""
    track = re.search(r"Bench_([GT])_", path).group(1)  # type: ignore[union-attr]
    rows = []
    for index, line in enumerate(_read(git_dir, commit, path).decode().splitlines()):
        if line.strip():
            data = json.loads(line)
            instruction = data.get("instruction") or data.get("prompt") or ""
            rows.append(Row(path, index, track, candidate_code(data.get("predict") or ""), data.get("label") or "", instruction))
    return tuple(rows)


class Kernels:
    """Which kernel a candidate row was written for: G by its label (the kernel file's code), T by
    the functional description in its prompt (both as TritonBench's evaluation matches them)."""

    def __init__(self, mirror: Mirror) -> None:
        self.codes = {
            track: {
                Path(path).stem: kernel_code(_read(mirror.git_dir, mirror.commit, path).decode())
                for path in mirror.paths()
                if re.fullmatch(rf"data/TritonBench_{track}_v1/[^/]+\.py", path)
            }
            for track in "GT"
        }
        described = json.loads(_read(mirror.git_dir, mirror.commit, "data/TritonBench_T_v1.jsonl"))
        self.descriptions = {Path(item["file"]).stem: item["description"].replace("\n", "") for item in described}

    def of(self, row: Row) -> str:
        """The kernel's name; Unmappable where the row names none or several."""
        if row.track == "G":
            label = row.label.replace("<|im_end|>", "").replace("<|EOT|>", "").strip()
            found = [name for name, code in self.codes["G"].items() if code.strip() == label]
            found = found or [name for name, code in self.codes["G"].items() if label and label in code]
        else:
            if "Functional Description: " not in row.instruction:
                raise Unmappable("the prompt has no functional description")
            wanted = row.instruction.split("Functional Description: ")[-1].split("Wrapper Entry Information:")[0].replace("\n", "")
            found = [name for name, description in self.descriptions.items() if wanted in description]
        if len(found) != 1:
            raise Unmappable(f"the row matches {len(found)} kernel files")
        return found[0]


def entries(mirrors: Path, left_out: Counter[str] | None = None) -> Iterator[dict[str, Any]]:
    """Every distinct candidate of every mappable kernel at each chosen sweep value; what is left out
    and why is counted in `left_out` (per candidate row)."""
    mirror = Mirror(mirrors, REPO, COMMIT)
    left_out = Counter() if left_out is None else left_out
    kernels = Kernels(mirror)
    sweeps: dict[tuple[str, str], Sweep | Unmappable] = {}
    by_kernel: dict[tuple[str, str], dict[str, list[Row]]] = {}
    for path in candidate_files(mirror):
        for row in rows_of(mirror, path):
            if not row.code.strip():
                left_out["empty predict"] += 1
                continue
            try:
                key = (row.track, kernels.of(row))
            except Unmappable as why:
                left_out[str(why)] += 1
                continue
            if key not in sweeps:
                try:
                    sweeps[key] = read_sweep(_read(mirror.git_dir, COMMIT, perf_path(*key)).decode())
                except Unmappable as why:
                    sweeps[key] = why
            if isinstance(sweeps[key], Unmappable):
                left_out[f"perf script: {sweeps[key]}"] += 1
                continue
            by_kernel.setdefault(key, {}).setdefault(sha256_of(row.code), []).append(row)
    for (track, kernel), candidates in sorted(by_kernel.items()):
        sweep = sweeps[track, kernel]
        assert isinstance(sweep, Sweep)
        files = {path: _file_sha(mirror, path) for path in (kernel_path(track, kernel), perf_path(track, kernel), utils_path(track))}
        for digest, rows in sorted(candidates.items(), key=lambda item: (item[1][0].path, item[1][0].row)):
            first = rows[0]
            left_out["same text as another candidate of the kernel"] += len(rows) - 1
            for value, elements in zip(sweep.values, sweep.elements, strict=True):
                entry = {
                    "source": SOURCE,
                    "repo": REPO,
                    "commit": COMMIT,
                    "path": first.path,
                    "row": first.row,
                    "sha256": digest,
                    "same_as": [f"{row.path}#{row.row}" for row in rows[1:]],
                    "files": {first.path: _file_sha(mirror, first.path), **files},
                    "run": first.path.removeprefix("LLM_generated/").removesuffix(".jsonl"),
                    "level": 0,
                    "problem": f"{SOURCE}/{track}/{kernel}/{sweep.variable}={value}",
                    "problem_name": kernel,
                    "problem_path": perf_path(track, kernel),
                    "track": track,
                    "op": kernel,
                    "kernel_sha256": sha256_of(kernels.codes[track][kernel]),
                    "sizes": {sweep.variable: value, "elements": elements},
                    "language": "triton",
                }
                reference, candidate = generated(entry, mirror)
                entry |= {"problem_sha256": sha256_of(reference), "candidate_sha256": sha256_of(candidate)}
                yield {"id": f"{SOURCE}:{track}/{kernel}/{sweep.variable}={value}/{digest[:16]}", **entry}


def generated(entry: dict[str, Any], mirror: Mirror, as_written: bool = False) -> tuple[str, str]:
    """An entry's (reference, candidate) text, generated again from the perf script in the mirror; with
    `as_written`, each Triton side as it reads below its kernels' text (`harness`), the torch operator's
    as measured."""
    track, kernel = entry["track"], entry["op"]
    perf = _read(mirror.git_dir, mirror.commit, perf_path(track, kernel)).decode()
    sweep = read_sweep(perf)
    value = entry["sizes"][sweep.variable]
    utils = sha256_of(_read(mirror.git_dir, mirror.commit, utils_path(track)).decode())
    whose = "the human Triton kernel" if track == "G" else "the torch operator"
    reference = harness(track, kernel, sweep, value, perf, utils, entry["kernel_sha256"], whose, as_written and track == "G")
    candidate = harness(track, kernel, sweep, value, perf, utils, entry["sha256"], "an LLM's Triton candidate", as_written)
    return reference, (candidate if as_written else candidate + CANDIDATE)


def modules(entry: dict[str, Any], mirror: Mirror) -> dict[str, str]:
    """The texts the generated files import, by SHA-256: the candidate, the kernel and performance_utils,
    each read from the mirror and checked against the manifest."""
    track = entry["track"]
    for path, digest in entry["files"].items():
        if _file_sha(mirror, path) != digest:
            raise ValueError(f"{REPO}@{mirror.commit[:12]}:{path} is not the file the TritonBench manifest names (SHA-256 differs)")
    row = next(row for row in rows_of(mirror, entry["path"]) if row.row == entry["row"])
    kernel = kernel_code(_read(mirror.git_dir, mirror.commit, kernel_path(track, entry["op"])).decode())
    utils = _read(mirror.git_dir, mirror.commit, utils_path(track)).decode()
    texts = {sha256_of(text): text for text in (row.code, kernel, utils)}
    for digest in (entry["sha256"], entry["kernel_sha256"]):
        if digest not in texts:
            raise ValueError(f"{entry['id']}: the candidate's or the kernel's text differs from the TritonBench manifest's")
    return texts


# What a candidate may import on the GPU host beyond the standard library.
HOST_PACKAGES = {"torch", "triton", "numpy"}


def why_it_cannot_load(code: str, entry_names: tuple[tuple[str, str], ...]) -> str | None:
    """Why a candidate's text is sure to fail before it is timed, read from its syntax alone: it does not
    parse, lacks an entry function the perf script calls, imports a package the host lacks, or uses a
    name it binds nowhere. None where it may run; the GPU then judges it. Where in doubt it says None:
    a module-level name counts as bound wherever in a top-level statement it is bound."""
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        return f"does not parse: {error.msg}"
    module_level = set()
    for statement in tree.body:
        inside = [statement] if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ast.walk(statement)
        module_level |= {name for node in inside for name in _bound_by(node)}
    missing = [name for name, _ in entry_names if name not in module_level]
    if missing:
        return f"defines no {missing[0]}"
    nodes = list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            roots = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            roots = [(node.module or "").split(".")[0]] if node.level == 0 else ["."]
        else:
            continue
        lacking = [root for root in roots if root not in HOST_PACKAGES and root not in sys.stdlib_module_names]
        if lacking:
            return f"imports {lacking[0]}, which the host lacks"
    bound = set(dir(builtins)) | {"__name__", "__file__"} | {name for node in nodes for name in _bound_by(node)}
    unbound = sorted({node.id for node in nodes if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)} - bound)
    return f"uses {unbound[0]}, which it never binds" if unbound else None


def _bound_by(node: ast.AST) -> set[str]:
    """The names one syntax node binds: an import's, a definition's, an argument's, an assignment target's,
    an exception's, a global or nonlocal declaration's, a match capture's."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.arg):
        return {node.arg}
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return {node.id}
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return set(node.names)
    if isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
        return {node.name}
    return set()


def candidate_text(entry: dict[str, Any], mirror: Mirror) -> str:
    """The candidate's code as the manifest names it."""
    return modules(entry, mirror)[entry["sha256"]]


def entry_names(entry: dict[str, Any], mirror: Mirror) -> tuple[tuple[str, str], ...]:
    """The functions the entry's perf script takes from the kernel's module."""
    return read_sweep(_read(mirror.git_dir, mirror.commit, perf_path(entry["track"], entry["op"])).decode()).entry_names


def _file_sha(mirror: Mirror, path: str) -> str:
    return _sha_at(mirror.git_dir, mirror.commit, path)


@functools.cache
def _sha_at(git_dir: Path, commit: str, path: str) -> str:
    """A file's SHA-256 at one commit, hashed once per process (every candidate of a JSONL file checks it)."""
    return hashlib.sha256(_read(git_dir, commit, path)).hexdigest()


@functools.cache
def _read(git_dir: Path, commit: str, path: str) -> bytes:
    """A file at one commit, read from the mirror once per process (the JSONL files are megabytes)."""
    return Mirror(git_dir.parent.parent, REPO, commit).read(path)


def build(mirrors: Path, out: Path = TRITONBENCH_MANIFEST) -> dict[str, Any]:
    """Write the TritonBench manifest; counts of entries, candidates and what was left out."""
    left_out: Counter[str] = Counter()
    rows = list(entries(mirrors, left_out))
    write_rows(out, rows, counted_by="track")
    return {
        "entries": len(rows),
        "distinct candidates": len({(row["op"], row["sha256"]) for row in rows}),
        "kernels": len({(row["track"], row["op"]) for row in rows}),
        "left out": dict(sorted(left_out.items())),
    }


def is_tritonbench(entry: dict[str, Any]) -> bool:
    return entry["source"] == SOURCE


def tritonbench_sides(record: dict[str, Any], mirror: Mirror) -> tuple[KernelSide, KernelSide]:
    """A record's (reference, candidate) as a user would have them in files: the kernel's text (human
    Triton on track G, the torch operator on T) or the candidate's, followed by the KernelBench file
    measured as it reads below them (`generated(..., as_written=True)`). The torch operator stays the
    problem's `Model`; a Triton side is a `ModelNew(nn.Module)` solution with kernels of its own, so an
    LLM's candidate against the torch operator is a solution against its problem, and against the human
    kernel or another candidate of the kernel-size, two solutions."""
    reference_file, candidate_file = generated(record, mirror, as_written=True)
    kernel = kernel_code(_read(mirror.git_dir, mirror.commit, kernel_path(record["track"], record["op"])).decode())
    row = next(row for row in rows_of(mirror, record["path"]) if row.row == record["row"])
    human = record["track"] == "G"
    reference = KernelSide(kernel + "\n" + reference_file, "triton" if human else "pytorch", "ModelNew" if human else "Model")
    return reference, KernelSide(row.code + "\n" + candidate_file, "triton", "ModelNew")
