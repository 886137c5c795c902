"""The conversation: system, user, AI and tool-result messages, with their JSON form."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from workers.contents import Content, Image, ImageContent, TextContent, content_from_json, content_to_json
from workers.protocol import ToolExecutionRequest

__all__ = [
    "AiMessage",
    "ChatMessage",
    "SystemMessage",
    "ToolExecutionResultMessage",
    "UserMessage",
    "message_from_json",
    "message_to_json",
    "messages_from_json",
    "messages_to_json",
]


@dataclass(frozen=True)
class SystemMessage:
    """Instructions for the model; kept at the start of the conversation."""

    text: str


@dataclass(frozen=True)
class UserMessage:
    """What the user said: text, and optionally images (as `contents`)."""

    text: str | None = None
    contents: tuple[Content, ...] = ()
    name: str | None = None

    @classmethod
    def of(cls, text: str | None = None, *images: Image | ImageContent) -> UserMessage:
        """A user message with text and images: `UserMessage.of("What is this?", Image(url=...))`."""
        parts = tuple(ImageContent(i) if isinstance(i, Image) else i for i in images)
        return cls(text=text, contents=parts)

    @property
    def single_text(self) -> str:
        """The text of the message, text contents included."""
        texts = [self.text] if self.text else []
        texts += [c.text for c in self.contents if isinstance(c, TextContent)]
        return "\n".join(texts)

    @property
    def has_images(self) -> bool:
        return any(isinstance(c, ImageContent) for c in self.contents)


@dataclass(frozen=True)
class AiMessage:
    """The model's answer: text, tool calls, or both."""

    text: str | None = None
    tool_execution_requests: list[ToolExecutionRequest] = field(default_factory=list)

    @property
    def has_tool_execution_requests(self) -> bool:
        return bool(self.tool_execution_requests)


@dataclass(frozen=True)
class ToolExecutionResultMessage:
    """The result of one tool call, sent back to the model.

    `text` is what the model reads; `contents` carries multimodal parts; `is_error` marks a failed
    call; `attributes` stay in memory and are never sent to the model.
    """

    id: str | None
    tool_name: str
    text: str
    contents: tuple[Content, ...] | None = None
    is_error: bool = False
    attributes: Mapping[str, Any] = field(default_factory=dict)


ChatMessage: TypeAlias = SystemMessage | UserMessage | AiMessage | ToolExecutionResultMessage


def message_to_json(message: ChatMessage) -> dict[str, Any]:
    """The JSON form of a message, tagged by `type`."""
    if isinstance(message, SystemMessage):
        return {"type": "system", "text": message.text}
    if isinstance(message, UserMessage):
        data: dict[str, Any] = {"type": "user", "text": message.text}
        if message.contents:
            data["contents"] = [content_to_json(c) for c in message.contents]
        if message.name is not None:
            data["name"] = message.name
        return data
    if isinstance(message, AiMessage):
        return {
            "type": "ai",
            "text": message.text,
            "tool_execution_requests": [r.to_json() for r in message.tool_execution_requests],
        }
    result: dict[str, Any] = {
        "type": "tool_result",
        "id": message.id,
        "tool_name": message.tool_name,
        "text": message.text,
        "is_error": message.is_error,
    }
    if message.contents is not None:
        result["contents"] = [content_to_json(c) for c in message.contents]
    if message.attributes:
        result["attributes"] = dict(message.attributes)
    return result


def message_from_json(data: Mapping[str, Any]) -> ChatMessage:
    """Inverse of `message_to_json`."""
    kind = data.get("type")
    if kind == "system":
        return SystemMessage(str(data["text"]))
    if kind == "user":
        return UserMessage(
            text=data.get("text"),
            contents=tuple(content_from_json(c) for c in data.get("contents", [])),
            name=data.get("name"),
        )
    if kind == "ai":
        return AiMessage(
            text=data.get("text"),
            tool_execution_requests=[
                ToolExecutionRequest.from_json(r) for r in data.get("tool_execution_requests", [])
            ],
        )
    if kind == "tool_result":
        contents = data.get("contents")
        return ToolExecutionResultMessage(
            id=data.get("id"),
            tool_name=str(data["tool_name"]),
            text=str(data["text"]),
            contents=tuple(content_from_json(c) for c in contents) if contents is not None else None,
            is_error=bool(data.get("is_error", False)),
            attributes=dict(data.get("attributes") or {}),
        )
    raise ValueError(f"Unknown message type: {kind!r}")


def messages_to_json(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
    return [message_to_json(m) for m in messages]


def messages_from_json(data: Iterable[Mapping[str, Any]]) -> list[ChatMessage]:
    return [message_from_json(m) for m in data]
