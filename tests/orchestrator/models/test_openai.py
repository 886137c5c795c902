"""`OpenAiChatModel` against recorded OpenAI payloads, replayed through `httpx.MockTransport`.

Every request body is also validated against OpenAI's OpenAPI description (`CreateChatCompletionRequest`),
and the recorded answers against `CreateChatCompletionResponse` / `CreateChatCompletionStreamResponse`.
"""

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from jsonschema.exceptions import ValidationError

from orchestrator.errors import ModelAuthenticationError, ModelError, ModelResponseError
from orchestrator.messages import AiMessage, SystemMessage, ToolExecutionResultMessage, UserMessage
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
from tests.orchestrator.models._harness import Recorder, SseChunks, answer, chat, recorded_json, sse, stream
from tests.orchestrator.models._openai import KEY, PING, TIME, WEATHER, ask, make_model, validate
from workers.contents import Image, ImageContent, TextContent
from workers.protocol import ToolExecutionRequest

# ---- requests ----------------------------------------------------------------------------------------


def test_request_maps_messages_tools_and_settings() -> None:
    # given a model with every setting, and a request with images and a tool without parameters
    recorder = Recorder(answer("openai_final_answer.json"))
    model = make_model(
        recorder,
        organization="org-toolfleet",
        temperature=0.2,
        max_tokens=300,
        parallel_tool_calls=False,
        extra_headers={"X-Trace-Id": "trace-1"},
    )
    request = ChatRequest(
        [
            SystemMessage("You are a weather assistant."),
            UserMessage.of(
                "What is the weather in these pictures?",
                Image(url="https://example.com/paris.jpg"),
                ImageContent(Image(base64_data="iVBORw0KGgo=", mime_type="image/png"), detail="low"),
            ),
        ],
        tool_specifications=[WEATHER, PING],
        tool_choice=ToolChoice.REQUIRED,
        parameters={"seed": 7, "temperature": 0.5},
    )

    # when
    chat(model, request)

    # then the body is exactly the documented shape, and valid by OpenAI's schema
    (sent,) = recorder.requests
    assert sent.method == "POST"
    assert str(sent.url) == "https://api.openai.com/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["openai-organization"] == "org-toolfleet"
    assert sent.headers["x-trace-id"] == "trace-1"
    body = recorder.bodies[0]
    assert body["model"] == "gpt-4o-mini"
    assert body["messages"] == [
        {"role": "system", "content": "You are a weather assistant."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is the weather in these pictures?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://example.com/paris.jpg", "detail": "auto"},
                },
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
                },
            ],
        },
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Returns the current weather in a city",
                "parameters": WEATHER.parameters,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "ping",
                "description": "Checks the weather service is up",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]
    assert body["tool_choice"] == "required"
    assert body["parallel_tool_calls"] is False
    assert body["max_completion_tokens"] == 300
    assert "max_tokens" not in body  # deprecated in the API
    assert body["temperature"] == 0.5  # ChatRequest.parameters win over the model's settings
    assert body["seed"] == 7
    assert "stream" not in body
    validate(body, "CreateChatCompletionRequest")


def test_plain_text_request_sends_only_what_is_set() -> None:
    recorder = Recorder(answer("openai_final_answer.json"))

    chat(make_model(recorder), ChatRequest([UserMessage("Hi")], tool_choice=ToolChoice.REQUIRED))

    # tool_choice without tools is rejected by OpenAI, so it is left out
    assert recorder.bodies == [{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]}]
    validate(recorder.bodies[0], "CreateChatCompletionRequest")


def test_strict_tools_send_strict_schemas() -> None:
    recorder = Recorder(answer("openai_final_answer.json"))
    model = make_model(recorder, strict_tools=True)

    chat(model, ChatRequest([UserMessage("Weather?")], [WEATHER, PING], tool_choice=ToolChoice.AUTO))

    body = recorder.bodies[0]
    assert body["tool_choice"] == "auto"
    assert [tool["function"] for tool in body["tools"]] == [
        {
            "name": "get_weather",
            "description": "Returns the current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "unit": {"type": ["string", "null"], "enum": ["celsius", "fahrenheit", None]},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
            "strict": True,
        },
        {
            "name": "ping",
            "description": "Checks the weather service is up",
            "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
            "strict": True,
        },
    ]
    assert WEATHER.parameters is not None and "additionalProperties" not in WEATHER.parameters
    validate(body, "CreateChatCompletionRequest")


@pytest.mark.parametrize(
    "breakage",
    [
        lambda body: body["messages"].append({"role": "robot", "content": "beep"}),
        lambda body: body["tools"][0].pop("function"),
        lambda body: body.update(tool_choice="always"),
        lambda body: body["messages"][0].pop("content"),
    ],
    ids=["unknown-role", "tool-without-function", "bad-tool-choice", "message-without-content"],
)
def test_schema_validation_rejects_a_broken_request(breakage: Callable[[dict[str, Any]], None]) -> None:
    recorder = Recorder(answer("openai_final_answer.json"))
    chat(make_model(recorder), ask("Weather?", WEATHER))
    body = recorder.bodies[0]
    validate(body, "CreateChatCompletionRequest")

    broken = copy.deepcopy(body)
    breakage(broken)

    with pytest.raises(ValidationError):
        validate(broken, "CreateChatCompletionRequest")


def test_request_parameters_cannot_replace_the_messages() -> None:
    model = make_model(Recorder(answer("openai_final_answer.json")))
    request = ChatRequest([UserMessage("Hi")], parameters={"messages": []})

    with pytest.raises(ValueError, match="messages"):
        chat(model, request)


# ---- a whole tool round trip -------------------------------------------------------------------------


def test_tool_round_trip() -> None:
    # given the model asks for two tools at once, then answers once it has their results
    recorder = Recorder(answer("openai_tool_calls.json"), answer("openai_final_answer.json"))
    model = make_model(recorder)
    system, user = SystemMessage("You are a weather assistant."), UserMessage("Weather and time in Paris?")

    # when
    first = chat(model, ChatRequest([system, user], [WEATHER, TIME]))

    # then both calls come back in order
    assert first == ChatResponse(
        ai_message=AiMessage(
            text=None,
            tool_execution_requests=[
                ToolExecutionRequest(
                    "call_kRdXhJ4wdSy0wUjJbDwrCvnv", "get_weather", '{"city":"Paris","unit":"celsius"}'
                ),
                ToolExecutionRequest(
                    "call_Q2hWv0QnAHRtQJqv8AotLrpB", "get_time", '{"timezone":"Europe/Paris"}'
                ),
            ],
        ),
        finish_reason=FinishReason.TOOL_EXECUTION,
        token_usage=TokenUsage(112, 51),
        model_name="gpt-4o-mini-2024-07-18",
        id="chatcmpl-BtF3kq9QeX2mZ7aVn1LrW5cYpD8sH",
    )

    # when the results go back, one of them an error
    weather_call, time_call = first.ai_message.tool_execution_requests
    results = [
        ToolExecutionResultMessage(weather_call.id, "get_weather", '{"temp_c":18,"sky":"sunny"}'),
        ToolExecutionResultMessage(
            time_call.id, "get_time", "Time service unavailable", is_error=True, attributes={"ms": 12}
        ),
    ]
    second = chat(model, ChatRequest([system, user, first.ai_message, *results], [WEATHER, TIME]))

    # then the assistant turn and both results are sent as OpenAI documents them
    assert recorder.bodies[1]["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_kRdXhJ4wdSy0wUjJbDwrCvnv",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris","unit":"celsius"}'},
                },
                {
                    "id": "call_Q2hWv0QnAHRtQJqv8AotLrpB",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": '{"timezone":"Europe/Paris"}'},
                },
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_kRdXhJ4wdSy0wUjJbDwrCvnv",
            "content": '{"temp_c":18,"sky":"sunny"}',
        },
        # OpenAI has no error flag: an error result is its text; attributes never leave memory
        {
            "role": "tool",
            "tool_call_id": "call_Q2hWv0QnAHRtQJqv8AotLrpB",
            "content": "Time service unavailable",
        },
    ]
    assert second.ai_message == AiMessage(
        "It is 18 °C and sunny in Paris. I could not get the local time: the time service is down."
    )
    assert second.finish_reason is FinishReason.STOP
    assert second.token_usage == TokenUsage(187, 24)
    assert first.token_usage is not None
    assert first.token_usage + second.token_usage == TokenUsage(299, 75)
    for body in recorder.bodies:
        validate(body, "CreateChatCompletionRequest")
    for name in ("openai_tool_calls.json", "openai_final_answer.json"):
        validate(recorded_json(name), "CreateChatCompletionResponse")


def test_tool_result_with_only_text_contents_sends_their_text() -> None:
    recorder = Recorder(answer("openai_final_answer.json"))
    call = ToolExecutionRequest("call_1", "get_weather", '{"city":"Paris"}')
    result = ToolExecutionResultMessage("call_1", "get_weather", "", contents=(TextContent("18 °C"),))

    chat(
        make_model(recorder), ChatRequest([UserMessage("Paris?"), AiMessage(None, [call]), result], [WEATHER])
    )

    assert recorder.bodies[0]["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": "18 °C"}


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("stop", FinishReason.STOP),
        ("length", FinishReason.LENGTH),
        ("tool_calls", FinishReason.TOOL_EXECUTION),
        ("function_call", FinishReason.TOOL_EXECUTION),
        ("content_filter", FinishReason.CONTENT_FILTER),
        ("something_new", FinishReason.OTHER),
    ],
)
def test_finish_reasons(reason: str, expected: FinishReason) -> None:
    payload = recorded_json("openai_final_answer.json")
    payload["choices"][0]["finish_reason"] = reason

    response = chat(make_model(Recorder(httpx.Response(200, json=payload))), ask("Hi"))

    assert response.finish_reason is expected


def test_answer_without_choices_is_a_response_error() -> None:
    model = make_model(Recorder(httpx.Response(200, json={"id": "x", "object": "chat.completion"})))

    with pytest.raises(ModelResponseError, match="without choices"):
        chat(model, ask("Hi"))


# ---- streaming ---------------------------------------------------------------------------------------


def test_stream_events_in_order() -> None:
    # given a recorded stream: text, then two tool calls whose argument deltas interleave by index
    chunks = SseChunks("openai_stream_tool_calls.txt")
    recorder = Recorder(sse(chunks))
    model = make_model(recorder)
    sent_when_first_call_completed: list[int] = []

    # when
    async def consume() -> list[ChatEvent]:
        events = []
        async for event in model.stream(ask("Weather and time in Paris?", WEATHER, TIME)):
            if isinstance(event, CompleteToolCall) and event.index == 0:
                sent_when_first_call_completed.append(chunks.sent)
            events.append(event)
        await model.aclose()
        return events

    events = asyncio.run(consume())

    # then
    weather = ToolExecutionRequest("call_3fZq8Wm1NcR5tY2bKx7LpV0e", "get_weather", '{"city": "Paris"}')
    time_ = ToolExecutionRequest("call_Hh6uJ9sVd2Qe4Ra8Tn1WmC5x", "get_time", '{"timezone": "Europe/Paris"}')
    assert events == [
        PartialResponse("Let me check"),
        PartialResponse(" both."),
        PartialToolCall(0, weather.id, "get_weather", ""),
        PartialToolCall(0, weather.id, "get_weather", '{"city":'),
        PartialToolCall(1, time_.id, "get_time", ""),
        PartialToolCall(0, weather.id, "get_weather", ' "Paris"}'),
        CompleteToolCall(0, weather),
        PartialToolCall(1, time_.id, "get_time", '{"timezone"'),
        PartialToolCall(1, time_.id, "get_time", ': "Europe/Paris"}'),
        CompleteToolCall(1, time_),
        CompleteResponse(
            ChatResponse(
                ai_message=AiMessage("Let me check both.", [weather, time_]),
                finish_reason=FinishReason.TOOL_EXECUTION,
                token_usage=TokenUsage(98, 46),
                model_name="gpt-4o-mini-2024-07-18",
                id="chatcmpl-BtF5c1XyQ7",
            )
        ),
    ]
    # the first call was complete while the model was still streaming the second one
    finish_chunk = len(chunks.blocks) - 2
    assert sent_when_first_call_completed and sent_when_first_call_completed[0] < finish_chunk
    body = recorder.bodies[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    validate(body, "CreateChatCompletionRequest")
    for chunk in chunks.chunks():
        validate(chunk, "CreateChatCompletionStreamResponse")


def test_stopping_a_stream_early_closes_the_response() -> None:
    chunks = SseChunks("openai_stream_tool_calls.txt")
    model = make_model(Recorder(sse(chunks)))

    async def first_event() -> ChatEvent:
        events = model.stream(ask("Weather?"))
        first = await anext(events)
        await events.aclose()  # type: ignore[attr-defined]
        await model.aclose()
        return first

    assert asyncio.run(first_event()) == PartialResponse("Let me check")
    assert chunks.closed
    assert chunks.sent < len(chunks.blocks)


def test_stream_error_chunk_is_a_model_error_with_openai_message() -> None:
    model = make_model(Recorder(sse(SseChunks("openai_stream_error.txt"))))
    seen: list[ChatEvent] = []

    async def consume() -> None:
        async for event in model.stream(ask("Weather?")):
            seen.append(event)

    with pytest.raises(ModelError, match="The server had an error while processing your request"):
        asyncio.run(consume())
    assert seen == [PartialResponse("The weather in")]


def test_stream_http_error_is_mapped_before_any_event() -> None:
    model = make_model(Recorder(answer("openai_error_401.json", status=401)))

    with pytest.raises(ModelAuthenticationError, match="Incorrect API key provided"):
        stream(model, ask("Weather?"))
