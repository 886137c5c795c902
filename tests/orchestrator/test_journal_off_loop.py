"""Journal writes leave the event loop free, and a started write always finishes."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path

import pytest

from orchestrator.journal import Journal
from workers.invocation import InvocationContext

INVOCATION = uuid.uuid4()


def _slow(journal: Journal, seconds: float, done: list[str]) -> str:
    """A journal write that takes `seconds`: starts an invocation, then waits."""
    journal.start_invocation(InvocationContext(invocation_id=INVOCATION), {})
    time.sleep(seconds)
    done.append(threading.current_thread().name)
    return "written"


def test_a_write_runs_off_the_loop_which_keeps_serving(tmp_path: Path) -> None:
    journal = Journal(f"sqlite:///{tmp_path / 'j.db'}")
    done: list[str] = []
    ticks = 0

    async def scenario() -> str:
        nonlocal ticks

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        try:
            return await journal.off_loop(_slow, journal, 0.3, done)
        finally:
            ticker.cancel()

    # when: a 0.3 s write runs while the loop ticks every 10 ms
    assert asyncio.run(scenario()) == "written"

    # then: the loop ticked meanwhile, and the write ran in another thread
    assert ticks >= 10
    assert done and done[0] != threading.main_thread().name
    assert journal.invocation(str(INVOCATION)) is not None
    journal.engine.dispose()


def test_a_caller_cancelled_mid_write_waits_for_it_then_is_cancelled(tmp_path: Path) -> None:
    journal = Journal(f"sqlite:///{tmp_path / 'j.db'}")
    done: list[str] = []

    async def scenario() -> None:
        writing = asyncio.ensure_future(journal.off_loop(_slow, journal, 0.3, done))
        await asyncio.sleep(0.05)
        writing.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await writing
        # the cancellation took effect only once the write had finished
        assert time.monotonic() - started >= 0.2
        assert done

    asyncio.run(scenario())
    assert journal.invocation(str(INVOCATION)) is not None
    journal.engine.dispose()


def test_an_in_memory_database_is_written_in_place() -> None:
    journal = Journal("sqlite://")
    done: list[str] = []

    asyncio.run(journal.off_loop(_slow, journal, 0.0, done))

    # one connection, one thread: the loop's own, and the row is there to read
    assert done == [threading.main_thread().name]
    assert journal.invocation(str(INVOCATION)) is not None
