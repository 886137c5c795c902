"""SPEC §3: a tool's return value -> the text (or contents) the model sees, and the outcome's JSON form."""

import datetime as dt
import enum
import json
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pydantic
import pytest

from workers import (
    Image,
    ImageContent,
    InvocationParameters,
    OutcomeKind,
    TextContent,
    ToolExecutionRequest,
    ToolExecutionResult,
    ToolOutcome,
    tool,
)
from workers.calls.invocation import Invocation
from workers.calls.runner import run_tool
from workers.tools import discover_tools

# The value the `give` tool returns; set by each test.
RETURNED: list[Any] = []


@pytest.fixture(autouse=True)
def _clear_returned() -> None:
    RETURNED.clear()


def returning(value: Any) -> ToolOutcome:
    """The outcome of a tool (annotated `-> Any`) that returns `value`."""
    RETURNED.append(value)
    return run(give)


def run(function: Any, arguments: str = "{}", invocation: Invocation | None = None) -> ToolOutcome:
    definition = discover_tools(function)[0]
    return run_tool(definition, ToolExecutionRequest("call-1", definition.name, arguments), invocation)


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Color(enum.StrEnum):
    RED = "red-value"


@dataclass
class Point:
    x: int
    y: float


class User(pydantic.BaseModel):
    name: str
    balance: Decimal
    tags: list[str]


@tool
def give() -> Any:
    return RETURNED[0]


@tool
def do_nothing() -> None:
    return None


@tool
def maybe_number() -> int | None:
    return None


@tool
def unannotated():  # no return annotation: a None result is "null"
    return None


@tool
def with_attributes_and_parameters(parameters: InvocationParameters) -> ToolExecutionResult:
    parameters["seen"] = True
    return ToolExecutionResult(
        contents=[
            TextContent("chart of the week"),
            ImageContent(Image(base64_data="aGVsbG8=", mime_type="image/png"), detail="high"),
        ],
        attributes={"source": "db", "rows": [1, 2]},
    )


@tool
def failing() -> str:
    raise ValueError("the database is down")


# ---------------------------------------------------------------------------------------------------
# None and strings


def test_none_from_a_function_annotated_none_is_success() -> None:
    outcome = run(do_nothing)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "Success"


@pytest.mark.parametrize("function", [maybe_number, unannotated, give])
def test_none_from_any_other_function_is_null(function: Any) -> None:
    RETURNED.append(None)
    outcome = run(function)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "null"


@pytest.mark.parametrize("value", ["plain text", "", '{"a": 1}', "  spaced  ", "ünïcødé ✓"])
def test_a_string_is_returned_as_is(value: str) -> None:
    outcome = returning(value)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == value
    assert outcome.contents is None


# ---------------------------------------------------------------------------------------------------
# Compact JSON


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (4.0, "4.0"),
        (2.5, "2.5"),
        (42, "42"),
        (True, "true"),
        (False, "false"),
        ({"a": [1, 2.5]}, '{"a":[1,2.5]}'),
        ({"nested": {"b": None}}, '{"nested":{"b":null}}'),
        ([], "[]"),
        ({}, "{}"),
        (Decimal("1.50"), "1.50"),
        ({"price": Decimal("19.90")}, '{"price":19.90}'),
        (Decimal("12345678901234567890.123456789"), "12345678901234567890.123456789"),
        (dt.date(2024, 1, 2), '"2024-01-02"'),
        (dt.datetime(2024, 1, 2, 3, 4, 5), '"2024-01-02T03:04:05"'),
        (dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC), '"2024-01-02T03:04:05+00:00"'),
        (uuid.UUID("12345678-1234-5678-1234-567812345678"), '"12345678-1234-5678-1234-567812345678"'),
        (Unit.CELSIUS, '"CELSIUS"'),
        ({"unit": Unit.FAHRENHEIT}, '{"unit":"FAHRENHEIT"}'),
        ((1, "a"), '[1,"a"]'),
        ({3, 1, 2}, "[1,2,3]"),
        (frozenset({"b", "a"}), '["a","b"]'),
        ({"name": "Café ☕"}, '{"name":"Café ☕"}'),
        (["日本"], '["日本"]'),
    ],
)
def test_other_values_become_compact_json(value: Any, text: str) -> None:
    outcome = returning(value)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == text
    assert outcome.contents is None


def test_a_dataclass_becomes_an_object() -> None:
    outcome = returning(Point(1, 2.0))
    assert outcome.text == '{"x":1,"y":2.0}'
    assert outcome.result_object == {"x": 1, "y": 2.0}


def test_a_pydantic_model_becomes_an_object() -> None:
    outcome = returning(User(name="Ann", balance=Decimal("10.50"), tags=["vip"]))
    assert outcome.text == '{"name":"Ann","balance":10.50,"tags":["vip"]}'


def test_a_list_of_dataclasses_becomes_an_array_of_objects() -> None:
    outcome = returning([Point(1, 1.5), Point(2, 0.0)])
    assert outcome.text == '[{"x":1,"y":1.5},{"x":2,"y":0.0}]'


def test_the_result_object_is_the_json_form_of_the_value() -> None:
    outcome = returning({"when": dt.date(2024, 1, 2), "n": 3})
    assert outcome.result_object == {"when": "2024-01-02", "n": 3}
    json.dumps(outcome.to_json())


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"priority": Priority.HIGH}, '{"priority":"HIGH"}'),
        ({"color": Color.RED}, '{"color":"RED"}'),
    ],
)
def test_int_and_str_enums_become_their_member_name(value: Any, text: str) -> None:
    outcome = returning(value)
    assert outcome.text == text


# ---------------------------------------------------------------------------------------------------
# Values that are not JSON


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (object(), "Result of tool 'give': a value of type object is not JSON-serializable"),
        (float("nan"), "Result of tool 'give': nan is not a JSON number"),
        ({"x": float("inf")}, "Result of tool 'give': inf is not a JSON number"),
        ([Decimal("NaN")], "Result of tool 'give': NaN is not a JSON number"),
        # finite as a Decimal, infinite as the float its result object would hold
        ({"x": Decimal("1e400")}, "Result of tool 'give': 1E+400 is not a JSON number"),
    ],
)
def test_a_non_serializable_result_is_an_execution_error(value: Any, text: str) -> None:
    # when a tool returns something that has no JSON form, then the call fails cleanly
    outcome = returning(value)
    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.text == text
    assert outcome.error_type == "ToolResultError"
    assert outcome.contents is None


# ---------------------------------------------------------------------------------------------------
# Multimodal contents


def test_an_image_becomes_one_image_content() -> None:
    image = Image(url="https://example.com/cat.png")
    outcome = returning(image)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.contents == [ImageContent(image)]


def test_an_image_content_is_kept() -> None:
    part = ImageContent(Image(base64_data="aGVsbG8=", mime_type="image/png"), detail="low")
    outcome = returning(part)
    assert outcome.contents == [part]


def test_a_text_content_is_kept() -> None:
    outcome = returning(TextContent("hello"))
    assert outcome.contents == [TextContent("hello")]
    assert outcome.text == "hello"


def test_a_list_of_contents_keeps_its_parts_in_order() -> None:
    image = Image(url="https://example.com/a.png")
    outcome = returning([TextContent("first"), image, TextContent("second")])
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.contents == [TextContent("first"), ImageContent(image), TextContent("second")]
    assert outcome.text == "first\nsecond"


# ---------------------------------------------------------------------------------------------------
# ToolExecutionResult


def test_execution_result_carries_attributes_and_text_from_the_object() -> None:
    outcome = returning(
        ToolExecutionResult(result_object={"total": 4.0}, attributes={"trace": "abc", "n": 1})
    )
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == '{"total":4.0}'
    assert outcome.result_object == {"total": 4.0}
    assert outcome.attributes == {"trace": "abc", "n": 1}


def test_execution_result_text_overrides_the_object_text() -> None:
    outcome = returning(ToolExecutionResult(result_object={"total": 4}, result_text="x"))
    assert outcome.text == "x"
    assert outcome.result_object == {"total": 4}
    assert outcome.attributes == {}


def test_plain_results_have_no_attributes() -> None:
    assert returning({"a": 1}).attributes == {}


# ---------------------------------------------------------------------------------------------------
# ToolOutcome JSON round trip


def test_success_with_contents_and_attributes_round_trips_through_json() -> None:
    # given a success with contents, attributes and parameter changes
    outcome = run(with_attributes_and_parameters, "{}", Invocation(parameters={"k": "v"}))
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.attributes == {"source": "db", "rows": [1, 2]}
    assert outcome.parameter_changes == {"seen": True}
    # when it crosses the wire as JSON text
    wire = json.dumps(outcome.to_json())
    restored = ToolOutcome.from_json(json.loads(wire))
    # then nothing is lost
    assert restored == outcome
    assert restored.contents == [
        TextContent("chart of the week"),
        ImageContent(Image(base64_data="aGVsbG8=", mime_type="image/png"), detail="high"),
    ]


def test_execution_error_round_trips_through_json_without_the_live_exception() -> None:
    # given an execution error that ran in this process
    outcome = run(failing)
    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert isinstance(outcome.exception, ValueError)
    # when
    data = outcome.to_json()
    wire = json.dumps(data)
    restored = ToolOutcome.from_json(json.loads(wire))
    # then the exception never crosses the wire, and everything else does
    assert "exception" not in data
    assert restored.exception is None
    assert restored == outcome
    assert (restored.kind, restored.text, restored.error_type) == (
        OutcomeKind.EXECUTION_ERROR,
        "the database is down",
        "ValueError",
    )
    assert restored.is_error
