"""Anthropic's Messages API wire format: requests from messages and tools, answers and streamed
events back into toolfleet's types (name aliases included)."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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
from orchestrator.models.base import (
    ChatEvent,
    ChatResponse,
    CompleteToolCall,
    FinishReason,
    PartialResponse,
    PartialToolCall,
    TokenUsage,
    ToolChoice,
)
from workers.contents import Content, Image, ImageContent, TextContent
from workers.protocol import ToolExecutionRequest
from workers.tools.specification import ToolNameAliases, ToolSpecification

__all__ = [
    "ANTHROPIC_TOOL_NAME",
    "PROVIDER",
    "RESERVED",
    "StreamState",
    "log_call",
    "parse_response",
    "wire_messages",
    "wire_tool",
    "wire_tool_choice",
]

log = logging.getLogger(__name__)

PROVIDER = "Anthropic"
ANTHROPIC_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""Tool names Anthropic accepts; others are aliased."""

_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
RESERVED = frozenset({"model", "messages", "system", "tools", "tool_choice", "stream"})
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


def wire_messages(
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


def wire_tool(spec: ToolSpecification, aliases: ToolNameAliases) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": aliases.alias(spec.name)}
    if spec.description is not None:
        tool["description"] = spec.description
    tool["input_schema"] = spec.parameters or {"type": "object", "properties": {}}
    return tool


def wire_tool_choice(choice: ToolChoice | None, parallel_tool_calls: bool | None) -> dict[str, Any] | None:
    if choice is ToolChoice.NONE:
        return {"type": "none"}
    if choice is None and parallel_tool_calls is not False:
        return None
    result: dict[str, Any] = {"type": "any" if choice is ToolChoice.REQUIRED else "auto"}
    if parallel_tool_calls is False:
        result["disable_parallel_tool_use"] = True
    return result


# --- response --------------------------------------------------------------------------------------


def parse_response(data: dict[str, Any], aliases: ToolNameAliases) -> ChatResponse:
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


def log_call(response: ChatResponse, started: float) -> None:
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


class StreamState:
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
