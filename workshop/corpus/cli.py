"""`python -m workshop corpus …`: measure, assemble, count and pair the kernel corpus."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from workshop.corpus.pair_builder import KINDS
from workshop.corpus.runner import add_arguments as add_runner_arguments


def add_parser(subparsers: Any) -> None:
    corpus = subparsers.add_parser("corpus", help="the measured kernel corpus: run, assemble, stats, pairs, repro")
    commands = corpus.add_subparsers(dest="corpus_command", required=True)

    run = commands.add_parser("run", help="build, check and time the corpus on this machine's GPU (resumable)")
    add_runner_arguments(run)

    assemble = commands.add_parser("assemble", help="join GPU run folders and the generator into one dataset file")
    assemble.add_argument("runs", nargs="+", type=Path)
    assemble.add_argument("--out", type=Path, default=None)

    to_run = commands.add_parser("to-run", help="write the dataset back as a run folder, to resume measuring it")
    to_run.add_argument("run_dir", type=Path)
    to_run.add_argument("--data", type=Path, default=None)

    stats = commands.add_parser("stats", help="counts: kernels, failures by kind, operations, languages, sizes, GPU, pairs per bin")
    stats.add_argument("--data", type=Path, default=None)
    stats.add_argument("--json", action="store_true", help="print JSON (default: a summary and a per-operation table)")

    pairs = commands.add_parser("pairs", help="write labelled pairs (kernelcast eval's input)")
    pairs.add_argument("--out", type=Path, required=True)
    pairs.add_argument("--kind", choices=KINDS, action="append", help="repeatable; default: all kinds")
    pairs.add_argument("--ops", help="comma-separated operations (default: all)")
    pairs.add_argument("--data", type=Path, default=None)
    pairs.add_argument("--seed", type=int, default=0)

    check = commands.add_parser("compile-check", help="compile one kernel of every operation for the H100 (no GPU needed)")
    check.add_argument("--every", type=int, default=1, help="every N-th operation (the test suite takes 3)")

    repro = commands.add_parser("repro", help="share of a re-measured sample inside the dataset's 95%% CIs")
    repro.add_argument("run_dir", type=Path, help="a run folder made with `corpus run --only KEYS --sample 0.02`")
    repro.add_argument("--data", type=Path, default=None)

    corpus.set_defaults(run=run_command)


def run_command(args: argparse.Namespace) -> int:
    from workshop.corpus import dataset

    command = args.corpus_command
    if command == "run":
        from workshop.corpus.runner import run

        return run(args)
    if command == "assemble":
        counts = dataset.assemble(args.runs, args.out or dataset.DEFAULT_DATASET)
        print(json.dumps(counts))
        return 0
    if command == "compile-check":
        from workshop.corpus.runner import compile_failures, one_per_operation

        sample = one_per_operation(args.every)
        failures = compile_failures(sample)
        print("\n".join(failures) or f"{len(sample)} operations compile")
        return 1 if failures else 0
    if command == "to-run":
        try:
            print(f"{dataset.to_run(args.data or dataset.DEFAULT_DATASET, args.run_dir)} records → {args.run_dir}")
        except FileExistsError as error:
            print(f"workshop corpus to-run: {error}", file=sys.stderr)
            return 2
        return 0
    try:
        records = dataset.load(args.data or dataset.DEFAULT_DATASET)
    except (FileNotFoundError, ValueError) as error:
        print(f"workshop corpus: {error}", file=sys.stderr)
        return 2
    if command == "stats":
        return _stats(records, args.json)
    if command == "pairs":
        return _pairs(records, args)
    return _repro(records, args.run_dir)


def _stats(records: list[dict[str, Any]], as_json: bool) -> int:
    from workshop.corpus.pair_builder import build_pairs
    from workshop.corpus.stats import corpus_stats, markdown_table

    stats = corpus_stats(records, build_pairs(records))
    if as_json:
        print(json.dumps(stats, indent=2))
        return 0
    summary = {key: value for key, value in stats.items() if key != "per_op"}
    for key, value in summary.items():
        print(f"{key}: {value}")
    print()
    print(markdown_table(stats))
    return 0


def _pairs(records: list[dict[str, Any]], args: argparse.Namespace) -> int:
    from kernelcast.wire import write_pairs
    from workshop.corpus.pair_builder import build_pairs

    if args.ops:
        wanted = set(args.ops.split(","))
        unknown = wanted - {record["op"] for record in records}
        if unknown:
            print(f"workshop corpus: no operation named {', '.join(sorted(unknown))} in the corpus", file=sys.stderr)
            return 2
        records = [record for record in records if record["op"] in wanted]
    count = write_pairs(args.out, build_pairs(records, args.kind or KINDS, seed=args.seed))
    print(f"{count} pairs → {args.out}")
    return 0


def _repro(records: list[dict[str, Any]], run: Path) -> int:
    from workshop.corpus.dataset import read_jsonl
    from workshop.corpus.stats import reproducibility

    print(json.dumps(reproducibility(records, read_jsonl(run / "records.jsonl")), indent=2))
    return 0
