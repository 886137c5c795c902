"""A call given up before a worker started it never starts, on any pool kind: a worker may already hold
its message (taken from the queue ahead of a busy call), which Celery's revoke does not always reach,
so the worker reads the call's cancelled mark before it runs the tool."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.integration.given_up_tools as gt
from orchestrator import AiService, CeleryExecutor, ScriptedChatModel
from tests._background import Background
from tests._waiting import wait_for
from tests.integration.broker_lists import pool_lists
from tests.integration.scripts import ask, call
from tests.integration.side_effects import process_client
from tests.integration.worker_processes import threads_and_prefork
from workers.settings import Settings

pytestmark = pytest.mark.integration

MODULE = "tests.integration.given_up_tools"
KINDS = {"threads": (gt.occupy_threads, gt.wait_threads), "prefork": (gt.occupy_prefork, gt.wait_prefork)}


@pytest.fixture(scope="module")
def given_up_pools(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One worker per pool kind, each running one call at a time."""
    logs = tmp_path_factory.mktemp("given-up-workers")
    with threads_and_prefork(redis_url, MODULE, (gt.THREADS, gt.PREFORK), logs, threads=1):
        yield


def _key(ns: str, what: str) -> str:
    return f"givenup:{ns}:{what}"


@pytest.mark.parametrize("kind", list(KINDS))
def test_calls_waiting_behind_a_busy_one_never_start_once_their_invocation_is_cancelled(
    given_up_pools: None, settings: Settings, kind: str, tmp_path: Path
) -> None:
    # given: one response asking for a 2 s call that keeps the pool's only runner busy, and three
    # calls that wait behind it
    ns = uuid.uuid4().hex[:10]
    occupy, waiting = KINDS[kind]
    calls = [call("busy", occupy.__name__, ns=ns, seconds=2.0)]
    calls += [call(f"w{i}", waiting.__name__, ns=ns, name=f"w{i}") for i in range(3)]
    service = AiService(
        chat_model=ScriptedChatModel([ask(*calls), "done"]),
        tools=[occupy, waiting],
        executor=CeleryExecutor(settings=settings),
    )
    invocation_id = str(uuid.uuid4())
    running = Background(lambda: service.chat("go", invocation_id=invocation_id))
    client = process_client()
    wait_for(lambda: client.exists(_key(ns, "busy")), timeout_s=20, what="the busy call under way")
    pool = gt.THREADS if kind == "threads" else gt.PREFORK
    wait_for(
        lambda: sum(client.llen(q) for q in pool_lists(client, pool)) == 2 and client.hlen("unacked") >= 1,
        timeout_s=10,
        what="one waiting call held by the worker (taken from the queue, not acknowledged), two queued",
    )

    # when: the invocation is cancelled while they wait
    assert service.cancel(invocation_id) is True
    with pytest.raises(asyncio.CancelledError):
        running.join(timeout_s=30)

    # then: once the busy call is over (done on threads, killed on prefork) the worker is free, and
    # none of the waiting calls ever runs
    if kind == "threads":
        wait_for(lambda: client.exists(_key(ns, "free")), timeout_s=10, what="the busy call's end")
    time.sleep(2.0)  # a non-event: a held call would start at once on the free worker
    assert client.lrange(_key(ns, "ran"), 0, -1) == []
