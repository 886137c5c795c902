"""The agent of the approval tests, as `toolfleet approve --agent` and the driver load it: a scripted
model that reserves and transfers (the user's message is the test's key), then answers with what the
last tool result said; tools on the `approvals` pool, the journal at TOOLFLEET_DATABASE_URL."""

from __future__ import annotations

import json
import os

from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    Journal,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from orchestrator.models.base import ChatRequest
from tests.integration.approvals import tools
from workers.settings import Settings

APPROVAL_TIMEOUT_VARIABLE = "APPROVAL_TEST_TIMEOUT_S"


def script(request: ChatRequest) -> AiMessage | str:
    key = next(m.single_text for m in request.messages if isinstance(m, UserMessage))
    results = [m for m in request.messages if isinstance(m, ToolExecutionResultMessage)]
    if not results:
        transfer = json.dumps({"to": "Dmytro", "amount": 2500, "key": key})
        return AiMessage(
            tool_execution_requests=[
                ToolExecutionRequest("reserve-1", "approval_reserve", json.dumps({"key": key})),
                ToolExecutionRequest("transfer-1", "approval_transfer", transfer),
            ]
        )
    return f"answer after {results[-1].tool_name}: {results[-1].text}"


def agent() -> AiService:
    settings = Settings.from_env()
    return AiService(
        chat_model=ScriptedChatModel(script),
        tools=[tools],
        executor=CeleryExecutor(settings=settings),
        journal=Journal(settings.database_url),
        compensate_on_tool_errors=True,
        approval_timeout_s=float(os.environ.get(APPROVAL_TIMEOUT_VARIABLE, "3600")),
        name="bank",
    )
