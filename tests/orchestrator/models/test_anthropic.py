"""`AnthropicChatModel` against recorded Messages API payloads, replayed through `httpx.MockTransport`."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from orchestrator.errors import ModelInvalidRequestError, UnsupportedContentError
from orchestrator.messages import AiMessage, SystemMessage, ToolExecutionResultMessage, UserMessage
from orchestrator.models.base import ChatResponse, FinishReason, TokenUsage, ToolChoice
from tests.orchestrator.models._anthropic import CAMERA, KEY, MODEL, PNG, WEATHER, ask, make_model
from tests.orchestrator.models._harness import Recorder, answer, chat, recorded_text
from workers.contents import Image, ImageContent, TextContent
from workers.protocol import ToolExecutionRequest
from workers.tools.specification import ToolSpecification

# --- requests --------------------------------------------------------------------------------------


def test_request_is_sent_in_the_messages_api_format() -> None:
    # given
    server = Recorder(answer("anthropic_final_response.json"))
    model = make_model(server, base_url="https://proxy.example/anthropic/", max_tokens=1024, temperature=0.2)
    request = ask(
        SystemMessage("You are terse."),
        SystemMessage("Answer in English."),
        UserMessage.of(
            "What do these show?",
            Image(base64_data=PNG, mime_type="image/png"),
            Image(url="https://example.com/bridge.jpg"),
        ),
        tool_specifications=[WEATHER, CAMERA],
        tool_choice=ToolChoice.REQUIRED,
    )

    # when
    chat(model, request)

    # then
    sent = server.requests[0]
    assert sent.method == "POST"
    assert str(sent.url) == "https://proxy.example/anthropic/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    body = server.body()
    assert list(body) == ["model", "max_tokens", "system", "messages", "temperature", "tools", "tool_choice"]
    assert body["model"] == MODEL
    assert body["max_tokens"] == 1024
    assert body["temperature"] == 0.2
    assert body["system"] == "You are terse.\n\nAnswer in English."
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What do these show?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/bridge.jpg"}},
            ],
        }
    ]
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "input_schema": WEATHER.parameters,
        },
        {
            "name": "camera_snapshot",
            "description": "Take a snapshot of the traffic camera",
            "input_schema": {"type": "object", "properties": {}},
        },
    ]
    assert body["tool_choice"] == {"type": "any"}


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        (None, None, None),
        (None, True, None),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        (ToolChoice.AUTO, None, {"type": "auto"}),
        (ToolChoice.AUTO, False, {"type": "auto", "disable_parallel_tool_use": True}),
        (ToolChoice.REQUIRED, None, {"type": "any"}),
        (ToolChoice.REQUIRED, False, {"type": "any", "disable_parallel_tool_use": True}),
        (ToolChoice.NONE, None, {"type": "none"}),
        (ToolChoice.NONE, False, {"type": "none"}),
    ],
)
def test_tool_choice_and_parallel_tool_calls(
    choice: ToolChoice | None, parallel: bool | None, expected: dict[str, Any] | None
) -> None:
    server = Recorder(answer("anthropic_final_response.json"))
    model = make_model(server, parallel_tool_calls=parallel)

    chat(model, ask(UserMessage("Hi"), tool_specifications=[WEATHER], tool_choice=choice))

    assert server.body().get("tool_choice") == expected


def test_without_tools_no_tool_fields_are_sent_and_required_fails_fast() -> None:
    server = Recorder(answer("anthropic_final_response.json"))
    model = make_model(server, parallel_tool_calls=False)

    chat(model, ask(UserMessage("Hi"), tool_choice=ToolChoice.AUTO))
    assert "tools" not in server.body() and "tool_choice" not in server.body()

    with pytest.raises(ModelInvalidRequestError, match="REQUIRED needs at least one tool"):
        chat(model, ask(UserMessage("Hi"), tool_choice=ToolChoice.REQUIRED))
    assert len(server.requests) == 1


def test_same_role_messages_are_merged_and_empty_ai_messages_dropped() -> None:
    server = Recorder(answer("anthropic_final_response.json"))
    request = ask(
        UserMessage("First"),
        UserMessage(contents=(TextContent("Second"), TextContent(""))),
        AiMessage(),
        UserMessage("Third"),
        AiMessage("Hello"),
        AiMessage("again"),
        UserMessage("Fourth"),
    )

    chat(make_model(server), request)

    assert server.body()["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "First"},
                {"type": "text", "text": "Second"},
                {"type": "text", "text": "Third"},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "again"}],
        },
        {"role": "user", "content": [{"type": "text", "text": "Fourth"}]},
    ]


@pytest.mark.parametrize(
    ("arguments", "expected_input"),
    [
        ('{"location": "Paris"}', {"location": "Paris"}),
        ("", {}),
        ("  ", {}),
        ("{}", {}),
        ('{"location": "Par', {"_raw_arguments": '{"location": "Par'}),
        ("[1, 2]", {"_raw_arguments": "[1, 2]"}),
    ],
)
def test_tool_call_arguments_in_history_become_the_input_object(
    arguments: str, expected_input: dict[str, Any]
) -> None:
    server = Recorder(answer("anthropic_final_response.json"))
    call = ToolExecutionRequest(id="toolu_01", name="get_weather", arguments=arguments)
    request = ask(
        UserMessage("Weather?"),
        AiMessage(tool_execution_requests=[call]),
        ToolExecutionResultMessage(id="toolu_01", tool_name="get_weather", text="sunny"),
        tool_specifications=[WEATHER],
    )

    chat(make_model(server), request)

    assistant = server.body()["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": expected_input}],
    }


def test_generation_parameters_are_merged_but_built_fields_are_protected() -> None:
    server = Recorder(answer("anthropic_final_response.json"))
    model = make_model(server)

    chat(model, ask(UserMessage("Hi"), parameters={"top_k": 5, "stop_sequences": ["END"], "max_tokens": 64}))
    body = server.body()
    assert (body["top_k"], body["stop_sequences"], body["max_tokens"]) == (5, ["END"], 64)

    with pytest.raises(ModelInvalidRequestError, match=r"cannot set \['messages', 'stream'\]"):
        chat(model, ask(UserMessage("Hi"), parameters={"stream": True, "messages": []}))


def test_images_as_data_urls_are_sent_as_base64_and_unsupported_types_fail() -> None:
    server = Recorder(answer("anthropic_final_response.json"))
    model = make_model(server)

    chat(model, ask(UserMessage.of("Look", Image(url=f"data:image/png;base64,{PNG}"))))
    image = server.body()["messages"][0]["content"][1]
    assert image == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}

    with pytest.raises(UnsupportedContentError, match="image/bmp"):
        chat(model, ask(UserMessage.of("Look", Image(base64_data="Qk0=", mime_type="image/bmp"))))


def test_tool_calls_without_ids_fail_with_a_clear_error() -> None:
    server = Recorder()
    request = ask(
        UserMessage("Weather?"),
        AiMessage(tool_execution_requests=[ToolExecutionRequest(id=None, name="get_weather")]),
    )

    with pytest.raises(ModelInvalidRequestError, match="needs an id for the tool call 'get_weather'"):
        chat(make_model(server), request)
    assert server.requests == []


# --- a full tool round trip ------------------------------------------------------------------------


def test_tool_round_trip_with_parallel_calls_an_error_and_an_image_result() -> None:
    # given: the model asks for two tools at once, then answers
    server = Recorder(answer("anthropic_tool_use_response.json"), answer("anthropic_final_response.json"))
    model = make_model(server)
    user = UserMessage("What's the weather in SF, and how is the traffic?")
    specs = [WEATHER, CAMERA]

    # when: the first call
    first = chat(model, ask(SystemMessage("Be brief."), user, tool_specifications=specs))

    # then: both tool calls, in order
    weather_call = ToolExecutionRequest(
        id="toolu_01A09q90qw90lq917835lq9",
        name="get_weather",
        arguments='{"location":"San Francisco, CA","unit":"celsius"}',
    )
    camera_call = ToolExecutionRequest(
        id="toolu_01BpRcL6yXn2hZ4sQwKt8vNm", name="camera_snapshot", arguments="{}"
    )
    assert first == ChatResponse(
        ai_message=AiMessage(
            text="I'll check the weather and look at the traffic camera.",
            tool_execution_requests=[weather_call, camera_call],
        ),
        finish_reason=FinishReason.TOOL_EXECUTION,
        token_usage=TokenUsage(512, 97),
        model_name=MODEL,
        id="msg_01Aq9w938a90dw8qJ4TmQpLx",
    )

    # when: the results go back, one failed, one with an image
    results = [
        ToolExecutionResultMessage(
            id=weather_call.id, tool_name="get_weather", text="Weather service unavailable", is_error=True
        ),
        ToolExecutionResultMessage(
            id=camera_call.id,
            tool_name="camera_snapshot",
            text="Bridge camera, 08:40",
            contents=(
                TextContent("Bridge camera, 08:40"),
                ImageContent(Image(base64_data=PNG, mime_type="image/png")),
            ),
        ),
    ]
    final = chat(
        model, ask(SystemMessage("Be brief."), user, first.ai_message, *results, tool_specifications=specs)
    )

    # then: one assistant turn with the calls, then ONE user turn with both results
    assert server.body()["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "What's the weather in SF, and how is the traffic?"}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll check the weather and look at the traffic camera."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A09q90qw90lq917835lq9",
                    "name": "get_weather",
                    "input": {"location": "San Francisco, CA", "unit": "celsius"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_01BpRcL6yXn2hZ4sQwKt8vNm",
                    "name": "camera_snapshot",
                    "input": {},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                    "content": "Weather service unavailable",
                    "is_error": True,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01BpRcL6yXn2hZ4sQwKt8vNm",
                    "content": [
                        {"type": "text", "text": "Bridge camera, 08:40"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                        },
                    ],
                },
            ],
        },
    ]
    assert server.body()["system"] == "Be brief."
    assert final.ai_message == AiMessage(
        "The weather service is down right now, but the camera shows light traffic on the bridge."
    )
    assert final.finish_reason is FinishReason.STOP
    assert final.token_usage == TokenUsage(1024, 31)


def test_text_only_tool_results_are_sent_as_strings() -> None:
    server = Recorder(answer("anthropic_final_response.json"))
    call = ToolExecutionRequest(id="toolu_01", name="get_weather", arguments="{}")
    request = ask(
        UserMessage("Weather?"),
        AiMessage(tool_execution_requests=[call]),
        ToolExecutionResultMessage(
            id="toolu_01", tool_name="get_weather", text="sunny", contents=(TextContent("sunny"),)
        ),
    )

    chat(make_model(server), request)

    assert server.body()["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "sunny"}],
    }


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", FinishReason.STOP),
        ("stop_sequence", FinishReason.STOP),
        ("max_tokens", FinishReason.LENGTH),
        ("tool_use", FinishReason.TOOL_EXECUTION),
        ("refusal", FinishReason.CONTENT_FILTER),
        ("pause_turn", FinishReason.OTHER),
    ],
)
def test_stop_reasons_map_to_finish_reasons(stop_reason: str, finish: FinishReason) -> None:
    recorded = json.loads(recorded_text("anthropic_final_response.json"))
    recorded["stop_reason"] = stop_reason
    server = Recorder(httpx.Response(200, json=recorded))

    response = chat(make_model(server), ask(UserMessage("Hi")))

    assert response.finish_reason is finish


def test_cached_input_tokens_count_as_input() -> None:
    recorded = json.loads(recorded_text("anthropic_final_response.json"))
    recorded["usage"].update(cache_creation_input_tokens=100, cache_read_input_tokens=2000)
    server = Recorder(httpx.Response(200, json=recorded))

    response = chat(make_model(server), ask(UserMessage("Hi")))

    assert response.token_usage == TokenUsage(input_tokens=3124, output_tokens=31)


# --- aliases ---------------------------------------------------------------------------------------


def test_tool_names_anthropic_rejects_are_aliased_and_mapped_back() -> None:
    # given: a tool named in Chinese; the recorded answer calls whatever name the request carried
    def answer_with_the_sent_name(request: httpx.Request) -> httpx.Response:
        sent_name = json.loads(request.content)["tools"][0]["name"]
        return httpx.Response(
            200,
            content=recorded_text("anthropic_alias_response.json").replace("__SENT_TOOL_NAME__", sent_name),
        )

    server = Recorder(answer_with_the_sent_name, answer("anthropic_final_response.json"))
    model = make_model(server)
    weather = ToolSpecification(name="获取天气", description="查询城市天气", parameters=None)

    # when
    response = chat(model, ask(UserMessage("北京天气怎么样?"), tool_specifications=[weather]))

    # then: a safe alias went out, the original name came back
    alias = server.body()["tools"][0]["name"]
    assert alias != "获取天气"
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", alias)
    assert response.ai_message.tool_execution_requests == [
        ToolExecutionRequest(
            id="toolu_01Xc5vBn7MqL2kJh9GfDs4Ap", name="获取天气", arguments='{"城市":"北京"}'
        )
    ]

    # and: the history carries the same alias
    call = response.ai_message.tool_execution_requests[0]
    result = ToolExecutionResultMessage(id=call.id, tool_name="获取天气", text="晴")
    chat(
        model, ask(UserMessage("北京天气怎么样?"), response.ai_message, result, tool_specifications=[weather])
    )
    assert server.body()["messages"][1]["content"][0]["name"] == alias
