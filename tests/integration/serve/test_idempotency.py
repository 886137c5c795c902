"""`Idempotency-Key` on two replicas: a request sent again (to the other replica, while the first is
still running, or after it ended) attaches to the invocation the first one started: one invocation,
its tool run once, the model asked once per turn, the same answer for both; the same key with another
body (`stream` set otherwise included) is a 409; a client that leaves a keyed request does not cancel
its invocation."""

from __future__ import annotations

import json
import threading
import uuid

import httpx
import pytest

from tests._waiting import wait_for
from tests.integration.fake_openai import FakeOpenAi
from tests.integration.serve.replicas import AGENT, Replica
from tests.integration.serve.test_invocations import AUTH, _read_all
from tests.integration.side_effects import process_client

pytestmark = pytest.mark.integration


def _ask(replica: Replica, text: str, key: str, *, stream: bool = False) -> httpx.Response:
    body = {"model": AGENT, "messages": [{"role": "user", "content": text}], "stream": stream}
    headers = {**AUTH, "Idempotency-Key": key}
    return httpx.post(f"{replica.base_url}/chat/completions", json=body, headers=headers, timeout=60)


def _streamed_text(response: httpx.Response) -> str:
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    assert response.text.rstrip().endswith("data: [DONE]"), response.text
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))


def _asked(upstream: FakeOpenAi, ns: str) -> int:
    """How often the model was asked about `ns`'s request."""
    return sum(1 for body in upstream.requests if ns in json.dumps(body))


def test_a_request_sent_again_to_the_other_replica_attaches_to_the_first_ones_invocation(
    replicas: tuple[Replica, Replica], upstream: FakeOpenAi, ns: str
) -> None:
    first, second = replicas
    key = uuid.uuid4().hex
    text = f"book {ns} trip; nap {ns} 2"
    # given: a keyed request on the first replica, its tool napping
    answers: dict[str, httpx.Response] = {}
    asking = threading.Thread(target=lambda: answers.setdefault("first", _ask(first, text, key)))
    asking.start()
    wait_for(lambda: process_client().get(f"serve:{ns}:napping"), timeout_s=15, what="the nap started")

    # when: it is sent again to the other replica meanwhile, and once more after it ended
    again = _ask(second, text, key)
    asking.join(timeout=60)
    later = _ask(first, text, key)

    # then: one invocation answered them all alike; its tools ran once, the model was asked once a turn
    ids = {r.headers["X-Invocation-Id"] for r in (answers["first"], again, later)}
    assert len(ids) == 1
    contents = [r.json()["choices"][0]["message"]["content"] for r in (answers["first"], again, later)]
    assert contents == ["done: slept 2 s"] * 3
    assert process_client().lrange(f"serve:{ns}:booked", 0, -1) == [b"trip"]
    assert int(process_client().get(f"serve:{ns}:napping") or 0) == 1
    assert _asked(upstream, ns) == 3  # the plan's two steps, then the answer


def test_the_same_key_with_another_body_is_a_conflict(replicas: tuple[Replica, Replica], ns: str) -> None:
    key = uuid.uuid4().hex
    assert _ask(replicas[0], f"add 1 {len(ns)}", key).status_code == 200
    other = _ask(replicas[1], "add 2 2", key)
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert other.json()["error"]["param"] == "Idempotency-Key"


@pytest.mark.parametrize("key", [b"", b"x" * 256, b"caf\xe9"], ids=["empty", "too-long", "not-ascii"])
def test_a_malformed_key_is_a_400(replicas: tuple[Replica, Replica], key: bytes) -> None:
    body = {"model": AGENT, "messages": [{"role": "user", "content": "add 1 1"}]}
    response = httpx.post(
        f"{replicas[0].base_url}/chat/completions",
        json=body,
        headers={**{k: v.encode() for k, v in AUTH.items()}, b"Idempotency-Key": key},
        timeout=30,
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "Idempotency-Key"


def test_a_client_that_leaves_a_keyed_stream_finds_its_answer_when_it_comes_back(
    replicas: tuple[Replica, Replica], ns: str
) -> None:
    first, second = replicas
    key = uuid.uuid4().hex
    text = f"book {ns} stay; nap {ns} 2"
    body = {"model": AGENT, "messages": [{"role": "user", "content": text}], "stream": True}
    # given: a keyed streamed request whose client goes away while the tool naps
    with httpx.stream(
        "POST",
        f"{first.base_url}/chat/completions",
        json=body,
        headers={**AUTH, "Idempotency-Key": key},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        invocation_id = response.headers["X-Invocation-Id"]
        wait_for(lambda: process_client().get(f"serve:{ns}:napping"), timeout_s=15, what="the nap started")

    # when: it sends the request again, to the other replica
    again = _ask(second, text, key, stream=True)

    # then: the invocation went on, and the answer streams whole from its start; nothing was undone
    assert again.headers["X-Invocation-Id"] == invocation_id
    assert _streamed_text(again) == "done: slept 2 s"
    assert process_client().lrange(f"serve:{ns}:undone", 0, -1) == []
    assert _read_all(second, invocation_id)[-1][1]["type"] == "invocation.succeeded"


def test_a_native_invocation_started_again_with_its_key_is_the_same_one(
    replicas: tuple[Replica, Replica], ns: str
) -> None:
    key = uuid.uuid4().hex
    url = "{}/agents/" + AGENT + "/invocations"
    body = {"input": f"nap {ns} 1"}
    started = [
        httpx.post(url.format(r.base_url), json=body, headers={**AUTH, "Idempotency-Key": key}, timeout=30)
        for r in replicas
    ]
    assert [r.status_code for r in started] == [202, 202]
    assert started[0].json()["id"] == started[1].json()["id"]
    assert _read_all(replicas[1], started[0].json()["id"])[-1][1]["type"] == "invocation.succeeded"
    assert int(process_client().get(f"serve:{ns}:napping") or 0) == 1
