"""The state of one invocation: who asked what, the conversation so far, its tools, what ran, its saga."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from orchestrator.budgets import InvocationSpend
from orchestrator.loop.config import EdgeHandlers, LoopConfig, Mode
from orchestrator.loop.toolset import Tool, add_provided_tools, visible_specifications
from orchestrator.memory import AsyncChatMemory, ChatMemory
from orchestrator.messages import ChatMessage, UserMessage
from orchestrator.models.base import TokenUsage
from orchestrator.providers import ToolProvider, ToolProviderRequest
from orchestrator.result import StreamEvent
from orchestrator.saga import Saga
from workers.calls.invocation import Invocation, InvocationContext, InvocationParameters
from workers.protocol import ToolExecution
from workers.tools.specification import ToolSpecification

__all__ = ["Emit", "RunState", "ask_providers", "new_state", "visible"]

Emit = Callable[[StreamEvent], None]


@dataclass
class RunState:
    """What one invocation knows and has done so far; the loop's functions read and update it."""

    handlers: EdgeHandlers  # those of the edge the invocation came through
    user_message: UserMessage
    memory_id: str
    parameters: InvocationParameters
    context: InvocationContext
    memory: ChatMemory | None
    tools: dict[str, Tool]  # the service's, then what providers add
    saga: Saga
    gate: asyncio.Semaphore  # at most max_fanout calls of this invocation in flight
    emit: Emit | None = None  # set when streaming: where the events go
    transcript: list[ChatMessage] = field(default_factory=list)  # the conversation without memory
    found: list[str] = field(default_factory=list)  # tools tool search found in this invocation
    executions: list[ToolExecution] = field(default_factory=list)
    token_usage: TokenUsage | None = None
    round_trips: int = 0
    used_ids: set[str] = field(default_factory=set)  # tool call ids given so far
    shown: set[str] = field(default_factory=set)  # the tools the model was shown with the last request
    mode: Mode = "chat"  # the edge it came through (kept when it pauses)
    spend: InvocationSpend | None = None  # what it spent against its service's budget, if it has one

    def invocation(self) -> Invocation:
        """The invocation as a tool call sees it: its context and parameters as they are now."""
        return Invocation(self.context, self.parameters.to_json())

    # The conversation, read and written from the loop's coroutines: through the memory's own
    # coroutines where it has them (`MessageWindowChatMemory`), so that a memory kept in a database
    # never blocks the event loop (whose other tasks may hold the lock its write waits for).

    async def messages(self) -> list[ChatMessage]:
        if self.memory is None:
            return list(self.transcript)
        if isinstance(self.memory, AsyncChatMemory):
            return await self.memory.amessages()
        return self.memory.messages()

    async def add(self, *messages: ChatMessage) -> None:
        if self.memory is None:
            self.transcript.extend(messages)
        elif isinstance(self.memory, AsyncChatMemory):
            await self.memory.aadd(*messages)
        else:
            for message in messages:
                self.memory.add(message)

    async def set_messages(self, messages: list[ChatMessage]) -> None:
        if self.memory is None:
            self.transcript = messages
        elif isinstance(self.memory, AsyncChatMemory):
            await self.memory.aset_messages(messages)
        else:
            self.memory.set_messages(messages)


def new_state(
    config: LoopConfig,
    user_message: UserMessage,
    memory_id: str | None,
    parameters: InvocationParameters,
    mode: Mode,
    emit: Emit | None,
    *,
    memory: ChatMemory | None = None,
    invocation_id: str | None = None,
) -> RunState:
    """The state an invocation starts with: its id (a new one by default), `memory` or else the memory
    of `memory_id`, the service's tools, its saga (journaled as `LoopConfig.journal` says for `mode`)."""
    context = InvocationContext(
        invocation_id=uuid.UUID(invocation_id) if invocation_id is not None else uuid.uuid4(),
        service_name=config.name,
        memory_id=memory_id or "default",
        user_message=user_message.single_text,
        timestamp=datetime.now(UTC),
    )
    journal = config.journal if mode == "chat" else config.journal_runner
    saga = Saga(config.executor, journal, str(context.invocation_id), keep=config.compensating)
    return RunState(
        handlers=config.handlers[mode],
        user_message=user_message,
        memory_id=context.memory_id,
        parameters=parameters,
        context=context,
        memory=memory if memory is not None else config.memories.get(memory_id),
        tools=dict(config.tools),
        saga=saga,
        gate=asyncio.Semaphore(config.max_fanout),
        emit=emit,
        mode=mode,
        spend=InvocationSpend(config.budget) if config.budget is not None else None,
    )


def ask_providers(
    state: RunState, providers: Sequence[ToolProvider], messages: list[ChatMessage], *, dynamic: bool
) -> None:
    """Add the tools of the static providers (once, at the start) or the dynamic ones (before every
    model call); `messages` is the conversation as the loop read it for this step."""
    if not providers:
        return
    request = ToolProviderRequest(
        user_message=state.user_message,
        memory_id=state.memory_id,
        invocation_context=state.context,
        parameters=state.parameters,
        messages=messages,
    )
    add_provided_tools(providers, request, state.tools, dynamic=dynamic)


def visible(config: LoopConfig, state: RunState, messages: list[ChatMessage]) -> list[ToolSpecification]:
    """The specifications the model is shown now (all tools, or with tool search those it may see),
    given the conversation as the loop read it for this request."""
    return visible_specifications(state.tools, config.search_tool, state.found, messages)
