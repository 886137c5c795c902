"""Type introspection shared by the schema builder and the argument binder."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, NotRequired, Required, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel
from pydantic.fields import FieldInfo as PydanticFieldInfo
from typing_extensions import is_typeddict

__all__ = [
    "FieldSpec",
    "Param",
    "discriminator_of",
    "is_model",
    "model_fields",
    "model_tag",
    "optional_inner",
    "param_of",
    "split_annotated",
]

_MISSING: Any = dataclasses.MISSING


@dataclass(frozen=True)
class Param:
    """Metadata of a tool parameter or model field, given through `Annotated[T, Param(...)]`.

    `description` is shown to the model; `name` renames the parameter for the model; `required`
    overrides whether the model must send it (a Python default always makes it optional).
    """

    description: str | None = None
    name: str | None = None
    required: bool | None = None


def split_annotated(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    """`Annotated[T, m1, m2]` -> `(T, (m1, m2))`, flattening nested `Annotated`."""
    metadata: tuple[Any, ...] = ()
    while get_origin(tp) is typing.Annotated:
        args = get_args(tp)
        tp, metadata = args[0], metadata + tuple(args[1:])
    if get_origin(tp) in (Required, NotRequired):
        return split_annotated(get_args(tp)[0])
    return tp, metadata


def param_of(metadata: tuple[Any, ...]) -> Param | None:
    for item in metadata:
        if isinstance(item, Param):
            return item
    return None


def description_of(metadata: tuple[Any, ...]) -> str | None:
    for item in metadata:
        if isinstance(item, Param) and item.description:
            return item.description
        if isinstance(item, PydanticFieldInfo) and item.description:
            return item.description
    return None


def discriminator_of(metadata: tuple[Any, ...]) -> str | None:
    for item in metadata:
        if isinstance(item, PydanticFieldInfo) and isinstance(item.discriminator, str):
            return item.discriminator
    return None


def optional_inner(tp: Any) -> tuple[Any, bool]:
    """`T | None` -> `(T, True)`; anything else -> `(tp, False)`."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) < len(get_args(tp)):
            inner = args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007
            return inner, True
    return tp, False


def union_options(tp: Any) -> tuple[Any, ...] | None:
    if get_origin(tp) in (Union, types.UnionType):
        return get_args(tp)
    return None


def is_model(tp: Any) -> bool:
    """A dataclass, a pydantic model or a TypedDict: an object with named fields."""
    if not isinstance(tp, type):
        return False
    return dataclasses.is_dataclass(tp) or issubclass(tp, BaseModel) or is_typeddict(tp)


@dataclass(frozen=True)
class FieldSpec:
    """One field of a model: its wire name, Python name, annotation and default."""

    name: str
    attribute: str
    annotation: Any
    required: bool
    description: str | None
    has_default: bool


@cache
def model_fields(cls: type) -> tuple[FieldSpec, ...]:
    """The fields of a dataclass, pydantic model or TypedDict, in declaration order."""
    docs = _attribute_docs(cls)
    specs: list[FieldSpec] = []
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        for attr, info in cls.model_fields.items():
            annotation: Any = info.annotation
            extra = list(info.metadata)
            if isinstance(info.discriminator, str):
                extra.append(PydanticFieldInfo(discriminator=info.discriminator))
            if extra:
                annotation = typing.Annotated[(annotation, *extra)]
            param = param_of(tuple(info.metadata))
            description = info.description or (param.description if param else None) or docs.get(attr)
            required = info.is_required()
            specs.append(
                FieldSpec(
                    name=info.alias or attr,
                    attribute=attr,
                    annotation=annotation,
                    required=required,
                    description=description,
                    has_default=not required,
                )
            )
        return tuple(specs)
    hints = get_type_hints(cls, include_extras=True)
    if dataclasses.is_dataclass(cls):
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            annotation = hints.get(field.name, Any)
            _, metadata = split_annotated(annotation)
            has_default = field.default is not _MISSING or field.default_factory is not _MISSING
            description = (
                field.metadata.get("description") or description_of(metadata) or docs.get(field.name)
            )
            specs.append(
                FieldSpec(field.name, field.name, annotation, not has_default, description, has_default)
            )
        return tuple(specs)
    required_keys: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
    for key, annotation in hints.items():
        _, metadata = split_annotated(annotation)
        description = description_of(metadata) or docs.get(key)
        required = _typeddict_required(annotation, key in required_keys)
        specs.append(FieldSpec(key, key, annotation, required, description, False))
    return tuple(specs)


def _typeddict_required(annotation: Any, declared: bool) -> bool:
    """`Required`/`NotRequired` as resolved (string annotations defeat `__required_keys__` on 3.11)."""
    while True:
        origin = get_origin(annotation)
        if origin is NotRequired:
            return False
        if origin is Required:
            return True
        if origin is typing.Annotated:
            annotation = get_args(annotation)[0]
            continue
        return declared


def _attribute_docs(cls: type) -> dict[str, str]:
    """Docstrings written under attributes in a class body (`x: int` then `\"\"\"doc\"\"\"`)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or klass.__module__ in ("builtins", "pydantic.main", "typing"):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
            tree = ast.parse(source)
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, following in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def model_tag(cls: type, discriminator: str) -> str:
    """The discriminator value of a model: its declared `Literal` tag field, else its class name."""
    for spec in model_fields(cls):
        if spec.name == discriminator:
            inner, _ = split_annotated(spec.annotation)
            if get_origin(inner) is Literal and len(get_args(inner)) == 1:
                return str(get_args(inner)[0])
    return cls.__name__
