"""Measure 16 (toolfleet against DBOS Transact) is skipped in one line where it cannot run, and its DBOS
child process answers a call where PostgreSQL answers.

No Redis or worker is needed: the skips come before anything of the benchmark is used, and the child
runs DBOS alone (its system database a schema of its own, dropped when it ends).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa

from bench._context import Bench
from bench._measures.dbos_peer import DbosChild, child_environment, measure_dbos_peer
from bench._measures.serve_journal import DEFAULT_POSTGRES_URL, POSTGRES_URL_VARIABLE, postgres_problem

REPO = Path(__file__).resolve().parents[1]
TEST_SCHEMA = "toolfleet_bench_dbos_test"  # not the benchmark's: a bench may run meanwhile


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_the_measure_is_skipped_in_one_line_where_postgresql_does_not_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/test"
    monkeypatch.setenv(POSTGRES_URL_VARIABLE, url)
    no_bench = cast(Bench, None)  # the skip comes before the benchmark is used

    m = asyncio.run(measure_dbos_peer(no_bench))

    assert m.verdict == "skipped"
    assert m.skipped is not None and "does not answer" in m.skipped
    assert "\n" not in m.result and m.result.startswith("skipped: PostgreSQL at ")


def test_the_child_says_skip_in_one_line_when_dbos_cannot_be_imported() -> None:
    # A None in sys.modules makes `import dbos` raise ImportError, as without the package.
    program = "import sys; sys.modules['dbos'] = None; from bench._dbos_child import main; sys.exit(main([]))"
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=30
    )

    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith("skip dbos cannot be imported")


def _postgres_url() -> str:
    return os.environ.get(POSTGRES_URL_VARIABLE) or DEFAULT_POSTGRES_URL


def _schemas(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(sa.text("SELECT nspname FROM pg_namespace")).scalars())
    finally:
        engine.dispose()


def test_the_child_answers_one_call_with_its_time_and_drops_its_schema(tmp_path: Path) -> None:
    url = _postgres_url()
    problem = postgres_problem(url)
    if problem is not None:
        pytest.skip(problem)
    if importlib.util.find_spec("dbos") is None:
        pytest.skip("dbos is not installed here (the bench extra)")
    child = DbosChild(child_environment(url), tmp_path, schema=TEST_SCHEMA)
    try:
        child.start()
        word, rest = child.greeting(timeout_s=45)
        assert word == "ready", rest
        answer: dict[str, Any] = child.run("one", timeout_s=30)
    finally:
        child.end()

    assert answer["wall"] > 0 and answer["cpu"] >= 0
    setup_s, version = rest.split()
    assert float(setup_s) > 0 and version[0].isdigit()
    assert child.process is not None and child.process.returncode == 0, child.tail()
    assert TEST_SCHEMA not in _schemas(url)
