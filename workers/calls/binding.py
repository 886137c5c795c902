"""The model's JSON arguments -> a Python call: parsing with one repair, coercion, defaults, injection."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from workers.artifacts._arguments import reading_artifacts
from workers.calls._convert import JsonNumber, convert, json_type_name, plain_json
from workers.calls.invocation import (
    Invocation,
    InvocationContext,
    InvocationParameters,
    ToolCallIdentity,
    ToolMemoryId,
)
from workers.calls.progress import ToolProgressReporter, current_reporter
from workers.errors import ToolArgumentsError, ToolDefinitionError
from workers.tenants import tenant_of
from workers.tools import ToolDefinition, ToolParameter

__all__ = ["BoundCall", "bind_arguments", "parse_arguments"]

MAX_DEPTH = 64
_UNPARSED = object()
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _loads(text: str) -> Any:
    if text.count("[") + text.count("{") > MAX_DEPTH and _text_depth(text) > MAX_DEPTH:
        # Refused before parsing: the parser's own limit depends on the stack it runs on.
        raise _TooDeep()
    try:
        return json.loads(text, parse_float=JsonNumber, parse_constant=_reject_constant)
    except ArithmeticError:  # a number beyond what Decimal can hold
        raise ValueError("a number is out of range") from None


class _TooDeep(ValueError):
    pass


_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_lone_surrogates(value: Any) -> Any:
    """Strings with a lone surrogate (a model cut an emoji in half) cannot be encoded as UTF-8 and
    would fail on the wire: pairs are joined, lone halves become U+FFFD."""
    if isinstance(value, str):
        if not _SURROGATE.search(value):
            return value
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    return value


def _text_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON text, strings skipped."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def parse_arguments(text: str | None, tool_name: str) -> dict[str, Any]:
    """Parse the arguments JSON; on failure try one repair (outer quotes, `\\"`, trailing commas)."""
    if text is None or not text.strip():
        return {}
    stripped = text.strip()
    try:
        parsed = _loads(stripped)
    except _TooDeep:
        raise ToolArgumentsError(
            f'Arguments of tool "{tool_name}" are nested deeper than {MAX_DEPTH} levels'
        ) from None
    except (ValueError, RecursionError):
        parsed = _UNPARSED
    if parsed is _UNPARSED or isinstance(parsed, str):
        # One repair: a double-encoded object, escaped quotes, trailing commas.
        repaired = stripped
        if len(repaired) >= 2 and repaired[0] == repaired[-1] and repaired[0] in "\"'":
            repaired = repaired[1:-1]
        repaired = _TRAILING_COMMA.sub(r"\1", repaired.replace('\\"', '"'))
        try:
            parsed = _loads(repaired)
        except _TooDeep:
            raise ToolArgumentsError(
                f'Arguments of tool "{tool_name}" are nested deeper than {MAX_DEPTH} levels'
            ) from None
        except RecursionError:
            raise ToolArgumentsError(f'Arguments of tool "{tool_name}" are nested too deeply') from None
        except ValueError as exc:
            raise ToolArgumentsError(f'Arguments of tool "{tool_name}" are not valid JSON: {exc}') from None
    if _SURROGATE.search(stripped) or "\\ud" in stripped.lower():
        parsed = _without_lone_surrogates(parsed)
    if not isinstance(parsed, dict):
        raise ToolArgumentsError(
            f'Arguments of tool "{tool_name}" must be a JSON object, got {json_type_name(parsed)}'
        )
    if _depth(parsed) > MAX_DEPTH:
        raise ToolArgumentsError(f'Arguments of tool "{tool_name}" are nested deeper than {MAX_DEPTH} levels')
    return parsed


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value, without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(node, dict):
            stack.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, level + 1) for child in node)
    return deepest


class BoundCall:
    """Positional and keyword arguments ready for the tool, plus the parameters it may write to."""

    def __init__(self, args: list[Any], kwargs: dict[str, Any], parameters: InvocationParameters) -> None:
        self.args = args
        self.kwargs = kwargs
        self.parameters = parameters


def bind_arguments(
    definition: ToolDefinition,
    arguments: str | None,
    invocation: Invocation,
    identity: ToolCallIdentity | None,
) -> BoundCall:
    """Bind the model's arguments to `definition`'s parameters; `ToolArgumentsError` says what is wrong.

    `identity` is needed only when the tool takes one (`definition.takes_identity`)."""
    values = parse_arguments(arguments, definition.name)
    parameters = InvocationParameters(copy.deepcopy(dict(invocation.parameters)))  # the tool's own copy
    if definition.raw_arguments:
        return BoundCall([], {"arguments": plain_json(values)}, parameters)
    return bind_values(
        definition.name, definition.parameters, values, invocation.context, parameters, identity
    )


def bind_values(
    tool_name: str,
    declared: tuple[ToolParameter, ...],
    values: dict[str, Any],
    context: InvocationContext,
    parameters: InvocationParameters,
    identity: ToolCallIdentity | None,
) -> BoundCall:
    """The call of a function declaring `declared`: the model's `values`, and the injected data
    (`identity` is needed only when a parameter takes it)."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    with reading_artifacts(tenant_of(parameters)):  # an `Artifact` argument: the tenant's own only
        for parameter in declared:
            value = _value_for(parameter, values, tool_name, context, parameters, identity)
            if parameter.positional_only:
                args.append(value)
            else:
                kwargs[parameter.attribute] = value
    return BoundCall(args, kwargs, parameters)


def _value_for(
    parameter: ToolParameter,
    values: dict[str, Any],
    tool_name: str,
    context: InvocationContext,
    parameters: InvocationParameters,
    identity: ToolCallIdentity | None,
) -> Any:
    if parameter.injected is ToolCallIdentity:
        if identity is None:
            raise ToolDefinitionError(f"Tool '{tool_name}' takes a ToolCallIdentity, and none was given")
        return identity
    if parameter.injected is InvocationParameters:
        return parameters
    if parameter.injected is InvocationContext:
        return context
    if parameter.injected is ToolMemoryId:
        return ToolMemoryId(context.memory_id)
    if parameter.injected is ToolProgressReporter:
        return current_reporter()  # the call's own, set by whoever runs it (`reporting`)
    raw = values.get(parameter.name)
    if raw is None:
        if parameter.has_default:
            return copy.deepcopy(parameter.default)
        if not parameter.required:
            return None
        raise ToolArgumentsError(f'Required parameter "{parameter.name}" of tool "{tool_name}" is missing')
    return convert(raw, parameter.annotation, parameter.name, tool_name)
