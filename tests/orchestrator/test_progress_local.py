"""Progress in-process: a tool's reports reach `stream()` as `ToolProgress` events, in order and
before the call's `ToolExecuted`, rate-limited with the last one always delivered; the journal keeps
the last one, `toolfleet show` prints it, and `toolfleet serve` writes it as `tool_call.progress`."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest, ToolProgress
from orchestrator.result import StreamEvent, ToolExecuted
from orchestrator.saga.journal import Journal
from orchestrator.server.invocations import progress_event
from tests._cli import journal_lines
from workers import ToolProgressReporter, tool


class Copier:
    @tool("Copies in parts")
    def copy(self, parts: int, progress: ToolProgressReporter) -> str:
        for part in range(1, parts + 1):
            progress.progress(fraction=part / parts, message=f"part {part}", data={"part": part})
            if parts <= 10:
                time.sleep(0.06)  # slower than the rate limit: every report travels
        return f"copied {parts} parts"

    @tool("Copies in parts, asynchronously")
    async def acopy(self, parts: int, progress: ToolProgressReporter) -> str:
        for part in range(1, parts + 1):
            progress.progress(fraction=part / parts, message=f"part {part}")
            await asyncio.sleep(0.06)
        return f"copied {parts} parts"


def _service(tool_name: str, parts: int, **options: object) -> AiService:
    script: list[AiMessage | str] = [
        AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", tool_name, f'{{"parts": {parts}}}')]),
        "done",
    ]
    return AiService(chat_model=ScriptedChatModel(script), tools=[Copier()], **options)  # type: ignore[arg-type]


def _events(service: AiService, invocation_id: str | None = None) -> list[StreamEvent]:
    async def collect() -> list[StreamEvent]:
        return [e async for e in service.stream("copy", invocation_id=invocation_id)]

    return asyncio.run(collect())


@pytest.mark.parametrize("tool_name", ["copy", "acopy"], ids=["thread", "async"])
def test_every_report_of_a_slow_tool_is_streamed_in_order_before_its_result(tool_name: str) -> None:
    # when
    events = _events(_service(tool_name, 5))

    # then
    progress = [e for e in events if isinstance(e, ToolProgress)]
    assert [(p.fraction, p.message) for p in progress] == [(n / 5, f"part {n}") for n in range(1, 6)]
    assert {(p.request_id, p.tool_name) for p in progress} == {("c1", tool_name)}
    assert all(abs((datetime.now(UTC) - p.at).total_seconds()) < 30 for p in progress)
    executed = next(i for i, e in enumerate(events) if isinstance(e, ToolExecuted))
    assert max(events.index(p) for p in progress) < executed


def test_a_tool_reporting_in_a_tight_loop_streams_a_few_reports_the_last_one_always() -> None:
    events = _events(_service("copy", 10_000))

    progress = [e for e in events if isinstance(e, ToolProgress)]
    assert 1 <= len(progress) < 100
    assert progress[-1].message == "part 10000"
    assert progress[-1].fraction == 1.0


def test_the_journal_keeps_the_last_progress_and_show_prints_it(tmp_path: Path) -> None:
    # given
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    journal = Journal(url)
    invocation_id = str(uuid.uuid4())

    # when
    _events(_service("copy", 4, journal=journal), invocation_id)

    # then
    [call] = journal.calls(invocation_id)
    assert call.last_progress is not None
    assert (call.last_progress["fraction"], call.last_progress["message"]) == (1.0, "part 4")
    assert call.last_progress["data"] == {"part": 4}
    lines = journal_lines(url, "show", invocation_id, cwd=tmp_path)
    assert any(line.strip().startswith('last progress: 100% part 4 data {"part": 4}') for line in lines), (
        lines
    )


def test_serve_writes_a_report_as_a_tool_call_progress_event() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    event = ToolProgress("c1", "copy", 0.25, "part 1", {"part": 1}, at)

    assert progress_event(event, "t-1") == {
        "type": "tool_call.progress",
        "call_id": "c1",
        "task_id": "t-1",
        "tool": "copy",
        "fraction": 0.25,
        "message": "part 1",
        "data": {"part": 1},
        "at": "2026-01-02T03:04:05+00:00",
    }
