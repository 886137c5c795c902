"""`AnthropicChatModel` streaming, errors and its key, against recorded Messages API payloads replayed
through `httpx.MockTransport`."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from orchestrator.errors import ModelAuthenticationError, ModelResponseError, ModelServerError
from orchestrator.messages import AiMessage, UserMessage
from orchestrator.models._http import RetryPolicy
from orchestrator.models.anthropic import AnthropicChatModel
from orchestrator.models.base import (
    ChatEvent,
    ChatResponse,
    CompleteResponse,
    CompleteToolCall,
    FinishReason,
    PartialResponse,
    PartialToolCall,
    TokenUsage,
)
from tests.orchestrator.models._anthropic import KEY, MODEL, WEATHER, ask, make_model
from tests.orchestrator.models._harness import Recorder, answer, chat, recorded_text, sse_answer, stream
from workers.protocol import ToolExecutionRequest

# --- streaming -------------------------------------------------------------------------------------


def test_stream_yields_text_tool_pieces_and_complete_calls_in_order() -> None:
    # given
    server = Recorder(sse_answer("anthropic_stream_tools.txt"))
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
    server = Recorder(sse_answer("anthropic_stream_tools.txt"))

    events = stream(make_model(server), ask(UserMessage("Weather?"), tool_specifications=[WEATHER]), [])

    first_complete = next(i for i, e in enumerate(events) if isinstance(e, CompleteToolCall))
    second_piece = next(i for i, e in enumerate(events) if isinstance(e, PartialToolCall) and e.index == 1)
    assert first_complete < second_piece
    assert isinstance(events[-1], CompleteResponse)


def test_stream_is_retried_before_the_first_byte() -> None:
    server = Recorder(answer("anthropic_error_529.json", 529), sse_answer("anthropic_stream_tools.txt"))

    events = stream(make_model(server), ask(UserMessage("Weather?"), tool_specifications=[WEATHER]), [])

    assert len(server.requests) == 2
    assert isinstance(events[-1], CompleteResponse)


def test_error_event_mid_stream_raises_with_anthropics_message() -> None:
    server = Recorder(sse_answer("anthropic_stream_error.txt"))
    received: list[ChatEvent] = []

    with pytest.raises(ModelServerError, match=r"overloaded_error\): Overloaded") as caught:
        stream(make_model(server), ask(UserMessage("Hi")), received)

    assert caught.value.provider == "Anthropic"
    assert received == [PartialResponse("Hello")]
    assert len(server.requests) == 1


def test_stream_cut_before_message_stop_is_an_error() -> None:
    cut = recorded_text("anthropic_stream_tools.txt").split("event: message_delta")[0]
    server = Recorder(
        httpx.Response(200, content=cut.encode(), headers={"content-type": "text/event-stream"})
    )

    with pytest.raises(ModelResponseError, match="ended before message_stop"):
        stream(make_model(server), ask(UserMessage("Weather?"), tool_specifications=[WEATHER]), [])


# --- errors ----------------------------------------------------------------------------------------


def test_401_is_an_authentication_error_with_anthropics_message_and_no_retry() -> None:
    server = Recorder(answer("anthropic_error_401.json", 401))

    with pytest.raises(ModelAuthenticationError, match="invalid x-api-key") as caught:
        chat(make_model(server), ask(UserMessage("Hi")))

    assert caught.value.status == 401
    assert len(server.requests) == 1


def test_529_overloaded_is_retried_then_succeeds() -> None:
    server = Recorder(answer("anthropic_error_529.json", 529), answer("anthropic_final_response.json"))

    response = chat(make_model(server), ask(UserMessage("Hi")))

    assert len(server.requests) == 2
    assert response.finish_reason is FinishReason.STOP


def test_500_fails_once_the_retries_are_spent() -> None:
    server = Recorder(*[answer("anthropic_error_500.json", 500) for _ in range(3)])
    model = make_model(server, retry=RetryPolicy(max_retries=2, backoff_s=0.001))

    with pytest.raises(ModelServerError, match="Internal server error") as caught:
        chat(model, ask(UserMessage("Hi")))

    assert caught.value.status == 500
    assert len(server.requests) == 3


# --- the key and the client ------------------------------------------------------------------------


def test_api_key_never_leaks(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server = Recorder(
        answer("anthropic_error_529.json", 529),
        answer("anthropic_final_response.json"),
        answer("anthropic_error_401.json", 401),
        sse_answer("anthropic_stream_error.txt"),
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
    server = Recorder(answer("anthropic_final_response.json"))
    chat(AnthropicChatModel(MODEL, transport=httpx.MockTransport(server)), ask(UserMessage("Hi")))
    assert server.requests[0].headers["x-api-key"] == "sk-ant-from-env"


def test_one_client_per_event_loop_closed_by_aclose() -> None:
    model = make_model(Recorder())

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
    model = make_model(Recorder())

    assert model.provider == "Anthropic"
    assert model.supports_tool_result_images is True
    assert repr(model) == f"AnthropicChatModel(model='{MODEL}', base_url='https://api.anthropic.com')"
