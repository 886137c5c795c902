"""The tools of a class or an object: its marked methods, inheritance applied, with their compensations."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from workers.tools._decorators import COMPENSATES_ATTR, ToolOptions, tool_marker, unwrap_method
from workers.tools._definitions import Compensation, ToolDefinition
from workers.tools._docstrings import docstring_args
from workers.tools._inspection import SkipSelf, build_definition, build_parameters

__all__ = ["class_members", "has_tools", "member", "object_tools"]


def class_members(cls: type) -> list[tuple[str, ToolOptions | None, str | None]]:
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
            found = unwrap_method(vars(klass)[attr])
            if options is None and compensates is None:
                options = tool_marker(found)
                compensates = getattr(found, COMPENSATES_ATTR, None)
            if options is not None or compensates is not None:
                break
        if options is not None or compensates is not None:
            members.append((attr, options, compensates))
    return members


def has_tools(cls: type) -> bool:
    """Whether `cls` (or a base) declares at least one `@tool` method."""
    return any(options is not None for _, options, _ in class_members(cls))


def object_tools(cls: type, instance: object | None) -> list[ToolDefinition]:
    """The tools of `cls`, bound to `instance` (or taken from the class when it is `None`)."""
    members = class_members(cls)
    compensations: dict[str, Compensation] = {}
    for attr, _, compensates in members:
        if compensates is not None:
            function = member(cls, attr, instance)
            compensations[compensates] = Compensation(
                tool_name=compensates,
                function=function,
                parameters=build_parameters(
                    function, f'@compensate_for("{compensates}")', docstring_args(function), compensation=True
                ),
                is_async=inspect.iscoroutinefunction(unwrap_method(function)),
            )
    definitions: list[ToolDefinition] = []
    for attr, options, _ in members:
        if options is None:
            continue
        function = member(cls, attr, instance)
        name = options.name or attr
        definitions.append(build_definition(function, options, compensations.get(name)))
    return definitions


def member(cls: type, attr: str, instance: object | None) -> Callable[..., Any]:
    """The attribute as a callable: bound to `instance`, or without its `self` when taken from `cls`."""
    if instance is not None:
        bound: Callable[..., Any] = getattr(instance, attr)
        return bound
    static = inspect.getattr_static(cls, attr)
    if isinstance(static, staticmethod | classmethod):
        resolved: Callable[..., Any] = getattr(cls, attr)
        return resolved
    return SkipSelf(static)
