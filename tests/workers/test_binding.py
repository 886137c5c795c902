"""SPEC §2: binding the model's JSON arguments to a tool's parameters, through `run_tool`."""

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, TypedDict

import pydantic
import pytest

from workers import (
    InvocationContext,
    InvocationParameters,
    OutcomeKind,
    ToolExecutionRequest,
    ToolMemoryId,
    ToolOutcome,
    tool,
)
from workers.calls.invocation import Invocation
from workers.calls.runner import run_tool
from workers.tools import discover_tools

# What the tools of this module received, by tool name; cleared before every test.
RECEIVED: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _clear_received() -> None:
    RECEIVED.clear()


def call(function: Callable[..., Any], arguments: str, invocation: Invocation | None = None) -> ToolOutcome:
    definition = discover_tools(function)[0]
    request = ToolExecutionRequest("call-1", definition.name, arguments)
    return run_tool(definition, request, invocation)


# ---------------------------------------------------------------------------------------------------
# Helper types


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"
    Kelvin = "k"


@dataclass
class Point:
    x: int
    y: int


@dataclass
class Route:
    start: Point
    stops: list[Point]
    name: str = "unnamed"


@dataclass
class Settings:
    tags: list[str] = field(default_factory=list)
    level: int = 1


class Item(pydantic.BaseModel):
    sku: str
    quantity: int
    price: Decimal


class Order(pydantic.BaseModel):
    customer: str
    items: list[Item]
    note: str | None = None


class Address(TypedDict):
    street: str
    number: int


@dataclass
class Circle:
    radius: float


@dataclass
class Square:
    side: float


class Cat(pydantic.BaseModel):
    type: Literal["cat"] = "cat"
    lives: int


class Dog(pydantic.BaseModel):
    type: Literal["dog"] = "dog"
    good: bool


# ---------------------------------------------------------------------------------------------------
# Tools


@tool
def ping() -> str:
    return "pong"


@tool
def add(a: int, b: str) -> str:
    RECEIVED["add"] = (a, b)
    return f"{a}|{b}"


@tool
def total(values: list[int]) -> int:
    RECEIVED["total"] = values
    return sum(values)


@tool
def greet(name: str, greeting: str = "Hello", title: str | None = None) -> str:
    RECEIVED["greet"] = (name, greeting, title)
    return f"{greeting}, {title} {name}" if title else f"{greeting}, {name}"


@tool
def append_to_list(items: list[str] = ["seed"]) -> list[str]:  # noqa: B006 - the default is the subject
    items.append("added")
    return items


@tool
def put_in_dict(mapping: dict[str, int] = {"seed": 1}) -> dict[str, int]:  # noqa: B006
    mapping["added"] = 2
    return mapping


@tool
def change_settings(settings: Settings = Settings(tags=["seed"])) -> Settings:  # noqa: B008
    settings.tags.append("added")
    settings.level += 1
    return settings


@tool
def integer(n: int) -> str:
    RECEIVED["integer"] = n
    return "ok"


@tool
def with_default_count(count: int = 10) -> int:
    return count


@tool
def real(x: float) -> str:
    RECEIVED["real"] = x
    return "ok"


@tool
def flag(enabled: bool) -> str:
    RECEIVED["flag"] = enabled
    return "ok"


@tool
def temperature(unit: Unit) -> str:
    RECEIVED["temperature"] = unit
    return "ok"


@tool
def money(amount: Decimal) -> str:
    RECEIVED["money"] = amount
    return "ok"


@tool
def text(value: str) -> str:
    RECEIVED["text"] = value
    return "ok"


@tool
def identify(id: uuid.UUID) -> str:
    RECEIVED["identify"] = id
    return "ok"


@tool
def place(point: Point) -> str:
    RECEIVED["place"] = point
    return "ok"


@tool
def place_order(order: Order) -> str:
    RECEIVED["place_order"] = order
    return "ok"


@tool
def collections_tool(numbers: list[int], labels: set[str], scores: dict[str, float]) -> str:
    RECEIVED["collections_tool"] = (numbers, labels, scores)
    return "ok"


@tool
def travel(route: Route) -> str:
    RECEIVED["travel"] = route
    return "ok"


@tool
def deliver(address: Address) -> str:
    RECEIVED["deliver"] = address
    return "ok"


@tool
def draw(shape: Circle | Square) -> str:
    RECEIVED["draw"] = shape
    return "ok"


@tool
def adopt(pet: Cat | Dog) -> str:
    RECEIVED["adopt"] = pet
    return "ok"


@tool
def draw_many(shapes: list[Circle | Square]) -> str:
    RECEIVED["draw_many"] = shapes
    return "ok"


@tool
def introspect(
    query: str, parameters: InvocationParameters, context: InvocationContext, memory_id: ToolMemoryId
) -> str:
    RECEIVED["introspect"] = (query, parameters, context, memory_id)
    return "ok"


@tool
def write_parameters(parameters: InvocationParameters) -> str:
    parameters["k"] = "changed"
    parameters["added"] = [1, 2]
    return "ok"


@tool
def mutate_nested_parameter(parameters: InvocationParameters) -> str:
    parameters["cart"].append("book")
    return "ok"


@tool
def read_parameters(parameters: InvocationParameters) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(parameters.items()))


@tool
def untyped_list(values: list[Any]) -> int:
    return len(values)


# ---------------------------------------------------------------------------------------------------
# Parsing and the one repair


@pytest.mark.parametrize("arguments", ["", "   ", "\n\t"])
def test_blank_arguments_are_an_empty_object(arguments: str) -> None:
    # given a tool without parameters, when called with blank arguments
    outcome = call(ping, arguments)
    # then it runs as if `{}` had been sent
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "pong"


def test_blank_arguments_still_need_the_required_parameters() -> None:
    # given a tool with a required parameter, when called with blank arguments (that is, `{}`)
    outcome = call(greet, "")
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Required parameter "name" of tool "greet" is missing'


def test_repair_strips_outer_quotes_of_a_double_encoded_object() -> None:
    # given a JSON string holding the escaped object
    arguments = '"{\\"a\\": 1, \\"b\\": \\"x\\"}"'
    # when
    outcome = call(add, arguments)
    # then the object inside is bound
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "1|x"
    assert RECEIVED["add"] == (1, "x")


def test_repair_unescapes_escaped_quotes() -> None:
    outcome = call(add, '{\\"a\\": 2, \\"b\\": \\"y\\"}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "2|y"


def test_repair_drops_a_trailing_comma_in_an_object() -> None:
    outcome = call(add, '{"a": 3, "b": "z",}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "3|z"


def test_repair_drops_trailing_commas_in_arrays_and_objects() -> None:
    outcome = call(total, '{"values": [1, 2, 3, ], }')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "6"
    assert RECEIVED["total"] == [1, 2, 3]


def test_repair_applies_all_fixes_at_once() -> None:
    outcome = call(total, '"{\\"values\\": [4, 5,],}"')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "9"


@pytest.mark.parametrize("arguments", ['{"a": 1', "{a: 1}", "not json", '"hello"', '{"a": NaN, "b": "x"}'])
def test_a_second_parse_failure_is_an_arguments_error(arguments: str) -> None:
    # when the text is not JSON even after the repair
    outcome = call(add, arguments)
    # then it is an arguments error naming the tool, and the tool does not run
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text.startswith('Arguments of tool "add" are not valid JSON: ')
    assert outcome.error_type == "ToolArgumentsError"
    assert "add" not in RECEIVED


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ("[1, 2]", 'Arguments of tool "add" must be a JSON object, got list'),
        ("42", 'Arguments of tool "add" must be a JSON object, got int'),
        ("true", 'Arguments of tool "add" must be a JSON object, got bool'),
    ],
)
def test_non_object_json_is_an_arguments_error(arguments: str, text: str) -> None:
    outcome = call(add, arguments)
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == text


def test_a_json_fractional_number_is_an_arguments_error() -> None:
    outcome = call(add, "1.5")
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text.startswith('Arguments of tool "add" must be a JSON object, got ')


# ---------------------------------------------------------------------------------------------------
# Unknown keys and fields


def test_unknown_top_level_keys_are_ignored() -> None:
    outcome = call(add, '{"a": 1, "b": "x", "c": {"deep": [1]}, "extra": true}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["add"] == (1, "x")


def test_unknown_field_in_a_dataclass_argument_is_an_arguments_error() -> None:
    outcome = call(place, '{"point": {"x": 1, "y": 2, "z": 3}}')
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Argument "point" has unknown field "z" for Point'
    assert "place" not in RECEIVED


def test_unknown_field_in_a_pydantic_argument_is_an_arguments_error() -> None:
    arguments = '{"order": {"customer": "Ann", "items": [], "coupon": "FREE"}}'
    outcome = call(place_order, arguments)
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Argument "order" has unknown field "coupon" for Order'


def test_unknown_field_in_a_nested_model_is_an_arguments_error() -> None:
    arguments = '{"order": {"customer": "Ann", "items": [{"sku": "a", "quantity": 1, "price": 1, "x": 0}]}}'
    outcome = call(place_order, arguments)
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Argument "order.items[0]" has unknown field "x" for Item'


def test_unknown_field_in_a_typeddict_argument_is_an_arguments_error() -> None:
    outcome = call(deliver, '{"address": {"street": "Main", "number": 1, "city": "X"}}')
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Argument "address" has unknown field "city" for Address'


# ---------------------------------------------------------------------------------------------------
# Missing and null arguments


@pytest.mark.parametrize("arguments", ['{"name": "Ann"}', '{"name": "Ann", "greeting": null, "title": null}'])
def test_missing_or_null_arguments_get_the_default_or_none(arguments: str) -> None:
    outcome = call(greet, arguments)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["greet"] == ("Ann", "Hello", None)
    assert outcome.text == "Hello, Ann"


def test_given_arguments_override_defaults() -> None:
    outcome = call(greet, '{"name": "Ann", "greeting": "Hi", "title": "Dr."}')
    assert outcome.text == "Hi, Dr. Ann"


@pytest.mark.parametrize("arguments", ['{"greeting": "Hi"}', '{"name": null}', "{}"])
def test_missing_or_null_required_argument_is_an_arguments_error(arguments: str) -> None:
    outcome = call(greet, arguments)
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Required parameter "name" of tool "greet" is missing'
    assert "greet" not in RECEIVED


def test_missing_required_field_of_an_object_argument_is_an_arguments_error() -> None:
    outcome = call(place, '{"point": {"x": 1}}')
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Required parameter "point.y" of tool "place" is missing'


@pytest.mark.parametrize(
    ("function", "first", "second"),
    [
        (append_to_list, '["seed","added"]', '["seed","added"]'),
        (put_in_dict, '{"seed":1,"added":2}', '{"seed":1,"added":2}'),
        (change_settings, '{"tags":["seed","added"],"level":2}', '{"tags":["seed","added"],"level":2}'),
    ],
)
def test_defaults_are_fresh_copies_on_every_call(
    function: Callable[..., Any], first: str, second: str
) -> None:
    # given a tool that mutates its default, when called twice without the argument
    outcome_1 = call(function, "{}")
    outcome_2 = call(function, "{}")
    # then each call saw the original default
    assert (outcome_1.kind, outcome_1.text) == (OutcomeKind.SUCCESS, first)
    assert (outcome_2.kind, outcome_2.text) == (OutcomeKind.SUCCESS, second)


def test_a_wrong_value_never_falls_back_to_the_default() -> None:
    outcome = call(with_default_count, '{"count": "banana"}')
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Argument "count" is not convertable to int, got str: <banana>'


# ---------------------------------------------------------------------------------------------------
# int


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"n": 1}', 1),
        ('{"n": 1.0}', 1),
        ('{"n": "1"}', 1),
        ('{"n": " 1 "}', 1),
        ('{"n": -7}', -7),
        ('{"n": 9007199254740993}', 9007199254740993),
        ('{"n": 9223372036854775807}', 2**63 - 1),
        ('{"n": -9223372036854775808}', -(2**63)),
    ],
)
def test_int_accepts_integral_numbers_and_numeric_strings(arguments: str, expected: int) -> None:
    outcome = call(integer, arguments)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["integer"] == expected
    assert type(RECEIVED["integer"]) is int


def test_int_rejects_a_fraction() -> None:
    outcome = call(integer, '{"n": 1.5}')
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Argument "n" has non-integer value for int: <1.5>'


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ('{"n": 9223372036854775808}', 'Argument "n" is out of range for int: <9223372036854775808>'),
        ('{"n": -9223372036854775809}', 'Argument "n" is out of range for int: <-9223372036854775809>'),
    ],
)
def test_int_rejects_values_out_of_the_64_bit_range(arguments: str, text: str) -> None:
    outcome = call(integer, arguments)
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == text


def test_int_rejects_a_boolean() -> None:
    outcome = call(integer, '{"n": true}')
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Argument "n" is not convertable to int, got bool: <true>'


# ---------------------------------------------------------------------------------------------------
# float


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"x": 2.5}', 2.5),
        ('{"x": 3}', 3.0),
        ('{"x": "2.5"}', 2.5),
        ('{"x": " -7 "}', -7.0),
        ('{"x": 1e3}', 1000.0),
    ],
)
def test_float_accepts_numbers_and_numeric_strings(arguments: str, expected: float) -> None:
    outcome = call(real, arguments)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["real"] == expected
    assert type(RECEIVED["real"]) is float


def test_float_rejects_a_non_numeric_string() -> None:
    outcome = call(real, '{"x": "abc"}')
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Argument "x" is not convertable to float, got str: <abc>'


def test_float_out_of_range_integer_is_an_arguments_error_not_a_crash() -> None:
    outcome = call(real, '{"x": 1' + "0" * 400 + "}")
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR


# ---------------------------------------------------------------------------------------------------
# bool


@pytest.mark.parametrize(
    ("arguments", "expected"), [('{"enabled": true}', True), ('{"enabled": false}', False)]
)
def test_bool_accepts_json_booleans(arguments: str, expected: bool) -> None:
    outcome = call(flag, arguments)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["flag"] is expected


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ('{"enabled": "true"}', 'Argument "enabled" is not convertable to bool, got str: <true>'),
        ('{"enabled": 1}', 'Argument "enabled" is not convertable to bool, got int: <1>'),
    ],
)
def test_bool_rejects_anything_but_a_json_boolean(arguments: str, text: str) -> None:
    outcome = call(flag, arguments)
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == text


# ---------------------------------------------------------------------------------------------------
# Enum


@pytest.mark.parametrize(
    ("value", "member"),
    [
        ("CELSIUS", Unit.CELSIUS),
        ("celsius", Unit.CELSIUS),
        ("FAHRENHEIT", Unit.FAHRENHEIT),
        ("Kelvin", Unit.Kelvin),
    ],
)
def test_enum_accepts_the_exact_name_then_the_upper_cased_name(value: str, member: Unit) -> None:
    outcome = call(temperature, f'{{"unit": "{value}"}}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["temperature"] is member


@pytest.mark.parametrize("value", ["D", "kelvin", "c"])
def test_enum_rejects_other_values(value: str) -> None:
    # "kelvin" is neither the exact name "Kelvin" nor, upper-cased, a member; "c" is a value, not a name
    outcome = call(temperature, f'{{"unit": "{value}"}}')
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == f'Argument "unit" is not a valid enum value for Unit: <{value}>'


# ---------------------------------------------------------------------------------------------------
# Decimal


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"amount": 0.1}', "0.1"),
        ('{"amount": 12345678901234567890.123456789}', "12345678901234567890.123456789"),
        ('{"amount": 1.50}', "1.50"),
        ('{"amount": "0.10"}', "0.10"),
        ('{"amount": 123456789012345678901234567890}', "123456789012345678901234567890"),
    ],
)
def test_decimal_keeps_exact_digits(arguments: str, expected: str) -> None:
    outcome = call(money, arguments)
    assert outcome.kind is OutcomeKind.SUCCESS
    received = RECEIVED["money"]
    assert type(received) is Decimal
    assert str(received) == expected
    assert received.as_tuple() == Decimal(expected).as_tuple()


# ---------------------------------------------------------------------------------------------------
# str


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"value": "  as is  "}', "  as is  "),
        ('{"value": "1.0"}', "1.0"),
        ('{"value": "{\\"a\\": 1}"}', '{"a": 1}'),
        ('{"value": "héllo"}', "héllo"),
        ('{"value": 4.0}', "4.0"),
        ('{"value": 10}', "10"),
        ('{"value": -2.50}', "-2.50"),
    ],
)
def test_str_receives_strings_as_they_are_and_numbers_as_their_json_text(
    arguments: str, expected: str
) -> None:
    outcome = call(text, arguments)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["text"] == expected


@pytest.mark.parametrize(("json_number", "expected"), [("0.00000001", "0.00000001"), ("1e5", "1e5")])
def test_str_receives_the_json_text_of_small_and_exponent_numbers(json_number: str, expected: str) -> None:
    outcome = call(text, f'{{"value": {json_number}}}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["text"] == expected


# ---------------------------------------------------------------------------------------------------
# UUID and objects


def test_uuid_is_parsed() -> None:
    outcome = call(identify, '{"id": "12345678-1234-5678-1234-567812345678"}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["identify"] == uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert type(RECEIVED["identify"]) is uuid.UUID


def test_invalid_uuid_is_an_arguments_error() -> None:
    outcome = call(identify, '{"id": "not-a-uuid"}')
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Argument "id" is not convertable to UUID, got str: <not-a-uuid>'


def test_dataclass_argument_is_built_from_an_object() -> None:
    outcome = call(place, '{"point": {"x": 1, "y": "2"}}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["place"] == Point(1, 2)
    assert type(RECEIVED["place"]) is Point


def test_a_json_string_holding_an_object_is_accepted_for_a_dataclass() -> None:
    outcome = call(place, '{"point": "{\\"x\\": 3, \\"y\\": 4}"}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["place"] == Point(3, 4)


def test_a_json_string_holding_an_object_is_accepted_for_a_pydantic_model() -> None:
    outcome = call(place_order, '{"order": "{\\"customer\\": \\"Ann\\", \\"items\\": []}"}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["place_order"] == Order(customer="Ann", items=[])


def test_pydantic_model_is_validated_with_nested_models() -> None:
    arguments = (
        '{"order": {"customer": "Ann", "items": [{"sku": "a-1", "quantity": "2", "price": 0.1},'
        ' {"sku": "b-2", "quantity": 1, "price": "19.90"}]}}'
    )
    outcome = call(place_order, arguments)
    assert outcome.kind is OutcomeKind.SUCCESS
    order = RECEIVED["place_order"]
    assert type(order) is Order
    assert [type(item) for item in order.items] == [Item, Item]
    assert order.items[0] == Item(sku="a-1", quantity=2, price=Decimal("0.1"))
    assert str(order.items[1].price) == "19.90"
    assert order.note is None


def test_a_field_of_the_wrong_type_inside_a_model_is_an_arguments_error() -> None:
    outcome = call(
        place_order, '{"order": {"customer": "Ann", "items": [{"sku": "a", "quantity": "x", "price": 1}]}}'
    )
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Argument "order.items[0].quantity" is not convertable to int, got str: <x>'


def test_lists_sets_and_dicts_are_validated_into_the_declared_types() -> None:
    arguments = '{"numbers": ["1", 2, 3.0], "labels": ["a", "b", "a"], "scores": {"x": 1, "y": "2.5"}}'
    outcome = call(collections_tool, arguments)
    assert outcome.kind is OutcomeKind.SUCCESS
    numbers, labels, scores = RECEIVED["collections_tool"]
    assert numbers == [1, 2, 3]
    assert [type(n) for n in numbers] == [int, int, int]
    assert type(labels) is set
    assert labels == {"a", "b"}
    assert scores == {"x": 1.0, "y": 2.5}
    assert [type(v) for v in scores.values()] == [float, float]


def test_a_wrong_item_in_a_list_is_an_arguments_error() -> None:
    outcome = call(collections_tool, '{"numbers": [1, "two"], "labels": [], "scores": {}}')
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text == 'Argument "numbers[1]" is not convertable to int, got str: <two>'


def test_nested_dataclasses_are_built() -> None:
    arguments = '{"route": {"start": {"x": 0, "y": 0}, "stops": [{"x": 1, "y": 2}, {"x": 3, "y": 4}]}}'
    outcome = call(travel, arguments)
    assert outcome.kind is OutcomeKind.SUCCESS
    route = RECEIVED["travel"]
    assert route == Route(start=Point(0, 0), stops=[Point(1, 2), Point(3, 4)], name="unnamed")
    assert type(route.start) is Point
    assert [type(stop) for stop in route.stops] == [Point, Point]


def test_typeddict_argument_is_validated_into_a_dict() -> None:
    outcome = call(deliver, '{"address": {"street": "Main", "number": "12"}}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["deliver"] == {"street": "Main", "number": 12}
    assert type(RECEIVED["deliver"]) is dict


def test_discriminated_union_dispatches_on_the_type_property_class_name() -> None:
    outcome = call(draw, '{"shape": {"type": "Square", "side": 2}}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["draw"] == Square(side=2.0)
    assert type(RECEIVED["draw"]) is Square


def test_discriminated_union_dispatches_on_a_declared_literal_tag() -> None:
    outcome = call(adopt, '{"pet": {"type": "dog", "good": true}}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["adopt"] == Dog(good=True)
    assert type(RECEIVED["adopt"]) is Dog


def test_discriminated_union_inside_a_list() -> None:
    arguments = '{"shapes": [{"type": "Circle", "radius": 1.5}, {"type": "Square", "side": 3}]}'
    outcome = call(draw_many, arguments)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["draw_many"] == [Circle(radius=1.5), Square(side=3.0)]


@pytest.mark.parametrize(
    "arguments", ['{"shape": {"type": "Triangle", "side": 1}}', '{"shape": {"side": 1}}']
)
def test_discriminated_union_with_an_unknown_or_missing_tag_is_an_arguments_error(arguments: str) -> None:
    outcome = call(draw, arguments)
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
    assert outcome.text.startswith('Argument "shape" needs "type" set to one of [Circle, Square]: ')


def test_deeply_nested_arguments_do_not_crash_the_runner() -> None:
    depth = 700
    outcome = call(untyped_list, '{"values": ' + "[" * depth + "]" * depth + "}")
    assert outcome.kind in (OutcomeKind.ARGUMENTS_ERROR, OutcomeKind.SUCCESS)


# ---------------------------------------------------------------------------------------------------
# Injection and invocation parameters


def test_injected_values_are_received() -> None:
    # given an invocation with a context and parameters
    context = InvocationContext(memory_id="m1", service_name="svc", user_message="hi")
    invocation = Invocation(context, {"k": "v"})
    # when
    outcome = call(introspect, '{"query": "q"}', invocation)
    # then
    assert outcome.kind is OutcomeKind.SUCCESS
    query, parameters, received_context, memory_id = RECEIVED["introspect"]
    assert query == "q"
    assert type(parameters) is InvocationParameters
    assert dict(parameters) == {"k": "v"}
    assert received_context is context
    assert type(memory_id) is ToolMemoryId
    assert memory_id == "m1"


def test_memory_id_is_default_when_not_given() -> None:
    outcome = call(introspect, '{"query": "q"}')
    assert outcome.kind is OutcomeKind.SUCCESS
    _, parameters, context, memory_id = RECEIVED["introspect"]
    assert memory_id == "default"
    assert context.memory_id == "default"
    assert dict(parameters) == {}


def test_the_model_cannot_set_injected_parameters() -> None:
    invocation = Invocation(InvocationContext(memory_id="m1"), {"k": "v"})
    arguments = '{"query": "q", "parameters": {"k": "evil"}, "context": "x", "memory_id": "other"}'
    outcome = call(introspect, arguments, invocation)
    assert outcome.kind is OutcomeKind.SUCCESS
    _, parameters, context, memory_id = RECEIVED["introspect"]
    assert dict(parameters) == {"k": "v"}
    assert context is invocation.context
    assert memory_id == "m1"


def test_injected_parameters_are_not_in_the_specification() -> None:
    specification = discover_tools(introspect)[0].specification
    assert specification.parameters is not None
    assert list(specification.parameters["properties"]) == ["query"]


def test_written_parameters_appear_in_parameter_changes_and_the_caller_mapping_is_untouched() -> None:
    # given
    caller_parameters = {"k": "v", "other": 1}
    invocation = Invocation(InvocationContext(memory_id="m1"), caller_parameters)
    # when the tool writes into its InvocationParameters
    outcome = call(write_parameters, "{}", invocation)
    # then the writes are reported, and only them
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.parameter_changes == {"added": [1, 2], "k": "changed"}
    # and the caller's mapping did not change
    assert caller_parameters == {"k": "v", "other": 1}
    assert dict(invocation.parameters) == {"k": "v", "other": 1}


def test_a_tool_that_writes_nothing_has_no_parameter_changes() -> None:
    outcome = call(read_parameters, "{}", Invocation(InvocationContext(), {"a": 1}))
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "a=1"
    assert outcome.parameter_changes == {}


def test_in_place_change_of_a_parameter_value_is_reported() -> None:
    invocation = Invocation(InvocationContext(), {"cart": []})
    outcome = call(mutate_nested_parameter, "{}", invocation)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.parameter_changes == {"cart": ["book"]}
