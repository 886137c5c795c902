"""Fresh, empty databases for schema tests: an SQLite file, or a PostgreSQL database of its own.

PostgreSQL is reached at the tests' database (`postgres_url()`, tests/_postgres.py); each database is
created for one test under a unique name and dropped afterwards, so tests never touch shared tables.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from tests._postgres import postgres_unreachable, postgres_url

KINDS = ("sqlite", "postgresql")


@contextmanager
def fresh_database(kind: str, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database of `kind`, removed afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / f'fresh-{uuid.uuid4().hex[:8]}.db'}"
        return
    name = f"toolfleet_schema_{uuid.uuid4().hex[:12]}"
    admin_url = postgres_url()
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        admin.dispose()
        postgres_unreachable(admin_url, exc)
    try:
        yield sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
