"""The agent of the quota tests, its tool on pool `quota`.

`meter` calls `report` (on a worker) once per turn, as many turns as its user message has words, then
answers with what the tool reported: the tenant and priority the invocation parameters name. Each
invocation may make 2 tool calls (`budget`); each tenant 3 a day, but `roomy` 100 (`daily_budgets`).
"""

from __future__ import annotations

from orchestrator import (
    AiMessage,
    AiService,
    Budget,
    CeleryExecutor,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from orchestrator.models.base import ChatRequest
from workers import InvocationParameters, tool

POOL = "quota"


@tool("Reports the invocation's tenant and priority", pool=POOL, timeout=10)
def report(parameters: InvocationParameters) -> str:
    return f"{parameters.get('tenant')}/{parameters.get('priority')}"


def _script(request: ChatRequest) -> AiMessage | str:
    words = len(next(m.single_text for m in request.messages if isinstance(m, UserMessage)).split())
    results = [m for m in request.messages if isinstance(m, ToolExecutionResultMessage)]
    if len(results) < words:
        return AiMessage(tool_execution_requests=[ToolExecutionRequest(f"r{len(results)}", "report", "{}")])
    return results[-1].text


def meter() -> AiService:
    return AiService(
        chat_model=ScriptedChatModel(_script),
        tools=[report],
        executor=CeleryExecutor(),
        name="meter",
        budget=Budget(max_tool_calls=2),
        daily_budgets={"*": Budget(max_tool_calls=3), "roomy": Budget(max_tool_calls=100)},
    )
