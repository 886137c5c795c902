"""`toolfleet serve` with `TOOLFLEET_LOG_FORMAT=json` and a collector that does not answer: a completion
still gets its answer, every line the replica logs (uvicorn's included) is one JSON object, and on
SIGTERM it exits 0 within seconds, its last spans given up on after `FLUSH_TIMEOUT_S`."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.fake_openai import FakeOpenAi
from tests.integration.serve.replicas import AGENT, API_KEY, replica_env, start_replica
from workers.runtime.process import WorkerProcess
from workers.telemetry.tracing import FLUSH_TIMEOUT_S

pytestmark = pytest.mark.integration

# What a stop may take beyond the flush's bound: an idle replica exits in under a second of it alone
# (2.5 s in all), in up to 3.3 s of it with the suite's four processes on two cores.
STOP_MARGIN_S = 6.0
# What the command prints itself as it starts (not log records): the agents it serves, and where.
NOTICE = "toolfleet serve: "


def test_a_replica_logs_json_and_stops_promptly_with_its_collector_unreachable(
    redis_url: str, database_url: str, upstream: FakeOpenAi, serve_worker: WorkerProcess, tmp_path: Path
) -> None:
    # given: a replica logging JSON, its OTLP endpoint a loopback port that refuses connections
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        env = replica_env(
            redis_url,
            database_url,
            upstream.base_url,
            TOOLFLEET_LOG_FORMAT="json",
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed.getsockname()[1]}",
        )
        replica = start_replica(env, tmp_path / "replica.log")
        try:
            # when: a completion runs a tool call, and a client sends uvicorn something not HTTP
            response = httpx.post(
                f"{replica.base_url}/chat/completions",
                json={"model": AGENT, "messages": [{"role": "user", "content": "add 1 2"}]},
                headers={"Authorization": f"Bearer {API_KEY}"},
                timeout=30,
            )
            with socket.create_connection(("127.0.0.1", replica.port), timeout=5) as garbage:
                garbage.sendall(b"\x16\x03\x01 not\nhttp\r\n\r\n")
                garbage.recv(1024)  # uvicorn answers 400 and closes, once it has logged
            # and: the replica is stopped
            started = time.monotonic()
            status = replica.stop(signal.SIGTERM, timeout_s=30)
            stop_s = time.monotonic() - started
        finally:
            replica.stop(signal.SIGKILL)
    # then: the completion had its answer, and the replica exited 0 within seconds
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "done: 3"
    log = replica.log()
    assert status == 0, log
    assert stop_s < FLUSH_TIMEOUT_S + STOP_MARGIN_S, (stop_s, log)
    # and: every line but the command's own notices is one JSON object, uvicorn's warning among them
    entries = [json.loads(line) for line in log.splitlines() if not line.startswith(NOTICE)]
    assert all(isinstance(entry, dict) for entry in entries), log
    loggers = {entry["logger"] for entry in entries}
    assert "uvicorn.error" in loggers, log
    assert any("spans not exported within" in entry["message"] for entry in entries), log
