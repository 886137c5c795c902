"""A saga step (a compensation, the journal's last write) runs to its end however often its caller is
cancelled meanwhile (a drain cancels an invocation, then the shutdown cancels it again): `to_the_end`,
and a stream whose reader is cancelled (`events_of`), which waits while its invocation undoes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from orchestrator.loop.streaming import events_of
from orchestrator.saga.async_journal import to_the_end


async def cancelled_twice(work: Coroutine[Any, Any, None]) -> None:
    """Run `work`, cancel it as a drain does, then again as the shutdown does, and wait for its end."""
    running = asyncio.ensure_future(work)
    await asyncio.sleep(0.05)
    running.cancel()  # the drain
    await asyncio.sleep(0.05)
    running.cancel()  # the shutdown
    await asyncio.wait([running])


def test_a_step_runs_to_its_end_through_two_cancels_of_its_caller() -> None:
    async def scenario() -> tuple[list[str], tuple[str, bool] | None]:
        done: list[str] = []
        told: list[tuple[str, bool]] = []

        async def compensation() -> str:
            await asyncio.sleep(0.3)
            done.append("undone")
            return "undone"

        async def invocation() -> None:
            told.append(await to_the_end(compensation()))

        await cancelled_twice(invocation())
        return done, told[0] if told else None

    done, told = asyncio.run(scenario())

    assert done == ["undone"]
    assert told == ("undone", True)


def test_a_step_cancelled_itself_is_a_cancellation() -> None:
    async def scenario() -> None:
        async def step() -> None:
            raise asyncio.CancelledError

        await to_the_end(step())

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(scenario())


def test_a_stream_closed_by_two_cancels_of_its_reader_waits_while_its_invocation_undoes_its_work() -> None:
    async def scenario() -> list[str]:
        undone: list[str] = []

        async def invocation(emit: Callable[[Any], None]) -> None:
            emit("started")
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                await asyncio.sleep(0.3)  # compensating
                undone.append("book")
                raise

        async def reader() -> None:
            async for _ in events_of(invocation):
                pass

        await cancelled_twice(reader())
        return undone  # as the reader ended: the process may exit now

    assert asyncio.run(scenario()) == ["book"]


def test_a_step_that_ends_as_its_caller_is_cancelled_keeps_its_outcome() -> None:
    async def scenario() -> tuple[str, bool]:
        step = asyncio.get_running_loop().create_future()

        async def caller() -> tuple[str, bool]:
            return await to_the_end(step)

        calling = asyncio.ensure_future(caller())
        await asyncio.sleep(0)  # the caller waits on the step
        step.set_result("journaled")  # the step ends ...
        calling.cancel()  # ... and its caller is cancelled, in the same turn of the loop
        return await calling

    assert asyncio.run(scenario()) == ("journaled", True)
