"""What every invocation of one `AiService` shares: a frozen configuration, built once by the service.

The loop (`orchestrator.loop.run`) receives a `LoopConfig` and a fresh `RunState` per
invocation; it never reaches back into the service. The error handlers of each edge (`chat`,
`achat`, `stream`) are chosen here, once, by the defaults of SPEC §6 where none were given.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, TypeAlias

from orchestrator.approvals import DEFAULT_APPROVAL_TIMEOUT_S, ApprovalPolicy
from orchestrator.budgets import Budget, TenantBudgets
from orchestrator.errors import OrchestratorError
from orchestrator.executors.base import ToolExecutor
from orchestrator.handlers import (
    ToolArgumentsErrorHandler,
    ToolExecutionErrorHandler,
    fail_invocation,
    fail_invocation_unless_visible_to_llm,
    send_exception_message_to_llm,
    warn_and_send_exception_message,
)
from orchestrator.loop.catalog_tools import LiveCatalogTools
from orchestrator.loop.toolset import Tool
from orchestrator.memory import ChatMemory
from orchestrator.messages import ToolExecutionResultMessage
from orchestrator.models.base import ChatModel, ToolChoice
from orchestrator.providers import ToolProvider
from orchestrator.saga.async_journal import AsyncJournal, JournalRunner, journal_runner
from orchestrator.saga.journal import Journal
from orchestrator.search import ToolSearchStrategy
from workers.priorities import check_priority
from workers.protocol import ToolExecutionRequest
from workers.redis_client import connect as connect_redis
from workers.settings import Settings
from workers.tools.specification import ToolSpecification

__all__ = [
    "EdgeHandlers",
    "HallucinatedToolNameStrategy",
    "LoopConfig",
    "Memories",
    "Mode",
    "OnOrchestratorLoss",
    "SystemMessage",
    "edge_handlers",
]

Mode = Literal["chat", "achat", "stream"]
OnOrchestratorLoss = Literal["resume", "compensate"]
HallucinatedToolNameStrategy: TypeAlias = Callable[[ToolExecutionRequest], "str | ToolExecutionResultMessage"]
SystemMessage: TypeAlias = str | Callable[[str], str | None] | None


@dataclass(frozen=True)
class EdgeHandlers:
    """The error handlers of one edge: what an arguments error and an execution error become."""

    arguments: ToolArgumentsErrorHandler
    execution: ToolExecutionErrorHandler


def edge_handlers(
    arguments: ToolArgumentsErrorHandler | None, execution: ToolExecutionErrorHandler | None
) -> dict[Mode, EdgeHandlers]:
    """The handlers of each edge: those given, else SPEC §6's defaults. `chat()`/`stream()`: an
    arguments error fails the invocation, an execution error's message goes to the model (logged);
    `achat()`: an arguments error goes to the model, an execution error fails the invocation unless
    it is a `ToolErrorVisibleToLlm`."""
    sync = EdgeHandlers(arguments or fail_invocation(), execution or warn_and_send_exception_message)
    concurrent = EdgeHandlers(
        arguments or send_exception_message_to_llm(), execution or fail_invocation_unless_visible_to_llm()
    )
    return {"chat": sync, "achat": concurrent, "stream": sync}


class Memories:
    """The memory of each memory id: the one `chat_memory`, or one per id from `chat_memory_provider`
    (made on first use and kept)."""

    def __init__(self, memory: ChatMemory | None, provider: Callable[[str], ChatMemory] | None) -> None:
        self.memory = memory
        self.provider = provider
        self._by_id: dict[str, ChatMemory] = {}
        self._lock = threading.Lock()

    def get(self, memory_id: str | None) -> ChatMemory | None:
        """The memory of `memory_id` (`"default"` when None); None when no memory is configured."""
        if self.memory is not None:
            return self.memory
        if self.provider is None:
            return None
        key = memory_id or "default"
        with self._lock:
            memory = self._by_id.get(key)
            if memory is None:
                memory = self.provider(key)
                if getattr(memory, "id", None) is None:
                    memory.id = key
                self._by_id[key] = memory
            return memory


@dataclass(frozen=True)
class LoopConfig:
    """Everything about an `AiService` the loop reads: fixed when the service is built. What follows
    from the configuration (the handlers of each edge, the providers asked once or before every model
    call, the search tool's specification) is worked out here once, not per invocation."""

    chat_model: ChatModel
    executor: ToolExecutor
    tools: Mapping[str, Tool]  # the service's own tools, by name (providers add more per invocation)
    arguments_handler: ToolArgumentsErrorHandler | None  # as given
    execution_handler: ToolExecutionErrorHandler | None  # as given
    memories: Memories
    system_message: SystemMessage
    providers: tuple[ToolProvider, ...]
    tool_search: ToolSearchStrategy | None
    hallucinated_tool_name_strategy: HallucinatedToolNameStrategy | None
    tool_choice: ToolChoice | None
    max_round_trips: int
    concurrently: bool
    max_fanout: int
    compensating: bool
    # As given. `chat()` runs its own loop to the end, blocking its caller: it journals through it.
    journal: Journal | AsyncJournal | None
    name: str | None
    catalog: LiveCatalogTools | None  # the live catalog, when no tools were given
    approval_policy: ApprovalPolicy | None = None  # picks calls that wait for a person, besides tools'
    approval_timeout_s: float = DEFAULT_APPROVAL_TIMEOUT_S  # a call not decided by then is rejected
    compensate_on_rejection: bool = False  # a rejected call counts as a failed one for the saga
    # What becomes of a journaled invocation whose orchestrator dies: carried on by another
    # ("resume", from its checkpoints) or undone ("compensate").
    on_orchestrator_loss: OnOrchestratorLoss = "resume"
    budget: Budget | None = None  # what each invocation may spend
    daily_budgets: Mapping[str, Budget] = field(default_factory=dict)  # each tenant's, per day
    priority: int | None = None  # its invocations' calls' priority, unless an invocation has its own
    handlers: Mapping[Mode, EdgeHandlers] = field(init=False)  # those of each edge, defaults filled in
    cancel_redis_url: str | None = field(init=False)  # where cancel requests come from (worker pools)
    heartbeat_s: float = field(init=False)  # how often a journaled invocation beats (settings)
    static_providers: tuple[ToolProvider, ...] = field(init=False)  # asked once, at the start
    dynamic_providers: tuple[ToolProvider, ...] = field(init=False)  # asked before every model call
    search_tool: ToolSpecification | None = field(init=False)  # the search tool the model sees
    # What `achat` and `stream` journal through, never blocking their loop: for a Journal, an
    # AsyncJournal over its database.
    journal_runner: JournalRunner | None = field(init=False)
    tenant_budgets: TenantBudgets | None = field(init=False)  # `daily_budgets`, counted in Redis

    def __post_init__(self) -> None:
        if self.priority is not None:
            try:
                check_priority(self.priority, "AiService(priority=...)")
            except ValueError as exc:
                raise OrchestratorError(str(exc)) from None
        if self.on_orchestrator_loss not in ("resume", "compensate"):
            loss = self.on_orchestrator_loss
            raise OrchestratorError(f"on_orchestrator_loss must be 'resume' or 'compensate', got {loss!r}")
        derived = {
            "handlers": MappingProxyType(edge_handlers(self.arguments_handler, self.execution_handler)),
            "static_providers": tuple(p for p in self.providers if not _is_dynamic(p)),
            "dynamic_providers": tuple(p for p in self.providers if _is_dynamic(p)),
            "search_tool": self.tool_search.search_tool() if self.tool_search is not None else None,
            "journal_runner": journal_runner(self.journal),
            "cancel_redis_url": _redis_url_of(self.executor),
            "heartbeat_s": _heartbeat_of(self.executor) if self.journal is not None else 0.0,
            "tenant_budgets": _tenant_budgets(self.daily_budgets, _redis_url_of(self.executor)),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)  # frozen: set once, here

    @property
    def checkpointing(self) -> bool:
        """Whether invocations journal checkpoints (another process may carry them on)."""
        return self.journal is not None and self.on_orchestrator_loss == "resume"

    @property
    def search_tool_name(self) -> str | None:
        return self.search_tool.name if self.search_tool is not None else None

    @property
    def handlers_defaulted(self) -> bool:
        """A handler was left to its default (the service then gives its notice)."""
        return self.arguments_handler is None or self.execution_handler is None

    def renamed(self, name: str) -> LoopConfig:
        """The same configuration under `name`, sharing everything else (journal, budgets, tools)."""
        twin = copy.copy(self)
        object.__setattr__(twin, "name", name)  # frozen: set once, here
        return twin

    def system_message_for(self, memory_id: str) -> str | None:
        if callable(self.system_message):
            return self.system_message(memory_id)
        return self.system_message


def _is_dynamic(provider: ToolProvider) -> bool:
    return bool(getattr(provider, "is_dynamic", False))


def _heartbeat_of(executor: ToolExecutor) -> float:
    """How often a journaled invocation beats: the executor's settings, else the environment's."""
    from orchestrator.executors.celery import CeleryExecutor

    settings = executor.settings if isinstance(executor, CeleryExecutor) else Settings.from_env()
    return settings.invocation_heartbeat_s


def _tenant_budgets(budgets: Mapping[str, Budget], redis_url: str | None) -> TenantBudgets | None:
    if not budgets:
        return None
    if redis_url is None:
        raise OrchestratorError(
            "daily_budgets need an executor on worker pools (CeleryExecutor): their counters are kept "
            "in its Redis, shared by every orchestrator"
        )
    return TenantBudgets(budgets, connect_redis(redis_url))


def _redis_url_of(executor: ToolExecutor) -> str | None:
    """The Redis of an executor on the worker pools, whose cancel requests its invocations heed."""
    from orchestrator.executors.celery import CeleryExecutor  # the loop imports no executor at start

    return executor.settings.redis_url if isinstance(executor, CeleryExecutor) else None
