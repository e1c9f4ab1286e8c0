"""`python -m workshop corpus …` (the measured synthetic corpus), `python -m workshop realworld …`
(kernels others wrote, measured on our GPU) and `python -m workshop train …` (the embedded
forecaster's weights), run from the checkout: the workshop is not installed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["train"]:
        from workshop.training.train import main as train

        return train(arguments[1:])
    args = build_parser().parse_args(arguments)
    return int(args.run(args))


def build_parser() -> argparse.ArgumentParser:
    """The corpus commands (training parses its own arguments: `python -m workshop train --help`)."""
    from workshop.corpus.cli import add_parser as add_corpus
    from workshop.realworld.cli import add_parser as add_realworld
    from workshop.stats import add_parser as add_stats

    parser = argparse.ArgumentParser(prog="python -m workshop", description="the workshop: corpora and training")
    commands = parser.add_subparsers(dest="command", required=True)
    add_corpus(commands)
    add_realworld(commands)
    add_stats(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
