"""SPEC §6 (the worker side): a tool that raises becomes a structured execution-error outcome."""

import json

import pytest

from workers import OutcomeKind, ToolErrorVisibleToLlm, ToolExecutionRequest, ToolOutcome, tool
from workers.calls.runner import run_tool
from workers.tools import discover_tools


class CarNotAvailable(ToolErrorVisibleToLlm, Exception):
    """An error whose message is meant for the model."""


class PoliteError(ToolErrorVisibleToLlm, RuntimeError):
    def message_for_llm(self) -> str:
        return "Please try another date"


class EmptyMessageError(Exception):
    pass


# The exception the `explode` tool raises; set by each test.
TO_RAISE: list[BaseException] = []


@pytest.fixture(autouse=True)
def _clear_to_raise() -> None:
    TO_RAISE.clear()


@tool
def explode(city: str = "Kyiv") -> str:
    raise TO_RAISE[0]


def raising(error: BaseException) -> ToolOutcome:
    TO_RAISE.append(error)
    definition = discover_tools(explode)[0]
    return run_tool(definition, ToolExecutionRequest("call-1", "explode", '{"city": "Lviv"}'))


def test_visible_error_gives_its_message_for_the_llm() -> None:
    # when a tool raises a ToolErrorVisibleToLlm subclass
    outcome = raising(CarNotAvailable("No car is available in Lviv"))
    # then its message is what the model may see
    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.message_for_llm == "No car is available in Lviv"
    assert outcome.text == "No car is available in Lviv"
    assert outcome.error_type == "CarNotAvailable"


def test_an_overridden_message_for_llm_is_used() -> None:
    outcome = raising(PoliteError("internal: calendar service returned 503"))
    assert outcome.message_for_llm == "Please try another date"
    assert outcome.text == "internal: calendar service returned 503"
    assert outcome.error_type == "PoliteError"


@pytest.mark.parametrize("message", ["", "   ", "\n"])
def test_a_blank_visible_message_counts_as_unmarked(message: str) -> None:
    outcome = raising(CarNotAvailable(message))
    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.message_for_llm is None


def test_an_ordinary_exception_has_no_message_for_the_llm() -> None:
    outcome = raising(ValueError("secret connection string"))
    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.message_for_llm is None
    assert outcome.text == "secret connection string"
    assert outcome.error_type == "ValueError"


def test_from_message_keeps_the_cause_away_from_the_llm() -> None:
    # given a ready visible error built with a cause
    cause = ValueError("secret")
    error = ToolErrorVisibleToLlm.from_message("text", cause=cause)
    # then it is an exception carrying the text, with the cause kept for logs
    assert isinstance(error, Exception)
    assert isinstance(error, ToolErrorVisibleToLlm)
    assert error.message_for_llm() == "text"
    assert error.__cause__ is cause
    # when a tool raises it
    outcome = raising(error)
    # then only the text reaches the model, and the live exception keeps its cause
    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.message_for_llm == "text"
    assert outcome.text == "text"
    assert "secret" not in outcome.message_for_llm
    assert "secret" not in outcome.text
    assert outcome.exception is error
    assert outcome.exception.__cause__ is cause
    assert "secret" not in json.dumps(outcome.to_json())


def test_from_message_without_a_cause() -> None:
    error = ToolErrorVisibleToLlm.from_message("Flight is full")
    assert error.__cause__ is None
    outcome = raising(error)
    assert outcome.message_for_llm == "Flight is full"


@pytest.mark.parametrize(
    ("error", "text"),
    [(EmptyMessageError(), "EmptyMessageError"), (RuntimeError(), "RuntimeError"), (KeyError(), "KeyError")],
)
def test_an_exception_with_an_empty_message_is_described_by_its_type_name(
    error: Exception, text: str
) -> None:
    outcome = raising(error)
    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.text == text
    assert outcome.error_type == text
    assert outcome.message_for_llm is None


def test_error_type_is_the_class_name() -> None:
    outcome = raising(ZeroDivisionError("division by zero"))
    assert outcome.error_type == "ZeroDivisionError"
    assert outcome.text == "division by zero"


def test_an_arguments_error_is_not_an_execution_error() -> None:
    # given a call whose arguments cannot be bound, the tool never runs (it would raise IndexError)
    definition = discover_tools(explode)[0]
    outcome = run_tool(definition, ToolExecutionRequest("call-1", "explode", '{"city": ["x"]}'))
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Argument "city" is not convertable to str, got list: <["x"]>'
    assert outcome.error_type == "ToolArgumentsError"
    assert outcome.message_for_llm is None
    assert outcome.exception is not None
