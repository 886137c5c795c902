"""Replicas starting together on a fresh database: 8 processes each build a journal and a
conversation store at the same moment, on SQLite and on PostgreSQL, and none fails."""

from __future__ import annotations

import multiprocessing
import traceback
import uuid
from collections.abc import Iterator
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from tests.orchestrator._databases import KINDS, fresh_database

PROCESSES = 8
_JOIN_TIMEOUT_S = 90.0


def _start_replica(url: str, barrier: Barrier, results: Any) -> None:
    """One orchestrator replica's start: journal and store built, one write each."""
    try:
        from orchestrator import SqlChatMemoryStore, UserMessage
        from orchestrator.saga.journal import Journal
        from workers.calls.invocation import InvocationContext

        barrier.wait(timeout=60)  # every replica is imported and ready: go at once
        journal = Journal(url)
        store = SqlChatMemoryStore(url)
        context = InvocationContext(invocation_id=uuid.uuid4(), memory_id="m")
        journal.start_invocation(context, {"context": context.to_json(), "parameters": {}})
        store.update_messages(str(context.invocation_id), [UserMessage("hello")])
        journal.engine.dispose()
        store.engine.dispose()
        results.put("ok")
    except BaseException:
        results.put(traceback.format_exc())
        raise


@pytest.fixture(params=KINDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.mark.timeout(180)
def test_eight_replicas_starting_together_on_a_fresh_database_all_succeed(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: every setting the replicas read
    monkeypatch.setenv("TOOLFLEET_DATABASE_URL", database_url)
    monkeypatch.setenv("TOOLFLEET_JOURNAL_KEYS", Fernet.generate_key().decode())
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(PROCESSES)
    results = spawn.Queue()
    replicas = [
        spawn.Process(target=_start_replica, args=(database_url, barrier, results)) for _ in range(PROCESSES)
    ]
    # when: they start at once
    for replica in replicas:
        replica.start()
    try:
        outcomes = [results.get(timeout=_JOIN_TIMEOUT_S) for _ in replicas]
        for replica in replicas:
            replica.join(timeout=_JOIN_TIMEOUT_S)
    finally:
        for replica in replicas:
            if replica.is_alive():
                replica.kill()
                replica.join()
    # then: none failed, and every write landed
    failures = [outcome for outcome in outcomes if outcome != "ok"]
    assert failures == [], f"{len(failures)} of {PROCESSES} failed; first:\n{failures[0]}"
    assert [replica.exitcode for replica in replicas] == [0] * PROCESSES
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            invocations = connection.execute(sa.text("SELECT count(*) FROM toolfleet_invocations")).scalar()
            memories = connection.execute(sa.text("SELECT count(*) FROM toolfleet_chat_memory")).scalar()
    finally:
        engine.dispose()
    assert (invocations, memories) == (PROCESSES, PROCESSES)
