"""The conversation store's table, apart from the store, so the migrations read its model without
importing the store (and the store builds its schema through the migrations)."""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["memory_table", "metadata"]

metadata = sa.MetaData()

memory_table = sa.Table(
    "toolfleet_chat_memory",
    metadata,
    sa.Column("memory_id", sa.String(255), primary_key=True),
    sa.Column("messages", sa.Text, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
