"""`loads_finite` reads JSON as the standard has it: `NaN`, the infinities and numbers too large for a
float are refused, naming where the first one is; everything else reads as `json.loads` reads it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from orchestrator import AiService, Journal, ScriptedChatModel
from orchestrator.errors import NonFiniteNumberError
from orchestrator.finite_json import dumps_finite, loads_finite


@pytest.mark.parametrize(
    ("text", "location", "written"),
    [
        ('{"parameters": {"limit": NaN}}', "parameters.limit", "NaN"),
        ('{"a": [1, {"b": Infinity}]}', "a.1.b", "Infinity"),
        ("[-Infinity]", "0", "-Infinity"),
        ('{"x": 1e400}', "x", "1e400"),
        ('{"x": -1.5E+309}', "x", "-1.5E+309"),
        ('{"x": ' + "9" * 400 + ".0}", "x", "9" * 400 + ".0"),
        ("NaN", None, "NaN"),
        ('{"first": 1, "then": [NaN, Infinity]}', "then.0", "NaN"),
    ],
    ids=[
        "nan",
        "nested-infinity",
        "minus-infinity",
        "exponent",
        "negative",
        "long-mantissa",
        "whole",
        "first",
    ],
)
def test_a_non_finite_number_is_refused_naming_where(text: str, location: str | None, written: str) -> None:
    # when
    with pytest.raises(NonFiniteNumberError) as raised:
        loads_finite(text)
    # then: the error says where, and is a ValueError as json.loads's own errors are
    assert (raised.value.location, raised.value.written) == (location, written)
    assert isinstance(raised.value, ValueError)
    assert str(raised.value).startswith(f"{location}: {written} " if location else f"{written} ")


def test_finite_numbers_and_the_words_in_strings_read_as_json_loads_reads_them() -> None:
    text = '{"n": 1.7976931348623157e308, "tiny": 1e-400, "big": ' + "9" * 400 + ', "w": ["NaN", "Infinity"]}'

    assert loads_finite(text) == json.loads(text)
    assert loads_finite(b'{"a": 1}') == {"a": 1}


def test_one_under_a_key_given_twice_is_still_refused() -> None:
    # the later value wins, as in json.loads, but the text held a NaN all the same
    with pytest.raises(NonFiniteNumberError) as raised:
        loads_finite('{"x": NaN, "x": 1}')

    assert raised.value.location is None and raised.value.written == "NaN"


def test_a_deeply_nested_number_is_named_by_its_whole_path() -> None:
    depth = 900  # within what json.loads reads
    with pytest.raises(NonFiniteNumberError) as raised:
        loads_finite("[" * depth + "NaN" + "]" * depth)

    assert raised.value.location == ".".join(["0"] * depth)


def test_text_that_is_not_json_raises_as_json_loads_does() -> None:
    with pytest.raises(json.JSONDecodeError):
        loads_finite("{not json")


def test_an_invocation_whose_parameters_hold_nan_is_refused_and_nothing_is_journaled(tmp_path: Path) -> None:
    # given: a journaled service, called from Python with a NaN among its parameters
    journal = Journal(f"sqlite:///{tmp_path / 'journal.db'}")
    service = AiService(chat_model=ScriptedChatModel(lambda _: "hello"), journal=journal, tools=[])

    # when/then: the start is refused, saying why, and the journal holds no invocation
    with pytest.raises(NonFiniteNumberError, match="parameters hold NaN or an infinity"):
        service.chat("hi", parameters={"limit": float("nan")})
    assert journal.invocations() == []
    assert service.chat("hi", parameters={"limit": 1.5}).content == "hello"
    assert len(journal.invocations()) == 1


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [1, {"x": -math.inf}]])
def test_dumps_finite_refuses_what_json_has_no_room_for(value: object) -> None:
    with pytest.raises(NonFiniteNumberError, match=r"^the report hold NaN or an infinity"):
        dumps_finite(value, "the report")
    assert dumps_finite({"x": 1.5, "y": [None, "NaN"]}, "the report") == '{"x": 1.5, "y": [null, "NaN"]}'
