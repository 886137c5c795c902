"""Start a worker that serves one or more pools with the tools of some modules."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import sys
from collections.abc import Sequence

import redis

from workers.app import make_app, registry_from_modules
from workers.errors import ToolDefinitionError, ToolModuleError
from workers.redis_client import connect as connect_redis
from workers.runtime.catalog import (
    Catalog,
    CatalogTool,
    MixedPool,
    MixedPoolError,
    pool_conflicts,
    served_text,
)
from workers.settings import Settings
from workers.telemetry.metrics import serve_worker_metrics
from workers.tools.registry import ToolRegistry
from workers.tools.versions import check_build_id, tool_version

__all__ = ["POOL_KINDS", "ToolModuleError", "load_tools", "run_worker"]

log = logging.getLogger(__name__)

POOL_KINDS = ("threads", "prefork", "solo")


def load_tools(modules: Sequence[str]) -> ToolRegistry:
    """The tools of `modules` (`package.module` or `package.module:attribute`), found as `celery -A`
    finds an app: the current directory comes first on the import path, for this process and the
    pool's children. A module that cannot be loaded raises `ToolModuleError` naming it; a
    compensation that names no tool, or takes other parameters, raises `ToolDefinitionError`."""
    _current_directory_on_path()
    return registry_from_modules(modules)


def _current_directory_on_path() -> None:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    # Children started afresh rather than forked (spawn, a restarted pool) read the path from here.
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if cwd not in inherited:
        os.environ["PYTHONPATH"] = os.pathsep.join([cwd, *inherited])


def run_worker(
    *,
    pools: Sequence[str],
    modules: Sequence[str],
    settings: Settings,
    concurrency: int | None = None,
    kind: str = "threads",
    hostname: str | None = None,
    loglevel: str = "INFO",
    allow_mixed_pool: bool = False,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    pool_concurrency: int | None = None,
    build_id: str | None = None,
) -> None:
    """Run a Celery worker consuming the queues of `pools` until it is stopped.

    Every compensation of the modules is checked first. A pool whose live workers serve other tools
    is refused with `MixedPoolError` (a call lands on any worker of its pool), unless
    `allow_mixed_pool`, which starts the worker with a warning. With `metrics_port`, the metrics of
    the worker and all its pool's processes are served at `http://metrics_host:metrics_port/metrics`.
    With `pool_concurrency`, the worker announces in the catalog that at most that many calls of its
    pools run at once in the whole fleet; orchestrators hold calls in line until one of the pool's
    slots is free. With `build_id` (else `settings.build_id`), the versions it advertises for its tools
    name that build, and calls meant for another build never reach it.
    """
    if pool_concurrency is not None and pool_concurrency < 1:
        raise ValueError(f"--pool-concurrency must be 1 or more, got {pool_concurrency}")
    if kind not in POOL_KINDS:
        raise ValueError(f"--kind must be one of {', '.join(POOL_KINDS)}, got {kind!r}")
    if build_id is not None:
        settings = dataclasses.replace(settings, build_id=check_build_id(build_id))
    pools = [p.strip() for p in pools if p.strip()]
    if not pools:
        raise ValueError("--pool needs at least one pool name")
    registry = load_tools(modules)
    served = [d.name for d in registry if d.pool in pools]
    if not served:
        known = sorted({d.pool for d in registry})
        raise ToolDefinitionError(
            f"No tool of {', '.join(modules)} belongs to pool(s) {', '.join(pools)}; "
            f"their pools are: {', '.join(known)}"
        )
    hostname = hostname or f"{'-'.join(pools)}-{os.getpid()}@{socket.gethostname()}"
    _check_pools(settings, registry, hostname, pools, allow_mixed_pool)
    app = make_app(settings, registry)
    app.conf.toolfleet_pool_concurrency = pool_concurrency  # announced in the worker's catalog entry
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
        hostname,
        "--loglevel",
        loglevel,
    ]
    log.info(
        "serving %s on pools %s",
        ", ".join(f"{d.name} {tool_version(d, settings.build_id)}" for d in registry if d.pool in pools),
        ", ".join(pools),
    )
    if metrics_port is None:
        app.worker_main(argv)
        return
    with serve_worker_metrics(metrics_port, metrics_host):
        log.info("metrics at http://%s:%d/metrics", metrics_host, metrics_port)
        app.worker_main(argv)


def _check_pools(
    settings: Settings, registry: ToolRegistry, hostname: str, pools: Sequence[str], allow_mixed_pool: bool
) -> None:
    tools = [CatalogTool.of(d) for d in registry if d.pool in pools]
    client = connect_redis(settings.redis_url, socket_connect_timeout=2, socket_timeout=5)
    try:
        workers = Catalog(client).workers()
    except redis.RedisError as exc:
        log.warning(
            "could not read the live catalog at %s to compare the tools of pool(s) %s with their live "
            "workers' (%s): starting without that check",
            settings.redacted()["redis_url"],
            ", ".join(pools),
            exc,
        )
        return
    finally:
        client.close()
    conflicts = pool_conflicts(workers, hostname, pools, tools)
    if not conflicts:
        return
    text = _conflicts_text(hostname, conflicts)
    if not allow_mixed_pool:
        raise MixedPoolError(
            f"{text} Serve the same --tools on every worker of a pool, or give these tools another pool; "
            "--allow-mixed-pool starts this worker anyway."
        )
    log.warning("%s Starting anyway (--allow-mixed-pool).", text)


def _conflicts_text(hostname: str, conflicts: Sequence[MixedPool]) -> str:
    parts = []
    for conflict in conflicts:
        own = conflict.served[hostname]
        others = "; ".join(
            f"'{name}' serves {served_text(served)}"
            for name, served in conflict.served.items()
            if name != hostname
        )
        parts.append(
            f"Worker '{hostname}' would serve pool '{conflict.pool}' with {served_text(own)}, while its live "
            f"workers serve other tools: {others}."
        )
    return (
        " ".join(parts) + " A call lands on any worker of its pool: a call of a tool that worker lacks "
        "fails there (NotRegistered)."
    )
