"""The agents and tools of the tenant tests, their tools on pool `tenants`.

`teller` asks its tool `whose` (on a worker) which tenant the invocation parameters name, then
answers `tenant <it>; heard: <every user message of its conversation, joined by " | ">`: one answer
shows both the tenant the tools were given and the history the model was sent. `vault` asks for a
call of `lock` that waits for a person's approval (the user's message is the test's namespace), then
answers `vault: <the call's result>`. Both journal to `TOOLFLEET_DATABASE_URL`.
"""

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
from tests.integration.side_effects import process_client
from workers import InvocationParameters, tool

POOL = "tenants"


@tool("Says which tenant the invocation is of", pool=POOL, timeout=10)
def whose(parameters: InvocationParameters) -> str:
    return str(parameters.get("tenant"))


@tool("Locks `ns` (needs a person's approval)", pool=POOL, timeout=10, requires_approval=True)
def lock(ns: str) -> str:
    process_client().rpush(f"tenants:{ns}:locked", "1")
    return f"locked {ns}"


def _teller_script(request: ChatRequest) -> AiMessage | str:
    asked = max(i for i, m in enumerate(request.messages) if isinstance(m, UserMessage))
    results = [m for m in request.messages[asked:] if isinstance(m, ToolExecutionResultMessage)]
    if not results:
        return AiMessage(tool_execution_requests=[ToolExecutionRequest(f"whose-{asked}", "whose", "{}")])
    heard = [m.single_text for m in request.messages if isinstance(m, UserMessage)]
    return f"tenant {results[-1].text}; heard: {' | '.join(heard)}"


def teller() -> AiService:
    """Tells the tenant its tool was given, and what its conversation holds."""
    return AiService(
        chat_model=ScriptedChatModel(_teller_script),
        tools=[whose],
        executor=CeleryExecutor(),
        journal=Journal(os.environ["TOOLFLEET_DATABASE_URL"]),
        name="teller",
    )


def _vault_script(request: ChatRequest) -> AiMessage | str:
    results = [m for m in request.messages if isinstance(m, ToolExecutionResultMessage)]
    if results:
        return f"vault: {results[-1].text}"
    ns = next(m.single_text for m in request.messages if isinstance(m, UserMessage))
    call = ToolExecutionRequest("lock-1", "lock", json.dumps({"ns": ns}))
    return AiMessage(tool_execution_requests=[call])


def vault() -> AiService:
    """An agent whose one call waits for approval."""
    return AiService(
        chat_model=ScriptedChatModel(_vault_script),
        tools=[lock],
        executor=CeleryExecutor(),
        journal=Journal(os.environ["TOOLFLEET_DATABASE_URL"]),
        name="vault",
    )
