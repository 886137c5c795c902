"""SPEC §2: what each type of tool parameter accepts from the model's JSON, and the exact error text
for what it refuses. One row per case: the tool (whose parameter has the type), the arguments, and
the value the tool must receive, compared by type and value all the way down."""

import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from tests.workers.binding_tools import (
    RECEIVED,
    Circle,
    Dog,
    Item,
    Order,
    Point,
    Route,
    Square,
    Unit,
    adopt,
    assert_arguments_error,
    assert_same,
    call,
    collections_tool,
    deliver,
    draw,
    draw_many,
    flag,
    identify,
    integer,
    money,
    place,
    place_order,
    real,
    temperature,
    text,
    travel,
)
from workers import OutcomeKind

ACCEPTED = [
    # int: integral numbers and numeric strings, within 64 bits
    (integer, '{"n": 1}', 1),
    (integer, '{"n": 1.0}', 1),
    (integer, '{"n": "1"}', 1),
    (integer, '{"n": " 1 "}', 1),
    (integer, '{"n": -7}', -7),
    (integer, '{"n": 9007199254740993}', 9007199254740993),
    (integer, '{"n": 9223372036854775807}', 2**63 - 1),
    (integer, '{"n": -9223372036854775808}', -(2**63)),
    # float: numbers and numeric strings
    (real, '{"x": 2.5}', 2.5),
    (real, '{"x": 3}', 3.0),
    (real, '{"x": "2.5"}', 2.5),
    (real, '{"x": " -7 "}', -7.0),
    (real, '{"x": 1e3}', 1000.0),
    # bool: JSON booleans
    (flag, '{"enabled": true}', True),
    (flag, '{"enabled": false}', False),
    # Enum: the exact name, then the upper-cased name
    (temperature, '{"unit": "CELSIUS"}', Unit.CELSIUS),
    (temperature, '{"unit": "celsius"}', Unit.CELSIUS),
    (temperature, '{"unit": "FAHRENHEIT"}', Unit.FAHRENHEIT),
    (temperature, '{"unit": "Kelvin"}', Unit.Kelvin),
    # Decimal: the exact digits (assert_same compares the digits and the exponent)
    (money, '{"amount": 0.1}', Decimal("0.1")),
    (money, '{"amount": 12345678901234567890.123456789}', Decimal("12345678901234567890.123456789")),
    (money, '{"amount": 1.50}', Decimal("1.50")),
    (money, '{"amount": "0.10"}', Decimal("0.10")),
    (money, '{"amount": 123456789012345678901234567890}', Decimal("123456789012345678901234567890")),
    # str: strings as they are, numbers as their JSON text
    (text, '{"value": "  as is  "}', "  as is  "),
    (text, '{"value": "1.0"}', "1.0"),
    (text, '{"value": "{\\"a\\": 1}"}', '{"a": 1}'),
    (text, '{"value": "héllo"}', "héllo"),
    (text, '{"value": 4.0}', "4.0"),
    (text, '{"value": 10}', "10"),
    (text, '{"value": -2.50}', "-2.50"),
    (text, '{"value": 0.00000001}', "0.00000001"),
    (text, '{"value": 1e5}', "1e5"),
    # UUID
    (
        identify,
        '{"id": "12345678-1234-5678-1234-567812345678"}',
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
    ),
    # dataclasses and pydantic models, from an object or from a JSON string holding one
    (place, '{"point": {"x": 1, "y": "2"}}', Point(1, 2)),
    (place, '{"point": "{\\"x\\": 3, \\"y\\": 4}"}', Point(3, 4)),
    (
        place_order,
        '{"order": "{\\"customer\\": \\"Ann\\", \\"items\\": []}"}',
        Order(customer="Ann", items=[]),
    ),
    (
        place_order,
        '{"order": {"customer": "Ann", "items": [{"sku": "a-1", "quantity": "2", "price": 0.1},'
        ' {"sku": "b-2", "quantity": 1, "price": "19.90"}]}}',
        Order(
            customer="Ann",
            items=[
                Item(sku="a-1", quantity=2, price=Decimal("0.1")),
                Item(sku="b-2", quantity=1, price=Decimal("19.90")),
            ],
            note=None,
        ),
    ),
    (
        travel,
        '{"route": {"start": {"x": 0, "y": 0}, "stops": [{"x": 1, "y": 2}, {"x": 3, "y": 4}]}}',
        Route(start=Point(0, 0), stops=[Point(1, 2), Point(3, 4)], name="unnamed"),
    ),
    (deliver, '{"address": {"street": "Main", "number": "12"}}', {"street": "Main", "number": 12}),
    # lists, sets and dicts of the declared item types
    (
        collections_tool,
        '{"numbers": ["1", 2, 3.0], "labels": ["a", "b", "a"], "scores": {"x": 1, "y": "2.5"}}',
        ([1, 2, 3], {"a", "b"}, {"x": 1.0, "y": 2.5}),
    ),
    # discriminated unions: on the class name in "type", or on a declared Literal tag; also in a list
    (draw, '{"shape": {"type": "Square", "side": 2}}', Square(side=2.0)),
    (adopt, '{"pet": {"type": "dog", "good": true}}', Dog(good=True)),
    (
        draw_many,
        '{"shapes": [{"type": "Circle", "radius": 1.5}, {"type": "Square", "side": 3}]}',
        [Circle(radius=1.5), Square(side=3.0)],
    ),
]


@pytest.mark.parametrize(("function", "arguments", "expected"), ACCEPTED)
def test_the_tool_receives_the_declared_type(
    function: Callable[..., Any], arguments: str, expected: Any
) -> None:
    outcome = call(function, arguments)
    assert outcome.kind is OutcomeKind.SUCCESS, outcome.text
    assert_same(RECEIVED[function.__name__], expected)


REFUSED = [
    # int
    (integer, '{"n": 1.5}', "n", "has non-integer value for int: <1.5>"),
    (integer, '{"n": 9223372036854775808}', "n", "is out of range for int: <9223372036854775808>"),
    (integer, '{"n": -9223372036854775809}', "n", "is out of range for int: <-9223372036854775809>"),
    (integer, '{"n": true}', "n", "is not convertable to int, got bool: <true>"),
    # float
    (real, '{"x": "abc"}', "x", "is not convertable to float, got str: <abc>"),
    (real, '{"x": 1' + "0" * 400 + "}", "x", "is out of range for float: <1" + "0" * 400 + ">"),
    # bool: nothing but a JSON boolean
    (flag, '{"enabled": "true"}', "enabled", "is not convertable to bool, got str: <true>"),
    (flag, '{"enabled": 1}', "enabled", "is not convertable to bool, got int: <1>"),
    # Enum: "kelvin" is neither the exact name "Kelvin" nor, upper-cased, a member; "c" is a value
    (temperature, '{"unit": "D"}', "unit", "is not a valid enum value for Unit: <D>"),
    (temperature, '{"unit": "kelvin"}', "unit", "is not a valid enum value for Unit: <kelvin>"),
    (temperature, '{"unit": "c"}', "unit", "is not a valid enum value for Unit: <c>"),
    # UUID
    (identify, '{"id": "not-a-uuid"}', "id", "is not convertable to UUID, got str: <not-a-uuid>"),
    # a wrong value inside a model or a list names its path
    (
        place_order,
        '{"order": {"customer": "Ann", "items": [{"sku": "a", "quantity": "x", "price": 1}]}}',
        "order.items[0].quantity",
        "is not convertable to int, got str: <x>",
    ),
    (
        collections_tool,
        '{"numbers": [1, "two"], "labels": [], "scores": {}}',
        "numbers[1]",
        "is not convertable to int, got str: <two>",
    ),
]


@pytest.mark.parametrize(("function", "arguments", "argument", "problem"), REFUSED)
def test_a_value_the_type_refuses_is_an_arguments_error_naming_the_argument(
    function: Callable[..., Any], arguments: str, argument: str, problem: str
) -> None:
    assert_arguments_error(call(function, arguments), f'Argument "{argument}" {problem}')


@pytest.mark.parametrize(
    "arguments", ['{"shape": {"type": "Triangle", "side": 1}}', '{"shape": {"side": 1}}']
)
def test_discriminated_union_with_an_unknown_or_missing_tag_is_an_arguments_error(arguments: str) -> None:
    prefix = 'Argument "shape" needs "type" set to one of [Circle, Square]: '
    assert_arguments_error(call(draw, arguments), prefix, prefix=True)
