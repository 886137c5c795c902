"""The state of one invocation: its context, conversation, tools, error handlers and saga."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from orchestrator._toolset import add_provided_tools, visible_specifications
from orchestrator.messages import ChatMessage, UserMessage
from orchestrator.models.base import ChatEvent, TokenUsage
from orchestrator.providers import AiServiceTool, ToolProviderRequest
from orchestrator.result import ToolExecuted
from orchestrator.saga import Saga
from workers.calls.invocation import Invocation, InvocationContext, InvocationParameters
from workers.protocol import ToolExecution
from workers.tools import ToolDefinition
from workers.tools.specification import ToolSpecification

if TYPE_CHECKING:
    from orchestrator.service import AiService

__all__ = ["Emit", "InvocationState", "Mode", "Tool"]

Mode = Literal["chat", "achat", "stream"]
Emit = Callable[[ChatEvent | ToolExecuted], None]
Tool = ToolDefinition | AiServiceTool


class InvocationState:
    """What one invocation knows: who asked what, the conversation so far, its tools and its saga."""

    def __init__(
        self,
        service: AiService,
        user_message: UserMessage,
        memory_id: str | None,
        parameters: InvocationParameters,
        mode: Mode,
        emit: Emit | None,
    ) -> None:
        self.service = service
        self.mode = mode
        self.emit = emit
        self.user_message = user_message
        self.memory_id = memory_id or "default"
        self.parameters = parameters
        self.context = InvocationContext(
            invocation_id=uuid.uuid4(),
            service_name=service.name,
            memory_id=self.memory_id,
            user_message=user_message.single_text,
            timestamp=datetime.now(UTC),
        )
        self.memory = service._memory_for(memory_id)
        self.transcript: list[ChatMessage] = []  # used when no memory is configured
        self.tools: dict[str, Tool] = dict(service._tools)
        self.found: list[str] = []
        self.executions: list[ToolExecution] = []
        self.token_usage: TokenUsage | None = None
        self.arguments_handler, self.execution_handler = service._handlers_for(mode)
        self.gate = asyncio.Semaphore(service.max_fanout)
        self.used_ids: set[str] = set()
        self.compensating = service.compensate_on_tool_errors
        self.journal = service.journal
        self.saga = Saga(
            service.executor, self.journal, str(self.context.invocation_id), keep=self.compensating
        )

    def _invocation(self) -> Invocation:
        return Invocation(self.context, self.parameters.to_json())

    # -- messages ---------------------------------------------------------------------------------

    def _messages(self) -> list[ChatMessage]:
        return self.memory.messages() if self.memory is not None else list(self.transcript)

    def _add(self, message: ChatMessage) -> None:
        if self.memory is not None:
            self.memory.add(message)
        else:
            self.transcript.append(message)

    # -- tools ------------------------------------------------------------------------------------

    def _provider_request(self) -> ToolProviderRequest:
        return ToolProviderRequest(
            user_message=self.user_message,
            memory_id=self.memory_id,
            invocation_context=self.context,
            parameters=self.parameters,
            messages=self._messages(),
        )

    def _ask_providers(self, dynamic: bool) -> None:
        providers = [
            p for p in self.service.tool_providers if bool(getattr(p, "is_dynamic", False)) == dynamic
        ]
        if providers:
            add_provided_tools(self.service, providers, self._provider_request(), self.tools, dynamic=dynamic)

    def _visible(self) -> list[ToolSpecification]:
        return visible_specifications(
            self.tools, self.service.tool_search_strategy, self.found, self._messages()
        )
