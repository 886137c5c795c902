"""The journal's and the conversation store's tables, as `create_all` made them before migrations.

A database whose tables were made that way has no version row: this revision creates only the tables
that are missing, so such a database keeps its tables and rows and is marked at this revision.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def _create_invocations() -> None:
    op.create_table(
        "toolfleet_invocations",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("service_name", sa.String(255)),
        sa.Column("memory_id", sa.String(255), nullable=False),
        sa.Column("user_message", sa.Text),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("error", sa.Text),
        sa.Column("invocation_json", sa.Text),
    )


def _create_tool_calls() -> None:
    op.create_table(
        "toolfleet_tool_calls",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("invocation_id", sa.String(36), sa.ForeignKey("toolfleet_invocations.id"), nullable=False),
        sa.Column("sequence", sa.Integer, nullable=False),
        sa.Column("call_id", sa.String(255)),
        sa.Column("tool", sa.String(255), nullable=False),
        sa.Column("arguments", sa.Text, nullable=False),
        sa.Column("pool", sa.String(255)),
        sa.Column("compensable", sa.Boolean, nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("outcome", sa.String(32)),
        sa.Column("result", sa.Text),
        sa.Column("result_object", sa.Text),
        sa.Column("task_id", sa.String(255)),
        sa.Column("worker", sa.String(255)),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_toolfleet_tool_calls_invocation_id", "toolfleet_tool_calls", ["invocation_id"])


def _create_compensations() -> None:
    op.create_table(
        "toolfleet_compensations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("invocation_id", sa.String(36), sa.ForeignKey("toolfleet_invocations.id"), nullable=False),
        sa.Column(
            "tool_call_id", sa.Integer, sa.ForeignKey("toolfleet_tool_calls.id"), nullable=False, unique=True
        ),
        sa.Column("tool", sa.String(255), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("task_id", sa.String(255)),
        sa.Column("reason", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_toolfleet_compensations_invocation_id", "toolfleet_compensations", ["invocation_id"])


def _create_chat_memory() -> None:
    op.create_table(
        "toolfleet_chat_memory",
        sa.Column("memory_id", sa.String(255), primary_key=True),
        sa.Column("messages", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    # In dependency order: the calls and compensations refer to the invocations.
    for name, create in (
        ("toolfleet_invocations", _create_invocations),
        ("toolfleet_tool_calls", _create_tool_calls),
        ("toolfleet_compensations", _create_compensations),
        ("toolfleet_chat_memory", _create_chat_memory),
    ):
        if name not in existing:
            create()


def downgrade() -> None:
    raise NotImplementedError("toolfleet's first revision is not undone: that would drop the journal")
