"""`postgres://` and `postgresql://` URLs work as people write them, for the journal and the memory store.

Both mean PostgreSQL through psycopg 3, which the `postgres` extra installs; without it, or with
another driver not installed, the URL is refused saying what to install or write instead. The journal,
the memory store and `toolfleet db upgrade` share the one rule and the one engine
(`orchestrator._database_url.database_engine`).
"""

from __future__ import annotations

import importlib.util
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest
import sqlalchemy as sa

from orchestrator import SqlChatMemoryStore, UserMessage
from orchestrator._database_url import async_database_url, database_engine, database_url
from orchestrator.saga.journal import Journal
from tests.orchestrator._databases import fresh_database
from workers.errors import SettingsError


@pytest.mark.parametrize(
    ("written", "used"),
    [
        ("postgres://u:pw@db:5432/app", "postgresql+psycopg://u:pw@db:5432/app"),
        ("postgresql://u:pw@db/app?sslmode=require", "postgresql+psycopg://u:pw@db/app?sslmode=require"),
        ("POSTGRES://db/app", "postgresql+psycopg://db/app"),
        ("postgresql+psycopg://db/app", "postgresql+psycopg://db/app"),
        ("sqlite:///toolfleet.db", "sqlite:///toolfleet.db"),
        ("sqlite://", "sqlite://"),
    ],
)
def test_postgres_urls_are_spelled_for_psycopg_3(written: str, used: str) -> None:
    assert database_url(written) == used


@pytest.mark.parametrize(
    ("written", "used"),
    [
        ("postgres://u:pw@db:5432/app", "postgresql+psycopg://u:pw@db:5432/app"),
        ("postgresql+psycopg://db/app?sslmode=require", "postgresql+psycopg://db/app?sslmode=require"),
        ("sqlite:///toolfleet.db", "sqlite+aiosqlite:///toolfleet.db"),
        ("sqlite+pysqlite:////abs/j.db", "sqlite+aiosqlite:////abs/j.db"),
        ("sqlite+aiosqlite:///j.db", "sqlite+aiosqlite:///j.db"),
    ],
)
def test_async_urls_open_sqlite_through_aiosqlite_and_postgresql_through_psycopg_3(
    written: str, used: str
) -> None:
    assert async_database_url(written) == used
    assert async_database_url(sa.make_url(database_url(written))) == used


@pytest.mark.skipif(importlib.util.find_spec("psycopg2") is not None, reason="psycopg2 is installed")
def test_a_driver_that_is_not_installed_is_refused_with_the_form_to_use() -> None:
    with pytest.raises(SettingsError) as refused:
        database_url("postgresql+psycopg2://u:pw@db/app")
    assert str(refused.value) == (
        "TOOLFLEET_DATABASE_URL='postgresql+psycopg2://u:***@db/app' names the driver psycopg2, which is "
        "not installed; use postgresql+psycopg://u:***@db/app (psycopg 3: pip install 'toolfleet[postgres]')"
    )


@pytest.fixture
def without_psycopg(monkeypatch: pytest.MonkeyPatch) -> None:
    """An install without the `postgres` extra: psycopg 3 is not found."""
    find_spec = importlib.util.find_spec

    def find(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "psycopg" else find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find)


@pytest.mark.parametrize(
    "written", ["postgres://u:pw@db/app", "postgresql://u:pw@db/app", "postgresql+psycopg://u:pw@db/app"]
)
@pytest.mark.usefixtures("without_psycopg")
def test_a_postgres_url_without_the_postgres_extra_says_what_to_install(written: str) -> None:
    # when / then: the URL itself, the journal and the memory store refuse it alike, password masked
    expected = (
        f"TOOLFLEET_DATABASE_URL={written.replace(':pw@', ':***@')!r} is a PostgreSQL database, whose "
        "driver psycopg 3 is not installed: pip install 'toolfleet[postgres]'"
    )
    for opening in (database_url, Journal, SqlChatMemoryStore):
        with pytest.raises(SettingsError) as refused:
            opening(written)
        assert str(refused.value) == expected


@pytest.mark.parametrize("opening", ["engine", "journal", "memory store"])
def test_every_sqlite_engine_waits_30_s_for_another_process_lock(opening: str, tmp_path: Path) -> None:
    # given: an SQLite database opened as the journal, the memory store and `db upgrade` open it
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    engine = {
        "engine": lambda: database_engine(url),
        "journal": lambda: Journal(url).engine,
        "memory store": lambda: SqlChatMemoryStore(url).engine,
    }[opening]()
    try:
        # when: SQLite is asked how long a connection waits for a lock
        with engine.connect() as connection:
            busy_timeout_ms = connection.exec_driver_sql("PRAGMA busy_timeout").scalar()
    finally:
        engine.dispose()
    # then: 30 s, not the driver's 5 s default
    assert busy_timeout_ms == 30_000


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_the_journal_and_the_memory_store_open_a_short_postgres_url(scheme: str, tmp_path: Path) -> None:
    with fresh_database("postgresql", tmp_path) as url:
        short = f"{scheme}://{url.split('://', 1)[1]}"
        journal = Journal(short)
        store = SqlChatMemoryStore(short)
        try:
            assert journal.engine.dialect.driver == "psycopg"
            assert store.engine.dialect.driver == "psycopg"
            store.update_messages("m", [UserMessage("hello")])
            assert store.get_messages("m") == [UserMessage("hello")]
            with journal.engine.connect() as connection:
                assert connection.execute(sa.text("select 1")).scalar() == 1
        finally:
            journal.engine.dispose()
            store.engine.dispose()
