"""How well the KernelBench trees alone tell which side is faster on sources and problems they never
saw: a check of a change to `pair_features` or to the trees in minutes, before the hour a refit takes.

    python -m workshop realworld pairs --out /tmp/rw.jsonl
    python -m workshop.training.kernelbench_probe --pairs /tmp/rw.jsonl [--problem-folds 5] [--first-seed 0] [--read /tmp/rw.read.npz]

It reads every pair as `kernelbench_prior.py` does (compiler facts, features, the weights' forecast),
grows the trees with each source left out in turn and, where asked, with each fold of problems left out
of every source, and prints the direction accuracy of the trees' forecast per held-out source and per
kind of pair. No line, calibration or spread is applied, so the numbers sit below the refit's
(`kernelbench_prior_report.md`) and say only which way a change moves the trees: a refit alone moves a
source by up to 0.02, and so does growing other bags of the same pairs (`--first-seed`), so a change
worth less than that needs two first seeds, or the refit, to judge.

Reading the pairs (compiler facts, features, the weights' forecast) takes 7 of a probe's 10 minutes
on 2 cores (14,238 pairs, `--problem-folds 0`), and a change to the trees leaves it as it was:
`--read FILE` keeps it there and reuses it while the pairs, the installed code and the read's own
code are those that made it (`read_stamp`), so that each probe after the first takes under 3.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from kernelcast.batch import add_facts, default_jobs, report_fact_problems
from kernelcast.cache import content_key
from kernelcast.evaluation import DIRECTION_MIN_LOG2
from kernelcast.kernels_runtime.facts import toolchain
from kernelcast.models.service.calibrated import Forecaster
from kernelcast.wire import LabelledPair, code_build, read_pairs
from workshop.training import kernelbench_prior
from workshop.training.kernelbench_prior import (
    WEIGHTS_ONLY_KINDS,
    Measured,
    held_out_centres,
    measured,
    out_of_source_centres,
    problem_folds,
)

# A kind of a source gets its own row from this many counted pairs.
KIND_ROW_PAIRS = 40
# The row of a source's pairs that no line reads.
NO_LINE = "no line"


def read_stamp(pairs: Sequence[LabelledPair]) -> str:
    """What a read depends on: the pairs (each id and request, in order: a pair rebuilt with other code
    keeps its id), the installed code and weights (`code_build`, which changes when any of their files
    does), the compilers that take the facts (`facts.toolchain`) and the workshop's part of the read
    (`measured`, `commonest_tokens` and the vocabulary's size)."""
    return content_key(
        "kernelbench-probe-read",
        {
            "pairs": [[pair.id, pair.request.to_json()] for pair in pairs],
            "build": code_build(),
            "toolchain": toolchain(),
            "workshop": [inspect.getsource(part) for part in (kernelbench_prior.measured, kernelbench_prior.commonest_tokens)],
            "vocabulary": kernelbench_prior.VOCABULARY_SIZE,
        },
    )


def _kept_read(saved: Path) -> np.lib.npyio.NpzFile:
    """The arrays of a read kept at `saved`; any other file there is left as it is and named."""
    try:
        arrays = np.load(saved)
    except (OSError, ValueError, EOFError):
        arrays = None
    if isinstance(arrays, np.lib.npyio.NpzFile):
        if "stamp" in arrays:
            return arrays
        arrays.close()
    sys.exit(f"kernelbench_probe: {saved} is not a read this probe kept; it is left as it is: give --read a new file")


def read(pairs: list[LabelledPair], saved: Path | None) -> Measured:
    """Every pair as the trees read it: loaded from `saved` where a read of the same stamp was left
    there, else read (compiler facts, then `measured`) and, given `saved`, left there."""
    stamp = read_stamp(pairs)
    if saved is not None and saved.exists():
        with _kept_read(saved) as arrays:
            if str(arrays["stamp"]) == stamp:
                return Measured.from_arrays(pairs, arrays)
        print(f"kernelbench_probe: {saved} holds a read of other pairs or other code: reading again", file=sys.stderr)
    elif saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)  # now, not after the minutes of reading
    report_fact_problems(add_facts(pairs, default_jobs()), "kernelbench_probe")
    data = measured(pairs, Forecaster(["embedded"]))
    if saved is not None:
        with open(saved, "wb") as stream:  # np.savez would add ".npz" to a name without it
            np.savez(stream, stamp=np.array(stamp), **data.to_arrays())
    return data


def out_of_fold_centres(data: Measured, folds: int, first_seed: int = 0) -> dict[int, float]:
    """The trees' forecast of each pair by trees grown without its problem's fold (in every source)."""
    partition = problem_folds(data.pairs, {pair.source for pair in data.pairs}, folds)
    splits = [
        (
            [i for i, pair in enumerate(data.pairs) if pair.op not in problems],
            [i for i, pair in enumerate(data.pairs) if pair.op in problems],
        )
        for problems in partition
    ]
    return held_out_centres(data, splits, first_seed)[0]


def direction_table(data: Measured, columns: Mapping[str, Mapping[int, float]]) -> str:
    """Direction accuracy of each column's forecasts per source (mean of the sources last), then per
    source and kind; a forecast of exactly 0 counts as "faster", as a P(faster) of 0.5 does in eval.

    A second mean counts only the pairs whose line reads the trees: the shipped forecast of a library's
    kernel or of torch.compile reads the weights alone (WEIGHTS_ONLY_KINDS), so what the trees do to
    those pairs moves the first mean and not the forecaster."""
    hits: dict[tuple[str, str], list[list[float]]] = defaultdict(list)
    for i, pair in enumerate(data.pairs):
        if abs(pair.log2_speedup) < DIRECTION_MIN_LOG2:
            continue
        found = [float((centres[i] >= 0) == (pair.log2_speedup > 0)) for centres in columns.values()]
        hits[(pair.source, "")].append(found)
        hits[(pair.source, data.kinds[i] or NO_LINE)].append(found)
    read_by_trees: dict[str, list[list[float]]] = defaultdict(list)
    for (source, kind), found in hits.items():
        if kind not in ("", NO_LINE, *WEIGHTS_ONLY_KINDS):
            read_by_trees[source] += found
    sources = sorted(source for source, kind in hits if not kind)
    header = f"{'held out':<48} {'N':>5} " + " ".join(f"{name:>9}" for name in columns)

    def row(label: str, count: str, accuracies: np.ndarray) -> str:
        return f"{label:<48} {count:>5} " + " ".join(f"{accuracy:>9.3f}" for accuracy in accuracies)

    per_source = {source: np.mean(hits[(source, "")], axis=0) for source in sources}
    lines = [header, *(row(source, str(len(hits[(source, "")])), per_source[source]) for source in sources)]
    lines.append(row(f"mean of {len(sources)} sources", "", np.mean(list(per_source.values()), axis=0)))
    if read_by_trees:
        served = np.mean([np.mean(found, axis=0) for found in read_by_trees.values()], axis=0)
        lines.append(row(f"mean of {len(read_by_trees)}, pairs whose line reads the trees", "", served))
    lines += ["", header.replace("held out", "held out, by kind", 1)]
    lines += [
        row(f"{source} {kind}", str(len(found)), np.mean(found, axis=0))
        for (source, kind), found in sorted(hits.items())
        if kind and len(found) >= KIND_ROW_PAIRS
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workshop.training.kernelbench_probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=Path, required=True, help="real-world pairs (python -m workshop realworld pairs)")
    parser.add_argument("--problem-folds", type=int, default=5, help="also hold out the problems in this many folds (0: skip)")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="grow other bags of the same pairs (e.g. 3): how far that moves a source is the noise to beat",
    )
    parser.add_argument(
        "--read",
        type=Path,
        default=None,
        help="keep the pairs as read in this file and reuse it while the pairs and the code that read them are unchanged",
    )
    args = parser.parse_args(argv)
    pairs = list(read_pairs(args.pairs))
    data = read(pairs, args.read)
    columns = {"source": out_of_source_centres(data, range(len(pairs)), {pair.source for pair in pairs}, args.first_seed)[0]}
    if args.problem_folds > 0:
        columns["problems"] = out_of_fold_centres(data, args.problem_folds, args.first_seed)
    print(direction_table(data, columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
