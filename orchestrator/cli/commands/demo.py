"""`toolfleet demo`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from orchestrator.cli.commands._command import add_command, refuse
from orchestrator.cli.console import add_model_argument
from workers.settings import Settings

HELP = "run the whole system on this machine: two worker pools and eight stories"
DESCRIPTION = (
    "Start two worker pools (io: threads, heavy: prefork) with the example tools and run "
    "seven conversations through them: the documentation's square root, weather lookups fanned out, a "
    "bank transfer that is compensated, a trip booking whose timed-out car rental undoes the rest, a "
    "fare watch cancelled, a large transfer that waits for approval and is approved (and goes on) "
    "in a second process, and an outlook report rendered on the heavy pool as an artifact, which the "
    "answer links; then an MCP client calls the io pool's fare search. Artifacts go to "
    "TOOLFLEET_ARTIFACT_URL, by default the directory toolfleet-artifacts here, where `toolfleet serve` "
    "finds them. An embedded Redis is started when none answers at TOOLFLEET_REDIS_URL."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "demo", HELP, DESCRIPTION)
    add_model_argument(
        parser,
        default=None,
        help="a real model instead of the scripted one: openai:<model> or anthropic:<model> (key from the "
        "environment: OPENAI_API_KEY / ANTHROPIC_API_KEY)",
    )
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.cli.console import model_of
    from orchestrator.cli.demo import run_demo
    from orchestrator.errors import SetupError

    if args.model is not None:
        try:
            model_of(args.model)  # before any pool starts: a bad --model or a missing key fails at once
        except SetupError as exc:
            return refuse("demo", exc)
    return run_demo(sys.stdout, settings=settings, model=args.model)
