"""Undoing one successful call in this process: the compensation's arguments and its run."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import logging
from concurrent.futures import Executor

from workers.calls.binding import BoundCall, bind_values, parse_arguments
from workers.calls.invocation import Invocation, InvocationParameters, ToolCallIdentity
from workers.calls.loops import run_awaitable
from workers.calls.runner import call_identity, error_outcome
from workers.errors import ToolDefinitionError
from workers.protocol import OutcomeKind, ToolExecution, ToolOutcome
from workers.tools import ToolDefinition, ToolParameter
from workers.tools._types import split_annotated

__all__ = ["arun_compensation", "bind_compensation", "run_compensation"]

log = logging.getLogger(__name__)


def bind_compensation(
    definition: ToolDefinition,
    execution: ToolExecution,
    invocation: Invocation,
    identity: ToolCallIdentity | None = None,
) -> BoundCall:
    """Arguments for `definition`'s compensation: the call's own arguments, or its `ToolExecution`,
    and whatever it asks to have injected (its own injected parameters, not the tool's)."""
    compensation = definition.compensation
    if compensation is None:
        raise ToolDefinitionError(f"Tool '{definition.name}' has no compensation")
    identity = identity or call_identity(invocation, execution.request)
    parameters = InvocationParameters(copy.deepcopy(dict(invocation.parameters)))
    visible = [p for p in compensation.parameters if p.injected is None]
    if len(visible) == 1 and split_annotated(visible[0].annotation)[0] is ToolExecution:
        injected = tuple(p for p in compensation.parameters if p.injected is not None)
        bound = bind_values(definition.name, injected, {}, invocation.context, parameters, identity)
        if visible[0].positional_only:
            bound.args.insert(compensation.parameters.index(visible[0]), execution)
        else:
            bound.kwargs[visible[0].attribute] = execution
        return bound
    values = parse_arguments(execution.request.arguments, definition.name)
    declared = _compensation_parameters(definition)
    return bind_values(definition.name, declared, values, invocation.context, parameters, identity)


def _compensation_parameters(definition: ToolDefinition) -> tuple[ToolParameter, ...]:
    """The compensation's parameters, each visible one read as the tool's parameter at its position
    (the model's names, defaults and types), each injected one as the compensation declares it."""
    assert definition.compensation is not None
    tool_visible = [p for p in definition.parameters if p.injected is None]
    own = definition.compensation.parameters
    if len([p for p in own if p.injected is None]) != len(tool_visible):
        raise ToolDefinitionError(
            f"The compensation of tool '{definition.name}' must take the same parameters as the tool"
        )
    from_tool = iter(tool_visible)
    return tuple(
        p
        if p.injected is not None
        else dataclasses.replace(next(from_tool), attribute=p.attribute, positional_only=p.positional_only)
        for p in own
    )


def run_compensation(
    definition: ToolDefinition,
    execution: ToolExecution,
    invocation: Invocation,
    identity: ToolCallIdentity | None = None,
) -> ToolOutcome:
    """Undo one successful call of `definition` in this process; a failure is an error outcome.

    `identity` is the undone call's, with the compensation's own attempt number.
    """
    try:
        bound = bind_compensation(definition, execution, invocation, identity)
        assert definition.compensation is not None
        value = definition.compensation.function(*bound.args, **bound.kwargs)
        if inspect.isawaitable(value):
            value = run_awaitable(value)
    except Exception as exc:
        log.warning("compensation of %s call %s failed: %s", definition.name, execution.request.id, exc)
        return error_outcome(exc, OutcomeKind.EXECUTION_ERROR)
    return ToolOutcome(
        kind=OutcomeKind.SUCCESS, text="Compensated", parameter_changes=bound.parameters.changes()
    )


async def arun_compensation(
    definition: ToolDefinition,
    execution: ToolExecution,
    invocation: Invocation,
    identity: ToolCallIdentity | None = None,
    *,
    executor: Executor | None = None,
) -> ToolOutcome:
    """`run_compensation` from async code: an `async` compensation is awaited, others run on threads."""
    compensation = definition.compensation
    if compensation is not None and compensation.is_async:
        try:
            bound = bind_compensation(definition, execution, invocation, identity)
            await compensation.function(*bound.args, **bound.kwargs)
        except Exception as exc:
            return error_outcome(exc, OutcomeKind.EXECUTION_ERROR)
        return ToolOutcome(kind=OutcomeKind.SUCCESS, text="Compensated")
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, run_compensation, definition, execution, invocation, identity)
