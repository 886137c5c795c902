"""The JSON schemas the tests expect of tool parameters, written short."""

from __future__ import annotations

from typing import Any


def described(json_type: str, description: str) -> dict[str, str]:
    """The schema of a value of one JSON type, with its description."""
    return {"type": json_type, "description": description}


def parameters(required: list[str], **properties: str | dict[str, Any]) -> dict[str, Any]:
    """The parameters schema of a tool: each property given by its JSON type's name, or its schema."""
    schemas = {
        name: {"type": schema} if isinstance(schema, str) else schema for name, schema in properties.items()
    }
    return {"type": "object", "properties": schemas, "required": required}
