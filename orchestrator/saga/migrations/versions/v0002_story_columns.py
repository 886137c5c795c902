"""The story of an invocation: its final answer, and the model turn of each tool call.

`toolfleet show` tells what the user asked, which calls each model turn made and what the answer
was; before this revision the journal kept neither the answer nor the turn. Both columns are
nullable: rows written before it have neither, and are shown without them.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

_COLUMNS = (
    ("toolfleet_invocations", "final_answer", sa.Text),
    ("toolfleet_tool_calls", "turn", sa.Integer),
)


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    for table, column, kind in _COLUMNS:
        # A database whose tables `create_all` made from newer models already has the column.
        if column not in {c["name"] for c in inspector.get_columns(table)}:
            op.add_column(table, sa.Column(column, kind(), nullable=True))


def downgrade() -> None:
    for table, column, _kind in reversed(_COLUMNS):
        with op.batch_alter_table(table) as batch:
            batch.drop_column(column)
