"""One function inspected into a `ToolDefinition`: its parameters, injected values and JSON schema."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from workers.calls._convert import convert
from workers.calls.invocation import InvocationContext, InvocationParameters, ToolCallIdentity, ToolMemoryId
from workers.calls.progress import ToolProgressReporter
from workers.errors import ToolArgumentsError, ToolDefinitionError
from workers.tools._decorators import ToolOptions, unwrap_method
from workers.tools._definitions import NO_DEFAULT, Compensation, ToolDefinition, ToolParameter
from workers.tools._docstrings import doc_summary, docstring_args
from workers.tools._types import Param, optional_inner, param_of, split_annotated
from workers.tools.schema import SchemaBuilder, type_label
from workers.tools.specification import ToolSpecification

__all__ = ["INJECTED_TYPES"]

INJECTED_TYPES: tuple[type, ...] = (
    InvocationParameters,
    InvocationContext,
    ToolMemoryId,
    ToolCallIdentity,
    ToolProgressReporter,
)


class SkipSelf:
    """An instance method taken from a class: its `self` is not a tool parameter."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.__name__ = function.__name__
        self.__doc__ = function.__doc__
        self.__wrapped__ = function
        params = list(inspect.signature(function).parameters.values())[1:]
        self.__signature__ = inspect.signature(function).replace(parameters=params)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ToolDefinitionError(
            f"Tool method '{self.__name__}' was taken from a class: pass an instance to run it"
        )


def build_definition(
    function: Callable[..., Any], options: ToolOptions, compensation: Compensation | None
) -> ToolDefinition:
    raw = getattr(function, "__wrapped__", None) if isinstance(function, SkipSelf) else function
    name = options.name or getattr(function, "__name__", None) or type(function).__name__
    doc = inspect.getdoc(raw or function)
    description = options.description if options.description is not None else doc_summary(doc)
    parameters = build_parameters(function, name, docstring_args(raw or function))
    builder = SchemaBuilder()
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in parameters:
        if parameter.injected is not None:
            continue
        try:
            properties[parameter.name] = builder.schema(parameter.annotation, parameter.description)
        except ToolDefinitionError as exc:
            raise ToolDefinitionError(f'Parameter "{parameter.name}" of tool "{name}": {exc}') from None
        if parameter.required:
            required.append(parameter.name)
    specification = ToolSpecification(
        name=name,
        description=description,
        parameters=builder.parameters(properties, required) if properties else None,
        metadata=dict(options.metadata),
    )
    hints = type_hints_of(function, name)
    return_type = hints.get("return", NO_DEFAULT)
    return ToolDefinition(
        specification=specification,
        function=function,
        parameters=parameters,
        options=options,
        returns_none=return_type is None or return_type is type(None),
        is_async=inspect.iscoroutinefunction(unwrap_method(raw or function)),
        compensation=compensation,
    )


def type_hints_of(function: Callable[..., Any], tool_name: str) -> dict[str, Any]:
    target = getattr(function, "__wrapped__", function) if isinstance(function, SkipSelf) else function
    target = getattr(target, "__func__", target)
    try:
        import typing

        return typing.get_type_hints(target, include_extras=True)
    except (NameError, TypeError) as exc:
        raise ToolDefinitionError(f"Tool '{tool_name}': cannot resolve its type annotations: {exc}") from exc


def build_parameters(
    function: Callable[..., Any], tool_name: str, doc_args: dict[str, str], *, compensation: bool = False
) -> tuple[ToolParameter, ...]:
    """The parameters of a tool (or, with `compensation`, of a compensation: its parameters are
    checked against its tool's instead, when compensation is on)."""
    hints = type_hints_of(function, tool_name)
    parameters: list[ToolParameter] = []
    for param in inspect.signature(function).parameters.values():
        where = f'Parameter "{param.name}" of tool "{tool_name}"'
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ToolDefinitionError(f"{where}: *args and **kwargs cannot be tool parameters")
        if param.name not in hints and not compensation:
            # Without a type there is nothing to tell the model nor to check its argument against.
            raise ToolDefinitionError(
                f"{where} has no type annotation: annotate it (for example `{param.name}: str`, "
                f"or `{param.name}: Any` to accept any JSON value)"
            )
        annotation = hints.get(param.name, Any)
        base, metadata = split_annotated(annotation)
        meta = param_of(metadata) or Param()
        has_default = param.default is not NO_DEFAULT
        injected = next((kind for kind in INJECTED_TYPES if optional_inner(base)[0] is kind), None)
        if injected is not None:
            if has_default:
                raise ToolDefinitionError(
                    f"{where} is injected ({injected.__name__}) and cannot have a default"
                )
            parameters.append(
                ToolParameter(param.name, param.name, annotation, None, False, injected=injected)
            )
            continue
        _, optional = optional_inner(base)
        if meta.required is False and not has_default and not optional:
            raise ToolDefinitionError(
                f"{where} is declared Param(required=False) but has no default and its type "
                f"{type_label(base)} is not optional: give it a default or make it Optional"
            )
        if has_default and param.default is not None:
            _check_default(param.default, annotation, where, base)
        required = not has_default and not optional and meta.required is not False
        parameters.append(
            ToolParameter(
                attribute=param.name,
                name=meta.name or param.name,
                annotation=annotation,
                description=meta.description or doc_args.get(param.name),
                required=required,
                default=param.default,
                positional_only=param.kind is inspect.Parameter.POSITIONAL_ONLY,
            )
        )
    return tuple(parameters)


def _check_default(default: Any, annotation: Any, where: str, base: Any) -> None:
    from workers.calls.results import to_jsonable

    try:
        convert(to_jsonable(default), annotation, "default", "default")
    except (ToolArgumentsError, TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"{where}: default value {default!r} cannot be converted to {type_label(base)}: {exc}"
        ) from None
