"""Cancelling invocations: those running in this process, and, through Redis, those of any process.

Every invocation registers its task while it runs (`cancellable`). `cancel_here(id)` cancels it if it
runs in this process, from any thread. `request_cancel(redis_url, id)` asks every process: it sets
`CANCELLED_KEY` (read by `toolfleet serve` when an invocation it was asked to run starts) and publishes
the id on `CANCEL_CHANNEL`, which each process running invocations on the worker pools listens to (its
one listening thread per Redis, `orchestrator._subscription.on_message`). A cancelled invocation
ends as one whose caller cancelled it: its running calls are abandoned as at a deadline (revoked,
terminated on prefork pools, flagged for a cooperative tool), what succeeded is compensated, the
journal says `cancelled`, and the model is not asked again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

import redis

from orchestrator._subscription import on_message
from workers.protocol import CANCEL_CHANNEL, CANCELLED_KEY
from workers.redis_client import connect as connect_redis

__all__ = [
    "CANCEL_TTL_S",
    "call_cancellable",
    "cancel_call",
    "cancel_here",
    "cancel_invocation",
    "cancel_requested",
    "cancellable",
    "listen_for_cancels",
    "request_cancel",
]

log = logging.getLogger(__name__)

CANCEL_TTL_S = 24 * 3600  # how long a cancel request is remembered for an invocation yet to start

_running: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Task[object]]] = {}
_running_lock = threading.Lock()
_calls: dict[tuple[str, str], tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = {}


@contextlib.contextmanager
def cancellable(invocation_id: str, redis_url: str | None = None) -> Iterator[None]:
    """Register the current task as invocation `invocation_id` for the block. With `redis_url` (an
    invocation on the worker pools), this process listens for cancel requests on that Redis."""
    task = asyncio.current_task()
    if task is None:
        yield
        return
    with _running_lock:
        _running[invocation_id] = (asyncio.get_running_loop(), task)
    try:
        if redis_url is not None:
            listen_for_cancels(redis_url)
        yield
    finally:
        with _running_lock:
            if _running.get(invocation_id, (None, None))[1] is task:
                del _running[invocation_id]


@contextlib.contextmanager
def call_cancellable(invocation_id: str, call_id: str, cancel: Callable[[], None]) -> Iterator[None]:
    """Register how to cancel call `call_id` of an invocation for the block (on the running loop)."""
    key = (invocation_id, call_id)
    with _running_lock:
        _calls[key] = (asyncio.get_running_loop(), cancel)
    try:
        yield
    finally:
        with _running_lock:
            _calls.pop(key, None)


def cancel_call(invocation_id: str, call_id: str) -> bool:
    """Cancel one running call of an invocation of this process (from any thread); whether it ran."""
    with _running_lock:
        held = _calls.get((invocation_id, call_id))
    if held is None:
        return False
    loop, cancel = held
    loop.call_soon_threadsafe(cancel)
    return True


def cancel_here(invocation_id: str) -> bool:
    """Cancel invocation `invocation_id` if it runs in this process (from any thread); whether it did."""
    with _running_lock:
        held = _running.get(invocation_id)
    if held is None:
        return False
    loop, task = held

    def cancel_if_still_running() -> None:
        # on the invocation's loop: a task that left its block meanwhile (it ended, its end journaled)
        # is not cancelled after the fact
        with _running_lock:
            still = _running.get(invocation_id, (None, None))[1] is task
        if still:
            task.cancel()

    loop.call_soon_threadsafe(cancel_if_still_running)
    return True


def cancel_requested(redis_url: str, invocation_id: str) -> bool:
    """Whether a cancel of the invocation was requested through Redis (`CANCELLED_KEY`), perhaps
    before it ran here; False when Redis does not answer (a cancel published later still reaches it)."""
    client = connect_redis(redis_url, socket_timeout=5)
    try:
        return bool(client.exists(CANCELLED_KEY.format(invocation_id)))
    except redis.RedisError as exc:
        log.warning("whether invocation %s was cancelled is unknown: %s", invocation_id, exc)
        return False
    finally:
        client.close()


def cancel_invocation(invocation_id: str, redis_url: str | None) -> bool:
    """Cancel the invocation here if it runs here, and with `redis_url` ask every other process too;
    whether it ran here."""
    here = cancel_here(invocation_id)
    if redis_url is not None:
        request_cancel(redis_url, invocation_id)
    return here


def request_cancel(redis_url: str, invocation_id: str) -> int:
    """Ask every process to cancel invocation `invocation_id`; how many listeners heard it."""
    client = connect_redis(redis_url)
    try:
        client.set(CANCELLED_KEY.format(invocation_id), b"1", ex=CANCEL_TTL_S)
        return int(client.publish(CANCEL_CHANNEL, invocation_id))
    finally:
        client.close()


def listen_for_cancels(redis_url: str) -> None:
    """Listen to cancel requests on `redis_url` in this process (its one listener of that Redis)."""
    on_message(redis_url, CANCEL_CHANNEL, _cancel_published)


def _cancel_published(invocation_id: str) -> None:
    if cancel_here(invocation_id):
        log.info("invocation %s cancelled on request", invocation_id)
