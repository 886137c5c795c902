"""Anthropic's Messages API as a `ChatModel`: whole answers with `chat`, events with `stream`.

The wire format is Anthropic's (`POST /v1/messages`, `x-api-key`, `anthropic-version`); transport,
retries and error mapping are `_http`'s. Mapping choices worth knowing:

- System messages become the top-level `system` text (several are joined by a blank line).
- Consecutive messages of one role are merged into one turn (the API wants user/assistant
  alternation), so the results of one AI turn travel as ONE user message of `tool_result` blocks.
- A tool call whose stored arguments are not a JSON object is sent back as
  `{"_raw_arguments": "<text>"}`: the history stays intact and the model sees what it wrote.
- Text blocks of a response are concatenated without separator, exactly as streaming yields them.
- Tool names Anthropic rejects are sent under a `ToolNameAliases` alias and mapped back.
- `ChatRequest.parameters` are merged into the request body as Anthropic fields (`top_p`,
  `stop_sequences`, `max_tokens`, ...); the fields this class builds itself cannot be overridden.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from orchestrator.errors import ModelAuthenticationError, ModelInvalidRequestError
from orchestrator.models._anthropic_wire import (
    ANTHROPIC_TOOL_NAME,
    PROVIDER,
    RESERVED,
    StreamState,
    log_call,
    parse_response,
    wire_messages,
    wire_tool,
    wire_tool_choice,
)
from orchestrator.models._http import Endpoint, LoopClients, RetryPolicy, loads, post_json, post_stream
from orchestrator.models.base import ChatEvent, ChatRequest, ChatResponse, CompleteResponse, ToolChoice
from workers.tools.specification import ToolNameAliases

__all__ = ["ANTHROPIC_TOOL_NAME", "AnthropicChatModel"]

log = logging.getLogger(__name__)


class _Secret:
    """A credential that never shows in reprs, logs or tracebacks' locals."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'***'"


class AnthropicChatModel:
    """Claude through the Messages API.

    The key is `api_key`, else the `ANTHROPIC_API_KEY` environment variable. `parallel_tool_calls=False`
    sends `disable_parallel_tool_use`. One `httpx.AsyncClient` is kept per event loop (clients are
    never shared across loops); `aclose()` closes the current loop's client. An injected `transport`
    (for tests, `httpx.MockTransport`) is shared by those clients.
    """

    provider = PROVIDER
    supports_tool_result_images = True

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = "https://api.anthropic.com",
        max_tokens: int = 4096,
        temperature: float | None = None,
        parallel_tool_calls: bool | None = None,
        timeout_s: float = 60,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen, so one shared default is safe
        transport: httpx.AsyncBaseTransport | None = None,
        anthropic_version: str = "2023-06-01",
    ) -> None:
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise ModelAuthenticationError(
                "No Anthropic API key: pass api_key=... or set the ANTHROPIC_API_KEY environment variable",
                provider=PROVIDER,
            )
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.parallel_tool_calls = parallel_tool_calls
        self.timeout_s = timeout_s
        self.retry = retry
        self.anthropic_version = anthropic_version
        self._api_key = _Secret(key)
        self._transport = transport
        self._clients = LoopClients(
            lambda: httpx.AsyncClient(transport=self._transport, timeout=self.timeout_s)
        )

    def __repr__(self) -> str:
        return f"AnthropicChatModel(model={self.model!r}, base_url={self.base_url!r})"

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """The whole answer to `request`."""
        body, aliases = self._body(request, stream=False)
        started = time.perf_counter()
        data = await post_json(self._endpoint(), body)
        response = parse_response(data, aliases)
        log_call(response, started)
        return response

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatEvent]:
        """The answer as events; each tool call is complete at its block's end, before the message's."""
        body, aliases = self._body(request, stream=True)
        started = time.perf_counter()
        state = StreamState(aliases)
        events = post_stream(self._endpoint(), body)
        # Closed at once, also when the consumer stops early or an event raises: frees the connection.
        async with contextlib.aclosing(events):
            async for name, data in events:
                for event in state.feed(name, loads(data, PROVIDER)):
                    yield event
        response = state.finish()
        log_call(response, started)
        yield CompleteResponse(response)

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop (a new one is made if the model is used again)."""
        await self._clients.aclose()

    @property
    def _url(self) -> str:
        return f"{self.base_url}/v1/messages"

    def _endpoint(self) -> Endpoint:
        return Endpoint(self._client(), self._url, self._headers(), PROVIDER, self.retry)

    def _headers(self) -> dict[str, str]:
        return {"x-api-key": self._api_key.reveal(), "anthropic-version": self.anthropic_version}

    def _client(self) -> httpx.AsyncClient:
        return self._clients.current()

    def _body(self, request: ChatRequest, *, stream: bool) -> tuple[dict[str, Any], ToolNameAliases]:
        specs = request.tool_specifications
        aliases = ToolNameAliases((s.name for s in specs), pattern=ANTHROPIC_TOOL_NAME)
        system, messages = wire_messages(request.messages, aliases)
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens}
        if system:
            body["system"] = system
        body["messages"] = messages
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if specs:
            body["tools"] = [wire_tool(s, aliases) for s in specs]
            choice = wire_tool_choice(request.tool_choice, self.parallel_tool_calls)
            if choice is not None:
                body["tool_choice"] = choice
        elif request.tool_choice is ToolChoice.REQUIRED:
            raise ModelInvalidRequestError(
                "tool_choice REQUIRED needs at least one tool specification", provider=PROVIDER
            )
        reserved = RESERVED.intersection(request.parameters)
        if reserved:
            raise ModelInvalidRequestError(
                f"ChatRequest.parameters cannot set {sorted(reserved)}: the Anthropic model builds them",
                provider=PROVIDER,
            )
        body.update(request.parameters)
        if stream:
            body["stream"] = True
        return body, aliases


# --- request ---------------------------------------------------------------------------------------
