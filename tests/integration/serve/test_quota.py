"""Flow control in `toolfleet serve`: an invocation that would go past its budget ends with
`budget_exceeded`; a tenant whose day's budget is spent is answered 429 `insufficient_quota` in
OpenAI's shape on both APIs (the client library raises its own error); an invocation's priority is
the request's, at most its key's, and reaches its tools."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import redis

from tests.integration.serve.replicas import Replica, replica_env, start_replica
from tests.integration.sse import server_sent_events
from tests.integration.worker_processes import tool_worker

pytestmark = pytest.mark.integration

MODULE = "tests.integration.serve.quota_agents"
KEYS = {"acme": "q-acme", "globex": "q-globex", "roomy": "q-roomy", "low": "q-low"}


def auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


@pytest.fixture(scope="module")
def quota_replica(
    redis_url: str, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    """A replica serving `meter` to four tenants (`low`'s key at priority 3), and the worker of its
    tool; no tenant has spent anything today."""
    client = redis.Redis.from_url(redis_url)
    client.delete(*client.keys("toolfleet:budget:*") or ["none"])
    logs = tmp_path_factory.mktemp("quota")
    keys_file = logs / "keys.json"
    keys_file.write_text(json.dumps({"keys": [{"key": KEYS["low"], "tenant": "low", "priority": 3}]}))
    env = replica_env(
        redis_url,
        database_url,
        "http://127.0.0.1:9/unused",
        TOOLFLEET_API_KEYS=",".join(f"{t}:{k}" for t, k in KEYS.items() if t != "low"),
        TOOLFLEET_API_KEYS_FILE=str(keys_file),
    )
    worker = tool_worker(
        redis_url, ["quota"], [MODULE], logs / "worker.log", f"quota-{uuid.uuid4().hex[:6]}@t"
    )
    try:
        worker.wait_ready(timeout_s=60)
        replica = start_replica(env, logs / "replica.log", "--agent", f"meter={MODULE}:meter", agents=())
        try:
            yield replica
        finally:
            replica.stop()
    finally:
        worker.stop()
        client.delete(*client.keys("toolfleet:budget:*") or ["none"])
        client.close()


def run(replica: Replica, tenant: str, text: str, **body: Any) -> tuple[int, dict[str, Any]]:
    """Start `meter` as `tenant`: the refusal's status and body, or 202 and its last event."""
    started = httpx.post(
        f"{replica.base_url}/agents/meter/invocations",
        json={"input": text, **body},
        headers=auth(tenant),
        timeout=30,
    )
    if started.status_code != 202:
        return started.status_code, started.json()
    url = f"{replica.base_url}/invocations/{started.json()['id']}/events"
    with httpx.stream("GET", url, headers=auth(tenant), timeout=30) as response:
        for _, event in server_sent_events(response.iter_lines()):
            if event["type"] in ("invocation.succeeded", "invocation.failed"):
                return 202, event
    raise AssertionError("the invocation's events ended without its end")


def test_an_invocation_past_its_budget_ends_with_budget_exceeded(quota_replica: Replica) -> None:
    # given: an agent allowing 2 tool calls an invocation
    # when: an invocation would make 3
    status, end = run(quota_replica, "roomy", "one two three")

    # then: it ends after the second, saying why
    assert status == 202
    assert end["finish_reason"] == "budget_exceeded"
    assert end["budget_exceeded"] == "its budget of 2 tool calls is spent"
    assert end["content"] is None


def test_a_tenant_whose_day_is_spent_is_answered_insufficient_quota_on_both_apis(
    quota_replica: Replica,
) -> None:
    # given: tenants allowed 3 tool calls a day; acme makes 3 in three invocations
    for _ in range(3):
        status, end = run(quota_replica, "acme", "once")
        assert (status, end["content"]) == (202, "acme/None")

    # when: acme starts a fourth, natively and through chat completions
    status, body = run(quota_replica, "acme", "once")
    client = openai.OpenAI(base_url=quota_replica.base_url, api_key=KEYS["acme"], max_retries=0)
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="meter", messages=[{"role": "user", "content": "once"}])

    # then: 429 in OpenAI's shape, the code and type OpenAI gives an account out of credit
    message = (
        "The daily budget of tenant 'acme' of 3 tool calls is spent: no invocation starts until it is "
        "counted afresh at 00:00 UTC"
    )
    assert status == 429
    assert body == {
        "error": {
            "message": message,
            "type": "insufficient_quota",
            "param": None,
            "code": "insufficient_quota",
        }
    }
    assert raised.value.code == "insufficient_quota"
    # ... while another tenant's day is its own
    assert run(quota_replica, "globex", "once")[1]["content"] == "globex/None"


def test_an_invocations_priority_is_the_requests_at_most_its_keys(quota_replica: Replica) -> None:
    # given: the key of tenant `low` carries priority 3; the others none
    # when / then: a request's priority reaches the tools; `low`'s is its key's, and no higher
    assert run(quota_replica, "roomy", "once", priority=8)[1]["content"] == "roomy/8"
    assert run(quota_replica, "roomy", "once", parameters={"priority": 2})[1]["content"] == "roomy/2"
    assert run(quota_replica, "low", "once")[1]["content"] == "low/3"
    assert run(quota_replica, "low", "once", priority=9)[1]["content"] == "low/3"
    assert run(quota_replica, "low", "once", priority=1)[1]["content"] == "low/1"
    status, body = run(quota_replica, "roomy", "once", priority=12)
    assert status == 400
    assert body["error"]["message"] == (
        "invalid request: priority must be a whole number from 0 to 9 (higher sooner), got 12"
    )
