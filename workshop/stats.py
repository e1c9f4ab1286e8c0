"""`python -m workshop stats [--check]`: corpus-stats.json, what both measured corpora hold.

Two parts: `synthetic` (the generator's corpus, workshop/corpus/data) and `real_world` (kernels
others wrote, workshop/realworld/data). The file is committed; `--check` fails when it no
longer matches the datasets, and a test runs that check.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

STATS = Path(__file__).parent / "corpus-stats.json"


def add_parser(subparsers: Any) -> None:
    stats = subparsers.add_parser("stats", help="write corpus-stats.json (synthetic and real-world parts)")
    stats.add_argument("--check", action="store_true", help="only compare the committed file with the datasets")
    stats.set_defaults(run=stats_command)


def synthetic_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The generator's kernels (PyTorch references left out): counts per language, operations, GPU."""
    from workshop.corpus.dataset import is_reference

    kernels = [record for record in records if not is_reference(record)]
    languages: dict[str, dict[str, int]] = defaultdict(lambda: {"tried": 0, "correct": 0})
    for record in kernels:
        languages[record["language"]]["tried"] += 1
        languages[record["language"]]["correct"] += record["correct"]
    return {
        "tried": len(kernels),
        "correct": sum(record["correct"] for record in kernels),
        "gpu": dict(Counter(record["gpu"].get("gpu_name", "?") for record in kernels if record["correct"])),
        "languages": {language: counts for language, counts in sorted(languages.items())},
        "problems": len({record["op"] for record in kernels}),
    }


def current() -> dict[str, Any]:
    from workshop.corpus import dataset as synthetic
    from workshop.realworld import dataset as real_world

    return {
        "synthetic": synthetic_stats(synthetic.load(synthetic.DEFAULT_DATASET)),
        "real_world": real_world.stats(real_world.read()),
    }


def stats_command(args: argparse.Namespace) -> int:
    stats = json.dumps(current(), indent=1, sort_keys=True) + "\n"
    if args.check:
        if not STATS.exists() or STATS.read_text() != stats:
            print(f"{STATS} does not match the datasets: run `python -m workshop stats`", file=sys.stderr)
            return 1
        print(f"{STATS} matches the datasets")
        return 0
    STATS.write_text(stats)
    print(stats, end="")
    return 0
