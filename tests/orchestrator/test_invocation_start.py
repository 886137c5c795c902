"""A replica's background invocation has its first event written before `start` returns: the client is
told the invocation's id only once its event stream exists (a GET of its events at once, on any
replica, is never an empty stream)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

from orchestrator.errors import InvocationTakenOverError
from orchestrator.messages import UserMessage
from orchestrator.models.base import PartialResponse
from orchestrator.result import CompleteResponse, ToolExecuted
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.journal import Journal
from orchestrator.server.events import Retold
from orchestrator.server.invocations import Invocations, Run
from workers.calls.invocation import Invocation, InvocationContext
from workers.protocol import OutcomeKind, ToolExecution, ToolExecutionRequest, ToolOutcome


class RecordedLog:
    """An event log that keeps what is added, in order."""

    def __init__(self) -> None:
        self.added: list[tuple[str, dict[str, Any]]] = []

    async def add(self, invocation_id: str, event: dict[str, Any], *, runner: str | None = None) -> str:
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


class NoCancel:
    async def exists(self, key: str) -> int:
        return 0


def ran(
    run: Run,
    log: RecordedLog,
    journal: Journal | None = None,
    steps: list[str] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """What `run` writes to `log`, run to its end as a replica runs it (its journal read through
    `journal`); `steps` says how its conversation ended: "saved", or "let go"."""

    async def scenario() -> list[tuple[str, dict[str, Any]]]:
        invocations = Invocations(
            cast(Any, NoCancel()), cast(Any, log), None if journal is None else AsyncJournal(journal)
        )

        async def finish() -> None:
            (steps if steps is not None else []).append("saved")

        async def let_go() -> None:
            (steps if steps is not None else []).append("let go")

        await invocations.start(run, finish, on_end=lambda: None, let_go=let_go)
        await asyncio.gather(*invocations.running.values(), return_exceptions=True)
        await asyncio.sleep(0.05)  # a turn let go, in the background
        return log.added

    return asyncio.run(scenario())


def journaled(journal: Journal) -> str:
    """A new invocation's id, its row in `journal`."""
    context = InvocationContext(invocation_id=uuid.uuid4(), memory_id="m", user_message="hi")
    journal.start_invocation(context, Invocation(context).to_json())
    return str(context.invocation_id)


class AnsweredThenBroken:
    """A service whose invocation fails after the journal had its answer (a Redis or network error
    on the way out)."""

    def stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[object]:
        async def events() -> AsyncIterator[object]:
            raise ConnectionError("the link dropped after the answer was journaled")
            yield  # an async generator

        return events()


def test_an_invocation_failing_after_its_answer_was_journaled_ends_with_that_answer(
    journal: Journal,
) -> None:
    # given: the journal has the invocation answered; its run then fails
    invocation_id = journaled(journal)
    journal.set_invocation_state(invocation_id, "succeeded", final_answer="42")
    told: list[object] = []
    broken = cast(Any, AnsweredThenBroken())
    run = Run(invocation_id, "clerk", broken, UserMessage("hi"), cast(Any, None), None, listener=told.append)

    # then: its stream ends with the journal's answer, and so does what its request hears
    ending = ran(run, RecordedLog(), journal)[-1][1]
    assert (ending["type"], ending["content"]) == ("invocation.succeeded", "42")
    assert isinstance(told[-1], CompleteResponse) and told[-1].result.content == "42"


class AdoptedLog(RecordedLog):
    """The event log of an invocation adopted after its first run told the end of call `c1`, and had
    begun to stream its answer ("do")."""

    async def retold(self, invocation_id: str) -> Retold:
        return Retold({("tool_call.finished", "c1")}, "do")

    async def take(self, invocation_id: str, runner: str) -> None:
        pass


class Replaying:
    """An adopted invocation whose replay concludes `c1` again (a call its failed batch never ran),
    then runs `c2`."""

    def stream_adopted(self, *args: Any, **kwargs: Any) -> AsyncIterator[object]:
        async def events() -> AsyncIterator[object]:
            for call_id in ("c1", "c2"):
                request = ToolExecutionRequest(call_id, "book", "{}")
                yield ToolExecuted(ToolExecution(request=request, result="not run", status="not_run"))
            for piece in ("do", "ne"):  # the answer, streamed again from its start
                yield PartialResponse(piece)

        return events()


def test_an_adopted_run_does_not_tell_again_what_its_first_run_told() -> None:
    replaying = cast(Any, Replaying())
    run = Run("inv-4", "clerk", replaying, UserMessage("hi"), cast(Any, None), None, adopting=True)

    events = [e for _, e in ran(run, AdoptedLog())]
    told = [(e["type"], e.get("call_id")) for e in events]
    assert ("tool_call.finished", "c2") in told and ("tool_call.finished", "c1") not in told
    # the answer's beginning its first run streamed is not streamed twice
    assert [e["text"] for e in events if e["type"] == "text.delta"] == ["ne"]


class ToldLog(RecordedLog):
    async def told(self, invocation_id: str) -> set[tuple[str, str]]:
        return {(e["type"], str(e.get("call_id"))) for _, e in self.added if e.get("call_id")}


class CancelledAfterACall:
    """A service whose invocation is cancelled once its call's end is journaled, before the run told it."""

    def stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[object]:
        async def events() -> AsyncIterator[object]:
            raise asyncio.CancelledError
            yield  # an async generator

        return events()


def test_a_cancelled_run_tells_the_ends_of_the_calls_it_settled_before_its_own(
    journal: Journal,
) -> None:
    # given: an invocation whose call's end is journaled, not told, when the invocation is cancelled
    invocation_id = journaled(journal)
    request = ToolExecutionRequest("c1", "book", "{}")
    row = journal.record_intent(invocation_id, 1, request, pool="p", compensable=True, idempotency_key="k")
    journal.record_outcome(row, ToolOutcome(OutcomeKind.SUCCESS, "booked"), "booked")
    cancelled = cast(Any, CancelledAfterACall())
    run = Run(invocation_id, "clerk", cancelled, UserMessage("hi"), cast(Any, None), None)

    # then: the call's end, then the invocation's
    told = [(e["type"], e.get("call_id")) for _, e in ran(run, ToldLog(), journal)]
    assert told[-2:] == [("tool_call.finished", "c1"), ("invocation.cancelled", None)]


class TakenOver:
    """A service whose invocation another process took over, as this run ended."""

    def stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[object]:
        async def events() -> AsyncIterator[object]:
            yield PartialResponse("half an answer")
            raise InvocationTakenOverError(
                "invocation inv-5 was taken over by vm:2: its end is that process's"
            )

        return events()


def test_a_run_whose_invocation_was_taken_over_tells_no_end_and_saves_no_conversation() -> None:
    told: list[object] = []
    steps: list[str] = []
    run = Run(
        "inv-5",
        "clerk",
        cast(Any, TakenOver()),
        UserMessage("hi"),
        cast(Any, None),
        None,
        listener=told.append,
    )

    types = [e["type"] for _, e in ran(run, RecordedLog(), steps=steps)]

    assert types == ["invocation.started", "text.delta"]  # the other process tells the end
    assert steps == ["let go"]  # its conversation is the other's to save
    assert isinstance(told[-1], InvocationTakenOverError)


class TakenLog(RecordedLog):
    """The stream of an invocation another run took: this run's end is not written."""

    async def take(self, invocation_id: str, runner: str) -> None:
        pass

    async def add(
        self, invocation_id: str, event: dict[str, Any], *, runner: str | None = None
    ) -> str | None:
        if event["type"] == "invocation.failed":
            return None
        return await super().add(invocation_id, event, runner=runner)


def test_a_run_whose_failure_is_not_its_streams_end_tells_its_client_to_ask_again() -> None:
    # given: a run that fails, its stream another run's by then (it was taken for dead)
    told: list[object] = []
    run = Run(
        "inv-6",
        "clerk",
        cast(Any, Failing()),
        UserMessage("hi"),
        cast(Any, None),
        None,
        resuming=True,
        listener=told.append,
    )

    # when: it ends
    ran(run, TakenLog())

    # then: its client hears that another run has the invocation (sent again, it hears that run's end)
    assert isinstance(told[-1], InvocationTakenOverError), told
