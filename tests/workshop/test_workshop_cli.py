"""`python -m workshop`: every command prints its help."""

from __future__ import annotations

from test_cli import every_parser

from workshop.__main__ import build_parser


def test_every_workshop_command_and_subcommand_prints_its_help() -> None:
    """argparse formats help strings with %: a literal one (95% CIs) crashed `python -m workshop corpus --help`."""
    every = every_parser(build_parser())
    assert len(every) > 5
    for parser in every:
        assert parser.format_help().startswith("usage:")
