"""`run_awaitable`: a worker thread's async tools share one long-lived loop; a call interrupted from
outside has its task cancelled; what a call leaves behind does not outlive it."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator

import pytest

from workers.calls.loops import close_thread_loop, run_awaitable, thread_loop


@pytest.fixture(autouse=True)
def _closed_after() -> Iterator[None]:
    yield
    close_thread_loop()  # this thread's loop ends with the test, not at some later collection


async def _loop_id() -> int:
    return id(asyncio.get_running_loop())


def test_calls_on_one_thread_share_its_loop_and_threads_have_their_own() -> None:
    first, second = run_awaitable(_loop_id()), run_awaitable(_loop_id())
    other: list[int] = []
    thread = threading.Thread(target=lambda: other.append(run_awaitable(_loop_id())))
    thread.start()
    thread.join()

    assert first == second == id(thread_loop())
    assert other[0] != first


def test_a_task_left_behind_is_cancelled_when_the_call_ends() -> None:
    left: list[asyncio.Task[None]] = []

    async def leaves() -> None:
        left.append(asyncio.get_running_loop().create_task(asyncio.sleep(60)))

    run_awaitable(leaves())

    assert left[0].cancelled()
    assert run_awaitable(_loop_id()) == id(thread_loop())  # the loop serves on


def test_a_call_interrupted_from_outside_is_cancelled_and_the_loop_serves_on() -> None:
    class Interrupted(Exception):  # as a time limit's exception arrives: from a signal handler
        pass

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    cancelled: list[bool] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    previous = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(Interrupted):
            run_awaitable(slow())
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)

    assert cancelled == [True]
    assert run_awaitable(_loop_id()) == id(thread_loop())


def test_a_tools_exception_reaches_the_caller() -> None:
    async def fails() -> None:
        raise ValueError("no such city")

    with pytest.raises(ValueError, match="no such city"):
        run_awaitable(fails())
