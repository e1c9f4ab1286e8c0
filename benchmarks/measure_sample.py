"""`kernelcast measure FILE --json` on a sample of KernelBench-format files, with a wall limit per file,
and a before/after table.

The sample folder holds NN/cand.py (a ModelNew solution) beside NN/reference.py (its problem
file); NN is the entry's position in the manifest (../shared/data/wild/measure-sample.json:
source, commit, paths, and what kernelcast answered at 4e64c47). The files are read from the
folder; none of them is part of this repository.

    python benchmarks/measure_sample.py SAMPLE_DIR MANIFEST OUT_DIR [--per-file-s S] [--budget-s S]

The files run one after another in this process, so `kernelcast measure` keeps one warm GPU
worker (a fresh process per file would import torch 36 times). A file past its wall limit has
its worker killed and is recorded as such; files not started within the budget are listed as
not run. Writes OUT_DIR/measure_sample.jsonl and OUT_DIR/measure_sample.md.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from kernelcast import cli
from kernelcast.kernels_runtime.measure import worker_for


def run_cli(arguments: list[str], limit_s: float) -> tuple[list[dict[str, Any]], str, bool]:
    """The JSON lines `kernelcast measure` printed, its progress text, and whether the wall limit ended it."""
    out, err = io.StringIO(), io.StringIO()

    def target() -> None:
        with redirect_stdout(out), redirect_stderr(err):
            cli.main(arguments)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit_s)
    stopped = thread.is_alive()
    if stopped:  # the measurement's own limits did not end it: kill the worker, which ends the request
        pid = worker_for(0).pid
        if pid is not None:
            os.killpg(pid, signal.SIGKILL)
        thread.join(60)
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    return lines, err.getvalue(), stopped


def before_text(entry: dict[str, Any]) -> str:
    before = entry["kernelcast_measure_at_4e64c47"]
    if "speedup" in before:
        low, high = before["ci95"]
        return f"{before['speedup']:.2f}× [{low:.2f}, {high:.2f}]"
    return f"{before['failure']}: {before['message']}".rstrip(": ")


def after_text(record: dict[str, Any]) -> str:
    """Speedup and CI, with what the check found worth saying; or the failure's kind and message."""
    if "speedup" not in record:
        return f"{record['failure']}: {record['message']}"
    low, high = record["ci95"]
    notes = []
    for entry in (record.get("correctness") or {}).values():
        if entry.get("note"):
            notes.append(f"max abs err {entry['max_abs_err']:.1e}, {entry['note'].split(': ', 1)[0]}")
        if entry.get("parameters"):
            notes.append("parameters differ in shape, outputs agree")
    return f"{record['speedup']:.2f}× [{low:.2f}, {high:.2f}]" + "".join(f"; {note}" for note in notes)


def measure_entry(folder: Path, limit_s: float) -> dict[str, Any]:
    started = time.monotonic()
    lines, progress, stopped = run_cli(["measure", str(folder / "cand.py"), "--json"], limit_s)
    record: dict[str, Any] = {"seconds": round(time.monotonic() - started, 1)}
    last_progress = [line.strip() for line in progress.splitlines() if line.strip()][-1:] or [""]
    if stopped:
        record |= {"failure": "timeout", "message": f"no answer within the {limit_s:g} s wall limit; last progress: {last_progress[0]}"}
    elif not lines:
        record |= {"failure": "no-output", "message": _one_line(progress[-400:])}
    elif "measurement" in lines[0]:
        measurement = lines[0]["measurement"]
        check = lines[0]["message"].split("; ", 1)[1] if "; " in lines[0]["message"] else ""
        record |= {
            "speedup": round(measurement["speedup"], 4),
            "ci95": [round(value, 4) for value in measurement["ci95"]],
            "t_reference_ms": measurement["t_reference_ms"],
            "t_candidate_ms": measurement["t_candidate_ms"],
            "tolerance": measurement["details"].get("tolerance"),
            "correctness": measurement["details"].get("correctness"),
            "check": check,
        }
    else:
        record |= {"failure": lines[0]["failure"], "message": _one_line(lines[0]["message"]), "tolerance": lines[0].get("tolerance")}
    if "failure" in record:
        record["progress_tail"] = [line.strip() for line in progress.splitlines() if line.strip()][-4:]
    return record


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sample", type=Path)
    parser.add_argument("manifest", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-file-s", type=float, default=150.0, help="wall limit of one file")
    parser.add_argument("--budget-s", type=float, default=400.0, help="start no file after this many seconds")
    parser.add_argument("--commit", default="?", help="the kernelcast commit measured, for the table")
    parser.add_argument("--only", type=int, nargs="*", help="entry numbers to run (default: all)")
    parser.add_argument("--table-only", action="store_true", help="write the table from OUT_DIR/measure_sample.jsonl, measure nothing")
    options = parser.parse_args(argv)
    entries = json.loads(options.manifest.read_text())
    options.out.mkdir(parents=True, exist_ok=True)
    if options.table_only:
        lines = (options.out / "measure_sample.jsonl").read_text(encoding="utf-8").splitlines()
        write_table([json.loads(line) for line in lines if line.strip()], entries, options)
        return 0
    started = time.monotonic()
    records = []
    for number, entry in enumerate(entries):
        if options.only and number not in options.only:
            continue
        problem = entry["reference"].split("/")[-2] + "/" + Path(entry["reference"]).stem
        if time.monotonic() - started > options.budget_s:
            record = {"failure": "not run", "message": f"the call's {options.budget_s:g} s budget was spent", "seconds": 0.0}
        else:
            record = measure_entry(options.sample / f"{number:02d}", options.per_file_s)
        record = {"number": number, "problem": problem, "candidate": entry["candidate"], "commit": entry["commit"], **record}
        records.append(record)
        print(f"{number:02d} {problem}: {after_text(record)} ({record['seconds']} s)", flush=True)
        with open(options.out / "measure_sample.jsonl", "a", encoding="utf-8") as sink:
            sink.write(json.dumps(record) + "\n")
    write_table(records, entries, options)
    measured = sum("speedup" in r for r in records)
    print(f"{measured} measured, {len(records) - measured} rejected or not run, {time.monotonic() - started:.0f} s")
    return 0


def write_table(records: list[dict[str, Any]], entries: list[dict[str, Any]], options: argparse.Namespace) -> None:
    rows = [
        f"| {r['number']:02d} | {r['problem']} | {before_text(entries[r['number']])} | {after_text(r)} | {r['seconds']} |" for r in records
    ]
    header = [
        f"kernelcast {options.commit}: `kernelcast measure cand.py --json`, {options.per_file_s:g} s wall limit per file.",
        "",
        "| # | problem | before (4e64c47) | after: speedup [95% CI] or failure | s |",
        "|---|---|---|---|---|",
    ]
    (options.out / "measure_sample.md").write_text("\n".join(header + rows) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
