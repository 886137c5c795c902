"""`toolfleet worker`: serve pools with the tools of some modules."""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.cli.commands._command import add_command, refuse
from workers.errors import ToolfleetError
from workers.runtime.worker import POOL_KINDS
from workers.settings import Settings

HELP = "serve pools with the tools of some modules"
DESCRIPTION = (
    "Start a Celery worker that serves the given pools (queues) with the tools of the given "
    "modules, and publishes them in the live catalog."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "worker", HELP, DESCRIPTION)
    parser.add_argument("--pool", required=True, help="pool names to serve, comma-separated (e.g. io,heavy)")
    parser.add_argument(
        "--tools",
        required=True,
        help="modules whose tools to serve, comma-separated (module or module:attribute)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=None, help="parallel calls (threads: 16, prefork: cores)"
    )
    parser.add_argument(
        "--kind", choices=POOL_KINDS, default="threads", help="execution pool kind (default threads)"
    )
    parser.add_argument("--hostname", default=None, help="worker name shown in Flower and the catalog")
    parser.add_argument("--loglevel", default="INFO", help="worker log level (default INFO)")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve this worker's Prometheus metrics at http://HOST:PORT/metrics (all its pool processes)",
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address the metrics listen on (default 127.0.0.1; 0.0.0.0 for a scraper on another host)",
    )
    parser.add_argument(
        "--pool-concurrency",
        type=int,
        default=None,
        metavar="N",
        help="at most N calls of these pools running at once in the whole fleet (calls wait in line, "
        "round-robin between tenants); every worker of a pool should say the same "
        "(default: TOOLFLEET_POOL_CONCURRENCY, else no limit)",
    )
    parser.add_argument(
        "--build-id",
        default=None,
        metavar="ID",
        help="this deployment's build (a release tag or commit), part of the version each tool advertises: "
        "a rolling deploy's old and new workers serve side by side, each call reaching a worker of the "
        "version its model was given (default: TOOLFLEET_BUILD_ID, else none)",
    )
    parser.add_argument(
        "--allow-mixed-pool",
        action="store_true",
        help="start even when live workers of the pool serve other tools (warns instead of refusing)",
    )
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from workers.runtime.worker import run_worker

    try:
        run_worker(
            pools=args.pool.split(","),
            modules=args.tools.split(","),
            settings=settings,
            concurrency=args.concurrency,
            kind=args.kind,
            hostname=args.hostname,
            loglevel=args.loglevel,
            allow_mixed_pool=args.allow_mixed_pool,
            pool_concurrency=(
                args.pool_concurrency if args.pool_concurrency is not None else settings.pool_concurrency
            ),
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
            build_id=args.build_id,
        )
    except (ValueError, ImportError, ToolfleetError) as exc:
        return refuse("worker", exc)
    return 0
