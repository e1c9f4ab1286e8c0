"""Every operation of the corpus, in a fixed order (the order the runner measures them)."""

from __future__ import annotations

import importlib

from workshop.corpus.spec import Op

# One module per group of related operations; each defines OPS (a list) or OP.
MODULES = (
    "activation",
    "movement",
    "reduce",
    "gemm",
    "attention",
    "conv",
    "batched",
    "norm",
    "fused",
    "scan",
    "stencil",
    "sort",
    "pointwise",
    "layout",
    "segment",
    "matvec",
    "counting",
    "colreduce",
    "compaction",
    "decode",
    "atomics",
    "channels",
    "filtering",
    "splitk",
    "streaming",
    "lookup",
    "logspace",
    "selection",
    "pooling",
    "colwise",
    "reuse",
    "masked",
    "ranking",
    "gram",
    "binning",
    "scatters",
    "caching",
    "topsmall",
    "rowkeyed",
    "stridegather",
)


def all_ops() -> list[Op]:
    ops: list[Op] = []
    for name in MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        ops.extend(getattr(module, "OPS", None) or [module.OP])
    names = [op.name for op in ops]
    duplicated = {name for name in names if names.count(name) > 1}
    if duplicated:
        raise ValueError(f"operation names must be unique: {sorted(duplicated)}")
    return ops
