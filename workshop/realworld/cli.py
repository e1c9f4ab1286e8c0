"""`python -m workshop realworld …`: the corpus of kernels others wrote, measured on our GPU."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kernelcast.wire import PAIR_KINDS
from workshop.realworld import runner

DEFAULT_MIRRORS = Path("/work/.mirror")


def add_parser(subparsers: Any) -> None:
    realworld = subparsers.add_parser("realworld", help="kernels others wrote: manifest, pack, run")
    commands = realworld.add_subparsers(dest="realworld_command", required=True)

    manifest = commands.add_parser("manifest", help="list every distinct solution of the listed sources (no code)")
    manifest.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS, help="folder of git mirrors (owner+name/repo)")
    manifest.add_argument("--source", action="append", help="repeatable; default: every listed source")
    manifest.set_defaults(run=manifest_command)

    libraries = commands.add_parser("library-manifest", help="list the library operators to measure, per shape and dtype (no code)")
    libraries.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    libraries.set_defaults(run=library_manifest_command)

    edit_manifest = commands.add_parser(
        "edit-manifest", help="list launch edits (block size, num_warps) of the solutions measured correct (no code)"
    )
    edit_manifest.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    edit_manifest.set_defaults(run=edit_manifest_command)
    triton_bench = commands.add_parser("tritonbench-manifest", help="list TritonBench's LLM candidates per kernel and size (no code)")
    triton_bench.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    triton_bench.add_argument(
        "--check",
        action="store_true",
        help="build it afresh elsewhere and say whether it equals the committed one (the suite checks a sample)",
    )
    triton_bench.set_defaults(run=tritonbench_manifest_command)
    cuda_l2 = commands.add_parser("cuda-l2-manifest", help="list CUDA-L2's HGEMM kernels to measure against torch.matmul (no code)")
    cuda_l2.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    cuda_l2.set_defaults(run=cuda_l2_manifest_command)
    fla = commands.add_parser("fla-manifest", help="list fla's chunked and recurrent kernels to measure against naive PyTorch (no code)")
    fla.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    fla.set_defaults(run=fla_manifest_command)
    helion = commands.add_parser("helion-manifest", help="list helion's example kernels to measure against their eager baselines (no code)")
    helion.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    helion.set_defaults(run=helion_manifest_command)

    pack = commands.add_parser("pack", help="write a batch (entries and their files) to carry to the GPU host")
    pack.add_argument("batch", type=Path)
    pack.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    pack.add_argument("--limit", type=int, default=None)
    pack.add_argument("--source", action="append")
    pack.add_argument("--language", action="append", choices=("cuda", "triton", "pytorch", "inductor"))
    pack.add_argument(
        "--skip", type=Path, action="append", default=[], help="results.jsonl of runs not assembled yet (recorded ids are always left out)"
    )
    pack.add_argument("--seed", type=int, default=0)
    choice = pack.add_mutually_exclusive_group()  # which entries, in which order; default: dealt over sources
    choice.add_argument("--whole-problems", type=int, metavar="N", help="every solution of the N problem files most solutions share")
    choice.add_argument(
        "--beside-correct", action="store_true", help="only problem files measured correct before, those most often correct first"
    )
    choice.add_argument(
        "--remeasure", type=int, metavar="N", help="a seeded sample of N entries measured correct already, to measure again"
    )
    pack.add_argument("--problem", action="append", help="repeatable: only this KernelBench problem (e.g. 25_Swish)")
    pack.add_argument("--edits", action="store_true", help="launch edits of measured solutions only (edit-manifest)")
    pack.add_argument("--loadable", action="store_true", help="leave out TritonBench candidates whose text is sure to fail before timing")
    pack.set_defaults(run=pack_command)

    run = commands.add_parser("run", help="measure a packed batch on this machine's GPUs (resumable)")
    runner.add_arguments(run)

    assemble = commands.add_parser("assemble", help="add run results to the records (data/records.jsonl.gz, no code)")
    assemble.add_argument("results", nargs="*", type=Path)
    assemble.add_argument(
        "--replace",
        type=Path,
        action="append",
        default=[],
        help="results.jsonl of a run that measured recorded kernels again on a quiet host: its measurements replace the records'",
    )
    assemble.set_defaults(run=assemble_command)

    repro = commands.add_parser("repro", help="share of re-measured speedups inside the records' 95%% CIs (pack --remeasure)")
    repro.add_argument("results", nargs="+", type=Path)
    repro.add_argument("--fit", action="store_true", help="fit the run-to-run drift on these results (intervals.py)")
    repro.add_argument("--check", type=Path, action="append", help="with --fit: results of another sample to judge the fit on")
    repro.set_defaults(run=repro_command)

    pairs = commands.add_parser("pairs", help="write labelled pairs of the correct records (code read from the mirrors)")
    pairs.add_argument("--out", type=Path, required=True)
    pairs.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    pairs.add_argument(
        "--kind",
        action="append",
        choices=PAIR_KINDS[PAIR_KINDS.index("llm-vs-eager") :],
    )
    pairs.set_defaults(run=pairs_command)


def manifest_command(args: argparse.Namespace) -> int:
    from workshop.realworld import manifest

    counts = manifest.build(args.mirrors, only=args.source)
    print(json.dumps(counts, indent=1))
    return 0


def library_manifest_command(args: argparse.Namespace) -> int:
    from workshop.realworld import library

    print(json.dumps(library.build(args.mirrors), indent=1))
    return 0


def edit_manifest_command(args: argparse.Namespace) -> int:
    from workshop.realworld import dataset, edits, manifest

    correct = {record["id"] for record in dataset.read() if record["correct"]}
    bases = [entry for entry in manifest.load() if entry["id"] in correct]
    print(json.dumps(edits.build(bases, args.mirrors), indent=1))
    return 0


def tritonbench_manifest_command(args: argparse.Namespace) -> int:
    import tempfile

    from workshop.realworld import manifest, tritonbench

    if not args.check:
        print(json.dumps(tritonbench.build(args.mirrors), indent=1))
        return 0
    with tempfile.TemporaryDirectory() as folder:
        fresh = Path(folder) / "manifest.jsonl.gz"
        counts = tritonbench.build(args.mirrors, fresh)
        same = manifest.load(fresh) == manifest.load(tritonbench.TRITONBENCH_MANIFEST)
    print(json.dumps({**counts, "equals the committed manifest": same}, indent=1))
    return 0 if same else 1


def cuda_l2_manifest_command(args: argparse.Namespace) -> int:
    from workshop.realworld import cuda_l2

    print(json.dumps(cuda_l2.build(args.mirrors), indent=1))
    return 0


def fla_manifest_command(args: argparse.Namespace) -> int:
    from workshop.realworld import linear_attention

    print(json.dumps(linear_attention.build(args.mirrors), indent=1))
    return 0


def helion_manifest_command(args: argparse.Namespace) -> int:
    from workshop.realworld import helion_examples

    print(json.dumps(helion_examples.build(args.mirrors), indent=1))
    return 0


def pack_command(args: argparse.Namespace) -> int:
    from workshop.realworld import pack

    count = pack.pack(
        args.batch,
        args.mirrors,
        args.limit,
        args.source,
        args.language,
        pack.skipped_ids(args.skip),
        args.seed,
        args.whole_problems,
        args.problem,
        args.remeasure,
        args.edits,
        args.loadable,
        args.beside_correct,
    )
    print(f"{count} entries in {args.batch}")
    return 0


def repro_command(args: argparse.Namespace) -> int:
    from workshop.realworld import dataset

    def lines(paths: list[Path]) -> list[dict[str, Any]]:
        return [json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()]

    if args.fit:
        from workshop.realworld import intervals

        found = intervals.report(dataset.read(), lines(args.results), lines(args.check) if args.check else None)
        print(json.dumps(found, indent=1))
        return 0
    print(json.dumps(dataset.reproducibility(dataset.read(), lines(args.results)), indent=1))
    return 0


def assemble_command(args: argparse.Namespace) -> int:
    from workshop.realworld import dataset

    print(json.dumps(dataset.assemble(args.results, replace=args.replace)))
    return 0


def pairs_command(args: argparse.Namespace) -> int:
    from kernelcast.wire import write_pairs
    from workshop.realworld import dataset

    records = dataset.read()
    chosen = (pair for pair in dataset.pairs(records, args.mirrors) if not args.kind or pair.kind in args.kind)
    print(f"{write_pairs(args.out, chosen)} pairs → {args.out}")
    return 0
