"""The `toolfleet` command."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from orchestrator._journal_crypto import JournalKeyError
from orchestrator.migrations import SchemaError
from workers.settings import Settings, redact_url

__all__ = ["COMMANDS", "main"]

# Each name is a module of orchestrator.commands with `add_parser(commands)` and `run(args, settings)`.
COMMANDS = ("demo", "chat", "worker", "recover", "sagas", "runs", "show", "tools", "flower", "db")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolfleet",
        description="Distributed executor for LLM tool calls: workers, the LLM loop, sagas, monitoring. "
        "Configuration comes from TOOLFLEET_* environment variables (see the README).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"orchestrator.commands.{name}")
        module.add_parser(commands).set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        print(f"toolfleet: {exc}", file=sys.stderr)
        return 2
    try:
        code: int = args.run(args, settings)
    except (SchemaError, JournalKeyError) as exc:
        print(f"toolfleet {args.command}: {exc}", file=sys.stderr)
        return 2
    except SQLAlchemyError as exc:
        database = redact_url(getattr(args, "database_url", None) or settings.database_url)
        print(
            f"toolfleet {args.command}: the database at {database} failed: {_first_line(exc)}",
            file=sys.stderr,
        )
        return 2
    except RedisError as exc:
        redis_url = settings.redacted()["redis_url"]
        print(f"toolfleet {args.command}: Redis at {redis_url} failed: {_first_line(exc)}", file=sys.stderr)
        return 2
    return code


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


if __name__ == "__main__":
    sys.exit(main())
