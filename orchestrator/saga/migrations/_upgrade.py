"""Bringing a database to the newest revision: `upgrade()`, `ensure_schema()`, `head()`."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Connection, Engine

from orchestrator.errors import SchemaError
from orchestrator.saga.migrations._lock import locked_connection
from orchestrator.saga.migrations._schema import TABLES, VERSION_TABLE
from workers.settings import redact_url

__all__ = ["SchemaUpgrade", "alembic_config", "ensure_schema", "head", "upgrade"]

logger = logging.getLogger(__name__)

_SCRIPT_LOCATION = str(Path(__file__).resolve().parent)


@dataclass(frozen=True)
class SchemaUpgrade:
    """What an upgrade found and did."""

    before: str | None  # revision before, None when the database had no version row
    after: str
    found_tables: tuple[str, ...]  # toolfleet's tables present before
    created_tables: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def describe(self) -> str:
        """One sentence for people: what was there and what was done."""
        created = ", ".join(self.created_tables)
        if not self.changed:
            return f"already at revision {self.after} (the newest): nothing to do"
        if self.before is None and not self.found_tables:
            return f"created the schema at revision {self.after}: {created}"
        if self.before is None:
            kept = ", ".join(self.found_tables)
            missing = f"; created the missing {created}" if created else ""
            return (
                f"found tables made before migrations ({kept}): kept them and their rows{missing}; "
                f"marked revision {self.after}"
            )
        added = f"; created {created}" if created else ""
        return f"upgraded from revision {self.before} to {self.after}{added}"


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, made in code: the revisions of this package, and `connection` when given."""
    config = Config()
    config.set_main_option("script_location", _SCRIPT_LOCATION.replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@functools.cache
def head() -> str:
    """The newest revision this toolfleet knows."""
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert revision is not None, "toolfleet ships at least one revision"
    return revision


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(
        connection, opts={"version_table": VERSION_TABLE}
    ).get_current_revision()


def _present_tables(connection: Connection) -> tuple[str, ...]:
    existing = set(sa.inspect(connection).get_table_names())
    return tuple(name for name in TABLES if name in existing)


def upgrade(engine: Engine) -> SchemaUpgrade:
    """Bring the database to the newest revision, holding the migration lock; says what it did.

    A revision this toolfleet does not know (a newer toolfleet's) is refused: `SchemaError`."""
    return _upgrade(engine, refuse_newer=True)


def ensure_schema(engine: Engine) -> None:
    """What a process does at start: nothing when the schema is current, else bring it up to date.

    A newer toolfleet's revision is left as it is with a warning, not refused: during a rolling
    deploy (or a rollback) after `toolfleet db upgrade`, the older processes keep starting."""
    with engine.connect() as connection:
        if _current(connection) == head():
            return
    _upgrade(engine, refuse_newer=False)


def _upgrade(engine: Engine, *, refuse_newer: bool) -> SchemaUpgrade:
    with locked_connection(engine) as connection:
        before = _current(connection)
        found = _present_tables(connection)
        target = head()
        if before is not None and before not in _known_revisions():
            newer = (
                f"the database is at schema revision {before!r}, which this toolfleet does not know "
                f"(its newest is {target!r}): it was written by a newer toolfleet"
            )
            if refuse_newer:
                raise SchemaError(f"{newer}; upgrade toolfleet")
            logger.warning("toolfleet schema at %s: %s; starting on it as it is", _shown(engine), newer)
            return SchemaUpgrade(before=before, after=before, found_tables=found, created_tables=())
        if before != target:
            try:
                command.upgrade(alembic_config(connection), "head")
            except CommandError as exc:
                raise SchemaError(f"upgrading the schema to revision {target} failed: {exc}") from exc
        after = _current(connection)
        created = tuple(name for name in _present_tables(connection) if name not in found)
    assert after is not None
    report = SchemaUpgrade(before=before, after=after, found_tables=found, created_tables=created)
    if report.changed:
        logger.info("toolfleet schema at %s: %s", _shown(engine), report.describe())
    return report


def _shown(engine: Engine) -> str:
    """The engine's URL for logs, its password masked wherever it is written."""
    return redact_url(engine.url.render_as_string(hide_password=False))


@functools.cache
def _known_revisions() -> frozenset[str]:
    return frozenset(
        script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()
    )
