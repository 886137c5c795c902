"""The tools of a module: its `@tool` functions with their module-level compensations, its tool
objects, and its tool classes, each made with no arguments unless an object of it is there already.

A tool class whose constructor needs arguments cannot be made here: it is left out, and the log (or,
when the module has no other tool, the error) says how to serve it.
"""

from __future__ import annotations

import inspect
import logging
import re
import types
from collections.abc import Callable
from typing import Any

from workers.errors import ToolDefinitionError
from workers.tools._classes import class_members, has_tools, object_tools
from workers.tools._decorators import COMPENSATES_ATTR, marker_of, tool_marker, unwrap_method
from workers.tools._definitions import Compensation, ToolDefinition
from workers.tools._docstrings import docstring_args
from workers.tools._inspection import build_definition, build_parameters

__all__ = ["module_compensations", "module_function_tools", "module_tool_classes", "module_tools"]

log = logging.getLogger(__name__)


def module_tools(module: types.ModuleType) -> list[ToolDefinition]:
    """Every tool of `module`, in the order its namespace holds them."""
    values = _values(module)
    compensations = _linked_compensations(module)
    objects = [value for value in values if _is_tool_object(value)]
    classes = [value for value in values if isinstance(value, type) and has_tools(value)]
    made, left_out = _instantiate(classes, objects)
    object_ids = {id(value) for value in objects}
    definitions: list[ToolDefinition] = []
    for value in values:
        if isinstance(value, type):
            if value in made:
                definitions.extend(object_tools(value, made[value]))
        elif inspect.isfunction(value) and tool_marker(value) is not None:
            options = marker_of(value)
            name = options.name or value.__name__
            definitions.append(build_definition(value, options, compensations.get(name)))
        elif isinstance(value, ToolDefinition):
            definitions.append(value)
        elif isinstance(value, list | tuple) and value and all(isinstance(v, ToolDefinition) for v in value):
            definitions.extend(value)
        elif id(value) in object_ids:
            definitions.extend(object_tools(type(value), value))
    if left_out and definitions:
        log.warning("Module '%s' serves no tool of %s", module.__name__, _left_out_text(module, left_out))
    elif left_out:
        raise ToolDefinitionError(
            f"Module '{module.__name__}' has no @tool functions and serves no tool of "
            f"{_left_out_text(module, left_out)}"
        )
    elif not definitions:
        raise ToolDefinitionError(
            f"Module '{module.__name__}' does not have any functions annotated with @tool"
        )
    return definitions


def module_function_tools(module: types.ModuleType) -> dict[str, Callable[..., Any]]:
    """The module's `@tool` functions by the name the model sees."""
    tools: dict[str, Callable[..., Any]] = {}
    for value in _values(module):
        if inspect.isfunction(value) and tool_marker(value) is not None:
            tools.setdefault(marker_of(value).name or value.__name__, value)
    return tools


def module_compensations(module: types.ModuleType) -> dict[str, tuple[str, Callable[..., Any]]]:
    """The module-level compensations by the tool they name: (attribute, function).

    Two compensations of one tool are a `ToolDefinitionError`: a tool has one.
    """
    found: dict[str, tuple[str, Callable[..., Any]]] = {}
    seen: set[int] = set()
    for attr, value in list(vars(module).items()):
        if id(value) in seen or not inspect.isfunction(value):
            continue
        seen.add(id(value))
        tool_name = getattr(unwrap_method(value), COMPENSATES_ATTR, None)
        if not isinstance(tool_name, str):
            continue
        if tool_name in found:
            raise ToolDefinitionError(
                f"Module '{module.__name__}' has two compensations of tool '{tool_name}': "
                f"{found[tool_name][0]} and {attr}; a tool has one"
            )
        found[tool_name] = (attr, value)
    return found


def module_tool_classes(module: types.ModuleType) -> list[type]:
    """Every class of the module's namespace that declares tools or compensations, its objects' too."""
    classes: list[type] = []
    for value in _values(module):
        cls = value if isinstance(value, type) else type(value) if _is_tool_object(value) else None
        if cls is not None and cls not in classes and class_members(cls):
            classes.append(cls)
    return classes


def _values(module: types.ModuleType) -> list[Any]:
    values: list[Any] = []
    seen: set[int] = set()
    for value in list(vars(module).values()):
        if id(value) in seen or isinstance(value, types.ModuleType):
            continue
        seen.add(id(value))
        values.append(value)
    return values


def _is_tool_object(value: object) -> bool:
    return not isinstance(value, type) and not inspect.isroutine(value) and bool(class_members(type(value)))


def _linked_compensations(module: types.ModuleType) -> dict[str, Compensation]:
    linked: dict[str, Compensation] = {}
    for tool_name, (_, function) in module_compensations(module).items():
        linked[tool_name] = Compensation(
            tool_name=tool_name,
            function=function,
            parameters=build_parameters(
                function, f'@compensate_for("{tool_name}")', docstring_args(function), compensation=True
            ),
            is_async=inspect.iscoroutinefunction(function),
        )
    return linked


def _instantiate(
    classes: list[type], objects: list[object]
) -> tuple[dict[type, object], list[tuple[type, str]]]:
    """An object for each tool class not served otherwise, and the classes that need arguments."""
    made: dict[type, object] = {}
    left_out: list[tuple[type, str]] = []
    for cls in classes:
        if any(isinstance(value, cls) for value in objects):
            continue  # served through that object
        if any(other is not cls and issubclass(other, cls) for other in classes):
            continue  # served through its subclass (or left out with it)
        try:
            made[cls] = cls()
        except TypeError as exc:
            left_out.append((cls, str(exc)))
    return made, left_out


def _left_out_text(module: types.ModuleType, left_out: list[tuple[type, str]]) -> str:
    listed = "; ".join(
        f"{cls.__qualname__} (tools {', '.join(_tool_names(cls))}; {reason})" for cls, reason in left_out
    )
    example = _instance_name(left_out[0][0])
    return (
        f"its tool classes whose constructors need arguments: {listed}. To serve one, make an instance "
        f"in the module (`{example} = {left_out[0][0].__qualname__}(...)`): the module's tool objects are "
        f"served, or name that instance alone: --tools {module.__name__}:{example}"
    )


def _tool_names(cls: type) -> list[str]:
    return [options.name or attr for attr, options, _ in class_members(cls) if options is not None]


def _instance_name(cls: type) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
