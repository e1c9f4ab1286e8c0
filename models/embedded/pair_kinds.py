"""Which kind of pair a request is, as the KernelBench lines (kernelbench_prior.py) read pairs:
a solution with kernels of its own against its PyTorch problem, two such solutions of one problem,
one solution against itself with a line or two edited (a block size, `num_warps`), or a
`ModelNew(Model)` that calls a library's kernel against its problem. Two such library calls of one
problem against each other (a chunked and a recurrent form) are two solutions of it too: read by
the weights alone, flash-linear-attention's 46 were forecast at 0.37 direction (ECE 0.47), the
18 at 0.8 or more all wrong; through the two solutions' line, with that library held out, 0.54
(ECE 0.23), and the 10 at 0.8 or more all right.
A `ModelNew(Model)` is a library call only when its class uses a name imported from another package
or module (every library measured does: `from flag_gems.ops.abs import abs`); one that calls kernels
defined in its own file is a solution. Read as a library call, which reads the weights alone, TritonBench's LLM-written
Triton in that form against the torch operator was forecast at 0.49 direction (ECE 0.35), most at 0.8
or more; read as a solution against its problem, 0.67 (ECE 0.05).
A library call against the problem under torch.compile is a kind of its own, read by the trees as a
library call: against eager the weights call a library's direction right in 0.71-0.98 of pairs per
library, against inductor's kernels in 0.47-0.72, so one line and temperature for both made those
against eager less sure than they were right and those against torch.compile surer.
A problem under torch.compile against itself eager is a kind of its own: the weights read its direction
at 0.57-0.90 per source, and a line of its own moves their forecast.
The features read a solution the way its line was fitted, so they need the kind too; this module
imports neither.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from kernelcast.kernels_runtime.source.timed_path import names_imported_in_class
from kernelcast.wire import ForecastRequest, KernelSide

_MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.M)
_MODEL = re.compile(r"^class\s+Model\b", re.M)
_WRAPPER = re.compile(r"^class\s+ModelNew\s*\(\s*Model\s*\)", re.M)
_OWN_KERNELS = ("cuda", "triton")
# A call of torch.compile on a line that is not a comment.
_TORCH_COMPILE = re.compile(r"^[^#\n]*\btorch\.compile\s*\(", re.M)
AGAINST_PROBLEM = "solution-vs-problem"
BETWEEN_SOLUTIONS = "solution-vs-solution"
LIBRARY_CALL = "library-vs-problem"
LIBRARY_AGAINST_COMPILED = "library-vs-compiled-problem"
SOLUTION_EDIT = "solution-edit"
COMPILED_AGAINST_EAGER = "compiled-vs-eager"
# Pairs whose solutions are read without the launches their ModelNew makes, as those lines were fitted
# (an edit is read with them: its launch is what changed).
SOLUTION_KINDS = (AGAINST_PROBLEM, BETWEEN_SOLUTIONS)
# The order of the kind flags the trees read. A problem compiled against itself eager is read by
# the weights alone (kernelbench_prior.WEIGHTS_ONLY_KINDS), so the trees carry no flag for it.
KINDS = (AGAINST_PROBLEM, BETWEEN_SOLUTIONS, LIBRARY_CALL, SOLUTION_EDIT)
# Kinds the trees read under another's flag: a library call is one to them whatever its reference.
FLAGGED_AS = {LIBRARY_AGAINST_COMPILED: LIBRARY_CALL}
EDITED_LINES = 2


def _solution(side: KernelSide) -> bool:
    """A rewrite with kernels of its own, in a `ModelNew` of its own or one that subclasses the problem's."""
    return side.language in _OWN_KERNELS and bool(_MODEL_NEW.search(side.code)) and not _library_call(side)


def _library_call(side: KernelSide) -> bool:
    """A `ModelNew(Model)` that wraps the problem's own model around a kernel it imports (a library's):
    the lines were not fitted on those as solutions."""
    if side.language not in _OWN_KERNELS or not _WRAPPER.search(side.code):
        return False
    imported = names_imported_in_class(side.code, "ModelNew")
    return imported is None or bool(imported)  # text that does not parse is read as every wrapper was before


def _an_edit(reference: str, candidate: str) -> bool:
    """One solution with a line or two changed (a block size, `num_warps`): not two solutions
    written apart. Its line reads the edit from the launches, which the solutions' lines do not read."""
    before, after = reference.splitlines(), candidate.splitlines()
    return len(before) == len(after) and sum(old != new for old, new in zip(before, after)) <= EDITED_LINES


def _compiled_against_eager(reference: KernelSide, candidate: KernelSide) -> bool:
    """A PyTorch problem run through torch.compile as the candidate, against itself eager. Its line has
    an intercept, so it reads one order; the other is read swapped and mirrored (the backend's `_oriented`)."""
    if reference.language != "pytorch" or candidate.language != "pytorch":
        return False
    if not (_MODEL.search(reference.code) and _MODEL.search(candidate.code)):
        return False
    return bool(_TORCH_COMPILE.search(candidate.code)) and not _TORCH_COMPILE.search(reference.code)


def pair_kind(request: ForecastRequest) -> str | None:
    """Which line a pair is read through, or None: a solution with its own kernels against the
    PyTorch problem it solves, two such solutions against each other, or one edited; a
    `ModelNew(Model)` that calls a library's kernel on the problem's inputs, against the problem
    eager or under torch.compile, or two of them against each other (as two solutions); a problem
    under torch.compile against itself eager."""
    reference, candidate = request.reference, request.candidate
    if _compiled_against_eager(reference, candidate):
        return COMPILED_AGAINST_EAGER
    against_problem = reference.language == "pytorch" and bool(_MODEL.search(reference.code))
    if _solution(candidate):
        if against_problem:
            return AGAINST_PROBLEM
        if not _solution(reference):
            return None
        return SOLUTION_EDIT if _an_edit(reference.code, candidate.code) else BETWEEN_SOLUTIONS
    if _library_call(candidate):
        if against_problem:
            return LIBRARY_AGAINST_COMPILED if _TORCH_COMPILE.search(reference.code) else LIBRARY_CALL
        if reference.language in _OWN_KERNELS and _WRAPPER.search(reference.code):
            return BETWEEN_SOLUTIONS
    return None


def kind_flags(kinds: Sequence[str | None]) -> np.ndarray:
    """(N, len(KINDS)) one-hot rows of each pair's kind as the trees read it (all zero for a pair no
    line reads, or one they carry no flag for)."""
    flagged = [FLAGGED_AS.get(kind, kind) if kind is not None else None for kind in kinds]
    return np.array([[float(kind == name) for name in KINDS] for kind in flagged]).reshape(len(kinds), len(KINDS))
