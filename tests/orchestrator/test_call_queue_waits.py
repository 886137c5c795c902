"""The journal keeps each call's queue wait, as its worker reported it, with the call's outcome: through
`Journal.record_outcome` and through the hot path's single statement (on PostgreSQL, the writes
committed together), in milliseconds; unknown stays unknown. A journal of the revision before has
the column added, its rows' waits unknown."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from orchestrator.saga._journal_tables import invocations, tool_calls
from orchestrator.saga._journal_writes import outcome_write
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.journal import Journal
from orchestrator.saga.migrations import head, upgrade
from orchestrator.saga.migrations._upgrade import alembic_config
from tests.orchestrator._databases import KINDS, fresh_database
from workers.calls.invocation import Invocation, InvocationContext
from workers.protocol import OutcomeKind, ToolExecutionRequest, ToolOutcome


@pytest.fixture(params=KINDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path) as url:
        yield url


def _calls(journal: Journal, count: int) -> tuple[str, list[int]]:
    """An invocation with `count` calls in flight; its id and the calls' rows."""
    context = InvocationContext(memory_id="m1", user_message="hi")
    journal.start_invocation(context, Invocation(context).to_json())
    invocation_id = str(context.invocation_id)
    rows = [
        journal.record_intent(
            invocation_id,
            i,
            ToolExecutionRequest(f"c{i}", "lookup", "{}"),
            pool="p",
            compensable=False,
            idempotency_key=f"{invocation_id}:c{i}",
        )
        for i in range(count)
    ]
    return invocation_id, rows


WAITS = [0.0123, None, 0.0]


@pytest.mark.parametrize("path", ["record_outcome", "hot path"])
def test_a_calls_queue_wait_is_journaled_with_its_outcome(database_url: str, path: str) -> None:
    # given: three calls in flight, whose workers waited 12.3 ms, said nothing, and waited none
    journal = Journal(database_url, keys=())
    try:
        invocation_id, rows = _calls(journal, len(WAITS))
        outcomes = [ToolOutcome(OutcomeKind.SUCCESS, "ok", queued_s=wait) for wait in WAITS]

        # when: their outcomes are journaled
        if path == "record_outcome":
            for row, outcome in zip(rows, outcomes, strict=True):
                journal.record_outcome(row, outcome, outcome.text)
        else:

            async def written() -> None:
                hot = AsyncJournal(journal)
                try:
                    await asyncio.gather(
                        *(
                            hot.execute(outcome_write(r, o, o.text, None))
                            for r, o in zip(rows, outcomes, strict=True)
                        )
                    )
                finally:
                    await hot.dispose()

            asyncio.run(written())

        # then: in milliseconds, and unknown as unknown
        assert [call.queued_ms for call in journal.calls(invocation_id)] == [12, None, 0]
        assert [call.state for call in journal.calls(invocation_id)] == ["succeeded"] * 3
    finally:
        journal.engine.dispose()


def test_rows_journaled_before_the_column_have_no_queue_wait(database_url: str) -> None:
    # given: a journal of the revision before, with one call
    engine = sa.create_engine(database_url)
    invocation_id, now = str(uuid.uuid4()), datetime.now(UTC)
    try:
        with engine.begin() as connection:
            command.upgrade(alembic_config(connection), "0007")
            connection.execute(
                sa.insert(invocations).values(
                    id=invocation_id,
                    memory_id="m",
                    state="succeeded",
                    owner="h:1",
                    started_at=now,
                    heartbeat_at=now,
                )
            )
            values = {"invocation_id": invocation_id, "sequence": 1, "tool": "lookup", "arguments": "{}"}
            values |= {"compensable": False, "idempotency_key": "k", "state": "succeeded", "started_at": now}
            connection.execute(sa.insert(tool_calls).values(**values))

        # when
        report = upgrade(engine)

        # then: the column is there, the old row's wait unknown
        assert (report.before, report.after) == ("0007", head())
        assert "queued_ms" in {c["name"] for c in sa.inspect(engine).get_columns("toolfleet_tool_calls")}
        journal = Journal(engine, keys=())
        assert [call.queued_ms for call in journal.calls(invocation_id)] == [None]
    finally:
        engine.dispose()
