"""The corpus's kernels, regenerated deterministically from the operation modules.

The runner measures what this makes and saves, beside each measurement, the code and launches it
ran; `dataset.assemble` takes a record's description from here (by variant id and sizes) only
where a run did not save one, so a dataset record always says what was measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from workshop.corpus.ops import all_ops
from workshop.corpus.spec import Launch, Op, Sizes, Variant, size_label, variant_id

REFERENCE_FAMILY = "pytorch-reference"


@dataclass(frozen=True)
class Entry:
    """One variant of one operation, with its stable id."""

    op: Op
    variant: Variant
    id: str

    def problems(self) -> list[Sizes]:
        """The operation's sizes this variant can run."""
        return [sizes for sizes in self.op.sizes if self.variant.unsupported(sizes) is None]

    def launches(self, sizes: Sizes) -> list[Launch]:
        return self.variant.launches(sizes)

    def kernel_names(self) -> list[str]:
        names: list[str] = []
        for launch in self.launches(self.problems()[-1]):
            if launch.kernel not in names and not launch.kernel.startswith("__"):
                names.append(launch.kernel)
        return names


def record_key(kernel_id: str, sizes: Sizes) -> str:
    """The key of one measurement: a kernel at one problem size."""
    return f"{kernel_id}@{size_label(sizes)}"


def reference_id(op_name: str) -> str:
    """The id of an operation's PyTorch reference, measured like a kernel."""
    return f"{op_name}-pytorch-reference"


def entries(op_names: Iterable[str] | None = None) -> list[Entry]:
    """Every variant of the selected operations (all when None), in measuring order."""
    wanted = set(op_names) if op_names else None
    found: list[Entry] = []
    seen: set[str] = set()
    for op in all_ops():
        if wanted is not None and op.name not in wanted:
            continue
        for variant in op.variants():
            identifier = variant_id(op.name, variant)
            if identifier in seen:
                continue  # two axis combinations that generate the same kernel
            seen.add(identifier)
            found.append(Entry(op, variant, identifier))
    if wanted:
        unknown = wanted - {entry.op.name for entry in found}
        if unknown:
            raise ValueError(f"unknown operations: {', '.join(sorted(unknown))}")
    return found


def describe(entry: Entry, sizes: Sizes) -> dict[str, Any]:
    """The generator's half of a record: what the kernel is and how it is launched."""
    return {
        "op": entry.op.name,
        "bound": entry.op.bound,
        "family": entry.variant.family,
        "language": entry.variant.language,
        "params": dict(entry.variant.params),
        "code": entry.variant.code,
        "sizes": dict(sizes),
        "launches": with_array_bytes(entry, sizes, [launch.to_json() for launch in entry.launches(sizes)]),
    }


def with_array_bytes(entry: Entry, sizes: Sizes, launches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each launch with the bytes of the arrays it names and of the outputs among them, as an
    editor's launch pragma gives them (`LaunchSpec.as_launch`): the forecaster reads each side's
    own bytes from there, so a precision edit (one shape, two dtypes) shows as half the traffic
    on one side, and a scatter's outputs say how many updates each element takes."""
    outputs = entry.op.outputs(sizes)
    tensors = {**entry.op.inputs(sizes), **outputs, **entry.variant.scratch(sizes)}

    def total(launch: dict[str, Any], names: dict[str, Any]) -> int:
        return sum(names[arg].nbytes() for arg in launch["args"] if isinstance(arg, str) and arg in names)

    return [{**launch, "bytes": total(launch, tensors), "output_bytes": total(launch, outputs)} for launch in launches]


def describe_reference(op: Op, sizes: Sizes) -> dict[str, Any]:
    return {
        "op": op.name,
        "bound": op.bound,
        "family": REFERENCE_FAMILY,
        "language": "pytorch",
        "params": {},
        "code": op.reference_code,
        "sizes": dict(sizes),
        "launches": [],
    }
