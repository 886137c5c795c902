"""Approvals through `toolfleet serve`: the invocation's event stream says a call waits; the decision
is posted to the other replica, which goes on with the invocation; the stream, resumed there after
the last event read, shows the approved call run once and the answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orchestrator import Journal, approve
from orchestrator.approvals import record_decisions
from tests.integration.fake_openai import FakeOpenAi
from tests.integration.serve.replicas import AGENT, Replica, replica_env, two_replicas
from tests.integration.serve.test_invocations import AUTH
from tests.integration.side_effects import process_client
from tests.integration.sse import server_sent_events
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

BANKER = "banker"


@pytest.fixture(scope="module")
def bank_replicas(
    redis_url: str,
    database_url: str,
    upstream: FakeOpenAi,
    serve_worker: WorkerProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Replica, Replica]]:
    env = replica_env(redis_url, database_url, upstream.base_url)
    with two_replicas(env, tmp_path_factory.mktemp("bank-replicas"), (AGENT, BANKER)) as pair:
        yield pair


def _paused(replica: Replica, ns: str) -> tuple[str, list[tuple[str, dict]]]:
    """A banker invocation started on `replica`, and its events read until it paused."""
    started = httpx.post(
        f"{replica.base_url}/agents/{BANKER}/invocations", json={"input": ns}, headers=AUTH, timeout=30
    )
    assert started.status_code == 202, started.text
    invocation_id = str(started.json()["id"])
    return invocation_id, _read_until(replica, invocation_id, None, "invocation.paused")


def _read_until(replica: Replica, invocation_id: str, last: str | None, stop: str) -> list[tuple[str, dict]]:
    """The events after `last`, read on `replica` until one of type `stop` (then the connection drops)."""
    headers = {**AUTH, **({"Last-Event-ID": last} if last else {})}
    url = f"{replica.base_url}/invocations/{invocation_id}/events"
    read: list[tuple[str, dict]] = []
    with httpx.stream("GET", url, headers=headers, timeout=30) as response:
        assert response.status_code == 200, response.read()
        for entry_id, event in server_sent_events(response.iter_lines()):
            read.append((entry_id, event))
            if event["type"] == stop:
                break
    return read


def test_an_approval_posted_to_the_other_replica_resumes_the_invocation_there(
    bank_replicas: tuple[Replica, Replica], ns: str
) -> None:
    first, second = bank_replicas
    # the stream on the first replica says the call waits, and the invocation paused
    invocation_id, before = _paused(first, ns)
    types = [event["type"] for _, event in before]
    assert types == ["invocation.started", "approval.requested", "invocation.paused"]
    [waiting] = before[1][1]["approvals"]
    assert waiting["tool"] == "wire" and waiting["call_id"] == "wire-1" and waiting["state"] == "pending"
    assert process_client().lrange(f"serve:{ns}:wired", 0, -1) == []
    # when: the approval is posted to the other replica
    decided = httpx.post(
        f"{second.base_url}/invocations/{invocation_id}/approvals",
        json={
            "decisions": [
                {"call_id": "wire-1", "decision": "approve", "arguments_hash": waiting["arguments_hash"]}
            ]
        },
        headers=AUTH,
        timeout=30,
    )
    assert decided.status_code == 202, decided.text
    assert decided.json()["status"] == "resuming"
    # then: the stream, resumed there after the last event read, shows the call and the answer
    after = _read_until(second, invocation_id, before[-1][0], "invocation.succeeded")
    kinds = [event["type"] for _, event in after]
    assert kinds[0] == "invocation.resumed" and kinds[-1] == "invocation.succeeded"
    assert kinds.count("invocation.resumed") == 1
    [decided] = after[0][1]["approvals"]
    assert (
        decided["call_id"] == "wire-1" and decided["state"] == "approved" and decided["decided_by"] == "api"
    )
    [finished] = [event for _, event in after if event["type"] == "tool_call.finished"]
    assert finished["tool"] == "wire" and finished["outcome"] == "success"
    assert after[-1][1]["content"] == "banker: wired 2500"
    assert process_client().lrange(f"serve:{ns}:wired", 0, -1) == [b"2500"]
    # and: deciding again is idempotent; contradicting it is a conflict
    again = httpx.post(
        f"{first.base_url}/invocations/{invocation_id}/approvals",
        json={"decisions": [{"call_id": "wire-1", "decision": "approve"}]},
        headers=AUTH,
        timeout=30,
    )
    assert again.status_code == 202 and again.json()["status"] == "resumed_elsewhere"
    contrary = httpx.post(
        f"{first.base_url}/invocations/{invocation_id}/approvals",
        json={"decisions": [{"call_id": "wire-1", "decision": "reject", "reason": "no"}]},
        headers=AUTH,
        timeout=30,
    )
    assert contrary.status_code == 409, contrary.text
    assert process_client().lrange(f"serve:{ns}:wired", 0, -1) == [b"2500"]


def _completion(replica: Replica, ns: str, *, stream: bool) -> tuple[httpx.Response, dict[str, Any]]:
    """A banker chat completion on `replica`: the response, and the completion it tells (streamed: its
    chunks' content joined, and its finish chunk's `toolfleet` object)."""
    body = {"model": BANKER, "messages": [{"role": "user", "content": ns}], "stream": stream}
    response = httpx.post(f"{replica.base_url}/chat/completions", json=body, headers=AUTH, timeout=30)
    assert response.status_code == 200, response.text
    if not stream:
        told = response.json()
        return response, {"content": told["choices"][0]["message"]["content"], **told}
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    assert response.text.rstrip().endswith("data: [DONE]")
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    [finish] = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    return response, {"content": content, "choices": finish["choices"], "toolfleet": finish.get("toolfleet")}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_chat_completion_that_pauses_says_what_waits_and_an_approval_anywhere_resumes_it(
    bank_replicas: tuple[Replica, Replica], ns: str, stream: bool
) -> None:
    first, second = bank_replicas
    # given: a chat completion whose call waits for approval
    response, told = _completion(first, ns, stream=stream)

    # then: it says it paused, what waits and where to decide, in text and as data
    invocation_id = response.headers["X-Invocation-Id"]
    assert told["content"].startswith(
        "Waiting for approval: wire (call wire-1). Decide with POST /v1/invocations/"
    )
    assert told["choices"][0]["finish_reason"] == "stop"
    if not stream:
        assert response.headers["X-Invocation-State"] == "paused"
    paused = told["toolfleet"]
    assert (paused["invocation_id"], paused["state"]) == (invocation_id, "paused")
    assert paused["decide"] == f"/v1/invocations/{invocation_id}/approvals"
    [waiting] = paused["pending_approvals"]
    assert (waiting["tool"], waiting["call_id"], waiting["state"]) == ("wire", "wire-1", "pending")
    assert process_client().lrange(f"serve:{ns}:wired", 0, -1) == []

    # and: the invocation's story, on either replica, tells it paused, with its agent and what waits
    story = httpx.get(f"{second.base_url}/invocations/{invocation_id}", headers=AUTH, timeout=30).json()
    assert (story["state"], story["service_name"] or BANKER) == ("paused", BANKER)
    assert [(w["tool"], w["call_id"]) for w in story["waiting"]] == [("wire", "wire-1")]
    before = _read_until(second, invocation_id, None, "invocation.paused")
    assert before[0][1] == {
        "type": "invocation.started",
        "invocation_id": invocation_id,
        "agent": BANKER,
        "conversation_id": None,
        "tenant": "default",  # a plain key's
    }

    # when: the call is approved on the other replica
    decided = httpx.post(
        f"{second.base_url}/invocations/{invocation_id}/approvals",
        json={
            "decisions": [
                {"call_id": "wire-1", "decision": "approve", "arguments_hash": waiting["arguments_hash"]}
            ]
        },
        headers=AUTH,
        timeout=30,
    )
    assert decided.status_code == 202, decided.text

    # then: the invocation goes on to its end, the call run once
    after = _read_until(second, invocation_id, before[-1][0], "invocation.succeeded")
    assert after[-1][1]["content"] == "banker: wired 2500"
    assert process_client().lrange(f"serve:{ns}:wired", 0, -1) == [b"2500"]
    story = httpx.get(f"{first.base_url}/invocations/{invocation_id}", headers=AUTH, timeout=30).json()
    assert (story["state"], story["waiting"]) == ("succeeded", [])


def test_a_paused_invocation_cancelled_on_the_other_replica_ends_its_stream_and_never_runs_the_call(
    bank_replicas: tuple[Replica, Replica], ns: str
) -> None:
    first, second = bank_replicas
    invocation_id, before = _paused(first, ns)
    cancelled = httpx.post(f"{second.base_url}/invocations/{invocation_id}/cancel", headers=AUTH, timeout=30)
    assert cancelled.status_code == 202, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    after = _read_until(first, invocation_id, before[-1][0], "invocation.cancelled")
    assert [event["type"] for _, event in after] == ["invocation.cancelled"]
    story = httpx.get(f"{second.base_url}/invocations/{invocation_id}", headers=AUTH, timeout=30).json()
    assert story["state"] == "cancelled"
    again = httpx.post(f"{first.base_url}/invocations/{invocation_id}/cancel", headers=AUTH, timeout=30)
    assert again.status_code == 409, again.text
    assert process_client().lrange(f"serve:{ns}:wired", 0, -1) == []


def test_a_call_decided_outside_the_service_is_resumed_by_a_replicas_housekeeping(
    bank_replicas: tuple[Replica, Replica], ns: str, database_url: str
) -> None:
    first, second = bank_replicas
    invocation_id, before = _paused(first, ns)
    # when: the call is approved in the journal by a process that serves nothing (as `toolfleet
    # approve` without an agent does)
    journal = Journal(database_url)
    try:
        [decided] = record_decisions(journal, invocation_id, {"wire-1": approve()}, "operator")
    finally:
        journal.engine.dispose()
    assert decided.state.value == "approved"
    # then: a replica goes on with it within a round of its housekeeping (half the 2 s heartbeat TTL)
    after = _read_until(second, invocation_id, before[-1][0], "invocation.succeeded")
    kinds = [event["type"] for _, event in after]
    assert kinds[0] == "invocation.resumed" and kinds.count("invocation.resumed") == 1  # both replicas tried
    assert after[-1][1]["content"] == "banker: wired 2500"
    assert process_client().lrange(f"serve:{ns}:wired", 0, -1) == [b"2500"]
