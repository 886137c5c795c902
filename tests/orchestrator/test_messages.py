"""The conversation's JSON form: every message type survives `message_to_json` → JSON text →
`message_from_json` unchanged, and the stored shape is pinned where memory stores depend on it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.messages import (
    AiMessage,
    ChatMessage,
    SystemMessage,
    ToolExecutionResultMessage,
    UserMessage,
    message_from_json,
    message_to_json,
    messages_from_json,
    messages_to_json,
)
from workers.contents import Image, ImageContent, TextContent
from workers.protocol import ToolExecutionRequest

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

MESSAGES: dict[str, ChatMessage] = {
    "system": SystemMessage("You are a helpful bank assistant."),
    "system-unicode": SystemMessage('Réponds en français ✓ "quoted" \\ back\nslash'),
    "user-text": UserMessage("Transfer 100 to Dmytro"),
    "user-named": UserMessage("hi", name="mario"),
    "user-image-url": UserMessage.of("What is this?", Image(url="https://example.com/cat.png")),
    "user-images-mixed": UserMessage(
        text="Compare these",
        contents=(
            TextContent("first, then second"),
            ImageContent(Image(base64_data=PNG, mime_type="image/png"), detail="high"),
            ImageContent(Image(url="https://example.com/b.jpg"), detail="low"),
        ),
        name="dmytro",
    ),
    "user-contents-only": UserMessage(contents=(ImageContent(Image(url="https://example.com/x.png")),)),
    "ai-text": AiMessage("Transfer complete"),
    "ai-empty": AiMessage(),
    "ai-tool-calls": AiMessage(
        tool_execution_requests=[
            ToolExecutionRequest("call-1", "credit", '{"name": "Dmytro", "amount": 100}'),
            ToolExecutionRequest("call-2", "debit", '{"name": "Mario", "amount": 100}'),
        ]
    ),
    "ai-text-and-tool-calls": AiMessage(
        "Let me check the weather first.",
        [ToolExecutionRequest("c", "get_weather", '{"city": "München"}')],
    ),
    "ai-tool-call-without-id": AiMessage(tool_execution_requests=[ToolExecutionRequest(None, "now", "")]),
    "tool-result": ToolExecutionResultMessage("call-1", "credit", "Success"),
    "tool-result-no-id": ToolExecutionResultMessage(None, "now", "12:00"),
    "tool-result-error": ToolExecutionResultMessage("call-2", "debit", "card declined", is_error=True),
    "tool-result-contents": ToolExecutionResultMessage(
        "call-3",
        "picture",
        "a cat",
        contents=(TextContent("a cat"), ImageContent(Image(base64_data=PNG, mime_type="image/png"))),
    ),
    "tool-result-empty-contents": ToolExecutionResultMessage("call-4", "picture", "", contents=()),
    "tool-result-attributes": ToolExecutionResultMessage(
        "call-5",
        "tool_search_tool",
        "Tools found: a, b",
        attributes={"found_tools": ["a", "b"], "nested": {"n": 1, "x": [1.5, None, True]}, "ü": "✓"},
    ),
    "tool-result-everything": ToolExecutionResultMessage(
        "call-6",
        "picture",
        "rolled back",
        contents=(ImageContent(Image(url="https://example.com/p.png"), detail="low"),),
        is_error=True,
        attributes={"source": "tagged", "n": 9007199254740993},
    ),
}


@pytest.mark.parametrize("message", list(MESSAGES.values()), ids=list(MESSAGES))
def test_every_message_survives_a_json_round_trip(message: ChatMessage) -> None:
    # given: a message, turned into its JSON form and then into JSON text (as a store keeps it)
    text = json.dumps(message_to_json(message), ensure_ascii=False)

    # when: it is read back
    restored = message_from_json(json.loads(text))

    # then: it is the same message, of the same type, field by field
    assert type(restored) is type(message)
    assert restored == message
    assert message_to_json(restored) == message_to_json(message)


def test_a_whole_conversation_survives_a_round_trip_in_order() -> None:
    # given
    conversation = list(MESSAGES.values())

    # when
    restored = messages_from_json(json.loads(json.dumps(messages_to_json(conversation))))

    # then
    assert restored == conversation


def test_tool_result_contents_none_and_empty_stay_distinct() -> None:
    # given: a result with no contents, and one with an empty list of contents
    none = ToolExecutionResultMessage("1", "t", "x")
    empty = ToolExecutionResultMessage("1", "t", "x", contents=())

    # when
    restored_none = message_from_json(json.loads(json.dumps(message_to_json(none))))
    restored_empty = message_from_json(json.loads(json.dumps(message_to_json(empty))))

    # then
    assert isinstance(restored_none, ToolExecutionResultMessage)
    assert isinstance(restored_empty, ToolExecutionResultMessage)
    assert restored_none.contents is None
    assert restored_empty.contents == ()


def test_image_user_message_keeps_its_image_details() -> None:
    # given
    message = MESSAGES["user-images-mixed"]

    # when
    restored = message_from_json(json.loads(json.dumps(message_to_json(message))))

    # then: every part is back, with its kind, data, MIME type and detail
    assert isinstance(restored, UserMessage)
    assert restored.has_images
    assert restored.single_text == "Compare these\nfirst, then second"
    text, png, jpg = restored.contents
    assert text == TextContent("first, then second")
    assert isinstance(png, ImageContent) and isinstance(jpg, ImageContent)
    assert (png.image.base64_data, png.image.mime_type, png.detail) == (PNG, "image/png", "high")
    assert (jpg.image.url, jpg.detail) == ("https://example.com/b.jpg", "low")


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (SystemMessage("s"), {"type": "system", "text": "s"}),
        (UserMessage("u"), {"type": "user", "text": "u"}),
        (
            AiMessage("a", [ToolExecutionRequest("1", "t", "{}")]),
            {
                "type": "ai",
                "text": "a",
                "tool_execution_requests": [{"id": "1", "name": "t", "arguments": "{}"}],
            },
        ),
        (
            ToolExecutionResultMessage("1", "t", "r", is_error=True, attributes={"k": "v"}),
            {
                "type": "tool_result",
                "id": "1",
                "tool_name": "t",
                "text": "r",
                "is_error": True,
                "attributes": {"k": "v"},
            },
        ),
    ],
    ids=["system", "user", "ai", "tool-result"],
)
def test_the_stored_shape_is_tagged_by_type(message: ChatMessage, expected: dict[str, Any]) -> None:
    # given / when
    data = message_to_json(message)

    # then: the shape memory stores persist (older rows must stay readable)
    assert data == expected
    assert message_from_json(expected) == message


def test_older_rows_without_optional_fields_are_read_with_defaults() -> None:
    # given: minimal stored forms
    rows = [
        {"type": "user", "text": "hi"},
        {"type": "ai", "text": "hello"},
        {"type": "tool_result", "id": "1", "tool_name": "t", "text": "r"},
    ]

    # when
    restored = messages_from_json(rows)

    # then
    assert restored == [
        UserMessage("hi"),
        AiMessage("hello"),
        ToolExecutionResultMessage("1", "t", "r", contents=None, is_error=False, attributes={}),
    ]


def test_an_unknown_type_is_rejected() -> None:
    # given / when / then
    with pytest.raises(ValueError, match="Unknown message type: 'robot'"):
        message_from_json({"type": "robot", "text": "beep"})
