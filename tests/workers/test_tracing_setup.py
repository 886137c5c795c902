"""Where `setup_tracing` sends spans: the endpoint of the environment it is given (not necessarily the
process's), OTLP/HTTP's `/v1/traces` under a base endpoint, a signal's own endpoint as it is; and
stopping it waits a bounded time for a collector that does not answer."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from tests.otlp_receiver import OtlpReceiver
from workers.telemetry.tracing import (
    FLUSH_TIMEOUT_S,
    setup_tracing,
    span,
    stop_tracing,
    tracer_provider,
    traces_endpoint,
)


def test_the_traces_endpoint_follows_otlp_http() -> None:
    assert traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}) == (
        "http://collector:4318/v1/traces"
    )
    signal = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2/t",
    }
    assert traces_endpoint(signal) == "http://b:2/t"


def test_spans_go_to_the_endpoint_of_the_environment_given(monkeypatch: pytest.MonkeyPatch) -> None:
    # given: the process's environment names no endpoint; the one given to setup_tracing does
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    with OtlpReceiver() as receiver:
        assert setup_tracing("tracing-setup-test", environ={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
        try:
            # when: a span ends and tracing stops (exporting what is buffered)
            with span("probe"):
                pass
        finally:
            stop_tracing()
        # then: the receiver got it
        assert [received.name for received in receiver.spans] == ["probe"]


def test_stopping_waits_a_bounded_time_for_a_collector_that_refuses(caplog: pytest.LogCaptureFixture) -> None:
    # given: spans for an OTLP endpoint on a loopback port bound but not listening (connections refused),
    # more of them than one export batch (512), none exported yet
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
        assert setup_tracing("unreachable-test", environ={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
        provider = tracer_provider()
        for number in range(600):
            with span(f"probe {number}"):
                pass
        # when: tracing stops, then the provider shuts down (as it does when the process exits)
        started = time.monotonic()
        stop_tracing()
        stopped_s = time.monotonic() - started
        started = time.monotonic()
        provider.shutdown()
        shut_down_s = time.monotonic() - started
    # then: the flush gave up after its bound (the exporter's retries alone last about 7 s a batch),
    # said so, and nothing was left retrying for the exit to wait on
    assert stopped_s < FLUSH_TIMEOUT_S + 1.0, stopped_s
    assert shut_down_s < 1.0, shut_down_s
    assert any(
        r.name == "workers.telemetry.tracing" and r.levelno == logging.WARNING and "not exported" in r.message
        for r in caplog.records
    )
