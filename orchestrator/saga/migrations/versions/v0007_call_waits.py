"""How long a call waited before it was published, and for what.

A call of a tool with a fleet-wide concurrency or rate limit may wait for its slot, or its turn,
before it is published; the journal keeps how long (`waited_ms`) and for what (`wait_reason`:
`concurrency`, `rate_limit`), so `toolfleet show` and the run view can say it. Both columns are
nullable: calls that did not wait, and rows written before this revision, have none.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

_TABLE = "toolfleet_tool_calls"
_COLUMNS: dict[str, sa.types.TypeEngine[Any]] = {"waited_ms": sa.Integer(), "wait_reason": sa.String(32)}


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    # A database whose tables `create_all` made from newer models already has the columns.
    present = {c["name"] for c in inspector.get_columns(_TABLE)}
    for name, kind in _COLUMNS.items():
        if name not in present:
            op.add_column(_TABLE, sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(_TABLE) as batch:
        for name in reversed(list(_COLUMNS)):
            batch.drop_column(name)
