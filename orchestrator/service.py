"""`AiService`: keyword configuration, built once into the loop's frozen `LoopConfig`, and the `chat` /
`achat` / `stream` edges of the loop in `orchestrator.loop.run`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from functools import partial
from types import MappingProxyType
from typing import Any

from orchestrator.approvals import DEFAULT_APPROVAL_TIMEOUT_S, ApprovalDecision, ApprovalPolicy
from orchestrator.budgets import Budget
from orchestrator.errors import OrchestratorError
from orchestrator.executors.base import ToolExecutor
from orchestrator.executors.local import LocalExecutor
from orchestrator.handlers import ToolArgumentsErrorHandler, ToolExecutionErrorHandler
from orchestrator.loop.adopting import carry_on, claim_adoption
from orchestrator.loop.cancellation import cancel_call, cancel_invocation
from orchestrator.loop.catalog_tools import LiveCatalogToolProvider, live_catalog_of
from orchestrator.loop.config import (
    HallucinatedToolNameStrategy,
    LoopConfig,
    Memories,
    Mode,
    OnOrchestratorLoss,
    SystemMessage,
)
from orchestrator.loop.configuration import ServiceConfiguration, fanout_of
from orchestrator.loop.resuming import resume
from orchestrator.loop.run import run_invocation
from orchestrator.loop.service_tool import service_tool
from orchestrator.loop.state import Emit, new_state
from orchestrator.loop.streaming import events_of, outside_a_loop
from orchestrator.loop.toolset import Tool, resolve_tools
from orchestrator.memory import ChatMemory
from orchestrator.messages import UserMessage
from orchestrator.models.base import ChatModel, ToolChoice
from orchestrator.providers import AiServiceTool, ToolProvider
from orchestrator.result import Result, StreamEvent
from orchestrator.saga.async_journal import AsyncJournal, JournalRunner
from orchestrator.saga.journal import Journal
from orchestrator.saga.recovery import cancel_paused
from orchestrator.search import ToolSearchStrategy
from workers.calls.invocation import InvocationParameters
from workers.errors import ToolDefinitionError
from workers.priorities import PRIORITY_PARAMETER
from workers.settings import Settings
from workers.tools import ToolDefinition, check_compensations
from workers.tools.specification import ToolSpecification

__all__ = ["AiService"]

log = logging.getLogger(__name__)

_defaults_notice_given = False
_notice_lock = threading.Lock()


class AiService(ServiceConfiguration):
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
    `max_concurrent_tool_calls=` is a deprecated alias of it. `budget` bounds what each invocation
    spends, `daily_budgets` what each tenant spends per day (`orchestrator.budgets`). `priority` (0 to 9,
    higher sooner) orders its calls before other invocations' waiting for the same pool, unless an
    invocation's parameter `priority` says otherwise.

    The configuration is read once, when the service is built, into the frozen `LoopConfig` every
    invocation shares; the attributes that show it are read-only.
    """

    def __init__(
        self,
        *,
        chat_model: ChatModel,
        tools: Iterable[Any] | None = None,
        executor: ToolExecutor | None = None,
        system_message: SystemMessage = None,
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
        journal: Journal | AsyncJournal | None = None,
        name: str | None = None,
        approval_policy: ApprovalPolicy | None = None,
        approval_timeout_s: float = DEFAULT_APPROVAL_TIMEOUT_S,
        compensate_on_rejection: bool = False,
        on_orchestrator_loss: OnOrchestratorLoss = "resume",
        budget: Budget | None = None,
        daily_budgets: Mapping[str, Budget] | None = None,
        priority: int | None = None,
    ) -> None:
        if chat_memory is not None and chat_memory_provider is not None:
            raise OrchestratorError("Give chat_memory or chat_memory_provider, not both")
        if not approval_timeout_s > 0:
            raise OrchestratorError(f"approval_timeout_s must be positive seconds, got {approval_timeout_s}")
        if max_tool_calling_round_trips < 1:
            raise OrchestratorError("max_tool_calling_round_trips must be at least 1")
        executor = executor if executor is not None else LocalExecutor()
        max_fanout = fanout_of(executor, max_fanout, max_concurrent_tool_calls)
        providers = list(tool_providers)
        # No tools given: those live workers serve, when the executor knows them (CeleryExecutor).
        # Tool providers choose the tools themselves (they may be there to narrow them down).
        catalog = live_catalog_of(executor) if tools is None and not providers else None
        if catalog is not None:
            providers.append(LiveCatalogToolProvider(catalog))
        sources = list(tools or ())
        if compensate_on_tool_errors:
            for source in sources:
                if not isinstance(source, ToolDefinition | AiServiceTool | AiService):
                    check_compensations(source)
        own: dict[str, Tool] = {}
        for tool in resolve_tools(sources):
            if tool.specification.name in own:
                raise ToolDefinitionError(f"Duplicated definition for tool: {tool.specification.name}")
            own[tool.specification.name] = tool
        asks_approval = approval_policy is not None or any(
            isinstance(t, ToolDefinition) and t.requires_approval for t in own.values()
        )
        if journal is None and (compensate_on_tool_errors or asks_approval):
            settings = Settings.from_env()
            journal = Journal(settings.database_url, keys=settings.journal_keys)
        self._config = LoopConfig(
            chat_model=chat_model,
            executor=executor,
            tools=MappingProxyType(own),
            arguments_handler=tool_arguments_error_handler,
            execution_handler=tool_execution_error_handler,
            memories=Memories(chat_memory, chat_memory_provider),
            system_message=system_message,
            providers=tuple(providers),
            tool_search=tool_search_strategy,
            hallucinated_tool_name_strategy=hallucinated_tool_name_strategy,
            tool_choice=tool_choice,
            max_round_trips=max_tool_calling_round_trips,
            concurrently=execute_tools_concurrently,
            max_fanout=max_fanout,
            compensating=compensate_on_tool_errors,
            journal=journal,
            name=name,
            catalog=catalog,
            approval_policy=approval_policy,
            approval_timeout_s=approval_timeout_s,
            compensate_on_rejection=compensate_on_rejection,
            on_orchestrator_loss=on_orchestrator_loss,
            budget=budget,
            daily_budgets=MappingProxyType(dict(daily_budgets or {})),
            priority=priority,
        )

    # -- the edges --------------------------------------------------------------------------------

    def chat(
        self,
        user_message: str | UserMessage,
        *,
        memory_id: str | None = None,
        parameters: Mapping[str, Any] | InvocationParameters | None = None,
        memory: ChatMemory | None = None,
        invocation_id: str | None = None,
    ) -> Result:
        """Run one invocation and return its `Result` (from synchronous code); `memory` replaces the
        memory of `memory_id` for it, `invocation_id` (a UUID) names it instead of a new one."""
        outside_a_loop("chat", "achat")
        return asyncio.run(self._invoke("chat", user_message, memory_id, parameters, memory, invocation_id))

    async def achat(
        self,
        user_message: str | UserMessage,
        *,
        memory_id: str | None = None,
        parameters: Mapping[str, Any] | InvocationParameters | None = None,
        memory: ChatMemory | None = None,
        invocation_id: str | None = None,
    ) -> Result:
        """Run one invocation and return its `Result` (from async code); the arguments as `chat`'s."""
        return await self._invoke("achat", user_message, memory_id, parameters, memory, invocation_id)

    async def stream(
        self,
        user_message: str | UserMessage,
        *,
        memory_id: str | None = None,
        parameters: Mapping[str, Any] | InvocationParameters | None = None,
        memory: ChatMemory | None = None,
        invocation_id: str | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Run one invocation, yielding the model's events and `ToolExecuted` as they happen, then one
        `CompleteResponse` carrying the `Result`; an error ends the stream by raising. Closing the stream
        early cancels the invocation (what succeeded is compensated before the close returns)."""
        args = (user_message, memory_id, parameters, memory, invocation_id)
        async for event in events_of(lambda emit: self._invoke("stream", *args, emit)):
            yield event

    async def _invoke(
        self,
        mode: Mode,
        user_message: str | UserMessage,
        memory_id: str | None,
        parameters: Mapping[str, Any] | InvocationParameters | None,
        memory: ChatMemory | None,
        invocation_id: str | None,
        emit: Emit | None = None,
    ) -> Result:
        config = self._config
        message = UserMessage(user_message) if isinstance(user_message, str) else user_message
        params = (
            parameters if isinstance(parameters, InvocationParameters) else InvocationParameters(parameters)
        )
        if config.priority is not None and params.get(PRIORITY_PARAMETER) is None:
            params.merge({PRIORITY_PARAMETER: config.priority})  # the service's, unless the caller's
        if config.catalog is not None:
            await config.catalog.refresh()
        if config.handlers_defaulted:
            _notice_defaults()
        state = new_state(
            config, message, memory_id, params, mode, emit, memory=memory, invocation_id=invocation_id
        )
        return await run_invocation(config, state)

    def daily_budget_exhausted(self, tenant: str) -> str | None:
        """Why `tenant` may start no invocation today (a daily budget spent or unanswerable), else None."""
        budgets = self._config.tenant_budgets
        return None if budgets is None else budgets.exhausted(tenant)

    # -- approvals --------------------------------------------------------------------------------

    def resume(
        self,
        invocation_id: str,
        decisions: Mapping[str, ApprovalDecision] | None = None,
        *,
        by: str | None = None,
        memory: ChatMemory | None = None,
    ) -> Result | None:
        """Decide calls of a paused invocation (call id → `approve()` / `reject(reason)`) and, once none
        waits, go on with it here, in any process: its `Result`; one listing the calls still waiting;
        or None when another process goes on with it (exactly one does). `by` names who decided."""
        outside_a_loop("resume", "aresume")
        return asyncio.run(resume(self._config, invocation_id, decisions, by=by, mode="chat", memory=memory))

    async def aresume(
        self,
        invocation_id: str,
        decisions: Mapping[str, ApprovalDecision] | None = None,
        *,
        by: str | None = None,
        memory: ChatMemory | None = None,
    ) -> Result | None:
        """`resume` from async code."""
        return await resume(self._config, invocation_id, decisions, by=by, mode="achat", memory=memory)

    # -- adoption: an invocation whose orchestrator died, carried on here --------------------------

    @property
    def carries_on(self) -> bool:
        """Whether another process carries its invocations on when their orchestrator dies."""
        return self._config.checkpointing

    async def aadopt(
        self, invocation_id: str, *, stale_after_s: float, memory: ChatMemory | None = None
    ) -> Result | None:
        """Carry on here, to its end, an invocation whose owner has not beaten for `stale_after_s`: its
        `Result`; None when it cannot be (`adopting.adoptable`) or another process took it first."""
        journal = self._config.journal_runner
        if journal is None or not await claim_adoption(journal, invocation_id, stale_after_s):
            return None
        return await carry_on(self._config, invocation_id, mode="achat", memory=memory)

    async def stream_adopted(
        self, invocation_id: str, *, memory: ChatMemory | None = None
    ) -> AsyncIterator[StreamEvent]:
        """The events, as `stream()`'s, of an invocation adopted here (`adopting.claim_adoption`)."""
        start = partial(carry_on, self._config, invocation_id, mode="stream", memory=memory)
        async for event in events_of(lambda emit: start(emit=emit)):
            yield event

    async def stream_resume(
        self,
        invocation_id: str,
        decisions: Mapping[str, ApprovalDecision] | None = None,
        *,
        by: str | None = None,
        memory: ChatMemory | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """`resume`, yielding the events of the invocation going on as `stream()` does (none, and no
        `CompleteResponse`, when another process goes on with it)."""
        start = partial(resume, self._config, invocation_id, decisions, by=by, mode="stream", memory=memory)
        async for event in events_of(lambda emit: start(emit=emit)):
            yield event

    def cancel(self, invocation_id: str) -> bool:
        """Cancel an invocation running anywhere, or paused (what it did compensated); whether it was."""
        ran = cancel_invocation(invocation_id, self._config.cancel_redis_url)
        journal = self._config.journal
        if journal is None:
            return ran
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # blocking, from any thread or loop
            paused = pool.submit(asyncio.run, self._cancel_paused(journal, invocation_id)).result()
        return paused or ran

    async def acancel(self, invocation_id: str) -> bool:
        """`cancel` from async code."""
        ran = cancel_invocation(invocation_id, self._config.cancel_redis_url)
        runner = self._config.journal_runner
        return (runner is not None and await self._cancel_paused(runner, invocation_id)) or ran

    async def _cancel_paused(self, journal: JournalRunner, invocation_id: str) -> bool:
        own = {n: t for n, t in self._config.tools.items() if isinstance(t, ToolDefinition)}
        return await cancel_paused(journal, self._config.executor, invocation_id, own) is not None

    def cancel_call(self, invocation_id: str, call_id: str) -> bool:
        """Cancel one running call of an invocation here (it fails, the invocation goes on); if it ran."""
        return cancel_call(invocation_id, call_id)

    def named(self, name: str) -> AiService:
        """This service under `name`: its invocations are journaled, traced and counted as `name`'s."""
        twin = copy.copy(self)
        twin._config = self._config.renamed(name)
        return twin

    # -- memory -----------------------------------------------------------------------------------

    def memory(self, memory_id: str = "default") -> ChatMemory:
        """The memory of `memory_id` (configure `chat_memory` or `chat_memory_provider` first)."""
        memory = self._config.memories.get(memory_id)
        if memory is None:
            raise OrchestratorError(
                "This AiService has no memory: give it chat_memory or chat_memory_provider"
            )
        return memory

    # -- tools ------------------------------------------------------------------------------------

    def tool_specifications(self) -> list[ToolSpecification]:
        """The specifications of the service's own tools (providers' and search aside); given no
        tools, on a `CeleryExecutor`, those live workers serve now."""
        if self._config.catalog is not None:
            return [definition.specification for definition in self._config.catalog.current()]
        return [tool.specification for tool in self._config.tools.values()]

    def pools(self) -> set[str]:
        """The pools the service's own tools run on (given no tools, those live workers serve now)."""
        config = self._config
        tools = config.catalog.current() if config.catalog is not None else config.tools.values()
        return {tool.pool for tool in tools if isinstance(tool, ToolDefinition)}

    def as_tool(
        self, name: str, description: str, *, parameter: str = "request", template: str | None = None
    ) -> AiServiceTool:
        """This service as a tool of another: each call runs a separate invocation, with this service's
        own memory (under `<name>:<calling invocation id>`) and tools.

        The model passes one string argument, `parameter`; the user message is that string, or
        `template` with it filled in (`template="Review this code:\n{request}"`).
        """
        return service_tool(self.achat, name, description, parameter, template)


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
