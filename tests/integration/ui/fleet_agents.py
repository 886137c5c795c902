"""The agent and tools of the fleet page's browser test, on pool `fleet`.

`dispatcher` is an `AiService` whose scripted model reads the user's message as a plan: steps
separated by `;`, each step one batch of calls: `lookup N` asks for N lookups at once (each takes
`LOOKUP_S`: on a worker of concurrency 2, most of them wait in the queue), `flaky` for a call that
fails, `stall` for a call that outlives its 1 s timeout. Failed calls are told to the model; when
the plan is done it answers `done`.
"""

from __future__ import annotations

import json
import os
import time

from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    Journal,
    ScriptedChatModel,
    ToolExecutionRequest,
    UserMessage,
)
from orchestrator.handlers import send_exception_message_to_llm
from orchestrator.models.base import ChatRequest
from workers import tool

POOL = "fleet"
LOOKUP_S = 0.3
STALL_TIMEOUT_S = 1.0


@tool("Looks `key` up", pool=POOL, timeout=20)
def lookup(key: str) -> str:
    time.sleep(LOOKUP_S)
    return f"found {key}"


@tool("Always fails", pool=POOL, timeout=20)
def flaky() -> str:
    raise RuntimeError("the upstream is down")


@tool("Takes longer than its timeout", pool=POOL, timeout=STALL_TIMEOUT_S)
def stall(seconds: float) -> str:
    time.sleep(seconds)
    return "finished late"


def _plan(request: ChatRequest) -> AiMessage | str:
    messages = request.messages
    asked = max(i for i, m in enumerate(messages) if isinstance(m, UserMessage))
    steps = [step.split() for step in messages[asked].single_text.split(";") if step.strip()]  # type: ignore[union-attr]
    done = sum(1 for m in messages[asked + 1 :] if isinstance(m, AiMessage) and m.tool_execution_requests)
    if done == len(steps):
        return "done"
    words = steps[done]
    calls: list[tuple[str, dict[str, object]]]
    if words[0] == "lookup":
        calls = [("lookup", {"key": f"k{i}"}) for i in range(int(words[1]))]
    elif words[0] == "stall":
        calls = [("stall", {"seconds": STALL_TIMEOUT_S * 3})]
    else:
        calls = [("flaky", {})]
    return AiMessage(
        tool_execution_requests=[
            ToolExecutionRequest(id=f"call_{done}_{i}", name=name, arguments=json.dumps(arguments))
            for i, (name, arguments) in enumerate(calls)
        ]
    )


def dispatcher() -> AiService:
    """The agent the fleet page's test serves beside `clerk`."""
    return AiService(
        name="dispatcher",
        chat_model=ScriptedChatModel(_plan),
        tools=[lookup, flaky, stall],
        executor=CeleryExecutor(),
        journal=Journal(os.environ["TOOLFLEET_DATABASE_URL"]),
        tool_execution_error_handler=send_exception_message_to_llm(),
    )
