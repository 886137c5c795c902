"""Tool return values -> the text (or contents) the model sees, and their JSON form."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pydantic

from workers.artifacts import Artifact, ArtifactRef, stored_contents, stored_ref
from workers.contents import Content, Image, ImageContent, TextContent
from workers.errors import ToolResultError

__all__ = ["ConvertedResult", "ToolExecutionResult", "convert_result", "dump_json", "to_jsonable"]


@dataclass(frozen=True)
class ToolExecutionResult:
    """A tool's result with more than a value: explicit text or contents, and attributes.

    `attributes` (JSON-serializable) are stored with the result message in memory and never sent to
    the model.
    """

    result_object: Any = None
    result_text: str | None = None
    contents: list[Content] | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConvertedResult:
    """What a tool call produced, in the form that crosses the wire."""

    text: str
    contents: list[Content] | None
    result_object: Any
    attributes: dict[str, Any]


def convert_result(value: Any, *, returns_none: bool) -> ConvertedResult:
    """Apply the result rules: `"Success"`, `"null"`, strings as is, compact JSON, contents."""
    if isinstance(value, ToolExecutionResult):
        attributes = json.loads(dump_json(to_jsonable(dict(value.attributes))))
        if value.contents is not None:
            return ConvertedResult(_contents_text(value.contents), list(value.contents), None, attributes)
        inner = convert_result(value.result_object, returns_none=False)
        text = value.result_text if value.result_text is not None else inner.text
        return ConvertedResult(text, inner.contents, inner.result_object, attributes)
    artifacts = _as_artifacts(value)
    if artifacts is not None:
        text, contents, result_object = stored_contents(artifacts)
        return ConvertedResult(text, contents, result_object, {})
    contents = _as_contents(value)
    if contents is not None:
        return ConvertedResult(_contents_text(contents), contents, None, {})
    if value is None:
        return ConvertedResult("Success" if returns_none else "null", None, None, {})
    if isinstance(value, str):
        return ConvertedResult(value, None, value, {})
    tree = to_jsonable(value)
    text = dump_json(tree)
    return ConvertedResult(text, None, json.loads(text), {})


def _as_artifacts(value: Any) -> list[Artifact] | None:
    """A result that is an artifact, or a list of artifacts alone."""
    if isinstance(value, Artifact):
        return [value]
    if isinstance(value, list | tuple) and value and all(isinstance(v, Artifact) for v in value):
        return list(value)
    return None


def _as_contents(value: Any) -> list[Content] | None:
    if isinstance(value, Image):
        return [ImageContent(value)]
    if isinstance(value, TextContent | ImageContent):
        return [value]
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, TextContent | ImageContent | Image) for v in value)
    ):
        return [ImageContent(v) if isinstance(v, Image) else v for v in value]
    return None


def _contents_text(contents: list[Content]) -> str:
    return "\n".join(part.text for part in contents if isinstance(part, TextContent))


def to_jsonable(value: Any) -> Any:
    """A tree of dict/list/str/int/float/Decimal/bool/None for `value`, or `ToolResultError`."""
    if isinstance(value, enum.Enum):
        return value.name
    if value is None or isinstance(value, bool | int | str | Decimal):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolResultError(f"{value} is not a JSON number")
        return value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Artifact):  # stored by the call's writer, its reference in its place
        return stored_ref(value).to_json()
    if isinstance(value, ArtifactRef):
        return value.to_json()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, pydantic.BaseModel):
        return {
            (info.alias or name): to_jsonable(getattr(value, name))
            for name, info in type(value).model_fields.items()
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, enum.Enum):
                key = key.name
            elif isinstance(key, int | float | Decimal | uuid.UUID) and not isinstance(key, bool):
                key = str(key)
            if not isinstance(key, str):
                raise ToolResultError(f"dict key {key!r} is not a string")
            out[key] = to_jsonable(item)
        return out
    if isinstance(value, list | tuple):
        return [to_jsonable(item) for item in value]
    if isinstance(value, set | frozenset):
        items = [to_jsonable(item) for item in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    raise ToolResultError(f"a value of type {type(value).__name__} is not JSON-serializable")


def dump_json(tree: Any) -> str:
    """Compact JSON of a `to_jsonable` tree; floats keep their form, Decimals their digits."""
    parts: list[str] = []
    _dump(tree, parts)
    return "".join(parts)


def _dump(node: Any, out: list[str]) -> None:
    if isinstance(node, str):
        out.append(json.dumps(node, ensure_ascii=False))
    elif node is None or isinstance(node, bool | int | float):
        out.append(json.dumps(node))
    elif isinstance(node, Decimal):
        if not node.is_finite() or not math.isfinite(float(node)):  # 1e400: a float reads it as inf
            raise ToolResultError(f"{node} is not a JSON number")
        out.append(str(node))
    elif isinstance(node, dict):
        out.append("{")
        for i, (key, item) in enumerate(node.items()):
            if i:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _dump(item, out)
        out.append("}")
    else:
        out.append("[")
        for i, item in enumerate(node):
            if i:
                out.append(",")
            _dump(item, out)
        out.append("]")
