"""An agent to serve with `toolfleet serve --agent assistant=workers.examples.agents:assistant`.

Its tools are those the live workers serve (the example pools: weather, bank, math, travel), run on
their pools; a batch that fails is compensated, and every invocation is journaled at
`TOOLFLEET_DATABASE_URL`, so a replica that dies has its sagas finished by another.

The model is OpenAI's when `OPENAI_API_KEY` is set, or that of the OpenAI-compatible server at
`OPENAI_BASE_URL` (which may need no key): `OPENAI_MODEL`, by default `gpt-4o-mini`. Without either
a scripted model answers, so that the stack runs with no account: it looks up the weather of the
cities a question names ("What is the weather in Lisbon and Kyiv?") and says what it can do
otherwise.
"""

from __future__ import annotations

import json
import os
import re

from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    OpenAiChatModel,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    send_exception_message_to_llm,
)
from orchestrator.models import ChatModel, ChatRequest

__all__ = ["SYSTEM_MESSAGE", "assistant", "chat_model", "weather_clerk"]

SYSTEM_MESSAGE = (
    "You are toolfleet's example assistant. Use the tools you are given: weather forecasts, bank "
    "accounts (credit, withdraw, balance), arithmetic and travel bookings. Be brief."
)
HELP = (
    "This agent runs a scripted model (set OPENAI_API_KEY for a real one): ask it for the weather, "
    "e.g. 'What is the weather in Lisbon and Kyiv?'"
)
_CITIES = re.compile(r"\bin ((?:[A-Z][\w-]*)(?:(?:,\s*|\s+and\s+)[A-Z][\w-]*)*)")


def weather_clerk(request: ChatRequest) -> AiMessage | str:
    """The scripted model's answer: `get_weather` for each city the question names, then the
    forecasts; for another question, what it can do."""
    results: list[ToolExecutionResultMessage] = []
    for message in reversed(request.messages):
        if not isinstance(message, ToolExecutionResultMessage):
            break
        results.insert(0, message)
    if results:
        return "Forecasts: " + "; ".join(_forecast(result.text) for result in results) + "."
    last = request.messages[-1]
    found = _CITIES.search(last.text or "") if isinstance(last, UserMessage) else None
    if found is None:
        return HELP
    cities = [city for city in re.split(r",\s*|\s+and\s+", found[1]) if city]
    calls = [
        ToolExecutionRequest(f"call_weather_{i}", "get_weather", json.dumps({"city": city}))
        for i, city in enumerate(cities)
    ]
    return AiMessage(tool_execution_requests=calls)


def _forecast(text: str) -> str:
    try:
        forecast = json.loads(text)
        return f"{forecast['city']} {forecast['temperature']}°C {forecast['summary']}"
    except (ValueError, KeyError, TypeError):
        return text  # the tool's error, as the model was told it


def chat_model() -> ChatModel:
    """OpenAI's model when `OPENAI_API_KEY` (or `OPENAI_BASE_URL`) is set, else the scripted one."""
    key, base_url = os.environ.get("OPENAI_API_KEY") or None, os.environ.get("OPENAI_BASE_URL")
    name = os.environ.get("OPENAI_MODEL") or "gpt-4o-mini"
    if base_url:
        return OpenAiChatModel(name, api_key=key, base_url=base_url)
    if key:
        return OpenAiChatModel(name, api_key=key)

    def script(request: ChatRequest) -> AiMessage | str:
        model.requests.clear()  # a long-running service keeps no record of every request
        return weather_clerk(request)

    model = ScriptedChatModel(script, chunk_size=6, event_delay_s=0.02)
    return model


def assistant() -> AiService:
    """The example agent: the live catalog's tools on the worker pools, compensated and journaled."""
    return AiService(
        chat_model=chat_model(),
        executor=CeleryExecutor(),
        system_message=SYSTEM_MESSAGE,
        tool_arguments_error_handler=send_exception_message_to_llm(),
        tool_execution_error_handler=send_exception_message_to_llm(),
        compensate_on_tool_errors=True,
        name="assistant",
    )
