"""What a process tells its operators: logs as JSON lines, Prometheus metrics, OpenTelemetry traces.

Tracing needs the optional extra `toolfleet[otel]`; without it nothing here imports OpenTelemetry.
"""

from workers.telemetry.logs import CallFields, JsonFormatter, bound_call, configure_logging, current_call
from workers.telemetry.tracing import (
    inject_trace_context,
    setup_tracing,
    span,
    trace_id,
    tracing_enabled,
)

__all__ = [
    "CallFields",
    "JsonFormatter",
    "bound_call",
    "configure_logging",
    "current_call",
    "inject_trace_context",
    "setup_tracing",
    "span",
    "trace_id",
    "tracing_enabled",
]
