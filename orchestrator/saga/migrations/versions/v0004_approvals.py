"""Human approvals: a paused invocation's state, and one row per call waiting for a person.

An invocation whose model asked for calls that need approval pauses: its state (the conversation,
the calls of the batch, what already ran) is kept, sealed like its parameters, in the invocation's
`paused_state`, and each call waiting is a row of `toolfleet_approvals`, bound to its arguments by
their hash. Rows written before this revision have no paused state, and there are no approvals.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

_INVOCATIONS, _COLUMN, _APPROVALS = "toolfleet_invocations", "paused_state", "toolfleet_approvals"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    # A database whose tables `create_all` made from newer models already has them.
    if _COLUMN not in {c["name"] for c in inspector.get_columns(_INVOCATIONS)}:
        op.add_column(_INVOCATIONS, sa.Column(_COLUMN, sa.Text(), nullable=True))
    if not inspector.has_table(_APPROVALS):
        op.create_table(
            _APPROVALS,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("invocation_id", sa.String(36), sa.ForeignKey(f"{_INVOCATIONS}.id"), nullable=False),
            sa.Column("call_id", sa.String(255), nullable=False),
            sa.Column("tool", sa.String(255), nullable=False),
            sa.Column("pool", sa.String(255)),
            sa.Column("arguments", sa.Text, nullable=False),
            sa.Column("arguments_hash", sa.String(64), nullable=False),
            sa.Column("state", sa.String(32), nullable=False),
            sa.Column("approved_arguments", sa.Text),
            sa.Column("reason", sa.Text),
            sa.Column("requested_by", sa.String(255)),
            sa.Column("decided_by", sa.String(255)),
            sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("decided_at", sa.DateTime(timezone=True)),
            sa.UniqueConstraint("invocation_id", "call_id", name="uq_toolfleet_approvals_call"),
        )
        op.create_index("ix_toolfleet_approvals_state", _APPROVALS, ["state"])
        op.create_index("ix_toolfleet_approvals_invocation_id", _APPROVALS, ["invocation_id"])


def downgrade() -> None:
    op.drop_table(_APPROVALS)
    with op.batch_alter_table(_INVOCATIONS) as batch:
        batch.drop_column(_COLUMN)
