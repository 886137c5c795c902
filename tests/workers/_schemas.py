"""The JSON schemas the tests expect of tool parameters, written short."""

from __future__ import annotations

from typing import Any


def described(json_type: str, description: str) -> dict[str, str]:
    """The schema of a value of one JSON type, with its description."""
    return {"type": json_type, "description": description}


def parameters(required: list[str], **properties: str | dict[str, Any]) -> dict[str, Any]:
    """The parameters schema of a tool: each property given by its JSON type's name, or its schema."""
    return {"type": "object", "properties": schemas_of(properties), "required": required}


def obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The schema of a model (dataclass, pydantic model, TypedDict): no keys beyond its fields."""
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def variant(tag: str, required: list[str], **properties: str | dict[str, Any]) -> dict[str, Any]:
    """The schema of a member of a tagged union: a model whose `type` is `tag`, then `properties`."""
    return obj({"type": {"type": "string", "enum": [tag]}, **schemas_of(properties)}, required)


def schemas_of(properties: dict[str, str | dict[str, Any]]) -> dict[str, Any]:
    """Each property's schema, given by its JSON type's name or whole."""
    return {
        name: {"type": schema} if isinstance(schema, str) else schema for name, schema in properties.items()
    }
