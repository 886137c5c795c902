"""Where a worker runs `async def` tools: one long-lived event loop per thread.

A worker thread (or prefork child) that runs an async tool keeps its loop for the next call instead of
building and tearing one down per call (`asyncio.run`): the loop's selector, and whatever the tool's
libraries cache on the loop (connection pools, clients), are made once. Each call runs as one task;
a call interrupted from outside (a time limit, a terminate) has its task cancelled and awaited, and
tasks a call left behind are cancelled when it ends, as `asyncio.run` would, so no call's work leaks
into the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

__all__ = ["close_thread_loop", "run_awaitable", "thread_loop"]

_T = TypeVar("_T")
_local = threading.local()


class _Held:
    """A thread's loop, closed when the thread ends (its thread-local value is dropped then)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def __del__(self) -> None:
        if not self.loop.is_closed():
            self.loop.close()


def thread_loop() -> asyncio.AbstractEventLoop:
    """This thread's event loop for tools, made on first use (and again if it was closed)."""
    held: _Held | None = getattr(_local, "held", None)
    if held is None or held.loop.is_closed():
        held = _local.held = _Held()
    return held.loop


def close_thread_loop() -> None:
    """Close this thread's loop now, if it has one (a later call makes a new one)."""
    held: _Held | None = getattr(_local, "held", None)
    if held is not None:
        del _local.held
        if not held.loop.is_closed():
            held.loop.close()


def run_awaitable(awaitable: Awaitable[_T]) -> _T:
    """Run `awaitable` to its end on this thread's loop (from code that is not in a running loop)."""
    loop = thread_loop()
    task = loop.create_task(_awaited(awaitable))
    try:
        return loop.run_until_complete(task)
    except BaseException:
        if not task.done():  # interrupted from outside the loop: the call's task is cancelled too
            task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(task)
        raise
    finally:
        _cancel_leftovers(loop)


async def _awaited(awaitable: Awaitable[_T]) -> _T:
    return await awaitable


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    left: set[asyncio.Task[Any]] = {t for t in asyncio.all_tasks(loop) if not t.done()}
    if not left:
        return
    for task in left:
        task.cancel()
    with contextlib.suppress(BaseException):
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
