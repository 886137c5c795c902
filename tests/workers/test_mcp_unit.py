"""MCP tools as toolfleet tools, in one process: a real `MCPServer` over the SDK's in-process transport.

Specifications (name, prefix, schema, options), filtering, always-visible tools, argument passing,
result mapping (text, images, several parts, structured content, `_meta`), errors and timeouts.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import types as mt

from tests.integration.mcp_servers import PIXEL_BASE64, build
from workers import (
    Image,
    ImageContent,
    OutcomeKind,
    SearchBehavior,
    TextContent,
    ToolExecutionRequest,
    ToolExecutionResult,
    ToolOutcome,
)
from workers.calls.retry import is_transient
from workers.calls.runner import run_tool
from workers.errors import ToolDefinitionError
from workers.mcp import McpServer, McpToolError, mcp_tools, result_value
from workers.mcp._session import McpSessions
from workers.tools import ToolDefinition, discover_tools
from workers.tools.registry import ToolRegistry


@pytest.fixture
def held() -> Iterator[McpSessions]:
    """Sessions of their own for each test, closed after it."""
    sessions = McpSessions()
    yield sessions
    sessions.close()


def _server(name: str = "calc", **options: Any) -> McpServer:
    return McpServer(name, in_process=build(name), **options)


def _by_name(definitions: list[ToolDefinition]) -> dict[str, ToolDefinition]:
    return {d.name: d for d in definitions}


def _run(definition: ToolDefinition, arguments: dict[str, Any] | str = "{}") -> ToolOutcome:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return run_tool(definition, ToolExecutionRequest("call-1", definition.name, text))


# -- specifications --------------------------------------------------------------------------------


def test_each_tool_of_the_server_becomes_a_definition_with_its_schema(held: McpSessions) -> None:
    # given: a server with eight tools, declared for pool "maths" with a timeout
    server = _server(pool="maths", timeout_s=12)

    # when: its tools are listed
    tools = _by_name(mcp_tools([server], using=held))

    # then: every tool is there, its schema exactly as the server lists it
    assert sorted(tools) == [
        "add",
        "describe_image",
        "drop_everything",
        "fail",
        "header",
        "sleep",
        "tag",
        "whoami",
    ]
    add = tools["add"]
    assert add.specification.description == "Adds two integers."
    assert add.specification.parameters == {
        "type": "object",
        "properties": {"a": {"title": "A", "type": "integer"}, "b": {"title": "B", "type": "integer"}},
        "required": ["a", "b"],
        "title": "addArguments",
    }
    assert (add.pool, add.timeout, add.options.retries, add.raw_arguments) == ("maths", 12, 0, True)
    assert add.search_behavior is SearchBehavior.SEARCHABLE
    # and: a tool without arguments has no parameters, as a Python tool without parameters
    assert tools["whoami"].specification.parameters is None


def test_retries_are_the_tools_retries(held: McpSessions) -> None:
    tools = mcp_tools([_server(retries=2, include=["add"])], using=held)

    assert tools[0].options.retries == 2


def test_a_prefix_is_put_before_every_name_and_calls_still_reach_the_tool(held: McpSessions) -> None:
    tools = _by_name(mcp_tools([_server(prefix="calc_")], using=held))

    assert "calc_add" in tools and "add" not in tools
    assert _run(tools["calc_add"], {"a": 2, "b": 40}).text == "42"


def test_include_and_exclude_choose_the_tools_exposed(held: McpSessions) -> None:
    included = mcp_tools([_server("a", include=["add", "fail", "tag"], exclude=["tag"])], using=held)
    excluded = mcp_tools([_server("b", prefix="b_", exclude=["drop_everything"])], using=held)

    assert sorted(d.name for d in included) == ["add", "fail"]
    assert "b_drop_everything" not in {d.name for d in excluded}
    assert len(excluded) == 7


def test_always_visible_tools_are_marked_for_tool_search(held: McpSessions) -> None:
    tools = _by_name(mcp_tools([_server(prefix="c_", always_visible=["add"])], using=held))

    assert tools["c_add"].search_behavior is SearchBehavior.ALWAYS_VISIBLE
    assert tools["c_fail"].search_behavior is SearchBehavior.SEARCHABLE


@pytest.mark.parametrize("option", ["include", "always_visible"])
def test_a_name_the_server_does_not_have_is_a_definition_error(held: McpSessions, option: str) -> None:
    with pytest.raises(ToolDefinitionError, match=r"names tools the server does not have: ad\b"):
        mcp_tools([_server(**{option: ["ad"]})], using=held)


def test_two_servers_with_the_same_tool_names_need_a_prefix(held: McpSessions) -> None:
    with pytest.raises(ToolDefinitionError, match="'add' of MCP server 'two' clashes with the one of 'one'"):
        mcp_tools([_server("one"), _server("two")], using=held)

    both = mcp_tools([_server("three"), _server("four", prefix="four_")], using=held)
    assert len(both) == 16


def test_two_different_servers_cannot_share_a_name(held: McpSessions) -> None:
    with pytest.raises(ToolDefinitionError, match="Two different MCP servers are named 'calc'"):
        mcp_tools([_server("calc"), _server("calc", prefix="other_")], using=held)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "exactly one of command=, url= or in_process="),
        ({"command": "x", "url": "http://h/mcp"}, "exactly one of"),
        ({"command": "x", "pool": "bad pool"}, "pool must be"),
        ({"command": "x", "timeout_s": 0}, "timeout_s must be positive"),
        ({"command": "x", "retries": -1}, "retries must be 0 or more"),
        ({"command": "x", "include": "add"}, "lists of strings"),
        ({"command": "x", "always_visible": "add"}, "list of tool names"),
    ],
)
def test_a_declaration_that_cannot_work_is_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=message):
        McpServer("s", **options)


def test_a_server_that_cannot_be_reached_is_a_definition_error_after_its_timeout(held: McpSessions) -> None:
    server = McpServer("nowhere", command="/nonexistent/mcp-server", timeout_s=1.0)

    with pytest.raises(ToolDefinitionError, match="Cannot list the tools of MCP server 'nowhere'"):
        mcp_tools([server], using=held)


def test_a_module_exposing_definitions_serves_them(held: McpSessions) -> None:
    # given: a module with a list of MCP tool definitions (as a worker's tools module has)
    module = types.ModuleType("mcp_pool")
    module.tools = mcp_tools([_server(include=["add", "fail"])], using=held)  # type: ignore[attr-defined]

    # then: module discovery and a registry find them
    assert sorted(d.name for d in discover_tools(module)) == ["add", "fail"]
    assert sorted(d.name for d in ToolRegistry([module])) == ["add", "fail"]


# -- calls and results ----------------------------------------------------------------------------


@pytest.fixture
def calc(held: McpSessions) -> dict[str, ToolDefinition]:
    return _by_name(mcp_tools([_server(meta_as_attributes=True)], using=held))


def test_a_text_result_is_the_text_and_structured_content_the_result_object(
    calc: dict[str, ToolDefinition],
) -> None:
    outcome = _run(calc["add"], {"a": 1, "b": 2})

    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "3"
    assert outcome.result_object == {"result": 3}


def test_the_arguments_reach_the_server_as_the_model_wrote_them(calc: dict[str, ToolDefinition]) -> None:
    # float-looking integers, repaired JSON (a trailing comma): the server sees plain JSON values
    assert _run(calc["add"], '{"a": 20, "b": 22,}').text == "42"
    assert _run(calc["sleep"], {"seconds": 0.01}).text == "slept 0.01"


def test_a_null_for_an_optional_argument_is_left_out(calc: dict[str, ToolDefinition]) -> None:
    # strict tool schemas make optional properties nullable: null means "not given"
    outcome = _run(calc["fail"], {"reason": None})

    assert outcome.message_for_llm == "Error executing tool fail: calc refused: no reason"


def test_an_image_result_is_carried_over_with_its_text(calc: dict[str, ToolDefinition]) -> None:
    outcome = _run(calc["describe_image"])

    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.contents == [
        ImageContent(Image(base64_data=PIXEL_BASE64, mime_type="image/png")),
        TextContent("a single red pixel"),
    ]
    assert outcome.text == "a single red pixel"


def test_meta_becomes_the_result_attributes_when_asked_for(
    calc: dict[str, ToolDefinition], held: McpSessions
) -> None:
    with_meta = _run(calc["tag"], {"label": "urgent"})
    without = _run(_by_name(mcp_tools([_server("plain", prefix="p_")], using=held))["p_tag"], {"label": "x"})

    assert with_meta.text == "tagged urgent"
    # the SDK's own keys (io.modelcontextprotocol/...) are left out
    assert with_meta.attributes == {"label": "urgent", "server": "calc"}
    assert without.attributes == {}


def test_an_error_result_is_an_execution_error_the_model_reads(calc: dict[str, ToolDefinition]) -> None:
    outcome = _run(calc["fail"], {"reason": "out of paper"})

    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.error_type == "McpToolError"
    assert outcome.message_for_llm == "Error executing tool fail: calc refused: out of paper"


def test_arguments_the_server_rejects_are_an_error_the_model_reads(calc: dict[str, ToolDefinition]) -> None:
    outcome = _run(calc["add"], {"a": "one", "b": 2})

    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.message_for_llm is not None
    assert "validation error" in outcome.message_for_llm and "addArguments" in outcome.message_for_llm


def test_a_call_longer_than_the_server_timeout_is_a_transient_timeout(held: McpSessions) -> None:
    sleep = _by_name(mcp_tools([_server(timeout_s=0.5, include=["sleep"])], using=held))["sleep"]

    outcome = _run(sleep, {"seconds": 3})

    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.error_type == "McpTimeoutError"
    assert "did not answer within 0.5 s" in outcome.text
    assert is_transient(outcome, sleep)
    # and: the session still serves the next call
    assert _run(sleep, {"seconds": 0}).text == "slept 0.0"


# -- result mapping, block by block ---------------------------------------------------------------


def _result(*content: Any, **fields: Any) -> mt.CallToolResult:
    return mt.CallToolResult(content=list(content), **fields)


def test_several_text_parts_are_a_list_of_contents() -> None:
    value = result_value(_result(mt.TextContent(text="one"), mt.TextContent(text="two")))

    assert value == ToolExecutionResult(contents=[TextContent("one"), TextContent("two")])


def test_an_empty_result_is_empty_text() -> None:
    assert result_value(_result()) == ToolExecutionResult(result_text="")


def test_structured_content_without_text_is_the_result_object() -> None:
    value = result_value(_result(structured_content={"rows": [1, 2]}))

    assert value == ToolExecutionResult(result_object={"rows": [1, 2]})


def test_resources_and_audio_are_described_in_text() -> None:
    value = result_value(
        _result(
            mt.EmbeddedResource(resource=mt.TextResourceContents(uri="file:///a.txt", text="inside a")),
            mt.EmbeddedResource(
                resource=mt.BlobResourceContents(uri="file:///p.png", mime_type="image/png", blob="AAAA")
            ),
            mt.EmbeddedResource(resource=mt.BlobResourceContents(uri="file:///x.bin", blob="AAAA")),
            mt.ResourceLink(uri="file:///b.txt", name="b"),
            mt.AudioContent(data="AAAA", mime_type="audio/wav"),
        )
    )

    assert isinstance(value, ToolExecutionResult)
    assert value.contents == [
        TextContent("inside a"),
        ImageContent(Image(base64_data="AAAA", mime_type="image/png")),
        TextContent('{"resource": "file:///x.bin"}'),
        TextContent('{"resource_link": "file:///b.txt", "name": "b"}'),
        TextContent('{"audio": "audio/wav", "base64_characters": 4}'),
    ]


def test_an_error_result_without_text_still_fails_with_a_message() -> None:
    with pytest.raises(McpToolError, match="reported an error without a message"):
        result_value(_result(is_error=True))
