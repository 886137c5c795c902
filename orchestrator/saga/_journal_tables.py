"""The journal's SQL schema: the invocations, tool calls, compensations and approvals tables."""

from __future__ import annotations

import os
import socket

import sqlalchemy as sa

from workers.tenants import DEFAULT_TENANT

__all__ = [
    "approvals",
    "compensations",
    "invocations",
    "metadata",
    "owned_update",
    "owner_id",
    "tool_calls",
    "turns",
]


metadata = sa.MetaData()

invocations = sa.Table(
    "toolfleet_invocations",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("service_name", sa.String(255)),
    sa.Column("memory_id", sa.String(255), nullable=False),
    sa.Column("user_message", sa.Text),
    sa.Column("state", sa.String(32), nullable=False),  # running, compensating, succeeded, failed
    sa.Column("owner", sa.String(255), nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    sa.Column("error", sa.Text),
    sa.Column("invocation_json", sa.Text),  # context and parameters, to compensate on recovery
    sa.Column("final_answer", sa.Text),  # the model's last answer, when the invocation ended with one
    sa.Column("paused_state", sa.Text),  # sealed JSON: what a paused invocation resumes from
    sa.Column("opening", sa.Text),  # sealed JSON: the conversation it started from (its checkpoint)
    # whose it is (the invocation parameter `tenant`), in clear: any replica filters on it in SQL
    sa.Column("tenant", sa.String(64), nullable=False, server_default=DEFAULT_TENANT, index=True),
)

tool_calls = sa.Table(
    "toolfleet_tool_calls",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "invocation_id", sa.String(36), sa.ForeignKey("toolfleet_invocations.id"), nullable=False, index=True
    ),
    sa.Column("sequence", sa.Integer, nullable=False),
    sa.Column("turn", sa.Integer),  # the model turn (round trip, from 1) that asked for the call
    sa.Column("call_id", sa.String(255)),
    sa.Column("tool", sa.String(255), nullable=False),
    sa.Column("arguments", sa.Text, nullable=False),
    sa.Column("pool", sa.String(255)),
    sa.Column("compensable", sa.Boolean, nullable=False, default=False),
    sa.Column("idempotency_key", sa.String(255), nullable=False),
    # dispatched (intent), succeeded, failed, compensated, compensation_failed
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("outcome", sa.String(32)),
    sa.Column("result", sa.Text),
    sa.Column("result_object", sa.Text),
    sa.Column("task_id", sa.String(255)),
    sa.Column("worker", sa.String(255)),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    sa.Column("last_progress", sa.Text),  # the last progress report of its tool (JSON), if any
    sa.Column("waited_ms", sa.Integer),  # how long it waited before it was published, if it did
    sa.Column("wait_reason", sa.String(32)),  # ... for what: concurrency, rate_limit
    # how long it waited in its pool's queue, from its publish to a worker starting it, as the worker
    # measured it (ms); None when unknown (in process, retried, an older worker, no outcome yet)
    sa.Column("queued_ms", sa.Integer),
)

compensations = sa.Table(
    "toolfleet_compensations",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "invocation_id", sa.String(36), sa.ForeignKey("toolfleet_invocations.id"), nullable=False, index=True
    ),
    sa.Column(
        "tool_call_id", sa.Integer, sa.ForeignKey("toolfleet_tool_calls.id"), nullable=False, unique=True
    ),
    sa.Column("tool", sa.String(255), nullable=False),
    sa.Column("state", sa.String(32), nullable=False),  # pending, running, succeeded, failed
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("error", sa.Text),
    sa.Column("task_id", sa.String(255)),
    sa.Column("reason", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

# Checkpoints: each model response that asked for tools, journaled before any of its calls is
# published (with their intents, in one transaction).
turns = sa.Table(
    "toolfleet_turns",
    metadata,
    sa.Column("invocation_id", sa.String(36), sa.ForeignKey("toolfleet_invocations.id"), primary_key=True),
    sa.Column("turn", sa.Integer, primary_key=True),  # the model turn (round trip), from 1
    sa.Column("message", sa.Text, nullable=False),  # the AI message, JSON
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

approvals = sa.Table(
    "toolfleet_approvals",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "invocation_id", sa.String(36), sa.ForeignKey("toolfleet_invocations.id"), nullable=False, index=True
    ),
    sa.Column("call_id", sa.String(255), nullable=False),
    sa.Column("tool", sa.String(255), nullable=False),
    sa.Column("pool", sa.String(255)),
    sa.Column("arguments", sa.Text, nullable=False),  # as the model asked
    sa.Column("arguments_hash", sa.String(64), nullable=False),  # what an approval is bound to
    sa.Column("state", sa.String(32), nullable=False, index=True),  # pending, approved, rejected, expired
    sa.Column("approved_arguments", sa.Text),  # when approved with edited arguments
    sa.Column("reason", sa.Text),  # of a rejection
    sa.Column("requested_by", sa.String(255)),
    sa.Column("decided_by", sa.String(255)),
    sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("decided_at", sa.DateTime(timezone=True)),
    sa.UniqueConstraint("invocation_id", "call_id", name="uq_toolfleet_approvals_call"),
)


_owner: tuple[int, str] = (-1, "")


def owner_id() -> str:
    """Who runs an invocation: host and process (asked of the system once per process: it is read
    with every invocation's start, beat and end)."""
    global _owner
    pid = os.getpid()
    if _owner[0] != pid:  # a forked child is an owner of its own
        _owner = (pid, f"{socket.gethostname()}:{pid}")
    return _owner[1]


def owned_update(owner: bool, state: bool) -> sa.Update:
    """An update of one invocation's row (bound `b_id`), only while its owner is `b_owner` (with
    `owner`) and its state `b_state` (with `state`): built once per shape, its SET given as the
    execution's parameters, so that it is compiled once (the journal's hot path)."""
    return _OWNED_UPDATES[(owner, state)]


def _owned(owner: bool, state: bool) -> sa.Update:
    update = sa.update(invocations).where(invocations.c.id == sa.bindparam("b_id"))
    if owner:
        update = update.where(invocations.c.owner == sa.bindparam("b_owner"))
    return update.where(invocations.c.state == sa.bindparam("b_state")) if state else update


_OWNED_UPDATES = {(owner, state): _owned(owner, state) for owner in (False, True) for state in (False, True)}
