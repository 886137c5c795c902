"""Revision 0002 adds the final answer and the model turn to a journal made at revision 0001: its rows
are kept, read back without them, and `toolfleet show` still tells their story."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from orchestrator.saga.journal import Journal
from orchestrator.saga.migrations import head, upgrade
from orchestrator.saga.migrations._upgrade import alembic_config
from tests._cli import journal_lines
from tests.orchestrator._databases import KINDS, fresh_database


@pytest.fixture(params=KINDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path) as url:
        yield url


def _journal_at_revision_0001(url: str) -> str:
    """A journal as toolfleet made it at revision 0001, with one invocation and one call."""
    engine = sa.create_engine(url)
    invocation_id = str(uuid.uuid4())
    now = datetime.now(UTC)
    try:
        with engine.begin() as connection:
            command.upgrade(alembic_config(connection), "0001")
        with engine.begin() as connection:
            connection.execute(
                sa.text(
                    "INSERT INTO toolfleet_invocations (id, memory_id, user_message, state, owner, "
                    "started_at, heartbeat_at, invocation_json) VALUES (:id, 'default', 'book a flight', "
                    "'succeeded', 'host:1', :now, :now, '{}')"
                ),
                {"id": invocation_id, "now": now},
            )
            connection.execute(
                sa.text(
                    "INSERT INTO toolfleet_tool_calls (invocation_id, sequence, call_id, tool, arguments, "
                    "compensable, idempotency_key, state, started_at) VALUES (:id, 1, 'b1', 'book', '{}', "
                    "true, 'k', 'succeeded', :now)"
                ),
                {"id": invocation_id, "now": now},
            )
        columns = {c["name"] for c in sa.inspect(engine).get_columns("toolfleet_invocations")}
        assert "final_answer" not in columns  # the old schema, truly
    finally:
        engine.dispose()
    return invocation_id


def test_a_journal_at_revision_0001_gains_the_answer_and_turn_columns_and_keeps_its_rows(
    database_url: str,
) -> None:
    # given
    invocation_id = _journal_at_revision_0001(database_url)
    engine = sa.create_engine(database_url)
    try:
        # when
        report = upgrade(engine)
        # then: upgraded, both columns there, the rows kept and read without them
        assert (report.before, report.after) == ("0001", head())
        inspector = sa.inspect(engine)
        assert "final_answer" in {c["name"] for c in inspector.get_columns("toolfleet_invocations")}
        assert "turn" in {c["name"] for c in inspector.get_columns("toolfleet_tool_calls")}
        journal = Journal(engine)
        record = journal.invocation(invocation_id)
        assert record is not None and record.user_message == "book a flight" and record.final_answer is None
        [old_call] = journal.calls(invocation_id)
        assert (old_call.call_id, old_call.turn) == ("b1", None)
    finally:
        engine.dispose()


def test_show_tells_the_story_of_an_invocation_journaled_before_the_answer_and_turns(tmp_path: Path) -> None:
    # given: an SQLite journal at revision 0001
    url = f"sqlite:///{tmp_path / 'old.db'}"
    invocation_id = _journal_at_revision_0001(url)
    # when: read by this toolfleet, which upgrades it
    lines = journal_lines(url, "show", invocation_id, cwd=tmp_path)
    # then
    assert "  user: book a flight" in lines
    assert (
        "  answer: (none journaled: it ended with a tool's result, or before answers were journaled)" in lines
    )
    assert lines[lines.index("calls (model turn not journaled):") + 1] == "  #1 call b1  book({})"
