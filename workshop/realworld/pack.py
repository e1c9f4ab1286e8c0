"""Pack a batch of manifest entries for the GPU host: batch.jsonl and files/<sha256>.py.

    python -m workshop realworld pack BATCH_DIR --mirrors /work/.mirror [--limit N] [--source NAME ...]
        [--language cuda|triton|inductor ...] [--skip RESULTS.jsonl ...] [--seed 0]
        [--whole-problems N [--problem NAME ...]] [--beside-correct] [--remeasure N] [--edits] [--loadable]

The files are read from the mirrors at the manifest's commits and checked against its SHA-256,
so a batch holds exactly what the manifest names. Entries are shuffled (seeded) and dealt
round-robin over sources, so a batch cut short by its deadline still covers every source.
Entries already in the records (or in the `--skip` results) are left out. Library entries
(`library.py`, fla's in `linear_attention.py`, helion's in `helion_examples.py`) are packed from their generated
files, SHA-checked against their manifest, with the library's package copied from the mirror into `lib/` (a batch
line's `sha256` names the file measured as ModelNew, its `problem_sha256` the reference; helion's example files go
to `lib/helion_examples/`); TritonBench entries
(`tritonbench.py`) alike, with the kernel texts they import in `lib/tritonbench_v1_code/`, and
CUDA-L2 entries (`cuda_l2.py`), their kernel files read from the mirror into the generated
candidates, with CUTLASS's headers as `cutlass.tar.xz`. `--whole-problems N` packs every
solution of the N problem files that most solutions share instead (of those named
by `--problem`, a KernelBench problem name such as 25_Swish, if given), problem by problem:
a search over one problem's variants (`kernelcast rank --replay`) needs whole groups, not one
solution of each. `--loadable` leaves out TritonBench candidates whose text is sure to fail
before it is timed (`tritonbench.why_it_cannot_load`): the GPU's time goes to those that may run.
`--beside-correct` packs only problem files that the records already measured a solution of
correctly, those measured correct most often first, whole problem by problem: a new correct
solution there pairs with the earlier ones (variant pairs), and one there is likelier correct.
`--remeasure N` packs a seeded sample of N entries measured correct already,
dealt over sources, to measure again on another machine (`realworld repro`); `--edits` packs
launch edits only (`edits.py`). The batch folder is
carried to the GPU host; it is never committed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

from workshop.realworld import cuda_l2, edits, helion_examples, library, linear_attention, tritonbench
from workshop.realworld.dataset import RECORDS, listed, read
from workshop.realworld.manifest import Mirror


def load() -> list[dict[str, Any]]:
    """Every entry there is to measure (`dataset.MANIFESTS`)."""
    return listed()


def dealt(entries: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """Seeded shuffle within each source, then one entry of each source in turn."""
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        by_source[entry["source"]].append(entry)
    generator = random.Random(seed)
    for name in sorted(by_source):
        generator.shuffle(by_source[name])
    order = []
    queues = [by_source[name] for name in sorted(by_source)]
    while any(queues):
        for items in queues:
            if items:
                order.append(items.pop(0))
    return order


def widest_problems(entries: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """Every entry of the `count` problem files with the most entries, grouped by problem file."""
    by_problem: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        by_problem[entry["problem_sha256"]].append(entry)
    widest = sorted(by_problem, key=lambda digest: (-len(by_problem[digest]), digest))[:count]
    return [entry for digest in widest for entry in sorted(by_problem[digest], key=lambda entry: entry["id"])]


def beside_correct(entries: list[dict[str, Any]], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries of problem files with a correct record, the highest share of correct records first."""
    correct: dict[str, int] = defaultdict(int)
    tried: dict[str, int] = defaultdict(int)
    for record in records:
        tried[record["problem_sha256"]] += 1
        correct[record["problem_sha256"]] += bool(record["correct"])

    def share(problem: str) -> float:
        return correct[problem] / tried[problem]

    kept = [entry for entry in entries if correct[entry["problem_sha256"]]]
    return sorted(kept, key=lambda entry: (-share(entry["problem_sha256"]), entry["problem_sha256"], entry["id"]))


def pack(
    out: Path,
    mirrors: Path,
    limit: int | None = None,
    sources: list[str] | None = None,
    languages: list[str] | None = None,
    skip: set[str] | None = None,
    seed: int = 0,
    whole_problems: int | None = None,
    problems: list[str] | None = None,
    remeasure: int | None = None,
    only_edits: bool = False,
    loadable: bool = False,
    only_beside_correct: bool = False,
) -> int:
    """Write the batch; how many entries it holds."""
    entries = [
        entry
        for entry in load()
        if (not only_edits or edits.is_edit(entry))
        and (not sources or entry["source"] in sources)
        and (not languages or entry["language"] in languages)
        and (not problems or entry["problem_name"] in problems)
    ]
    opened: dict[tuple[str, str], Mirror] = {}
    records = read(RECORDS) if (remeasure or only_beside_correct) and RECORDS.exists() else []
    if remeasure:
        correct = {record["id"] for record in records if record["correct"]}
        chosen = dealt([entry for entry in entries if entry["id"] in correct], seed)[:remeasure]
    else:
        if only_beside_correct:
            entries = beside_correct(entries, records)
        elif whole_problems:
            entries = widest_problems(entries, whole_problems)
        else:
            entries = dealt(entries, seed)
        wanted = (entry for entry in entries if entry["id"] not in (skip or set()) and (not loadable or _may_load(entry, mirrors, opened)))
        chosen = list(itertools.islice(wanted, limit))
    files = out / "files"
    files.mkdir(parents=True, exist_ok=True)
    with (out / "batch.jsonl").open("w") as stream:
        for entry in chosen:
            if helion_examples.is_helion(entry):
                stream.write(json.dumps(_pack_helion_entry(entry, out, mirrors, opened)) + "\n")
                continue
            if library.is_library(entry) or linear_attention.is_fla(entry):
                stream.write(json.dumps(_pack_library_entry(entry, out, mirrors, opened)) + "\n")
                continue
            if cuda_l2.is_cuda_l2(entry):
                stream.write(json.dumps(_pack_cuda_l2_entry(entry, out, mirrors, opened)) + "\n")
                continue
            if tritonbench.is_tritonbench(entry):
                stream.write(json.dumps(_pack_tritonbench_entry(entry, out, mirrors, opened)) + "\n")
                continue
            if edits.is_edit(entry):
                mirror = opened.setdefault((entry["repo"], entry["commit"]), Mirror(mirrors, entry["repo"], entry["commit"]))
                (files / f"{entry['candidate_sha256']}.py").write_text(edits.edited_text(entry, mirror))
                entry = {**entry, "sha256": entry["candidate_sha256"]}  # the file measured is the edited one
            for path, digest, repo, commit in _files_of(entry):
                target = files / f"{digest}.py"
                if target.exists():
                    continue
                mirror = opened.setdefault((repo, commit), Mirror(mirrors, repo, commit))
                data = mirror.read(path)
                if hashlib.sha256(data).hexdigest() != digest:
                    raise ValueError(f"{repo}@{commit[:12]}:{path} is not the file the manifest names (SHA-256 differs)")
                target.write_bytes(data)
            stream.write(
                json.dumps({key: entry[key] for key in ("id", "source", "language", "sha256", "problem_sha256", "level", "problem")}) + "\n"
            )
    return len(chosen)


def _pack_library_entry(entry: dict[str, Any], out: Path, mirrors: Path, opened: dict[tuple[str, str], Mirror]) -> dict[str, Any]:
    """Write a library entry's generated files and, once per batch, the library's package; its batch line.

    The generated files must hash as the manifest says (the templates have not changed since) and
    the library files the entry names (an fla entry's kernel and naive files) must hash alike in the
    copied package."""
    fla = linear_attention.is_fla(entry)
    source = linear_attention.FLA if fla else library.by_name(entry["source"])
    mirror = opened.setdefault((source.repo, source.commit), Mirror(mirrors, source.repo, source.commit))
    package = out / "lib" / source.module
    if not package.is_dir():
        library.extract_package(mirror, source, out / "lib")
    named = [(entry["path"], entry["sha256"])] + ([(entry["naive_path"], entry["naive_sha256"])] if fla else [])
    for path, digest in named:
        carried = out / "lib" / Path(path).relative_to(source.prefix or ".")
        if not carried.is_file() or hashlib.sha256(carried.read_bytes()).hexdigest() != digest:
            raise ValueError(f"{source.repo}@{source.commit[:12]}:{path} is not the file the library manifest names (SHA-256 differs)")
    if fla:
        return _write_generated(entry, linear_attention.generated(entry), out, "fla-manifest")
    return _write_generated(entry, library.generated(entry, mirror), out, "library-manifest")


def _pack_helion_entry(entry: dict[str, Any], out: Path, mirrors: Path, opened: dict[tuple[str, str], Mirror]) -> dict[str, Any]:
    """Write a helion entry's generated files, its example file (SHA-checked) into lib/helion_examples and,
    once per batch, the helion package; its batch line."""
    source = helion_examples.HELION
    mirror = opened.setdefault((source.repo, source.commit), Mirror(mirrors, source.repo, source.commit))
    if not (out / "lib" / source.module).is_dir():
        library.extract_package(mirror, source, out / "lib")
    helion_examples.carry_example(mirror, entry, out / "lib")
    return _write_generated(entry, helion_examples.generated(entry), out, "helion-manifest")


def _pack_tritonbench_entry(entry: dict[str, Any], out: Path, mirrors: Path, opened: dict[tuple[str, str], Mirror]) -> dict[str, Any]:
    """Write a TritonBench entry's generated files and the module texts they import (the candidate, the
    kernel, performance_utils), each SHA-checked, into BATCH/lib/<CODE_PACKAGE>; its batch line."""
    mirror = opened.setdefault((entry["repo"], entry["commit"]), Mirror(mirrors, entry["repo"], entry["commit"]))
    package = out / "lib" / tritonbench.CODE_PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").touch()
    for digest, text in tritonbench.modules(entry, mirror).items():
        (package / f"k_{digest}.py").write_text(text)
    return _write_generated(entry, tritonbench.generated(entry, mirror), out, "tritonbench-manifest")


def _pack_cuda_l2_entry(entry: dict[str, Any], out: Path, mirrors: Path, opened: dict[tuple[str, str], Mirror]) -> dict[str, Any]:
    """Write a CUDA-L2 entry's generated files (the kernel file SHA-checked, the texts against the
    manifest's digests) and, once per batch, CUTLASS's headers; its batch line."""
    if not (out / cuda_l2.CUTLASS_ARCHIVE).is_file():
        cuda_l2.write_cutlass_archive(mirrors, out)
    mirror = opened.setdefault((cuda_l2.REPO, cuda_l2.COMMIT), Mirror(mirrors, cuda_l2.REPO, cuda_l2.COMMIT))
    return _write_generated(entry, cuda_l2.generated(entry, mirror), out, "cuda-l2-manifest")


def _write_generated(entry: dict[str, Any], texts: tuple[str, str], out: Path, command: str) -> dict[str, Any]:
    """Write an entry's generated (reference, candidate) files, which must hash as its manifest says
    (the templates have not changed since); its batch line, whose `sha256` names the candidate."""
    for text, digest in zip(texts, (entry["problem_sha256"], entry["candidate_sha256"]), strict=True):
        if library.sha256_of(text) != digest:
            raise ValueError(f"{entry['id']}: the generated file differs from the manifest's; rebuild it ({command})")
        (out / "files" / f"{digest}.py").write_text(text)
    keys = ("id", "source", "language", "problem_sha256", "level", "problem", "check_tolerance")
    line = {key: entry[key] for key in keys if key in entry}
    return {**line, "sha256": entry["candidate_sha256"]}


def _may_load(entry: dict[str, Any], mirrors: Path, opened: dict[tuple[str, str], Mirror]) -> bool:
    """False for a TritonBench candidate whose text is sure to fail before it is timed (`--loadable`)."""
    if not tritonbench.is_tritonbench(entry):
        return True
    mirror = opened.setdefault((entry["repo"], entry["commit"]), Mirror(mirrors, entry["repo"], entry["commit"]))
    return tritonbench.why_it_cannot_load(tritonbench.candidate_text(entry, mirror), tritonbench.entry_names(entry, mirror)) is None


def _files_of(entry: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(path, sha256, repo, commit) of the solution and of its problem file."""
    from workshop.realworld.sources import by_name

    source = by_name(entry["source"])
    return [
        (entry["path"], entry["sha256"], source.repo, source.commit),
        (entry["problem_path"], entry["problem_sha256"], source.problems_repo, source.problems_commit),
    ]


def skipped_ids(paths: list[Path], records: Path = RECORDS) -> set[str]:
    """What is measured already: the committed records' ids, and those of run results not yet assembled."""
    ids = {record["id"] for record in read(records)} if records.exists() else set()
    for path in paths:
        ids |= {json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()}
    return ids
