"""The worker processes integration tests start for pools of their own: one way to build them.

Every such worker imports its tool modules from the repository root, reports a 2 s heartbeat unless
told otherwise, and logs at INFO to a file of the test's; a test names only what differs.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import redis

from orchestrator.executors.celery import CeleryExecutor
from tests._environment import broker_environment
from tests._processes import reap
from tests._waiting import wait_for
from workers.runtime.catalog import Catalog
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

REPO_ROOT = str(Path(__file__).resolve().parents[2])
CELERY = str(Path(sys.executable).parent / "celery")


def tool_worker(
    redis_url: str,
    pools: Sequence[str],
    modules: Sequence[str],
    log_path: Path,
    hostname: str,
    *,
    kind: str = "threads",
    concurrency: int = 4,
    env: Mapping[str, str] | None = None,
    loglevel: str = "INFO",
    extra_args: Sequence[str] = (),
) -> WorkerProcess:
    """A worker process serving `pools` with the tools of `modules` (not started yet: wait for it with
    `wait_ready` or `running`); `env` adds variables to, or overrides, the defaults above."""
    return WorkerProcess(
        pools=pools,
        modules=modules,
        redis_url=redis_url,
        kind=kind,
        concurrency=concurrency,
        hostname=hostname,
        env={
            "TOOLFLEET_HEARTBEAT_TTL_S": "2",
            "PYTHONPATH": REPO_ROOT,
            **broker_environment(os.environ),
            **(env or {}),
        },
        log_path=log_path,
        loglevel=loglevel,
        extra_args=extra_args,
    )


@contextlib.contextmanager
def all_running(
    starts: Mapping[str, Callable[[], WorkerProcess]], timeout_s: float = 60.0
) -> Iterator[dict[str, WorkerProcess]]:
    """Start every worker of `starts` (name -> how to start it) and wait until each is ready; yields them
    by name. Every worker started is stopped when the block ends, whatever happened."""
    workers: dict[str, WorkerProcess] = {}
    try:
        for name, start in starts.items():
            workers[name] = start()
        for worker in workers.values():
            worker.wait_ready(timeout_s=timeout_s)
        yield workers
    finally:
        for worker in workers.values():
            worker.stop()


@contextlib.contextmanager
def serving(redis_url: str, pool: str, module: str, logs: Path, name: str) -> Iterator[WorkerProcess]:
    """A threads worker `<name>@integration` serving `pool` with the tools of `module`, running for
    the block; its log is `<name>-worker.log` in `logs`."""
    worker = tool_worker(redis_url, [pool], [module], logs / f"{name}-worker.log", f"{name}@integration")
    with worker.running(timeout_s=60) as process:
        yield process


@contextlib.contextmanager
def celery_executor(settings: Settings) -> Iterator[CeleryExecutor]:
    """A `CeleryExecutor` on `settings`, closed when the block ends."""
    executor = CeleryExecutor(settings=settings)
    try:
        yield executor
    finally:
        executor.close()


@contextlib.contextmanager
def threads_and_prefork(
    redis_url: str, module: str, pools: tuple[str, str], logs: Path, *, threads: int = 4
) -> Iterator[dict[str, WorkerProcess]]:
    """Two workers serving the tools of `module`: pools[0] on `threads` threads, pools[1] on one prefork
    child (every prefork call in the same process), running for the block."""
    tag = uuid.uuid4().hex[:6]
    threaded, forked = pools
    starts = {
        "threads": lambda: tool_worker(
            redis_url, [threaded], [module], logs / "threads.log", f"t-{tag}@{threaded}", concurrency=threads
        ),
        "prefork": lambda: tool_worker(
            redis_url,
            [forked],
            [module],
            logs / "prefork.log",
            f"p-{tag}@{forked}",
            kind="prefork",
            concurrency=1,
        ),
    }
    with all_running(starts) as workers:
        yield workers


@contextlib.contextmanager
def celery_worker(
    redis_url: str,
    pool: str,
    module: str,
    log_path: Path,
    hostname: str,
    *,
    kind: str = "threads",
    concurrency: int = 2,
    loglevel: str = "INFO",
    env: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """`celery -A workers.app worker` serving `module`'s tools on `pool`, as an operator may start it,
    once it is in the live catalog; no toolfleet variable of this process reaches it but `env`'s."""
    command = [CELERY, "-A", "workers.app", "worker", "-Q", pool, "--pool", kind]
    command += ["--concurrency", str(concurrency), "--hostname", hostname, "--loglevel", loglevel]
    command += ["--without-gossip", "--without-mingle"]
    variables = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TOOLFLEET_")},
        "PYTHONPATH": REPO_ROOT,
        "TOOLFLEET_TOOLS": module,
        "TOOLFLEET_REDIS_URL": redis_url,
        "TOOLFLEET_HEARTBEAT_TTL_S": "2",
        **broker_environment(os.environ),
        **(env or {}),
    }
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=variables, stdout=log, stderr=log, start_new_session=True
        )
    client = redis.Redis.from_url(redis_url)
    try:

        def ready() -> bool:
            assert process.poll() is None, log_path.read_text(errors="replace")[-3000:]
            return Catalog(client).worker_alive(hostname)

        wait_for(ready, timeout_s=60, what=f"{hostname} in the catalog")
        yield process
    finally:
        client.close()
        reap(process, grace_s=20)
