"""A replica SIGKILLed around a model turn, its invocation carried on by the survivor: while the model
thinks about the first turn; after the model answered, its calls journaled and not all sent; while it
thinks about the answer, after the calls. For a streamed and a non-streamed client, the invocation
completes on the survivor within the heartbeat window, every tool effect (counted outside) happens
once, or once per idempotency key, the model is asked once per turn (again only for a turn whose
answer never came), and the conversation holds the turn once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.integration.fake_openai import FakeOpenAi
from tests.integration.serve.carrying import (
    CLIENTS,
    Fleet,
    asked,
    carried_on_once,
    effects,
    fleet,
    heard_in_conversation,
)
from tests.integration.serve.upstream import hold
from tests.integration.side_effects import process_client
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def carried(
    redis_url: str,
    database_url: str,
    upstream: FakeOpenAi,
    serve_worker: WorkerProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Fleet]:
    yield from fleet(redis_url, database_url, upstream, tmp_path_factory.mktemp("carried-turns"))


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("turn", [0, 2], ids=["first-turn", "answer-after-the-calls"])
def test_killed_while_the_model_thinks(
    carried: Fleet, upstream: FakeOpenAi, ns: str, client: str, turn: int
) -> None:
    # given: the model's answer to request `turn` of the plan held until the replica is dead
    held = hold(ns, turn)
    conversation = uuid.uuid4().hex
    plan = f"book {ns} trip; nap {ns} 1"
    outcome = carried.run(
        client, plan, held.asked.is_set, conversation_id=conversation, after_kill=held.released.set
    )
    carried_on_once(outcome, carried.survivor)
    assert outcome.answer == "done: slept 1 s"
    assert effects(ns) == {"booked": ["trip"], "undone": [], "stamped": [], "napped": 1}
    # that request's answer never came: it was asked again; the others once
    assert asked(upstream, ns) == 3 + 1
    assert heard_in_conversation(carried.survivor, conversation) == f"heard: {plan} | what did I say?"


@pytest.mark.parametrize("client", CLIENTS)
def test_killed_after_the_model_answered_before_its_calls_were_all_sent(
    carried: Fleet, upstream: FakeOpenAi, ns: str, client: str
) -> None:
    # given: a doomed replica that sends one call at a time: the nap is sent, the stamp (idempotent)
    # and the booking (not) are journaled, waiting for their turn
    conversation = uuid.uuid4().hex
    plan = f"nap {ns} 2 & stamp {ns} s1 & book {ns} b1"
    outcome = carried.run(
        client,
        plan,
        lambda: process_client().get(f"serve:{ns}:napping") is not None,
        conversation_id=conversation,
        doomed_env={"TOOLFLEET_MAX_FANOUT": "1"},
    )
    carried_on_once(outcome, carried.survivor)
    # then: the nap was re-attached to; the stamp, never seen by the broker, sent again under its
    # key; the booking, not idempotent, told to the model as lost, never run
    assert outcome.answer is not None and outcome.answer.startswith("done: slept 2 s | stamped s1 | ")
    assert "was being sent when its orchestrator stopped" in outcome.answer
    assert effects(ns) == {"booked": [], "undone": [], "stamped": ["s1"], "napped": 1}
    assert asked(upstream, ns) == 2
    assert heard_in_conversation(carried.survivor, conversation) == f"heard: {plan} | what did I say?"
