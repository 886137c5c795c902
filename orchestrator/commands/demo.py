"""`toolfleet demo`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workers.settings import Settings

HELP = "show the example tools and run calls through an executor"


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser("demo", help=HELP, description=HELP)
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.demo import run_demo

    return run_demo(sys.stdout)
