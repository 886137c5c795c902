"""What became of a call dispatched by an orchestrator that died before journaling its outcome.

Every dispatch of a call has a task id derived from its idempotency key (`call_task_id`), the first
one journaled before it is published, so its state is readable in the result backend. A recoverer
settles the call from that state: a success is to be compensated, a failure left alone, and a call
still queued or running is revoked and claimed as abandoned in the same per-call state the worker
reads when it finishes (`call_state_key`): if it completes anyway, its worker undoes it, once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from orchestrator.saga.states import CallState
from workers.protocol import CALL_ABANDONED, CALL_FINISHED, META_PREFIX, call_state_key

__all__ = ["Settled", "settle"]

log = logging.getLogger(__name__)

_FINISHED_GRACE_S = 5.0


@dataclass(frozen=True)
class Settled:
    """`state`: succeeded (undo it), failed (nothing to undo) or abandoned (revoked; its worker undoes
    it if it finishes). `meta` is the deciding attempt's stored final state, when there is one."""

    state: CallState
    task_id: str
    meta: dict[str, Any] | None = None


async def settle(
    client: redis.Redis,
    task_ids: Sequence[str],
    revoke: Callable[[str], None],
    *,
    mark_ttl_s: int,
) -> Settled:
    """Settle one call from the states of its dispatches, first attempt first.

    A dispatch again happens only after the previous attempt's worker was lost, so the first final
    attempt decides; attempts before it that never finished are revoked and claimed as abandoned.
    Claiming is one `SET NX`: if the worker marked the call finished first, it succeeded.
    """
    if not task_ids:
        raise ValueError("a call has at least one task id")
    for index, task_id in enumerate(task_ids):
        meta = _stored(client, task_id)
        status = meta.get("status") if meta else None
        if status == "SUCCESS":
            return Settled(CallState.SUCCEEDED, task_id, meta)
        if status == "FAILURE":
            if _worker_lost(meta) and index + 1 < len(task_ids):
                continue  # the executor may have dispatched it again
            return Settled(CallState.FAILED, task_id, meta)
        # Queued, running, retrying, lost, or revoked (a threads pool still runs a revoked task).
        if not client.set(call_state_key(task_id), CALL_ABANDONED, nx=True, ex=mark_ttl_s):
            mark = client.get(call_state_key(task_id))
            if mark in (CALL_FINISHED.encode(), CALL_FINISHED):
                # Its worker finished it first (the mark is set on success only): collect it.
                return Settled(CallState.SUCCEEDED, task_id, await _await_final(client, task_id))
        revoke(task_id)
    return Settled(CallState.ABANDONED, task_ids[0])


def _worker_lost(meta: dict[str, Any] | None) -> bool:
    result = meta.get("result") if meta else None
    return isinstance(result, dict) and result.get("exc_type") == "WorkerLostError"


def _stored(client: redis.Redis, task_id: str) -> dict[str, Any] | None:
    raw = client.get(META_PREFIX + task_id)
    if not raw:
        return None
    meta: dict[str, Any] = json.loads(raw)
    return meta


async def _await_final(client: redis.Redis, task_id: str) -> dict[str, Any] | None:
    """The stored state of a task its worker just marked finished: written right after the mark."""
    deadline = time.monotonic() + _FINISHED_GRACE_S
    while True:
        meta = _stored(client, task_id)
        if meta is not None and meta.get("status") == "SUCCESS":
            return meta
        if time.monotonic() >= deadline:
            log.warning("%s was marked finished but its result never arrived", task_id)
            return None
        await asyncio.sleep(0.05)
