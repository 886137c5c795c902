"""Checkpoints: what an invocation started from, and each model turn's response.

An invocation keeps the conversation it started from (sealed, as its parameters are), and each model
response that asked for tools is journaled before any of its calls is published, with the calls'
intents, in one transaction. With the calls' outcomes, that is enough for another process to carry an
adopted invocation on from where its owner died. Rows written before this revision have none: such
an invocation is compensated on recovery, as before.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

_INVOCATIONS, _OPENING = "toolfleet_invocations", "opening"
_TURNS = "toolfleet_turns"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    # A database whose tables `create_all` made from newer models already has them.
    if _OPENING not in {c["name"] for c in inspector.get_columns(_INVOCATIONS)}:
        op.add_column(_INVOCATIONS, sa.Column(_OPENING, sa.Text(), nullable=True))
    if _TURNS not in inspector.get_table_names():
        op.create_table(
            _TURNS,
            sa.Column(
                "invocation_id", sa.String(36), sa.ForeignKey("toolfleet_invocations.id"), primary_key=True
            ),
            sa.Column("turn", sa.Integer, primary_key=True),
            sa.Column("message", sa.Text, nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        )


def downgrade() -> None:
    op.drop_table(_TURNS)
    with op.batch_alter_table(_INVOCATIONS) as batch:
        batch.drop_column(_OPENING)
