"""`AnthropicChatModel` against recorded Messages API payloads, replayed through `httpx.MockTransport`."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.errors import (
    ModelAuthenticationError,
    ModelInvalidRequestError,
    ModelResponseError,
    ModelServerError,
    UnsupportedContentError,
)
from orchestrator.messages import (
    AiMessage,
    ChatMessage,
    SystemMessage,
    ToolExecutionResultMessage,
    UserMessage,
)
from orchestrator.models._http import RetryPolicy
from orchestrator.models.anthropic import AnthropicChatModel
from orchestrator.models.base import (
    ChatEvent,
    ChatRequest,
    ChatResponse,
    CompleteResponse,
    CompleteToolCall,
    FinishReason,
    PartialResponse,
    PartialToolCall,
    TokenUsage,
    ToolChoice,
)
from workers.contents import Image, ImageContent, TextContent
from workers.protocol import ToolExecutionRequest
from workers.tools.specification import ToolSpecification

FIXTURES = Path(__file__).parent / "fixtures"
KEY = "sk-ant-api03-SECRET-do-not-leak-0123456789"
MODEL = "claude-sonnet-4-20250514"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

WEATHER = ToolSpecification(
    name="get_weather",
    description="Get the current weather in a given location",
    parameters={
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["location"],
    },
)
CAMERA = ToolSpecification(name="camera_snapshot", description="Take a snapshot of the traffic camera")

Responder = httpx.Response | Callable[[httpx.Request], httpx.Response]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def json_response(name: str, status: int = 200) -> httpx.Response:
    return httpx.Response(
        status, content=fixture(name).encode(), headers={"content-type": "application/json"}
    )


def sse_response(name: str) -> httpx.Response:
    return httpx.Response(200, content=fixture(name).encode(), headers={"content-type": "text/event-stream"})


class Server:
    """Answers each request with the next queued response and keeps every request."""

    def __init__(self, *responses: Responder) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.responses.pop(0)
        return answer(request) if callable(answer) else answer

    def body(self, index: int = -1) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.requests[index].content)
        return parsed


def make_model(server: Server, **options: Any) -> AnthropicChatModel:
    options.setdefault("retry", RetryPolicy(backoff_s=0.001))
    return AnthropicChatModel(MODEL, api_key=KEY, transport=httpx.MockTransport(server), **options)


def chat(model: AnthropicChatModel, request: ChatRequest) -> ChatResponse:
    async def run() -> ChatResponse:
        try:
            return await model.chat(request)
        finally:
            await model.aclose()

    return asyncio.run(run())


def stream(model: AnthropicChatModel, request: ChatRequest, into: list[ChatEvent]) -> list[ChatEvent]:
    async def run() -> None:
        try:
            async for event in model.stream(request):
                into.append(event)
        finally:
            await model.aclose()

    asyncio.run(run())
    return into


def ask(*messages: ChatMessage, **options: Any) -> ChatRequest:
    return ChatRequest(messages=list(messages), **options)


# --- requests --------------------------------------------------------------------------------------


def test_request_is_sent_in_the_messages_api_format() -> None:
    # given
    server = Server(json_response("anthropic_final_response.json"))
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
    server = Server(json_response("anthropic_final_response.json"))
    model = make_model(server, parallel_tool_calls=parallel)

    chat(model, ask(UserMessage("Hi"), tool_specifications=[WEATHER], tool_choice=choice))

    assert server.body().get("tool_choice") == expected


def test_without_tools_no_tool_fields_are_sent_and_required_fails_fast() -> None:
    server = Server(json_response("anthropic_final_response.json"))
    model = make_model(server, parallel_tool_calls=False)

    chat(model, ask(UserMessage("Hi"), tool_choice=ToolChoice.AUTO))
    assert "tools" not in server.body() and "tool_choice" not in server.body()

    with pytest.raises(ModelInvalidRequestError, match="REQUIRED needs at least one tool"):
        chat(model, ask(UserMessage("Hi"), tool_choice=ToolChoice.REQUIRED))
    assert len(server.requests) == 1


def test_same_role_messages_are_merged_and_empty_ai_messages_dropped() -> None:
    server = Server(json_response("anthropic_final_response.json"))
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
    server = Server(json_response("anthropic_final_response.json"))
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
    server = Server(json_response("anthropic_final_response.json"))
    model = make_model(server)

    chat(model, ask(UserMessage("Hi"), parameters={"top_k": 5, "stop_sequences": ["END"], "max_tokens": 64}))
    body = server.body()
    assert (body["top_k"], body["stop_sequences"], body["max_tokens"]) == (5, ["END"], 64)

    with pytest.raises(ModelInvalidRequestError, match=r"cannot set \['messages', 'stream'\]"):
        chat(model, ask(UserMessage("Hi"), parameters={"stream": True, "messages": []}))


def test_images_as_data_urls_are_sent_as_base64_and_unsupported_types_fail() -> None:
    server = Server(json_response("anthropic_final_response.json"))
    model = make_model(server)

    chat(model, ask(UserMessage.of("Look", Image(url=f"data:image/png;base64,{PNG}"))))
    image = server.body()["messages"][0]["content"][1]
    assert image == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}

    with pytest.raises(UnsupportedContentError, match="image/bmp"):
        chat(model, ask(UserMessage.of("Look", Image(base64_data="Qk0=", mime_type="image/bmp"))))


def test_tool_calls_without_ids_fail_with_a_clear_error() -> None:
    server = Server()
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
    server = Server(
        json_response("anthropic_tool_use_response.json"), json_response("anthropic_final_response.json")
    )
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
    server = Server(json_response("anthropic_final_response.json"))
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
    recorded = json.loads(fixture("anthropic_final_response.json"))
    recorded["stop_reason"] = stop_reason
    server = Server(httpx.Response(200, json=recorded))

    response = chat(make_model(server), ask(UserMessage("Hi")))

    assert response.finish_reason is finish


def test_cached_input_tokens_count_as_input() -> None:
    recorded = json.loads(fixture("anthropic_final_response.json"))
    recorded["usage"].update(cache_creation_input_tokens=100, cache_read_input_tokens=2000)
    server = Server(httpx.Response(200, json=recorded))

    response = chat(make_model(server), ask(UserMessage("Hi")))

    assert response.token_usage == TokenUsage(input_tokens=3124, output_tokens=31)


# --- aliases ---------------------------------------------------------------------------------------


def test_tool_names_anthropic_rejects_are_aliased_and_mapped_back() -> None:
    # given: a tool named in Chinese; the recorded answer calls whatever name the request carried
    def answer(request: httpx.Request) -> httpx.Response:
        sent_name = json.loads(request.content)["tools"][0]["name"]
        return httpx.Response(
            200, content=fixture("anthropic_alias_response.json").replace("__SENT_TOOL_NAME__", sent_name)
        )

    server = Server(answer, json_response("anthropic_final_response.json"))
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


# --- streaming -------------------------------------------------------------------------------------


def test_stream_yields_text_tool_pieces_and_complete_calls_in_order() -> None:
    # given
    server = Server(sse_response("anthropic_stream_tools.txt"))
    model = make_model(server)

    # when
    events = stream(model, ask(UserMessage("Weather in SF and Paris?"), tool_specifications=[WEATHER]), [])

    # then
    assert server.body()["stream"] is True
    sf = ToolExecutionRequest(
        id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", name="get_weather", arguments='{"location":"San Francisco, CA"}'
    )
    paris = ToolExecutionRequest(
        id="toolu_01WqPz9sYk3LmN5vB7cX2dRf",
        name="get_weather",
        arguments='{"location":"Paris, France","unit":"celsius"}',
    )
    assert events == [
        PartialResponse("Let me check"),
        PartialResponse(" both cities."),
        PartialToolCall(0, sf.id, "get_weather", '{"location":'),
        PartialToolCall(0, sf.id, "get_weather", ' "San Francisco, CA"}'),
        CompleteToolCall(0, sf),
        PartialToolCall(1, paris.id, "get_weather", '{"location": "Par'),
        PartialToolCall(1, paris.id, "get_weather", 'is, France", "unit": "celsius"}'),
        CompleteToolCall(1, paris),
        CompleteResponse(
            ChatResponse(
                ai_message=AiMessage(text="Let me check both cities.", tool_execution_requests=[sf, paris]),
                finish_reason=FinishReason.TOOL_EXECUTION,
                token_usage=TokenUsage(input_tokens=472, output_tokens=89),
                model_name=MODEL,
                id="msg_014p7gG3wDgGV9EUtLvnow3U",
            )
        ),
    ]


def test_first_tool_call_is_complete_before_the_second_one_streams() -> None:
    server = Server(sse_response("anthropic_stream_tools.txt"))

    events = stream(make_model(server), ask(UserMessage("Weather?"), tool_specifications=[WEATHER]), [])

    first_complete = next(i for i, e in enumerate(events) if isinstance(e, CompleteToolCall))
    second_piece = next(i for i, e in enumerate(events) if isinstance(e, PartialToolCall) and e.index == 1)
    assert first_complete < second_piece
    assert isinstance(events[-1], CompleteResponse)


def test_stream_is_retried_before_the_first_byte() -> None:
    server = Server(
        json_response("anthropic_error_529.json", 529), sse_response("anthropic_stream_tools.txt")
    )

    events = stream(make_model(server), ask(UserMessage("Weather?"), tool_specifications=[WEATHER]), [])

    assert len(server.requests) == 2
    assert isinstance(events[-1], CompleteResponse)


def test_error_event_mid_stream_raises_with_anthropics_message() -> None:
    server = Server(sse_response("anthropic_stream_error.txt"))
    received: list[ChatEvent] = []

    with pytest.raises(ModelServerError, match=r"overloaded_error\): Overloaded") as caught:
        stream(make_model(server), ask(UserMessage("Hi")), received)

    assert caught.value.provider == "Anthropic"
    assert received == [PartialResponse("Hello")]
    assert len(server.requests) == 1


def test_stream_cut_before_message_stop_is_an_error() -> None:
    cut = fixture("anthropic_stream_tools.txt").split("event: message_delta")[0]
    server = Server(httpx.Response(200, content=cut.encode(), headers={"content-type": "text/event-stream"}))

    with pytest.raises(ModelResponseError, match="ended before message_stop"):
        stream(make_model(server), ask(UserMessage("Weather?"), tool_specifications=[WEATHER]), [])


# --- errors ----------------------------------------------------------------------------------------


def test_401_is_an_authentication_error_with_anthropics_message_and_no_retry() -> None:
    server = Server(json_response("anthropic_error_401.json", 401))

    with pytest.raises(ModelAuthenticationError, match="invalid x-api-key") as caught:
        chat(make_model(server), ask(UserMessage("Hi")))

    assert caught.value.status == 401
    assert len(server.requests) == 1


def test_529_overloaded_is_retried_then_succeeds() -> None:
    server = Server(
        json_response("anthropic_error_529.json", 529), json_response("anthropic_final_response.json")
    )

    response = chat(make_model(server), ask(UserMessage("Hi")))

    assert len(server.requests) == 2
    assert response.finish_reason is FinishReason.STOP


def test_500_fails_once_the_retries_are_spent() -> None:
    server = Server(*[json_response("anthropic_error_500.json", 500) for _ in range(3)])
    model = make_model(server, retry=RetryPolicy(max_retries=2, backoff_s=0.001))

    with pytest.raises(ModelServerError, match="Internal server error") as caught:
        chat(model, ask(UserMessage("Hi")))

    assert caught.value.status == 500
    assert len(server.requests) == 3


# --- the key and the client ------------------------------------------------------------------------


def test_api_key_never_leaks(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server = Server(
        json_response("anthropic_error_529.json", 529),
        json_response("anthropic_final_response.json"),
        json_response("anthropic_error_401.json", 401),
        sse_response("anthropic_stream_error.txt"),
    )
    model = make_model(server)
    errors: list[Exception] = []

    chat(model, ask(UserMessage("Hi")))
    for attempt in (
        lambda: chat(model, ask(UserMessage("Hi"))),
        lambda: stream(model, ask(UserMessage("Hi")), []),
    ):
        try:
            attempt()
        except Exception as exc:
            errors.append(exc)

    assert len(errors) == 2
    assert "retry 1/3" in caplog.text
    exposed = [repr(model), str(model), str(vars(model)), caplog.text, *(f"{e!s} {e!r}" for e in errors)]
    assert not [text for text in exposed if KEY in text]


def test_key_comes_from_the_environment_or_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ModelAuthenticationError, match="ANTHROPIC_API_KEY"):
        AnthropicChatModel(MODEL)

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    server = Server(json_response("anthropic_final_response.json"))
    chat(AnthropicChatModel(MODEL, transport=httpx.MockTransport(server)), ask(UserMessage("Hi")))
    assert server.requests[0].headers["x-api-key"] == "sk-ant-from-env"


def test_one_client_per_event_loop_closed_by_aclose() -> None:
    model = make_model(Server())

    async def client_of_this_loop() -> httpx.AsyncClient:
        client = model._client()
        assert model._client() is client
        await model.aclose()
        return client

    first = asyncio.run(client_of_this_loop())
    second = asyncio.run(client_of_this_loop())

    assert first is not second
    assert first.is_closed and second.is_closed


def test_model_attributes() -> None:
    model = make_model(Server())

    assert model.provider == "Anthropic"
    assert model.supports_tool_result_images is True
    assert repr(model) == f"AnthropicChatModel(model='{MODEL}', base_url='https://api.anthropic.com')"
