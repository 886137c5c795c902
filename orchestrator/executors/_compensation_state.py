"""What became of a compensation its orchestrator stopped waiting for, read from its state in Redis.

A compensation whose dispatch did not end in a collected result (no live worker, its deadline, a lost
worker, a broker out of reach) may still run: a copy can sit in its pool's queue, or a worker can be
undoing the call right now. Before such a compensation is recorded failed, its state
(`workers.protocol.compensation_lock_key`) decides, atomically: nobody took it, and it is
marked `abandoned` so no copy runs it later (until an orchestrator dispatches it again); it ran,
and it is a success; or a worker is undoing it, and its end is awaited while that worker may hold it.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis

from workers import OutcomeKind, ToolOutcome
from workers.protocol import COMPENSATION_ABANDONED, compensation_lock_key

__all__ = ["reopen", "settle_unfinished"]

log = logging.getLogger(__name__)

_ABANDONED_TTL_S = 7 * 24 * 3600  # as long as a `done` mark: `toolfleet recover` may come much later
_POLL_S = 0.2
_REOPEN = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def reopen(client: redis.Redis, key: str) -> None:
    """Lift an `abandoned` mark before the compensation is dispatched again (`toolfleet recover`)."""
    try:
        client.eval(_REOPEN, 1, compensation_lock_key(key), COMPENSATION_ABANDONED)
    except redis.RedisError as exc:  # the dispatch fails or waits on the same Redis: it says so
        log.warning("could not read the state of compensation %s: %s", key, exc)


async def settle_unfinished(
    client: redis.Redis, key: str, outcome: ToolOutcome, hold_s: float
) -> ToolOutcome:
    """The outcome to record for a compensation whose dispatch ended in the error `outcome`.

    `outcome` itself once the compensation is marked abandoned (nobody undid the call, and no copy
    will); a success if a delivery undid it; if a delivery is undoing it, its end, awaited for up to
    `hold_s` (the longest a delivery holds it), else an error saying it is still running.
    """
    lock = compensation_lock_key(key)
    give_up = time.monotonic() + hold_s
    try:
        while True:
            if client.set(lock, COMPENSATION_ABANDONED, nx=True, ex=_ABANDONED_TTL_S):
                return outcome
            holder = client.get(lock)
            if holder is None:
                continue  # the holder failed and let go between the two reads: claim it again
            text = holder.decode(errors="replace") if isinstance(holder, bytes) else str(holder)
            if text == "done":
                log.warning("compensation %s ran although its dispatch ended %s", key, outcome.kind.value)
                return ToolOutcome(kind=OutcomeKind.SUCCESS, text="Compensated")
            if text == COMPENSATION_ABANDONED:
                return outcome
            if time.monotonic() >= give_up:
                worker = text.partition("|")[0]
                return ToolOutcome(
                    kind=OutcomeKind.EXECUTION_ERROR,
                    text=f"Compensation still running on worker {worker} after its deadline "
                    f"({outcome.text}); `toolfleet recover` reads how it ended",
                    error_type="CompensationInProgress",
                )
            await asyncio.sleep(_POLL_S)
    except redis.RedisError as exc:
        log.warning(
            "could not read the state of compensation %s (%s); recorded as %s", key, exc, outcome.kind.value
        )
        return outcome
