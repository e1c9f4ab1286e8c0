"""Launch edits of real-world solutions: one block size or `num_warps` changed, measured as a new entry.

A user's most common edit is a launch parameter: `kernel<<<grid, 256>>>` becomes 512, a Triton
launch's `num_warps=4` becomes 8. The forecaster must read such edits in code others wrote, so
each correct KernelBench solution whose launch is set in one place gets variants with that one
value halved and doubled, measured against its problem like any solution; an `edit` pair is the
original against its variant. Only edits that change nothing else are made:
- CUDA: the block argument of a `<<<grid, block>>>` launch names a constant (`const int threads
  = 256;`, `#define BLOCK_SIZE 256`) whose value appears nowhere else in the file (a shared array
  or an unrolled loop sized by the same number would be left behind); block sizes stay multiples
  of 32 from 32 to 1024.
- Triton: a launch's literal `num_warps=N` (1 to 16), or a `BLOCK...` variable assigned once
  from a power of two and passed to a launch, whose value appears nowhere else (16 to 8192).
  Files with `@triton.autotune` are left alone: the autotuner picks its own launch.

The manifest (`data/edit_manifest.jsonl.gz`) holds no code: the base entry's fields, the edit
(offset, old and new text) and the edited file's SHA-256. `pack` reads the solution from the
mirror, checks it, applies the edit and checks the result.

    python -m workshop realworld edit-manifest --mirrors /work/.mirror
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workshop.realworld.manifest import DATA, Mirror, write_rows

EDIT_MANIFEST = DATA / "edit_manifest.jsonl.gz"
# The keys an edit entry adds to its base entry's; records keep them.
EDIT_KEYS = ("base", "edit", "candidate_sha256")

_LAUNCH = re.compile(r"<<<\s*([^,<>]+?)\s*,\s*([A-Za-z_]\w*)\s*(?:,[^<>]*)?>>>")
_C_TYPE = r"(?:(?:static\s+)?(?:const|constexpr)\s+)?(?:int|unsigned(?:\s+int)?|size_t|int64_t|auto)"
_C_CONSTANT = r"(?:#define\s+{name}\s+\(?(\d+)\)?\s*$|\b" + _C_TYPE + r"\s+{name}\s*=\s*(\d+)\s*;)"
_WARPS = re.compile(r"\bnum_warps\s*=\s*(\d+)\b")
_BLOCK_VARIABLE = re.compile(r"^[ \t]*(BLOCK\w*)\s*=\s*(\d+)[ \t]*(?:#.*)?$", re.M)


@dataclass(frozen=True)
class Edit:
    """One literal replaced: where it starts in the file, its text, the new text, and what it sets."""

    offset: int
    old: str
    new: str
    what: str

    def apply(self, text: str) -> str:
        if text[self.offset : self.offset + len(self.old)] != self.old:
            raise ValueError(f"the edit of {self.what} does not fit the file: {self.old!r} is not at {self.offset}")
        return text[: self.offset] + self.new + text[self.offset + len(self.old) :]

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "old": self.old, "new": self.new, "what": self.what}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Edit:
        return cls(int(data["offset"]), str(data["old"]), str(data["new"]), str(data["what"]))


def _occurs_once(text: str, value: str) -> bool:
    return len(re.findall(rf"(?<![\w.]){re.escape(value)}(?![\w.])", text)) == 1


def _halved_and_doubled(value: int, low: int, high: int, step: int) -> list[int]:
    return [new for new in (value // 2, value * 2) if low <= new <= high and new % step == 0]


def cuda_edits(text: str) -> list[Edit]:
    """Block sizes set by one constant each, halved and doubled."""
    edits: list[Edit] = []
    seen: set[int] = set()
    for launch in _LAUNCH.finditer(text):
        name = launch.group(2)
        definitions = list(re.finditer(_C_CONSTANT.format(name=re.escape(name)), text, re.M))
        if len(definitions) != 1:
            continue
        definition = definitions[0]
        group = 1 if definition.group(1) is not None else 2
        value, offset = definition.group(group), definition.start(group)
        if offset in seen or not _occurs_once(text, value):
            continue
        seen.add(offset)
        edits += [Edit(offset, value, str(new), name) for new in _halved_and_doubled(int(value), 32, 1024, 32)]
    return edits


def triton_edits(text: str) -> list[Edit]:
    """Launch-site `num_warps` literals, and BLOCK variables assigned once and passed to a launch."""
    if "triton.autotune" in text:
        return []
    edits: list[Edit] = []
    for warps in _WARPS.finditer(text):
        value = int(warps.group(1))
        edits += [Edit(warps.start(1), warps.group(1), str(new), "num_warps") for new in _halved_and_doubled(value, 1, 16, 1)]
    for block in _BLOCK_VARIABLE.finditer(text):
        name, value = block.group(1), block.group(2)
        assigned = len(re.findall(rf"^[ \t]*{name}\s*=", text, re.M))
        passed = re.search(rf"\b\w+\s*=\s*{name}\b", text) or re.search(rf"\]\([^)]*\b{name}\b", text)
        number = int(value)
        if assigned != 1 or not passed or number & (number - 1) or not _occurs_once(text, value):
            continue
        edits += [Edit(block.start(2), value, str(new), name) for new in _halved_and_doubled(number, 16, 8192, 1)]
    return edits


def edits_of(text: str, language: str) -> list[Edit]:
    return cuda_edits(text) if language == "cuda" else triton_edits(text) if language == "triton" else []


def entries(bases: list[dict[str, Any]], mirrors: Path) -> Iterator[dict[str, Any]]:
    """For each base entry (a solution measured correct), its edited variants' entries."""
    opened: dict[tuple[str, str], Mirror] = {}
    for base in bases:
        mirror = opened.setdefault((base["repo"], base["commit"]), Mirror(mirrors, base["repo"], base["commit"]))
        text = mirror.read(base["path"]).decode("utf-8", "replace")
        for edit in edits_of(text, base["language"]):
            edited = edit.apply(text)
            yield {
                **{key: value for key, value in base.items() if key != "same_as"},
                "id": f"{base['id']}/edit:{edit.what}={edit.new}@{edit.offset}",
                "same_as": [],
                "base": base["id"],
                "edit": edit.to_json(),
                "candidate_sha256": hashlib.sha256(edited.encode()).hexdigest(),
            }


def build(bases: list[dict[str, Any]], mirrors: Path, out: Path = EDIT_MANIFEST) -> dict[str, int]:
    """Write the edit manifest; entries per source."""
    return write_rows(out, entries(bases, mirrors))


def is_edit(entry: dict[str, Any]) -> bool:
    return "base" in entry and "edit" in entry


def edited_text(entry: dict[str, Any], mirror: Mirror) -> str:
    """The entry's file: the base solution from the mirror, checked, with the edit applied and checked."""
    data = mirror.read(entry["path"])
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        where = f"{entry['repo']}@{entry['commit'][:12]}:{entry['path']}"
        raise ValueError(f"{where} is not the file the edit manifest names (SHA-256 differs)")
    edited = Edit.from_json(entry["edit"]).apply(data.decode("utf-8", "replace"))
    if hashlib.sha256(edited.encode()).hexdigest() != entry["candidate_sha256"]:
        raise ValueError(f"{entry['id']}: the edited file differs from the edit manifest's")
    return edited
