"""A tiny OTLP/HTTP receiver for tests: accepts `POST /v1/traces` (protobuf), decodes the spans with
opentelemetry-proto and keeps them; or, as a no-op sink for the benchmarks, only answers."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)
    start_ns: int = 0  # since the epoch
    end_ns: int = 0
    events: list[str] = field(default_factory=list)  # their names, in order


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class OtlpReceiver:
    """Listens on 127.0.0.1 on a free port (`endpoint`) while it runs; `spans` holds what arrived."""

    def __init__(self, *, keep: bool = True) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if keep:
                    request = ExportTraceServiceRequest.FromString(body)
                    with lock:
                        receiver.spans += _spans(request)
                receiver.requests += 1
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, names: set[str], timeout_s: float = 15.0) -> list[ReceivedSpan]:
        """The spans once every name of `names` arrived; `TimeoutError` naming what is missing."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if names <= {s.name for s in self.spans}:
                return list(self.spans)
            time.sleep(0.05)
        raise TimeoutError(f"spans missing: {sorted(names - {s.name for s in self.spans})}")


def _spans(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        service=str(resource.get("service.name")),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        events=[event.name for event in span.events],
                    )
                )
    return spans
