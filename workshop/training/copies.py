"""Copies of a measured pair as the editor sends it, which the embedded forecaster trains on.

The corpus has compiler facts, launch lists and the generator's spellings; an editor often has
less (no compiler, no launch pragma) and users spell code otherwise. Training on these copies
keeps forecasts sane there; the novelty table (workshop/training/novelty.py) counts them as
seen for the same reason. Torch-free, so scripts that do not train can build the same copies.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from typing import Any

from kernelcast.wire import KernelSide, LabelledPair

# Copies: compiler facts without the corpus's launch list (a compiler, but no launch pragma
# for the kernel), compiler facts and a launch but no SASS mix (a pragma, and nvcc without
# nvdisasm/cuobjdump: pip's nvcc), and no facts at all (no compiler installed).
VARIANTS = ("facts without launches", "facts without SASS", "without facts")
# A copy of each CUDA pair in the spellings users write and the generator never does: no
# `__restrict__`, no `(long long)` index casts (so `x[row * n + col]` reads as users write it),
# so that user code is not a region the model never saw. It moves held-out numbers by less
# than a seed does; it is there for code written unlike the corpus (workshop/training/README.md).
RESPELLED = "respelled"
COPIES = (*VARIANTS, RESPELLED)
_GENERATOR_SPELLINGS = re.compile(r"[ \t]*\b__restrict__\b|\(\s*(?:long long|int64_t|size_t)\s*\)\s*")


def as_editor_sends(pair: LabelledPair, variant: str) -> LabelledPair:
    """The pair as the editor sends it: facts without the launch list, without the SASS mix, or no facts at all.

    Training on these copies keeps forecasts sane where the LSP knows less than the
    corpus (no launch list, no nvcc, a PyTorch side) instead of leaving that input region
    to chance.
    """
    request = pair.request

    # Every other copy also loses the problem sizes (without facts) or the SASS mix (facts
    # without launches: no nvdisasm/cuobjdump on the user's machine).
    halve = int(hashlib.sha256(pair.id.encode()).hexdigest(), 16) % 2 == 0
    dropped = {
        "facts without launches": ("launches", "kernels", "sass") if halve else ("launches", "kernels"),
        "facts without SASS": ("sass",),
    }.get(variant, ())

    def kept(facts: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in facts.items() if key not in dropped}

    def side(kernel: KernelSide) -> KernelSide:
        if variant == "without facts" or not kernel.facts:
            return replace(kernel, facts=None)
        facts = kept(kernel.facts)
        if isinstance(facts.get("kernels"), dict):  # each kernel's own facts (features read the heaviest's) lose the same
            facts["kernels"] = {name: kept(own) if isinstance(own, dict) else own for name, own in facts["kernels"].items()}
        return replace(kernel, facts=facts)

    drop_sizes = variant == "without facts" and halve
    stripped = replace(
        request, reference=side(request.reference), candidate=side(request.candidate), problem=None if drop_sizes else request.problem
    )
    return replace(pair, id=f"{pair.id}/{variant}", request=stripped)


def respelled(pair: LabelledPair) -> LabelledPair:
    """The pair with both CUDA sides in user spellings (see RESPELLED); facts and launches kept."""
    request = pair.request

    def side(kernel: KernelSide) -> KernelSide:
        return replace(kernel, code=_GENERATOR_SPELLINGS.sub("", kernel.code)) if kernel.language == "cuda" else kernel

    return replace(
        pair, id=f"{pair.id}/{RESPELLED}", request=replace(request, reference=side(request.reference), candidate=side(request.candidate))
    )
