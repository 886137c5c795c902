"""Start a worker that serves one or more pools with the tools of some modules."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence

from workers.app import make_app, registry_from_modules
from workers.errors import ToolDefinitionError
from workers.settings import Settings

__all__ = ["POOL_KINDS", "run_worker"]

log = logging.getLogger(__name__)

POOL_KINDS = ("threads", "prefork", "solo")


def run_worker(
    *,
    pools: Sequence[str],
    modules: Sequence[str],
    settings: Settings,
    concurrency: int | None = None,
    kind: str = "threads",
    hostname: str | None = None,
    loglevel: str = "INFO",
) -> None:
    """Run a Celery worker consuming the queues of `pools` until it is stopped."""
    if kind not in POOL_KINDS:
        raise ValueError(f"--kind must be one of {', '.join(POOL_KINDS)}, got {kind!r}")
    pools = [p.strip() for p in pools if p.strip()]
    if not pools:
        raise ValueError("--pool needs at least one pool name")
    registry = registry_from_modules(modules)
    served = [d.name for d in registry if d.pool in pools]
    if not served:
        known = sorted({d.pool for d in registry})
        raise ToolDefinitionError(
            f"No tool of {', '.join(modules)} belongs to pool(s) {', '.join(pools)}; "
            f"their pools are: {', '.join(known)}"
        )
    app = make_app(settings, registry)
    default_concurrency = 16 if kind == "threads" else (os.cpu_count() or 2)
    argv = [
        "worker",
        "--queues",
        ",".join(pools),
        "--pool",
        kind,
        "--concurrency",
        str(concurrency or default_concurrency),
        "--task-events",
        "--without-gossip",
        "--without-mingle",
        "--hostname",
        hostname or f"{'-'.join(pools)}-{os.getpid()}@{socket.gethostname()}",
        "--loglevel",
        loglevel,
    ]
    log.info("serving %s on pools %s", ", ".join(served), ", ".join(pools))
    app.worker_main(argv)
