"""The agent measures 6 and 7 serve with `toolfleet serve`, and measure 6 also calls in-process;
`napping`, measure 12's.

Its model is a `ScriptedChatModel` that asks for one `noop` call (`bench/tools.py`, pool `bench`,
run through `CeleryExecutor` on the benchmark's worker), then answers `ANSWER`: no HTTP upstream, so
the served and the in-process sides run the very same agent. A replica serves it as `plain` (no
journal) and `journaled` (`Journal` at `TOOLFLEET_BENCH_JOURNAL_URL`, which the benchmark sets). Its
tools are those of `bench/tools.py` on the `bench` pool, the one the benchmark's worker serves: a
replica is ready only once every pool its agents' tools need has a live worker.
"""

from __future__ import annotations

import itertools
import os

from bench import tools
from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    Journal,
    ScriptedChatModel,
    ToolExecutor,
    fail_invocation,
)
from orchestrator.messages import ToolExecutionResultMessage
from orchestrator.models.base import ChatRequest
from workers import ToolExecutionRequest
from workers.tools import ToolDefinition, discover_tools

__all__ = [
    "ANSWER",
    "JOURNAL_URL_VARIABLE",
    "NAP_S",
    "POOL",
    "agent",
    "journaled",
    "napping",
    "plain",
    "script",
]

ANSWER = "done"
JOURNAL_URL_VARIABLE = "TOOLFLEET_BENCH_JOURNAL_URL"
POOL = "bench"  # the pool of the benchmark's worker

NAP_S = 2.0  # how long `napping`'s one call sleeps

_call_ids = itertools.count(1)


def script(request: ChatRequest) -> AiMessage:
    """One `noop` call, then `ANSWER` once the conversation ends with the call's result."""
    if request.messages and isinstance(request.messages[-1], ToolExecutionResultMessage):
        return AiMessage(text=ANSWER)
    return AiMessage(tool_execution_requests=[ToolExecutionRequest(f"call-{next(_call_ids)}", "noop", "{}")])


def _tools() -> list[ToolDefinition]:
    """The tools of `bench/tools.py` on `POOL` (others run on workers of their own measures)."""
    return [definition for definition in discover_tools(tools) if definition.pool == POOL]


def agent(*, executor: ToolExecutor | None = None, journal: Journal | None = None) -> AiService:
    """The agent: its tools on the `bench` pool (`executor`, a new `CeleryExecutor` by default); a tool
    error fails the invocation, so that a measure never times a call that went wrong."""
    return AiService(
        chat_model=ScriptedChatModel(script),
        tools=_tools(),
        executor=executor if executor is not None else CeleryExecutor(),
        journal=journal,
        tool_arguments_error_handler=fail_invocation(),
        tool_execution_error_handler=fail_invocation(),
    )


def plain() -> AiService:
    """The agent without a journal."""
    return agent()


def journaled() -> AiService:
    """The agent writing its saga to the journal at `TOOLFLEET_BENCH_JOURNAL_URL`."""
    return agent(journal=Journal(os.environ[JOURNAL_URL_VARIABLE]))


def _nap_script(request: ChatRequest) -> AiMessage:
    """One `sleep_for(NAP_S)` call, then `ANSWER`."""
    if request.messages and isinstance(request.messages[-1], ToolExecutionResultMessage):
        return AiMessage(text=ANSWER)
    arguments = f'{{"seconds": {NAP_S}}}'
    return AiMessage(
        tool_execution_requests=[ToolExecutionRequest(f"nap-{next(_call_ids)}", "sleep_for", arguments)]
    )


def napping() -> AiService:
    """A journaled agent whose one call sleeps `NAP_S` (measure 12 kills its replica during it)."""
    return AiService(
        chat_model=ScriptedChatModel(_nap_script),
        tools=_tools(),
        executor=CeleryExecutor(),
        journal=Journal(os.environ[JOURNAL_URL_VARIABLE]),
        tool_arguments_error_handler=fail_invocation(),
        tool_execution_error_handler=fail_invocation(),
    )
