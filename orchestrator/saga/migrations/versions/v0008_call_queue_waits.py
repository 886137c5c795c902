"""How long a call waited in its pool's queue, as its worker measured it.

A worker measures each call's wait from its publish (the message's `toolfleet_sent_at` header) to
its own start, and reports it with the call's outcome; the journal keeps it (`queued_ms`) with the
outcome, so the run view can show queue waits per pool and per tool. The column is nullable: calls
whose wait is unknown (run in process, retried, told by an older worker, or with no outcome yet),
and rows written before this revision, have none.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None

_TABLE, _COLUMN = "toolfleet_tool_calls", "queued_ms"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    # A database whose tables `create_all` made from newer models already has the column.
    if _COLUMN not in {c["name"] for c in inspector.get_columns(_TABLE)}:
        op.add_column(_TABLE, sa.Column(_COLUMN, sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(_TABLE) as batch:
        batch.drop_column(_COLUMN)
