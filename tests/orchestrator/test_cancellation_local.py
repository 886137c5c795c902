"""`AiService.cancel` on an in-process service: the cooperative tool sees `ToolCancelled` at its next
report, the invocation ends cancelled, and what it did before is undone once."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path

import pytest

from orchestrator import AiMessage, AiService, Journal, LocalExecutor, ScriptedChatModel
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
