"""`toolfleet show` lists each call's artifacts under the call: reference, name, media type and size,
from the call's journaled result object, wherever in the result they sit."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest
from orchestrator.saga.journal import Journal
from tests._cli import journal_lines
from workers import tool
from workers.artifacts import Artifact, refs_in


@tool("Writes a report")
def report() -> dict[str, object]:
    return {
        "files": [
            Artifact("x" * 4200, name="report.csv", media_type="text/csv"),
            Artifact(b"\x89PNG", name="chart\x1b[31m.png"),  # a terminal escape in its name
        ],
        "rows": 3,
    }


@tool("Says hello")
def hello() -> str:
    return "hello"


def test_show_lists_each_calls_artifacts_under_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # given: an invocation whose first call returned two artifacts in its result, the second none
    monkeypatch.setenv("TOOLFLEET_ARTIFACT_URL", (tmp_path / "artifacts").as_uri())
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    journal = Journal(url)
    script: list[AiMessage | str] = [
        AiMessage(
            tool_execution_requests=[
                ToolExecutionRequest("c1", "report", "{}"),
                ToolExecutionRequest("c2", "hello", "{}"),
            ]
        ),
        "done",
    ]
    service = AiService(chat_model=ScriptedChatModel(script), tools=[report, hello], journal=journal)
    invocation_id = str(uuid.uuid4())

    async def run() -> None:
        async for _ in service.stream("report", invocation_id=invocation_id):
            pass

    asyncio.run(run())
    first, _ = journal.calls(invocation_id)
    csv, png = refs_in(first.result_object)

    # when
    lines = journal_lines(url, "show", invocation_id, cwd=tmp_path)

    # then: under the call that made them, one line each; the escape shown, not sent to the terminal
    listed = [line.strip() for line in lines if line.strip().startswith("artifact ")]
    assert listed == [
        f"artifact {csv.ref}  report.csv  text/csv  4.2 KB",
        f"artifact {png.ref}  chart?[31m.png  image/png  4 bytes",
    ]
    call_lines = [i for i, line in enumerate(lines) if " call c" in line]
    at = lines.index(next(line for line in lines if line.strip() == listed[0]))
    assert call_lines[0] < at < call_lines[1]
    assert "\x1b" not in "\n".join(lines)
