"""`postgres://` and `postgresql://` URLs work as people write them, for the journal and the memory store.

Both mean PostgreSQL through psycopg 3, the driver toolfleet ships; a driver that is not installed is
refused naming the URL to write instead. The journal, the memory store and `toolfleet db upgrade`
share the one rule (`orchestrator._database_url.database_url`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import sqlalchemy as sa

from orchestrator import SqlChatMemoryStore, UserMessage
from orchestrator._database_url import database_url
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
def test_postgres_urls_are_spelled_for_the_shipped_driver(written: str, used: str) -> None:
    assert database_url(written) == used


@pytest.mark.skipif(importlib.util.find_spec("psycopg2") is not None, reason="psycopg2 is installed")
def test_a_driver_that_is_not_installed_is_refused_with_the_form_to_use() -> None:
    with pytest.raises(SettingsError) as refused:
        database_url("postgresql+psycopg2://u:pw@db/app")
    assert str(refused.value) == (
        "TOOLFLEET_DATABASE_URL='postgresql+psycopg2://u:***@db/app' names the driver psycopg2, which is "
        "not installed; use postgresql+psycopg://u:***@db/app (psycopg 3, installed with toolfleet)"
    )


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
