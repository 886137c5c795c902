"""The SQL log of invocations, tool calls and compensations (SQLAlchemy 2; SQLite by default).

Every saga step is written here before and after it happens, so an orchestrator that dies mid-saga
leaves enough for `toolfleet recover` to finish its work, and operators can read what ran where.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from workers.invocation import InvocationContext
from workers.protocol import ToolExecution, ToolExecutionRequest, ToolOutcome

__all__ = ["CallRecord", "CompensationRecord", "InvocationRecord", "Journal", "owner_id"]

_metadata = sa.MetaData()

invocations = sa.Table(
    "toolfleet_invocations",
    _metadata,
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
)

tool_calls = sa.Table(
    "toolfleet_tool_calls",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "invocation_id", sa.String(36), sa.ForeignKey("toolfleet_invocations.id"), nullable=False, index=True
    ),
    sa.Column("sequence", sa.Integer, nullable=False),
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
)

compensations = sa.Table(
    "toolfleet_compensations",
    _metadata,
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


def owner_id() -> str:
    """Who runs an invocation: host and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime | None) -> datetime | None:
    # SQLite hands back naive datetimes; everything here is UTC.
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


@dataclass(frozen=True)
class InvocationRecord:
    id: str
    service_name: str | None
    memory_id: str
    user_message: str | None
    state: str
    owner: str
    started_at: datetime
    heartbeat_at: datetime
    finished_at: datetime | None
    error: str | None
    invocation_json: dict[str, Any]


@dataclass(frozen=True)
class CallRecord:
    id: int
    invocation_id: str
    sequence: int
    call_id: str | None
    tool: str
    arguments: str
    pool: str | None
    compensable: bool
    idempotency_key: str
    state: str
    outcome: str | None
    result: str | None
    result_object: Any
    task_id: str | None
    worker: str | None
    started_at: datetime
    finished_at: datetime | None

    @property
    def request(self) -> ToolExecutionRequest:
        return ToolExecutionRequest(self.call_id, self.tool, self.arguments)

    def execution(self) -> ToolExecution:
        """The `ToolExecution` a compensation receives, rebuilt from the log."""
        return ToolExecution(
            request=self.request,
            result=self.result or "",
            result_object=self.result_object,
            status=self.outcome or "success",
            started_at=self.started_at,
            finished_at=self.finished_at,
            task_id=self.task_id,
            pool=self.pool,
            worker=self.worker,
        )


@dataclass(frozen=True)
class CompensationRecord:
    id: int
    invocation_id: str
    tool_call_id: int
    tool: str
    state: str
    attempts: int
    error: str | None
    task_id: str | None
    reason: str | None
    created_at: datetime
    updated_at: datetime


class Journal:
    """Reads and writes the saga log. `Journal(url)` creates its tables when missing."""

    def __init__(self, url_or_engine: str | Engine = "sqlite:///toolfleet.db") -> None:
        if isinstance(url_or_engine, str):
            connect_args = {"timeout": 30} if url_or_engine.startswith("sqlite") else {}
            self.engine = sa.create_engine(url_or_engine, connect_args=connect_args)
        else:
            self.engine = url_or_engine
        _metadata.create_all(self.engine)

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as connection:
            yield connection

    # -- invocations ------------------------------------------------------------------------------

    def start_invocation(self, context: InvocationContext, invocation_json: dict[str, Any]) -> None:
        now = _now()
        with self._tx() as tx:
            tx.execute(
                sa.insert(invocations).values(
                    id=str(context.invocation_id),
                    service_name=context.service_name,
                    memory_id=context.memory_id,
                    user_message=context.user_message,
                    state="running",
                    owner=owner_id(),
                    started_at=now,
                    heartbeat_at=now,
                    invocation_json=json.dumps(invocation_json),
                )
            )

    def set_invocation_state(self, invocation_id: str, state: str, error: str | None = None) -> None:
        values: dict[str, Any] = {"state": state, "heartbeat_at": _now()}
        if state in ("succeeded", "failed"):
            values["finished_at"] = _now()
        if error is not None:
            values["error"] = error[:4000]
        with self._tx() as tx:
            tx.execute(sa.update(invocations).where(invocations.c.id == invocation_id).values(**values))

    def heartbeat(self, invocation_id: str) -> None:
        with self._tx() as tx:
            tx.execute(
                sa.update(invocations).where(invocations.c.id == invocation_id).values(heartbeat_at=_now())
            )

    def claim(self, invocation_id: str, stale_before: datetime) -> bool:
        """Take over an unfinished invocation whose owner stopped beating; atomic across recoverers."""
        with self._tx() as tx:
            claimed = tx.execute(
                sa.update(invocations)
                .where(
                    invocations.c.id == invocation_id,
                    invocations.c.state.in_(("running", "compensating")),
                    invocations.c.heartbeat_at <= stale_before,
                )
                .values(owner=owner_id(), heartbeat_at=_now(), state="compensating")
            ).rowcount
        return bool(claimed)

    # -- tool calls -------------------------------------------------------------------------------

    def record_intent(
        self,
        invocation_id: str,
        sequence: int,
        request: ToolExecutionRequest,
        *,
        pool: str | None,
        compensable: bool,
        idempotency_key: str,
    ) -> int:
        """Write the call before it is dispatched; returns the row id."""
        with self._tx() as tx:
            result = tx.execute(
                sa.insert(tool_calls).values(
                    invocation_id=invocation_id,
                    sequence=sequence,
                    call_id=request.id,
                    tool=request.name,
                    arguments=request.arguments,
                    pool=pool,
                    compensable=compensable,
                    idempotency_key=idempotency_key,
                    state="dispatched",
                    started_at=_now(),
                )
            )
            key = result.inserted_primary_key
            assert key is not None
            return int(key[0])

    def record_outcome(self, call_row: int, outcome: ToolOutcome, result_text: str) -> None:
        state = "failed" if outcome.is_error else "succeeded"
        with self._tx() as tx:
            tx.execute(
                sa.update(tool_calls)
                .where(tool_calls.c.id == call_row)
                .values(
                    state=state,
                    outcome=outcome.kind.value,
                    result=result_text,
                    result_object=json.dumps(outcome.result_object)
                    if outcome.result_object is not None
                    else None,
                    task_id=outcome.task_id,
                    worker=outcome.worker,
                    finished_at=_now(),
                )
            )

    def set_call_state(self, call_row: int, state: str) -> None:
        with self._tx() as tx:
            tx.execute(sa.update(tool_calls).where(tool_calls.c.id == call_row).values(state=state))

    def calls(self, invocation_id: str) -> list[CallRecord]:
        with self.engine.connect() as connection:
            rows = connection.execute(
                sa.select(tool_calls)
                .where(tool_calls.c.invocation_id == invocation_id)
                .order_by(tool_calls.c.sequence)
            ).mappings()
            return [_call(row) for row in rows]

    # -- compensations ----------------------------------------------------------------------------

    def plan_compensations(self, invocation_id: str, calls: Sequence[CallRecord], reason: str) -> None:
        """Write one pending compensation per call (idempotent: a planned one is kept)."""
        now = _now()
        with self._tx() as tx:
            planned = set(
                tx.execute(
                    sa.select(compensations.c.tool_call_id).where(
                        compensations.c.invocation_id == invocation_id
                    )
                ).scalars()
            )
            for call in calls:
                if call.id in planned:
                    continue
                tx.execute(
                    sa.insert(compensations).values(
                        invocation_id=invocation_id,
                        tool_call_id=call.id,
                        tool=call.tool,
                        state="pending",
                        attempts=0,
                        reason=reason,
                        created_at=now,
                        updated_at=now,
                    )
                )

    def compensation_running(self, call_row: int, task_id: str | None) -> None:
        with self._tx() as tx:
            tx.execute(
                sa.update(compensations)
                .where(compensations.c.tool_call_id == call_row)
                .values(
                    state="running", task_id=task_id, attempts=compensations.c.attempts + 1, updated_at=_now()
                )
            )

    def compensation_finished(self, call_row: int, ok: bool, error: str | None = None) -> None:
        with self._tx() as tx:
            tx.execute(
                sa.update(compensations)
                .where(compensations.c.tool_call_id == call_row)
                .values(state="succeeded" if ok else "failed", error=error, updated_at=_now())
            )
            tx.execute(
                sa.update(tool_calls)
                .where(tool_calls.c.id == call_row)
                .values(state="compensated" if ok else "compensation_failed")
            )

    def compensations(
        self, invocation_id: str | None = None, *, state: str | None = None
    ) -> list[CompensationRecord]:
        query = sa.select(compensations).order_by(compensations.c.id)
        if invocation_id is not None:
            query = query.where(compensations.c.invocation_id == invocation_id)
        if state is not None:
            query = query.where(compensations.c.state == state)
        with self.engine.connect() as connection:
            return [_compensation(row) for row in connection.execute(query).mappings()]

    # -- reading ----------------------------------------------------------------------------------

    def invocation(self, invocation_id: str) -> InvocationRecord | None:
        with self.engine.connect() as connection:
            row = (
                connection.execute(sa.select(invocations).where(invocations.c.id == invocation_id))
                .mappings()
                .first()
            )
        return _invocation(row) if row is not None else None

    def invocations(self, *, limit: int = 50, state: str | None = None) -> list[InvocationRecord]:
        query = sa.select(invocations).order_by(invocations.c.started_at.desc()).limit(limit)
        if state is not None:
            query = query.where(invocations.c.state == state)
        with self.engine.connect() as connection:
            return [_invocation(row) for row in connection.execute(query).mappings()]

    def unfinished(self, stale_after_s: float) -> list[InvocationRecord]:
        """Invocations left running or compensating whose owner has not beaten for `stale_after_s`."""
        stale_before = _now() - timedelta(seconds=stale_after_s)
        with self.engine.connect() as connection:
            rows = connection.execute(
                sa.select(invocations)
                .where(
                    invocations.c.state.in_(("running", "compensating")),
                    invocations.c.heartbeat_at <= stale_before,
                )
                .order_by(invocations.c.started_at)
            ).mappings()
            return [_invocation(row) for row in rows]


def _invocation(row: Any) -> InvocationRecord:
    return InvocationRecord(
        id=row["id"],
        service_name=row["service_name"],
        memory_id=row["memory_id"],
        user_message=row["user_message"],
        state=row["state"],
        owner=row["owner"],
        started_at=_aware(row["started_at"]) or _now(),
        heartbeat_at=_aware(row["heartbeat_at"]) or _now(),
        finished_at=_aware(row["finished_at"]),
        error=row["error"],
        invocation_json=json.loads(row["invocation_json"] or "{}"),
    )


def _call(row: Any) -> CallRecord:
    return CallRecord(
        id=row["id"],
        invocation_id=row["invocation_id"],
        sequence=row["sequence"],
        call_id=row["call_id"],
        tool=row["tool"],
        arguments=row["arguments"],
        pool=row["pool"],
        compensable=bool(row["compensable"]),
        idempotency_key=row["idempotency_key"],
        state=row["state"],
        outcome=row["outcome"],
        result=row["result"],
        result_object=json.loads(row["result_object"]) if row["result_object"] else None,
        task_id=row["task_id"],
        worker=row["worker"],
        started_at=_aware(row["started_at"]) or _now(),
        finished_at=_aware(row["finished_at"]),
    )


def _compensation(row: Any) -> CompensationRecord:
    return CompensationRecord(
        id=row["id"],
        invocation_id=row["invocation_id"],
        tool_call_id=row["tool_call_id"],
        tool=row["tool"],
        state=row["state"],
        attempts=row["attempts"],
        error=row["error"],
        task_id=row["task_id"],
        reason=row["reason"],
        created_at=_aware(row["created_at"]) or _now(),
        updated_at=_aware(row["updated_at"]) or _now(),
    )
