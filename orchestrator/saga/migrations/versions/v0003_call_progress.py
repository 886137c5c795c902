"""The last progress a tool reported, kept with its call.

A long-running tool reports progress (`ToolProgressReporter.progress()`); the journal keeps the
last report of each call, as JSON, so `toolfleet show` can say how far a call got. The column is
nullable: calls that reported nothing, and rows written before this revision, have none.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

_TABLE, _COLUMN = "toolfleet_tool_calls", "last_progress"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    # A database whose tables `create_all` made from newer models already has the column.
    if _COLUMN not in {c["name"] for c in inspector.get_columns(_TABLE)}:
        op.add_column(_TABLE, sa.Column(_COLUMN, sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(_TABLE) as batch:
        batch.drop_column(_COLUMN)
