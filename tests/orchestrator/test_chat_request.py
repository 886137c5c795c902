"""A chat completion's request as the service reads it: every malformed one is a 400 naming what is
wrong, never an error of the service (`orchestrator/server/openai_wire.py`)."""

from __future__ import annotations

import json

import pytest

from orchestrator.errors import ApiError
from orchestrator.server.openai_wire import parse_request

USER = [{"role": "user", "content": "hi"}]


def _refused(body: bytes) -> ApiError:
    with pytest.raises(ApiError) as refused:
        parse_request(body, max_messages=100)
    assert refused.value.status == 400
    return refused.value


@pytest.mark.parametrize("name", ["tools", "functions", "tool_choice", "function_call"])
@pytest.mark.parametrize("value", [[], [{"type": "function"}], {}, "auto"])
def test_client_side_tools_are_refused_whatever_their_value_even_empty(name: str, value: object) -> None:
    refused = _refused(json.dumps({"model": "a", "messages": USER, name: value}).encode())
    assert refused.param == name


def test_a_null_tools_field_is_as_if_absent() -> None:
    request = parse_request(json.dumps({"model": "a", "messages": USER, "tools": None}).encode(), 100)
    assert request.messages == USER


def test_content_nested_deeper_than_the_parser_goes_is_a_400() -> None:
    depth = 200_000
    body = '{"model": "a", "messages": [{"role": "user", "content": ' + "[" * depth + "]" * depth + "}]}"
    assert "nested too deeply" in str(_refused(body.encode()))
