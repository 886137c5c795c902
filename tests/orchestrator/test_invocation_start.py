"""A replica's background invocation has its first event written before `start` returns: the client is
told the invocation's id only once its event stream exists (a GET of its events at once, on any
replica, is never an empty stream)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from orchestrator.messages import UserMessage
from orchestrator.server.invocations import Invocations, Run


class RecordedLog:
    """An event log that keeps what is added, in order."""

    def __init__(self) -> None:
        self.added: list[tuple[str, dict[str, Any]]] = []

    async def add(self, invocation_id: str, event: dict[str, Any]) -> str:
        self.added.append((invocation_id, event))
        return f"{len(self.added)}-0"


def test_the_started_event_is_written_before_start_returns() -> None:
    async def scenario() -> list[tuple[str, dict[str, Any]]]:
        log = RecordedLog()
        invocations = Invocations(cast(Any, None), cast(Any, log))
        run = Run(
            "inv-1", "clerk", cast(Any, None), UserMessage("hi"), cast(Any, None), None, conversation_id="c-1"
        )

        async def finish() -> None:
            pass

        await invocations.start(run, finish, on_end=lambda: None)
        told = list(log.added)  # before the run's task has taken a step
        invocations.running["inv-1"].cancel()
        await asyncio.gather(*invocations.running.values(), return_exceptions=True)
        return told

    assert asyncio.run(scenario()) == [
        (
            "inv-1",
            {
                "type": "invocation.started",
                "invocation_id": "inv-1",
                "agent": "clerk",
                "conversation_id": "c-1",
                "tenant": "default",  # whose it is: every route that names it checks
            },
        )
    ]


def test_a_resumed_invocation_writes_no_started_event() -> None:
    async def scenario() -> list[tuple[str, dict[str, Any]]]:
        log = RecordedLog()
        invocations = Invocations(cast(Any, None), cast(Any, log))
        run = Run("inv-2", "clerk", cast(Any, None), UserMessage("hi"), cast(Any, None), None, resuming=True)

        async def finish() -> None:
            pass

        await invocations.start(run, finish, on_end=lambda: None)
        told = list(log.added)
        invocations.running["inv-2"].cancel()
        await asyncio.gather(*invocations.running.values(), return_exceptions=True)
        return told

    assert asyncio.run(scenario()) == []


class NoRedis:
    """A Redis client of which a run asks only whether its invocation was cancelled: it was not."""

    async def exists(self, key: str) -> int:
        return 0


class GoneOnElsewhere:
    """A service whose paused invocation another process went on with: resuming it yields nothing."""

    async def stream_resume(self, invocation_id: str, **options: Any) -> Any:
        return
        yield


def _ends(run_of: Any, *, cancel_at_once: bool = False) -> list[str]:
    """How a background run ended: whether `finish` or `let_go` was awaited, and `on_end` called (in
    the order they came)."""
    said: list[str] = []

    async def scenario() -> None:
        invocations = Invocations(cast(Any, NoRedis()), cast(Any, RecordedLog()))

        async def finish() -> None:
            said.append("finish")

        async def let_go() -> None:
            said.append("let go")

        await invocations.start(run_of, finish, on_end=lambda: said.append("end"), let_go=let_go)
        task = invocations.running[run_of.invocation_id]
        if cancel_at_once:
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for _ in range(3):  # what the task's end schedules
            await asyncio.sleep(0)

    asyncio.run(scenario())
    return said


def _resumed_elsewhere(invocation_id: str) -> Run:
    """A run resuming an invocation another process went on with."""
    service = cast(Any, GoneOnElsewhere())
    return Run(invocation_id, "clerk", service, UserMessage("hi"), cast(Any, None), None, resuming=True)


def test_a_resumed_run_another_process_went_on_with_lets_go_of_its_turn_without_saving() -> None:
    assert sorted(_ends(_resumed_elsewhere("inv-3"))) == ["end", "let go"]


def test_a_run_stopped_before_it_began_lets_go_of_its_turn() -> None:
    assert sorted(_ends(_resumed_elsewhere("inv-4"), cancel_at_once=True)) == ["end", "let go"]


class Failing:
    """A service whose invocation fails as it goes on: the run ends with an end of its own."""

    def stream_resume(self, invocation_id: str, **options: Any) -> Any:
        raise RuntimeError("the model is down")


def test_a_run_that_ends_with_its_own_end_saves_and_does_not_also_let_go() -> None:
    run = Run("inv-5", "clerk", cast(Any, Failing()), UserMessage("hi"), cast(Any, None), None, resuming=True)

    assert _ends(run) == ["finish", "end"]
