"""Where the loop tells the telemetry what happens: the invocation, each model call, each tool call,
each compensation — their spans, metrics and log fields, kept out of the loop's own code.

`traced_invocation`, `traced_call` and `traced_compensation` decorate the loop's functions (one
line each); `model_called` is called once per model response. Without tracing they only count.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from orchestrator.telemetry.metrics import (
    APPROVAL_WAIT,
    COMPENSATIONS,
    DEADLINE_MISSES,
    INVOCATIONS,
    MODEL_DURATION,
    MODEL_TOKENS,
    SLOTS_HELD,
    TOOL_CALLS,
    TOOL_DURATION,
    TOOL_IN_FLIGHT,
    TOOL_WAIT,
)
from workers.protocol import OutcomeKind, ToolOutcome
from workers.telemetry.logs import CallFields, bound_call, current_call
from workers.telemetry.tracing import (
    GEN_AI_OPERATION,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_NAME,
    content_recorded,
    continued_trace,
    current_span,
    mark_failed,
    record_span,
    span,
    tracing_enabled,
)
from workers.tenants import TENANT_NAME
from workers.tools import ToolDefinition

__all__ = [
    "approvals_requested",
    "approvals_waited",
    "model_called",
    "outcome_known",
    "slot_waited",
    "traced_call",
    "traced_compensation",
    "traced_invocation",
    "traced_recovery",
]

_F = TypeVar("_F", bound=Callable[..., Awaitable[Any]])
DEFAULT_SERVICE = "default"


def _service(config: Any) -> str:
    return str(getattr(config, "name", None) or DEFAULT_SERVICE)


def traced_invocation(run: _F) -> _F:
    """Around `run_invocation(config, state)` (and `resume_invocation`): the invocation's span (every
    other span of it is a descendant), and the invocations counted by finish reason."""

    @functools.wraps(run)
    async def wrapper(config: Any, state: Any, *rest: Any) -> Any:
        service = _service(config)
        invocation_id = str(state.context.invocation_id)
        attributes = {
            GEN_AI_OPERATION: "invoke_agent",
            "gen_ai.agent.name": service,
            "gen_ai.conversation.id": state.memory_id,
            "toolfleet.invocation.id": invocation_id,
        }
        tenant = getattr(state, "parameters", {}).get("tenant")
        if isinstance(tenant, str) and TENANT_NAME.fullmatch(tenant):
            # whose it is, the one invocation parameter a span carries: a name the service gives
            attributes["toolfleet.tenant"] = tenant
        with bound_call(CallFields(invocation_id)), span(f"invoke_agent {service}", attributes) as current:
            try:
                result = await run(config, state, *rest)
            except asyncio.CancelledError:
                INVOCATIONS.labels(service, "cancelled").inc()
                raise
            except BaseException:
                INVOCATIONS.labels(service, "error").inc()
                raise
            reason = _reason(result.finish_reason) or "none"
            INVOCATIONS.labels(service, reason).inc()
            current.set_attribute("gen_ai.response.finish_reasons", [reason])
            usage = result.token_usage
            if usage is not None:
                current.set_attributes(_usage_attributes(usage))
            return result

    return cast(_F, wrapper)


def _reason(finish_reason: Any) -> str | None:
    """A finish reason as spans and metrics name it (`stop`, `approval_required`, ...)."""
    return None if finish_reason is None else str(finish_reason.value).lower()


def _usage_attributes(usage: Any) -> dict[str, Any]:
    return {
        k: v
        for k, v in (
            ("gen_ai.usage.input_tokens", usage.input_tokens),
            ("gen_ai.usage.output_tokens", usage.output_tokens),
        )
        if v is not None
    }


def model_called(config: Any, request: Any, response: Any, began: float) -> None:
    """After a model call that began at `began` (`time.perf_counter()`): its latency and tokens, and
    its span (a child of the invocation's)."""
    elapsed = time.perf_counter() - began
    service, provider = _service(config), str(getattr(config.chat_model, "provider", "model"))
    MODEL_DURATION.labels(service, provider).observe(elapsed)
    usage = response.token_usage
    if usage is not None:
        if usage.input_tokens:
            MODEL_TOKENS.labels(service, provider, "input").inc(usage.input_tokens)
        if usage.output_tokens:
            MODEL_TOKENS.labels(service, provider, "output").inc(usage.output_tokens)
    model = getattr(response, "model_name", None) or getattr(config.chat_model, "model_name", None)
    reason = _reason(response.finish_reason)
    attributes: dict[str, Any] = {
        GEN_AI_OPERATION: "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "gen_ai.response.finish_reasons": [reason] if reason else None,
        "toolfleet.tool_calls": len(response.ai_message.tool_execution_requests),
        "toolfleet.tools_shown": len(request.tool_specifications),
        **(_usage_attributes(usage) if usage is not None else {}),
    }
    record_span(f"chat {model or provider}", attributes, elapsed)


def outcome_known(outcome: ToolOutcome) -> None:
    """The executor has a call's outcome: the lines logged after it name the worker that ran it."""
    fields = current_call()
    if fields is not None and outcome.worker:
        fields.worker = outcome.worker


def slots_held(scope: str, delta: int) -> None:
    """This process took (`delta` > 0) or freed slots of `scope` (a slot's name, its key's value left
    out: the label stays bounded)."""
    SLOTS_HELD.labels(scope.split("=", 1)[0]).inc(delta)


def slot_waited(definition: ToolDefinition, seconds: float, taken: bool, reason: str = "concurrency") -> None:
    """A call of a tool with a concurrency limit (`reason` "concurrency") or a rate limit ("rate_limit")
    waited `seconds` before it could start (0 if it need not), and got its turn or not: counted, and told
    on the call's span."""
    result = "taken" if taken else "timed_out"
    TOOL_WAIT.labels(definition.name, definition.pool, reason, result).observe(seconds)
    current = current_span()
    if current is not None and seconds > 0:
        current.add_event(
            "toolfleet.slot_wait",
            {"toolfleet.wait_s": seconds, "toolfleet.wait.result": result, "toolfleet.wait.reason": reason},
        )


def _call_attributes(state: Any, request: Any, tool: Any, fields: CallFields) -> dict[str, Any]:
    """The span attributes of one tool call as the orchestrator dispatches it."""
    attributes: dict[str, Any] = {
        GEN_AI_OPERATION: "execute_tool",
        GEN_AI_TOOL_NAME: request.name,
        GEN_AI_TOOL_CALL_ID: request.id,
        "gen_ai.tool.type": "function",
        "toolfleet.pool": fields.pool,
        "toolfleet.invocation.id": fields.invocation_id,
        "toolfleet.turn": state.round_trips,
        "toolfleet.side": "orchestrator",
    }
    if isinstance(tool, ToolDefinition) and tool.timeout is not None:
        attributes["toolfleet.timeout_s"] = tool.timeout
    if content_recorded():
        attributes["gen_ai.tool.call.arguments"] = request.arguments
    return attributes


def traced_call(execute: _F) -> _F:
    """Around one tool call of the loop (`config, state, call`): its log fields, its span (the parent
    of the worker's, through the message headers) and its metrics."""

    @functools.wraps(execute)
    async def wrapper(config: Any, state: Any, call: Any) -> Any:
        request = call.request
        tool = state.tools.get(request.name)
        pool = tool.pool if isinstance(tool, ToolDefinition) else None
        fields = CallFields(str(state.context.invocation_id), request.id, request.name, pool)
        attributes = _call_attributes(state, request, tool, fields) if tracing_enabled() else {}
        started = time.perf_counter()
        in_flight = TOOL_IN_FLIGHT.labels(request.name, pool) if pool is not None else None
        if in_flight is not None:
            in_flight.inc()
        kind = "error"  # a handler that raised ends the invocation: no execution is built
        try:
            with bound_call(fields), span(f"execute_tool {request.name}", attributes) as current:
                await execute(config, state, call)
                execution = call.execution
                kind = execution.status if execution is not None else kind
                current.set_attributes({"toolfleet.outcome.kind": kind, "toolfleet.worker": fields.worker})
                if execution is not None and execution.task_id:
                    current.set_attribute("toolfleet.task.id", execution.task_id)
                if execution is not None and execution.has_failed:
                    mark_failed(current, kind)
                if content_recorded() and execution is not None:
                    current.set_attribute("gen_ai.tool.call.result", execution.result)
        finally:
            if in_flight is not None:
                in_flight.dec()
                TOOL_CALLS.labels(request.name, pool, kind).inc()
                TOOL_DURATION.labels(request.name, pool).observe(time.perf_counter() - started)
                if kind == OutcomeKind.TIMED_OUT.value:
                    DEADLINE_MISSES.labels(request.name, pool).inc()

    return cast(_F, wrapper)


def traced_compensation(compensate: _F) -> _F:
    """Around `run_compensation(executor, journal, call_row, definition, execution, invocation)`:
    the compensation's span and log fields, and the compensations counted by result."""

    @functools.wraps(compensate)
    async def wrapper(
        executor: Any,
        journal: Any,
        call_row: Any,
        definition: ToolDefinition,
        execution: Any,
        invocation: Any,
    ) -> ToolOutcome:
        request = execution.request
        invocation_id = str(invocation.context.invocation_id)
        fields = CallFields(invocation_id, request.id, definition.name, definition.pool)
        attributes = {
            GEN_AI_OPERATION: "compensate",
            GEN_AI_TOOL_NAME: definition.name,
            GEN_AI_TOOL_CALL_ID: request.id,
            "toolfleet.pool": definition.pool,
            "toolfleet.invocation.id": invocation_id,
            "toolfleet.side": "orchestrator",
        }
        result = "failed"
        try:
            with bound_call(fields), span(f"compensate {definition.name}", attributes) as current:
                outcome: ToolOutcome = await compensate(
                    executor, journal, call_row, definition, execution, invocation
                )
                result = "failed" if outcome.is_error else "succeeded"
                current.set_attributes(
                    {"toolfleet.compensation.result": result, "toolfleet.outcome.kind": outcome.kind.value}
                )
                if outcome.is_error:
                    mark_failed(current, outcome.kind.value)
                return outcome
        finally:
            COMPENSATIONS.labels(definition.name, definition.pool, result).inc()

    return cast(_F, wrapper)


def approvals_requested(records: Iterable[Any]) -> None:
    """An invocation pauses on `records` (`ApprovalRecord`s): an event on its span for each call."""
    current = current_span()
    for record in records:
        current.add_event(
            "approval requested",
            {
                GEN_AI_TOOL_NAME: record.tool,
                GEN_AI_TOOL_CALL_ID: record.call_id,
                "toolfleet.approval.expires_at": record.expires_at.isoformat(),
            },
        )


def approvals_waited(records: Iterable[Any]) -> None:
    """The waits of decided calls (`ApprovalRecord`s), as the process that goes on with their
    invocation (resumes or cancels it) reads them: one span each, from the pause to the decision, a
    child of the current span (the paused invocation's, see `continued_trace`), and the wait time by
    decision. Who decided is recorded; the arguments are not."""
    now = datetime.now(UTC)
    for record in records:
        decided = record.decided_at or now
        waited = max((decided - record.requested_at).total_seconds(), 0.0)
        decision = record.state.value
        APPROVAL_WAIT.labels(record.tool, record.pool, decision).observe(waited)
        attributes = {
            GEN_AI_TOOL_NAME: record.tool,
            GEN_AI_TOOL_CALL_ID: record.call_id,
            "toolfleet.pool": record.pool,
            "toolfleet.invocation.id": record.invocation_id,
            "toolfleet.approval.decision": decision,
            "toolfleet.approval.decided_by": record.decided_by,
            "toolfleet.approval.arguments_edited": record.approved_arguments is not None,
        }
        end_ns = int(decided.timestamp() * 1e9)
        record_span(f"await_approval {record.tool}", attributes, waited, end_ns=end_ns)


def traced_recovery(recover: _F) -> _F:
    """Around `_recover_one(journal, executor, definitions, invocation_id, invocation_json, ...)`, the
    recovery of an invocation whose orchestrator stopped: a `recover_invocation` span, a child of the
    invocation's own span, whose context the journal kept with it (`trace_context`), so that the
    compensations run here join the trace of the calls they undo."""

    @functools.wraps(recover)
    async def wrapper(
        journal: Any,
        executor: Any,
        definitions: Any,
        invocation_id: str,
        invocation_json: dict[str, Any],
        *more: Any,
    ) -> Any:
        with (
            bound_call(CallFields(invocation_id)),
            continued_trace(invocation_json.get("trace_context")),
            span("recover_invocation", {"toolfleet.invocation.id": invocation_id}) as current,
        ):
            report = await recover(journal, executor, definitions, invocation_id, invocation_json, *more)
            done, owed = len(report.compensated), len(report.failed)
            current.set_attributes({"toolfleet.compensated": done, "toolfleet.compensations_failed": owed})
            return report

    return cast(_F, wrapper)
