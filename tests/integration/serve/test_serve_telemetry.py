"""`toolfleet serve` with `TOOLFLEET_LOG_FORMAT=json` and a collector that does not answer: a completion
still gets its answer, every line the replica writes is one JSON object (its own notices, uvicorn's
lines, a Python warning of an agent's module and a failing tool's among them), and on SIGTERM it exits
0 within seconds, its last spans given up on after `FLUSH_TIMEOUT_S`."""

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
# (2.5 s in all), in up to 3.3 s of it with the suite's processes on two cores.
STOP_MARGIN_S = 6.0
WARNED_AGENT = "warned"  # served from tests.integration.serve.json_agents, which warns this as it loads:
AGENT_MODULE_WARNING = "UserWarning: this agent module is deprecated\nuse tests.integration.serve_agents"


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
        # and: a second agent from a module that warns as it is loaded
        agent = f"{WARNED_AGENT}=tests.integration.serve.json_agents:assistant"
        replica = start_replica(env, tmp_path / "replica.log", "--agent", agent)
        try:
            # when: a completion runs a tool call, another one a tool that fails, and a client sends
            # uvicorn something not HTTP
            response, crashed = (
                httpx.post(
                    f"{replica.base_url}/chat/completions",
                    json={"model": model, "messages": [{"role": "user", "content": content}]},
                    headers={"Authorization": f"Bearer {API_KEY}"},
                    timeout=30,
                )
                for model, content in ((AGENT, "add 1 2"), (WARNED_AGENT, "crash jsonlogs"))
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
    assert crashed.status_code == 200, crashed.text  # the model read the tool's error
    assert crashed.json()["choices"][0]["message"]["content"] == "done: the printer of jsonlogs caught fire"
    log = replica.log()
    assert status == 0, log
    assert stop_s < FLUSH_TIMEOUT_S + STOP_MARGIN_S, (stop_s, log)
    # and: every line is one JSON object: the command's notices, uvicorn's warning, the agent module's
    # warning, the failed call's lines and the spans given up on among them
    entries = [json.loads(line) for line in log.splitlines()]
    assert all(isinstance(entry, dict) for entry in entries), log
    notices = [e["message"] for e in entries if e["logger"] == "orchestrator.cli.commands.serve"]
    assert notices == [
        "toolfleet serve: API keys of tenants default",
        f"toolfleet serve: agents {AGENT}, {WARNED_AGENT} on http://127.0.0.1:{replica.port}/v1",
    ], log
    loggers = {entry["logger"] for entry in entries}
    assert "uvicorn.error" in loggers, log
    (warned,) = [e for e in entries if e["logger"] == "py.warnings"]
    assert AGENT_MODULE_WARNING in warned["message"], log
    assert any("the printer of jsonlogs caught fire" in e["message"] for e in entries), log
    assert any("spans not exported within" in entry["message"] for entry in entries), log
