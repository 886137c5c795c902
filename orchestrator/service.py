"""`AiService`: configuration, and the `chat` / `achat` / `stream` edges of the loop in `_loop`."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from orchestrator._catalog_tools import LiveCatalogToolProvider, LiveCatalogTools, live_catalog_of
from orchestrator._loop import Mode, run_invocation
from orchestrator.errors import OrchestratorError
from orchestrator.executors.base import ToolExecutor, fanout_limit
from orchestrator.executors.local import LocalExecutor
from orchestrator.handlers import (
    ToolArgumentsErrorHandler,
    ToolExecutionErrorHandler,
    fail_invocation,
    fail_invocation_unless_visible_to_llm,
    send_exception_message_to_llm,
    warn_and_send_exception_message,
)
from orchestrator.journal import Journal
from orchestrator.memory import ChatMemory
from orchestrator.messages import AiMessage, ToolExecutionResultMessage, UserMessage
from orchestrator.models.base import ChatEvent, ChatModel, ChatResponse, CompleteResponse, ToolChoice
from orchestrator.providers import AiServiceTool, ToolProvider, ToolRunContext
from orchestrator.result import Result, ToolExecuted
from orchestrator.search import ToolSearchStrategy
from workers.calls.invocation import InvocationParameters
from workers.errors import ToolDefinitionError
from workers.protocol import ToolExecutionRequest
from workers.settings import Settings
from workers.tools import ToolDefinition, check_compensations, discover_tools
from workers.tools.registry import instantiate
from workers.tools.specification import ReturnBehavior, ToolSpecification

__all__ = ["AiService"]

log = logging.getLogger(__name__)

_defaults_notice_given = False
_notice_lock = threading.Lock()

HallucinatedToolNameStrategy = Callable[[ToolExecutionRequest], "str | ToolExecutionResultMessage"]


class AiService:
    """The LLM loop with tools: ask the model, run the tools it calls, feed the results back.

    Tools are objects, classes, modules or functions with `@tool` methods, `ToolDefinition`s (for
    example from a worker catalog) and `AiServiceTool`s; the `executor` decides where tool calls
    run (`LocalExecutor()` in-process by default, `CeleryExecutor()` on worker pools). Given no tools
    (neither `tools=` nor `tool_providers=`), a service whose executor reads a worker catalog
    (`CeleryExecutor`) offers the model the tools live workers serve, read again for each invocation
    (a copy at most a second old): a new pool's tools appear, and those of a pool whose workers all
    left disappear. Keyword
    configuration follows the LangChain4j AI service: memory, error handlers, the hallucinated tool
    name strategy, tool providers, tool search, round-trip limit and concurrency.

    `max_fanout` bounds the tool calls of one invocation in flight at once; by default it is the
    executor's (`TOOLFLEET_MAX_FANOUT`, default 64), the same limit `execute_batch()` applies.
    `max_concurrent_tool_calls=` is a deprecated alias of it.
    """

    def __init__(
        self,
        *,
        chat_model: ChatModel,
        tools: Iterable[Any] | None = None,
        executor: ToolExecutor | None = None,
        system_message: str | Callable[[str], str | None] | None = None,
        chat_memory: ChatMemory | None = None,
        chat_memory_provider: Callable[[str], ChatMemory] | None = None,
        tool_providers: Sequence[ToolProvider] = (),
        tool_search_strategy: ToolSearchStrategy | None = None,
        max_tool_calling_round_trips: int = 100,
        execute_tools_concurrently: bool = True,
        max_fanout: int | None = None,
        max_concurrent_tool_calls: int | None = None,
        tool_arguments_error_handler: ToolArgumentsErrorHandler | None = None,
        tool_execution_error_handler: ToolExecutionErrorHandler | None = None,
        hallucinated_tool_name_strategy: HallucinatedToolNameStrategy | None = None,
        tool_choice: ToolChoice | None = None,
        compensate_on_tool_errors: bool = False,
        journal: Journal | None = None,
        name: str | None = None,
    ) -> None:
        if chat_memory is not None and chat_memory_provider is not None:
            raise OrchestratorError("Give chat_memory or chat_memory_provider, not both")
        if max_tool_calling_round_trips < 1:
            raise OrchestratorError("max_tool_calling_round_trips must be at least 1")
        if max_concurrent_tool_calls is not None:
            warnings.warn(
                "AiService(max_concurrent_tool_calls=) is deprecated: use max_fanout= "
                "(or TOOLFLEET_MAX_FANOUT), the one fan-out limit",
                DeprecationWarning,
                stacklevel=2,
            )
            if max_fanout is not None and max_fanout != max_concurrent_tool_calls:
                raise OrchestratorError(
                    f"max_fanout={max_fanout} and its deprecated alias "
                    f"max_concurrent_tool_calls={max_concurrent_tool_calls} disagree: give max_fanout only"
                )
            max_fanout = max_concurrent_tool_calls
        self.chat_model = chat_model
        self.executor: ToolExecutor = executor if executor is not None else LocalExecutor()
        self.max_fanout = max_fanout if max_fanout is not None else fanout_limit(self.executor)
        if self.max_fanout < 1:
            raise OrchestratorError(
                f"max_fanout must be at least 1, got {self.max_fanout} "
                "(set max_fanout= or TOOLFLEET_MAX_FANOUT)"
            )
        self.system_message = system_message
        self.chat_memory = chat_memory
        self.chat_memory_provider = chat_memory_provider
        self.tool_providers = list(tool_providers)
        self.tool_search_strategy = tool_search_strategy
        self.max_tool_calling_round_trips = max_tool_calling_round_trips
        self.execute_tools_concurrently = execute_tools_concurrently
        self.tool_arguments_error_handler = tool_arguments_error_handler
        self.tool_execution_error_handler = tool_execution_error_handler
        self.hallucinated_tool_name_strategy = hallucinated_tool_name_strategy
        self.tool_choice = tool_choice
        self.compensate_on_tool_errors = compensate_on_tool_errors
        if journal is None and compensate_on_tool_errors:
            journal = Journal(Settings.from_env().database_url)
        self.journal = journal
        self.name = name
        self._memories: dict[str, ChatMemory] = {}
        self._memories_lock = threading.Lock()
        self._tools: dict[str, ToolDefinition | AiServiceTool] = {}
        # No tools given: those live workers serve, when the executor knows them (CeleryExecutor).
        # Tool providers choose the tools themselves (they may be there to narrow them down).
        self._catalog: LiveCatalogTools | None = (
            live_catalog_of(self.executor) if tools is None and not self.tool_providers else None
        )
        if self._catalog is not None:
            self.tool_providers.append(LiveCatalogToolProvider(self._catalog))
        tools = list(tools or ())
        if compensate_on_tool_errors:
            for source in tools:
                if not isinstance(source, ToolDefinition | AiServiceTool | AiService):
                    check_compensations(source)
        for tool in self._resolve_tools(tools):
            if tool.specification.name in self._tools:
                raise ToolDefinitionError(f"Duplicated definition for tool: {tool.specification.name}")
            self._tools[tool.specification.name] = tool

    # -- the edges --------------------------------------------------------------------------------

    def chat(
        self,
        user_message: str | UserMessage,
        *,
        memory_id: str | None = None,
        parameters: Mapping[str, Any] | InvocationParameters | None = None,
    ) -> Result:
        """Run one invocation and return its `Result` (from synchronous code)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise OrchestratorError("chat() cannot run inside an event loop: use `await service.achat(...)`")
        return asyncio.run(self._invoke(user_message, memory_id, parameters, "chat"))

    async def achat(
        self,
        user_message: str | UserMessage,
        *,
        memory_id: str | None = None,
        parameters: Mapping[str, Any] | InvocationParameters | None = None,
    ) -> Result:
        """Run one invocation and return its `Result` (from async code)."""
        return await self._invoke(user_message, memory_id, parameters, "achat")

    async def stream(
        self,
        user_message: str | UserMessage,
        *,
        memory_id: str | None = None,
        parameters: Mapping[str, Any] | InvocationParameters | None = None,
    ) -> AsyncIterator[ChatEvent | ToolExecuted]:
        """Run one invocation, yielding the model's events and `ToolExecuted` as they happen, then one
        `CompleteResponse` carrying the `Result`; an error ends the stream by raising."""
        queue: asyncio.Queue[ChatEvent | ToolExecuted | None] = asyncio.Queue()
        task = asyncio.ensure_future(
            self._invoke(user_message, memory_id, parameters, "stream", emit=queue.put_nowait)
        )
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while True:
                event = await queue.get()
                if event is None:
                    break
                yield event
            result = task.result()
            yield CompleteResponse(_final_response(result), result)
        finally:
            if not task.done():
                task.cancel()

    async def _invoke(
        self,
        user_message: str | UserMessage,
        memory_id: str | None,
        parameters: Mapping[str, Any] | InvocationParameters | None,
        mode: Mode,
        emit: Callable[[ChatEvent | ToolExecuted], None] | None = None,
    ) -> Result:
        message = UserMessage(user_message) if isinstance(user_message, str) else user_message
        params = (
            parameters if isinstance(parameters, InvocationParameters) else InvocationParameters(parameters)
        )
        if self._catalog is not None:
            await self._catalog.refresh()
        return await run_invocation(
            self, message, memory_id=memory_id, parameters=params, mode=mode, emit=emit
        )

    # -- memory -----------------------------------------------------------------------------------

    def memory(self, memory_id: str = "default") -> ChatMemory:
        """The memory of `memory_id` (configure `chat_memory` or `chat_memory_provider` first)."""
        memory = self._memory_for(memory_id)
        if memory is None:
            raise OrchestratorError(
                "This AiService has no memory: give it chat_memory or chat_memory_provider"
            )
        return memory

    def _memory_for(self, memory_id: str | None) -> ChatMemory | None:
        if self.chat_memory is not None:
            return self.chat_memory
        if self.chat_memory_provider is None:
            return None
        key = memory_id or "default"
        with self._memories_lock:
            memory = self._memories.get(key)
            if memory is None:
                memory = self.chat_memory_provider(key)
                if getattr(memory, "id", None) is None:
                    memory.id = key
                self._memories[key] = memory
            return memory

    def _system_message_for(self, memory_id: str) -> str | None:
        if callable(self.system_message):
            return self.system_message(memory_id)
        return self.system_message

    # -- tools ------------------------------------------------------------------------------------

    def _resolve_tools(self, sources: Iterable[Any]) -> list[ToolDefinition | AiServiceTool]:
        resolved: list[ToolDefinition | AiServiceTool] = []
        for source in sources:
            if isinstance(source, ToolDefinition | AiServiceTool):
                resolved.append(source)
            elif isinstance(source, AiService):
                raise ToolDefinitionError(
                    "Pass an AiService as a tool with service.as_tool(name, description)"
                )
            else:
                resolved += discover_tools(instantiate(source) if isinstance(source, type) else source)
        return resolved

    def _handlers_for(self, mode: Mode) -> tuple[ToolArgumentsErrorHandler, ToolExecutionErrorHandler]:
        if self.tool_arguments_error_handler is None or self.tool_execution_error_handler is None:
            _notice_defaults()
        if mode == "achat":
            arguments: ToolArgumentsErrorHandler = send_exception_message_to_llm()
            execution: ToolExecutionErrorHandler = fail_invocation_unless_visible_to_llm()
        else:
            arguments, execution = fail_invocation(), warn_and_send_exception_message
        return (
            self.tool_arguments_error_handler or arguments,
            self.tool_execution_error_handler or execution,
        )

    def tool_specifications(self) -> list[ToolSpecification]:
        """The specifications of the service's own tools (providers' and search aside); given no
        tools, on a `CeleryExecutor`, those live workers serve now."""
        if self._catalog is not None:
            return [definition.specification for definition in self._catalog.current()]
        return [tool.specification for tool in self._tools.values()]

    def as_tool(
        self, name: str, description: str, *, parameter: str = "request", template: str | None = None
    ) -> AiServiceTool:
        """This service as a tool of another: each call runs a separate invocation, with this service's
        own memory (under `<name>:<calling invocation id>`) and tools.

        The model passes one string argument, `parameter`; the user message is that string, or
        `template` with it filled in (`template="Review this code:\n{request}"`).
        """
        specification = ToolSpecification(
            name=name,
            description=description,
            parameters={
                "type": "object",
                "properties": {parameter: {"type": "string"}},
                "required": [parameter],
            },
        )

        async def run(request: ToolExecutionRequest, context: ToolRunContext) -> str:
            try:
                arguments = json.loads(request.arguments or "{}")
            except ValueError as exc:
                raise OrchestratorError(f"Arguments of tool '{name}' are not valid JSON: {exc}") from None
            text = arguments.get(parameter) if isinstance(arguments, dict) else None
            if not isinstance(text, str):
                raise OrchestratorError(f'Required parameter "{parameter}" of tool "{name}" is missing')
            message = template.format(**{parameter: text}) if template is not None else text
            result = await self.achat(message, memory_id=f"{name}:{context.invocation_context.invocation_id}")
            return result.content or ""

        return AiServiceTool(specification, run, ReturnBehavior.TO_LLM)


def _final_response(result: Result) -> ChatResponse:
    return ChatResponse(AiMessage(result.content), result.finish_reason, result.token_usage)


def _notice_defaults() -> None:
    global _defaults_notice_given
    with _notice_lock:
        if _defaults_notice_given:
            return
        _defaults_notice_given = True
    log.warning(
        "Tool error handlers are not configured, so the documented defaults apply: in chat() and stream() "
        "an arguments error fails the invocation and an execution error's message is sent to the model; "
        "in achat() an arguments error is sent to the model and an execution error fails the invocation "
        "unless it is a ToolErrorVisibleToLlm. Set tool_arguments_error_handler= and "
        "tool_execution_error_handler= on the AiService (for example send_exception_message_to_llm()) to "
        "choose. This notice is shown once per process."
    )
