"""OpenTelemetry spans, when the optional extra `toolfleet[otel]` is installed and tracing is set up.

Nothing here imports OpenTelemetry until `setup_tracing` is called (or a test installs a tracer
provider and calls it with that provider): without tracing, `span()` is a shared no-op context and
the only cost is a flag test. Configuration is OpenTelemetry's own: the `OTEL_*` environment
variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`, ...).

Attribute names follow OpenTelemetry's GenAI semantic conventions (`gen_ai.*`), plus toolfleet's
own (`toolfleet.*`). Arguments and results are recorded only with `TOOLFLEET_TRACE_CONTENT=true`;
invocation parameters (which may hold credentials) never are.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

__all__ = [
    "FLUSH_TIMEOUT_S",
    "GEN_AI_OPERATION",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_NAME",
    "content_recorded",
    "continued_trace",
    "current_span",
    "flush_traces",
    "inject_trace_context",
    "mark_failed",
    "record_span",
    "setup_tracing",
    "span",
    "stop_tracing",
    "trace_carrier",
    "trace_id",
    "tracer_provider",
    "tracing_enabled",
]

log = logging.getLogger(__name__)

GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
TRACER_NAME = "toolfleet"
EXPORTER_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
# How long stopping tracing waits for the spans buffered to go out. The SDK's batch processor does not
# bound its flush: it lasts as long as the exporter's retries, about 7 s a batch (OTLP's 10 s timeout)
# when the collector does not answer, and a worker or a replica stopping would wait that long.
FLUSH_TIMEOUT_S = 2.0

_state: dict[str, Any] = {"tracer": None, "content": False, "pid": None, "warned": False}


def tracing_enabled() -> bool:
    """Whether spans are being recorded in this process."""
    return _state["tracer"] is not None


def stop_tracing(*, flush: bool = True) -> None:
    """Stop recording spans in this process (what `setup_tracing` started); with `flush`, export what
    is buffered first, else it goes out in the background as usual.

    The flush waits `FLUSH_TIMEOUT_S` at most; what is not out by then is dropped, and the OTLP
    exporter `setup_tracing` built stops retrying, so a process ending next is not held up by a
    collector that does not answer.
    """
    if flush and not flush_traces():
        exporter = _state.get("exporter")
        log.warning(
            "spans not exported within %g s of stopping tracing (is the collector reachable?): %s",
            FLUSH_TIMEOUT_S,
            "the rest are dropped" if exporter is not None else "they go on in the background",
        )
        if exporter is not None:
            exporter.shutdown()  # ends the retries in progress: the provider's own shutdown at exit is quick
    _state.update({"tracer": None, "provider": None, "exporter": None, "content": False, "pid": None})


def content_recorded() -> bool:
    """Whether spans carry tool arguments and results (`TOOLFLEET_TRACE_CONTENT`)."""
    return bool(_state["content"])


def setup_tracing(
    service_name: str,
    *,
    tracer_provider: Any = None,
    record_content: bool = False,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Start recording spans in this process; whether it did.

    With `tracer_provider` (an SDK `TracerProvider`), spans go to it. Otherwise a provider exporting
    over OTLP/HTTP is built when an OTLP endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or
    `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) and `OTEL_SDK_DISABLED` is not true; else nothing happens.
    Without the `otel` extra installed, nothing happens either (and nothing is imported). Calling it
    again in the same process does nothing; in a forked child it starts afresh. `record_content`
    (`TOOLFLEET_TRACE_CONTENT`): spans carry tool arguments and results.
    """
    env = os.environ if environ is None else environ
    if _state["tracer"] is not None and _state["pid"] == os.getpid():
        return True
    if tracer_provider is None:
        if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return False
        if not any(env.get(name) for name in EXPORTER_VARIABLES):
            return False
        try:
            tracer_provider, exporter = _otlp_provider(service_name, env)
        except ImportError:
            if not _state["warned"]:  # once a process, however often it is asked
                _state["warned"] = True
                log.warning(
                    "an OTLP endpoint is configured but toolfleet's tracing extra is not installed: "
                    "pip install 'toolfleet[otel]'"
                )
            return False
        _state["exporter"] = exporter
    else:
        _state["exporter"] = None
    from opentelemetry import trace

    _state["tracer"] = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
    _state["provider"] = tracer_provider
    _state["content"] = record_content
    _state["pid"] = os.getpid()
    return True


def _otlp_provider(service_name: str, env: Mapping[str, str]) -> tuple[Any, Any]:
    """A provider exporting over OTLP/HTTP in batches, and its exporter."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

    class StoppableExporter(OTLPSpanExporter):
        """OTLP/HTTP until `shutdown`, then quiet: what it is given after is dropped without a word
        (`stop_tracing` said so once), and the provider's own shutdown at exit is no second one."""

        stopped = False

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.FAILURE if self.stopped else super().export(spans)

        def shutdown(self) -> None:
            if not self.stopped:
                self.stopped = True
                super().shutdown()  # type: ignore[no-untyped-call]

    # The resource reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the name given is the default.
    resource = Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME") or service_name})
    provider = TracerProvider(resource=resource)
    exporter = StoppableExporter(endpoint=traces_endpoint(env))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider, exporter


def traces_endpoint(env: Mapping[str, str]) -> str:
    """Where spans go over OTLP/HTTP, read from `env` (not necessarily the process's environment):
    `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as given, else `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`."""
    given = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if given:
        return given
    return env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"


def flush_traces(timeout_s: float = FLUSH_TIMEOUT_S) -> bool:
    """Export what is buffered now, waiting `timeout_s` at most; whether it all went out in time.

    The flush runs in a thread of its own, since the SDK's ignores the timeout it is given; past
    `timeout_s` it goes on there, in the background.
    """
    provider = _state.get("provider")
    if provider is None or not hasattr(provider, "force_flush"):
        return True
    done = threading.Event()

    def flush() -> None:
        try:
            provider.force_flush(int(timeout_s * 1000))
        finally:
            done.set()

    threading.Thread(target=flush, name="toolfleet-trace-flush", daemon=True).start()
    return done.wait(timeout_s)


def tracer_provider() -> Any:
    """The provider spans go to, when tracing is on."""
    return _state.get("provider") if tracing_enabled() else None


@contextlib.contextmanager
def _recording(name: str, attributes: Mapping[str, Any], kind: str | None) -> Iterator[Any]:
    from opentelemetry.trace import SpanKind

    span_kind = getattr(SpanKind, kind) if kind else SpanKind.INTERNAL
    with _state["tracer"].start_as_current_span(
        name, kind=span_kind, attributes={k: v for k, v in attributes.items() if v is not None}
    ) as current:
        yield current


class _NoSpan:
    """Stands for a span when tracing is off: takes attributes and events, keeps nothing."""

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        pass


_NO_SPAN = _NoSpan()


@contextlib.contextmanager
def _not_recording() -> Iterator[Any]:
    yield _NO_SPAN


def span(name: str, attributes: Mapping[str, Any] | None = None, *, kind: str | None = None) -> Any:
    """A context manager: a span named `name`, current in the block, when tracing is on; else a no-op.

    Yields the span (or a stand-in taking `set_attribute` and `add_event`). `kind` is a `SpanKind`
    name (`CLIENT`, `SERVER`, ...), INTERNAL when not given.
    """
    if _state["tracer"] is None:
        return _not_recording()
    return _recording(name, attributes or {}, kind)


def mark_failed(current: Any, description: str) -> None:
    """Set `current`'s status to error, with `description`."""
    if _state["tracer"] is not None and current is not _NO_SPAN:
        from opentelemetry.trace import Status, StatusCode

        current.set_status(Status(StatusCode.ERROR, description))


def record_span(
    name: str,
    attributes: Mapping[str, Any],
    duration_s: float,
    *,
    failed: bool = False,
    end_ns: int | None = None,
) -> None:
    """A span that ended at `end_ns` (nanoseconds since the epoch; now when not given) and lasted
    `duration_s`, child of the current span (when tracing is on)."""
    if _state["tracer"] is None:
        return
    end = time.time_ns() if end_ns is None else end_ns
    started = _state["tracer"].start_span(
        name,
        start_time=end - int(duration_s * 1e9),
        attributes={k: v for k, v in attributes.items() if v is not None},
    )
    if failed:
        mark_failed(started, "failed")
    started.end(end_time=end)


def current_span() -> Any:
    """The span current in this context (a no-op stand-in when tracing is off)."""
    if _state["tracer"] is None:
        return _NO_SPAN
    from opentelemetry import trace

    return trace.get_current_span()


def inject_trace_context(headers: MutableMapping[str, Any]) -> None:
    """Put the current span's context into a message's `headers` (W3C `traceparent`), for the worker."""
    if _state["tracer"] is not None:
        from opentelemetry import propagate

        propagate.inject(headers)


def trace_carrier() -> dict[str, str]:
    """The current span's context as W3C trace headers (empty without tracing): to carry it where no
    process holds it, such as a paused invocation's state, for whichever process goes on with it."""
    carrier: dict[str, str] = {}
    inject_trace_context(carrier)
    return carrier


@contextlib.contextmanager
def continued_trace(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Make the span `carrier` names (see `trace_carrier`) the current one in the block: the spans
    started in it join its trace as its children, whichever process started it and however long
    ago. A no-op without tracing or without a carrier."""
    if _state["tracer"] is None or not carrier:
        yield
        return
    from opentelemetry import context, propagate

    token = context.attach(propagate.extract(dict(carrier)))
    try:
        yield
    finally:
        context.detach(token)


def trace_id() -> str | None:
    """The current trace id in hex, for a log line; `None` without tracing (nothing imported)."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None
