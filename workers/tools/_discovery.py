"""`@tool`, `@compensate_for` and discovery of the tools of functions, objects, classes and modules."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable
from typing import Any

from workers.errors import ToolDefinitionError
from workers.tools._classes import class_members, member, object_tools
from workers.tools._decorators import ToolOptions, compensate_for, marker_of, tool, tool_marker
from workers.tools._definitions import Compensation, ToolDefinition, ToolParameter
from workers.tools._inspection import INJECTED_TYPES, build_definition, type_hints_of
from workers.tools._modules import (
    module_compensations,
    module_function_tools,
    module_tool_classes,
    module_tools,
)
from workers.tools._types import optional_inner, split_annotated
from workers.tools.schema import type_label
from workers.tools.specification import ToolSpecification

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
        definitions = module_tools(source)
    elif isinstance(source, type):
        definitions = object_tools(source, instance=None)
    elif callable(source) and tool_marker(source) is not None:
        definitions = [build_definition(source, marker_of(source), compensation=None)]
    else:
        definitions = object_tools(type(source), instance=source)
    if not definitions:
        raise ToolDefinitionError(f"Object '{source!r}' does not have any methods annotated with @tool")
    _check_unique(definitions)
    return definitions


def check_compensations(source: object) -> None:
    """Check every `@compensate_for` of `source`: its tool exists on the same object (or, for a
    module-level compensation, among the module's `@tool` functions), and it takes the tool's
    parameters (same names and types, in order) or one `ToolExecution` parameter."""
    if isinstance(source, types.ModuleType):
        _check_module_compensations(source)
        for cls in module_tool_classes(source):
            check_compensations(cls)
        return
    if callable(source) and not isinstance(source, type) and tool_marker(source) is not None:
        return
    cls = source if isinstance(source, type) else type(source)
    members = class_members(cls)
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
        _check_shape(where, compensates, member(cls, tools[compensates], None), member(cls, attr, None))


def _check_module_compensations(module: types.ModuleType) -> None:
    tools = module_function_tools(module)
    for compensates, (attr, function) in module_compensations(module).items():
        where = f"@compensate_for(\"{compensates}\") on {attr} of module '{module.__name__}'"
        if compensates not in tools:
            owner = next(
                (
                    cls.__qualname__
                    for cls in module_tool_classes(module)
                    if any((o.name or a) == compensates for a, o, _ in class_members(cls) if o is not None)
                ),
                None,
            )
            hint = f" ('{compensates}' is a tool of {owner}: put its compensation in that class)"
            raise ToolDefinitionError(
                f"{where}: module '{module.__name__}' has no tool named '{compensates}'"
                f"{hint if owner else ''}. A module-level compensation names a @tool function of its own "
                "module and takes the same parameters as that tool, or one ToolExecution parameter"
            )
        _check_shape(where, compensates, tools[compensates], function)


def _check_shape(
    where: str, tool_name: str, tool_function: Callable[..., Any], compensation: Callable[..., Any]
) -> None:
    tool_shape = _shape(tool_function, tool_name)
    own_shape = _shape(compensation, tool_name)
    if own_shape == tool_shape or _takes_execution(own_shape):
        return
    raise ToolDefinitionError(
        f"{where} must take the same parameters as tool '{tool_name}' ({_render(tool_shape)}) "
        f"or one ToolExecution parameter; it takes ({_render(own_shape)})"
    )


def _shape(function: Callable[..., Any], tool_name: str) -> list[tuple[str, Any]]:
    """Names and types of the parameters the model's arguments fill (injected ones are free to differ)."""
    hints = type_hints_of(function, tool_name)
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
