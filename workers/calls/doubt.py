"""Calls in doubt: a call of a compensable tool whose worker was lost midway may or may not have made
its effect, so it is undone all the same (the compensation must undo what exists under the call's
idempotency key, and nothing else when nothing does).

That undo is locked and identified by a key of its own, apart from the call's: a worker that was only
stopped, not dead, may still finish the call after it, and the undo of that late finish must still run
once, not find the call already undone."""

from __future__ import annotations

from workers.protocol import OutcomeKind, ToolExecution

__all__ = ["IN_DOUBT_SUFFIX", "in_doubt", "undo_key"]

IN_DOUBT_SUFFIX = "~in-doubt"


def in_doubt(execution: ToolExecution) -> bool:
    """Whether `execution` is a call whose worker was lost before it told its outcome."""
    return execution.status == OutcomeKind.WORKER_LOST.value


def undo_key(idempotency_key: str, execution: ToolExecution) -> str:
    """What the task id and the lock of the compensation of `execution` follow from."""
    return idempotency_key + IN_DOUBT_SUFFIX if in_doubt(execution) else idempotency_key
