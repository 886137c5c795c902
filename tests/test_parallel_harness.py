"""The harness of a parallel run: each test process has ports, a redis-server and a PostgreSQL database of
its own (tests/_ports.py, tests/_parallel.py), and installs come from a lock that matches pyproject.toml."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest
import redis
import sqlalchemy as sa

from tests import _ports
from tests._parallel import _answers_as, own_servers, worker_id
from tests._postgres import POSTGRES_VARIABLE, in_ci, reachable_postgres
from workers._devredis import redis_server_executable

ROOT = Path(__file__).resolve().parents[1]


def test_each_test_process_takes_ports_from_a_block_of_its_own_below_the_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocks = []
    for worker in ("gw0", "gw1", "gw2", "gw3"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        blocks.append(_ports._block())
    assert all(len(block) >= 100 for block in blocks)
    assert all(a.stop <= b.start for a, b in itertools.pairwise(blocks)), blocks
    assert blocks[-1].stop <= _ports._ephemeral_start()


def test_a_port_that_is_bound_is_never_given() -> None:
    # given: a port of this process's block, bound by someone else
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", _ports.free_port()))
        port = taken.getsockname()[1]
        # when: every port of the block is asked for in turn
        given = {_ports.free_port() for _ in range(len(_ports._BLOCK))}
    # then: that one never comes back, the others do
    assert port not in given
    assert len(given) >= len(_ports._BLOCK) - 10


@pytest.fixture
def a_redis() -> Iterator[str]:
    """A redis-server on a port of this process's block; its URL."""
    port = _ports.free_port()
    server = subprocess.Popen(
        [redis_server_executable(), "--bind", "127.0.0.1", "--port", str(port), "--save", ""],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.kill()
        server.wait()


def test_a_server_answering_on_the_port_counts_only_if_it_is_the_process_started(a_redis: str) -> None:
    # given: a process that never serves anything, started while another server holds the port
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # then: the server that answers there is not taken for it
        assert not _answers_as(a_redis, stranger)
    finally:
        stranger.kill()
        stranger.wait()


def test_in_a_parallel_run_this_process_works_on_a_redis_of_its_own(pytestconfig: pytest.Config) -> None:
    worker = worker_id(pytestconfig)
    assert worker == getattr(pytestconfig, "workerinput", {}).get("workerid")
    port = urlsplit(os.environ["TOOLFLEET_REDIS_URL"]).port
    if worker is not None:  # (a serial run works on the caller's)
        assert port in _ports._BLOCK, f"{worker} works on another process's Redis, at port {port}"


def test_two_test_processes_get_their_own_redis_and_an_empty_postgres_database_dropped_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the test database's server
    monkeypatch.setenv(POSTGRES_VARIABLE, reachable_postgres())
    first: dict[str, str] = {}
    second: dict[str, str] = {}
    # when: two test processes set up
    with own_servers("gwA", tmp_path, first), own_servers("gwB", tmp_path, second):
        # then: each has a Redis that answers, not the other's
        assert first["TOOLFLEET_REDIS_URL"] != second["TOOLFLEET_REDIS_URL"]
        for environ in (first, second):
            client = redis.Redis.from_url(environ["TOOLFLEET_REDIS_URL"])
            assert client.ping()
            client.close()
        # ... and a database of its own, empty
        assert first[POSTGRES_VARIABLE] != second[POSTGRES_VARIABLE]
        engine = sa.create_engine(first[POSTGRES_VARIABLE])
        try:
            assert sa.inspect(engine).get_table_names() == []
        finally:
            engine.dispose()
    # ... which is gone once it ended
    admin = sa.create_engine(reachable_postgres())
    try:
        with admin.connect() as connection:
            names = connection.execute(sa.text("select datname from pg_database")).scalars().all()
    finally:
        admin.dispose()
    ended = {sa.make_url(environ[POSTGRES_VARIABLE]).database for environ in (first, second)}
    assert ended.isdisjoint(names)


def test_the_lock_matches_pyproject_toml() -> None:
    # `make setup` installs the lock with `uv sync --locked`, which refuses a lock pyproject.toml has
    # left behind; this says so in the suite too, and why.
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        message = f"no uv beside {sys.executable} (make setup installs it)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    checked = subprocess.run(
        [str(uv), "lock", "--check", "--offline"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, f"pyproject.toml changed since uv.lock: run `make lock`\n{checked.stderr}"


def test_a_database_left_by_a_test_process_that_is_gone_is_dropped_and_a_live_ones_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the databases of a test process that was killed, and of one that still runs (this one)
    url = reachable_postgres()
    monkeypatch.setenv(POSTGRES_VARIABLE, url)
    base = sa.make_url(url).database
    gone = next(pid for pid in range(4_000_000, 4_100_000) if not psutil.pid_exists(pid))
    dead, live = f"{base}_gw7_{gone}", f"{base}_gw8_{os.getpid()}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            for name in (dead, live):
                connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        # when: a test process of another run sets up
        with own_servers("gw9", tmp_path, {}), admin.connect() as connection:
            names = set(connection.execute(sa.text("select datname from pg_database")).scalars())
        # then: the dead process's database is gone, the live one's kept
        assert dead not in names and live in names
    finally:
        with admin.connect() as connection:
            for name in (dead, live):
                connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
