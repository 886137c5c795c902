"""Whose an invocation is: its tenant, kept in clear beside it.

`toolfleet serve` gives each request the tenant of its key and starts its invocations with the
invocation parameter `tenant`; the journal keeps that tenant in a column of its own, so that any
replica, after any restart, shows a tenant only its own invocations, and lists them with a filter in
SQL (indexed). Rows written before this revision are the default tenant's.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None

_TABLE, _COLUMN, _INDEX = "toolfleet_invocations", "tenant", "ix_toolfleet_invocations_tenant"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    # A database whose tables `create_all` made from newer models already has the column.
    if _COLUMN not in {c["name"] for c in inspector.get_columns(_TABLE)}:
        # the server default fills the rows already there: they are the default tenant's
        op.add_column(_TABLE, sa.Column(_COLUMN, sa.String(64), nullable=False, server_default="default"))
    if _INDEX not in {i["name"] for i in inspector.get_indexes(_TABLE)}:
        op.create_index(_INDEX, _TABLE, [_COLUMN])


def downgrade() -> None:
    op.drop_index(_INDEX, table_name=_TABLE)
    with op.batch_alter_table(_TABLE) as batch:
        batch.drop_column(_COLUMN)
