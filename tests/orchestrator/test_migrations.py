"""The SQL schema under Alembic: a fresh database gets the models' tables, a database made by
`create_all` before migrations is recognised and kept, `toolfleet db upgrade` says what it did, and a
database from a newer toolfleet is started on with a warning and refused only by `toolfleet db
upgrade`."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from orchestrator import SqlChatMemoryStore, UserMessage
from orchestrator._memory_tables import metadata as memory_metadata
from orchestrator.cli import main
from orchestrator.saga._journal_tables import invocations, tool_calls
from orchestrator.saga._journal_tables import metadata as journal_metadata
from orchestrator.saga.journal import Journal
from orchestrator.saga.migrations import TABLES, VERSION_TABLE, SchemaError, head, upgrade
from tests.orchestrator._databases import KINDS, fresh_database
from workers.calls.invocation import InvocationContext


@pytest.fixture(params=KINDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture(autouse=True)
def _no_inherited_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOOLFLEET_DATABASE_URL", "TOOLFLEET_JOURNAL_KEYS"):
        monkeypatch.delenv(name, raising=False)


def _version(engine: sa.Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(
            connection, opts={"version_table": VERSION_TABLE}
        ).get_current_revision()


def _schema_differences(engine: sa.Engine) -> list[object]:
    models = sa.MetaData()
    for table in [*journal_metadata.tables.values(), *memory_metadata.tables.values()]:
        table.to_metadata(models)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        return list(compare_metadata(context, models))


def _legacy_rows(engine: sa.Engine, *, chat_memory: bool) -> str:
    """Tables and rows as `create_all` made them before migrations; returns the invocation id."""
    journal_metadata.create_all(engine)
    if chat_memory:
        memory_metadata.create_all(engine)
    invocation_id = str(uuid.uuid4())
    now = datetime.now(UTC)
    with engine.begin() as connection:
        connection.execute(
            sa.insert(invocations).values(
                id=invocation_id,
                memory_id="default",
                user_message="book a flight",
                state="succeeded",
                owner="host:1",
                started_at=now,
                heartbeat_at=now,
                invocation_json='{"context": {}, "parameters": {"seat": "12A"}}',
            )
        )
        connection.execute(
            sa.insert(tool_calls).values(
                invocation_id=invocation_id,
                sequence=0,
                tool="book",
                arguments="{}",
                compensable=True,
                idempotency_key="k",
                state="succeeded",
                started_at=now,
            )
        )
        if chat_memory:
            connection.execute(
                sa.insert(memory_metadata.tables["toolfleet_chat_memory"]).values(
                    memory_id="m1", messages='[{"type": "user", "text": "hello"}]', updated_at=now
                )
            )
    return invocation_id


def test_a_fresh_database_gets_exactly_the_models_tables(engine: sa.Engine) -> None:
    # when
    report = upgrade(engine)
    # then: every table, at the newest revision, and nothing differs from the models
    assert (report.before, report.after) == (None, head())
    assert report.created_tables == TABLES
    assert report.found_tables == ()
    assert set(TABLES) <= set(sa.inspect(engine).get_table_names())
    assert _version(engine) == head()
    assert _schema_differences(engine) == []


def test_a_second_upgrade_does_nothing(engine: sa.Engine) -> None:
    # given
    upgrade(engine)
    # when
    report = upgrade(engine)
    # then
    assert not report.changed
    assert report.created_tables == ()
    assert report.describe() == f"already at revision {head()} (the newest): nothing to do"


def test_a_database_made_by_create_all_is_recognised_upgraded_in_place_and_keeps_its_rows(
    engine: sa.Engine, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # given: the journal's and the store's tables as create_all made them, with rows, no version table
    invocation_id = _legacy_rows(engine, chat_memory=True)
    assert _version(engine) is None
    # when
    code = main(["db", "upgrade", "--database-url", database_url])
    # then: recognised, marked at the newest revision, nothing created or dropped
    out = capsys.readouterr().out
    assert code == 0
    assert "found tables made before migrations" in out
    assert f"marked revision {head()}" in out
    assert "created the missing" not in out
    assert _version(engine) == head()
    assert _schema_differences(engine) == []
    # and the rows written before are read back by the journal and the store
    journal = Journal(engine)
    record = journal.invocation(invocation_id)
    assert record is not None
    assert record.invocation_json == {"context": {}, "parameters": {"seat": "12A"}}
    assert [call.tool for call in journal.calls(invocation_id)] == ["book"]
    assert SqlChatMemoryStore(engine).get_messages("m1") == [UserMessage("hello")]


def test_a_journal_started_on_a_create_all_database_upgrades_it_and_adds_the_missing_table(
    engine: sa.Engine,
) -> None:
    # given: a database an older journal made, without the conversation store's table
    invocation_id = _legacy_rows(engine, chat_memory=False)
    # when: a journal starts on it
    journal = Journal(engine)
    # then: the missing table exists, the rows are kept, the schema matches the models
    assert "toolfleet_chat_memory" in sa.inspect(engine).get_table_names()
    assert _version(engine) == head()
    assert _schema_differences(engine) == []
    record = journal.invocation(invocation_id)
    assert record is not None and record.user_message == "book a flight"
    # and a second look says it is current
    report = upgrade(engine)
    assert not report.changed


def test_db_upgrade_reads_the_database_url_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given: no alembic.ini anywhere near, and the URL only in TOOLFLEET_DATABASE_URL
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("TOOLFLEET_DATABASE_URL", url)
    # when: run twice
    first = main(["db", "upgrade"])
    first_out = capsys.readouterr().out
    second = main(["db", "upgrade"])
    second_out = capsys.readouterr().out
    # then: the first created the schema, the second had nothing to do; both name the database
    assert (first, second) == (0, 0)
    assert first_out.startswith(f"{url}: created the schema at revision {head()}: ")
    assert all(name in first_out for name in TABLES)
    assert second_out == f"{url}: already at revision {head()} (the newest): nothing to do\n"


def test_processes_start_on_a_database_from_a_newer_toolfleet_and_only_db_upgrade_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # given: a database a newer toolfleet's `db upgrade` marked at a revision this one does not ship,
    # as during a rolling deploy or after a rollback
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    engine = sa.create_engine(url)
    upgrade(engine)
    with engine.begin() as connection:
        connection.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = 'f00dfeed'"))
    # when: a journal and a conversation store start on it
    with caplog.at_level(logging.WARNING, logger="orchestrator.saga.migrations._upgrade"):
        journal = Journal(engine)
        store = SqlChatMemoryStore(engine)
    # then: both work, each start warning once, naming the revision
    context = InvocationContext(memory_id="m", user_message="book a flight")
    journal.start_invocation(context, {"context": context.to_json(), "parameters": {}})
    record = journal.invocation(str(context.invocation_id))
    assert record is not None and record.user_message == "book a flight"
    store.update_messages("m", [UserMessage("hello")])
    assert store.get_messages("m") == [UserMessage("hello")]
    warnings = [r.getMessage() for r in caplog.records if r.name == "orchestrator.saga.migrations._upgrade"]
    assert len(warnings) == 2
    assert all(
        "revision 'f00dfeed'" in w and "newer toolfleet; starting on it as it is" in w for w in warnings
    )
    # and `toolfleet db upgrade` refuses it: exit 2, naming the revision and what to do
    assert main(["db", "upgrade", "--database-url", url]) == 2
    assert re.search(r"revision 'f00dfeed'.*newer toolfleet; upgrade toolfleet", capsys.readouterr().err)
    with pytest.raises(SchemaError, match=r"revision 'f00dfeed'.*newer toolfleet; upgrade toolfleet"):
        upgrade(engine)
    # leaving the database as it was
    assert _version(engine) == "f00dfeed"
    engine.dispose()


def test_the_upgrade_log_never_shows_a_password_given_in_the_query_string(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # given: a fresh PostgreSQL database whose URL carries its password as a query parameter
    with fresh_database("postgresql", tmp_path) as url:
        engine = sa.create_engine(f"{url}?password=hunter2-secret")
        try:
            # when: its schema is created, which is logged
            with caplog.at_level(logging.INFO, logger="orchestrator.saga.migrations._upgrade"):
                report = upgrade(engine)
        finally:
            engine.dispose()
    # then: the log names the database with the password masked
    assert report.changed
    logged = [r.getMessage() for r in caplog.records]
    assert any("password=***" in line and "created the schema" in line for line in logged)
    assert not any("hunter2-secret" in line for line in logged)
