"""SPEC §6: a handler receives the tool's exception after one level of `__cause__` unwrapping, and
`ToolErrorContext.raw_error` the exception before it — in-process, and re-created from the outcome
(`RemoteToolError`) exactly as a worker's outcome arrives over the wire. Also: a tool provider that
answers with something other than a `ToolProviderResult` is named in the error."""

from __future__ import annotations

import json

import pytest

from orchestrator import (
    AiMessage,
    AiService,
    LocalExecutor,
    OrchestratorError,
    RemoteToolError,
    ScriptedChatModel,
    SystemToolError,
    ToolErrorContext,
    ToolErrorHandlerResult,
    ToolExecutionRequest,
    ToolProviderRequest,
    ToolProviderResult,
    fail_invocation,
)
from orchestrator.handlers import error_of, unwrap_cause
from workers import OutcomeKind, ToolArgumentsError, ToolErrorVisibleToLlm, ToolOutcome, tool
from workers.calls.runner import run_tool
from workers.tools import discover_tools


class Declined(Exception):
    """The payment provider's refusal."""


class Hint(ToolErrorVisibleToLlm, Exception):
    """Text for the model."""


@tool
def pay(amount: int) -> str:
    """Pays, wrapping the provider's refusal."""
    try:
        raise Declined(f"card declined for {amount}")
    except Declined as exc:
        raise RuntimeError("payment failed") from exc


@tool
def pay_visible(amount: int) -> str:
    """Pays, choosing what the model reads."""
    raise Hint("use another card") from Declined("secret")


@tool
def pay_implicit(amount: int) -> str:
    """Fails while handling another error, without `from`: nothing is unwrapped."""
    try:
        raise Declined("inner")
    except Declined:
        raise RuntimeError("outer") from None


def _run_service(
    tool_name: str, **handler_kwargs: object
) -> tuple[list[tuple[BaseException, ToolErrorContext]], str]:
    seen: list[tuple[BaseException, ToolErrorContext]] = []

    def handler(error: BaseException, context: ToolErrorContext) -> ToolErrorHandlerResult:
        seen.append((error, context))
        return ToolErrorHandlerResult.text(f"handled {type(error).__name__}: {error}")

    model = ScriptedChatModel(
        [AiMessage(tool_execution_requests=[ToolExecutionRequest("c-1", tool_name, '{"amount": 5}')]), "ok"]
    )
    service = AiService(
        chat_model=model,
        tools=[pay, pay_visible, pay_implicit],
        executor=LocalExecutor(),
        tool_execution_error_handler=handler,
    )
    result = service.chat("pay")
    return seen, result.tool_executions[0].result


def test_in_process_the_handler_gets_the_cause_and_raw_error_the_wrapper() -> None:
    # when
    seen, text = _run_service("pay")

    # then
    ((error, context),) = seen
    assert isinstance(error, Declined)
    assert str(error) == "card declined for 5"
    assert isinstance(context.raw_error, RuntimeError)
    assert context.raw_error.__cause__ is error
    assert text == "handled Declined: card declined for 5"


def test_a_visible_error_is_handed_over_as_it_is() -> None:
    seen, text = _run_service("pay_visible")

    ((error, context),) = seen
    assert isinstance(error, Hint)
    assert context.raw_error is error
    assert text == "handled Hint: use another card"


def test_an_exception_without_cause_is_handed_over_as_it_is() -> None:
    seen, _ = _run_service("pay_implicit")

    ((error, context),) = seen
    assert isinstance(error, RuntimeError) and str(error) == "outer"
    assert context.raw_error is error


def test_a_handler_that_raises_fails_the_invocation_with_the_unwrapped_exception() -> None:
    model = ScriptedChatModel(
        [AiMessage(tool_execution_requests=[ToolExecutionRequest("c-1", "pay", '{"amount": 5}')]), "ok"]
    )
    service = AiService(
        chat_model=model,
        tools=[pay],
        executor=LocalExecutor(),
        tool_execution_error_handler=fail_invocation(),
    )

    with pytest.raises(Declined, match="card declined for 5"):
        service.chat("pay")


def _over_the_wire(tool_function: object) -> ToolOutcome:
    """The outcome as a worker sends it: run, then through its JSON form (no live exception)."""
    (definition,) = discover_tools(tool_function)
    outcome = run_tool(definition, ToolExecutionRequest("c-1", definition.name, '{"amount": 5}'))
    return ToolOutcome.from_json(json.loads(json.dumps(outcome.to_json())))


def test_a_remote_error_carries_type_name_message_and_its_cause() -> None:
    # given: the outcome of `pay` as it arrives from a worker
    outcome = _over_the_wire(pay)
    assert outcome.exception is None

    # when
    raw = error_of(outcome)
    error = unwrap_cause(raw)

    # then: the handler gets the cause, described by qualified type name and message
    assert isinstance(raw, RemoteToolError) and isinstance(error, RemoteToolError)
    assert (raw.type_name, raw.message, raw.error_type) == ("RuntimeError", "payment failed", "RuntimeError")
    assert raw.__cause__ is error
    assert (error.type_name, error.message, error.error_type) == (
        f"{__name__}.Declined",
        "card declined for 5",
        "Declined",
    )
    assert str(error) == "card declined for 5"


def test_a_remote_visible_error_keeps_its_text_and_not_its_cause() -> None:
    outcome = _over_the_wire(pay_visible)

    raw = error_of(outcome)

    assert unwrap_cause(raw) is raw
    assert isinstance(raw, ToolErrorVisibleToLlm) and isinstance(raw, RemoteToolError)
    assert raw.message_for_llm() == "use another card"
    assert raw.type_name == f"{__name__}.Hint"
    assert raw.__cause__ is None
    assert "secret" not in json.dumps(outcome.to_json())


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (OutcomeKind.TIMED_OUT, SystemToolError),
        (OutcomeKind.WORKER_LOST, SystemToolError),
        (OutcomeKind.NO_WORKER, SystemToolError),
        (OutcomeKind.ARGUMENTS_ERROR, ToolArgumentsError),
    ],
)
def test_system_and_arguments_errors_are_the_same_types_in_both_executors(
    kind: OutcomeKind, expected: type[BaseException]
) -> None:
    error = error_of(ToolOutcome(kind, "what happened", error_type="X"))

    assert type(error) is expected
    assert unwrap_cause(error) is error
    assert str(error) == "what happened"


# -- tool providers -------------------------------------------------------------------------------


class ForgetfulProvider:
    """A provider that forgets to return its result."""

    def __init__(self, *, dynamic: bool) -> None:
        self.is_dynamic = dynamic

    def provide_tools(self, request: ToolProviderRequest) -> ToolProviderResult:
        return None  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"ForgetfulProvider(dynamic={self.is_dynamic})"


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_provider_returning_none_is_named_in_a_clear_error(dynamic: bool) -> None:
    # given
    model = ScriptedChatModel(["never asked"])
    service = AiService(chat_model=model, tools=[pay], tool_providers=[ForgetfulProvider(dynamic=dynamic)])

    # when / then
    with pytest.raises(OrchestratorError) as raised:
        service.chat("hi")
    assert str(raised.value) == (
        f"Tool provider ForgetfulProvider(dynamic={dynamic}) returned None from provide_tools(); it must "
        "return a ToolProviderResult (ToolProviderResult() when it has no tools to add)"
    )
    assert model.requests == []
