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

import asyncio
import contextlib
import json
import logging
import os
import re
import time
import weakref
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from orchestrator.errors import (
    ModelAuthenticationError,
    ModelError,
    ModelInvalidRequestError,
    ModelRateLimitError,
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
from orchestrator.models._http import RetryPolicy, loads, post_json, post_stream
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
from workers.contents import Content, Image, ImageContent, TextContent
from workers.protocol import ToolExecutionRequest
from workers.specification import ToolNameAliases, ToolSpecification

__all__ = ["ANTHROPIC_TOOL_NAME", "AnthropicChatModel"]

log = logging.getLogger(__name__)

PROVIDER = "Anthropic"
ANTHROPIC_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""Tool names Anthropic accepts; others are aliased."""

_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_RESERVED = frozenset({"model", "messages", "system", "tools", "tool_choice", "stream"})
_FINISH = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_EXECUTION,
    "refusal": FinishReason.CONTENT_FILTER,
}
_STREAM_ERRORS: dict[str, type[ModelError]] = {
    "authentication_error": ModelAuthenticationError,
    "permission_error": ModelAuthenticationError,
    "invalid_request_error": ModelInvalidRequestError,
    "rate_limit_error": ModelRateLimitError,
    "api_error": ModelServerError,
    "overloaded_error": ModelServerError,
}


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
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"AnthropicChatModel(model={self.model!r}, base_url={self.base_url!r})"

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """The whole answer to `request`."""
        body, aliases = self._body(request, stream=False)
        started = time.perf_counter()
        data = await post_json(
            self._client(), self._url, body, headers=self._headers(), provider=PROVIDER, policy=self.retry
        )
        response = _parse_response(data, aliases)
        _log_call(response, started)
        return response

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatEvent]:
        """The answer as events; each tool call is complete at its block's end, before the message's."""
        body, aliases = self._body(request, stream=True)
        started = time.perf_counter()
        state = _StreamState(aliases)
        events = post_stream(
            self._client(), self._url, body, headers=self._headers(), provider=PROVIDER, policy=self.retry
        )
        # Closed at once, also when the consumer stops early or an event raises: frees the connection.
        async with contextlib.aclosing(events):
            async for name, data in events:
                for event in state.feed(name, loads(data, PROVIDER)):
                    yield event
        response = state.finish()
        _log_call(response, started)
        yield CompleteResponse(response)

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop (a new one is made if the model is used again)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    @property
    def _url(self) -> str:
        return f"{self.base_url}/v1/messages"

    def _headers(self) -> dict[str, str]:
        return {"x-api-key": self._api_key.reveal(), "anthropic-version": self.anthropic_version}

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            client = httpx.AsyncClient(transport=self._transport, timeout=self.timeout_s)
            self._clients[loop] = client
        return client

    def _body(self, request: ChatRequest, *, stream: bool) -> tuple[dict[str, Any], ToolNameAliases]:
        specs = request.tool_specifications
        aliases = ToolNameAliases((s.name for s in specs), pattern=ANTHROPIC_TOOL_NAME)
        system, messages = _messages(request.messages, aliases)
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens}
        if system:
            body["system"] = system
        body["messages"] = messages
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if specs:
            body["tools"] = [_tool(s, aliases) for s in specs]
            choice = _tool_choice(request.tool_choice, self.parallel_tool_calls)
            if choice is not None:
                body["tool_choice"] = choice
        elif request.tool_choice is ToolChoice.REQUIRED:
            raise ModelInvalidRequestError(
                "tool_choice REQUIRED needs at least one tool specification", provider=PROVIDER
            )
        reserved = _RESERVED.intersection(request.parameters)
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


def _messages(
    messages: Iterable[ChatMessage], aliases: ToolNameAliases
) -> tuple[str | None, list[dict[str, Any]]]:
    """`system` text and the alternating user/assistant turns."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            if message.text:
                system.append(message.text)
            continue
        if isinstance(message, UserMessage):
            role, blocks = "user", _user_blocks(message)
        elif isinstance(message, AiMessage):
            role, blocks = "assistant", _ai_blocks(message, aliases)
        else:
            role, blocks = "user", [_tool_result(message)]
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return ("\n\n".join(system) or None), turns


def _user_blocks(message: UserMessage) -> list[dict[str, Any]]:
    blocks = [_text(message.text)] if message.text else []
    blocks += [_content(c) for c in message.contents if not (isinstance(c, TextContent) and not c.text)]
    if not blocks:
        raise ModelInvalidRequestError("Anthropic cannot send an empty user message", provider=PROVIDER)
    return blocks


def _ai_blocks(message: AiMessage, aliases: ToolNameAliases) -> list[dict[str, Any]]:
    blocks = [_text(message.text)] if message.text else []
    for call in message.tool_execution_requests:
        blocks.append(
            {
                "type": "tool_use",
                "id": _require_id(call.id, f"tool call '{call.name}'"),
                "name": aliases.alias(call.name),
                "input": _input(call.arguments),
            }
        )
    return blocks


def _tool_result(message: ToolExecutionResultMessage) -> dict[str, Any]:
    contents = message.contents or ()
    content: str | list[dict[str, Any]] = message.text
    if any(isinstance(c, ImageContent) for c in contents):
        content = [_content(c) for c in contents if not (isinstance(c, TextContent) and not c.text)]
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": _require_id(message.id, f"result of tool '{message.tool_name}'"),
        "content": content,
    }
    if message.is_error:
        block["is_error"] = True
    return block


def _require_id(tool_call_id: str | None, what: str) -> str:
    if not tool_call_id:
        raise ModelInvalidRequestError(f"Anthropic needs an id for the {what}", provider=PROVIDER)
    return tool_call_id


def _input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as the `input` object; unreadable text is kept as `_raw_arguments`."""
    if not arguments.strip():
        return {}
    try:
        parsed: Any = json.loads(arguments)
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"_raw_arguments": arguments}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _content(content: Content) -> dict[str, Any]:
    if isinstance(content, TextContent):
        return _text(content.text)
    return {"type": "image", "source": _image_source(content.image)}


def _image_source(image: Image) -> dict[str, Any]:
    data, mime = image.base64_data, image.mime_type
    if image.url is not None:
        if not image.url.startswith("data:"):
            return {"type": "url", "url": image.url}
        header, _, data = image.url.partition(",")
        mime = header[len("data:") :].split(";")[0]
        if ";base64" not in header:
            raise UnsupportedContentError(
                "Anthropic accepts data URLs only in base64 form", provider=PROVIDER
            )
    if mime not in _IMAGE_TYPES:
        raise UnsupportedContentError(
            f"Anthropic does not accept images of type {mime!r}; it takes {', '.join(sorted(_IMAGE_TYPES))}",
            provider=PROVIDER,
        )
    return {"type": "base64", "media_type": mime, "data": data}


def _tool(spec: ToolSpecification, aliases: ToolNameAliases) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": aliases.alias(spec.name)}
    if spec.description is not None:
        tool["description"] = spec.description
    tool["input_schema"] = spec.parameters or {"type": "object", "properties": {}}
    return tool


def _tool_choice(choice: ToolChoice | None, parallel_tool_calls: bool | None) -> dict[str, Any] | None:
    if choice is ToolChoice.NONE:
        return {"type": "none"}
    if choice is None and parallel_tool_calls is not False:
        return None
    result: dict[str, Any] = {"type": "any" if choice is ToolChoice.REQUIRED else "auto"}
    if parallel_tool_calls is False:
        result["disable_parallel_tool_use"] = True
    return result


# --- response --------------------------------------------------------------------------------------


def _parse_response(data: dict[str, Any], aliases: ToolNameAliases) -> ChatResponse:
    content = data.get("content")
    if not isinstance(content, list):
        raise ModelResponseError(
            f"Anthropic answered without a content list: {str(data)[:300]}", provider=PROVIDER
        )
    texts: list[str] = []
    calls: list[ToolExecutionRequest] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append(
                _call(block.get("id"), block.get("name"), aliases, _compact(block.get("input") or {}))
            )
    usage = data.get("usage") or {}
    return ChatResponse(
        ai_message=AiMessage(text="".join(texts) or None, tool_execution_requests=calls),
        finish_reason=_finish(data.get("stop_reason")),
        token_usage=TokenUsage(_input_tokens(usage), usage.get("output_tokens")),
        model_name=data.get("model"),
        id=data.get("id"),
    )


def _call(call_id: Any, name: Any, aliases: ToolNameAliases, arguments: str) -> ToolExecutionRequest:
    return ToolExecutionRequest(id=call_id, name=aliases.original(str(name)), arguments=arguments)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _input_tokens(usage: dict[str, Any]) -> int | None:
    """All input tokens: uncached, written to the cache, and read from it."""
    parts = [usage.get(k) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    counted = [p for p in parts if isinstance(p, int)]
    return sum(counted) if counted else None


def _finish(stop_reason: Any) -> FinishReason | None:
    if stop_reason is None:
        return None
    return _FINISH.get(str(stop_reason), FinishReason.OTHER)


def _log_call(response: ChatResponse, started: float) -> None:
    log.info(
        "%s %s: id=%s finish=%s tool_calls=%d in %.0f ms",
        PROVIDER,
        response.model_name,
        response.id,
        response.finish_reason,
        len(response.ai_message.tool_execution_requests),
        (time.perf_counter() - started) * 1000,
    )


@dataclass
class _ToolBlock:
    position: int
    id: str | None
    name: str
    start_input: Any
    parts: list[str] = field(default_factory=list)


class _StreamState:
    """Folds Anthropic's stream events into `ChatEvent`s and the final response."""

    def __init__(self, aliases: ToolNameAliases) -> None:
        self.aliases = aliases
        self.stopped = False
        self.message_id: str | None = None
        self.model: str | None = None
        self.stop_reason: Any = None
        self.usage: dict[str, Any] = {}
        self.texts: list[str] = []
        self.calls: list[ToolExecutionRequest] = []
        self.tools: dict[int, _ToolBlock] = {}
        self.tool_count = 0

    def feed(self, name: str | None, payload: Any) -> list[ChatEvent]:
        if not isinstance(payload, dict):
            raise ModelResponseError(f"Anthropic streamed a non-object event: {payload!r}", provider=PROVIDER)
        kind = payload.get("type") or name
        if kind == "message_start":
            message = payload.get("message") or {}
            self.message_id, self.model = message.get("id"), message.get("model")
            self.usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            return self._block_start(payload.get("index"), payload.get("content_block") or {})
        elif kind == "content_block_delta":
            return self._delta(payload.get("index"), payload.get("delta") or {})
        elif kind == "content_block_stop":
            return self._block_stop(payload.get("index"))
        elif kind == "message_delta":
            self.stop_reason = (payload.get("delta") or {}).get("stop_reason", self.stop_reason)
            self.usage.update(payload.get("usage") or {})  # cumulative counts: the latest wins
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            raise _stream_error(payload)
        return []  # ping, and event types added later

    def _block_start(self, index: Any, block: dict[str, Any]) -> list[ChatEvent]:
        if block.get("type") == "tool_use":
            self.tools[index] = _ToolBlock(
                self.tool_count, block.get("id"), str(block.get("name")), block.get("input")
            )
            self.tool_count += 1
        elif block.get("type") == "text" and block.get("text"):
            self.texts.append(block["text"])
            return [PartialResponse(block["text"])]
        return []

    def _delta(self, index: Any, delta: dict[str, Any]) -> list[ChatEvent]:
        if delta.get("type") == "text_delta" and delta.get("text"):
            self.texts.append(delta["text"])
            return [PartialResponse(delta["text"])]
        tool = self.tools.get(index)
        if delta.get("type") == "input_json_delta" and tool is not None and delta.get("partial_json"):
            tool.parts.append(delta["partial_json"])
            name = self.aliases.original(tool.name)
            return [PartialToolCall(tool.position, tool.id, name, delta["partial_json"])]
        return []

    def _block_stop(self, index: Any) -> list[ChatEvent]:
        tool = self.tools.pop(index, None)
        if tool is None:
            return []
        call = _call(tool.id, tool.name, self.aliases, _arguments(tool))
        self.calls.append(call)
        return [CompleteToolCall(tool.position, call)]

    def finish(self) -> ChatResponse:
        if not self.stopped:
            raise ModelResponseError("Anthropic's stream ended before message_stop", provider=PROVIDER)
        return ChatResponse(
            ai_message=AiMessage(text="".join(self.texts) or None, tool_execution_requests=self.calls),
            finish_reason=_finish(self.stop_reason),
            token_usage=TokenUsage(_input_tokens(self.usage), self.usage.get("output_tokens")),
            model_name=self.model,
            id=self.message_id,
        )


def _arguments(tool: _ToolBlock) -> str:
    """The streamed input as compact JSON; text that does not parse is kept as is for the binder."""
    text = "".join(tool.parts)
    if not text.strip():
        return _compact(tool.start_input or {})
    try:
        return _compact(json.loads(text))
    except ValueError:
        return text


def _stream_error(payload: dict[str, Any]) -> ModelError:
    error = payload.get("error") or {}
    kind = str(error.get("type", "error"))
    message = error.get("message") or "unknown error"
    return _STREAM_ERRORS.get(kind, ModelError)(
        f"{PROVIDER} streamed an error ({kind}): {message}", provider=PROVIDER
    )
