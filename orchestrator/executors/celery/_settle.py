"""What became of a call dispatched by an orchestrator that died before journaling its outcome.

A call has one task id, derived from its idempotency key (`call_task_id`) and journaled before it is
published, so its state is readable in the result backend. It is settled from that state: a success
is to be compensated, a failure left alone, and a call still queued or running is revoked and claimed
as abandoned in the same per-call state the worker reads when it finishes (`call_state_key`), the
claim the dispatcher makes at a deadline: if it completes anyway, its worker undoes it, once.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.executors.base import Settled
from orchestrator.executors.celery._dispatch import Dispatcher
from workers.protocol import CALL_FINISHED, call_state_key

__all__ = ["settle"]


async def settle(dispatcher: Dispatcher, task_id: str, revoke: Callable[[str], None]) -> Settled:
    """Settle the call of `task_id`, revoking it with `revoke` when it may still run.

    Claiming is the dispatcher's `SET NX`: if the worker marked the call finished first, it succeeded,
    and its result is awaited for the dispatcher's grace time; `meta` is None if it never arrives.
    Redis errors are raised: a state that cannot be read settles nothing.
    """
    meta = dispatcher.stored_state(task_id)
    status = meta.get("status") if meta else None
    if status == "SUCCESS":
        return Settled("succeeded", task_id, meta)
    if status == "FAILURE":
        return Settled("failed", task_id, meta)
    # Queued, running, retrying, lost, or revoked (a threads pool still runs a revoked task).
    if not dispatcher.mark_abandoned(task_id, raise_errors=True):
        mark = dispatcher.redis.get(call_state_key(task_id))
        if mark in (CALL_FINISHED.encode(), CALL_FINISHED):
            # Its worker finished it first (the mark is set on success only): collect it.
            final = await dispatcher.stored_result(task_id, raise_errors=True)
            success = final is not None and final.get("status") == "SUCCESS"
            return Settled("succeeded", task_id, final if success else None)
    revoke(task_id)
    return Settled("abandoned", task_id)
