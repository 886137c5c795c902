"""toolfleet's agent side: the LLM loop, models, memory, and where tool calls run.

Sub-packages by job: `models/` (chat models), `executors/` (where tool calls run), `saga/` (compensations,
the journal, recovery), `cli/` (the `toolfleet` command). Every error is in `errors`.
"""

from orchestrator import errors, memory, models, providers
from orchestrator.approvals import (
    ApprovalDecision,
    ApprovalPolicy,
    ApprovalRecord,
    ApprovalState,
    approve,
    reject,
)
from orchestrator.budgets import Budget, ModelPrice
from orchestrator.errors import *  # noqa: F403 - every error, listed once in `errors.__all__`
from orchestrator.executors import CeleryExecutor, LocalExecutor, ToolExecutor
from orchestrator.executors.celery import CallEvent
from orchestrator.handlers import (
    ToolArgumentsErrorHandler,
    ToolErrorContext,
    ToolErrorHandlerResult,
    ToolExecutionErrorHandler,
    fail_invocation,
    fail_invocation_unless_visible_to_llm,
    send_exception_message_to_llm,
    send_generic_message_to_llm_unless_visible_to_llm,
)
from orchestrator.memory import *  # noqa: F403
from orchestrator.messages import (
    AiMessage,
    ChatMessage,
    SystemMessage,
    ToolExecutionResultMessage,
    UserMessage,
)
from orchestrator.models import *  # noqa: F403
from orchestrator.models._http import RetryPolicy
from orchestrator.models.anthropic import AnthropicChatModel
from orchestrator.models.openai import OpenAiChatModel
from orchestrator.models.scripted import ScriptedChatModel
from orchestrator.providers import *  # noqa: F403
from orchestrator.result import ApprovalRequested, InvocationResumed, Result, ToolExecuted, ToolProgress
from orchestrator.saga import AsyncJournal, CallState, CompensationState, InvocationState, Journal
from orchestrator.search import (
    EmbeddingModel,
    HashingEmbeddingModel,
    SimpleToolSearchStrategy,
    ToolSearchResult,
    ToolSearchStrategy,
    VectorToolSearchStrategy,
)
from orchestrator.service import AiService
from workers import ToolCallIdentity, ToolExecution, ToolExecutionRequest

__all__ = [
    "AiMessage",
    "AiService",
    "AnthropicChatModel",
    "ApprovalDecision",
    "ApprovalPolicy",
    "ApprovalRecord",
    "ApprovalRequested",
    "ApprovalState",
    "AsyncJournal",
    "Budget",
    "CallEvent",
    "CallState",
    "CeleryExecutor",
    "ChatMessage",
    "CompensationState",
    "EmbeddingModel",
    "HashingEmbeddingModel",
    "InvocationResumed",
    "InvocationState",
    "Journal",
    "LocalExecutor",
    "ModelPrice",
    "OpenAiChatModel",
    "Result",
    "RetryPolicy",
    "ScriptedChatModel",
    "SimpleToolSearchStrategy",
    "SystemMessage",
    "ToolArgumentsErrorHandler",
    "ToolCallIdentity",
    "ToolErrorContext",
    "ToolErrorHandlerResult",
    "ToolExecuted",
    "ToolExecution",
    "ToolExecutionErrorHandler",
    "ToolExecutionRequest",
    "ToolExecutionResultMessage",
    "ToolExecutor",
    "ToolProgress",
    "ToolSearchResult",
    "ToolSearchStrategy",
    "UserMessage",
    "VectorToolSearchStrategy",
    "approve",
    "fail_invocation",
    "fail_invocation_unless_visible_to_llm",
    "reject",
    "send_exception_message_to_llm",
    "send_generic_message_to_llm_unless_visible_to_llm",
]
__all__ += errors.__all__
__all__ += memory.__all__
__all__ += models.__all__
__all__ += providers.__all__
