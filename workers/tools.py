"""`@tool`, `@compensate_for` and discovery of the tools of functions, objects, classes and modules."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable
from typing import Any

from workers._decorators import (
    _COMPENSATES_ATTR,
    ToolOptions,
    _marker,
    _marker_of,
    _unwrap_method,
    compensate_for,
    tool,
)
from workers._definitions import Compensation, ToolDefinition, ToolParameter
from workers._docstrings import _doc_args
from workers._inspection import INJECTED_TYPES, _definition, _hints, _parameters, _SkipSelf
from workers._types import optional_inner, split_annotated
from workers.errors import ToolDefinitionError
from workers.schema import type_label
from workers.specification import ToolSpecification

__all__ = [
    "Compensation",
    "ToolDefinition",
    "ToolOptions",
    "ToolParameter",
    "check_compensations",
    "compensate_for",
    "discover_tools",
    "tool",
    "tool_specifications_from",
]


def tool_specifications_from(source: object) -> list[ToolSpecification]:
    """The specifications of every tool of an object, a class, a module or a decorated function."""
    return [definition.specification for definition in discover_tools(source)]


def discover_tools(source: object) -> list[ToolDefinition]:
    """Every tool of `source`, checked; raises `ToolDefinitionError` on any declaration problem."""
    if isinstance(source, types.ModuleType):
        definitions = _module_tools(source)
        if not definitions:
            raise ToolDefinitionError(
                f"Module '{source.__name__}' does not have any functions annotated with @tool"
            )
    elif isinstance(source, type):
        definitions = _object_tools(source, instance=None)
    elif callable(source) and _marker(source) is not None:
        definitions = [_definition(source, _marker_of(source), compensation=None)]
    else:
        definitions = _object_tools(type(source), instance=source)
    if not definitions:
        raise ToolDefinitionError(f"Object '{source!r}' does not have any methods annotated with @tool")
    _check_unique(definitions)
    return definitions


def check_compensations(source: object) -> None:
    """Check every `@compensate_for` of `source`: its tool exists on the same object, and it takes the
    tool's parameters (same names and types, in order) or one `ToolExecution` parameter."""
    if isinstance(source, types.ModuleType):
        for value in list(vars(source).values()):
            if (
                not isinstance(value, type | types.ModuleType)
                and not callable(value)
                and _class_members(type(value))
            ):
                check_compensations(value)
        return
    if callable(source) and not isinstance(source, type) and _marker(source) is not None:
        return
    cls = source if isinstance(source, type) else type(source)
    members = _class_members(cls)
    tools = {(options.name or attr): attr for attr, options, _ in members if options is not None}
    for attr, _, compensates in members:
        if compensates is None:
            continue
        where = f'@compensate_for("{compensates}") on {cls.__qualname__}.{attr}'
        if compensates not in tools:
            raise ToolDefinitionError(
                f"{where}: {cls.__qualname__} has no tool named '{compensates}'. A compensation names a tool "
                "of its own object and takes the same parameters as that tool, or one ToolExecution parameter"
            )
        tool_shape = _shape(_member(cls, tools[compensates], None), compensates)
        own_shape = _shape(_member(cls, attr, None), compensates)
        if own_shape == tool_shape or _takes_execution(own_shape):
            continue
        raise ToolDefinitionError(
            f"{where} must take the same parameters as tool '{compensates}' ({_render(tool_shape)}) "
            f"or one ToolExecution parameter; it takes ({_render(own_shape)})"
        )


def _shape(function: Callable[..., Any], tool_name: str) -> list[tuple[str, Any]]:
    """Names and types of the parameters the model's arguments fill (injected ones are free to differ)."""
    hints = _hints(function, tool_name)
    shape = [
        (name, split_annotated(hints.get(name, Any))[0]) for name in inspect.signature(function).parameters
    ]
    return [(name, tp) for name, tp in shape if optional_inner(tp)[0] not in INJECTED_TYPES]


def _takes_execution(shape: list[tuple[str, Any]]) -> bool:
    from workers.protocol import ToolExecution

    return len(shape) == 1 and split_annotated(shape[0][1])[0] is ToolExecution


def _render(shape: list[tuple[str, Any]]) -> str:
    return ", ".join(f"{name}: {type_label(split_annotated(tp)[0])}" for name, tp in shape)


def _check_unique(definitions: Iterable[ToolDefinition]) -> None:
    seen: set[str] = set()
    for definition in definitions:
        if definition.name in seen:
            raise ToolDefinitionError(
                f"Tool names must be unique. The tool '{definition.name}' appears several times"
            )
        seen.add(definition.name)


def _module_tools(module: types.ModuleType) -> list[ToolDefinition]:
    definitions: list[ToolDefinition] = []
    seen: set[int] = set()
    for value in list(vars(module).values()):
        if id(value) in seen or isinstance(value, type | types.ModuleType):
            continue
        seen.add(id(value))
        if inspect.isfunction(value) and _marker(value) is not None:
            definitions.append(_definition(value, _marker_of(value), compensation=None))
        elif isinstance(value, ToolDefinition):
            definitions.append(value)
        elif isinstance(value, list | tuple) and value and all(isinstance(v, ToolDefinition) for v in value):
            definitions.extend(value)
        elif not callable(value) and _class_members(type(value)):
            definitions.extend(_object_tools(type(value), instance=value))
    return definitions


def _class_members(cls: type) -> list[tuple[str, ToolOptions | None, str | None]]:
    """(attribute, tool options, compensated tool) for each marked attribute, inheritance applied."""
    if cls.__module__ == "builtins":
        return []
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        for attr in vars(klass):
            if attr not in names:
                names.append(attr)
    members: list[tuple[str, ToolOptions | None, str | None]] = []
    for attr in names:
        options: ToolOptions | None = None
        compensates: str | None = None
        for klass in cls.__mro__:
            if attr not in vars(klass):
                continue
            member = _unwrap_method(vars(klass)[attr])
            if options is None and compensates is None:
                options = _marker(member)
                compensates = getattr(member, _COMPENSATES_ATTR, None)
            if options is not None or compensates is not None:
                break
        if options is not None or compensates is not None:
            members.append((attr, options, compensates))
    return members


def _object_tools(cls: type, instance: object | None) -> list[ToolDefinition]:
    members = _class_members(cls)
    compensations: dict[str, Compensation] = {}
    for attr, _, compensates in members:
        if compensates is not None:
            function = _member(cls, attr, instance)
            compensations[compensates] = Compensation(
                tool_name=compensates,
                function=function,
                parameters=_parameters(function, f'@compensate_for("{compensates}")', _doc_args(function)),
                is_async=inspect.iscoroutinefunction(_unwrap_method(function)),
            )
    definitions: list[ToolDefinition] = []
    for attr, options, _ in members:
        if options is None:
            continue
        function = _member(cls, attr, instance)
        name = options.name or attr
        definitions.append(_definition(function, options, compensations.get(name)))
    return definitions


def _member(cls: type, attr: str, instance: object | None) -> Callable[..., Any]:
    if instance is not None:
        bound: Callable[..., Any] = getattr(instance, attr)
        return bound
    static = inspect.getattr_static(cls, attr)
    if isinstance(static, staticmethod | classmethod):
        resolved: Callable[..., Any] = getattr(cls, attr)
        return resolved
    return _SkipSelf(static)
