"""This process's tracing, to memory: spans of an SDK provider kept by an `InMemorySpanExporter`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from workers.telemetry.tracing import setup_tracing, stop_tracing

__all__ = ["traced_to_memory"]


@contextlib.contextmanager
def traced_to_memory(service_name: str) -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process while the block runs, each span kept, as it ends, by the exporter
    yielded; stopped at the block's end."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert setup_tracing(service_name, tracer_provider=provider)
    try:
        yield exporter
    finally:
        stop_tracing()
        provider.shutdown()
