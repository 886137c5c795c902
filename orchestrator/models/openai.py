"""`OpenAiChatModel`: OpenAI's chat-completions API over httpx, whole or streamed.

It relies on nothing beyond the chat-completions wire format, so a `base_url` also reaches
OpenAI-compatible servers (vLLM, Ollama, llama.cpp, LM Studio). Tool names OpenAI rejects travel under
safe aliases and come back under their own names; tool calls without ids get stable generated ids.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx

from orchestrator.errors import ModelAuthenticationError, ModelError
from orchestrator.models._http import (
    Endpoint,
    LoopClients,
    RetryPolicy,
    loads,
    post_json,
    post_stream,
    redact_headers,
)
from orchestrator.models._openai_wire import (
    OPENAI_BASE_URL,
    PROVIDER,
    RESERVED,
    StreamAssembler,
    parse_response,
    tool_aliases,
    wire_messages,
    wire_tool,
)
from orchestrator.models.base import ChatEvent, ChatRequest, ChatResponse, CompleteResponse, TokenUsage
from workers.tools.specification import ToolNameAliases

__all__ = ["OpenAiChatModel"]

log = logging.getLogger(__name__)


class OpenAiChatModel:
    """A `ChatModel` for OpenAI's `/chat/completions` and servers that speak the same format.

    The API key comes from `api_key`, else `OPENAI_API_KEY`; it is sent only as the `Authorization`
    header and never appears in reprs, logs or error messages. Without a key no `Authorization` header
    is sent (for local servers); for api.openai.com a missing key fails at construction.
    `ChatRequest.parameters` are merged into the body last, overriding the settings given here.
    """

    provider = PROVIDER
    supports_tool_result_images = False

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = OPENAI_BASE_URL,
        organization: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        parallel_tool_calls: bool | None = None,
        strict_tools: bool = False,
        timeout_s: float = 60,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen dataclass, shared safely
        transport: httpx.AsyncBaseTransport | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._api_key = key or None
        if self._api_key is None and urlsplit(base_url).hostname == urlsplit(OPENAI_BASE_URL).hostname:
            raise ModelAuthenticationError(
                "OpenAI needs an API key: pass OpenAiChatModel(api_key=...) or set OPENAI_API_KEY "
                "(only an OpenAI-compatible server at another base_url may go without one)",
                provider=PROVIDER,
            )
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.organization = organization
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.parallel_tool_calls = parallel_tool_calls
        self.strict_tools = strict_tools
        self.timeout_s = timeout_s
        self.retry = retry
        self._transport = transport
        self._extra_headers = dict(extra_headers or {})
        self._clients = LoopClients(
            lambda: httpx.AsyncClient(transport=self._transport, timeout=httpx.Timeout(self.timeout_s))
        )

    def __repr__(self) -> str:
        return f"OpenAiChatModel(model={self.model!r}, base_url={self.base_url!r})"

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """The whole answer to `request`, from one POST to `/chat/completions`."""
        aliases = tool_aliases(request.tool_specifications)
        body = self._body(request, aliases)
        started = time.perf_counter()
        self._log_request(body)
        try:
            data = await post_json(self._endpoint(), body)
            response = parse_response(data, aliases)
        except ModelError as exc:
            self._scrub(exc)
            raise
        self._log_response(response, started)
        return response

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatEvent]:
        """The answer to `request` as events, ending with one `CompleteResponse`."""
        aliases = tool_aliases(request.tool_specifications)
        body = self._body(request, aliases)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        started = time.perf_counter()
        self._log_request(body)
        assembler = StreamAssembler(aliases)
        try:
            events = post_stream(self._endpoint(), body)
            async with aclosing(events):
                async for _event, data in events:
                    if data.strip() == "[DONE]":
                        break
                    for event in assembler.feed(loads(data, PROVIDER)):
                        yield event
            for event in assembler.finish():
                yield event
        except ModelError as exc:
            self._scrub(exc)
            raise
        response = assembler.response()
        self._log_response(response, started)
        yield CompleteResponse(response)

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop (clients of finished loops are dropped)."""
        await self._clients.aclose()

    async def __aenter__(self) -> OpenAiChatModel:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _client(self) -> httpx.AsyncClient:
        return self._clients.current()

    def _endpoint(self) -> Endpoint:
        return Endpoint(self._client(), self._url, self._headers(), PROVIDER, self.retry)

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        if self.organization is not None:
            headers["OpenAI-Organization"] = self.organization
        headers.update(self._extra_headers)
        return headers

    def _body(self, request: ChatRequest, aliases: ToolNameAliases) -> dict[str, Any]:
        reserved = RESERVED & request.parameters.keys()
        if reserved:
            raise ValueError(
                f"ChatRequest.parameters cannot set {sorted(reserved)}: they are built from the request"
            )
        body: dict[str, Any] = {"model": self.model, "messages": wire_messages(request.messages, aliases)}
        # OpenAI rejects tool_choice and parallel_tool_calls when no tools are given.
        if request.tool_specifications:
            body["tools"] = [
                wire_tool(spec, aliases, self.strict_tools) for spec in request.tool_specifications
            ]
            if request.tool_choice is not None:
                body["tool_choice"] = request.tool_choice.value.lower()
            if self.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = self.parallel_tool_calls
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            # `max_tokens` is deprecated in the API in favour of `max_completion_tokens`.
            body["max_completion_tokens"] = self.max_tokens
        body.update(request.parameters)
        return body

    def _scrub(self, exc: ModelError) -> None:
        """Mask the key in an error's message (a compatible server may echo the header back)."""
        key = self._api_key
        if key and any(key in str(arg) for arg in exc.args):
            exc.args = tuple(str(arg).replace(key, "***") for arg in exc.args)

    def _log_request(self, body: Mapping[str, Any]) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s request to %s: model=%s messages=%d tools=%d stream=%s headers=%s",
                PROVIDER,
                self._url,
                body.get("model"),
                len(body["messages"]),
                len(body.get("tools", ())),
                bool(body.get("stream")),
                redact_headers(self._headers()),
            )

    def _log_response(self, response: ChatResponse, started: float) -> None:
        usage = response.token_usage or TokenUsage()
        log.info(
            "%s %s: model=%s finish=%s tool_calls=%d tokens=%s/%s in %.0f ms",
            PROVIDER,
            response.id,
            response.model_name,
            response.finish_reason,
            len(response.ai_message.tool_execution_requests),
            usage.input_tokens,
            usage.output_tokens,
            (time.perf_counter() - started) * 1000,
        )
