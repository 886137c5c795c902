"""What happens when a tool call fails: error handlers, their context and the ready-made policies."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from orchestrator.errors import (
    HallucinatedToolNameError,
    RemoteToolError,
    SystemToolError,
    VisibleRemoteToolError,
)
from workers.calls.invocation import InvocationContext, InvocationParameters
from workers.errors import ToolArgumentsError, ToolErrorVisibleToLlm
from workers.protocol import OutcomeKind, ToolExecutionRequest, ToolOutcome

__all__ = [
    "HallucinatedToolNameError",
    "RemoteToolError",
    "SystemToolError",
    "ToolArgumentsErrorHandler",
    "ToolErrorContext",
    "ToolErrorHandlerResult",
    "ToolExecutionErrorHandler",
    "error_of",
    "fail_invocation",
    "fail_invocation_unless_visible_to_llm",
    "send_exception_message_to_llm",
    "send_generic_message_to_llm_unless_visible_to_llm",
    "unwrap_cause",
    "visible_message",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolErrorContext:
    """What a handler knows about the failed call.

    `raw_error` is the exception as the tool raised it, before one level of `__cause__` unwrapping:
    the handler receives `raw_error.__cause__` when the tool raised `... from cause`, else `raw_error`
    itself (a `ToolErrorVisibleToLlm` is never unwrapped: its text for the model stands). When the call
    ran on a worker, both are `RemoteToolError`s re-created from the outcome.
    """

    request: ToolExecutionRequest
    invocation_context: InvocationContext
    parameters: InvocationParameters
    memory_id: str
    raw_error: BaseException


class ToolErrorHandlerResult:
    """What a handler decided to tell the model: `ToolErrorHandlerResult.text("...")`."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    @classmethod
    def text(cls, message: str) -> ToolErrorHandlerResult:
        return cls(message)

    def __repr__(self) -> str:
        return f"ToolErrorHandlerResult.text({self.message!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolErrorHandlerResult) and other.message == self.message

    def __hash__(self) -> int:
        return hash(self.message)


ToolArgumentsErrorHandler: TypeAlias = Callable[[BaseException, ToolErrorContext], ToolErrorHandlerResult]
ToolExecutionErrorHandler: TypeAlias = Callable[[BaseException, ToolErrorContext], ToolErrorHandlerResult]


def error_of(outcome: ToolOutcome) -> BaseException:
    """The exception a handler receives for a failed outcome."""
    if outcome.exception is not None:
        return outcome.exception
    if outcome.kind is OutcomeKind.ARGUMENTS_ERROR:
        return ToolArgumentsError(outcome.text)
    if outcome.kind in (OutcomeKind.TIMED_OUT, OutcomeKind.WORKER_LOST, OutcomeKind.NO_WORKER):
        return SystemToolError(outcome.text)
    error = _remote(outcome.text, outcome.error_type, outcome.error_type_name, outcome.message_for_llm)
    cause = outcome.error_cause
    if cause is not None:
        error.__cause__ = _remote(cause.message, cause.error_type, cause.type_name, cause.message_for_llm)
    return error


def _remote(
    message: str, error_type: str | None, type_name: str | None, message_for_llm: str | None
) -> RemoteToolError:
    if message_for_llm:
        return VisibleRemoteToolError(message, error_type, message_for_llm, type_name)
    return RemoteToolError(message, error_type, type_name)


def unwrap_cause(error: BaseException) -> BaseException:
    """What a handler receives for `error`: one level of `__cause__` unwrapping (SPEC §6).

    A `ToolErrorVisibleToLlm` is not unwrapped: the text it chose for the model stands, and its
    cause never reaches the model.
    """
    if isinstance(error, ToolErrorVisibleToLlm) or error.__cause__ is None:
        return error
    return error.__cause__


def visible_message(error: BaseException) -> str | None:
    """The text a `ToolErrorVisibleToLlm` chose for the model; `None` when unmarked or blank."""
    if isinstance(error, ToolErrorVisibleToLlm):
        text = error.message_for_llm()
        if text and text.strip():
            return text
    return None


def _message(error: BaseException) -> str:
    visible = visible_message(error)
    if visible is not None:
        return visible
    return str(error) or getattr(error, "error_type", None) or type(error).__name__


def send_exception_message_to_llm() -> Callable[[BaseException, ToolErrorContext], ToolErrorHandlerResult]:
    """The model reads the exception's message (its `message_for_llm()` when it has one)."""

    def handle(error: BaseException, context: ToolErrorContext) -> ToolErrorHandlerResult:
        return ToolErrorHandlerResult.text(_message(error))

    return handle


def fail_invocation() -> Callable[[BaseException, ToolErrorContext], ToolErrorHandlerResult]:
    """The invocation fails with the tool's exception."""

    def handle(error: BaseException, context: ToolErrorContext) -> ToolErrorHandlerResult:
        raise error

    return handle


def fail_invocation_unless_visible_to_llm() -> Callable[
    [BaseException, ToolErrorContext], ToolErrorHandlerResult
]:
    """A `ToolErrorVisibleToLlm` goes to the model; any other exception fails the invocation."""

    def handle(error: BaseException, context: ToolErrorContext) -> ToolErrorHandlerResult:
        visible = visible_message(error)
        if visible is None:
            raise error
        return ToolErrorHandlerResult.text(visible)

    return handle


def send_generic_message_to_llm_unless_visible_to_llm(
    text: str,
) -> Callable[[BaseException, ToolErrorContext], ToolErrorHandlerResult]:
    """A `ToolErrorVisibleToLlm` goes to the model; for any other exception the model reads `text`.

    The exception's own text never reaches the model: use it where messages may hold secrets.
    """

    def handle(error: BaseException, context: ToolErrorContext) -> ToolErrorHandlerResult:
        visible = visible_message(error)
        return ToolErrorHandlerResult.text(visible if visible is not None else text)

    return handle


def warn_and_send_exception_message(
    error: BaseException, context: ToolErrorContext
) -> ToolErrorHandlerResult:
    """The default for execution errors in `chat()`/`stream()`: logged at WARN, sent to the model."""
    log.warning(
        "tool %s call %s failed: %s: %s",
        context.request.name,
        context.request.id,
        getattr(error, "type_name", None) or type(error).__name__,
        error,
    )
    return ToolErrorHandlerResult.text(_message(error))
