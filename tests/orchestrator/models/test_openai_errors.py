"""`OpenAiChatModel`'s errors (HTTP statuses, retries, unsupported content), its key (never shown or
logged) and its clients, against recorded payloads replayed through `httpx.MockTransport`."""

import asyncio
import logging

import httpx
import pytest

from orchestrator.errors import (
    ModelAuthenticationError,
    ModelConnectionError,
    ModelRateLimitError,
    ModelServerError,
    ModelTimeoutError,
    UnsupportedContentError,
)
from orchestrator.messages import AiMessage, ToolExecutionResultMessage, UserMessage
from orchestrator.models.base import ChatRequest, FinishReason
from orchestrator.models.openai import OpenAiChatModel
from tests.orchestrator.models._harness import Recorder, SseChunks, answer, chat, sse, stream
from tests.orchestrator.models._openai import KEY, TIME, WEATHER, ask, make_model
from workers.contents import Image, ImageContent
from workers.protocol import ToolExecutionRequest

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
