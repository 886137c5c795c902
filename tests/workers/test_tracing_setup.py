"""Where `setup_tracing` sends spans: the endpoint of the environment it is given (not necessarily the
process's), OTLP/HTTP's `/v1/traces` under a base endpoint, a signal's own endpoint as it is."""

from __future__ import annotations

import pytest

from tests.otlp_receiver import OtlpReceiver
from workers.telemetry.tracing import setup_tracing, span, stop_tracing, traces_endpoint


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
