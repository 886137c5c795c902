"""What the migrations manage: toolfleet's tables, their models, and Alembic's version table."""

from __future__ import annotations

import sqlalchemy as sa

from orchestrator import _memory_tables
from orchestrator.saga import _journal_tables

__all__ = ["TABLES", "VERSION_TABLE", "target_metadata"]

# Named for toolfleet, so an application's own Alembic history can live in the same database.
VERSION_TABLE = "toolfleet_alembic_version"


def target_metadata() -> list[sa.MetaData]:
    """The models the revisions must produce: the journal's tables and the conversation store's."""
    return [_journal_tables.metadata, _memory_tables.metadata]


# toolfleet's tables, as the models name them (each metadata's in dependency order).
TABLES = tuple(table.name for metadata in target_metadata() for table in metadata.sorted_tables)
