"""`@tool` and `@compensate_for`: the options they record on a function, and reading them back."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from workers.errors import ToolDefinitionError
from workers.tools.rate_limits import parse_rate_limit
from workers.tools.specification import ReturnBehavior, SearchBehavior

__all__ = ["ToolOptions", "compensate_for", "tool"]

F = TypeVar("F", bound=Callable[..., Any])

_TOOL_ATTR = "__toolfleet_tool__"
COMPENSATES_ATTR = "__toolfleet_compensates__"


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
    heartbeat_timeout_s: float | None = None
    requires_approval: bool = False
    concurrency: int | None = None  # at most this many calls at once in the whole fleet
    concurrency_key: str | None = None  # ... per value of this invocation parameter or argument
    rate_limit: str | None = None  # at most this many starts per period in the whole fleet ("20/s")
    rate_limit_key: str | None = None  # ... per value of this invocation parameter or argument


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
    heartbeat_timeout_s: float | None = None,
    requires_approval: bool = False,
    concurrency: int | None = None,
    concurrency_key: str | None = None,
    rate_limit: str | None = None,
    rate_limit_key: str | None = None,
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
    heartbeat_timeout_s: float | None = None,
    requires_approval: bool = False,
    concurrency: int | None = None,
    concurrency_key: str | None = None,
    rate_limit: str | None = None,
    rate_limit_key: str | None = None,
) -> Any:
    """Mark a function or method as a tool the model may call.

    `@tool`, `@tool("description")` or `@tool(description=..., name=..., pool=..., timeout=...)`.
    `timeout` is in seconds; `retries` retries transient failures on the worker (the exception types
    in `retry_on`, connection errors, and a lost worker for `idempotent` tools). With
    `heartbeat_timeout_s`, a call whose tool has not beaten (`ToolProgressReporter.heartbeat()` or
    `.progress()`) for that many seconds is declared lost, as if its worker died. The function itself
    is returned unchanged: the decorator only records its options.

    With `concurrency=N`, at most N calls of the tool run at once in the whole fleet (every
    orchestrator, every worker); with `concurrency_key` as well, at most N per value of that invocation
    parameter (or, when the invocation has none, of that argument). A call waits for its slot before it
    is published, its wait counted against its deadline.

    With `rate_limit="20/s"` (or `"100/m"`, `"5/10s"`), at most that many calls of the tool start in
    any window of the period across the fleet; with `rate_limit_key` as well, that many per value of the
    invocation parameter or argument. Calls over the rate wait their turn, in order, before they are
    published.
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
            heartbeat_timeout_s=heartbeat_timeout_s,
            requires_approval=bool(requires_approval),
            concurrency=concurrency,
            concurrency_key=concurrency_key,
            rate_limit=rate_limit,
            rate_limit_key=rate_limit_key,
        )
        _check_options(options)

        def mark(func: F) -> F:
            setattr(unwrap_method(func), _TOOL_ATTR, options)
            return func

        return mark
    if callable(func_or_description) or isinstance(func_or_description, staticmethod | classmethod):
        setattr(unwrap_method(func_or_description), _TOOL_ATTR, ToolOptions())
        return func_or_description
    raise TypeError(f"@tool takes a function or a description, got {type(func_or_description).__name__}")


def _check_options(options: ToolOptions) -> None:
    if options.name is not None and not options.name.strip():
        raise ToolDefinitionError("@tool(name=...) must not be blank")
    if options.timeout is not None and options.timeout <= 0:
        raise ToolDefinitionError(f"@tool(timeout=...) must be positive seconds, got {options.timeout}")
    beat = options.heartbeat_timeout_s
    if beat is not None and (isinstance(beat, bool) or not isinstance(beat, int | float) or not beat > 0):
        raise ToolDefinitionError(f"@tool(heartbeat_timeout_s=...) must be positive seconds, got {beat!r}")
    if options.retries < 0:
        raise ToolDefinitionError(f"@tool(retries=...) must be 0 or more, got {options.retries}")
    _check_concurrency(options)
    _check_rate_limit(options)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", options.pool):
        raise ToolDefinitionError(
            f"@tool(pool=...) must be a queue name of letters, digits, '_', '.', '-': {options.pool!r}"
        )


def _check_concurrency(options: ToolOptions) -> None:
    limit = options.concurrency
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ToolDefinitionError(
            f"@tool(concurrency=...) must be a whole number of calls, 1 or more, got {limit!r}"
        )
    key = options.concurrency_key
    if key is not None and (not isinstance(key, str) or not key.strip()):
        raise ToolDefinitionError(
            f"@tool(concurrency_key=...) must name a parameter or argument, got {key!r}"
        )
    if key is not None and limit is None:
        raise ToolDefinitionError("@tool(concurrency_key=...) needs concurrency=N: how many calls per value")


def _check_rate_limit(options: ToolOptions) -> None:
    if options.rate_limit is not None:
        try:
            parse_rate_limit(options.rate_limit)
        except ValueError as exc:
            raise ToolDefinitionError(f"@tool(rate_limit=...): {exc}") from None
    key = options.rate_limit_key
    if key is not None and (not isinstance(key, str) or not key.strip()):
        raise ToolDefinitionError(f"@tool(rate_limit_key=...) must name a parameter or argument, got {key!r}")
    if key is not None and options.rate_limit is None:
        raise ToolDefinitionError(
            "@tool(rate_limit_key=...) needs rate_limit='N/s': how many starts per value"
        )


def compensate_for(tool_name: str) -> Callable[[F], F]:
    """Mark a method as the compensation of the tool named `tool_name` (its model-visible name).

    It takes the same parameters as the tool, or one `ToolExecution` parameter. Compensations are
    never shown to the model.
    """
    if not isinstance(tool_name, str) or not tool_name:
        raise ToolDefinitionError("@compensate_for needs the name of the tool it compensates")

    def mark(func: F) -> F:
        setattr(unwrap_method(func), COMPENSATES_ATTR, tool_name)
        return func

    return mark


def unwrap_method(func: Any) -> Any:
    return func.__func__ if isinstance(func, staticmethod | classmethod) else func


def tool_marker(obj: object) -> ToolOptions | None:
    options = getattr(unwrap_method(obj), _TOOL_ATTR, None)
    return options if isinstance(options, ToolOptions) else None


def marker_of(obj: object) -> ToolOptions:
    options = tool_marker(obj)
    assert options is not None
    return options
