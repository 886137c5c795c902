"""OpenAI's chat-completions wire format: requests from messages and tools, answers and streamed
chunks back into toolfleet's types (name aliases and generated call ids included)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import ModelError, ModelResponseError, UnsupportedContentError
from orchestrator.messages import (
    AiMessage,
    ChatMessage,
    SystemMessage,
    ToolExecutionResultMessage,
    UserMessage,
)
from orchestrator.models.base import (
    ChatEvent,
    ChatResponse,
    CompleteToolCall,
    FinishReason,
    PartialResponse,
    PartialToolCall,
    TokenUsage,
)
from workers.contents import Content, ImageContent, TextContent
from workers.protocol import ToolExecutionRequest
from workers.tools.specification import ToolNameAliases, ToolSpecification, strict_schema

__all__ = [
    "OPENAI_BASE_URL",
    "PROVIDER",
    "RESERVED",
    "StreamAssembler",
    "parse_response",
    "tool_aliases",
    "wire_messages",
    "wire_tool",
]

log = logging.getLogger(__name__)

PROVIDER = "OpenAI"
OPENAI_BASE_URL = "https://api.openai.com/v1"
# Keys a request builds itself; `ChatRequest.parameters` may override anything else.
RESERVED = frozenset({"messages", "tools", "stream", "stream_options"})
_FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_EXECUTION,
    "function_call": FinishReason.TOOL_EXECUTION,
    "content_filter": FinishReason.CONTENT_FILTER,
}


def tool_aliases(specifications: Iterable[ToolSpecification]) -> ToolNameAliases:
    return ToolNameAliases(spec.name for spec in specifications)


def _stable_id(index: int, name: str, arguments: str) -> str:
    """The id of a tool call the provider sent without one: the same call always gets the same id."""
    digest = hashlib.sha256(f"{name}\0{arguments}".encode()).hexdigest()[:16]
    return f"call_{index}_{digest}"


# ---- requests ---------------------------------------------------------------------------------------


def wire_messages(messages: Iterable[ChatMessage], aliases: ToolNameAliases) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    # Calls of the last AI message that had no id, so their results (also without id) can be paired.
    unanswered: list[tuple[str, str]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            out.append({"role": "system", "content": message.text})
        elif isinstance(message, UserMessage):
            out.append(_user_message(message))
        elif isinstance(message, AiMessage):
            out.append(_assistant_message(message, aliases, unanswered))
        else:
            out.append(_tool_message(message, unanswered))
    return out


def _user_message(message: UserMessage) -> dict[str, Any]:
    result: dict[str, Any] = {"role": "user"}
    if not message.contents:
        result["content"] = message.text or ""
    else:
        parts = [{"type": "text", "text": message.text}] if message.text else []
        parts += [_content_part(content) for content in message.contents]
        result["content"] = parts
    if message.name is not None:
        result["name"] = message.name
    return result


def _content_part(content: Content) -> dict[str, Any]:
    if isinstance(content, TextContent):
        return {"type": "text", "text": content.text}
    image = content.image
    url = image.url if image.url is not None else f"data:{image.mime_type};base64,{image.base64_data}"
    return {"type": "image_url", "image_url": {"url": url, "detail": content.detail}}


def _assistant_message(
    message: AiMessage, aliases: ToolNameAliases, unanswered: list[tuple[str, str]]
) -> dict[str, Any]:
    calls = message.tool_execution_requests
    unanswered.clear()
    tool_calls = []
    for index, call in enumerate(calls):
        call_id = call.id
        if call_id is None:
            call_id = _stable_id(index, call.name, call.arguments)
            unanswered.append((call.name, call_id))
        function = {"name": aliases.alias(call.name), "arguments": call.arguments or "{}"}
        tool_calls.append({"id": call_id, "type": "function", "function": function})
    # OpenAI wants content null (not "") beside tool calls, and rejects an empty tool_calls array.
    result: dict[str, Any] = {"role": "assistant", "content": message.text or (None if calls else "")}
    if tool_calls:
        result["tool_calls"] = tool_calls
    return result


def _tool_message(message: ToolExecutionResultMessage, unanswered: list[tuple[str, str]]) -> dict[str, Any]:
    contents = message.contents or ()
    if any(isinstance(content, ImageContent) for content in contents):
        raise UnsupportedContentError(
            f"{PROVIDER} cannot carry images in tool results: the result of tool '{message.tool_name}' "
            f"(call {message.id}) holds an image. Return text from the tool, or use a model whose "
            "supports_tool_result_images is True",
            provider=PROVIDER,
        )
    call_id = message.id
    if call_id is None:
        match = next((pair for pair in unanswered if pair[0] == message.tool_name), None)
        if match is None:
            raise ModelError(
                f"The result of tool '{message.tool_name}' has no call id and matches no earlier tool call",
                provider=PROVIDER,
            )
        unanswered.remove(match)
        call_id = match[1]
    text = message.text
    if not text and contents:
        text = "\n".join(content.text for content in contents if isinstance(content, TextContent))
    # OpenAI has no error flag on tool messages: an error result is sent as its text.
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def wire_tool(spec: ToolSpecification, aliases: ToolNameAliases, strict: bool) -> dict[str, Any]:
    parameters: dict[str, Any] = dict(spec.parameters or {})
    parameters.setdefault("type", "object")
    if parameters["type"] == "object":
        parameters.setdefault("properties", {})
    function: dict[str, Any] = {"name": aliases.alias(spec.name)}
    if spec.description is not None:
        function["description"] = spec.description
    if strict:
        function["parameters"] = strict_schema(parameters)
        function["strict"] = True
    else:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


# ---- responses --------------------------------------------------------------------------------------


def _raise_if_error(data: Mapping[str, Any]) -> None:
    error = data.get("error")
    if error:
        message = error.get("message") if isinstance(error, Mapping) else error
        raise ModelError(f"{PROVIDER} answered with an error: {message or error}", provider=PROVIDER)


def parse_response(data: Mapping[str, Any], aliases: ToolNameAliases) -> ChatResponse:
    _raise_if_error(data)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise ModelResponseError(f"{PROVIDER} answered without choices", provider=PROVIDER)
    message = choices[0].get("message") or {}
    requests = [
        _tool_request(index, call, aliases)
        for index, call in enumerate(message.get("tool_calls") or [])
        if call.get("type", "function") == "function"
    ]
    return ChatResponse(
        ai_message=AiMessage(text=_text(message), tool_execution_requests=requests),
        finish_reason=_finish_reason(choices[0].get("finish_reason")),
        token_usage=_usage(data.get("usage")),
        model_name=data.get("model"),
        id=data.get("id"),
    )


def _text(message: Mapping[str, Any]) -> str | None:
    content = message.get("content")
    if isinstance(content, list):  # some compatible servers answer with content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    # A refusal is the model's answer too; without it the caller would see an empty message.
    return content or message.get("refusal") or None


def _tool_request(index: int, call: Mapping[str, Any], aliases: ToolNameAliases) -> ToolExecutionRequest:
    function = call.get("function") or {}
    name = aliases.original(function.get("name") or "")
    arguments = _arguments_text(function.get("arguments"))
    return ToolExecutionRequest(
        id=call.get("id") or _stable_id(index, name, arguments), name=name, arguments=arguments
    )


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    # Some compatible servers send the arguments as an object instead of JSON text.
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _finish_reason(value: Any) -> FinishReason | None:
    if value is None:
        return None
    return _FINISH_REASONS.get(str(value), FinishReason.OTHER)


def _usage(usage: Any) -> TokenUsage | None:
    if not isinstance(usage, Mapping):
        return None
    return TokenUsage(usage.get("prompt_tokens"), usage.get("completion_tokens"))


@dataclass
class _StreamedCall:
    index: int
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)
    request: ToolExecutionRequest | None = None  # set once the call is complete


class StreamAssembler:
    """Builds the answer from stream chunks; tool-call deltas are assembled by index.

    A call is complete when a later index has started and its arguments parse as JSON (so calls whose
    deltas interleave are not cut short), and at the latest when the choice finishes.
    """

    def __init__(self, aliases: ToolNameAliases) -> None:
        self._aliases = aliases
        self._text: list[str] = []
        self._calls: dict[int, _StreamedCall] = {}
        self._last_index: int | None = None  # the call the latest delta went to
        self._finish_reason: FinishReason | None = None
        self._usage: TokenUsage | None = None
        self._model: str | None = None
        self._id: str | None = None

    def feed(self, chunk: Any) -> list[ChatEvent]:
        if not isinstance(chunk, Mapping):
            raise ModelResponseError(f"{PROVIDER} streamed a chunk that is not an object", provider=PROVIDER)
        _raise_if_error(chunk)
        self._id = chunk.get("id") or self._id
        self._model = chunk.get("model") or self._model
        self._usage = _usage(chunk.get("usage")) or self._usage
        events: list[ChatEvent] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text.append(content)
                events.append(PartialResponse(content))
            for tool_delta in delta.get("tool_calls") or []:
                events += self._tool_delta(tool_delta)
            if choice.get("finish_reason"):
                self._finish_reason = _finish_reason(choice["finish_reason"])
                events += self.finish()
        return events

    def finish(self) -> list[ChatEvent]:
        """Complete every call still open (at the finish reason, or when the stream ends without one)."""
        return [self._complete(call) for _, call in sorted(self._calls.items()) if call.request is None]

    def response(self) -> ChatResponse:
        requests = [call.request for _, call in sorted(self._calls.items()) if call.request is not None]
        return ChatResponse(
            ai_message=AiMessage(text="".join(self._text) or None, tool_execution_requests=requests),
            finish_reason=self._finish_reason,
            token_usage=self._usage,
            model_name=self._model,
            id=self._id,
        )

    def _tool_delta(self, delta: Mapping[str, Any]) -> list[ChatEvent]:
        function = delta.get("function") or {}
        call_id, name = delta.get("id") or None, function.get("name") or None
        arguments = _arguments_text(function.get("arguments"))
        index = delta.get("index")
        if not isinstance(index, int):  # compatible servers may leave it out: a new id or name starts a call
            current = self._calls.get(self._last_index) if self._last_index is not None else None
            if current is None or (name and current.name) or (call_id and current.id not in (None, call_id)):
                index = max(self._calls, default=-1) + 1
            else:
                index = current.index
        started_new = index not in self._calls and index > max(self._calls, default=-1)
        call = self._calls.setdefault(index, _StreamedCall(index))
        self._last_index = index
        if call.request is not None:
            if arguments.strip():
                raise ModelResponseError(
                    f"{PROVIDER} streamed more arguments for tool call {index} after they were complete",
                    provider=PROVIDER,
                )
            return []
        call.id = call.id or call_id
        if name is not None and call.name != name:
            call.name = name if call.name is None else call.name + name
        call.arguments.append(arguments)
        events: list[ChatEvent] = []
        if started_new:
            events += [self._complete(c) for i, c in sorted(self._calls.items()) if i < index and _done(c)]
        if not (call_id or name or arguments):
            return events
        original = self._aliases.original(call.name) if call.name is not None else None
        events.append(PartialToolCall(index=index, id=call.id, name=original, partial_arguments=arguments))
        if index < max(self._calls) and _done(call):
            events.append(self._complete(call))
        return events

    def _complete(self, call: _StreamedCall) -> CompleteToolCall:
        name = self._aliases.original(call.name or "")
        arguments = "".join(call.arguments)
        call.request = ToolExecutionRequest(
            id=call.id or _stable_id(call.index, name, arguments), name=name, arguments=arguments
        )
        return CompleteToolCall(index=call.index, request=call.request)


def _done(call: _StreamedCall) -> bool:
    """Whether an open call's arguments so far are a whole JSON value (blank is not: more may follow)."""
    if call.request is not None:
        return False
    text = "".join(call.arguments)
    if not text.strip():
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
