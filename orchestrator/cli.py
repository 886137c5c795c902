"""The `toolfleet` command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from workers.errors import ToolfleetError
from workers.settings import Settings
from workers.worker import POOL_KINDS

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolfleet",
        description="Distributed executor for LLM tool calls: workers, the LLM loop, sagas, monitoring.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    commands.add_parser("demo", help="show the example tools and run calls through an executor")
    worker = commands.add_parser(
        "worker",
        help="serve pools with the tools of some modules",
        description="Start a Celery worker that serves the given pools (queues) with the tools of the given "
        "modules, and publishes them in the live catalog.",
    )
    worker.add_argument("--pool", required=True, help="pool names to serve, comma-separated (e.g. io,heavy)")
    worker.add_argument(
        "--tools",
        required=True,
        help="modules whose tools to serve, comma-separated (module or module:attribute)",
    )
    worker.add_argument(
        "--concurrency", type=int, default=None, help="parallel calls (threads: 16, prefork: cores)"
    )
    worker.add_argument(
        "--kind", choices=POOL_KINDS, default="threads", help="execution pool kind (default threads)"
    )
    worker.add_argument("--hostname", default=None, help="worker name shown in Flower and the catalog")
    worker.add_argument("--loglevel", default="INFO", help="worker log level (default INFO)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if args.command == "demo":
        from orchestrator.demo import run_demo

        return run_demo(sys.stdout)
    if args.command == "worker":
        from workers.worker import run_worker

        try:
            run_worker(
                pools=args.pool.split(","),
                modules=args.tools.split(","),
                settings=Settings.from_env(),
                concurrency=args.concurrency,
                kind=args.kind,
                hostname=args.hostname,
                loglevel=args.loglevel,
            )
        except (ValueError, ImportError, ToolfleetError) as exc:
            print(f"toolfleet worker: {exc}", file=sys.stderr)
            return 2
        return 0
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
