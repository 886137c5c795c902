"""The command line's pages name every option each `toolfleet` command takes: the table at a glance
of docs/cli.md, written by hand, and the reference generated from the parsers."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from orchestrator.cli.main import COMMANDS, build_parser
from orchestrator.cli.reference import cli_reference

PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """The long options of `parser` and of its own subcommands."""
    own = {o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
    return own.union(*(_options(sub) for sub in _subcommands(parser).values()))


def _row(command: str) -> str:
    rows = [line for line in PAGE.read_text().splitlines() if line.startswith(f"| `toolfleet {command}")]
    assert rows, f"the command table of docs/cli.md has no row for `toolfleet {command}`"
    return rows[0].split(" | ")[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_the_table_row_of_a_command_names_each_of_its_options(command: str) -> None:
    # given: what the command's parser accepts
    options = _options(_subcommands(build_parser())[command])
    # then: its row in the table spells every one of them
    row = _row(command)
    assert {o for o in options if not re.search(re.escape(o) + r"\b", row)} == set()


def _section(reference: str, command: str) -> str:
    """The part of the generated reference headed `toolfleet <command>`, up to the next heading."""
    match = re.search(rf"^### `toolfleet {re.escape(command)}`\n(.*?)(?=^### |\Z)", reference, re.M | re.S)
    assert match is not None, f"the reference has no section for `toolfleet {command}`"
    return match.group(1)


@pytest.mark.parametrize("command", COMMANDS)
def test_the_generated_reference_gives_each_option_of_a_command_with_its_help(command: str) -> None:
    # given: the command's parser, and its nested commands' (`mcp serve`, `db upgrade`)
    parser = _subcommands(build_parser())[command]
    reference = cli_reference()
    for name, sub in [(command, parser)] + [(f"{command} {n}", s) for n, s in _subcommands(parser).items()]:
        section = _section(reference, name)
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            # then: a row names the argument, and carries the first words of its help
            row = next((line for line in section.splitlines() if _names(line, action)), None)
            assert row is not None, f"`toolfleet {name}`: no row for {action.option_strings or action.dest}"
            if action.help:
                first_words = " ".join(action.help.split()[:2]).split("%")[0]
                assert _plain(first_words) in _plain(row), (first_words, row)


def _names(line: str, action: argparse.Action) -> bool:
    """Whether `line` is the table row of `action`."""
    if not line.startswith("| `"):
        return False
    first_cell = line.split(" | ")[0]
    if action.option_strings:
        return all(re.search(re.escape(o) + r"\b", first_cell) for o in action.option_strings)
    return first_cell.startswith(f"| `{action.metavar or action.dest}`")


def _plain(text: str) -> str:
    return text.replace("\\", "")
