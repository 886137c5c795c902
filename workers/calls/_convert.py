"""JSON values -> declared Python types, with the exact error texts the model is shown."""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime as dt
import enum
import json
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, get_args, get_origin

import pydantic

from workers.artifacts import Artifact
from workers.artifacts._arguments import artifact_argument
from workers.errors import ToolArgumentsError
from workers.tools._types import (
    discriminator_of,
    is_model,
    model_fields,
    model_tag,
    optional_inner,
    split_annotated,
    union_options,
)
from workers.tools.schema import ARRAY_ORIGINS, DEFAULT_DISCRIMINATOR, type_label

__all__ = ["convert", "json_type_name", "plain_json", "show"]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class JsonNumber(Decimal):
    """A JSON number with a fraction or exponent, exact, remembering the text the model wrote."""

    text: str

    def __new__(cls, text: str) -> JsonNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number


def json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, Decimal):
        return "float"
    return type(value).__name__


def show(value: Any) -> str:
    """How a received value is quoted inside `<...>` in error texts."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, JsonNumber):
        return value.text
    if isinstance(value, Decimal | int | float):
        return str(value)
    try:
        return json.dumps(plain_json(value), default=str, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _error(path: str, what: str, value: Any) -> ToolArgumentsError:
    return ToolArgumentsError(f'Argument "{path}" {what}: <{show(value)}>')


def _not_convertable(path: str, target: str, value: Any) -> ToolArgumentsError:
    return _error(path, f"is not convertable to {target}, got {json_type_name(value)}", value)


def convert(value: Any, tp: Any, path: str, tool: str) -> Any:
    """Convert the JSON value `value` (floats parsed as `Decimal`) into an instance of `tp`."""
    tp, metadata = split_annotated(tp)
    inner, optional = optional_inner(tp)
    if value is None:
        if optional or tp is Any or tp is object:
            return None
        raise ToolArgumentsError(f'Required parameter "{path}" of tool "{tool}" is missing')
    return _convert(value, inner, path, tool, discriminator_of(metadata))


def _convert(value: Any, tp: Any, path: str, tool: str, discriminator: str | None) -> Any:
    if tp is Any or tp is object:
        return plain_json(value)
    if tp is Artifact:
        return artifact_argument(value, path)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _not_convertable(path, "bool", value)
    if tp is int:
        return _to_int(value, path)
    if tp is float:
        return _to_float(value, path)
    if tp is Decimal:
        return _to_decimal(value, path)
    if tp is str:
        if isinstance(value, str | bool | JsonNumber | int | Decimal | float):
            return show(value)  # a scalar becomes the text it has in JSON
        raise _not_convertable(path, "str", value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _to_enum(value, tp, path)
    if tp in (uuid.UUID, dt.datetime, dt.date, dt.time):
        return _parse_text(value, tp, path)
    origin = get_origin(tp)
    if origin is Literal:
        return _to_literal(value, get_args(tp), path)
    options = union_options(tp)
    if options is not None:
        return _to_union(value, options, path, tool, discriminator)
    if tp in (list, set, frozenset, tuple) or origin in ARRAY_ORIGINS or origin is tuple:
        return _to_array(_json_text(value, list), tp, path, tool)
    if tp is dict or origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
        mapping = _json_text(value, dict)
        if not isinstance(mapping, dict):
            raise _not_convertable(path, "object", value)
        args = get_args(tp)
        if not args:
            return {k: plain_json(v) for k, v in mapping.items()}
        return {k: convert(v, args[1], f"{path}.{k}", tool) for k, v in mapping.items()}
    if is_model(tp):
        return _to_model(_json_text(value, dict), tp, path, tool, None)
    raise ToolArgumentsError(f'Argument "{path}" has unsupported type {type_label(tp)}')


def _json_text(value: Any, expected: type) -> Any:
    """A JSON string holding an object or array is accepted where one is expected."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value, parse_float=JsonNumber)
        except (ValueError, ArithmeticError, RecursionError):
            return value
        if isinstance(parsed, expected):
            return parsed
    return value


def _exact(value: Any, path: str, target: str) -> Decimal:
    """The exact decimal value of a JSON number or a numeric string (a plain `Decimal`, never the
    parser's `JsonNumber`), else the error that `value` is not convertable to `target`."""
    if isinstance(value, bool):
        raise _not_convertable(path, target, value)
    if isinstance(value, Decimal | int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, str):
        try:
            return Decimal(value.strip())
        except InvalidOperation:
            raise _not_convertable(path, target, value) from None
    raise _not_convertable(path, target, value)


def _to_int(value: Any, path: str) -> int:
    number = _exact(value, path, "int")
    if not number.is_finite() or number.adjusted() > 18:  # checked before int(): 1e999999999 is a bomb
        raise _error(path, "is out of range for int", value)
    if number != number.to_integral_value():
        raise _error(path, "has non-integer value for int", value)
    result = int(number)
    if not INT64_MIN <= result <= INT64_MAX:
        raise _error(path, "is out of range for int", value)
    return result


def _to_float(value: Any, path: str) -> float:
    if isinstance(value, bool):
        raise _not_convertable(path, "float", value)
    if isinstance(value, int | float | Decimal):
        try:
            result = float(value)
        except OverflowError:
            raise _error(path, "is out of range for float", value) from None
    elif isinstance(value, str):
        try:
            result = float(Decimal(value.strip()))
        except InvalidOperation:
            raise _not_convertable(path, "float", value) from None
    else:
        raise _not_convertable(path, "float", value)
    if result in (float("inf"), float("-inf")) or result != result:
        raise _error(path, "is out of range for float", value)
    return result


def _to_decimal(value: Any, path: str) -> Decimal:
    result = _exact(value, path, "Decimal")
    if not result.is_finite():
        raise _not_convertable(path, "Decimal", value)
    return result


def _to_enum(value: Any, cls: type[enum.Enum], path: str) -> enum.Enum:
    if isinstance(value, str):
        for candidate in (value, value.upper()):
            if candidate in cls.__members__:
                return cls.__members__[candidate]
    raise _error(path, f"is not a valid enum value for {cls.__name__}", value)


def _parse_text(value: Any, tp: type, path: str) -> Any:
    if isinstance(value, str):
        try:
            if tp is uuid.UUID:
                return uuid.UUID(value.strip())
            return tp.fromisoformat(value.strip())  # type: ignore[attr-defined]
        except ValueError:
            pass
    raise _not_convertable(path, tp.__name__, value)


def _to_literal(value: Any, allowed: tuple[Any, ...], path: str) -> Any:
    for option in allowed:
        wire = option.name if isinstance(option, enum.Enum) else option
        if type(wire) is type(value) and wire == value:
            return option
        if isinstance(wire, int | float) and isinstance(value, Decimal) and wire == value:
            return option
    names = ", ".join(show(o.name if isinstance(o, enum.Enum) else o) for o in allowed)
    raise _error(path, f"is not one of [{names}]", value)


def _to_union(value: Any, options: tuple[Any, ...], path: str, tool: str, discriminator: str | None) -> Any:
    plain = [split_annotated(option)[0] for option in options]
    if len(plain) > 1 and all(is_model(option) for option in plain):
        key = discriminator or DEFAULT_DISCRIMINATOR
        data = _json_text(value, dict)
        if not isinstance(data, dict):
            raise _not_convertable(path, "object", value)
        tags = {model_tag(option, key): option for option in plain}
        tag = data.get(key)
        if not isinstance(tag, str) or tag not in tags:
            raise _error(path, f'needs "{key}" set to one of [{", ".join(tags)}]', tag)
        return _to_model(data, tags[tag], path, tool, key)
    for option in options:
        try:
            return convert(value, option, path, tool)
        except ToolArgumentsError:
            continue
    labels = " | ".join(type_label(option) for option in plain)
    raise _error(path, f"matches none of {labels}", value)


def _to_array(value: Any, tp: Any, path: str, tool: str) -> Any:
    if not isinstance(value, list):
        raise _not_convertable(path, "array", value)
    origin = get_origin(tp) or tp
    args = get_args(tp)
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            raise _error(path, f"needs exactly {len(args)} items", value)
        return tuple(
            convert(item, arg, f"{path}[{i}]", tool)
            for i, (item, arg) in enumerate(zip(value, args, strict=True))
        )
    item_type = args[0] if args else Any
    items = [convert(item, item_type, f"{path}[{i}]", tool) for i, item in enumerate(value)]
    if origin in (set, collections.abc.Set, collections.abc.MutableSet):
        return set(items)
    if origin is frozenset:
        return frozenset(items)
    if origin is tuple:
        return tuple(items)
    return items


def _to_model(value: Any, cls: type, path: str, tool: str, discriminator: str | None) -> Any:
    if not isinstance(value, dict):
        raise _not_convertable(path, "object", value)
    fields = {spec.name: spec for spec in model_fields(cls)}
    for key in value:
        if key not in fields and key != discriminator:
            raise ToolArgumentsError(f'Argument "{path}" has unknown field "{key}" for {cls.__name__}')
    kwargs: dict[str, Any] = {}
    for name, spec in fields.items():
        raw = value.get(name)
        if raw is None:
            if spec.has_default:
                continue
            _, optional = optional_inner(split_annotated(spec.annotation)[0])
            if optional:
                kwargs[name] = None
            elif spec.required:
                raise ToolArgumentsError(f'Required parameter "{path}.{name}" of tool "{tool}" is missing')
            continue
        kwargs[name] = convert(raw, spec.annotation, f"{path}.{name}", tool)
    if isinstance(cls, type) and issubclass(cls, pydantic.BaseModel):
        try:
            return cls.model_validate(kwargs)
        except pydantic.ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in exc.errors()
            )
            raise ToolArgumentsError(f'Argument "{path}" is not a valid {cls.__name__}: {details}') from None
    by_attribute = {fields[name].attribute: item for name, item in kwargs.items()}
    if dataclasses.is_dataclass(cls):
        try:
            return cls(**by_attribute)
        except (TypeError, ValueError) as exc:
            raise ToolArgumentsError(f'Argument "{path}" is not a valid {cls.__name__}: {exc}') from None
    return by_attribute


def plain_json(value: Any) -> Any:
    """JSON value with exact decimals turned into int or float, for untyped parameters."""
    if isinstance(value, Decimal):
        if value.adjusted() > 18 or value != value.to_integral_value() or "." in str(value):
            return float(value)
        return int(value)
    if isinstance(value, list):
        return [plain_json(item) for item in value]
    if isinstance(value, dict):
        return {key: plain_json(item) for key, item in value.items()}
    return value
