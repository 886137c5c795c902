"""The README's command table names every option each `toolfleet` command takes."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from orchestrator.cli.main import COMMANDS, build_parser

README = Path(__file__).resolve().parents[1] / "README.md"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """The long options of `parser` and of its own subcommands."""
    own = {o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
    return own.union(*(_options(sub) for sub in _subcommands(parser).values()))


def _row(command: str) -> str:
    rows = [line for line in README.read_text().splitlines() if line.startswith(f"| `toolfleet {command}")]
    assert rows, f"the README's command table has no row for `toolfleet {command}`"
    return rows[0].split(" | ")[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_the_readme_row_of_a_command_names_each_of_its_options(command: str) -> None:
    # given: what the command's parser accepts
    options = _options(_subcommands(build_parser())[command])
    # then: its README row spells every one of them
    row = _row(command)
    assert {o for o in options if not re.search(re.escape(o) + r"\b", row)} == set()
