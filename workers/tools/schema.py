"""Python types -> JSON schema, as the model sees a tool's parameters.

Objects (dataclasses, pydantic models, TypedDicts) list every field, require those without a default
and forbid extra fields. A union of objects becomes `anyOf` whose options carry a discriminator
property. A model that refers to itself goes into the root `$defs`; any other model is inlined.
"""

from __future__ import annotations

import collections.abc
import datetime as dt
import enum
import typing
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, get_args, get_origin

from workers.artifacts._arguments import ARGUMENT_SCHEMA
from workers.artifacts._values import Artifact
from workers.errors import ToolDefinitionError
from workers.tools._types import (
    description_of,
    discriminator_of,
    is_model,
    model_fields,
    model_tag,
    optional_inner,
    split_annotated,
    union_options,
)

__all__ = ["DEFAULT_DISCRIMINATOR", "SchemaBuilder", "type_label"]

DEFAULT_DISCRIMINATOR = "type"
UUID_DESCRIPTION = "String in a UUID format"

ARRAY_ORIGINS = {
    list,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Set,
    collections.abc.MutableSet,
    collections.abc.Iterable,
    collections.abc.Collection,
}


@dataclass
class SchemaBuilder:
    """Builds the schemas of one tool's parameters, collecting recursive models into `defs`."""

    defs: dict[str, dict[str, Any]] = field(default_factory=dict)
    _stack: list[tuple[type, str | None]] = field(default_factory=list)
    _recursive: set[tuple[type, str | None]] = field(default_factory=set)

    def parameters(self, properties: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
        """The root object schema of a tool's parameters."""
        root: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
        if self.defs:
            root["$defs"] = self.defs
        return root

    def schema(self, tp: Any, description: str | None = None) -> dict[str, Any]:
        """The schema of `tp`; `description` (else one found in `Annotated` metadata) is attached."""
        tp, metadata = split_annotated(tp)
        description = description or description_of(metadata)
        tp, _ = optional_inner(tp)
        node = self._node(tp, discriminator_of(metadata))
        if description is not None:
            node = _with_description(node, description)
        return node

    def _node(self, tp: Any, discriminator: str | None) -> dict[str, Any]:
        if tp is Any or tp is object:
            return {}
        if tp is uuid.UUID:
            return {"type": "string", "description": UUID_DESCRIPTION}
        if tp is Artifact:
            return dict(ARGUMENT_SCHEMA)
        if tp is str:
            return {"type": "string"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp in (float, Decimal):
            return {"type": "number"}
        if tp is dt.datetime:
            return {"type": "string", "format": "date-time"}
        if tp is dt.date:
            return {"type": "string", "format": "date"}
        if tp is dt.time:
            return {"type": "string", "format": "time"}
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return {"type": "string", "enum": [member.name for member in tp]}
        origin = get_origin(tp)
        if origin is Literal:
            return _literal(get_args(tp))
        options = union_options(tp)
        if options is not None:
            return self._union(options, discriminator)
        if tp in (list, set, frozenset, tuple):
            return {"type": "array"}
        if origin in ARRAY_ORIGINS:
            args = get_args(tp)
            return {"type": "array", "items": self.schema(args[0]) if args else {}}
        if origin is tuple:
            return self._tuple(get_args(tp))
        if tp is dict or origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
            return self._mapping(get_args(tp))
        if is_model(tp):
            return self._model(tp)
        raise ToolDefinitionError(f"Type {type_label(tp)} cannot be described to the model as JSON")

    def _tuple(self, args: tuple[Any, ...]) -> dict[str, Any]:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": self.schema(args[0])}
        items = [self.schema(arg) for arg in args]
        return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}

    def _mapping(self, args: tuple[Any, ...]) -> dict[str, Any]:
        if not args:
            return {"type": "object"}
        key, value = split_annotated(args[0])[0], args[1]
        if key is not str:
            raise ToolDefinitionError(
                f"Mapping keys must be str to be JSON object keys, got {type_label(key)}"
            )
        value_schema = self.schema(value)
        if not value_schema:
            return {"type": "object"}
        return {"type": "object", "additionalProperties": value_schema}

    def _union(self, options: tuple[Any, ...], discriminator: str | None) -> dict[str, Any]:
        plain = [split_annotated(option)[0] for option in options]
        if len(plain) > 1 and all(is_model(option) for option in plain):
            key = discriminator or DEFAULT_DISCRIMINATOR
            return {"anyOf": [self._model(option, discriminator=key) for option in plain]}
        return {"anyOf": [self.schema(option) for option in options]}

    def _model(self, cls: type, discriminator: str | None = None) -> dict[str, Any]:
        key = (cls, discriminator)
        if key in self._stack:
            self._recursive.add(key)
            return {"$ref": f"#/$defs/{cls.__name__}"}
        self._stack.append(key)
        try:
            properties: dict[str, Any] = {}
            required: list[str] = []
            if discriminator is not None:
                properties[discriminator] = {"type": "string", "enum": [model_tag(cls, discriminator)]}
                required.append(discriminator)
            for spec in model_fields(cls):
                if spec.name == discriminator:
                    continue
                properties[spec.name] = self.schema(spec.annotation, spec.description)
                if spec.required:
                    required.append(spec.name)
            node = {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            }
        finally:
            self._stack.pop()
        if key in self._recursive:
            self.defs[cls.__name__] = node
            return {"$ref": f"#/$defs/{cls.__name__}"}
        return node


def _literal(values: tuple[Any, ...]) -> dict[str, Any]:
    members = [v.name if isinstance(v, enum.Enum) else v for v in values]
    if all(isinstance(v, str) for v in members):
        return {"type": "string", "enum": members}
    if all(isinstance(v, bool) for v in members):
        return {"type": "boolean", "enum": members}
    if all(isinstance(v, int) and not isinstance(v, bool) for v in members):
        return {"type": "integer", "enum": members}
    return {"enum": members}


def _with_description(node: dict[str, Any], description: str) -> dict[str, Any]:
    if "type" in node:
        rest = {k: v for k, v in node.items() if k not in ("type", "description")}
        return {"type": node["type"], "description": description, **rest}
    return {**node, "description": description}


def type_label(tp: Any) -> str:
    """A short human name for a type, used in error messages."""
    if isinstance(tp, type) and get_origin(tp) is None:
        return tp.__name__
    return str(typing._type_repr(tp))
