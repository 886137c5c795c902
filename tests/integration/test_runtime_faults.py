"""The worker runtime under faults: redelivery of idempotent calls, prompt reconnection after a Redis
outage, a catalog entry published again on reconnection, and only toolfleet's tasks on a worker.

Real processes only. Workers run against a PRIVATE redis-server (`PrivateRedis`, AOF on) that the
tests stop and start; the tools (`runtime_fault_tools.py`) count their runs in the shared test Redis
(`redis_url`, never restarted), so what ran is known whatever happened to the private one.

Measured figures are printed: run with `-s` to see them.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from orchestrator import CeleryExecutor, ToolExecutionRequest
from orchestrator.executors.celery import CallEvent
from tests._background import Background
from tests._waiting import wait_until
from tests.integration import runtime_fault_tools as rt
from tests.integration.private_redis import PrivateRedis, close_collector, private_redis_fixture, settings_for
from tests.integration.scripts import call
from tests.integration.worker_processes import tool_worker
from workers import OutcomeKind, ToolExecution, ToolOutcome, ToolRegistry
from workers.app import make_publisher
from workers.calls.invocation import Invocation
from workers.priorities import redis_lists
from workers.protocol import WORKER_KEY
from workers.runtime.catalog import Catalog
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

TOOLS_MODULE = "tests.integration.runtime_fault_tools"
SHORT_TTL_S = 2.0  # heartbeat TTL of the workers the redelivery tests kill
RECONNECT_BOUND_S = 1.5  # from Redis answering again to the worker consuming again
RESULT_BOUND_S = 3.0  # from Redis answering again to every result written meanwhile collected


# -- helpers -------------------------------------------------------------------------------------


class Counts:
    """The tools' counters in the shared test Redis, under a prefix unique to one test."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.prefix = uuid.uuid4().hex[:8]

    def key(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def __call__(self, what: str, name: str) -> int:
        return int(self.client.get(f"rt:{what}:{self.key(name)}") or 0)

    def at(self, what: str, name: str) -> float | None:
        raw = self.client.get(f"rt:at:{what}:{self.key(name)}")
        return float(raw) if raw else None


def start_worker(
    redis_url: str,
    counter_url: str,
    logs: Path,
    pool: str,
    *,
    kind: str = "threads",
    concurrency: int = 4,
    heartbeat_ttl_s: float = 6.0,
    visibility_timeout_s: float | None = None,
) -> WorkerProcess:
    name = f"{pool}-{kind}-{time.monotonic_ns() % 10**8}"
    env = {
        "TOOLFLEET_TEST_COUNTER_URL": counter_url,
        "TOOLFLEET_HEARTBEAT_TTL_S": str(heartbeat_ttl_s),
        "TOOLFLEET_VISIBILITY_TIMEOUT_S": "" if visibility_timeout_s is None else str(visibility_timeout_s),
    }
    log_path, hostname = logs / f"{name}.log", f"{name}@runtime"
    return tool_worker(
        redis_url, [pool], [TOOLS_MODULE], log_path, hostname, kind=kind, concurrency=concurrency, env=env
    )


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runtime-faults")


# This module's own redis-server, AOF on: restartable on the same port.
private_redis = private_redis_fixture("module", "runtime-redis")


@pytest.fixture
def counts(redis_url: str) -> Iterator[Counts]:
    client = redis.Redis.from_url(redis_url)
    yield Counts(client)
    client.close()


# -- A. idempotent calls are redelivered when their worker dies ------------------------------------


@pytest.mark.parametrize(
    ("kind", "tool_name"),
    [("threads", "rt_idem_sleep"), ("prefork", "rt_idem_sleep"), ("threads", "rt_idem_retry_sleep")],
)
def test_an_idempotent_call_whose_worker_is_killed_completes_once_on_another_worker(
    kind: str, tool_name: str, up: PrivateRedis, redis_url: str, counts: Counts, logs: Path
) -> None:
    # Given: two workers on the pool (heartbeat TTL 2 s; the broker redelivers an unacknowledged
    # message after 16 s, past the call's 15 s deadline), and an idempotent call of 4 s
    workers = [
        start_worker(
            up.url,
            redis_url,
            logs,
            rt.IDEMPOTENT_POOL,
            kind=kind,
            concurrency=1,
            heartbeat_ttl_s=SHORT_TTL_S,
            visibility_timeout_s=16,
        )
        for _ in range(2)
    ]
    events: list[CallEvent] = []
    executor = CeleryExecutor(
        settings=settings_for(up.url, heartbeat_ttl_s=SHORT_TTL_S), tools=[rt.tools], on_call=events.append
    )
    broker = redis.Redis.from_url(up.url)
    key = counts.key("a")
    try:
        for worker in workers:
            worker.wait_ready(timeout_s=60)
        idempotent = call("c1", tool_name, key=key, seconds=4)
        dispatched = time.monotonic()
        definition = executor.definition(tool_name)
        batch = Background(lambda: asyncio.run(executor.execute(idempotent, definition, Invocation())))

        # When: the worker running it is SIGKILLed (the whole worker, pool children included)
        assert wait_until(lambda: counts("run", "a") == 1, 15)
        assert wait_until(lambda: any(e.state == "started" for e in events), 5), events
        [first] = [e.worker for e in events if e.state == "started"]
        [doomed] = [w for w in workers if w.hostname == first]
        [survivor] = [w for w in workers if w is not doomed]
        doomed.kill()
        killed_at = time.monotonic()
        assert broker.hlen("unacked") == 1, "the killed worker's message is not held unacknowledged"
        outcome: ToolOutcome = batch.join(30)
        completed_s = time.monotonic() - dispatched

        # Then: the call completes on the other worker, within its deadline
        print(
            f"\n{kind} worker killed mid-call ({tool_name}): {outcome.kind.value} on the other worker "
            f"{time.monotonic() - killed_at:.2f} s after the kill (TTL {SHORT_TTL_S} s)"
        )
        assert (outcome.kind, outcome.text, outcome.worker) == (
            OutcomeKind.SUCCESS,
            f"slept {key}",
            survivor.hostname,
        )
        assert completed_s < 15
        # ... started twice (once cut short), completed once
        assert (counts("run", "a"), counts("done", "a")) == (2, 1)

        # ... and the killed worker's message, put back by the broker once its visibility timeout
        # passed, is discarded (its deadline passed): the call never runs a third time
        assert wait_until(
            lambda: (
                broker.hlen("unacked") == 0
                and sum(broker.llen(q) for q in redis_lists(rt.IDEMPOTENT_POOL)) == 0
            ),
            40,
            0.2,
        ), "the unacknowledged message was never restored"
        discarded = f"Discarding revoked task: tool.{tool_name}[{outcome.task_id}]"
        assert survivor.log_path is not None
        assert wait_until(lambda: discarded in survivor.log_path.read_text(errors="replace"), 10)
        assert (counts("run", "a"), counts("done", "a")) == (2, 1)
        stored = json.loads(broker.get(f"celery-task-meta-{outcome.task_id}") or b"{}")
        assert stored["status"] == "SUCCESS"  # the discarded copy's REVOKED did not replace it
    finally:
        executor.close()
        broker.close()
        for worker in workers:
            worker.stop()


# -- B. workers resume promptly after an outage ----------------------------------------------------


def test_workers_resume_within_a_second_of_redis_answering_and_report_what_ran(
    up: PrivateRedis, redis_url: str, counts: Counts, logs: Path
) -> None:
    # Given: a threads worker on the private Redis, and an executor
    worker = start_worker(up.url, redis_url, logs, rt.OUTAGE_POOL, concurrency=16)
    settings = settings_for(up.url, heartbeat_ttl_s=6.0)
    executor = CeleryExecutor(settings=settings, tools=[rt.tools])
    publisher = make_publisher(settings)
    reconnects: list[float] = []
    collected: list[float] = []
    try:
        worker.wait_ready(timeout_s=60)
        for round_ in range(3):
            # ... running 8 calls of 2 s (deadline 25 s)
            names = [f"r{round_}-{i}" for i in range(8)]
            calls = [call(name, "rt_sleep", key=counts.key(name), seconds=2) for name in names]

            async def batch(calls: list[ToolExecutionRequest] = calls) -> list[ToolOutcome]:
                invocation = Invocation()
                return list(await asyncio.gather(*(executor.execute(c, None, invocation) for c in calls)))

            running = Background(lambda batch=batch: asyncio.run(batch()))
            assert wait_until(lambda names=names: all(counts("run", n) for n in names), 15)

            # When: Redis is down for 8 s (the calls finish, and store their results, meanwhile)
            up.stop()
            time.sleep(8)
            up.start()
            up_wall, up_at = time.time(), time.monotonic()
            # ... and a call is published the moment it answers again
            probe = f"probe-{round_}"
            publisher.send_task(
                "tool.rt_sleep",
                kwargs={
                    "request": call(probe, "rt_sleep", key=counts.key(probe), seconds=0).to_json(),
                    "invocation": Invocation().to_json(),
                    "deadline": time.time() + 20,
                },
                queue=rt.OUTAGE_POOL,
            )

            # Then: the worker runs it within about a second of Redis answering
            assert wait_until(lambda probe=probe: counts("run", probe) == 1, 20), "the worker never resumed"
            reconnects.append((counts.at("run", probe) or 0.0) - up_wall)
            # ... and every call that ran reports its real outcome, collected soon after
            outcomes: list[ToolOutcome] = running.join(30)
            collected.append(time.monotonic() - up_at)
            assert [(o.kind, o.text) for o in outcomes] == [
                (OutcomeKind.SUCCESS, f"slept {counts.key(n)}") for n in names
            ]
            assert all(counts("done", n) == 1 for n in names)
    finally:
        publisher.close()
        executor.close()
        worker.stop()

    print(
        f"\n8 s outages: worker consuming again {', '.join(f'{s:.2f}' for s in reconnects)} s after "
        f"Redis answered (median {statistics.median(reconnects):.2f} s); results collected "
        f"{', '.join(f'{s:.2f}' for s in collected)} s after"
    )
    assert max(reconnects) < RECONNECT_BOUND_S
    assert max(collected) < RESULT_BOUND_S


# -- C. workers announce themselves again the moment they reconnect --------------------------------


def test_a_worker_is_back_in_the_catalog_as_soon_as_it_reconnects_to_an_emptied_redis(
    up: PrivateRedis, redis_url: str, counts: Counts, logs: Path
) -> None:
    # Given: a worker whose heartbeat refreshes its entry every 10 s (TTL 30 s), and a booking made
    worker = start_worker(up.url, redis_url, logs, rt.CATALOG_POOL, heartbeat_ttl_s=30)
    client = redis.Redis.from_url(up.url)
    key = counts.key("b")
    booking = call("b1", "rt_book", key=key)
    invocation = Invocation()
    try:
        worker.wait_ready(timeout_s=60)
        executor = CeleryExecutor(settings=settings_for(up.url, heartbeat_ttl_s=30), tools=[rt.tools])
        try:
            booked = asyncio.run(executor.execute(booking, None, invocation))
        finally:
            executor.close()
        assert (booked.kind, booked.text) == (OutcomeKind.SUCCESS, f"booked {key}")

        # When: Redis restarts empty (no persistence) 1 s after the worker's last heartbeat
        entry = WORKER_KEY.format(worker.hostname)
        assert wait_until(lambda: int(client.pttl(entry)) > 29_500, 15), "no heartbeat seen"
        up.restart_empty(down_s=1.0)
        up_at = time.monotonic()
        client.close()
        client = redis.Redis.from_url(up.url)
        catalog = Catalog(client)

        # Then: the worker is in the live catalog again within about a second, not at its next beat
        back = wait_until(lambda: worker.hostname in catalog.live_workers(rt.CATALOG_POOL), 12)
        back_s = time.monotonic() - up_at
        print(f"\nRedis restarted empty: the worker back in the catalog {back_s:.2f} s after it answered")
        assert back and back_s < RECONNECT_BOUND_S

        # ... so a compensation dispatched right then finds a live worker, and undoes the booking once
        executor = CeleryExecutor(settings=settings_for(up.url, heartbeat_ttl_s=30), tools=[rt.tools])
        try:
            definition = executor.definition("rt_book")
            assert definition is not None
            execution = ToolExecution(request=booking, result=booked.text, task_id=booked.task_id)
            undone = asyncio.run(executor.compensate(definition, execution, invocation))
        finally:
            executor.close()
        assert undone.kind is OutcomeKind.SUCCESS, undone.text
        assert (counts("run", "b"), counts("undo", "b")) == (1, 1)
    finally:
        client.close()
        close_collector(up.url)
        worker.stop()


# -- D. only toolfleet's tasks run on a tool worker ------------------------------------------------


@pytest.fixture(scope="module")
def builtins_worker(redis_url: str, logs: Path) -> Iterator[WorkerProcess]:
    with start_worker(redis_url, redis_url, logs, rt.BUILTINS_POOL).running(timeout_s=60) as worker:
        yield worker


def test_a_forged_message_for_a_celery_builtin_task_does_not_run(
    redis_url: str, settings: Settings, builtins_worker: WorkerProcess
) -> None:
    # Given: a message for Celery's built-in `celery.accumulate` (it returns its arguments), sent
    # to a tool worker's queue by anyone who can write to the broker
    client = redis.Redis.from_url(redis_url)
    publisher = make_publisher(settings)
    task_id = f"forged-{uuid.uuid4()}"
    try:
        publisher.send_task("celery.accumulate", args=(1, 2), task_id=task_id, queue=rt.BUILTINS_POOL)

        # When: the worker has handled it
        assert wait_until(lambda: client.exists(f"celery-task-meta-{task_id}") == 1, 15)
        stored = json.loads(client.get(f"celery-task-meta-{task_id}") or b"{}")
    finally:
        publisher.close()
        client.close()

    # Then: it did not run: refused as an unregistered task
    assert stored["status"] == "FAILURE", stored
    assert stored["result"]["exc_type"] == "NotRegistered"


def test_a_tool_worker_registers_only_tool_and_compensation_tasks(
    settings: Settings, builtins_worker: WorkerProcess
) -> None:
    # Given: a live tool worker; When: asked for every task it registered, Celery's own included
    publisher = make_publisher(settings)
    try:
        replies = publisher.control.broadcast(
            "registered",
            arguments={"builtins": True},
            destination=[builtins_worker.hostname],
            reply=True,
            timeout=3,
        )
        answers = publisher.control.inspect(destination=[builtins_worker.hostname], timeout=3).registered()
    finally:
        publisher.close()

    # Then: only the tool.* and compensate.* tasks of its modules, nothing of Celery's own
    registry = ToolRegistry([rt.tools])
    expected = sorted(
        {f"tool.{d.name}" for d in registry}
        | {f"compensate.{d.name}" for d in registry if d.compensation is not None}
    )
    assert replies == [{builtins_worker.hostname: expected}]
    assert answers == {builtins_worker.hostname: expected}
