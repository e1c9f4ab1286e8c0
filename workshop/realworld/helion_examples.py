"""Helion's examples: each example's helion kernel against its own eager PyTorch baseline, per shape.

An entry is one kernel of one of pytorch/helion's `examples/<name>.py` at one shape the example's
own `main()` runs, in the dtype it uses there, forward only. Two files are generated from our own
templates: a reference whose `Model.forward` is the eager baseline (the example's own baseline
function, imported from the example, where it has one at the top level; else our one-line torch
expression of what the example compares with), and a candidate, the reference's text and a
`ModelNew(Model)` that calls the helion kernel. An example-shape's kernels (softmax has two, long_sum
three) share that reference, one group, with a second entry, `language: inductor`, the reference
under torch.compile, as `library.py` does.

Helion compiles a kernel at its first call and, by default, autotunes it for minutes first; the
generated files turn autotuning off before helion is imported (`NO_AUTOTUNE`), so a kernel runs
with helion's default config, or with the one config its decorator pins.

The manifest (`data/helion_manifest.jsonl.gz`) holds no code: per entry the example file (repository,
pinned commit, path, SHA-256), example, kernel, shape, dtype and the digests of the two generated
files. `pack` copies the `helion` package into `BATCH/lib/helion` and the example files into
`BATCH/lib/helion_examples/`, which the generated files import from.

    python -m workshop realworld helion-manifest --mirrors /work/.mirror
"""

from __future__ import annotations

import ast
import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workshop.realworld.library import CHECK_TOLERANCE, MAX_ELEMENTS, Library, entry_fields, sha256_of
from workshop.realworld.linear_attention import check_calls, shape_tag
from workshop.realworld.manifest import DATA, INDUCTOR, Mirror, write_rows

HELION_MANIFEST = DATA / "helion_manifest.jsonl.gz"
# helion's settings read HELION_AUTOTUNE_EFFORT when a kernel is decorated, that is when its example is
# imported (helion/runtime/settings.py, `autotune_effort`, one of none, quick, full; full by default).
# With `none`, a kernel that pins no config runs config_spec.default_config() and one that pins a config
# runs that one (BoundKernel._user_provided_config in helion/runtime/kernel.py): no search, no minutes.
NO_AUTOTUNE = """import os  # noqa: E402

# Helion's default config, or the one its decorator pins: no autotuning (helion's autotune_effort).
os.environ["HELION_AUTOTUNE_EFFORT"] = "none"
"""
# helion/__init__.py imports all of the package eagerly, and every example imports helion._testing:
# beyond torch, triton and numpy that needs rich (with markdown-it-py, mdurl and pygments), packaging,
# typing_extensions and pytest (with pluggy and iniconfig). scikit-learn is optional to the autotuner
# (imported in a try) and not carried: no autotuning runs.
HELION = Library(
    "helion",
    "pytorch/helion",
    "ef091f416a50c443b38e4c8bff2980777f5ff225",
    "BSD-3",
    "helion",
    ("rich", "markdown-it-py", "mdurl", "pygments", "packaging", "typing_extensions", "pytest", "pluggy", "iniconfig"),
    NO_AUTOTUNE,
)
# The examples, each file as it is, carried as this package of BATCH/lib (an `examples` package could
# clash with another of that name on the GPU host's path).
EXAMPLES_PACKAGE = "helion_examples"
# The keys a helion entry adds to a library entry's (library.LIBRARY_KEYS); records keep them.
HELION_KEYS = ("kernel",)
# The runner checks every element at one number: |out - ref| <= tol * (1 + |ref|). helion's run_example
# accepts rtol 1e-2 with atol 1e-1 unless an example asks for less, and rms_norm and layer_norm ask
# for atol = rtol = 1e-2: 1e-2 takes the example's relative bound as it is and a tighter absolute one,
# which its fp32 and fp16 outputs meet with room (they round once, after float32 arithmetic). bf16
# takes library.py's 2e-2 (a kernel and eager may round at different steps), and a gather, which the
# example checks for equality, is held to 1e-6.
EXAMPLE_TOLERANCE = "1e-2"


@dataclass(frozen=True)
class Example:
    """One example file of helion: its kernels, its eager baseline and its shapes, as template text.

    `inputs` is get_inputs()' list over the shape's dims (module constants) and `{dtype}`, `args` the
    forward's arguments, `eager` Model.forward's expression, `call` ModelNew.forward's with `{kernel}`
    for each of `kernels`; `baseline` names the example's function `eager` calls, if any. `entries`
    checks every call against the pinned example's functions."""

    name: str
    kernels: tuple[str, ...]
    args: str
    inputs: str
    eager: str
    call: str
    shapes: tuple[dict[str, int], ...]
    dtype: str
    baseline: str = ""
    tolerance: str = EXAMPLE_TOLERANCE


def _randn(*dims: str) -> str:
    return f"torch.randn({', '.join(dims)}, dtype={{dtype}})"


# Shapes and dtypes as each example's main() (or the check() it calls) runs them at the pinned commit;
# HALF_DTYPE is float16 on CUDA (helion/_testing.py).
EXAMPLES: tuple[Example, ...] = (
    Example(
        "add",
        ("add",),
        "x, y",
        f"{_randn('M', 'N')}, {_randn('M', 'N')}",
        "torch.add(x, y)",
        "{kernel}(x, y)",
        ({"M": 1024, "N": 1024},),
        "bfloat16",
    ),
    Example("exp", ("exp_fwd",), "x", _randn("N"), "torch.exp(x)", "{kernel}(x)", ({"N": 10240 * 10240},), "float32"),
    Example(
        "softmax",
        ("softmax", "softmax_two_pass"),
        "x",
        _randn("M", "N"),
        "F.softmax(x, dim=1)",
        "{kernel}(x)",
        ({"M": 4096, "N": 2560},),
        "float16",
    ),
    Example(
        "sum",
        ("sum_kernel",),
        "x",
        _randn("M", "N"),
        "x.sum(-1)",
        "{kernel}(x)",
        ({"M": 5120, "N": 2560}, {"M": 10240, "N": 10240}),
        "float32",
    ),
    Example(
        "long_sum",
        ("longsum", "longsum_w_red_loop", "longsum_manual"),
        "x",
        _randn("M", "N"),
        "baseline_sum(x)",
        "{kernel}(x)",
        ({"M": 4, "N": 130000},),
        "float32",
        baseline="baseline_sum",
    ),
    Example(
        "rms_norm",
        ("rms_norm_fwd",),
        "x, weight",
        f"{_randn('M', 'N')}, {_randn('N')}",
        "rms_norm_pytorch(x, weight, 1e-5)",
        "{kernel}(x, weight, 1e-5)[0]",
        ({"M": 2048, "N": 4096}, {"M": 2048, "N": 8192}),
        "float16",
        baseline="rms_norm_pytorch",
    ),
    # The example's inputs: x = -2.3 + 0.5 * randn, eps 1e-4, with a bias.
    Example(
        "layer_norm",
        ("layer_norm_fwd",),
        "x, weight, bias",
        f"-2.3 + 0.5 * {_randn('M', 'N')}, {_randn('N')}, {_randn('N')}",
        "F.layer_norm(x, [N], weight, bias, 1e-4)",
        "{kernel}(x, [N], weight, bias, 1e-4)[0]",
        ({"M": 4096, "N": 10240},),
        "float16",
    ),
    Example(
        "matmul",
        ("matmul",),
        "x, y",
        f"{_randn('M', 'K')}, {_randn('K', 'N')}",
        "torch.matmul(x, y)",
        "{kernel}(x, y)",
        ({"M": 1024, "K": 1024, "N": 1024},),
        "float16",
    ),
    Example(
        "bmm",
        ("bmm",),
        "a, b",
        f"{_randn('B', 'M', 'K')}, {_randn('B', 'K', 'N')}",
        "torch.bmm(a, b)",
        "{kernel}(a, b)",
        ({"B": 16, "M": 512, "K": 768, "N": 1024},),
        "float16",
    ),
    Example(
        "broadcast_matmul",
        ("broadcast_matmul",),
        "x, w",
        f"{_randn('B', 'M', 'K')}, {_randn('K', 'N')}",
        "torch.matmul(x, w)",
        "{kernel}(x, w)",
        ({"B": 16, "M": 512, "K": 768, "N": 1024},),
        "float16",
    ),
    Example(
        "embedding",
        ("embedding",),
        "x, weight",
        f"torch.randint(0, num_embeddings, (B, T), dtype=torch.int32), {_randn('num_embeddings', 'dim')}",
        "F.embedding(x, weight)",
        "{kernel}(x, weight)",
        ({"B": 256, "T": 32, "num_embeddings": 16, "dim": 64},),
        "float32",
        tolerance="1e-6",
    ),
    # main() also runs N 1536 and 2048, whose x exceeds MAX_ELEMENTS.
    Example(
        "welford",
        ("welford",),
        "weight, bias, x",
        "torch.rand(N, dtype={dtype}), torch.rand(N, dtype={dtype}), torch.rand(M, N, dtype={dtype})",
        "eager_layer_norm(weight, bias, x)",
        "{kernel}(weight, bias, x)",
        ({"M": 262144, "N": 1024}, {"M": 262144, "N": 1536}, {"M": 262144, "N": 2048}),
        "float32",
        baseline="eager_layer_norm",
    ),
    Example(
        "concatenate",
        ("concat2d_dim1_simple", "concat2d_dim1"),
        "x, y",
        f"{_randn('rows', 'left')}, {_randn('rows', 'right')}",
        "torch.cat([x, y], dim=1)",
        "{kernel}(x, y)",
        ({"rows": 1500, "left": 400, "right": 600},),
        "float32",
    ),
    # The example's baseline, a function inside its check: silu (gelu, tanh) of a, times b.
    Example(
        "swiglu",
        ("_swiglu_fwd",),
        "a, b",
        f"{_randn('B', 'T', 'H')}, {_randn('B', 'T', 'H')}",
        "F.silu(a).to(b.dtype) * b",
        "{kernel}(a, b)",
        ({"B": 4, "T": 8192, "H": 4096}, {"B": 8, "T": 8192, "H": 4096}),
        "float16",
    ),
    Example(
        "geglu",
        ("_geglu",),
        "a, b",
        f"{_randn('B', 'T', 'H')}, {_randn('B', 'T', 'H')}",
        "F.gelu(a, approximate='tanh').to(b.dtype) * b",
        "{kernel}(a, b)",
        ({"B": 8, "T": 2048, "H": 4096}, {"B": 8, "T": 4096, "H": 8192}),
        "float16",
    ),
    # B * T = 8 * 512 rows over V = 2^16 and 2^17 (the second exceeds MAX_ELEMENTS); torch's KLDivLoss, batchmean.
    Example(
        "kl_div",
        ("kl_div_forward",),
        "y_pred, y_true",
        f"{_randn('BT', 'V')}.log_softmax(dim=-1), {_randn('BT', 'V')}.softmax(dim=-1)",
        "F.kl_div(y_pred, y_true, reduction='batchmean')",
        "{kernel}(y_pred, y_true)",
        ({"BT": 4096, "V": 2**16}, {"BT": 4096, "V": 2**17}),
        "float32",
    ),
)


def largest_input(example: Example, shape: dict[str, int]) -> int:
    """Elements of the largest tensor get_inputs() makes: per call in `inputs`, the product of its
    dims (a tuple argument, else its arguments that name dims)."""
    largest = 0
    for node in ast.walk(ast.parse(example.inputs.format(dtype="torch.float32"), mode="eval")):
        if isinstance(node, ast.Call):
            sizes = next((argument.elts for argument in node.args if isinstance(argument, ast.Tuple)), node.args)
            dims = [shape[size.id] for size in sizes if isinstance(size, ast.Name) and size.id in shape]
            largest = max(largest, math.prod(dims) if dims else 0)
    return largest


def example_shapes(example: Example) -> list[dict[str, int]]:
    return [shape for shape in example.shapes if largest_input(example, shape) <= MAX_ELEMENTS]


def example_path(example: Example) -> str:
    return f"examples/{example.name}.py"


def check_tolerance(example: Example) -> str:
    return CHECK_TOLERANCE.get(example.dtype, example.tolerance)


def _import_line(example: Example, function: str) -> str:
    return f"from {EXAMPLES_PACKAGE}.{example.name} import {function}  # noqa: E402  (BATCH/lib on the GPU host)"


def reference_code(example: Example, shape: dict[str, int]) -> str:
    """The eager reference: a KernelBench problem file of one example and shape. Where it imports the
    example's baseline (which imports helion), autotuning is turned off first."""
    baseline = f"\n{HELION.preamble}\n{_import_line(example, example.baseline)}\n" if example.baseline else ""
    return f'''"""helion {example.name} at {shape_tag(shape)} in {example.dtype}: eager PyTorch (generated by kernelcast's workshop)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
{baseline}
{", ".join(shape)} = {", ".join(str(value) for value in shape.values())}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {example.args}):
        return {example.eager}


def get_inputs():
    return [{example.inputs.format(dtype=f"torch.{example.dtype}")}]


def get_init_inputs():
    return []
'''


def candidate_code(example: Example, kernel: str, reference: str) -> str:
    """The reference's text and a ModelNew that calls one of the example's helion kernels."""
    preamble = "" if example.baseline else f"\n{HELION.preamble}"
    return f"""{reference}{preamble}
{_import_line(example, kernel)}


class ModelNew(Model):
    def forward(self, {example.args}):
        return {example.call.format(kernel=kernel)}
"""


def helion_kernels(source: bytes) -> set[str]:
    """The top-level functions of an example that a `helion.kernel` decorator (called or not) makes kernels."""
    return {
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef)
        and any(
            ast.unparse(decorator.func if isinstance(decorator, ast.Call) else decorator) == "helion.kernel"
            for decorator in node.decorator_list
        )
    }


def entries(mirrors: Path) -> Iterator[dict[str, Any]]:
    """Per example, shape and kernel: one entry, and per example-shape a torch.compile entry; they share the reference, one group."""
    mirror = Mirror(mirrors, HELION.repo, HELION.commit)
    for example in EXAMPLES:
        path = example_path(example)
        source = mirror.read(path)
        not_kernels = [kernel for kernel in example.kernels if kernel not in helion_kernels(source)]
        if not_kernels:
            raise KeyError(f"{HELION.repo}@{HELION.commit[:12]}:{path}: {', '.join(not_kernels)} is not a helion kernel")
        calls = [example.call.format(kernel=kernel) for kernel in example.kernels] + ([example.eager] if example.baseline else [])
        check_calls(HELION, path, source, calls)
        for shape in example_shapes(example):
            reference = reference_code(example, shape)
            group = f"{example.name}/{shape_tag(shape)}/{example.dtype}"
            common = {
                **entry_fields(HELION, path, hashlib.sha256(source).hexdigest(), f"{HELION.name}/{group}", example.name, reference),
                "op": example.name,
                "shape": list(shape.values()),
                "dtype": example.dtype,
                "check_tolerance": check_tolerance(example),
            }
            for kernel in example.kernels:
                candidate = candidate_code(example, kernel, reference)
                yield {
                    "id": f"{HELION.name}:{group}/{kernel}",
                    **common,
                    "language": "triton",
                    "kernel": kernel,
                    "candidate_sha256": sha256_of(candidate),
                }
            yield {"id": f"{HELION.name}:{group}/compile", **common, "language": INDUCTOR, "candidate_sha256": sha256_of(reference)}


def build(mirrors: Path, out: Path = HELION_MANIFEST) -> dict[str, int]:
    """Write the helion manifest; the count of entries per example."""
    return write_rows(out, entries(mirrors), counted_by="op")


def is_helion(entry: dict[str, Any]) -> bool:
    return entry["source"] == HELION.name


def generated(entry: dict[str, Any]) -> tuple[str, str]:
    """An entry's (reference, candidate) text, generated again (the templates read nothing from the
    mirror); torch.compile's candidate is the reference, which the runner compiles."""
    example = next(example for example in EXAMPLES if example.name == entry["op"])
    shape = next(shape for shape in example_shapes(example) if list(shape.values()) == entry["shape"])
    reference = reference_code(example, shape)
    if entry["language"] == INDUCTOR:
        return reference, reference
    return reference, candidate_code(example, entry["kernel"], reference)


def carry_example(mirror: Mirror, entry: dict[str, Any], lib: Path) -> None:
    """Copy the entry's example file into lib/<EXAMPLES_PACKAGE>, refused unless it hashes as the manifest says."""
    data = mirror.read(entry["path"])
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise ValueError(f"{HELION.repo}@{HELION.commit[:12]}:{entry['path']} is not the file the helion manifest names (SHA-256 differs)")
    package = lib / EXAMPLES_PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").touch()
    (package / Path(entry["path"]).name).write_bytes(data)
