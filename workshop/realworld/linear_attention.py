"""fla (flash-linear-attention): a family's chunked and recurrent Triton kernels against its naive PyTorch.

An entry is one family of fla (gla, retention, delta_rule, ...), one shape, bf16 inputs, and one of
its kernels (`chunk` or `fused_recurrent`), forward only. Two files are generated from our own
templates: a reference whose `Model.forward` calls the family's naive function from fla's own
`naive.py` (imported from `BATCH/lib`, run in float32 on the upcast inputs, as fla's tests run it,
the output cast back to bf16), and a candidate, the reference's text and a `ModelNew(Model)` that
calls the kernel and returns its output `o` (not the state). Both kernels of a family-shape share
the one reference, so they are one group: each gives a pair against the naive reference, and the
two give a pair against each other.

The manifest (`data/fla_manifest.jsonl.gz`) holds no code: per entry the kernel's file and the naive
file (repository, pinned commit, path, SHA-256), family, method, shape, dtype and the digests of the
two generated files. `pack` copies the parts of the package the imports need into `BATCH/lib/fla`.

    python -m workshop realworld fla-manifest --mirrors /work/.mirror
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workshop.realworld.library import MAX_ELEMENTS, Library, entry_fields, sha256_of
from workshop.realworld.manifest import DATA, Mirror, write_rows

FLA_MANIFEST = DATA / "fla_manifest.jsonl.gz"
# fla/__init__.py imports fla.layers and fla.models only if they are there (they need transformers);
# fla.ops imports every family, fla.utils and fla.modules: those are carried, and nothing else.
FLA = Library(
    "fla",
    "fla-org/flash-linear-attention",
    "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89",
    "MIT",
    "fla",
    ("einops", "packaging"),
    carried=("__init__.py", "ops", "utils", "modules"),
)
# The keys an fla entry adds to a library entry's (library.LIBRARY_KEYS); records keep them.
FLA_KEYS = ("method", "naive_path", "naive_sha256")
DTYPE = "bfloat16"
METHODS = ("chunk", "fused_recurrent")
# The runner checks every element: |o - o_ref| <= tol * (1 + |o_ref|). fla's tests accept a bf16/fp16
# kernel whose RMS error is up to 0.4-0.6% of the reference's RMS (assert_close ratios 0.004-0.006 for
# these families). With inputs chosen so that o is of order one, the largest of 10^7-10^8 such errors is
# about six times the RMS error, some 0.02-0.03; 5e-2 leaves that margin, while a kernel that computes
# something else (a gate applied one step late, a missing scale) errs by the order of o itself and fails.
CHECK_TOLERANCE = "5e-2"

BF16 = "dtype=torch.bfloat16"
QKV = (f"q = torch.randn(B, T, H, D, {BF16})", f"k = torch.randn(B, T, H, D, {BF16})", f"v = torch.randn(B, T, H, D, {BF16})")
# Linear attention and retention do not forget (or, in retention's later heads, hardly): o grows as
# sqrt(T) with unit values. Values scaled by T**-0.5 keep o of order one, where the elementwise check
# above means what it says; the time a kernel takes does not depend on the values.
QKV_SCALED = (*QKV[:2], f"v = torch.randn(B, T, H, D, {BF16}) * T**-0.5")
# fla's delta-rule tests normalise q and k outside the kernel (use_qk_l2norm_in_kernel=False) and draw
# beta in (0, 1) through a sigmoid.
QKV_NORMALISED = (
    f"q = F.normalize(torch.randn(B, T, H, D, {BF16}), p=2, dim=-1)",
    f"k = F.normalize(torch.randn(B, T, H, D, {BF16}), p=2, dim=-1)",
    QKV[2],
    f"beta = torch.randn(B, T, H, {BF16}).sigmoid()",
)
HEADS_FIRST = ".transpose(1, 2)"


def _inputs_elements(shape: dict[str, int]) -> int:
    return shape["B"] * shape["T"] * shape["H"] * shape["D"]


@dataclass(frozen=True)
class Family:
    """One family of fla: its inputs, its naive reference and its two kernels, as template text.

    `inputs` are get_inputs()' lines over the module constants B, T, H, D, `args` the names it
    returns (Model.forward's arguments), `reference` the expression over the float32 `args` that
    computes o with the naive function, `kernels` each method's function and its keyword arguments
    (every keyword a named parameter of the function at the pinned commit: `entries` checks it)."""

    name: str
    args: tuple[str, ...]
    inputs: tuple[str, ...]
    naive_module: str
    naive_function: str
    reference: str
    kernels: dict[str, tuple[str, str]]
    largest: Callable[[dict[str, int]], int] = _inputs_elements  # elements of the largest tensor an entry makes


def _heads_first(call: str, *args: str) -> str:
    """The naive function called on [B, H, T, ...] views of `args`, its o turned back to [B, T, H, ...]."""
    return f"{call}({', '.join(arg + HEADS_FIRST for arg in args)})[0]{HEADS_FIRST}"


FAMILIES: tuple[Family, ...] = (
    Family(
        "gla",
        ("q", "k", "v", "g"),
        # The benchmark registry's gate for chunk_gla: logsigmoid of randn, clamped at -5.
        (*QKV, f"g = F.logsigmoid(torch.randn(B, T, H, D, {BF16})).clamp_min(-5)"),
        "naive",
        "naive_recurrent_gla",
        "naive_recurrent_gla(q, k, v, gk=g)[0]",
        {"chunk": ("chunk_gla", "q=q, k=k, v=v, g=g"), "fused_recurrent": ("fused_recurrent_gla", "q=q, k=k, v=v, gk=g")},
    ),
    Family(
        "simple_gla",
        ("q", "k", "v", "g"),
        (*QKV, f"g = F.logsigmoid(torch.randn(B, T, H, {BF16}))"),
        "naive",
        "naive_recurrent_simple_gla",
        "naive_recurrent_simple_gla(q, k, v, g)[0]",
        {
            "chunk": ("chunk_simple_gla", "q=q, k=k, v=v, g=g"),
            "fused_recurrent": ("fused_recurrent_simple_gla", "q=q, k=k, v=v, g=g"),
        },
    ),
    Family(
        "retention",
        ("q", "k", "v"),
        QKV_SCALED,
        "naive",
        "naive_retention",
        # naive_retention takes [B, H, T, D] and returns o alone; it builds a [B, H, T, T] decay-weighted score.
        f"naive_retention(q{HEADS_FIRST}, k{HEADS_FIRST}, v{HEADS_FIRST}){HEADS_FIRST}",
        {"chunk": ("chunk_retention", "q=q, k=k, v=v"), "fused_recurrent": ("fused_recurrent_retention", "q=q, k=k, v=v")},
        lambda shape: shape["B"] * shape["H"] * shape["T"] * shape["T"],
    ),
    Family(
        "linear_attn",
        ("q", "k", "v"),
        QKV_SCALED,
        "naive",
        "naive_recurrent_linear_attn",
        "naive_recurrent_linear_attn(q, k, v)[0]",
        # chunk_linear_attn normalises by default, the naive function and fused_recurrent do not.
        {
            "chunk": ("chunk_linear_attn", "q=q, k=k, v=v, normalize=False"),
            "fused_recurrent": ("fused_recurrent_linear_attn", "q=q, k=k, v=v, normalize=False"),
        },
    ),
    Family(
        "delta_rule",
        ("q", "k", "v", "beta"),
        QKV_NORMALISED,
        "naive",
        "delta_rule_recurrence",
        _heads_first("delta_rule_recurrence", "q", "k", "v", "beta"),
        {
            "chunk": ("chunk_delta_rule", "q=q, k=k, v=v, beta=beta"),
            "fused_recurrent": ("fused_recurrent_delta_rule", "q=q, k=k, v=v, beta=beta"),
        },
    ),
    Family(
        "gated_delta_rule",
        ("q", "k", "v", "beta", "g"),
        (*QKV_NORMALISED, f"g = F.logsigmoid(torch.randn(B, T, H, {BF16}))"),
        "naive",
        "naive_recurrent_gated_delta_rule",
        "naive_recurrent_gated_delta_rule(q, k, v, beta=beta, g=g)[0]",
        {
            "chunk": ("chunk_gated_delta_rule", "q=q, k=k, v=v, g=g, beta=beta"),
            "fused_recurrent": ("fused_recurrent_gated_delta_rule", "q=q, k=k, v=v, g=g, beta=beta"),
        },
    ),
    Family(
        "hgrn",
        ("x", "g"),
        # As fla's hgrn tests draw them: one gate logit gives the decay's log and the input's (1 - sigmoid) scale.
        (
            f"gate = torch.randn(B, T, H * D, {BF16})",
            f"x = (1 - gate.sigmoid()) * torch.randn(B, T, H * D, {BF16})",
            "g = F.logsigmoid(gate)",
        ),
        "naive",
        "naive_recurrent_hgrn",
        "naive_recurrent_hgrn(x, g)[0]",
        {"chunk": ("chunk_hgrn", "x=x, g=g"), "fused_recurrent": ("fused_recurrent_hgrn", "x=x, g=g")},
    ),
    Family(
        "rwkv6",
        ("r", "k", "v", "w", "u"),
        (
            f"r = torch.randn(B, T, H, D, {BF16})",
            *QKV[1:],
            f"w = F.logsigmoid(torch.randn(B, T, H, D, {BF16}))",
            f"u = torch.randn(H, D, {BF16})",
        ),
        "recurrent_naive",
        "naive_recurrent_rwkv6",
        # naive_recurrent_rwkv6 takes [B, H, T, D]; the bonus u is [H, D] in both layouts.
        f"naive_recurrent_rwkv6(r{HEADS_FIRST}, k{HEADS_FIRST}, v{HEADS_FIRST}, w{HEADS_FIRST}, u)[0]{HEADS_FIRST}",
        {"chunk": ("chunk_rwkv6", "r=r, k=k, v=v, w=w, u=u"), "fused_recurrent": ("fused_recurrent_rwkv6", "r=r, k=k, v=v, w=w, u=u")},
    ),
)

# Three of the six shapes of fla's benchmark registry (SHAPE_CONFIGS in benchmarks/ops/registry.py at the
# pinned commit): B8_T1024_H8_D64, B4_T2048_H16_D128, B4_T4096_H64_D128. The other three (T 8192 and
# 16384 with 96 or 16 heads, or D 256) would run the naive reference's per-step Python loop for
# seconds a call. A shape whose largest tensor exceeds MAX_ELEMENTS is left out of a family.
SHAPES: tuple[dict[str, int], ...] = (
    {"B": 8, "T": 1024, "H": 8, "D": 64},
    {"B": 4, "T": 2048, "H": 16, "D": 128},
    {"B": 4, "T": 4096, "H": 64, "D": 128},
)


def family_shapes(family: Family) -> list[dict[str, int]]:
    return [shape for shape in SHAPES if family.largest(shape) <= MAX_ELEMENTS]


def shape_tag(shape: dict[str, int]) -> str:
    return "_".join(f"{name}{value}" for name, value in shape.items())


def family_path(family: Family, module: str) -> str:
    return f"{FLA.package}/ops/{family.name}/{module}.py"


def reference_code(family: Family, shape: dict[str, int]) -> str:
    """The naive reference: a KernelBench problem file of one family and shape."""
    args = ", ".join(family.args)
    inputs = "\n    ".join(family.inputs)
    return f'''"""fla {family.name} at {shape_tag(shape)} in {DTYPE}: fla's naive PyTorch in float32 (generated by kernelcast)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from fla.ops.{family.name}.{family.naive_module} import {family.naive_function}  # BATCH/lib on the GPU host

{", ".join(shape)} = {", ".join(str(value) for value in shape.values())}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}):
        {args} = (tensor.float() for tensor in ({args}))
        return ({family.reference}).to(torch.{DTYPE})


def get_inputs():
    {inputs}
    return [{args}]


def get_init_inputs():
    return []
'''


def candidate_code(family: Family, method: str, reference: str) -> str:
    """The reference's text and a ModelNew that calls one of the family's kernels and returns its o."""
    function, keywords = family.kernels[method]
    return f"""{reference}

from fla.ops.{family.name}.{method} import {function}  # noqa: E402  (BATCH/lib on the GPU host)


class ModelNew(Model):
    def forward(self, {", ".join(family.args)}):
        return {function}({keywords})[0]
"""


def check_call(source: bytes, call: str) -> None:
    """Raise unless `source` defines the function `call` calls, at its top level, with room for the call's
    positional arguments and a named parameter for each of its keywords: a wrong call fails here, not on the GPU."""
    called = next(node for node in ast.walk(ast.parse(call, mode="eval")) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name))
    function = called.func.id
    found = next((node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef) and node.name == function), None)
    if found is None:
        raise KeyError(f"no function {function}")
    positional = [*found.args.posonlyargs, *found.args.args]
    named = {argument.arg for argument in (*positional, *found.args.kwonlyargs)}
    unknown = sorted({keyword.arg or "**" for keyword in called.keywords} - named)
    if unknown or len(called.args) > len(positional):
        raise KeyError(f"{function} takes no {', '.join(unknown) or f'{len(called.args)} positional arguments'}")


def check_calls(library: Library, path: str, source: bytes, calls: Iterable[str]) -> None:
    """check_call for each of `calls` on the library's file at `path`; an error names the file at the pinned commit."""
    for call in calls:
        try:
            check_call(source, call)
        except KeyError as error:
            raise KeyError(f"{library.repo}@{library.commit[:12]}:{path}: {error}") from error


def entries(mirrors: Path) -> Iterator[dict[str, Any]]:
    """Per family, shape and method: one entry; a family-shape's entries share their reference, one group."""
    mirror = Mirror(mirrors, FLA.repo, FLA.commit)
    for family in FAMILIES:
        naive_path = family_path(family, family.naive_module)
        naive_source = mirror.read(naive_path)
        kernel_files = {method: (family_path(family, method), mirror.read(family_path(family, method))) for method in METHODS}
        calls = [(naive_path, naive_source, family.reference)]
        calls += [(path, source, "{}({})".format(*family.kernels[method])) for method, (path, source) in kernel_files.items()]
        for path, source, call in calls:
            check_calls(FLA, path, source, [call])
        for shape in family_shapes(family):
            reference = reference_code(family, shape)
            group = f"{FLA.name}/{family.name}/{shape_tag(shape)}/{DTYPE}"
            for method, (path, source) in kernel_files.items():
                yield {
                    "id": f"{FLA.name}:{family.name}/{shape_tag(shape)}/{DTYPE}/{method}",
                    **entry_fields(FLA, path, hashlib.sha256(source).hexdigest(), group, family.name, reference),
                    "language": "triton",
                    "op": family.name,
                    "method": method,
                    "shape": list(shape.values()),
                    "dtype": DTYPE,
                    "naive_path": naive_path,
                    "naive_sha256": hashlib.sha256(naive_source).hexdigest(),
                    "check_tolerance": CHECK_TOLERANCE,
                    "candidate_sha256": sha256_of(candidate_code(family, method, reference)),
                }


def build(mirrors: Path, out: Path = FLA_MANIFEST) -> dict[str, int]:
    """Write the fla manifest; the count of entries per family."""
    return write_rows(out, entries(mirrors), counted_by="op")


def is_fla(entry: dict[str, Any]) -> bool:
    return entry["source"] == FLA.name


def generated(entry: dict[str, Any]) -> tuple[str, str]:
    """An entry's (reference, candidate) text, generated again (the templates read nothing from the mirror)."""
    family = next(family for family in FAMILIES if family.name == entry["op"])
    shape = next(shape for shape in family_shapes(family) if list(shape.values()) == entry["shape"])
    reference = reference_code(family, shape)
    return reference, candidate_code(family, entry["method"], reference)
