"""An adopted invocation's stream, on a real Redis: the adoption takes the stream as it claims the
invocation (its run may start later, once the conversation is free, and the run taken for dead must
write nothing meanwhile); what the adopter need not tell again (each call's events, and the answer
its superseded run had begun to stream), read from the stream."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis.asyncio as aioredis

from orchestrator.saga.states import InvocationState
from orchestrator.server import adoption
from orchestrator.server.events import EventLog, Retold
from orchestrator.server.replicas import ADOPTED

pytestmark = pytest.mark.integration


class _Journal:
    """A journal holding one running, checkpointed invocation that nobody else claims."""

    def invocation(self, invocation_id: str) -> Any:
        return SimpleNamespace(
            id=invocation_id,
            state=InvocationState.RUNNING,
            service_name="agent",
            user_message="hello",
            tenant="default",
            error=None,
        )

    def checkpoint(self, invocation_id: str) -> object:
        return object()

    def approvals(self, invocation_id: str, state: Any = None) -> list[Any]:
        return []

    def adopt(self, invocation_id: str, stale_before: Any) -> bool:
        return True

    def calls(self, invocation_id: str) -> list[Any]:
        return []

    async def run(self, step: Any) -> Any:
        return step(self)


@pytest.fixture
def started_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The runs adoptions start, not run: as if each waited for its conversation to be free."""
    runs: list[Any] = []

    async def start_turn(
        state: Any, place: Any, agent: str, conversation: Any, history: Any, run: Any, **_: Any
    ) -> None:
        runs.append(run(None))

    monkeypatch.setattr(adoption, "start_turn", start_turn)
    yield runs


def test_an_adoption_takes_the_stream_before_its_run_starts(redis_url: str, started_runs: list[Any]) -> None:
    async def story() -> tuple[str, list[str]]:
        client = aioredis.Redis.from_url(redis_url)
        log, invocation_id = EventLog(client), str(uuid.uuid4())
        try:
            # given: a run writing its invocation's stream with its own token (nobody took the stream)
            await log.add(invocation_id, {"type": "invocation.started", "agent": "agent"})
            assert await log.add(invocation_id, {"type": "text.delta", "text": "a"}, runner="first")
            state = SimpleNamespace(
                redis=client,
                events=log,
                journal=_Journal(),
                agents={"agent": SimpleNamespace(carries_on=True)},
                draining=False,
                admit_adopted=lambda: None,
            )
            # when: its replica is taken for dead and the invocation adopted, its run not started yet
            verdict = await adoption.adopt_in_background(state, invocation_id, "dead:1", 1.0)  # type: ignore[arg-type]
            # then: the run taken for dead writes no more; the adopted run writes with the adoption's token
            late = await log.add(invocation_id, {"type": "text.delta", "text": "b"}, runner="first")
            assert late is None
            [run] = started_runs
            assert run.adopting and run.runner
            assert await log.add(invocation_id, {"type": "text.delta", "text": "c"}, runner=run.runner)
            told = []
            async for entry in log.entries(invocation_id):
                if entry is None:
                    break
                told.append(str(entry[1]["type"]) + str(entry[1].get("text", "")))
            return verdict, told
        finally:
            await client.aclose()

    verdict, told = asyncio.run(story())
    assert verdict == ADOPTED
    assert told == ["invocation.started", "text.deltaa", "invocation.adopted", "text.deltac"]


def test_an_adopter_reads_what_its_stream_told_the_calls_and_the_answer_begun(redis_url: str) -> None:
    async def story() -> tuple[Retold, Retold]:
        client = aioredis.Redis.from_url(redis_url)
        log = EventLog(client)
        answered, asked = str(uuid.uuid4()), str(uuid.uuid4())
        try:
            # an answer begun after the calls, then adopted; a turn whose text came before its calls
            for event in (
                {"type": "tool_call.queued", "call_id": "c1"},
                {"type": "tool_call.finished", "call_id": "c1"},
                {"type": "text.delta", "text": "do"},
                {"type": "text.delta", "text": "ne x"},
                {"type": "invocation.adopted"},
            ):
                await log.add(answered, event)
            for event in (
                {"type": "text.delta", "text": "I will book"},
                {"type": "tool_call.queued", "call_id": "c1"},
            ):
                await log.add(asked, event)
            return await log.retold(answered), await log.retold(asked)
        finally:
            await client.aclose()

    answered, asked = asyncio.run(story())
    assert answered.calls == {("tool_call.queued", "c1"), ("tool_call.finished", "c1")}
    # the adopter's answer, streamed again from its start, is told from where the stream was
    assert [answered.text(piece) for piece in ("do", "ne", " x, then", " more")] == [
        "",
        "",
        ", then",
        " more",
    ]
    # text its stream told before a later step was a journaled turn's: nothing of it is skipped
    assert asked.text("I will book") == "I will book"


def test_an_adopter_whose_answer_differs_tells_it_as_it_comes() -> None:
    retold = Retold(set(), "done x")
    assert [retold.text(piece) for piece in ("do", "ing y", " z")] == ["", "ing y", " z"]
    assert Retold(set(), "abc").text("xyz") == "xyz"
