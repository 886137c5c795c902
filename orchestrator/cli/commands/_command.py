"""What every subcommand module shares: adding its parser, and refusing to start with a message."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from workers.telemetry.logs import notice

__all__ = ["SETUP_ERROR_STATUS", "add_command", "refuse"]

log = logging.getLogger(__name__)

SETUP_ERROR_STATUS = 2


def add_command(
    commands: Any, name: str, summary: str, description: str | None = None
) -> argparse.ArgumentParser:
    """Add subcommand `name` to `commands` (what `add_subparsers()` returned) and return its parser;
    `summary` is its one line in `toolfleet --help`, `description` (default: `summary`) heads its own."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=summary, description=summary if description is None else description
    )
    return parser


def refuse(command: str, error: Exception) -> int:
    """Say on stderr why `toolfleet <command>` cannot go on; the exit status of a usage or setup error."""
    notice(log, f"toolfleet {command}: {error}", logging.ERROR)
    return SETUP_ERROR_STATUS
