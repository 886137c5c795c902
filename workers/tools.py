"""`@tool`, `@compensate_for` and discovery of the tools of functions, objects, classes and modules."""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from workers._convert import convert
from workers._types import Param, optional_inner, param_of, split_annotated
from workers.errors import ToolArgumentsError, ToolDefinitionError
from workers.invocation import InvocationContext, InvocationParameters, ToolMemoryId
from workers.schema import SchemaBuilder, type_label
from workers.specification import ReturnBehavior, SearchBehavior, ToolSpecification

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

F = TypeVar("F", bound=Callable[..., Any])

_TOOL_ATTR = "__toolfleet_tool__"
_COMPENSATES_ATTR = "__toolfleet_compensates__"
INJECTED_TYPES: tuple[type, ...] = (InvocationParameters, InvocationContext, ToolMemoryId)
_NO_DEFAULT: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class ToolOptions:
    """What `@tool(...)` declared, before the function is inspected."""

    name: str | None = None
    description: str | None = None
    return_behavior: ReturnBehavior = ReturnBehavior.TO_LLM
    search_behavior: SearchBehavior = SearchBehavior.SEARCHABLE
    metadata: Mapping[str, Any] = field(default_factory=dict)
    pool: str = "default"
    timeout: float | None = None
    retries: int = 0
    idempotent: bool = False
    retry_on: tuple[type[BaseException], ...] = ()


@overload
def tool(func: F, /) -> F: ...


@overload
def tool(
    description: str | None = None,
    /,
    *,
    name: str | None = None,
    return_behavior: ReturnBehavior = ReturnBehavior.TO_LLM,
    search_behavior: SearchBehavior = SearchBehavior.SEARCHABLE,
    metadata: Mapping[str, Any] | None = None,
    pool: str = "default",
    timeout: float | None = None,
    retries: int = 0,
    idempotent: bool = False,
    retry_on: Iterable[type[BaseException]] = (),
) -> Callable[[F], F]: ...


def tool(
    func_or_description: Any = None,
    /,
    *,
    description: str | None = None,
    name: str | None = None,
    return_behavior: ReturnBehavior = ReturnBehavior.TO_LLM,
    search_behavior: SearchBehavior = SearchBehavior.SEARCHABLE,
    metadata: Mapping[str, Any] | None = None,
    pool: str = "default",
    timeout: float | None = None,
    retries: int = 0,
    idempotent: bool = False,
    retry_on: Iterable[type[BaseException]] = (),
) -> Any:
    """Mark a function or method as a tool the model may call.

    `@tool`, `@tool("description")` or `@tool(description=..., name=..., pool=..., timeout=...)`.
    `timeout` is in seconds; `retries` retries transient failures on the worker (the exception types
    in `retry_on`, connection errors, and a lost worker for `idempotent` tools). The function itself
    is returned unchanged: the decorator only records its options.
    """
    if isinstance(func_or_description, str) or func_or_description is None:
        options = ToolOptions(
            name=name,
            description=func_or_description if func_or_description is not None else description,
            return_behavior=ReturnBehavior(return_behavior),
            search_behavior=SearchBehavior(search_behavior),
            metadata=dict(metadata or {}),
            pool=pool,
            timeout=timeout,
            retries=retries,
            idempotent=idempotent,
            retry_on=tuple(retry_on),
        )
        _check_options(options)

        def mark(func: F) -> F:
            setattr(_unwrap_method(func), _TOOL_ATTR, options)
            return func

        return mark
    if callable(func_or_description) or isinstance(func_or_description, staticmethod | classmethod):
        setattr(_unwrap_method(func_or_description), _TOOL_ATTR, ToolOptions())
        return func_or_description
    raise TypeError(f"@tool takes a function or a description, got {type(func_or_description).__name__}")


def _check_options(options: ToolOptions) -> None:
    if options.name is not None and not options.name.strip():
        raise ToolDefinitionError("@tool(name=...) must not be blank")
    if options.timeout is not None and options.timeout <= 0:
        raise ToolDefinitionError(f"@tool(timeout=...) must be positive seconds, got {options.timeout}")
    if options.retries < 0:
        raise ToolDefinitionError(f"@tool(retries=...) must be 0 or more, got {options.retries}")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", options.pool):
        raise ToolDefinitionError(
            f"@tool(pool=...) must be a queue name of letters, digits, '_', '.', '-': {options.pool!r}"
        )


def compensate_for(tool_name: str) -> Callable[[F], F]:
    """Mark a method as the compensation of the tool named `tool_name` (its model-visible name).

    It takes the same parameters as the tool, or one `ToolExecution` parameter. Compensations are
    never shown to the model.
    """
    if not isinstance(tool_name, str) or not tool_name:
        raise ToolDefinitionError("@compensate_for needs the name of the tool it compensates")

    def mark(func: F) -> F:
        setattr(_unwrap_method(func), _COMPENSATES_ATTR, tool_name)
        return func

    return mark


def _unwrap_method(func: Any) -> Any:
    return func.__func__ if isinstance(func, staticmethod | classmethod) else func


@dataclass(frozen=True)
class ToolParameter:
    """One parameter of a tool: visible to the model, or injected by the runtime."""

    attribute: str
    name: str
    annotation: Any
    description: str | None
    required: bool
    default: Any = _NO_DEFAULT
    injected: type | None = None
    positional_only: bool = False

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT


@dataclass(frozen=True)
class Compensation:
    """A method that undoes a tool's side effect."""

    tool_name: str
    function: Callable[..., Any]
    parameters: tuple[ToolParameter, ...]
    is_async: bool


@dataclass(frozen=True)
class ToolDefinition:
    """A discovered tool: its specification, the callable, its parameters and options."""

    specification: ToolSpecification
    function: Callable[..., Any]
    parameters: tuple[ToolParameter, ...]
    options: ToolOptions
    returns_none: bool
    is_async: bool
    compensation: Compensation | None = None
    raw_arguments: bool = False
    """The function takes the model's parsed arguments whole, as `arguments=` (tools proxied to
    another system, such as an MCP server, that validates them itself)."""

    @property
    def name(self) -> str:
        return self.specification.name

    @property
    def pool(self) -> str:
        return self.options.pool

    @property
    def timeout(self) -> float | None:
        return self.options.timeout

    @property
    def return_behavior(self) -> ReturnBehavior:
        return self.options.return_behavior

    @property
    def search_behavior(self) -> SearchBehavior:
        return self.options.search_behavior


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
    hints = _hints(function, tool_name)
    return [
        (name, split_annotated(hints.get(name, Any))[0]) for name in inspect.signature(function).parameters
    ]


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


def _marker(obj: object) -> ToolOptions | None:
    options = getattr(_unwrap_method(obj), _TOOL_ATTR, None)
    return options if isinstance(options, ToolOptions) else None


def _marker_of(obj: object) -> ToolOptions:
    options = _marker(obj)
    assert options is not None
    return options


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


class _SkipSelf:
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


def _definition(
    function: Callable[..., Any], options: ToolOptions, compensation: Compensation | None
) -> ToolDefinition:
    raw = getattr(function, "__wrapped__", None) if isinstance(function, _SkipSelf) else function
    name = options.name or getattr(function, "__name__", None) or type(function).__name__
    doc = inspect.getdoc(raw or function)
    description = options.description if options.description is not None else _summary(doc)
    parameters = _parameters(function, name, _doc_args(raw or function))
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
    hints = _hints(function, name)
    return_type = hints.get("return", _NO_DEFAULT)
    return ToolDefinition(
        specification=specification,
        function=function,
        parameters=parameters,
        options=options,
        returns_none=return_type is None or return_type is type(None),
        is_async=inspect.iscoroutinefunction(_unwrap_method(raw or function)),
        compensation=compensation,
    )


def _hints(function: Callable[..., Any], tool_name: str) -> dict[str, Any]:
    target = getattr(function, "__wrapped__", function) if isinstance(function, _SkipSelf) else function
    target = getattr(target, "__func__", target)
    try:
        import typing

        return typing.get_type_hints(target, include_extras=True)
    except (NameError, TypeError) as exc:
        raise ToolDefinitionError(f"Tool '{tool_name}': cannot resolve its type annotations: {exc}") from exc


def _parameters(
    function: Callable[..., Any], tool_name: str, doc_args: dict[str, str]
) -> tuple[ToolParameter, ...]:
    hints = _hints(function, tool_name)
    parameters: list[ToolParameter] = []
    for param in inspect.signature(function).parameters.values():
        where = f'Parameter "{param.name}" of tool "{tool_name}"'
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ToolDefinitionError(f"{where}: *args and **kwargs cannot be tool parameters")
        annotation = hints.get(param.name, Any)
        base, metadata = split_annotated(annotation)
        meta = param_of(metadata) or Param()
        has_default = param.default is not _NO_DEFAULT
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
    from workers.results import to_jsonable

    try:
        convert(to_jsonable(default), annotation, "default", "default")
    except (ToolArgumentsError, TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"{where}: default value {default!r} cannot be converted to {type_label(base)}: {exc}"
        ) from None


def _summary(doc: str | None) -> str | None:
    if not doc:
        return None
    paragraph = doc.strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in paragraph.splitlines()) or None


_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\w+)\s*(\([^)]*\))?:\s*(.+)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _doc_args(function: Any) -> dict[str, str]:
    """Parameter descriptions from a Google-style `Args:` section of the docstring."""
    doc = inspect.getdoc(function) or ""
    found: dict[str, str] = {}
    inside = False
    last: tuple[str, int] | None = None
    for line in doc.splitlines():
        if _ARGS_HEADER.match(line.strip()):
            inside = True
            continue
        if inside:
            if line and not line[0].isspace():
                break
            match = _ARG_LINE.match(line)
            if match and (last is None or _indent(line) <= last[1]):
                found[match.group(1)] = match.group(3).strip()
                last = (match.group(1), _indent(line))
            elif last is not None and line.strip():
                found[last[0]] += " " + line.strip()
    return found
