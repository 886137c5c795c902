"""The official `openai` client, sending an `Idempotency-Key`, behind a load balancer in front of two
replicas: when the replica serving its streamed request is SIGKILLed mid-call, the stream breaks; its
caller asks again with the same key, reaches the other replica, which carries the invocation on, and
hears the whole answer, once: the tools ran once, the model was asked once per turn, nothing was
undone. (A whole answer's client retries by itself: test_carried_on_turns.py and _calls.py.)"""

from __future__ import annotations

import uuid

import httpx
import openai
import pytest

from tests._waiting import wait_for
from tests.integration.fake_openai import FakeOpenAi
from tests.integration.serve.carrying import asked, effects
from tests.integration.serve.failover import failover
from tests.integration.serve.replicas import AGENT, API_KEY, Replica
from tests.integration.side_effects import process_client

pytestmark = pytest.mark.integration


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
    assert effects(ns) == {"booked": ["trip"], "undone": [], "stamped": [], "napped": 1}
    assert asked(upstream, ns) == 3
