"""What the model sees of a tool: `ToolSpecification`, its JSON form, and provider renderings."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "OPENAI_TOOL_NAME",
    "ReturnBehavior",
    "SearchBehavior",
    "ToolNameAliases",
    "ToolSpecification",
    "strict_schema",
]


class ReturnBehavior(StrEnum):
    """Whether a tool's result goes back to the model or ends the invocation at once."""

    TO_LLM = "TO_LLM"
    IMMEDIATE = "IMMEDIATE"
    IMMEDIATE_IF_LAST = "IMMEDIATE_IF_LAST"


class SearchBehavior(StrEnum):
    """With tool search on: found by searching, or visible to the model from the start."""

    SEARCHABLE = "SEARCHABLE"
    ALWAYS_VISIBLE = "ALWAYS_VISIBLE"


@dataclass(frozen=True)
class ToolSpecification:
    """Name, description and JSON-schema parameters of a tool, as sent to the model."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            data["description"] = self.description
        if self.parameters is not None:
            data["parameters"] = copy.deepcopy(self.parameters)
        if self.metadata:
            data["metadata"] = copy.deepcopy(self.metadata)
        return data

    def to_json(self) -> str:
        """Compact JSON text; `ToolSpecification.from_json(spec.to_json()) == spec`."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any]) -> ToolSpecification:
        """Read the form `to_json()` writes (text or an already parsed object)."""
        raw: Any = json.loads(data) if isinstance(data, str) else data
        if not isinstance(raw, Mapping):
            raise ValueError(f"A tool specification must be a JSON object, got {type(raw).__name__}")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("A tool specification needs a non-empty string 'name'")
        description = raw.get("description")
        if description is not None and not isinstance(description, str):
            raise ValueError(f"Tool '{name}': 'description' must be a string")
        parameters = raw.get("parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise ValueError(
                f"Tool '{name}': 'parameters' must be a JSON-schema object, got {type(parameters).__name__}"
            )
        if parameters is not None and parameters.get("type", "object") != "object":
            raise ValueError(
                f"Tool '{name}': 'parameters' must be a JSON schema of type 'object', "
                f"got type {parameters.get('type')!r}"
            )
        metadata = raw.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise ValueError(f"Tool '{name}': 'metadata' must be an object")
        return cls(
            name=name,
            description=description,
            parameters=copy.deepcopy(dict(parameters)) if parameters is not None else None,
            metadata=copy.deepcopy(dict(metadata)),
        )


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI "strict" rendering of an object schema.

    Every property is listed in `required`; properties that were optional become nullable; every
    object gets `additionalProperties: false`. Applied recursively, `$defs` included.
    """
    return _strict(copy.deepcopy(dict(schema)))


def _strict(node: dict[str, Any]) -> dict[str, Any]:
    if node.get("type") == "object" and "properties" in node:
        required = set(node.get("required", []))
        props: dict[str, Any] = node["properties"]
        for key, sub in list(props.items()):
            sub = _strict(sub)
            props[key] = sub if key in required else _nullable(sub)
        node["required"] = list(props)
        node["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = _strict(node[key])
    for key in ("anyOf", "prefixItems"):
        if key in node:
            node[key] = [_strict(option) for option in node[key]]
    if "$defs" in node:
        node["$defs"] = {name: _strict(sub) for name, sub in node["$defs"].items()}
    return node


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    kind = node.get("type")
    if isinstance(kind, str):
        node["type"] = [kind, "null"]
        if "enum" in node and None not in node["enum"]:
            node["enum"] = [*node["enum"], None]
        return node
    if isinstance(kind, list):
        if "null" not in kind:
            node["type"] = [*kind, "null"]
        return node
    if "anyOf" in node:
        if {"type": "null"} not in node["anyOf"]:
            node["anyOf"] = [*node["anyOf"], {"type": "null"}]
        return node
    description = node.pop("description", None)
    wrapped: dict[str, Any] = {"anyOf": [node, {"type": "null"}]}
    if description is not None:
        wrapped["description"] = description
    return wrapped


OPENAI_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


class ToolNameAliases:
    """Safe aliases for tool names a provider rejects, mapped back when the model calls them.

    Names that already match `pattern` are sent as they are; others become the ASCII part of the
    name plus a short hash of the whole name, so distinct names never share an alias.
    """

    def __init__(self, names: Iterable[str] = (), pattern: re.Pattern[str] = OPENAI_TOOL_NAME) -> None:
        self._pattern = pattern
        self._to_alias: dict[str, str] = {}
        self._to_name: dict[str, str] = {}
        for name in names:
            self.alias(name)

    def alias(self, name: str) -> str:
        """The name to send for `name` (the name itself when the provider accepts it)."""
        known = self._to_alias.get(name)
        if known is not None:
            return known
        alias = name if self._pattern.fullmatch(name) else self._make_alias(name)
        self._to_alias[name] = alias
        self._to_name[alias] = name
        return alias

    def original(self, alias: str) -> str:
        """The user's name for an alias the model used (unknown names come back unchanged)."""
        return self._to_name.get(alias, alias)

    def _make_alias(self, name: str) -> str:
        digest = hashlib.sha256(name.encode()).hexdigest()
        for length in range(8, len(digest) + 1):
            base = re.sub(r"[^a-zA-Z0-9_-]+", "_", name).strip("_")[: 63 - length] or "tool"
            alias = f"{base}_{digest[:length]}"
            if alias not in self._to_name and alias not in self._to_alias and self._pattern.fullmatch(alias):
                return alias
        raise ValueError(f"Cannot find a unique alias for tool name {name!r}")
