"""The reference pages of the command line and its environment, written from the code itself.

`cli_reference()` is every `toolfleet` command with its arguments, read from the argparse parsers;
`configuration_reference()` is every `TOOLFLEET_*` setting with its default, read from the settings'
declarations, and its meaning, read from the descriptions declared beside them. The documentation
site (`make docs`) puts both on its pages when it is built, so they cannot drift from the code.
"""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Iterator
from dataclasses import MISSING, dataclass, fields
from typing import Any

from orchestrator.cli.main import build_parser
from orchestrator.server.settings import SERVE_DESCRIPTIONS, SERVE_ENVIRONMENT, ServeSettings
from orchestrator.server.ui.settings import UI_DESCRIPTIONS, UI_ENVIRONMENT, UiSettings
from workers.settings import DESCRIPTIONS, ENVIRONMENT, Settings

__all__ = ["UNSET", "Setting", "cli_reference", "configuration_reference", "settings"]

UNSET = "—"  # the default of a setting that has none
USAGE_WIDTH = 100  # columns of the usage lines, whatever the terminal that builds the page

# Defaults that are not a value of their own, said in words.
_DEFAULTS_IN_WORDS = {
    "TOOLFLEET_BROKER_URL": "the Redis URL",
    "TOOLFLEET_RESULT_BACKEND": "the Redis URL",
    "TOOLFLEET_VISIBILITY_TIMEOUT_S": "derived",
}
# Each group of settings: its heading, who reads it, and where its names, variables and meanings are.
_GROUPS: tuple[tuple[str, str, type, dict[str, str], dict[str, str]], ...] = (
    ("Every process", "every command, worker and orchestrator.", Settings, ENVIRONMENT, DESCRIPTIONS),
    ("The service", "`toolfleet serve`.", ServeSettings, SERVE_ENVIRONMENT, SERVE_DESCRIPTIONS),
    ("The run view", "`toolfleet serve` and `toolfleet ui`.", UiSettings, UI_ENVIRONMENT, UI_DESCRIPTIONS),
)


@dataclass(frozen=True)
class Setting:
    """One `TOOLFLEET_*` variable as the reference shows it: its default as text (a value in
    backticks, words, or `UNSET`) and what it means (Markdown)."""

    variable: str
    default: str
    description: str
    group: str


def settings() -> list[Setting]:
    """Every setting toolfleet reads, in the order of its declaration; a setting declared without a
    description is refused, naming it."""
    found: list[Setting] = []
    for group, _, kind, environment, descriptions in _GROUPS:
        defaults = {item.name: item.default for item in fields(kind) if item.default is not MISSING}
        for name, variable in environment.items():
            if not descriptions.get(name, "").strip():
                raise ValueError(f"{variable} ({kind.__name__}.{name}) has no description: add one")
            default = _DEFAULTS_IN_WORDS.get(variable) or _written(defaults.get(name))
            found.append(Setting(variable, default, descriptions[name], group))
    return found


def configuration_reference() -> str:
    """The Markdown tables of every setting, a table per group of processes that read them."""
    every = settings()
    parts: list[str] = []
    for group, reader, *_ in _GROUPS:
        parts += [
            f"## {group}",
            "",
            f"Read by {reader}",
            "",
            "| variable | default | meaning |",
            "|---|---|---|",
        ]
        parts += [
            f"| `{s.variable}` | {s.default} | {_cell(s.description)} |" for s in every if s.group == group
        ]
        parts.append("")
    return "\n".join(parts)


def cli_reference(parser: argparse.ArgumentParser | None = None, *, level: int = 3) -> str:
    """The Markdown reference of `parser` (by default `toolfleet`'s) and of each of its subcommands,
    each under a heading of `level`: what it does, its usage, and every argument with its default
    and help."""
    parts: list[str] = []
    for name, command in _commands(parser or build_parser(), "toolfleet"):
        command.formatter_class = functools.partial(argparse.HelpFormatter, width=USAGE_WIDTH)
        parts += [f"{'#' * level} `{name}`", ""]
        if command.description:
            parts += [_text(command.description), ""]
        parts += ["```text", command.format_usage().rstrip(), "```", ""]
        rows = [_argument_row(action, command.prog) for action in _arguments(command)]
        if rows:
            parts += ["| argument | default | meaning |", "|---|---|---|", *rows, ""]
        listed = _subcommands(command)
        if listed:
            parts += ["| command | what it does |", "|---|---|"]
            parts += [
                f"| [`{name} {sub}`](#{_anchor(f'{name} {sub}')}) | {_text(summary)} |"
                for sub, summary in listed
            ]
            parts.append("")
    return "\n".join(parts)


def _commands(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _commands(child, f"{name} {sub}")


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    return [
        (choice.dest, choice.help or "")
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for choice in action._choices_actions
    ]


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        action
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
        and action.help != argparse.SUPPRESS
    ]


def _argument_row(action: argparse.Action, prog: str) -> str:
    metavar = action.metavar if isinstance(action.metavar, str) else None
    if action.choices is not None and metavar is None:
        metavar = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    if action.option_strings:
        value = "" if action.nargs == 0 else f" {metavar or action.dest.upper()}"
        invocation = ", ".join(f"{option}{value}" for option in action.option_strings)
    else:
        invocation = metavar or action.dest
    notes = [
        note
        for note, applies in (
            ("required", action.required and bool(action.option_strings)),
            ("optional", not action.option_strings and action.nargs in ("?", "*")),
            ("repeatable", isinstance(action, argparse._AppendAction)),
        )
        if applies
    ]
    shown = f"`{invocation}`" + (f" ({', '.join(notes)})" if notes else "")
    return f"| {shown} | {_default(action)} | {_text(_help(action, prog))} |"


def _help(action: argparse.Action, prog: str) -> str:
    """The help text with argparse's `%(name)s` placeholders filled in, as `--help` shows it."""
    if not action.help:
        return ""
    params: dict[str, Any] = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = prog
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(choice) for choice in params["choices"])
    return action.help % params


def _default(action: argparse.Action) -> str:
    default = action.default
    if action.nargs == 0 or default in (None, argparse.SUPPRESS) or default == [] or default is False:
        return ""
    return f"`{default}`"


def _written(value: object) -> str:
    if value is None or value == "" or value == ():
        return UNSET
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


_CODE = re.compile(r"(`[^`]*`)")
_SPECIAL = re.compile(r"([\\*_\[\]<>|])")


def _text(text: str) -> str:
    """Plain text as Markdown: what Markdown would read as markup is escaped, code spans are kept."""
    return "".join(
        part if part.startswith("`") and part.endswith("`") else _SPECIAL.sub(r"\\\1", part)
        for part in _CODE.split(" ".join(text.split()))
    )


def _cell(markdown: str) -> str:
    """Markdown on one line that stays inside one cell of a table."""
    return "".join(
        part if part.startswith("`") and part.endswith("`") else part.replace("|", "\\|")
        for part in _CODE.split(" ".join(markdown.split()))
    )


def _anchor(heading: str) -> str:
    """The anchor MkDocs gives a heading (its `toc` extension's default slug)."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())
