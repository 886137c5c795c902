"""`OpenAiChatModel` against recorded OpenAI payloads, replayed through `httpx.MockTransport`.

Every request body is also validated against OpenAI's OpenAPI description (`CreateChatCompletionRequest`),
and the recorded answers against `CreateChatCompletionResponse` / `CreateChatCompletionStreamResponse`.
"""

import asyncio
import copy
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from orchestrator.errors import (
    ModelAuthenticationError,
    ModelConnectionError,
    ModelError,
    ModelRateLimitError,
    ModelResponseError,
    ModelServerError,
    ModelTimeoutError,
    UnsupportedContentError,
)
from orchestrator.messages import AiMessage, SystemMessage, ToolExecutionResultMessage, UserMessage
from orchestrator.models._http import RetryPolicy
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
from orchestrator.models.openai import OpenAiChatModel
from workers.contents import Image, ImageContent, TextContent
from workers.protocol import ToolExecutionRequest
from workers.tools.specification import ToolNameAliases, ToolSpecification

FIXTURES = Path(__file__).parent / "fixtures"
# The chat-completions part of OpenAI's official OpenAPI description (MIT), kept beside the recordings.
OPENAPI = Path(__file__).parent / "fixtures" / "openai-chat-completions.openapi.json"
KEY = "sk-test-4f1d9c2a7b3e8f60cdef"
OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

WEATHER = ToolSpecification(
    "get_weather",
    "Returns the current weather in a city",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
)
TIME = ToolSpecification(
    "get_time",
    "Returns the local time in a time zone",
    {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
)
PING = ToolSpecification("ping", "Checks the weather service is up")  # no parameters
CN_WEATHER = ToolSpecification(
    "获取天气",
    "获取指定城市的天气",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CN_ALIAS = "tool_136a0785"  # the alias recorded in openai_alias.json and openai_stream_alias.txt


# ---- the OpenAPI description ---------------------------------------------------------------------


def _nullable_as_null_type(node: Any) -> Any:
    """OpenAPI 3.0's `nullable: true` (still used in this file) as JSON Schema: `anyOf [..., null]`."""
    if isinstance(node, list):
        return [_nullable_as_null_type(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _nullable_as_null_type(value) for key, value in node.items()}
    if converted.pop("nullable", False) is True:
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


@cache
def _registry() -> Registry:
    document = _nullable_as_null_type(json.loads(OPENAPI.read_text()))
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    registry: Registry = Registry().with_resource("openai-openapi.json", resource)
    return registry


def validate(instance: Any, schema_name: str) -> None:
    """Raise `ValidationError` unless `instance` matches `#/components/schemas/<schema_name>`."""
    schema = {"$ref": f"openai-openapi.json#/components/schemas/{schema_name}"}
    Draft202012Validator(schema, registry=_registry()).validate(instance)


# ---- recorded answers and a recording transport ----------------------------------------------------


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def answer(name: str, status: int = 200) -> httpx.Response:
    return httpx.Response(
        status, content=(FIXTURES / name).read_bytes(), headers={"content-type": "application/json"}
    )


class SseChunks(httpx.AsyncByteStream):
    """A recorded SSE body sent one event per network chunk, counting what has been sent."""

    def __init__(self, name: str) -> None:
        text = (FIXTURES / name).read_text()
        self.blocks = [block + "\n\n" for block in text.split("\n\n") if block.strip()]
        self.sent = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for block in self.blocks:
            self.sent += 1
            yield block.encode()

    async def aclose(self) -> None:
        self.closed = True

    def chunks(self) -> list[Any]:
        return [json.loads(b[len("data: ") :]) for b in self.blocks if b.strip() != "data: [DONE]"]


def sse(chunks: SseChunks) -> httpx.Response:
    return httpx.Response(200, stream=chunks, headers={"content-type": "text/event-stream"})


Reply = httpx.Response | Callable[[httpx.Request], httpx.Response]


class Recorder:
    """A `MockTransport` handler: records each request and answers with the next scripted reply."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return reply(request) if callable(reply) else reply

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(request.content) for request in self.requests]


def make_model(recorder: Recorder, **settings: Any) -> OpenAiChatModel:
    settings = {"api_key": KEY, "retry": RetryPolicy(max_retries=2, backoff_s=0.001), **settings}
    return OpenAiChatModel("gpt-4o-mini", transport=httpx.MockTransport(recorder), **settings)


def chat(model: OpenAiChatModel, request: ChatRequest) -> ChatResponse:
    async def go() -> ChatResponse:
        try:
            return await model.chat(request)
        finally:
            await model.aclose()

    return asyncio.run(go())


def stream(model: OpenAiChatModel, request: ChatRequest) -> list[ChatEvent]:
    async def go() -> list[ChatEvent]:
        try:
            return [event async for event in model.stream(request)]
        finally:
            await model.aclose()

    return asyncio.run(go())


def ask(text: str, *tools: ToolSpecification) -> ChatRequest:
    return ChatRequest([UserMessage(text)], tool_specifications=list(tools))


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
        validate(fixture(name), "CreateChatCompletionResponse")


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
    payload = fixture("openai_final_answer.json")
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


# ---- tool names OpenAI rejects ------------------------------------------------------------------------


def test_alias_round_trip_in_chat() -> None:
    # given a tool with a Chinese name, already called once earlier in the conversation
    assert ToolNameAliases().alias("获取天气") == CN_ALIAS
    earlier = ToolExecutionRequest("call_earlier", "获取天气", '{"city":"上海"}')
    recorder = Recorder(answer("openai_alias.json"))
    request = ChatRequest(
        [
            UserMessage("上海天气怎么样?"),
            AiMessage(None, [earlier]),
            ToolExecutionResultMessage("call_earlier", "获取天气", "晴, 22°C"),
            UserMessage("北京呢?"),
        ],
        [CN_WEATHER],
    )

    # when
    response = chat(make_model(recorder), request)

    # then OpenAI only ever sees the alias, and the user only ever sees the name
    body = recorder.bodies[0]
    assert body["tools"][0]["function"]["name"] == CN_ALIAS
    assert body["messages"][1]["tool_calls"][0]["function"]["name"] == CN_ALIAS
    assert OPENAI_NAME.match(CN_ALIAS)
    assert response.ai_message.tool_execution_requests == [
        ToolExecutionRequest("call_7pXn2QbLw9Rk4sT1vYc3Hd0M", "获取天气", '{"city":"北京"}')
    ]
    assert CN_ALIAS not in repr(response)
    validate(body, "CreateChatCompletionRequest")
    validate(fixture("openai_alias.json"), "CreateChatCompletionResponse")


def test_alias_round_trip_in_stream() -> None:
    chunks = SseChunks("openai_stream_alias.txt")
    recorder = Recorder(sse(chunks))

    events = stream(make_model(recorder), ask("北京和上海的天气?", CN_WEATHER))

    beijing = ToolExecutionRequest("call_Bv4nT8qW2xLc6Rj0Zs3Ya9Kd", "获取天气", '{"city": "北京"}')
    shanghai = ToolExecutionRequest("call_Jm7cR1xV5pNq8Ta2Wd4Lk6Ee", "获取天气", '{"city": "上海"}')
    assert events[:6] == [
        PartialToolCall(0, beijing.id, "获取天气", ""),
        PartialToolCall(0, beijing.id, "获取天气", '{"ci'),
        PartialToolCall(0, beijing.id, "获取天气", 'ty": "北京"}'),
        # a sequential stream: the first call is complete as soon as the second starts
        CompleteToolCall(0, beijing),
        PartialToolCall(1, shanghai.id, "获取天气", ""),
        PartialToolCall(1, shanghai.id, "获取天气", '{"city": "上海"}'),
    ]
    assert events[6:-1] == [CompleteToolCall(1, shanghai)]
    final = events[-1]
    assert isinstance(final, CompleteResponse)
    assert final.response.ai_message.tool_execution_requests == [beijing, shanghai]
    assert final.response.token_usage == TokenUsage(71, 40)
    assert CN_ALIAS not in repr(events)
    assert recorder.bodies[0]["tools"][0]["function"]["name"] == CN_ALIAS
    for chunk in chunks.chunks():
        validate(chunk, "CreateChatCompletionStreamResponse")


# ---- servers that omit tool-call ids ------------------------------------------------------------------


def test_missing_tool_call_ids_get_stable_generated_ids() -> None:
    # given an OpenAI-compatible server that sends tool calls without ids
    base_url = "http://localhost:11434/v1"
    model = make_model(Recorder(answer("openai_no_ids.json")), api_key=None, base_url=base_url)

    # when the same answer is read twice, and once streamed
    first = chat(model, ask("Weather in Paris and London?", WEATHER)).ai_message.tool_execution_requests
    again = chat(model, ask("Weather in Paris and London?", WEATHER)).ai_message.tool_execution_requests
    streamed_model = make_model(
        Recorder(sse(SseChunks("openai_stream_no_ids.txt"))), api_key=None, base_url=base_url
    )
    events = stream(streamed_model, ask("Weather in Paris and London?", WEATHER))

    # then every call has an id, the same each time, distinct between calls
    ids = [call.id for call in first]
    assert all(ids) and len(set(ids)) == 2
    assert [call.id for call in again] == ids
    assert [(call.name, call.arguments) for call in first] == [
        ("get_weather", '{"city":"Paris"}'),
        ("get_weather", '{"city":"London"}'),
    ]
    completed = [event.request for event in events if isinstance(event, CompleteToolCall)]
    assert completed == first
    final = events[-1]
    assert isinstance(final, CompleteResponse)
    assert final.response.ai_message.tool_execution_requests == first
    assert final.response.token_usage == TokenUsage(150, 38)


def test_stream_without_tool_call_indexes_starts_a_call_at_each_new_id() -> None:
    # given a compatible server that leaves `index` out of its tool-call deltas
    model = make_model(
        Recorder(sse(SseChunks("openai_stream_no_index.txt"))), base_url="http://localhost:1234/v1"
    )

    # when
    events = stream(model, ask("Weather and time in Paris?", WEATHER, TIME))

    # then each new id starts the next call, and the deltas in between continue the current one
    weather = ToolExecutionRequest("call_a1", "get_weather", '{"city":"Paris"}')
    time_ = ToolExecutionRequest("call_b2", "get_time", '{"timezone":"Europe/Paris"}')
    assert [event for event in events if isinstance(event, CompleteToolCall)] == [
        CompleteToolCall(0, weather),
        CompleteToolCall(1, time_),
    ]
    assert [event.index for event in events if isinstance(event, PartialToolCall)] == [0, 0, 1, 1]
    final = events[-1]
    assert isinstance(final, CompleteResponse)
    assert final.response.ai_message.tool_execution_requests == [weather, time_]


def test_history_without_ids_pairs_results_with_their_calls() -> None:
    # given a conversation recorded from a provider that gave no ids
    calls = [
        ToolExecutionRequest(None, "get_weather", '{"city":"Paris"}'),
        ToolExecutionRequest(None, "get_weather", '{"city":"London"}'),
    ]
    recorder = Recorder(answer("openai_final_answer.json"))
    request = ChatRequest(
        [
            UserMessage("Paris and London?"),
            AiMessage(None, calls),
            ToolExecutionResultMessage(None, "get_weather", "18 °C"),
            ToolExecutionResultMessage(None, "get_weather", "12 °C"),
        ],
        [WEATHER],
    )

    # when
    chat(make_model(recorder), request)

    # then each result answers its own call, by a generated id
    messages = recorder.bodies[0]["messages"]
    call_ids = [call["id"] for call in messages[1]["tool_calls"]]
    assert all(call_ids) and len(set(call_ids)) == 2
    assert [(m["tool_call_id"], m["content"]) for m in messages[2:]] == [
        (call_ids[0], "18 °C"),
        (call_ids[1], "12 °C"),
    ]
    validate(recorder.bodies[0], "CreateChatCompletionRequest")


# ---- errors ------------------------------------------------------------------------------------------


def test_401_is_an_authentication_error_with_openai_message() -> None:
    recorder = Recorder(answer("openai_error_401.json", status=401))

    with pytest.raises(ModelAuthenticationError) as caught:
        chat(make_model(recorder), ask("Hi"))

    assert "Incorrect API key provided: sk-test-*******************cdef" in str(caught.value)
    assert caught.value.status == 401
    assert caught.value.provider == "OpenAI"
    assert len(recorder.requests) == 1  # not retried
    assert KEY not in str(caught.value)


def test_key_echoed_by_a_compatible_server_is_masked_in_the_error() -> None:
    echo = httpx.Response(401, json={"error": {"message": f"Unknown key {KEY}", "type": "auth"}})
    model = make_model(Recorder(echo), base_url="http://localhost:8000/v1")

    with pytest.raises(ModelAuthenticationError) as caught:
        chat(model, ask("Hi"))

    assert KEY not in str(caught.value)
    assert "Unknown key ***" in str(caught.value)


def test_429_is_retried_and_succeeds() -> None:
    recorder = Recorder(answer("openai_error_429.json", status=429), answer("openai_final_answer.json"))

    response = chat(make_model(recorder), ask("Hi"))

    assert response.finish_reason is FinishReason.STOP
    assert len(recorder.requests) == 2
    assert recorder.bodies[0] == recorder.bodies[1]


def test_429_every_time_is_a_rate_limit_error() -> None:
    recorder = Recorder(answer("openai_error_429.json", status=429))

    with pytest.raises(ModelRateLimitError, match="Rate limit reached for gpt-4o-mini"):
        chat(make_model(recorder), ask("Hi"))
    assert len(recorder.requests) == 3


def test_500_until_retries_are_spent_is_a_server_error() -> None:
    recorder = Recorder(answer("openai_error_500.json", status=500))

    with pytest.raises(ModelServerError, match="The server had an error") as caught:
        chat(make_model(recorder), ask("Hi"))

    assert caught.value.status == 500
    assert len(recorder.requests) == 2 + 1  # max_retries + 1


def test_connection_error_is_retried_then_a_connection_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    recorder = Recorder(refuse)

    with pytest.raises(ModelConnectionError, match="Connection refused"):
        chat(make_model(recorder), ask("Hi"))
    assert len(recorder.requests) == 3


def test_timeout_is_a_timeout_error() -> None:
    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    recorder = Recorder(hang)

    with pytest.raises(ModelTimeoutError):
        chat(make_model(recorder), ask("Hi"))
    assert len(recorder.requests) == 3


def test_image_in_a_tool_result_is_unsupported_content_naming_openai() -> None:
    recorder = Recorder(answer("openai_final_answer.json"))
    call = ToolExecutionRequest("call_1", "get_weather", '{"city":"Paris"}')
    result = ToolExecutionResultMessage(
        "call_1",
        "get_weather",
        "radar image",
        contents=(ImageContent(Image(url="https://example.com/r.png")),),
    )
    request = ChatRequest([UserMessage("Radar?"), AiMessage(None, [call]), result], [WEATHER])
    model = make_model(recorder)

    with pytest.raises(UnsupportedContentError, match="OpenAI cannot carry images in tool results") as caught:
        chat(model, request)
    with pytest.raises(UnsupportedContentError):
        stream(model, request)

    assert caught.value.provider == "OpenAI"
    assert "get_weather" in str(caught.value)
    assert model.supports_tool_result_images is False
    assert recorder.requests == []  # failed before anything was sent


# ---- the key, clients and construction ------------------------------------------------------------------


def test_repr_shows_model_and_base_url_not_the_key() -> None:
    model = make_model(Recorder(answer("openai_final_answer.json")))

    assert repr(model) == "OpenAiChatModel(model='gpt-4o-mini', base_url='https://api.openai.com/v1')"
    assert KEY not in repr(model)


def test_key_never_appears_in_logs(caplog: pytest.LogCaptureFixture) -> None:
    # given every logger at DEBUG
    caplog.set_level(logging.DEBUG)
    recorder = Recorder(
        answer("openai_error_429.json", status=429),
        answer("openai_final_answer.json"),
        sse(SseChunks("openai_stream_tool_calls.txt")),
        answer("openai_error_401.json", status=401),
    )
    model = make_model(recorder)

    # when calls succeed, are retried, stream and fail
    chat(model, ask("Hi"))
    stream(model, ask("Weather?", WEATHER, TIME))
    with pytest.raises(ModelAuthenticationError) as caught:
        chat(model, ask("Hi"))

    # then the key was sent, and logged nowhere
    assert all(request.headers["authorization"] == f"Bearer {KEY}" for request in recorder.requests)
    assert "'Authorization': '***'" in caplog.text  # the request line is logged, redacted
    assert "retry 1/2" in caplog.text
    assert KEY not in caplog.text
    assert KEY not in str(caught.value)


def test_missing_key_for_openai_fails_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    with pytest.raises(ModelAuthenticationError, match="OPENAI_API_KEY"):
        OpenAiChatModel("gpt-4o-mini")


def test_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    recorder = Recorder(answer("openai_final_answer.json"))
    model = OpenAiChatModel("gpt-4o-mini", transport=httpx.MockTransport(recorder))

    chat(model, ask("Hi"))

    assert recorder.requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_compatible_server_without_key_gets_no_authorization(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    recorder = Recorder(answer("openai_final_answer.json"))
    model = OpenAiChatModel(
        "llama3.1", base_url="http://localhost:8080/v1/", transport=httpx.MockTransport(recorder)
    )

    chat(model, ask("Hi"))

    assert str(recorder.requests[0].url) == "http://localhost:8080/v1/chat/completions"
    assert "authorization" not in recorder.requests[0].headers


def test_one_client_per_event_loop() -> None:
    model = make_model(Recorder(answer("openai_final_answer.json")))

    async def clients() -> tuple[httpx.AsyncClient, httpx.AsyncClient]:
        return model._client(), model._client()

    first_a, first_b = asyncio.run(clients())
    second, _ = asyncio.run(clients())

    assert first_a is first_b
    assert second is not first_a

    async def close() -> httpx.AsyncClient:
        client = model._client()
        await model.aclose()
        return client

    assert asyncio.run(close()).is_closed
