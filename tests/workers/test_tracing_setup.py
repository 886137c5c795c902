"""Where `setup_tracing` sends spans: the endpoint of the environment it is given (not necessarily the
process's), OTLP/HTTP's `/v1/traces` under a base endpoint, a signal's own endpoint as it is."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from workers.telemetry.tracing import setup_tracing, span, stop_tracing, traces_endpoint


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[str]]]:
    """An OTLP/HTTP endpoint on loopback: its base URL, and the paths of the exports it received."""
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            paths.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", paths
    finally:
        server.shutdown()
        server.server_close()


def test_the_traces_endpoint_follows_otlp_http() -> None:
    assert traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}) == (
        "http://collector:4318/v1/traces"
    )
    signal = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2/t",
    }
    assert traces_endpoint(signal) == "http://b:2/t"


def test_spans_go_to_the_endpoint_of_the_environment_given(
    receiver: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the process's environment names no endpoint; the one given to setup_tracing does
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    endpoint, paths = receiver
    assert setup_tracing("tracing-setup-test", environ={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    try:
        # when: a span ends and tracing stops (exporting what is buffered)
        with span("probe"):
            pass
    finally:
        stop_tracing()
    # then: the receiver got it
    assert paths == ["/v1/traces"]
