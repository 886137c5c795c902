"""The `toolfleet` command."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import os
import signal
import sys
from collections.abc import Sequence

from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from orchestrator.errors import JournalKeyError, SchemaError
from workers.settings import ENVIRONMENT, Settings, redact_url
from workers.telemetry.logs import configure_logging, notice
from workers.telemetry.tracing import setup_tracing, stop_tracing

__all__ = ["COMMANDS", "build_parser", "main"]

log = logging.getLogger(__name__)

DISTRIBUTION = "toolfleet"
BROKEN_PIPE_STATUS = 128 + signal.SIGPIPE  # what a shell reports for a process ended by SIGPIPE

# Each name is a module of orchestrator.cli.commands with `add_parser(commands)` and `run(args, settings)`.
COMMANDS = (
    *("demo", "chat", "serve", "cancel", "approvals", "approve", "reject", "worker", "recover"),
    *("sagas", "runs", "show", "tools", "flower", "db", "ui", "mcp", "worker-health", "artifacts"),
)
# The commands that run (or go on with, or compensate) invocations here: traced when an OTLP endpoint
# is configured, their spans exported before they exit. `serve` and `worker` set up their own.
TRACED_COMMANDS = frozenset({"demo", "chat", "cancel", "approve", "reject", "recover"})


def build_parser() -> argparse.ArgumentParser:
    """The parser of the `toolfleet` command and of every subcommand in `COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="toolfleet",
        description="Distributed executor for LLM tool calls: workers, the LLM loop, sagas, monitoring. "
        "Configuration comes from TOOLFLEET_* environment variables (see the README).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"orchestrator.cli.commands.{name.replace('-', '_')}")
        module.add_parser(commands).set_defaults(run=module.run)
    return parser


def _version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown: the toolfleet distribution is not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status: 0 done, 1 done with failures, 2 usage or environment error."""
    try:
        try:
            code = _main(argv)
        finally:
            sys.stdout.flush()  # a reader that went away is noticed here, not at interpreter exit
    except BrokenPipeError:
        # The reader of the output stopped reading (`toolfleet runs | head`): that ends the
        # command quietly, with the status of a process ended by SIGPIPE, as `cat` would.
        # Later writes, interpreter exit's flush among them, go nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE_STATUS
    return code


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        # Said in the format asked for, when that setting is not the one refused.
        asked = os.environ.get(ENVIRONMENT["log_format"])
        configure_logging("json" if asked == "json" else "text", level)
        notice(log, f"toolfleet: {exc}", logging.ERROR)
        return 2
    configure_logging(settings.log_format, level)
    traced = args.command in TRACED_COMMANDS and setup_tracing(
        "toolfleet-orchestrator", record_content=settings.trace_content
    )
    try:
        code: int = args.run(args, settings)
    except (SchemaError, JournalKeyError) as exc:
        notice(log, f"toolfleet {args.command}: {exc}", logging.ERROR)
        return 2
    except SQLAlchemyError as exc:
        database = redact_url(getattr(args, "database_url", None) or settings.database_url)
        failed = f"the database at {database} failed: {_first_line(exc)}"
        notice(log, f"toolfleet {args.command}: {failed}", logging.ERROR)
        return 2
    except RedisError as exc:
        redis_url = settings.redacted()["redis_url"]
        failed = f"Redis at {redis_url} failed: {_first_line(exc)}"
        notice(log, f"toolfleet {args.command}: {failed}", logging.ERROR)
        return 2
    finally:
        if traced:
            stop_tracing()  # what is buffered is exported before the process exits
    return code


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
