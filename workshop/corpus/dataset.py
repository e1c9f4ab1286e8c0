"""The measured corpus as one self-contained file: a record per kernel and problem size.

`assemble` joins what the GPU runs wrote (measurements, compiler facts and, where the run saved
them, the code and launches it measured) with the generator's description where a run did not
save one, so the dataset needs neither the generator nor the GPU to be read or trained on.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from workshop.corpus.generate import REFERENCE_FAMILY, describe, describe_reference, entries, reference_id, with_array_bytes
from workshop.corpus.runner import median_intervals

DATA_DIR = Path(__file__).parent / "data"
DEFAULT_DATASET = DATA_DIR / "h100.jsonl.gz"
# Records a run got wrong through a fault of the harness, not of the kernel: key → reason.
EXCLUDED = DATA_DIR / "excluded.json"
FAILURE_KINDS = ("compile", "runtime", "timeout", "wrong")
LANGUAGES = ("cuda", "triton", "pytorch")

# Every record has these; `runtime` is null for kernels that failed before timing.
REQUIRED_FIELDS = {
    "id": str,
    "kernel_id": str,
    "op": str,
    "bound": str,
    "family": str,
    "language": str,
    "params": dict,
    "code": str,
    "sizes": dict,
    "launches": list,
    "gpu": dict,
    "correct": bool,
}


def validate_record(record: Any) -> None:
    """ValueError naming the first thing wrong with a dataset record."""
    if not isinstance(record, dict):
        raise ValueError("a record is a JSON object")
    for name, kind in REQUIRED_FIELDS.items():
        if not isinstance(record.get(name), kind):
            raise ValueError(f"record {record.get('id')!r}: '{name}' must be a {kind.__name__}")
    if record["language"] not in LANGUAGES:
        raise ValueError(f"record {record['id']!r}: language {record['language']!r}")
    failure = record.get("failure")
    if record["correct"]:
        runtime = record.get("runtime") or {}
        for name in ("median_ms", "p20_ms", "p80_ms", "n"):
            if not isinstance(runtime.get(name), (int, float)) or runtime[name] <= 0:
                raise ValueError(f"record {record['id']!r}: a correct kernel needs runtime.{name} > 0")
        if failure:
            raise ValueError(f"record {record['id']!r}: correct but has a failure")
    elif not failure or failure.get("kind") not in FAILURE_KINDS:
        raise ValueError(f"record {record['id']!r}: a failed kernel needs failure.kind in {FAILURE_KINDS}")


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as stream:
        for line in stream:
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a killed run: that kernel was measured again


def assemble(run_dirs: Iterable[Path], out: Path) -> dict[str, int]:
    """Merge GPU runs (first measurement of a key wins) into one validated dataset file."""
    by_id = {entry.id: entry for entry in entries()}
    ops = {entry.op.name: entry.op for entry in by_id.values()}
    facts: dict[str, Any] = {}
    kernels: dict[str, dict[str, Any]] = {}
    measured: dict[str, dict[str, Any]] = {}
    environment: dict[str, Any] = {}
    for run_dir in run_dirs:
        environment = environment or json.loads((run_dir / "environment.json").read_text())
        if (run_dir / "facts.jsonl").exists():
            for line in read_jsonl(run_dir / "facts.jsonl"):
                if line.get("facts") is not None:
                    facts.setdefault(line["key"], line["facts"])
                if line.get("kernel"):
                    kernels.setdefault(line["key"], line["kernel"])
        for line in read_jsonl(run_dir / "records.jsonl"):
            measured.setdefault(line["key"], line)
    stale = 0
    excluded = json.loads(EXCLUDED.read_text())["records"] if EXCLUDED.exists() else {}
    out.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with gzip.open(out, "wt", encoding="utf-8", compresslevel=9) as stream:
        for key in sorted(measured):
            raw = measured[key]
            if key in excluded:
                continue
            kernel_id = raw["kernel_id"]
            if kernel_id in kernels and "launches" in raw:  # the run saved what it measured
                launches = raw["launches"]
                if kernel_id in by_id:
                    launches = with_array_bytes(by_id[kernel_id], raw["sizes"], launches)
                described = {**kernels[kernel_id], "sizes": raw["sizes"], "launches": launches}
            elif kernel_id == reference_id(raw["op"]) and raw["op"] in ops:
                described = describe_reference(ops[raw["op"]], raw["sizes"])
            elif kernel_id in by_id:
                described = describe(by_id[kernel_id], raw["sizes"])
            else:
                stale += 1  # the generator no longer makes this kernel
                continue
            runtime = raw.get("runtime")
            if runtime and runtime.get("round_medians_ms"):  # intervals by today's formula
                runtime = {**runtime, **median_intervals(runtime["round_medians_ms"])}
            record = {
                "id": key,
                "kernel_id": kernel_id,
                **described,
                "gpu": environment,
                "correct": raw["correct"],
                "failure": raw.get("failure"),
                "runtime": runtime,
                "clocks": raw.get("clocks"),
                "seeds": raw.get("seeds"),
                "facts": facts.get(key, facts.get(kernel_id)),
            }
            validate_record(record)
            stream.write(json.dumps(record, sort_keys=True) + "\n")
            written += 1
    return {"records": written, "stale": stale, "excluded": sum(1 for key in measured if key in excluded)}


def to_run(path: Path, run_dir: Path) -> int:
    """Write a dataset back as a run folder, so `corpus run` resumes it and `assemble` rebuilds it."""
    existing = run_dir / "records.jsonl"
    if existing.exists() and existing.stat().st_size:
        raise FileExistsError(f"{existing} already holds measurements; `corpus run --out {run_dir}` resumes it, or choose an empty folder")
    records = load(path)
    run_dir.mkdir(parents=True, exist_ok=True)
    described = ("op", "bound", "family", "language", "params", "code")
    seen: set[str] = set()
    with open(run_dir / "records.jsonl", "w") as measured, open(run_dir / "facts.jsonl", "w") as facts:
        for record in records:
            raw = {
                key: record.get(key) for key in ("kernel_id", "op", "sizes", "correct", "failure", "runtime", "clocks", "seeds", "launches")
            }
            measured.write(json.dumps({"key": record["id"], **raw}) + "\n")
            if record["kernel_id"] not in seen:
                seen.add(record["kernel_id"])
                kernel = {key: record[key] for key in described}
                facts.write(json.dumps({"key": record["kernel_id"], "facts": None, "kernel": kernel}) + "\n")
            if record.get("facts") is not None:
                facts.write(json.dumps({"key": record["id"], "facts": record["facts"]}) + "\n")
    (run_dir / "environment.json").write_text(json.dumps(records[0]["gpu"] if records else {}, indent=2))
    return len(records)


def load(path: Path = DEFAULT_DATASET) -> list[dict[str, Any]]:
    """Every record of a dataset file, validated."""
    if not path.exists():
        raise FileNotFoundError(
            f"no corpus at {path}: measure one with `python -m workshop corpus run` and `python -m workshop corpus assemble`"
        )
    records = []
    for number, record in enumerate(read_jsonl(path), start=1):
        try:
            validate_record(record)
        except ValueError as error:
            raise ValueError(f"{path}:{number}: {error}") from None
        records.append(record)
    return records


def is_reference(record: dict[str, Any]) -> bool:
    return record["family"] == REFERENCE_FAMILY
