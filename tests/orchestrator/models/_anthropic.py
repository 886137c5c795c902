"""What every Anthropic test shares: the recorded tools and the model on a recording transport."""

from __future__ import annotations

from typing import Any

import httpx

from orchestrator.messages import ChatMessage
from orchestrator.models._http import RetryPolicy
from orchestrator.models.anthropic import AnthropicChatModel
from orchestrator.models.base import ChatRequest
from tests.orchestrator.models._harness import Recorder
from workers.tools.specification import ToolSpecification

KEY = "sk-ant-api03-SECRET-do-not-leak-0123456789"
MODEL = "claude-sonnet-4-20250514"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

WEATHER = ToolSpecification(
    name="get_weather",
    description="Get the current weather in a given location",
    parameters={
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["location"],
    },
)
CAMERA = ToolSpecification(name="camera_snapshot", description="Take a snapshot of the traffic camera")


def make_model(server: Recorder, **options: Any) -> AnthropicChatModel:
    options.setdefault("retry", RetryPolicy(backoff_s=0.001))
    return AnthropicChatModel(MODEL, api_key=KEY, transport=httpx.MockTransport(server), **options)


def ask(*messages: ChatMessage, **options: Any) -> ChatRequest:
    return ChatRequest(messages=list(messages), **options)
