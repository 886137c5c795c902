"""Secrets never shown: an API key stays out of logs, errors and reprs; settings and the CLI mask every
password. No worker and no Redis needed (what workers and Flower see: tests/integration/test_security.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tests.integration.badinput_tools as bad
from orchestrator import (
    AiService,
    AnthropicChatModel,
    LocalExecutor,
    ModelAuthenticationError,
    OpenAiChatModel,
    UserMessage,
)
from orchestrator.models._http import RetryPolicy
from orchestrator.models.base import ChatRequest
from tests._ports import free_port
from workers.settings import Settings

REPO = Path(__file__).resolve().parents[1]
API_KEY = "sk-test-9f8e7d6c5b4a39281706"


_OPENAI_TOOL_CALL = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o-mini",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "bad_plain", "arguments": '{"text": "hi"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
}
_OPENAI_ANSWER = {
    "id": "chatcmpl-2",
    "object": "chat.completion",
    "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}
_ANTHROPIC_TOOL_CALL = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "bad_plain", "input": {"text": "hi"}}],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 5, "output_tokens": 5},
}
_ANTHROPIC_ANSWER = {
    "id": "msg_2",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [{"type": "text", "text": "done"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 5, "output_tokens": 1},
}


def _echo(status: int) -> httpx.Response:
    """An error that echoes the key back, as some compatible servers do."""
    message = f"key {API_KEY} rejected" if status == 401 else f"upstream failed for key {API_KEY}"
    return httpx.Response(status, json={"type": "error", "error": {"type": "x", "message": message}})


def _model(provider: str, replies: list[httpx.Response], seen: list[str]) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization") or request.headers.get("x-api-key") or "")
        return replies.pop(0)

    transport = httpx.MockTransport(answer)
    retry = RetryPolicy(max_retries=1, backoff_s=0.001, backoff_max_s=0.001)
    if provider == "openai":
        return OpenAiChatModel("gpt-4o-mini", api_key=API_KEY, transport=transport, retry=retry)
    return AnthropicChatModel("claude-test", api_key=API_KEY, transport=transport, retry=retry)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_api_key_never_reaches_logs_errors_or_reprs(
    provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tool_call, answer = (
        (_OPENAI_TOOL_CALL, _OPENAI_ANSWER)
        if provider == "openai"
        else (_ANTHROPIC_TOOL_CALL, _ANTHROPIC_ANSWER)
    )
    seen: list[str] = []
    # given: a server that fails once echoing the key (logged as a retry), then calls a tool, then answers
    replies = [_echo(500), httpx.Response(200, json=tool_call), httpx.Response(200, json=answer)]
    model = _model(provider, replies, seen)
    service = AiService(chat_model=model, tools=[bad.bad_plain], executor=LocalExecutor())
    # when: a whole invocation, then a call the server rejects echoing the key
    assert service.chat("go").content == "done"
    rejecting = _model(provider, [_echo(401)], seen)
    with pytest.raises(ModelAuthenticationError) as raised:
        asyncio.run(rejecting.chat(ChatRequest(messages=[UserMessage("hi")])))
    # then: the key was sent every time, and appears nowhere else
    assert len(seen) == 4 and all(API_KEY in header for header in seen)
    logged = caplog.text + "".join(f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records)
    assert "upstream failed for key ***; retry 1/1" in logged  # the echoing error was logged, masked
    assert API_KEY not in logged
    error = raised.value
    assert "key *** rejected" in str(error)
    assert API_KEY not in str(error) and API_KEY not in repr(error) and API_KEY not in repr(error.args)
    assert API_KEY not in repr(model) and API_KEY not in str(model)


_PASSWORDS = st.text(
    alphabet=st.characters(codec="ascii", categories=["L", "N"], include_characters="-_.~!$&()*+,;=@:"),
    min_size=6,
    max_size=30,
).map(lambda text: f"PW{text}")


@hypothesis.settings(max_examples=60, deadline=None, database=None)
@given(
    password=_PASSWORDS,
    user=st.sampled_from(["", "default", "admin"]),
    scheme=st.sampled_from(["redis", "rediss", "postgresql+psycopg"]),
)
def test_settings_reprs_mask_every_password(password: str, user: str, scheme: str) -> None:
    url = f"{scheme}://{user}:{password}@db.internal:6379/0"
    redis_url = url if scheme.startswith("redis") else "redis://db.internal:6379/0"  # Redis URLs only
    values = Settings(redis_url=redis_url, broker_url=url, result_backend=url, database_url=url)
    for text in (repr(values), str(values), str(values.redacted())):
        assert password not in text
        assert f"{scheme}://{user}:***@db.internal:6379/0" in text


def test_settings_repr_masks_a_password_in_the_query_string() -> None:
    values = Settings(redis_url="redis://db.internal:6379/0?password=PW-query-secret")
    assert "PW-query-secret" not in repr(values)


@pytest.mark.parametrize(
    "argv",
    [["tools"], ["tools", "--json"], ["-v", "tools"], ["runs"]],
    ids=["tools", "tools-json", "tools-verbose", "runs"],
)
def test_cli_output_never_shows_a_password(argv: list[str]) -> None:
    # given: URLs with passwords, pointing at a port where nothing listens
    port = free_port()
    redis_url = f"redis://admin:PW-redis-secret@127.0.0.1:{port}/0"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TOOLFLEET_REDIS_URL": redis_url,
        "TOOLFLEET_BROKER_URL": redis_url,
        "TOOLFLEET_RESULT_BACKEND": redis_url,
        "TOOLFLEET_DATABASE_URL": f"postgresql+psycopg://admin:PW-db-secret@127.0.0.1:{port}/toolfleet",
    }
    # when
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *argv], env=env, capture_output=True, text=True, timeout=30
    )
    # then: it fails, saying where it looked, with the passwords masked
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "PW-redis-secret" not in output and "PW-db-secret" not in output
    if "tools" in argv:
        assert done.returncode == 2
        assert f"redis://admin:***@127.0.0.1:{port}/0" in done.stderr
