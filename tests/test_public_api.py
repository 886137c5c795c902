"""The public face of `workers`: its exact `__all__`, the DESIGN.md contract, and its import isolation."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import workers

WORKERS_ALL = [
    "Image",
    "ImageContent",
    "InvocationContext",
    "InvocationParameters",
    "OutcomeKind",
    "Param",
    "ReturnBehavior",
    "SearchBehavior",
    "TextContent",
    "ToolArgumentsError",
    "ToolCallIdentity",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolErrorVisibleToLlm",
    "ToolExecution",
    "ToolExecutionRequest",
    "ToolExecutionResult",
    "ToolMemoryId",
    "ToolOutcome",
    "ToolRegistry",
    "ToolResultError",
    "ToolSpecification",
    "ToolfleetError",
    "compensate_for",
    "tool",
    "tool_specifications_from",
]

DESIGN_CONTRACT = [
    "tool",
    "Param",
    "compensate_for",
    "ToolSpecification",
    "tool_specifications_from",
    "ReturnBehavior",
    "SearchBehavior",
    "InvocationParameters",
    "InvocationContext",
    "ToolMemoryId",
    "ToolErrorVisibleToLlm",
    "Image",
    "TextContent",
    "ImageContent",
    "ToolExecution",
]


def test_all_is_exactly_the_known_sorted_list() -> None:
    assert workers.__all__ == WORKERS_ALL
    assert sorted(workers.__all__) == workers.__all__


def test_every_name_in_all_is_defined() -> None:
    missing = [name for name in workers.__all__ if not hasattr(workers, name)]

    assert missing == []


@pytest.mark.parametrize("name", DESIGN_CONTRACT)
def test_design_contract_name_is_importable_from_workers(name: str) -> None:
    # when
    namespace: dict[str, object] = {}
    exec(f"from workers import {name}", namespace)

    # then
    assert namespace[name] is getattr(workers, name)
    assert name in workers.__all__


def test_importing_workers_imports_neither_orchestrator_nor_celery() -> None:
    # given: a fresh interpreter, so nothing imported by other tests counts
    code = "import sys, workers; print('orchestrator' in sys.modules, 'celery' in sys.modules)"

    # when
    completed = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=Path(__file__).resolve().parent.parent,
    )

    # then
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "False False"


ORCHESTRATOR_CONTRACT = [
    "AiService",
    "Result",
    "ToolExecution",
    "SystemMessage",
    "UserMessage",
    "AiMessage",
    "ToolExecutionRequest",
    "ToolExecutionResultMessage",
    "ChatModel",
    "ChatRequest",
    "ChatResponse",
    "PartialResponse",
    "PartialToolCall",
    "CompleteToolCall",
    "CompleteResponse",
    "ScriptedChatModel",
    "OpenAiChatModel",
    "AnthropicChatModel",
    "LocalExecutor",
    "CeleryExecutor",
    "ChatMemory",
    "MessageWindowChatMemory",
    "SqlChatMemoryStore",
    "ToolProvider",
    "ToolProviderRequest",
    "ToolProviderResult",
    "AiServiceTool",
    "SimpleToolSearchStrategy",
    "VectorToolSearchStrategy",
    "ToolSearchStrategy",
    "ToolArgumentsErrorHandler",
    "ToolExecutionErrorHandler",
    "ToolErrorContext",
    "ToolErrorHandlerResult",
]


ORCHESTRATOR_ALL = [
    "AiMessage",
    "AiService",
    "AiServiceTool",
    "AnthropicChatModel",
    "CallEvent",
    "CeleryExecutor",
    "ChatEvent",
    "ChatMemory",
    "ChatMemoryStore",
    "ChatMessage",
    "ChatModel",
    "ChatRequest",
    "ChatResponse",
    "CompleteResponse",
    "CompleteToolCall",
    "EmbeddingModel",
    "FinishReason",
    "HallucinatedToolNameError",
    "HashingEmbeddingModel",
    "InMemoryChatMemoryStore",
    "Journal",
    "LocalExecutor",
    "MessageWindowChatMemory",
    "ModelAuthenticationError",
    "ModelConnectionError",
    "ModelError",
    "ModelInvalidRequestError",
    "ModelRateLimitError",
    "ModelResponseError",
    "ModelServerError",
    "ModelTimeoutError",
    "OpenAiChatModel",
    "OrchestratorError",
    "PartialResponse",
    "PartialToolCall",
    "RemoteToolError",
    "Result",
    "RetryPolicy",
    "RoundTripLimitError",
    "ScriptExhaustedError",
    "ScriptedChatModel",
    "SimpleToolSearchStrategy",
    "SqlChatMemoryStore",
    "SystemMessage",
    "SystemToolError",
    "TokenUsage",
    "ToolArgumentsErrorHandler",
    "ToolCallIdentity",
    "ToolChoice",
    "ToolErrorContext",
    "ToolErrorHandlerResult",
    "ToolExecuted",
    "ToolExecution",
    "ToolExecutionErrorHandler",
    "ToolExecutionRequest",
    "ToolExecutionResultMessage",
    "ToolExecutor",
    "ToolProvider",
    "ToolProviderRequest",
    "ToolProviderResult",
    "ToolRunContext",
    "ToolSearchResult",
    "ToolSearchStrategy",
    "UnknownToolError",
    "UnsupportedContentError",
    "UserMessage",
    "VectorToolSearchStrategy",
    "fail_invocation",
    "fail_invocation_unless_visible_to_llm",
    "send_exception_message_to_llm",
    "send_generic_message_to_llm_unless_visible_to_llm",
]


def test_orchestrator_exports_every_contract_name() -> None:
    import orchestrator

    missing = [name for name in ORCHESTRATOR_CONTRACT if name not in orchestrator.__all__]
    assert missing == []
    for name in orchestrator.__all__:
        assert getattr(orchestrator, name) is not None


def test_orchestrator_all_is_pinned() -> None:
    import orchestrator

    assert orchestrator.__all__ == ORCHESTRATOR_ALL


def test_tool_execution_is_one_class_on_both_sides() -> None:
    import orchestrator
    import workers

    assert orchestrator.ToolExecution is workers.ToolExecution
    assert orchestrator.ToolExecutionRequest is workers.ToolExecutionRequest


def test_tool_call_identity_is_one_class_on_both_sides() -> None:
    import orchestrator
    import workers

    assert orchestrator.ToolCallIdentity is workers.ToolCallIdentity


def test_what_constructors_take_or_give_is_importable_from_orchestrator() -> None:
    # `AiService(journal=Journal(url))`, `OpenAiChatModel(retry=RetryPolicy(...))` and the events of
    # `CeleryExecutor(on_call=...)`: the very classes, not copies
    from orchestrator import CallEvent, Journal, RetryPolicy
    from orchestrator.executors._call_events import CallEvent as call_event
    from orchestrator.models._http import RetryPolicy as retry_policy
    from orchestrator.saga.journal import Journal as journal

    assert (Journal, RetryPolicy, CallEvent) == (journal, retry_policy, call_event)


def _readme_imports() -> list[str]:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)
    return [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if re.match(r"\s*from (orchestrator|workers)\S* import ", line)
    ]


def test_the_readme_shows_imports() -> None:
    assert len(_readme_imports()) >= 5


@pytest.mark.parametrize("statement", _readme_imports())
def test_every_import_the_readme_shows_works(statement: str) -> None:
    # when / then: no ImportError
    exec(statement, {})
