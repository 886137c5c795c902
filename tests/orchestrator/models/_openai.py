"""What every OpenAI test shares: the recorded tools, the model on a recording transport, and OpenAI's
OpenAPI description to validate every request and recorded answer against."""

import json
import re
from functools import cache
from typing import Any

import httpx
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from orchestrator.messages import UserMessage
from orchestrator.models._http import RetryPolicy
from orchestrator.models.base import ChatRequest
from orchestrator.models.openai import OpenAiChatModel
from tests.orchestrator.models._harness import FIXTURES, Recorder
from workers.tools.specification import ToolSpecification

# The chat-completions part of OpenAI's official OpenAPI description (MIT), kept beside the recordings.
OPENAPI = FIXTURES / "openai-chat-completions.openapi.json"
KEY = "sk-test-4f1d9c2a7b3e8f60cdef"
OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

WEATHER = ToolSpecification(
    "get_weather",
    "Returns the current weather in a city",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
)
TIME = ToolSpecification(
    "get_time",
    "Returns the local time in a time zone",
    {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
)
PING = ToolSpecification("ping", "Checks the weather service is up")  # no parameters
CN_WEATHER = ToolSpecification(
    "获取天气",
    "获取指定城市的天气",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CN_ALIAS = "tool_136a0785"  # the alias recorded in openai_alias.json and openai_stream_alias.txt


# ---- the OpenAPI description ---------------------------------------------------------------------


def _nullable_as_null_type(node: Any) -> Any:
    """OpenAPI 3.0's `nullable: true` (still used in this file) as JSON Schema: `anyOf [..., null]`."""
    if isinstance(node, list):
        return [_nullable_as_null_type(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _nullable_as_null_type(value) for key, value in node.items()}
    if converted.pop("nullable", False) is True:
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


@cache
def _registry() -> Registry:
    document = _nullable_as_null_type(json.loads(OPENAPI.read_text()))
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    registry: Registry = Registry().with_resource("openai-openapi.json", resource)
    return registry


def validate(instance: Any, schema_name: str) -> None:
    """Raise `ValidationError` unless `instance` matches `#/components/schemas/<schema_name>`."""
    schema = {"$ref": f"openai-openapi.json#/components/schemas/{schema_name}"}
    Draft202012Validator(schema, registry=_registry()).validate(instance)


# ---- the model under test ---------------------------------------------------------------------


def make_model(recorder: Recorder, **settings: Any) -> OpenAiChatModel:
    settings = {"api_key": KEY, "retry": RetryPolicy(max_retries=2, backoff_s=0.001), **settings}
    return OpenAiChatModel("gpt-4o-mini", transport=httpx.MockTransport(recorder), **settings)


def ask(text: str, *tools: ToolSpecification) -> ChatRequest:
    return ChatRequest([UserMessage(text)], tool_specifications=list(tools))
