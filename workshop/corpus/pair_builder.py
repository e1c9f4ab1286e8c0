"""Labelled pairs from the measured corpus, of the three kinds an editor meets.

- edit: one family, one language, the same problem; the two kernels differ in exactly one
  variation axis (what one edit in the editor does). Precision edits pair the same
  kernel at the same shape in two dtypes.
- cross: the same operation and problem, different families or languages (a rewrite).
- reference: the operation's PyTorch reference against a hand-written kernel.

Only correct kernels pair. Each unordered pair appears once, in a direction chosen by a
seeded hash, so both "faster" and "slower" occur and nothing leaks between directions.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from kernelcast.kernels_runtime.hardware import lookup
from kernelcast.wire import ForecastRequest, KernelSide, LabelledPair
from workshop.corpus.dataset import is_reference

CROSS_PAIRS_PER_KERNEL = 3  # cross pairs grow quadratically; sample this many per kernel and problem
SOURCE = "kernelcast-h100-corpus"
KINDS = ("edit", "cross", "reference")  # the kinds of wire.PAIR_KINDS this corpus gives


def build_pairs(records: Iterable[dict[str, Any]], kinds: Iterable[str] = KINDS, seed: int = 0) -> Iterator[LabelledPair]:
    """Pairs of the wanted kinds from dataset records (deterministic for a seed)."""
    wanted = set(kinds)
    correct = [record for record in records if record["correct"]]
    by_problem: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in correct:
        by_problem[(record["op"], _sizes_key(record["sizes"]))].append(record)
    hardware = _hardware()
    for _problem, group in sorted(by_problem.items()):
        kernels = [record for record in group if not is_reference(record)]
        references = [record for record in group if is_reference(record)]
        if "edit" in wanted:
            for first, second, axis in _edit_pairs(kernels):
                yield _pair("edit", first, second, hardware, seed, {"axis": axis})
        if "cross" in wanted:
            for first, second in _cross_pairs(kernels, seed):
                yield _pair("cross", first, second, hardware, seed, {})
        if "reference" in wanted:
            for reference in references:
                for kernel in kernels:
                    yield _labelled("reference", reference, kernel, hardware, {})
    if "edit" in wanted:
        for first, second in _precision_edits(correct):
            yield _pair("edit", first, second, hardware, seed, {"axis": "dtype"})


def _sizes_key(sizes: dict[str, Any]) -> str:
    return ",".join(f"{name}={sizes[name]}" for name in sorted(sizes))


def _edit_pairs(kernels: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any], str]]:
    by_family: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in kernels:
        by_family[(record["family"], record["language"])].append(record)
    for members in by_family.values():
        for i, first in enumerate(members):
            for second in members[i + 1 :]:
                axes = _differing(first["params"], second["params"])
                if len(axes) == 1:
                    yield first, second, axes[0]


def _differing(first: dict[str, Any], second: dict[str, Any]) -> list[str]:
    return [name for name in sorted(set(first) | set(second)) if first.get(name) != second.get(name)]


def _precision_edits(records: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """The same kernel skeleton at the same shape in two precisions."""
    by_shape: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if is_reference(record) or "dtype" not in record["sizes"]:
            continue
        shape = {name: value for name, value in record["sizes"].items() if name != "dtype"}
        by_shape[(record["op"], record["family"], record["language"], _sizes_key(shape))].append(record)
    for members in by_shape.values():
        for i, first in enumerate(members):
            for second in members[i + 1 :]:
                if first["sizes"]["dtype"] != second["sizes"]["dtype"] and _differing(first["params"], second["params"]) == ["dtype"]:
                    yield first, second


def _cross_pairs(kernels: list[dict[str, Any]], seed: int) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    if len(kernels) < 2:
        return
    rng = random.Random(f"{seed}:{kernels[0]['op']}:{_sizes_key(kernels[0]['sizes'])}")
    seen: set[tuple[str, str]] = set()
    for first in kernels:
        others = [k for k in kernels if (k["family"], k["language"]) != (first["family"], first["language"])]
        for second in rng.sample(others, min(CROSS_PAIRS_PER_KERNEL, len(others))):
            key = tuple(sorted((first["id"], second["id"])))
            if key not in seen:
                seen.add(key)
                yield first, second


def _pair(
    kind: str, first: dict[str, Any], second: dict[str, Any], hardware: dict[str, Any], seed: int, extra: dict[str, Any]
) -> LabelledPair:
    """Orders an unordered pair by a seeded hash of its ids, then labels it."""
    digest = hashlib.sha256(f"{seed}:{first['id']}:{second['id']}".encode()).digest()
    reference, candidate = (first, second) if digest[0] % 2 == 0 else (second, first)
    return _labelled(kind, reference, candidate, hardware, extra)


def _labelled(
    kind: str, reference: dict[str, Any], candidate: dict[str, Any], hardware: dict[str, Any], extra: dict[str, Any]
) -> LabelledPair:
    t_ref, t_cand = reference["runtime"]["median_ms"], candidate["runtime"]["median_ms"]
    speedup = t_ref / t_cand
    request = ForecastRequest(
        reference=_side(reference),
        candidate=_side(candidate),
        hardware=hardware,
        problem=dict(candidate["sizes"]) if candidate["sizes"] == reference["sizes"] else None,
    )
    if request.problem is None:  # a precision edit: one shape, two dtypes
        request.problem = {name: value for name, value in candidate["sizes"].items() if name != "dtype"}
    return LabelledPair(
        id=f"{kind}:{reference['id']}|{candidate['id']}",
        kind=kind,
        request=request,
        speedup=speedup,
        op=candidate["op"],
        group=reference["id"],
        ci95=_ratio_interval(speedup, reference["runtime"], candidate["runtime"]),
        source=SOURCE,
        extra={**extra, "reference_family": reference["family"], "candidate_family": candidate["family"]},
    )


def _ratio_interval(speedup: float, reference: dict[str, Any], candidate: dict[str, Any]) -> tuple[float, float] | None:
    """95% CI of t_ref/t_cand from the two kernels' CIs (independent, in log space)."""
    halves = []
    for runtime in (reference, candidate):
        interval = runtime.get("ci95_ms")
        if not interval or interval[0] <= 0:
            return None
        halves.append(math.log(interval[1] / interval[0]) / 2)
    half = math.hypot(*halves)
    return speedup * math.exp(-half), speedup * math.exp(half)


def _side(record: dict[str, Any]) -> KernelSide:
    if is_reference(record):
        return KernelSide(code=record["code"], language="pytorch", name="reference")
    kernels = [launch["kernel"] for launch in record["launches"] if not launch["kernel"].startswith("__")]
    every = record.get("facts") or {}
    main = every.get(kernels[0]) if kernels else None
    facts: dict[str, Any] = dict(main) if main and not main.get("error") else {}
    facts.update({"launches": record["launches"], "op_bound": record["bound"], "kernels": every})
    return KernelSide(code=record["code"], language=record["language"], name=kernels[0] if kernels else None, facts=facts)


_HARDWARE: dict[str, Any] | None = None


def _hardware() -> dict[str, Any]:
    """The H100 SXM spec the corpus was measured on, as the server sends it."""
    global _HARDWARE
    if _HARDWARE is None:
        spec = lookup("h100-sxm")
        _HARDWARE = {**spec.to_json(), "fingerprint": spec.fingerprint()}
    return _HARDWARE
