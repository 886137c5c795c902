"""Replicas on an operator's worst day: one SIGKILLed mid-invocation of an agent that undoes on an
orchestrator's loss is recovered by the other within its heartbeat window, nothing done left standing
without its compensation (test_carried_on_*.py: the other agents' invocations are carried on); one
told to stop (SIGTERM) lets short invocations finish, cancels and compensates the rest, and exits 0."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests._waiting import wait_for
from tests.integration.fake_openai import FakeOpenAi
from tests.integration.serve.conftest import HEARTBEAT_TTL_S
from tests.integration.serve.replicas import AGENT, API_KEY, Replica, replica_env, start_replica
from tests.integration.serve.test_invocations import AUTH, _read_all, _start
from tests.integration.side_effects import process_client
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration


def test_a_killed_replicas_saga_is_recovered_by_the_other_when_its_agent_undoes(
    pair: tuple[Replica, Replica], ns: str
) -> None:
    doomed, survivor = pair
    # given: an invocation of an agent that undoes on an orchestrator's loss, on the first replica,
    # that booked, and naps
    invocation_id = _start(doomed, f"book {ns} trip; nap {ns} 6", agent="undoer")
    wait_for(lambda: process_client().get(f"serve:{ns}:napping"), timeout_s=15, what="the nap started")

    # when: its replica is SIGKILLed
    doomed.process.kill()
    killed_at = time.monotonic()

    # then: the other replica undoes the booking within the heartbeat window (the TTL running out,
    # then at most half a TTL until it looks), plus the compensation's own round trip
    wait_for(
        lambda: process_client().lrange(f"serve:{ns}:undone", 0, -1), timeout_s=20, what="the booking undone"
    )
    recovered_in = time.monotonic() - killed_at
    assert recovered_in < 1.5 * HEARTBEAT_TTL_S + 1.5, f"recovered {recovered_in:.2f} s after the kill"
    assert process_client().lrange(f"serve:{ns}:undone", 0, -1) == [b"trip"]
    assert process_client().lrange(f"serve:{ns}:booked", 0, -1) == [b"trip"]
    # and: the invocation's event stream ends, saying what recovery did; the journal agrees
    events = _read_all(survivor, invocation_id)
    last = events[-1][1]
    assert last["type"] == "invocation.failed" and "stopped; recovered by" in str(last["error"])
    assert last["recovered"]["compensated"] == ["book (call_0_0)"]  # type: ignore[index]
    story = httpx.get(f"{survivor.base_url}/invocations/{invocation_id}", headers=AUTH, timeout=10).json()
    assert story["state"] == "failed"
    assert [(c["tool"], c["state"]) for c in story["calls"]][:1] == [("book", "compensated")]


def test_sigterm_drains_then_exits_zero(
    redis_url: str,
    database_url: str,
    upstream: FakeOpenAi,
    serve_worker: WorkerProcess,
    tmp_path: Path,
    ns: str,
) -> None:
    env = replica_env(redis_url, database_url, upstream.base_url, TOOLFLEET_SERVE_DRAIN_GRACE_S="2")
    replica = start_replica(env, tmp_path / "drain.log")
    try:
        # given: a short and a long invocation running, and chat completions in flight: a short one, and
        # two past the grace (one waiting for its answer, one streamed)
        short = _start(replica, f"nap {ns}-short 0.5")
        long = _start(replica, f"book {ns} stay; nap {ns} 8")
        completion: dict[str, httpx.Response] = {}

        def ask(name: str, text: str, stream: bool) -> threading.Thread:
            body = {"model": AGENT, "messages": [{"role": "user", "content": text}], "stream": stream}
            url, headers = f"{replica.base_url}/chat/completions", {"Authorization": f"Bearer {API_KEY}"}
            asking = threading.Thread(
                target=lambda: completion.setdefault(
                    name, httpx.post(url, json=body, headers=headers, timeout=30)
                )
            )
            asking.start()
            return asking

        askers = [
            ask("short", f"nap {ns}-chat 0.5", False),
            ask("waiting", f"nap {ns}-waiting 8", False),
            ask("streamed", f"nap {ns}-streamed 8", True),
        ]
        for part in ("", "-chat", "-waiting", "-streamed"):
            key = f"serve:{ns}{part}:napping"
            wait_for(lambda key=key: process_client().get(key), timeout_s=15, what=f"the nap of {key}")

        # when: the replica is told to stop
        replica.process.send_signal(signal.SIGTERM)
        try:  # 2.5 s alone (grace 2 s, then the cancels' compensations); once over 20 s under the suite
            status = replica.process.wait(timeout=45)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the replica did not stop within 45 s of SIGTERM; its log:\n{replica.log()[-6000:]}")
        for asking in askers:
            asking.join(timeout=10)
    finally:
        replica.stop(signal.SIGKILL)

    # then: it exited 0; what could finish did, the rest was cancelled and compensated
    assert status == 0, replica.log()
    assert "Traceback" not in replica.log()
    assert completion["short"].status_code == 200
    assert completion["short"].json()["choices"][0]["message"]["content"].startswith("done: slept 0.5 s")
    # and: past the grace, the waiting client was answered 503, the streaming one an error, then [DONE]
    waiting = completion["waiting"]
    assert waiting.status_code == 503, waiting.text
    assert waiting.json()["error"]["code"] == "service_unavailable"
    streamed = completion["streamed"]
    assert streamed.status_code == 200
    data = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    error = json.loads(data[-2])["error"]
    assert error["code"] == "service_unavailable" and "shut down" in error["message"]
    with_other = start_replica(env, tmp_path / "reader.log")
    try:
        short_events = _read_all(with_other, short)
        long_events = _read_all(with_other, long)
    finally:
        with_other.stop()
    assert short_events[-1][1]["type"] == "invocation.succeeded"
    assert long_events[-1][1]["type"] == "invocation.cancelled"
    assert process_client().lrange(f"serve:{ns}:undone", 0, -1) == [b"stay"], long_events
