"""SPEC §2: how the model's JSON arguments reach a tool through `run_tool`: parsing and the one repair,
unknown and missing keys, defaults, and the injected invocation values. What each type of parameter
accepts is in test_binding_types.py."""

from collections.abc import Callable
from typing import Any

import pytest

from tests.workers.binding_tools import (
    RECEIVED,
    add,
    append_to_list,
    assert_arguments_error,
    assert_same,
    call,
    change_settings,
    deliver,
    greet,
    introspect,
    mutate_nested_parameter,
    ping,
    place,
    place_order,
    put_in_dict,
    read_parameters,
    total,
    untyped_list,
    with_default_count,
    write_parameters,
)
from workers import InvocationContext, InvocationParameters, OutcomeKind, ToolMemoryId
from workers.calls.invocation import Invocation
from workers.tools import discover_tools

# ---------------------------------------------------------------------------------------------------
# Parsing and the one repair


@pytest.mark.parametrize("arguments", ["", "   ", "\n\t"])
def test_blank_arguments_are_an_empty_object(arguments: str) -> None:
    # given a tool without parameters, when called with blank arguments
    outcome = call(ping, arguments)
    # then it runs as if `{}` had been sent
    assert (outcome.kind, outcome.text) == (OutcomeKind.SUCCESS, "pong")


@pytest.mark.parametrize(
    ("function", "arguments", "text", "received"),
    [
        pytest.param(
            add,
            '"{\\"a\\": 1, \\"b\\": \\"x\\"}"',
            "1|x",
            (1, "x"),
            id="outer quotes of a double-encoded object",
        ),
        pytest.param(add, '{\\"a\\": 2, \\"b\\": \\"y\\"}', "2|y", (2, "y"), id="escaped quotes"),
        pytest.param(add, '{"a": 3, "b": "z",}', "3|z", (3, "z"), id="a trailing comma in an object"),
        pytest.param(
            total, '{"values": [1, 2, 3, ], }', "6", [1, 2, 3], id="trailing commas in arrays and objects"
        ),
        pytest.param(total, '"{\\"values\\": [4, 5,],}"', "9", [4, 5], id="all fixes at once"),
    ],
)
def test_the_repair_makes_near_json_an_object(
    function: Callable[..., Any], arguments: str, text: str, received: Any
) -> None:
    outcome = call(function, arguments)
    assert (outcome.kind, outcome.text) == (OutcomeKind.SUCCESS, text)
    assert_same(RECEIVED[function.__name__], received)


@pytest.mark.parametrize(
    ("function", "arguments", "text", "prefix"),
    [
        # blank arguments are `{}`, which still needs the required parameters
        (greet, "", 'Required parameter "name" of tool "greet" is missing', False),
        # not JSON even after the repair
        (add, '{"a": 1', 'Arguments of tool "add" are not valid JSON: ', True),
        (add, "{a: 1}", 'Arguments of tool "add" are not valid JSON: ', True),
        (add, "not json", 'Arguments of tool "add" are not valid JSON: ', True),
        (add, '"hello"', 'Arguments of tool "add" are not valid JSON: ', True),
        (add, '{"a": NaN, "b": "x"}', 'Arguments of tool "add" are not valid JSON: ', True),
        # JSON, but not an object
        (add, "[1, 2]", 'Arguments of tool "add" must be a JSON object, got list', False),
        (add, "42", 'Arguments of tool "add" must be a JSON object, got int', False),
        (add, "true", 'Arguments of tool "add" must be a JSON object, got bool', False),
        (add, "1.5", 'Arguments of tool "add" must be a JSON object, got ', True),
        # missing or null required values
        (greet, '{"greeting": "Hi"}', 'Required parameter "name" of tool "greet" is missing', False),
        (greet, '{"name": null}', 'Required parameter "name" of tool "greet" is missing', False),
        (greet, "{}", 'Required parameter "name" of tool "greet" is missing', False),
        (place, '{"point": {"x": 1}}', 'Required parameter "point.y" of tool "place" is missing', False),
        # a wrong value never falls back to the default
        (
            with_default_count,
            '{"count": "banana"}',
            'Argument "count" is not convertable to int, got str: <banana>',
            False,
        ),
    ],
)
def test_arguments_that_cannot_be_bound_are_an_arguments_error(
    function: Callable[..., Any], arguments: str, text: str, prefix: bool
) -> None:
    assert_arguments_error(call(function, arguments), text, prefix=prefix)


@pytest.mark.parametrize(
    ("function", "arguments", "argument", "field", "model"),
    [
        (place, '{"point": {"x": 1, "y": 2, "z": 3}}', "point", "z", "Point"),
        (
            place_order,
            '{"order": {"customer": "Ann", "items": [], "coupon": "FREE"}}',
            "order",
            "coupon",
            "Order",
        ),
        (
            place_order,
            '{"order": {"customer": "Ann", "items": [{"sku": "a", "quantity": 1, "price": 1, "x": 0}]}}',
            "order.items[0]",
            "x",
            "Item",
        ),
        (deliver, '{"address": {"street": "Main", "number": 1, "city": "X"}}', "address", "city", "Address"),
    ],
)
def test_an_unknown_field_inside_an_object_argument_is_an_arguments_error_naming_it(
    function: Callable[..., Any], arguments: str, argument: str, field: str, model: str
) -> None:
    # unknown top-level keys are ignored; inside an object argument they are refused
    text = f'Argument "{argument}" has unknown field "{field}" for {model}'
    assert_arguments_error(call(function, arguments), text)


def test_deeply_nested_arguments_do_not_crash_the_runner() -> None:
    depth = 700
    outcome = call(untyped_list, '{"values": ' + "[" * depth + "]" * depth + "}")
    assert outcome.kind in (OutcomeKind.ARGUMENTS_ERROR, OutcomeKind.SUCCESS)


# ---------------------------------------------------------------------------------------------------
# Unknown, missing and null keys; defaults


def test_unknown_top_level_keys_are_ignored() -> None:
    outcome = call(add, '{"a": 1, "b": "x", "c": {"deep": [1]}, "extra": true}')
    assert outcome.kind is OutcomeKind.SUCCESS
    assert RECEIVED["add"] == (1, "x")


@pytest.mark.parametrize("arguments", ['{"name": "Ann"}', '{"name": "Ann", "greeting": null, "title": null}'])
def test_missing_or_null_arguments_get_the_default_or_none(arguments: str) -> None:
    outcome = call(greet, arguments)
    assert (outcome.kind, outcome.text) == (OutcomeKind.SUCCESS, "Hello, Ann")
    assert RECEIVED["greet"] == ("Ann", "Hello", None)


def test_given_arguments_override_defaults() -> None:
    outcome = call(greet, '{"name": "Ann", "greeting": "Hi", "title": "Dr."}')
    assert outcome.text == "Hi, Dr. Ann"


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        (append_to_list, '["seed","added"]'),
        (put_in_dict, '{"seed":1,"added":2}'),
        (change_settings, '{"tags":["seed","added"],"level":2}'),
    ],
)
def test_defaults_are_fresh_copies_on_every_call(function: Callable[..., Any], expected: str) -> None:
    # given a tool that mutates its default, when called twice without the argument
    outcome_1 = call(function, "{}")
    outcome_2 = call(function, "{}")
    # then each call saw the original default
    assert (outcome_1.kind, outcome_1.text) == (OutcomeKind.SUCCESS, expected)
    assert (outcome_2.kind, outcome_2.text) == (OutcomeKind.SUCCESS, expected)


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
    assert (outcome.kind, outcome.text) == (OutcomeKind.SUCCESS, "a=1")
    assert outcome.parameter_changes == {}


def test_in_place_change_of_a_parameter_value_is_reported() -> None:
    invocation = Invocation(InvocationContext(), {"cart": []})
    outcome = call(mutate_nested_parameter, "{}", invocation)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.parameter_changes == {"cart": ["book"]}
