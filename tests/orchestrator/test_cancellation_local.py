"""`AiService.cancel` on an in-process service: the cooperative tool sees `ToolCancelled` at its next
report, the invocation ends cancelled, and what it did before is undone once."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from orchestrator import AiMessage, AiService, Journal, LocalExecutor, ScriptedChatModel
from orchestrator.loop.cancellation import cancel_here, cancellable
from tests._background import Background
from tests._waiting import wait_for
from workers import ToolCancelled, ToolExecutionRequest, ToolProgressReporter, compensate_for, tool


class Crew:
    def __init__(self) -> None:
        self.steps = 0
        self.saw_cancel = threading.Event()
        self.booked = self.undone = 0

    @tool("Books")
    def book(self) -> str:
        self.booked += 1
        return "booked"

    @compensate_for("book")
    def unbook(self) -> None:
        self.undone += 1

    @tool("Works in steps")
    def work(self, progress: ToolProgressReporter) -> str:
        try:
            for step in range(500):
                progress.progress(fraction=step / 500)
                self.steps += 1
                time.sleep(0.02)
        except ToolCancelled:
            self.saw_cancel.set()
            raise
        return "worked"


def _ask(call_id: str, name: str) -> AiMessage:
    return AiMessage(tool_execution_requests=[ToolExecutionRequest(call_id, name, "{}")])


def test_cancel_reaches_an_in_process_tool_and_undoes_what_was_done(tmp_path: Path) -> None:
    crew = Crew()
    model = ScriptedChatModel([_ask("b1", "book"), _ask("w1", "work"), "done"])
    service = AiService(
        chat_model=model,
        tools=[crew],
        executor=LocalExecutor(),
        journal=Journal(f"sqlite:///{tmp_path / 'journal.db'}"),
        compensate_on_tool_errors=True,
    )
    invocation_id = str(uuid.uuid4())
    running = Background(lambda: service.chat("go", invocation_id=invocation_id))
    wait_for(lambda: crew.steps >= 3, timeout_s=10, what="the work under way")

    assert service.cancel(invocation_id) is True

    assert crew.saw_cancel.wait(2), "the tool never saw its cancellation"
    with pytest.raises(asyncio.CancelledError):
        running.join(timeout_s=10)
    assert (crew.booked, crew.undone) == (1, 1)
    assert len(model.requests) == 2
    record = Journal(f"sqlite:///{tmp_path / 'journal.db'}").invocation(invocation_id)
    assert record is not None and record.state == "cancelled"


def test_cancelling_an_invocation_that_does_not_run_here_says_so() -> None:
    service = AiService(chat_model=ScriptedChatModel(["hi"]), executor=LocalExecutor())

    assert service.cancel(str(uuid.uuid4())) is False


def test_cancelling_one_in_process_call_fails_it_and_the_invocation_goes_on() -> None:
    crew = Crew()
    model = ScriptedChatModel([_ask("w1", "work"), "done"])
    service = AiService(chat_model=model, tools=[crew], executor=LocalExecutor())
    invocation_id = str(uuid.uuid4())
    running = Background(lambda: service.chat("go", invocation_id=invocation_id))
    wait_for(lambda: crew.steps >= 3, timeout_s=10, what="the work under way")

    assert service.cancel_call(invocation_id, "w1") is True

    assert running.join(timeout_s=10).content == "done"
    assert crew.saw_cancel.wait(2)
    assert "Tool 'work' was cancelled" in (model.requests[1].messages[-1].text or "")  # type: ignore[union-attr]


class FinishingFirst(LocalExecutor):
    """Runs `book` as a call whose worker finishes it just as it is cancelled: the executor then tells
    its success instead of the cancellation (as `CeleryExecutor` does when the worker's mark wins)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()

    async def execute(self, request: ToolExecutionRequest, *arguments: Any, **options: Any) -> Any:
        if request.name != "book":
            return await super().execute(request, *arguments, **options)
        self.started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return await super().execute(request, *arguments, **options)
        raise AssertionError("never cancelled")


def _finishing_first(tmp_path: Path) -> tuple[Crew, FinishingFirst, AiService, Journal]:
    crew, executor = Crew(), FinishingFirst()
    journal = Journal(f"sqlite:///{tmp_path / 'journal.db'}")
    service = AiService(
        chat_model=ScriptedChatModel([_ask("b1", "book"), "done"]),
        tools=[crew],
        executor=executor,
        journal=journal,
        compensate_on_tool_errors=True,
    )
    return crew, executor, service, journal


def test_a_call_that_finished_as_its_invocation_was_cancelled_is_undone(tmp_path: Path) -> None:
    crew, executor, service, journal = _finishing_first(tmp_path)
    invocation_id = str(uuid.uuid4())
    running = Background(lambda: service.chat("go", invocation_id=invocation_id))
    assert executor.started.wait(10)

    service.cancel(invocation_id)

    with pytest.raises(asyncio.CancelledError):
        running.join(timeout_s=10)
    assert (crew.booked, crew.undone) == (1, 1)
    assert [(c.call_id, c.state) for c in journal.calls(invocation_id)] == [("b1", "compensated")]


def test_a_call_cancelled_alone_that_finished_first_stands_as_succeeded(tmp_path: Path) -> None:
    crew, executor, service, journal = _finishing_first(tmp_path)
    invocation_id = str(uuid.uuid4())
    running = Background(lambda: service.chat("go", invocation_id=invocation_id))
    assert executor.started.wait(10)

    service.cancel_call(invocation_id, "b1")

    assert running.join(timeout_s=10).content == "done"
    assert (crew.booked, crew.undone) == (1, 0)
    # not abandoned: nothing undoes it later, and nothing should
    assert [(c.call_id, c.state) for c in journal.calls(invocation_id)] == [("b1", "succeeded")]


def test_a_cancel_that_arrives_once_the_invocation_left_its_block_cancels_nothing() -> None:
    # a cancel asked from another thread just as the invocation ends reaches its loop after it left
    # its cancellable block (its end already journaled): the task goes on, uncancelled
    async def story() -> bool:
        invocation_id = str(uuid.uuid4())
        asked = False
        with cancellable(invocation_id):
            asked = cancel_here(invocation_id)  # the cancel's callback is queued on this loop...
        # ...and runs here, after the block: the end that follows is not cut short
        await asyncio.sleep(0.01)
        await asyncio.sleep(0.01)
        return asked

    assert asyncio.run(story()) is True
