"""`toolfleet demo`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workers.settings import Settings

HELP = "run the whole system on this machine: two worker pools and four stories"


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "demo",
        help=HELP,
        description="Start two worker pools (io: threads, heavy: prefork) with the example tools and run "
        "four conversations through them: the documentation's square root, weather lookups fanned out, a "
        "bank transfer that is compensated, and a trip booking whose timed-out car rental undoes the rest. "
        "An embedded Redis is started when none answers at TOOLFLEET_REDIS_URL.",
    )
    parser.add_argument(
        "--model",
        default=None,
        metavar="PROVIDER:MODEL",
        help="a real model instead of the scripted one: openai:<model> or anthropic:<model> (key from the "
        "environment: OPENAI_API_KEY / ANTHROPIC_API_KEY)",
    )
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.cli.console import ModelSpecError, chat_model, provider_key_variable
    from orchestrator.cli.demo import run_demo
    from orchestrator.errors import ModelAuthenticationError

    if args.model is not None:
        try:
            chat_model(args.model)  # before any pool starts: a bad --model or a missing key fails at once
        except ModelSpecError as exc:
            print(f"toolfleet demo: {exc}", file=sys.stderr)
            return 2
        except ModelAuthenticationError:
            print(
                f"toolfleet demo: no API key for {args.model}: set {provider_key_variable(args.model)}",
                file=sys.stderr,
            )
            return 2
    return run_demo(sys.stdout, settings=settings, model=args.model)
