"""Run one tool call in this process: bind, call, convert; shared by workers and `LocalExecutor`."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from workers.binding import BoundCall, bind_arguments
from workers.errors import ToolArgumentsError, ToolErrorVisibleToLlm
from workers.invocation import Invocation
from workers.protocol import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.results import convert_result
from workers.tools import ToolDefinition

__all__ = ["arun_tool", "error_outcome", "run_tool"]

log = logging.getLogger(__name__)


def run_tool(
    definition: ToolDefinition, request: ToolExecutionRequest, invocation: Invocation | None = None
) -> ToolOutcome:
    """Run the call synchronously (an `async` tool runs in a fresh event loop)."""
    invocation = invocation or Invocation()
    started = time.perf_counter()
    try:
        bound = bind_arguments(definition, request.arguments, invocation)
    except ToolArgumentsError as exc:
        return _logged(definition, request, started, error_outcome(exc, OutcomeKind.ARGUMENTS_ERROR))
    except (RecursionError, ArithmeticError, TypeError, ValueError) as exc:
        error = ToolArgumentsError(f'Arguments of tool "{definition.name}" could not be bound: {exc}')
        return _logged(definition, request, started, error_outcome(error, OutcomeKind.ARGUMENTS_ERROR))
    try:
        value = definition.function(*bound.args, **bound.kwargs)
        if inspect.isawaitable(value):
            value = asyncio.run(_await(value))
    except Exception as exc:
        return _logged(definition, request, started, error_outcome(exc, OutcomeKind.EXECUTION_ERROR, bound))
    return _logged(definition, request, started, _success(definition, value, bound))


async def arun_tool(
    definition: ToolDefinition,
    request: ToolExecutionRequest,
    invocation: Invocation | None = None,
    *,
    executor: Executor | None = None,
) -> ToolOutcome:
    """Run the call from async code: `async` tools are awaited, others run on `executor`'s threads."""
    invocation = invocation or Invocation()
    started = time.perf_counter()
    try:
        bound = bind_arguments(definition, request.arguments, invocation)
    except ToolArgumentsError as exc:
        return _logged(definition, request, started, error_outcome(exc, OutcomeKind.ARGUMENTS_ERROR))
    except (RecursionError, ArithmeticError, TypeError, ValueError) as exc:
        error = ToolArgumentsError(f'Arguments of tool "{definition.name}" could not be bound: {exc}')
        return _logged(definition, request, started, error_outcome(error, OutcomeKind.ARGUMENTS_ERROR))
    try:
        if definition.is_async:
            value = await definition.function(*bound.args, **bound.kwargs)
        else:
            loop = asyncio.get_running_loop()
            call: Callable[[], Any] = lambda: definition.function(*bound.args, **bound.kwargs)  # noqa: E731
            value = await loop.run_in_executor(executor, call)
            if inspect.isawaitable(value):
                value = await value
    except Exception as exc:
        return _logged(definition, request, started, error_outcome(exc, OutcomeKind.EXECUTION_ERROR, bound))
    return _logged(definition, request, started, _success(definition, value, bound))


async def _await(value: Any) -> Any:
    return await value


def _success(definition: ToolDefinition, value: Any, bound: BoundCall) -> ToolOutcome:
    try:
        result = convert_result(value, returns_none=definition.returns_none)
    except Exception as exc:
        return error_outcome(
            exc, OutcomeKind.EXECUTION_ERROR, bound, prefix=f"Result of tool '{definition.name}': "
        )
    return ToolOutcome(
        kind=OutcomeKind.SUCCESS,
        text=result.text,
        contents=result.contents,
        result_object=result.result_object,
        attributes=result.attributes,
        parameter_changes=bound.parameters.changes(),
    )


def error_outcome(
    exc: BaseException, kind: OutcomeKind, bound: BoundCall | None = None, *, prefix: str = ""
) -> ToolOutcome:
    """The outcome of a call that raised `exc`: its message (or type name), type, and text for the model."""
    message = str(exc) or type(exc).__name__
    for_llm: str | None = None
    if isinstance(exc, ToolErrorVisibleToLlm):
        candidate = exc.message_for_llm()
        for_llm = candidate if candidate and candidate.strip() else None
    return ToolOutcome(
        kind=kind,
        text=prefix + message,
        error_type=type(exc).__name__,
        message_for_llm=for_llm,
        parameter_changes=bound.parameters.changes() if bound is not None else {},
        exception=exc,
    )


def _logged(
    definition: ToolDefinition, request: ToolExecutionRequest, started: float, outcome: ToolOutcome
) -> ToolOutcome:
    elapsed_ms = (time.perf_counter() - started) * 1000
    if outcome.is_error:
        log.info(
            "tool %s call %s: %s (%s) in %.1f ms",
            definition.name,
            request.id,
            outcome.kind.value,
            outcome.error_type,
            elapsed_ms,
        )
    else:
        log.debug("tool %s call %s: success in %.1f ms", definition.name, request.id, elapsed_ms)
    return outcome
