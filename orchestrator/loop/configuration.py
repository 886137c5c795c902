"""The configuration of an `AiService` as given, read-only: the attributes that show its `LoopConfig`."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping

from orchestrator.budgets import Budget
from orchestrator.errors import OrchestratorError
from orchestrator.executors.base import ToolExecutor, fanout_limit
from orchestrator.handlers import ToolArgumentsErrorHandler, ToolExecutionErrorHandler
from orchestrator.loop.config import HallucinatedToolNameStrategy, LoopConfig, SystemMessage
from orchestrator.memory import ChatMemory
from orchestrator.models.base import ChatModel, ToolChoice
from orchestrator.providers import ToolProvider
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.journal import Journal
from orchestrator.search import ToolSearchStrategy

__all__ = ["ServiceConfiguration", "fanout_of"]


class ServiceConfiguration:
    """Read-only views of the service's frozen configuration."""

    _config: LoopConfig

    @property
    def chat_model(self) -> ChatModel:
        return self._config.chat_model

    @property
    def executor(self) -> ToolExecutor:
        return self._config.executor

    @property
    def max_fanout(self) -> int:
        return self._config.max_fanout

    @property
    def system_message(self) -> SystemMessage:
        return self._config.system_message

    @property
    def chat_memory(self) -> ChatMemory | None:
        return self._config.memories.memory

    @property
    def chat_memory_provider(self) -> Callable[[str], ChatMemory] | None:
        return self._config.memories.provider

    @property
    def tool_providers(self) -> list[ToolProvider]:
        """The tool providers, the live catalog's included when no tools were given."""
        return list(self._config.providers)

    @property
    def tool_search_strategy(self) -> ToolSearchStrategy | None:
        return self._config.tool_search

    @property
    def max_tool_calling_round_trips(self) -> int:
        return self._config.max_round_trips

    @property
    def execute_tools_concurrently(self) -> bool:
        return self._config.concurrently

    @property
    def tool_arguments_error_handler(self) -> ToolArgumentsErrorHandler | None:
        return self._config.arguments_handler

    @property
    def tool_execution_error_handler(self) -> ToolExecutionErrorHandler | None:
        return self._config.execution_handler

    @property
    def hallucinated_tool_name_strategy(self) -> HallucinatedToolNameStrategy | None:
        return self._config.hallucinated_tool_name_strategy

    @property
    def tool_choice(self) -> ToolChoice | None:
        return self._config.tool_choice

    @property
    def compensate_on_tool_errors(self) -> bool:
        return self._config.compensating

    @property
    def journal(self) -> Journal | AsyncJournal | None:
        """The journal as given (or made for `compensate_on_tool_errors`); see `LoopConfig.journal`."""
        return self._config.journal

    @property
    def name(self) -> str | None:
        return self._config.name

    @property
    def approval_timeout_s(self) -> float:
        return self._config.approval_timeout_s

    @property
    def budget(self) -> Budget | None:
        return self._config.budget

    @property
    def priority(self) -> int | None:
        return self._config.priority

    @property
    def daily_budgets(self) -> Mapping[str, Budget]:
        return self._config.daily_budgets


def fanout_of(executor: ToolExecutor, max_fanout: int | None, max_concurrent_tool_calls: int | None) -> int:
    """The fan-out limit a service is given (`max_fanout`, or its deprecated alias), else its
    executor's."""
    if max_concurrent_tool_calls is not None:
        warnings.warn(
            "AiService(max_concurrent_tool_calls=) is deprecated: use max_fanout= "
            "(or TOOLFLEET_MAX_FANOUT), the one fan-out limit",
            DeprecationWarning,
            stacklevel=3,
        )
        if max_fanout is not None and max_fanout != max_concurrent_tool_calls:
            raise OrchestratorError(
                f"max_fanout={max_fanout} and its deprecated alias "
                f"max_concurrent_tool_calls={max_concurrent_tool_calls} disagree: give max_fanout only"
            )
        max_fanout = max_concurrent_tool_calls
    max_fanout = max_fanout if max_fanout is not None else fanout_limit(executor)
    if max_fanout < 1:
        raise OrchestratorError(
            f"max_fanout must be at least 1, got {max_fanout} (set max_fanout= or TOOLFLEET_MAX_FANOUT)"
        )
    return max_fanout
