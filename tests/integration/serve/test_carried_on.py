"""The official `openai` client, sending an `Idempotency-Key`, behind a load balancer in front of two
replicas: when the replica serving its request is SIGKILLed mid-call, the other replica carries the
invocation on, and the client's retry (its own for a whole answer; its caller's for a stream cut
midway) attaches to it and gets the whole answer, once: the tools ran once, the model was asked once
per turn, nothing was undone."""

from __future__ import annotations

import json
import threading
import uuid

import httpx
import openai
import pytest

from tests._waiting import wait_for
from tests.integration.fake_openai import FakeOpenAi
from tests.integration.serve.failover import failover
from tests.integration.serve.replicas import AGENT, API_KEY, Replica
from tests.integration.side_effects import process_client

pytestmark = pytest.mark.integration


def _asked(upstream: FakeOpenAi, ns: str) -> int:
    return sum(1 for body in upstream.requests if ns in json.dumps(body["messages"][0]))


def _effects(ns: str) -> tuple[list[bytes], list[bytes], int]:
    client = process_client()
    booked = client.lrange(f"serve:{ns}:booked", 0, -1)
    undone = client.lrange(f"serve:{ns}:undone", 0, -1)
    return booked, undone, int(client.get(f"serve:{ns}:napping") or 0)


def test_a_whole_answer_reaches_the_client_through_its_own_retry(
    pair: tuple[Replica, Replica], upstream: FakeOpenAi, ns: str
) -> None:
    doomed, _ = pair
    with failover([doomed.port, pair[1].port]) as port:
        # given: the official client, with its default retries, asking through the load balancer
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, timeout=60)
        key = uuid.uuid4().hex
        answers: dict[str, object] = {}

        def ask() -> None:
            try:
                answers["completion"] = client.chat.completions.create(
                    model=AGENT,
                    messages=[{"role": "user", "content": f"book {ns} trip; nap {ns} 3"}],
                    extra_headers={"Idempotency-Key": key},
                )
            except Exception as exc:  # shown by the assertion below
                answers["error"] = exc

        asking = threading.Thread(target=ask)
        asking.start()
        wait_for(lambda: process_client().get(f"serve:{ns}:napping"), timeout_s=15, what="the nap started")

        # when: the replica serving it is SIGKILLed mid-call
        doomed.process.kill()
        asking.join(timeout=60)

    # then: the client got the whole answer, once; nothing ran twice or was undone
    assert "error" not in answers, answers
    completion = answers["completion"]
    assert isinstance(completion, openai.types.chat.ChatCompletion)
    assert completion.choices[0].message.content == "done: slept 3 s"
    assert _effects(ns) == ([b"trip"], [], 1)
    assert _asked(upstream, ns) == 3  # the plan's two turns, then the answer


def test_a_stream_cut_midway_is_asked_again_and_heard_whole(
    pair: tuple[Replica, Replica], upstream: FakeOpenAi, ns: str
) -> None:
    doomed, survivor = pair
    with failover([doomed.port, survivor.port]) as port:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, timeout=60)
        key = uuid.uuid4().hex
        request = {
            "model": AGENT,
            "messages": [{"role": "user", "content": f"book {ns} trip; nap {ns} 3"}],
            "stream": True,
            "extra_headers": {"Idempotency-Key": key},
        }
        # given: a streamed completion, its tool napping
        stream = client.chat.completions.create(**request)  # type: ignore[call-overload]
        wait_for(lambda: process_client().get(f"serve:{ns}:napping"), timeout_s=15, what="the nap started")

        # when: its replica is SIGKILLed, the stream breaks; the caller asks again with the same key
        doomed.process.kill()
        with pytest.raises((openai.APIError, httpx.HTTPError)):
            for _ in stream:
                pass
        again = client.chat.completions.create(**request)  # type: ignore[call-overload]
        chunks = list(again)

    # then: the stream asked again carries the whole answer, to its end
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "done: slept 3 s"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]
    assert _effects(ns) == ([b"trip"], [], 1)
    assert _asked(upstream, ns) == 3
