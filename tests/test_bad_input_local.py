"""Bad model input against `workers.calls.runner.run_tool` alone: in-process, no Redis, many examples.

Whatever the model writes as arguments, `run_tool` returns a structured outcome: it never raises, an
error says clearly what is wrong (naming the tool or the parameter), and the outcome survives the JSON
wire (`ToolOutcome.to_json()` encodes to UTF-8 and reads back equal).

The generators and oracles defined here are shared with `tests/integration/test_bad_input.py`, which
runs the same inputs on both executors and compares them. Two inputs have dedicated tests below
instead of generators (their oracles differ): lone surrogates (`\\ud800`) and exponent bombs
(`1e999999999` for an `int`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.integration.badinput_tools as bad
from workers import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.calls.runner import run_tool
from workers.tools.registry import ToolRegistry

REPO = Path(__file__).resolve().parents[1]
REGISTRY = ToolRegistry([bad])
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

SINGLE = ("bad_int", "bad_float", "bad_bool", "bad_str", "bad_enum", "bad_list", "bad_point")
"""Tools with one required parameter, `value`, of one type each."""
FUZZED = (*SINGLE, "bad_mixed")
"""Tools without side effects: safe to call with anything. All have required parameters."""
MIXED_PARAMS = ("i", "f", "b", "s", "e", "items", "p", "opt")

MANY = settings(max_examples=250, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# ---- generators (shared with the integration tests) ---------------------------------------------

_EXPONENT_BOMB = re.compile(r"[eE][+]?0*\d{5,}")


def no_exponent_bomb(text: str) -> bool:
    """Leave out numbers like `1e99999`: they have tests of their own below."""
    return _EXPONENT_BOMB.search(text) is None


# Text without lone surrogates (hypothesis' default alphabet has none; they have tests of their own).
plain_text = st.text(max_size=40)
int64 = st.integers(INT64_MIN, INT64_MAX)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    finite_floats,
    plain_text,
    st.sampled_from(["1", " 2 ", "1.0", "1.5", "-0", "RED", "red", "Blue", "true", "[1, 2]", '{"x": 1}', ""]),
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
).filter(lambda value: no_exponent_bomb(json.dumps(value)))
"""Any JSON value, as the model might put it where a parameter goes."""

_JSONISH = '{}[]":,0123456789.eE+-truefalsn \\value'
garbage_text = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=_JSONISH, max_size=120),
    st.binary(max_size=200).map(lambda raw: raw.decode("latin-1")),
).filter(no_exponent_bomb)
"""Random text where the arguments JSON should be."""

_points = st.fixed_dictionaries({"x": int64}, optional={"y": int64})
_valid_values: dict[str, st.SearchStrategy[Any]] = {
    "bad_int": int64,
    "bad_float": finite_floats,
    "bad_bool": st.booleans(),
    "bad_str": plain_text,
    "bad_enum": st.sampled_from([c.name for c in bad.Color]),
    "bad_list": st.lists(int64, max_size=5),
    "bad_point": _points,
}
# The required parameters of `bad_mixed` have, in order, the types of the SINGLE tools; `opt` comes last.
valid_mixed = st.fixed_dictionaries(
    {parameter: _valid_values[tool] for parameter, tool in zip(MIXED_PARAMS[:-1], SINGLE, strict=True)},
    optional={"opt": int64},
)


def valid_arguments(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    if tool == "bad_mixed":
        return valid_mixed
    return st.fixed_dictionaries({"value": _valid_values[tool]})


@st.composite
def truncated_json(draw: st.DrawFn) -> tuple[str, str]:
    """Valid arguments of a tool, cut short anywhere: (tool, text)."""
    tool = draw(st.sampled_from(FUZZED))
    text = json.dumps(draw(valid_arguments(tool)), ensure_ascii=draw(st.booleans()))
    return tool, text[: draw(st.integers(0, len(text) - 1))]


ALL_DEPTHS = st.integers(65, 10_000)


@st.composite
def deeply_nested(draw: st.DrawFn, depths: st.SearchStrategy[int] = ALL_DEPTHS) -> str:
    """65 to 10,000 levels of nesting (or `depths`), in several shapes."""
    depth = draw(depths)
    shape = draw(st.sampled_from(["open", "closed", "value", "objects"]))
    if shape == "open":
        return "[" * depth
    if shape == "closed":
        return "[" * depth + "]" * depth
    if shape == "value":
        return '{"value": ' + "[" * depth + "1" + "]" * depth + "}"
    return '{"value": ' * depth + "1" + "}" * depth


@st.composite
def wrong_types(draw: st.DrawFn) -> tuple[str, Any]:
    """(tool, value): any JSON value for the one parameter of a single-type tool."""
    return draw(st.sampled_from(SINGLE)), draw(json_values)


@st.composite
def one_bad_parameter(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """Valid arguments of `bad_mixed` with one parameter replaced by any JSON value: (parameter, args)."""
    arguments = dict(draw(valid_mixed))
    parameter = draw(st.sampled_from(MIXED_PARAMS))
    arguments[parameter] = draw(json_values)
    return parameter, arguments


unknown_names = st.text(max_size=40).filter(lambda name: name not in REGISTRY)

# ---- oracles (shared with the integration tests) ------------------------------------------------

_UNCLEAR = ("<class '", "Traceback", " object at 0x")


def check_structured(outcome: ToolOutcome, tool: str, allowed: set[OutcomeKind]) -> None:
    """An outcome of an allowed kind that crosses the wire intact; an error says clearly what is wrong."""
    assert isinstance(outcome, ToolOutcome)
    assert outcome.kind in allowed, f"{outcome.kind}: {outcome.text!r}"
    assert isinstance(outcome.text, str)
    wire = json.dumps(outcome.to_json(), ensure_ascii=False).encode("utf-8")
    assert ToolOutcome.from_json(json.loads(wire)) == outcome
    if outcome.is_error:
        assert outcome.text.strip(), "an error needs a text"
        assert outcome.error_type
        assert not any(marker in outcome.text for marker in _UNCLEAR), outcome.text
    if outcome.kind is OutcomeKind.ARGUMENTS_ERROR:
        names_it = f'"{tool}"' in outcome.text or re.match(r'(Argument|Required parameter) "', outcome.text)
        assert names_it, f"names neither the tool nor a parameter: {outcome.text!r}"


def _parses_to_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def _valid_after_one_repair(text: str) -> bool:
    """SPEC.md §2: blank is `{}`; else parse, or strip one pair of outer quotes, unescape `\\"`, drop
    trailing commas, and parse again."""
    stripped = text.strip()
    if not stripped or _parses_to_object(stripped):
        return True
    if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in "\"'":
        stripped = stripped[1:-1]
    return _parses_to_object(re.sub(r",\s*([}\]])", r"\1", stripped.replace('\\"', '"')))


def check_garbage(outcome: ToolOutcome, tool: str, text: str) -> None:
    allowed = {OutcomeKind.ARGUMENTS_ERROR}
    if _valid_after_one_repair(text):
        allowed.add(OutcomeKind.SUCCESS)  # it was valid (or repairable) arguments after all
    check_structured(outcome, tool, allowed)


def check_truncated(outcome: ToolOutcome, tool: str, text: str) -> None:
    check_structured(outcome, tool, {OutcomeKind.ARGUMENTS_ERROR})
    if text.strip():
        assert outcome.text.startswith(f'Arguments of tool "{tool}" are not valid JSON: '), outcome.text
    else:
        assert re.fullmatch(rf'Required parameter "\w+" of tool "{tool}" is missing', outcome.text)


_NESTING_TEXTS = (
    'Arguments of tool "{tool}" are nested too deeply',
    'Arguments of tool "{tool}" are nested deeper than 64 levels',
    'Arguments of tool "{tool}" must be a JSON object, got list',
)


def check_nested(outcome: ToolOutcome, tool: str) -> None:
    check_structured(outcome, tool, {OutcomeKind.ARGUMENTS_ERROR})
    expected = [text.format(tool=tool) for text in _NESTING_TEXTS]
    assert outcome.text in expected or outcome.text.startswith(
        f'Arguments of tool "{tool}" are not valid JSON: '
    ), outcome.text


def _json_type(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict"}[type(value)]


def check_wrong_type(outcome: ToolOutcome, tool: str, value: Any) -> None:
    """The spec's coercion rules for one `value` parameter, checked per type (SPEC.md §2)."""
    check_structured(outcome, tool, {OutcomeKind.SUCCESS, OutcomeKind.ARGUMENTS_ERROR})
    ok, text = outcome.kind is OutcomeKind.SUCCESS, outcome.text

    def refused(target: str) -> None:
        assert not ok, f"{value!r} accepted as {target}"
        assert text.startswith(f'Argument "value" is not convertable to {target}, got {_json_type(value)}: <')

    if value is None:
        assert (outcome.kind, text) == (
            OutcomeKind.ARGUMENTS_ERROR,
            f'Required parameter "value" of tool "{tool}" is missing',
        )
    elif tool == "bad_bool":
        if isinstance(value, bool):
            assert ok and text == json.dumps(value)
        else:
            refused("bool")
    elif tool == "bad_str":
        if isinstance(value, str):
            assert ok and text == value
        elif isinstance(value, bool | int | float):
            assert ok and text == json.dumps(value)  # the number's JSON text, as the model wrote it
        else:
            refused("str")
    elif tool == "bad_enum":
        names = {c.name for c in bad.Color}
        if isinstance(value, str) and (value in names or value.upper() in names):
            assert ok and text == (value if value in names else value.upper())
        else:
            assert not ok
            assert text.startswith('Argument "value" is not a valid enum value for Color: <')
            if isinstance(value, str):
                assert text == f'Argument "value" is not a valid enum value for Color: <{value}>'
    elif tool == "bad_int":
        _check_int(outcome, value)
    elif tool == "bad_float":
        if isinstance(value, bool | list | dict):
            refused("float")
        elif isinstance(value, int | float):
            assert ok and float(text) == float(value)
        elif ok:
            assert float(text) == float(Decimal(value.strip()))
    elif tool == "bad_list":
        if isinstance(value, list) and all(type(v) is int and INT64_MIN <= v <= INT64_MAX for v in value):
            assert ok and json.loads(text) == value
        elif isinstance(value, bool | int | float | dict):
            refused("array")
        elif isinstance(value, list) and not ok:  # [1.0] is fine; a bad item is named by its index
            assert re.match(r'(Argument|Required parameter) "value\[', text), text
    elif tool == "bad_point":
        if isinstance(value, dict):
            unknown = set(value) - {"x", "y"}
            if unknown:
                assert not ok and text.startswith('Argument "value" has unknown field "')
            elif value.get("x") is None:
                assert (ok, text) == (False, 'Required parameter "value.x" of tool "bad_point" is missing')
        elif isinstance(value, bool | int | float | list):
            refused("object")


def _check_int(outcome: ToolOutcome, value: Any) -> None:
    ok, text = outcome.kind is OutcomeKind.SUCCESS, outcome.text
    if isinstance(value, bool | list | dict):
        assert not ok and text.startswith(
            f'Argument "value" is not convertable to int, got {_json_type(value)}'
        )
    elif isinstance(value, int | float):
        number = Decimal(json.dumps(value))
        shown = json.dumps(value)
        if number != number.to_integral_value():
            assert (ok, text) == (False, f'Argument "value" has non-integer value for int: <{shown}>')
        elif not INT64_MIN <= number <= INT64_MAX:
            assert (ok, text) == (False, f'Argument "value" is out of range for int: <{shown}>')
        else:
            assert ok and text == str(int(number))
    elif ok:  # a string: accepted only when it holds an integral number
        assert Decimal(value.strip()) == int(text)


def check_one_bad_parameter(outcome: ToolOutcome, parameter: str, value: Any) -> None:
    check_structured(outcome, "bad_mixed", {OutcomeKind.SUCCESS, OutcomeKind.ARGUMENTS_ERROR})
    if outcome.is_error:  # the error names the parameter that was replaced, never another one
        assert re.match(rf'(Argument|Required parameter) "{parameter}([.\[]|")', outcome.text), outcome.text
    elif value is None:
        assert parameter == "opt" and json.loads(outcome.text)["opt"] == 5  # its default


def check_unknown(outcome: ToolOutcome, name: str) -> None:
    check_structured(outcome, name, {OutcomeKind.EXECUTION_ERROR})
    assert outcome.text == f"Unknown tool '{name}'"
    assert outcome.error_type == "UnknownToolError"


# ---- run_tool only --------------------------------------------------------------------------------


def _run(tool: str, arguments: str) -> ToolOutcome:
    definition = REGISTRY.get(tool)
    assert definition is not None
    return run_tool(definition, ToolExecutionRequest("call-1", tool, arguments))


@MANY
@given(tool=st.sampled_from(FUZZED), text=garbage_text)
def test_garbage_arguments_give_a_clear_arguments_error(tool: str, text: str) -> None:
    check_garbage(_run(tool, text), tool, text)


@MANY
@given(case=truncated_json())
def test_truncated_json_is_an_arguments_error_naming_the_tool(case: tuple[str, str]) -> None:
    tool, text = case
    check_truncated(_run(tool, text), tool, text)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=deeply_nested(), tool=st.sampled_from(FUZZED))
def test_deep_nesting_is_refused_without_recursion_errors(text: str, tool: str) -> None:
    check_nested(_run(tool, text), tool)


def test_ten_thousand_open_brackets() -> None:
    assert (
        _run("bad_int", "[" * 10_000).text == 'Arguments of tool "bad_int" are nested deeper than 64 levels'
    )


@MANY
@given(case=wrong_types())
def test_each_parameter_type_coerces_or_refuses_as_specified(case: tuple[str, Any]) -> None:
    tool, value = case
    check_wrong_type(_run(tool, json.dumps({"value": value})), tool, value)


@MANY
@given(case=one_bad_parameter())
def test_an_error_names_the_parameter_that_is_wrong(case: tuple[str, dict[str, Any]]) -> None:
    parameter, arguments = case
    check_one_bad_parameter(_run("bad_mixed", json.dumps(arguments)), parameter, arguments[parameter])


@MANY
@given(tool=st.sampled_from(FUZZED), data=st.data())
def test_valid_arguments_succeed(tool: str, data: st.DataObject) -> None:
    arguments = data.draw(valid_arguments(tool))
    outcome = _run(tool, json.dumps(arguments))
    check_structured(outcome, tool, {OutcomeKind.SUCCESS})


@pytest.mark.parametrize(
    ("tool", "text"),
    [
        ("bad_object", "Result of tool 'bad_object': a value of type object is not JSON-serializable"),
        ("bad_nan", "Result of tool 'bad_nan': nan is not a JSON number"),
        ("bad_tuple_key", "Result of tool 'bad_tuple_key': dict key (1, 2) is not a string"),
    ],
)
def test_a_result_that_cannot_be_serialized_is_an_execution_error(tool: str, text: str) -> None:
    outcome = _run(tool, "")
    check_structured(outcome, tool, {OutcomeKind.EXECUTION_ERROR})
    assert (outcome.text, outcome.error_type) == (text, "ToolResultError")


# ---- product bugs, pinned ---------------------------------------------------------------------------

_BOMB_SCRIPT = """
import json, sys
import tests.integration.badinput_tools as bad
from workers import ToolExecutionRequest
from workers.tools.registry import ToolRegistry
from workers.calls.runner import run_tool
tool, arguments = sys.argv[1], sys.argv[2]
definition = ToolRegistry([bad]).get(tool)
print(json.dumps(run_tool(definition, ToolExecutionRequest("1", tool, arguments)).to_json()))
"""


def test_an_exponent_bomb_is_refused_quickly() -> None:
    # given: exponent bombs in an int parameter, as a number and as a string
    cases = {
        "number": ('{"value": 1e999999999}', 'Argument "value" is out of range for int: <1e999999999>'),
        "string": ('{"value": "1e999999999"}', 'Argument "value" is out of range for int: <1e999999999>'),
    }
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # when: each runs in a child process (the conversion cannot be interrupted in this one), at once
    children = {
        name: subprocess.Popen(
            [sys.executable, "-c", _BOMB_SCRIPT, "bad_int", arguments],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (arguments, _) in cases.items()
    }
    deadline = time.monotonic() + 5.0
    problems = []
    for name, child in children.items():
        try:
            out, err = child.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            problems.append(f"{name}: still converting after 5 s")
            continue
        outcome = json.loads(out) if child.returncode == 0 else {"kind": "crash", "text": err[-300:]}
        if (outcome["kind"], outcome["text"]) != ("arguments_error", cases[name][1]):
            problems.append(f"{name}: {outcome['kind']} {outcome['text']!r}")
    # then: each is a quick arguments error
    assert not problems, "; ".join(problems)


def test_an_exponent_beyond_memory_is_an_arguments_error() -> None:
    outcome = _run("bad_int", '{"value": 1E+999999999999999999}')
    assert (outcome.kind, outcome.text) == (
        OutcomeKind.ARGUMENTS_ERROR,
        'Argument "value" is out of range for int: <1E+999999999999999999>',
    )


def test_a_number_beyond_decimal_range_gets_a_clear_text() -> None:
    outcome = _run("bad_int", '{"value": 1e99999999999999999999}')
    check_structured(outcome, "bad_int", {OutcomeKind.ARGUMENTS_ERROR})


def test_an_exception_without_a_text_is_still_an_outcome() -> None:
    outcome = _run("bad_unprintable", "")
    check_structured(outcome, "bad_unprintable", {OutcomeKind.EXECUTION_ERROR})


def test_an_error_text_quotes_a_list_as_the_model_wrote_it() -> None:
    outcome = _run("bad_bool", '{"value": [1.5, 2]}')
    assert outcome.text == 'Argument "value" is not convertable to bool, got list: <[1.5,2]>'


@pytest.mark.parametrize("arguments", ['{"value": "\\ud800"}', '{"value": "\ud800"}'], ids=["escaped", "raw"])
def test_a_lone_surrogate_gives_an_outcome_that_crosses_the_wire(arguments: str) -> None:
    outcome = _run("bad_str", arguments)
    check_structured(outcome, "bad_str", {OutcomeKind.SUCCESS, OutcomeKind.ARGUMENTS_ERROR})
