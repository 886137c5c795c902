"""The orchestrator's telemetry: spans of invocations, model calls, tool calls and compensations,
Prometheus metrics (`GET /metrics` of `toolfleet serve`), and the call fields of JSON log lines.

`setup_tracing` starts tracing in a process (the `otel` extra installed): with a tracer provider of
the caller's, or over OTLP as the `OTEL_*` variables say.
"""

from orchestrator.telemetry.hooks import (
    approvals_requested,
    approvals_waited,
    model_called,
    outcome_known,
    traced_call,
    traced_compensation,
    traced_invocation,
    traced_recovery,
)
from orchestrator.telemetry.metrics import ApprovalsWaiting
from workers.telemetry.tracing import continued_trace, setup_tracing, stop_tracing, trace_carrier

__all__ = [
    "ApprovalsWaiting",
    "approvals_requested",
    "approvals_waited",
    "continued_trace",
    "model_called",
    "outcome_known",
    "setup_tracing",
    "stop_tracing",
    "trace_carrier",
    "traced_call",
    "traced_compensation",
    "traced_invocation",
    "traced_recovery",
]
