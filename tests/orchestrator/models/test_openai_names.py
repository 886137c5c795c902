"""`OpenAiChatModel` with tool names OpenAI rejects (aliased and mapped back) and with servers that omit
tool-call ids, against recorded payloads validated against OpenAI's OpenAPI description."""

from orchestrator.messages import AiMessage, ToolExecutionResultMessage, UserMessage
from orchestrator.models.base import (
    ChatRequest,
    CompleteResponse,
    CompleteToolCall,
    PartialToolCall,
    TokenUsage,
)
from tests.orchestrator.models._harness import Recorder, SseChunks, answer, chat, recorded_json, sse, stream
from tests.orchestrator.models._openai import (
    CN_ALIAS,
    CN_WEATHER,
    OPENAI_NAME,
    TIME,
    WEATHER,
    ask,
    make_model,
    validate,
)
from workers.protocol import ToolExecutionRequest
from workers.tools.specification import ToolNameAliases

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
    validate(recorded_json("openai_alias.json"), "CreateChatCompletionResponse")


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
