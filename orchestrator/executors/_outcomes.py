"""How a call's stored task state becomes its `ToolOutcome`: the result a task returned, a failure it
carried, a lost worker, a revoked or time-limited task, or any other exception."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from orchestrator.executors._collector import LOST, NO_WORKER
from workers import OutcomeKind, ToolDefinition, ToolOutcome
from workers.protocol import NotRegisteredDetail, is_compensation_task, outcome_from_failure

_TIME_LIMIT_ERRORS = {"TimeLimitExceeded", "SoftTimeLimitExceeded", "Terminated"}


def seconds_text(value: float) -> str:
    return f"{value:g}"


def outcome_of_meta(meta: dict[str, Any], definition: ToolDefinition, timeout_s: float) -> ToolOutcome:
    status = meta.get("status")
    name = definition.name
    if status == "SUCCESS":
        return outcome_of_success(meta, name)
    if status == NO_WORKER:
        return no_worker_outcome(definition)
    if status == LOST and meta.get("heartbeat_timeout_s") is not None:
        return failed_outcome(
            OutcomeKind.WORKER_LOST,
            f"Tool '{name}' sent no heartbeat for {seconds_text(float(meta['heartbeat_timeout_s']))} s "
            f"(its heartbeat_timeout_s) on worker {meta.get('worker')}: declared lost before finishing",
            "WorkerLostError",
        )
    if status == LOST:
        return failed_outcome(
            OutcomeKind.WORKER_LOST,
            f"Tool '{name}' lost its worker {meta.get('worker')} before finishing",
            "WorkerLostError",
        )
    if status == "REVOKED":
        return failed_outcome(
            OutcomeKind.TIMED_OUT,
            f"Tool '{name}' did not finish within {seconds_text(timeout_s)} s",
            "TimeoutError",
        )
    result = meta.get("result")
    carried = outcome_from_failure(result)
    if carried is not None and carried.kind is OutcomeKind.TIMED_OUT and carried.error_type == "TimeoutError":
        # The worker's side of the deadline fired first (its time limit, or a timeout past it): the
        # same words as when this side's does, whichever wins the race.
        return dataclasses.replace(
            carried, text=f"Tool '{name}' did not finish within {seconds_text(timeout_s)} s"
        )
    if carried is not None:
        return carried
    exc_type = str(result.get("exc_type")) if isinstance(result, dict) else "Exception"
    message = result.get("exc_message") if isinstance(result, dict) else result
    if isinstance(message, list | tuple):
        message = " ".join(str(part) for part in message)
    if exc_type == "NotRegistered":
        return _not_registered(definition, result)
    if exc_type == "WorkerLostError":
        where = f" {worker_of(meta)}" if worker_of(meta) else ""
        return failed_outcome(
            OutcomeKind.WORKER_LOST,
            f"Tool '{name}' lost its worker{where} before finishing ({message})",
            exc_type,
        )
    if exc_type in _TIME_LIMIT_ERRORS:
        return failed_outcome(
            OutcomeKind.TIMED_OUT,
            f"Tool '{name}' did not finish within {seconds_text(timeout_s)} s",
            exc_type,
        )
    return failed_outcome(OutcomeKind.EXECUTION_ERROR, str(message or exc_type), exc_type)


def outcome_of_success(meta: dict[str, Any], name: str) -> ToolOutcome:
    """The outcome a task of tool `name` stored with its SUCCESS state (the tool's own outcome)."""
    result = meta.get("result")
    if isinstance(result, dict) and "kind" in result:
        return ToolOutcome.from_json(result)
    return failed_outcome(
        OutcomeKind.EXECUTION_ERROR, f"Tool '{name}' returned an unreadable result", "ProtocolError"
    )


def worker_of(meta: dict[str, Any]) -> str | None:
    """The worker that ran the call: named in the outcome the task stored, or in its STARTED state."""
    result = meta.get("result")
    candidates: list[Any] = [meta.get("worker")]
    if isinstance(result, dict):
        candidates += [result.get("worker"), result.get("hostname")]
        message = result.get("exc_message")
        if isinstance(message, list) and len(message) == 2 and isinstance(message[1], dict):
            candidates.append(message[1].get("worker"))
    return next((c for c in candidates if isinstance(c, str) and c), None)


def failed_outcome(kind: OutcomeKind, text: str, error_type: str) -> ToolOutcome:
    return ToolOutcome(kind=kind, text=text, error_type=error_type)


def no_worker_outcome(definition: ToolDefinition) -> ToolOutcome:
    return failed_outcome(
        OutcomeKind.NO_WORKER,
        f"No live worker serves pool '{definition.pool}' of tool '{definition.name}'",
        "NoWorkerError",
    )


def version_mismatch_outcome(
    definition: ToolDefinition, wanted: str, served: Mapping[str, int]
) -> ToolOutcome:
    """A call whose tool the pool's live workers serve, none at the version the model was given."""
    present = ", ".join(f"{version} ({n} worker{'' if n == 1 else 's'})" for version, n in served.items())
    return failed_outcome(
        OutcomeKind.NO_WORKER,
        f"No live worker of pool '{definition.pool}' serves tool '{definition.name}' at version {wanted}; "
        f"its live workers serve version{'' if len(served) == 1 else 's'} {present}",
        "NoWorkerError",
    )


def timed_out_outcome(definition: ToolDefinition, timeout_s: float, task_id: str, pool: str) -> ToolOutcome:
    """A call abandoned at its deadline."""
    outcome = failed_outcome(
        OutcomeKind.TIMED_OUT,
        f"Tool '{definition.name}' did not finish within {seconds_text(timeout_s)} s",
        "TimeoutError",
    )
    return dataclasses.replace(outcome, task_id=task_id, pool=pool)


def _not_registered(definition: ToolDefinition, result: Any) -> ToolOutcome:
    """The call reached a worker of the pool that does not serve its task: the pool's workers serve
    different tools. The worker names itself and its tools in the failure (`NotRegisteredDetail`);
    a worker that does not (plain Celery) is described as the one that received the call."""
    message = result.get("exc_message") if isinstance(result, dict) else None
    parts = list(message) if isinstance(message, list | tuple) else [message]
    task = str(parts[0]) if parts and parts[0] else ""
    detail = NotRegisteredDetail.from_json(parts[1] if len(parts) > 1 else None)
    what = f"Tool '{definition.name}'"
    if is_compensation_task(task):
        what = f"The compensation of tool '{definition.name}'"
    pool = (detail.pool if detail is not None else None) or definition.pool
    if detail is not None:
        served = ", ".join(detail.tools) if detail.tools else "no tool"
        text = (
            f"{what} is not served by worker '{detail.worker}' of pool '{pool}' "
            f"(its workers serve different tools: '{detail.worker}' serves {served})"
        )
    else:
        text = (
            f"{what} is not served by the worker of pool '{pool}' that received the call "
            "(its workers serve different tools)"
        )
    # A tool call is told to the model like a pool without workers; an undo that cannot run here is
    # recorded as failed at once (dispatching it again under its one task id would meet this failure).
    kind = OutcomeKind.EXECUTION_ERROR if is_compensation_task(task) else OutcomeKind.NO_WORKER
    return failed_outcome(kind, text, "NotRegistered")
