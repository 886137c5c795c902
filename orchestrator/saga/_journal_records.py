"""The journal's rows as frozen records, read back from SQL rows."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.saga._journal_crypto import JournalCipher
from orchestrator.saga.states import CallState, CompensationState, InvocationState
from workers.protocol import ToolExecution, ToolExecutionRequest

__all__ = [
    "CallRecord",
    "CompensationRecord",
    "InvocationRecord",
    "call_record",
    "compensation_record",
    "invocation_record",
    "utc_now",
]


def utc_now() -> datetime:
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
    state: InvocationState
    owner: str
    started_at: datetime
    heartbeat_at: datetime
    finished_at: datetime | None
    error: str | None
    invocation_json: dict[str, Any]
    final_answer: str | None = None  # None: no answer (failed, returned a tool result, or older row)


@dataclass(frozen=True)
class CallRecord:
    id: int
    invocation_id: str
    sequence: int
    turn: int | None  # the model turn that asked for it; None in rows older than the column
    call_id: str | None
    tool: str
    arguments: str
    pool: str | None
    compensable: bool
    idempotency_key: str
    state: CallState
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
    state: CompensationState
    attempts: int
    error: str | None
    task_id: str | None
    reason: str | None
    created_at: datetime
    updated_at: datetime


def invocation_record(row: Any, cipher: JournalCipher) -> InvocationRecord:
    return InvocationRecord(
        id=row["id"],
        service_name=row["service_name"],
        memory_id=row["memory_id"],
        user_message=row["user_message"],
        state=InvocationState(row["state"]),
        owner=row["owner"],
        started_at=_aware(row["started_at"]) or utc_now(),
        heartbeat_at=_aware(row["heartbeat_at"]) or utc_now(),
        finished_at=_aware(row["finished_at"]),
        error=row["error"],
        invocation_json=json.loads(cipher.open(row["invocation_json"] or "{}", invocation_id=row["id"])),
        final_answer=row["final_answer"],
    )


def call_record(row: Any) -> CallRecord:
    return CallRecord(
        id=row["id"],
        invocation_id=row["invocation_id"],
        sequence=row["sequence"],
        turn=row["turn"],
        call_id=row["call_id"],
        tool=row["tool"],
        arguments=row["arguments"],
        pool=row["pool"],
        compensable=bool(row["compensable"]),
        idempotency_key=row["idempotency_key"],
        state=CallState(row["state"]),
        outcome=row["outcome"],
        result=row["result"],
        result_object=json.loads(row["result_object"]) if row["result_object"] else None,
        task_id=row["task_id"],
        worker=row["worker"],
        started_at=_aware(row["started_at"]) or utc_now(),
        finished_at=_aware(row["finished_at"]),
    )


def compensation_record(row: Any) -> CompensationRecord:
    return CompensationRecord(
        id=row["id"],
        invocation_id=row["invocation_id"],
        tool_call_id=row["tool_call_id"],
        tool=row["tool"],
        state=CompensationState(row["state"]),
        attempts=row["attempts"],
        error=row["error"],
        task_id=row["task_id"],
        reason=row["reason"],
        created_at=_aware(row["created_at"]) or utc_now(),
        updated_at=_aware(row["updated_at"]) or utc_now(),
    )
