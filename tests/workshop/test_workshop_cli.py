"""`python -m workshop`: every command prints its help."""

from __future__ import annotations

import pytest
from test_cli import every_parser

from workshop.__main__ import build_parser


def test_every_workshop_command_and_subcommand_prints_its_help() -> None:
    """argparse formats help strings with %: a literal one (95% CIs) crashed `python -m workshop corpus --help`."""
    every = every_parser(build_parser())
    assert len(every) > 5
    for parser in every:
        assert parser.format_help().startswith("usage:")


def test_pack_takes_one_way_to_choose_its_entries(capsys: pytest.CaptureFixture[str]) -> None:
    """--whole-problems, --beside-correct and --remeasure each choose the entries; two at once would
    leave one silently unused."""
    parser = build_parser()
    assert parser.parse_args(["realworld", "pack", "b", "--beside-correct"]).beside_correct
    with pytest.raises(SystemExit):
        parser.parse_args(["realworld", "pack", "b", "--beside-correct", "--whole-problems", "3"])
    assert "not allowed with argument" in capsys.readouterr().err
