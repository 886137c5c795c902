"""A replica SIGKILLed while its invocation's calls run, or while it undoes a failed batch, carried
on by the survivor: a call in flight on a threads pool, and a 60-second call on a prefork pool, are
re-attached to and never sent again; a compensation under way is finished once and the loop goes on.
For a streamed and a non-streamed client: completed on the survivor within the heartbeat window,
every effect (counted outside) once, the model asked once per turn, the conversation's turn once."""

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
from tests.integration.serve.replicas import AGENT, AGENTS_MODULE
from tests.integration.serve_agents import HEAVY_POOL
from tests.integration.side_effects import process_client
from tests.integration.worker_processes import tool_worker
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def heavy_worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """A prefork worker of the heavy pool (two children)."""
    logs = tmp_path_factory.mktemp("heavy-worker")
    worker = tool_worker(
        redis_url,
        [HEAVY_POOL],
        [AGENTS_MODULE],
        logs / "heavy.log",
        f"heavy-{uuid.uuid4().hex[:6]}@integration",
        kind="prefork",
        concurrency=2,
    )
    with worker.running(timeout_s=60):
        yield worker


@pytest.fixture(scope="module")
def carried(
    redis_url: str,
    database_url: str,
    upstream: FakeOpenAi,
    serve_worker: WorkerProcess,
    heavy_worker: WorkerProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Fleet]:
    logs = tmp_path_factory.mktemp("carried-calls")
    yield from fleet(redis_url, database_url, upstream, logs, agents=(AGENT, "heavy"))


def _napping(ns: str) -> bool:
    return process_client().get(f"serve:{ns}:napping") is not None


@pytest.mark.parametrize("client", CLIENTS)
def test_killed_while_a_call_runs_on_a_threads_pool(
    carried: Fleet, upstream: FakeOpenAi, ns: str, client: str
) -> None:
    conversation = uuid.uuid4().hex
    plan = f"book {ns} trip; nap {ns} 4"
    outcome = carried.run(client, plan, lambda: _napping(ns), conversation_id=conversation)
    carried_on_once(outcome, carried.survivor)
    assert outcome.answer == "done: slept 4 s"
    assert effects(ns) == {"booked": ["trip"], "undone": [], "stamped": [], "napped": 1}
    assert asked(upstream, ns) == 3
    assert heard_in_conversation(carried.survivor, conversation) == f"heard: {plan} | what did I say?"


@pytest.mark.timeout(180)  # the call's 60 s, the replicas' start and the adoption
def test_killed_while_a_sixty_second_call_runs_on_a_prefork_pool(
    carried: Fleet, upstream: FakeOpenAi, ns: str
) -> None:
    conversation = uuid.uuid4().hex
    plan = f"hnap {ns} 60"
    outcome = carried.run("stream", plan, lambda: _napping(ns), conversation_id=conversation, agent="heavy")
    carried_on_once(outcome, carried.survivor)
    # the long call finished on its worker and its result reached the model through the survivor
    assert outcome.answer == "done: slept 60 s"
    assert effects(ns)["napped"] == 1
    assert asked(upstream, ns) == 2


@pytest.mark.parametrize("client", CLIENTS)
def test_killed_while_a_failed_batch_is_undone(
    carried: Fleet, upstream: FakeOpenAi, ns: str, client: str
) -> None:
    # given: a batch whose booking succeeded and whose other call failed: the booking is being undone
    conversation = uuid.uuid4().hex
    plan = f"book {ns} slowly & refuse {ns}"
    unbooking = f"serve:{ns}:unbooking"
    outcome = carried.run(
        client, plan, lambda: process_client().get(unbooking) is not None, conversation_id=conversation
    )
    carried_on_once(outcome, carried.survivor)
    # then: the booking was undone once, and the model heard both, then answered
    assert effects(ns) == {"booked": ["slowly"], "undone": ["slowly"], "stamped": [], "napped": 0}
    assert outcome.answer == (
        "done: Tool 'book' was executed successfully but was rolled back due to failure of tool 'refuse' "
        "| the desk refuses"
    )
    assert asked(upstream, ns) == 2
    assert heard_in_conversation(carried.survivor, conversation) == f"heard: {plan} | what did I say?"
