"""The journal on SQLAlchemy's asyncio extension: `AsyncJournal` writes what the sync `Journal` reads
(SQLite and PostgreSQL), one `run` is one transaction, and an `AiService` given a `Journal` journals
its `achat` invocations without touching that journal's blocking engine."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from orchestrator import AiMessage, AiService, LocalExecutor, ScriptedChatModel
from orchestrator.models.base import ChatRequest
from orchestrator.saga import AsyncJournal, CallState, InvocationState, Journal
from tests.orchestrator._bank import Bank
from tests.orchestrator._databases import KINDS, fresh_database
from tests.orchestrator._service import call
from workers import ToolExecutionRequest, tool
from workers.calls.invocation import InvocationContext
from workers.protocol import OutcomeKind, ToolOutcome

KEY = Fernet.generate_key().decode()


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database of each kind (the PostgreSQL one is dropped afterwards)."""
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def reader(url: str) -> Iterator[Journal]:
    """The sync journal that reads what the test wrote (it also brings the schema up to date)."""
    journal = Journal(url, keys=KEY)
    yield journal
    journal.engine.dispose()


@tool("Adds one")
def add_one(x: int) -> int:
    return x + 1


def _one_call_then_answer(request: ChatRequest) -> AiMessage | str:
    """The model calls `add_one` once, then answers."""
    if request.messages[-1].__class__.__name__ == "ToolExecutionResultMessage":
        return "done"
    return AiMessage(tool_execution_requests=[call("add_one", x=1)])


def _service(journal: Journal | AsyncJournal, executor: LocalExecutor) -> AiService:
    return AiService(
        chat_model=ScriptedChatModel(_one_call_then_answer),
        tools=[add_one],
        executor=executor,
        journal=journal,
        compensate_on_tool_errors=True,
        tool_arguments_error_handler=lambda error, context: None,
        tool_execution_error_handler=lambda error, context: None,
    )


def _start_with_one_call(journal: Journal, context: InvocationContext) -> int:
    journal.start_invocation(context, {"context": context.to_json(), "parameters": {"account": "alice"}})
    row = journal.record_intent(
        str(context.invocation_id),
        1,
        ToolExecutionRequest("c1", "pay", json.dumps({"invoice": "INV-1"})),
        pool="payments",
        compensable=True,
        idempotency_key=f"{context.invocation_id}:c1",
        turn=1,
    )
    journal.record_outcome(row, ToolOutcome(OutcomeKind.SUCCESS, "paid"), "paid")
    return row


def test_what_the_async_journal_writes_the_sync_journal_reads(url: str, reader: Journal) -> None:
    # given: an async journal over a database whose schema it has not seen yet
    writer = AsyncJournal(url, keys=KEY)
    context = InvocationContext(memory_id="m", user_message="pay INV-1")

    # when: an invocation, a call and its outcome are written in one run, then its state in another
    async def write() -> None:
        await writer.run(lambda journal: _start_with_one_call(journal, context))
        await writer.run(
            lambda journal: journal.set_invocation_state(
                str(context.invocation_id), InvocationState.SUCCEEDED, final_answer="paid"
            )
        )

    asyncio.run(write())

    # then: the sync journal reads all of it, the parameters opened with the same key
    record = reader.invocation(str(context.invocation_id))
    assert record is not None and record.state == InvocationState.SUCCEEDED
    assert (record.user_message, record.final_answer) == ("pay INV-1", "paid")
    assert record.invocation_json["parameters"] == {"account": "alice"}
    [written] = reader.calls(str(context.invocation_id))
    assert (written.call_id, written.state, written.result, written.pool) == (
        "c1",
        CallState.SUCCEEDED,
        "paid",
        "payments",
    )


def test_one_run_is_one_transaction_a_failure_in_it_rolls_all_back(url: str, reader: Journal) -> None:
    # given
    writer = AsyncJournal(url, keys=KEY)
    context = InvocationContext(memory_id="m", user_message="pay INV-1")

    def write_then_fail(journal: Journal) -> None:
        _start_with_one_call(journal, context)
        raise RuntimeError("the step failed after its writes")

    # when
    with pytest.raises(RuntimeError, match="after its writes"):
        asyncio.run(writer.run(write_then_fail))

    # then: neither the invocation nor its call was kept
    assert reader.invocation(str(context.invocation_id)) is None
    assert reader.calls(str(context.invocation_id)) == []


def test_the_sync_journal_runs_a_function_in_one_transaction_too(reader: Journal) -> None:
    context = InvocationContext(memory_id="m", user_message="pay INV-1")

    def write_then_fail(journal: Journal) -> None:
        _start_with_one_call(journal, context)
        raise RuntimeError("the step failed after its writes")

    with pytest.raises(RuntimeError):
        asyncio.run(reader.run(write_then_fail))
    assert reader.invocation(str(context.invocation_id)) is None
    assert asyncio.run(reader.run(lambda journal: _start_with_one_call(journal, context))) > 0
    assert [c.call_id for c in reader.calls(str(context.invocation_id))] == ["c1"]


def test_achat_with_a_journal_given_never_checks_out_its_blocking_engine(tmp_path: Path) -> None:
    # given: a service given a sync journal; every checkout of that journal's engine is counted
    journal = Journal(f"sqlite:///{tmp_path / 'journal.db'}", keys=KEY)
    checkouts: list[object] = []
    sa.event.listen(journal.engine, "checkout", lambda *args: checkouts.append(args))
    executor = LocalExecutor()
    service = _service(journal, executor)

    # when: two invocations run, each calling a tool
    async def two() -> list[str | None]:
        results = await asyncio.gather(service.achat("one"), service.achat("two"))
        return [result.invocation_id for result in results]

    try:
        ids = asyncio.run(two())
    finally:
        executor.close()

    # then: the loop never blocked on the sync engine, and the journal holds the whole story
    assert checkouts == []
    assert service.journal is journal
    for invocation_id in ids:
        assert invocation_id is not None
        record = journal.invocation(invocation_id)
        assert record is not None and record.state == InvocationState.SUCCEEDED
        assert record.final_answer == "done"
        assert [(c.tool, c.state, c.turn) for c in journal.calls(invocation_id)] == [
            ("add_one", CallState.SUCCEEDED, 1)
        ]
    assert len(checkouts) > 0, "the listener counts this engine's checkouts"
    journal.engine.dispose()


def test_chat_with_a_journal_given_journals_through_it(journal: Journal) -> None:
    # chat() blocks its caller for the whole invocation: its own loop journals inline
    executor = LocalExecutor()
    try:
        result = _service(journal, executor).chat("one")
    finally:
        executor.close()
    assert result.invocation_id is not None
    record = journal.invocation(result.invocation_id)
    assert record is not None and record.state == InvocationState.SUCCEEDED


def test_many_invocations_in_one_loop_are_all_journaled(url: str, reader: Journal) -> None:
    # given: one async journal, one service, many invocations at once in one event loop
    journal = AsyncJournal(url, keys=KEY)
    executor = LocalExecutor()
    service = _service(journal, executor)
    count = 40

    async def many() -> list[Any]:
        try:
            return list(await asyncio.gather(*(service.achat(f"question {i}") for i in range(count))))
        finally:
            await journal.dispose()

    # when
    try:
        results = asyncio.run(many())
    finally:
        executor.close()

    # then: every one of them succeeded, with its call, in the journal
    records = reader.invocations(limit=count + 10)
    assert len(records) == count
    assert {r.state for r in records} == {InvocationState.SUCCEEDED}
    assert {r.id for r in records} == {r.invocation_id for r in results}
    assert all(len(reader.calls(r.id)) == 1 for r in records)


def test_an_async_journal_serves_successive_and_concurrent_event_loops(url: str, reader: Journal) -> None:
    # given: one async journal; each event loop gets an engine of its own
    journal = AsyncJournal(url, keys=KEY)
    contexts = [InvocationContext(memory_id="m", user_message=f"loop {i}") for i in range(4)]

    def start(context: InvocationContext) -> None:
        asyncio.run(journal.run(lambda j: j.start_invocation(context, {})))

    # when: two loops one after the other, then two in threads at once
    start(contexts[0])
    start(contexts[1])
    threads = [threading.Thread(target=start, args=(context,)) for context in contexts[2:]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    # then: every write landed (and no connection was left open: warnings are errors here)
    assert {r.user_message for r in reader.invocations()} == {f"loop {i}" for i in range(4)}


class _HangsOnTurnTwo(ScriptedChatModel):
    """Answers turn 1 from its script, then never answers: the invocation waits until cancelled."""

    def __init__(self, script: list[AiMessage | str]) -> None:
        super().__init__(script)
        self.waiting = asyncio.Event()

    async def chat(self, request: ChatRequest) -> Any:
        if self.requests:
            self.waiting.set()
            await asyncio.Event().wait()
        return await super().chat(request)


def _cancelled_once(
    service: AiService, journal: AsyncJournal, message: str, ready: Callable[[], Awaitable[Any]]
) -> str:
    """`service.achat(message)` cancelled once `ready()` returned; the id of the one invocation the
    journal then holds."""

    async def cancel_when_ready() -> str:
        task = asyncio.ensure_future(service.achat(message))
        await ready()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        [record] = await journal.run(lambda j: j.invocations())
        await journal.dispose()
        return str(record.id)

    return asyncio.run(cancel_when_ready())


def test_a_cancelled_invocation_undoes_its_calls_and_journals_its_end(url: str, reader: Journal) -> None:
    # given: a deposit stands, then the model hangs; the service journals through an async journal
    bank = Bank()
    model = _HangsOnTurnTwo([AiMessage(tool_execution_requests=[call("deposit", "d1", amount=40)])])
    journal = AsyncJournal(url, keys=KEY)
    executor = LocalExecutor(compensation_retries=0)
    service = AiService(
        chat_model=model, tools=[bank], executor=executor, journal=journal, compensate_on_tool_errors=True
    )

    # when: it is cancelled on turn two
    try:
        invocation_id = _cancelled_once(service, journal, "deposit 40", model.waiting.wait)
    finally:
        executor.close()

    # then: the deposit was undone, and the journal tells it all
    assert (bank.balance, bank.undone) == (0, ["deposit 40"])
    record = reader.invocation(invocation_id)
    assert record is not None and record.state == InvocationState.CANCELLED
    assert [(c.call_id, c.state) for c in reader.calls(invocation_id)] == [("d1", CallState.COMPENSATED)]
    assert [c.state for c in reader.compensations(invocation_id)] == ["succeeded"]


class _ReturnsLate(AsyncJournal):
    """Once `armed`, each write is done, then its caller hears of it only after a pause, having been
    told by `written`: a cancel in that pause finds the row journaled and not yet known."""

    def __init__(self, url: str) -> None:
        super().__init__(url, keys=KEY)
        self.armed = False
        self.written = asyncio.Event()

    async def run(self, fn: Any) -> Any:
        return await self._late(await super().run(fn))

    async def execute(self, write: Any) -> Any:
        return await self._late(await super().execute(write))

    async def _late(self, result: Any) -> Any:
        if self.armed:
            self.written.set()
            await asyncio.sleep(0.5)
        return result


@pytest.mark.parametrize("on_loss", ["resume", "compensate"])  # the turn's checkpoint; the call's intent
def test_a_cancel_while_a_call_is_journaled_leaves_no_row_dispatched(
    on_loss: str, url: str, reader: Journal
) -> None:
    # given: the model asks for one call, and the journal is slow to say its row was written
    journal = _ReturnsLate(url)

    def arm_then_call(request: ChatRequest) -> AiMessage | str:
        journal.armed = True
        return _one_call_then_answer(request)

    executor = LocalExecutor(compensation_retries=0)
    service = AiService(
        chat_model=ScriptedChatModel(arm_then_call),
        tools=[add_one],
        executor=executor,
        journal=journal,
        on_orchestrator_loss=on_loss,  # type: ignore[arg-type]
    )

    # when: the invocation is cancelled just after its call's row was written
    try:
        invocation_id = _cancelled_once(service, journal, "add", journal.written.wait)
    finally:
        executor.close()

    # then: it ended cancelled, and the call it never ran is abandoned, not left dispatched
    record = reader.invocation(invocation_id)
    assert record is not None and record.state == InvocationState.CANCELLED
    assert [c.state for c in reader.calls(invocation_id)] == [CallState.ABANDONED]
