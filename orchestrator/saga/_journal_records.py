"""The journal's rows as frozen records, read back from SQL rows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import RowMapping

from orchestrator.saga._journal_crypto import JournalCipher
from orchestrator.saga.states import CallState, CompensationState, InvocationState
from workers.protocol import ToolExecution, ToolExecutionRequest
from workers.tenants import DEFAULT_TENANT

__all__ = [
    "CallRecord",
    "CompensationRecord",
    "InvocationRecord",
    "call_record",
    "columns_of",
    "compensation_record",
    "invocation_record",
    "utc_now",
]


def utc_now() -> datetime:
    return datetime.now(UTC)


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
    # The column as stored: sealed with the journal's first key when one was set, else clear JSON.
    sealed_invocation_json: str | None = field(repr=False)
    # The journal's keys, which open `sealed_invocation_json` when `invocation_json` is read.
    cipher: JournalCipher = field(repr=False, compare=False)
    final_answer: str | None = None  # None: no answer (failed, returned a tool result, or older row)
    tenant: str = DEFAULT_TENANT  # whose it is: the invocation parameter `tenant` it started with

    @property
    def invocation_json(self) -> dict[str, Any]:
        """The invocation's context and parameters, opened on each read (only recovery needs them):
        `JournalKeyError` when they are sealed and no key of the journal opens them."""
        stored = self.sealed_invocation_json or "{}"
        opened: dict[str, Any] = json.loads(self.cipher.open(stored, invocation_id=self.id))
        return opened


_WAITED_FOR = {"concurrency": "for a concurrency slot", "rate_limit": "for its turn under a rate limit"}


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
    # The last progress its tool reported: `seq`, `fraction`, `message`, `data`, `at` (epoch seconds);
    # None when it reported none (or in rows older than the column).
    last_progress: dict[str, Any] | None = None
    # How long it waited before it was published (ms), and for what (`concurrency`, `rate_limit`);
    # None when it did not wait (or in rows older than the columns).
    waited_ms: int | None = None
    wait_reason: str | None = None
    # How long it waited in its pool's queue (ms), as its worker measured it; None when unknown.
    queued_ms: int | None = None

    @property
    def request(self) -> ToolExecutionRequest:
        return ToolExecutionRequest(self.call_id, self.tool, self.arguments)

    @property
    def waited(self) -> str | None:
        """How long it waited before it was published, and for what (`waited 1.20 s for a concurrency
        slot`); None when it did not wait."""
        if self.waited_ms is None:
            return None
        what = _WAITED_FOR.get(self.wait_reason or "", f"for {self.wait_reason}" if self.wait_reason else "")
        return f"waited {self.waited_ms / 1000:.2f} s {what}".rstrip()

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


def columns_of(row: RowMapping) -> dict[str, Any]:
    """The row's columns by name, its datetimes in UTC (SQLite hands them back naive)."""
    return {
        name: value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value
        for name, value in row.items()
    }


def invocation_record(row: RowMapping, cipher: JournalCipher) -> InvocationRecord:
    """The record of an invocations row; its parameters stay sealed until `invocation_json` is read."""
    values = columns_of(row)
    values["sealed_invocation_json"] = values.pop("invocation_json")
    values.pop("paused_state", None)  # opened only by whoever resumes the invocation
    values.pop("opening", None)  # opened only by whoever adopts it
    return InvocationRecord(**(values | {"state": InvocationState(values["state"]), "cipher": cipher}))


def call_record(row: RowMapping) -> CallRecord:
    values = columns_of(row)
    raw_object = values["result_object"]
    raw_progress = values.get("last_progress")
    return CallRecord(
        **(
            values
            | {
                "compensable": bool(values["compensable"]),
                "state": CallState(values["state"]),
                "result_object": json.loads(raw_object) if raw_object else None,
                "last_progress": json.loads(raw_progress) if raw_progress else None,
            }
        )
    )


def compensation_record(row: RowMapping) -> CompensationRecord:
    values = columns_of(row)
    return CompensationRecord(**(values | {"state": CompensationState(values["state"])}))
