"""Sagas through a Redis blip: a restart while a compensation runs, a restart that empties the
catalog just before one, and a compensation that cannot run at all until `toolfleet recover`.

Each test runs its own redis-server (`PrivateRedis`, restarted by the test) for the broker, the
results and the catalog, and real worker processes against it. The tools (`saga_blip_tools.py`)
count every side effect and every undo in a second redis-server of the test's own, which is never
restarted, so "undone exactly once" is read from counters that no restart can lose. It is not the
shared test database: every pytest session flushes that at its start, so a session started meanwhile
by anyone on the same database number would erase a deposit the test then reads as undone.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import redis

from orchestrator import CeleryExecutor, Result, ScriptedChatModel
from orchestrator.saga import rolled_back_text
from orchestrator.saga.journal import Journal
from tests._background import Background
from tests._waiting import wait_until
from tests.integration import saga_blip_tools as blip
from tests.integration.orchestrator_processes import STALE_AFTER, failed_saga_row, toolfleet_on
from tests.integration.private_redis import PrivateRedis, private_redis_in, settings_for
from tests.integration.scripts import ask, call, saga_service
from tests.integration.worker_processes import tool_worker
from workers.app import make_publisher
from workers.calls.invocation import Invocation
from workers.protocol import COMPENSATION_PREFIX, ToolExecution, compensation_task_id
from workers.runtime.catalog import Catalog
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

TOOLS_MODULE = "tests.integration.saga_blip_tools"
BACKOFF = {"TOOLFLEET_RETRY_BACKOFF_S": "0.05", "TOOLFLEET_RETRY_BACKOFF_MAX_S": "0.5"}
CLI_ENV = {"TOOLFLEET_HEARTBEAT_TTL_S": "6"}  # the workers' heartbeat TTL


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A redis-server of this test alone (AOF on), for the broker, the results and the catalog."""
    with private_redis_in(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def counts_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """The redis-server that counts side effects: this test's own, never restarted."""
    with private_redis_in(tmp_path / "counts") as server:
        yield server


@pytest.fixture
def counts(counts_redis: PrivateRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(counts_redis.url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def ns() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def start_worker(
    private_redis: PrivateRedis, counts_redis: PrivateRedis, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start a threads worker on the private Redis; every one started is stopped after the test."""
    started: list[WorkerProcess] = []

    def start(*pools: str, heartbeat_ttl_s: float = 6.0) -> WorkerProcess:
        hostname = f"{pools[0]}-{len(started)}-{os.getpid()}-{uuid.uuid4().hex[:6]}@blips"
        env = {
            "SAGA_BLIP_WORKER": hostname,
            "SAGA_BLIP_COUNTS_URL": counts_redis.url,
            "TOOLFLEET_HEARTBEAT_TTL_S": str(heartbeat_ttl_s),
            "TOOLFLEET_COMPENSATION_RETRIES": "1",
            **BACKOFF,
        }
        log_path = tmp_path / f"{pools[0]}-{len(started)}.log"
        worker = tool_worker(
            private_redis.url, pools, [TOOLS_MODULE], log_path, hostname, concurrency=8, env=env
        )
        started.append(worker)
        return worker.wait_ready(timeout_s=60)

    try:
        yield start
    finally:
        for worker in started:
            worker.stop(timeout_s=5)


# -- helpers -------------------------------------------------------------------------------------


class Rig(NamedTuple):
    """What a blip test works with: the Redis it restarts, how to start its worker, the Redis of the
    tools' counters, the journal, and the test's namespace."""

    private_redis: PrivateRedis
    start_worker: Callable[..., WorkerProcess]
    counts: redis.Redis
    journal: Journal
    ns: str


@pytest.fixture
def rig(
    private_redis: PrivateRedis,
    start_worker: Callable[..., WorkerProcess],
    counts: redis.Redis,
    journal: Journal,
    ns: str,
) -> Rig:
    return Rig(private_redis, start_worker, counts, journal, ns)


def number(counts: redis.Redis, ns: str, what: str) -> int:
    return int(counts.get(blip.key(ns, what)) or 0)


def side_effects(counts: redis.Redis, ns: str) -> dict[str, object]:
    """Everything the tools recorded under `ns`, to say what ran where when an assertion fails."""
    return {
        "balance": number(counts, ns, "balance"),
        "undo_starts": number(counts, ns, "undo_starts"),
        "undos": number(counts, ns, "undos"),
        "done_by": counts.lrange(blip.key(ns, "done_by"), 0, -1),
        "undone_by": counts.lrange(blip.key(ns, "undone_by"), 0, -1),
    }


def assert_rolled_back(result: Result, journal: Journal, tool: str = "blip_credit") -> None:
    """The call was undone: the model was told so, the journal says so, the invocation succeeded."""
    assert result.content == "done"
    credited, failed = result.tool_executions
    assert (credited.request.name, credited.status, credited.result) == (
        tool,
        "rolled_back",
        rolled_back_text(tool, "blip_fail"),
    )
    assert failed.has_failed and failed.result == blip.DECLINED
    assert result.invocation_id is not None
    [compensation] = journal.compensations(result.invocation_id)
    assert (compensation.tool, compensation.state, compensation.error) == (tool, "succeeded", None)
    record = journal.invocation(result.invocation_id)
    assert record is not None and record.state == "succeeded", record


def blip_executor(private_redis: PrivateRedis, **variables: str) -> CeleryExecutor:
    """An executor on the private Redis, for workers of a 6 s heartbeat TTL, with short backoffs and
    any other `TOOLFLEET_*` `variables`."""
    settings = settings_for(private_redis.url, heartbeat_ttl_s=6.0, **BACKOFF, **variables)
    return CeleryExecutor(settings=settings, tools=[blip.bank])


def credit_then_fail(ns: str, *, hold: bool = False, **credit: float) -> ScriptedChatModel:
    """A model that credits (call `c1`, with `credit`'s arguments), then makes a call that fails (`f1`,
    held until the test releases it if `hold`), then answers "done"."""
    failing = call("f1", "blip_fail", ns=ns, hold=True) if hold else call("f1", "blip_fail", ns=ns)
    return ScriptedChatModel([ask(call("c1", "blip_credit", ns=ns, **credit)), ask(failing), "done"])


# -- 1. Redis restarted while a compensation runs -------------------------------------------------


def test_a_compensation_survives_a_redis_restart_while_it_runs(
    rig: Rig,
) -> None:
    private_redis, start_worker, counts, journal, ns = rig
    # Given: a saga whose credit is undone by a compensation that takes 0.5 s
    start_worker(blip.POOL, blip.FAIL_POOL)
    executor = blip_executor(private_redis)
    model = credit_then_fail(ns, amount=100, undo_s=0.5)
    chat = Background(lambda: saga_service(model, executor, journal, [blip.bank]).chat("credit, then pay"))

    # When: Redis stops as the undo starts and comes back (same data) ~1 s later, after the undo ended,
    # so the worker's bookkeeping after the undo meets a Redis that is down
    try:
        assert wait_until(lambda: number(counts, ns, "undo_starts") >= 1, 30), (
            "the compensation never started"
        )
        stopped = private_redis.stop()
        stopped_at = time.time() - (time.monotonic() - stopped)
        assert wait_until(lambda: number(counts, ns, "undos") >= 1, 10), "the undo never finished"
        assert float(counts.get(blip.key(ns, "undone_at")) or 0) > stopped_at, (
            "the undo ended before the outage"
        )
        time.sleep(max(0.0, 1.0 - (time.monotonic() - stopped)))
        up = private_redis.start()
        result = chat.join(60)
        print(
            f"\ncompensation through a restart: down {up - stopped:.2f} s; "
            f"the saga ended {time.monotonic() - up:.2f} s after Redis was back"
        )
    finally:
        executor.close()

    # Then: the undo ran once, the compensation is recorded succeeded, the model was told of the rollback
    assert (number(counts, ns, "undo_starts"), number(counts, ns, "undos")) == (1, 1)
    assert number(counts, ns, "balance") == 0
    assert_rolled_back(result, journal)
    # ... and nothing undoes it again later (a redelivery finds it done)
    time.sleep(1.0)
    assert number(counts, ns, "undos") == 1


# -- 2. Redis restarted without its data just before a compensation --------------------------------


class Waits(logging.Handler):
    """When the executor said a compensation found no live worker and keeps trying (monotonic)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.at: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying until its deadline" in record.getMessage():
            self.at.append(time.monotonic())


def test_a_compensation_waits_for_a_worker_after_redis_came_back_empty(
    rig: Rig,
) -> None:
    private_redis, start_worker, counts, journal, ns = rig
    # Given: a saga whose credit's pool has one worker, and whose failing call (on another pool)
    # holds until the test releases it
    worker = start_worker(blip.POOL)
    start_worker(blip.FAIL_POOL)
    executor = blip_executor(private_redis)
    model = credit_then_fail(ns, amount=70, hold=True)
    waits = Waits()
    logging.getLogger("orchestrator.executors.celery").addHandler(waits)
    chat = Background(lambda: saga_service(model, executor, journal, [blip.bank]).chat("credit, then pay"))

    # When: while the failing call runs, Redis is down 1 s and comes back without its data (the
    # catalog is empty), and the credit's worker is held away (SIGSTOP) so it cannot announce itself
    # again; then the call fails, and its compensation finds no live worker
    try:
        assert wait_until(lambda: number(counts, ns, "failing") == 1, 30), "the failing call never ran"
        os.killpg(worker.pid, signal.SIGSTOP)
        private_redis.restart_empty(down_s=1.0)
        with redis.Redis.from_url(private_redis.url) as client:
            assert not Catalog(client).live_workers(blip.POOL), "the catalog survived the restart"
        counts.set(blip.key(ns, "release"), "1")
        assert wait_until(lambda: bool(waits.at), 20), "the compensation never waited for a worker"
        assert number(counts, ns, "undo_starts") == 0
        # ... and the worker comes back a second later
        time.sleep(1.0)  # how long the worker stays away, not a wait for a condition
        resumed = time.monotonic()
        os.killpg(worker.pid, signal.SIGCONT)
        result = chat.join(60)
    finally:
        os.killpg(worker.pid, signal.SIGCONT)
        logging.getLogger("orchestrator.executors.celery").removeHandler(waits)
        executor.close()

    # Then: the compensation waited, retried, and undid the credit once the worker was live again
    undone_after_s = (
        float(counts.get(blip.key(ns, "undone_at")) or 0) - time.time() + time.monotonic() - resumed
    )
    print(f"\nempty catalog: the undo ran {undone_after_s:.2f} s after the worker was back")
    assert (number(counts, ns, "undo_starts"), number(counts, ns, "undos")) == (1, 1)
    assert number(counts, ns, "balance") == 0
    assert_rolled_back(result, journal)


# -- 3. a compensation that cannot run: not `succeeded`, listed, then completed by `recover` --------


@pytest.mark.timeout(180)  # waits out the compensation's 30 s deadline, then runs the CLI twice
def test_a_compensation_that_cannot_run_is_listed_and_completed_by_recover(
    rig: Rig,
    journal_file: Path,
) -> None:
    private_redis, start_worker, counts, journal, ns = rig
    # Given: a deposit on a pool whose only worker is stopped before the saga undoes it, and a credit
    # made after the failure, which stands
    start_worker(blip.POOL, blip.FAIL_POOL)
    gone = start_worker(blip.GONE_POOL)
    executor = blip_executor(private_redis, TOOLFLEET_COMPENSATION_RETRIES="0")
    model = ScriptedChatModel(
        [
            ask(call("d1", "blip_deposit", ns=ns, amount=40)),
            ask(call("f1", "blip_fail", ns=ns, hold=True)),
            ask(call("c1", "blip_credit", ns=ns, amount=5)),
            "done",
        ]
    )
    chat = Background(
        lambda: saga_service(model, executor, journal, [blip.bank]).chat("deposit, pay, credit")
    )

    # When: the deposit's pool loses its worker while the failing call runs; no worker comes back
    # within the compensation's deadline
    try:
        assert wait_until(lambda: number(counts, ns, "failing") == 1, 30), "the failing call never ran"
        gone.stop(timeout_s=10)
        counts.set(blip.key(ns, "release"), "1")
        result = chat.join(90)
    finally:
        executor.close()

    # Then: the deposit stands (the model is told so), the credit stands, and the invocation did not
    # end `succeeded`: it still owes the compensation
    assert result.content == "done"
    assert [(e.request.id, e.status) for e in result.tool_executions] == [
        ("d1", "success"),
        ("f1", "execution_error"),
        ("c1", "success"),
    ]
    assert (number(counts, ns, "balance"), number(counts, ns, "undos")) == (45, 0), side_effects(counts, ns)
    assert result.invocation_id is not None
    record = journal.invocation(result.invocation_id)
    assert record is not None and record.state != "succeeded", record
    [compensation] = journal.compensations(result.invocation_id)
    assert compensation.state == "failed"
    assert compensation.error is not None and f"pool '{blip.GONE_POOL}'" in compensation.error

    # ... `toolfleet sagas --failed` lists it
    row = failed_saga_row(result.invocation_id, private_redis.url, journal_file, timeout_s=90, env=CLI_ENV)
    assert row[:2] == [result.invocation_id, "d1"], row
    assert row[2].startswith('blip_deposit({"ns":') and "failed" in row[3:], row

    # ... and once a worker serves the pool again, `toolfleet recover` completes it, once, and leaves
    # the credit that stands alone
    start_worker(blip.GONE_POOL)
    recovered = toolfleet_on(
        ["recover", "--stale-after", STALE_AFTER, "--tools", TOOLS_MODULE],
        private_redis.url,
        journal_file,
        timeout_s=90,
        env=CLI_ENV,
    )
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert f"invocation {result.invocation_id}:" in recovered.stdout
    assert "compensated  blip_deposit (d1)" in recovered.stdout
    assert "blip_credit" not in recovered.stdout and "FAILED" not in recovered.stdout
    assert (number(counts, ns, "undo_starts"), number(counts, ns, "undos")) == (1, 1)
    assert number(counts, ns, "balance") == 5
    [compensation] = journal.compensations(result.invocation_id)
    assert compensation.state == "succeeded"
    states = {c.call_id: c.state for c in journal.calls(result.invocation_id)}
    assert states["d1"] == "compensated" and states["c1"] != "compensated", states
    again = toolfleet_on(["sagas", "--failed"], private_redis.url, journal_file, timeout_s=90, env=CLI_ENV)
    assert "No failed compensations." in again.stdout, again.stdout


# -- 4. a compensation that outlives its deadline: awaited, never recorded failed while it runs -----


@pytest.mark.timeout(150)  # waits out the compensation's 30 s deadline
def test_a_compensation_still_running_at_its_deadline_is_awaited_and_recorded_as_it_ended(
    rig: Rig,
) -> None:
    private_redis, start_worker, counts, journal, ns = rig
    # Given: a credit whose undo takes longer than the compensation's deadline (30.5 s: 30 s for one
    # attempt, no retries, plus the longest backoff)
    start_worker(blip.POOL, blip.FAIL_POOL)
    executor = blip_executor(private_redis, TOOLFLEET_COMPENSATION_RETRIES="0")
    model = credit_then_fail(ns, amount=7, undo_s=33.0)

    # When: the payment fails, so the saga undoes the credit
    try:
        result = Background(
            lambda: saga_service(model, executor, journal, [blip.bank]).chat("credit, then pay")
        ).join(120)
    finally:
        executor.close()

    # Then: the undo ran once, after the deadline, and the journal says the compensation succeeded
    # rather than failed: the saga waited for the worker that was undoing the call
    assert (number(counts, ns, "undo_starts"), number(counts, ns, "undos")) == (1, 1), side_effects(
        counts, ns
    )
    assert number(counts, ns, "balance") == 0
    assert_rolled_back(result, journal)


def test_a_queued_compensation_its_orchestrator_abandoned_does_not_run(
    private_redis: PrivateRedis, start_worker: Callable[..., WorkerProcess], counts: redis.Redis, ns: str
) -> None:
    # Given: a compensation its orchestrator recorded failed and marked abandoned, and a copy of it
    # that a worker takes from the queue afterwards
    start_worker(blip.POOL, blip.FAIL_POOL)
    key = f"{uuid.uuid4()}:c1"
    broker = redis.Redis.from_url(private_redis.url)
    broker.set(f"toolfleet:compensation:{key}", "abandoned")
    credit = call("c1", "blip_credit", ns=ns, amount=3)
    publisher = make_publisher(settings_for(private_redis.url, heartbeat_ttl_s=6.0, **BACKOFF))
    task_id = compensation_task_id(key)

    # When
    try:
        publisher.send_task(
            COMPENSATION_PREFIX + "blip_credit",
            kwargs={
                "execution": ToolExecution(request=credit, result="Credited 3").to_json(),
                "invocation": Invocation().to_json(),
                "idempotency_key": key,
                "deadline": time.time() + 30,
            },
            task_id=task_id,
            queue=blip.POOL,
        )

        def final_state() -> dict[str, Any]:
            meta: dict[str, Any] = json.loads(broker.get(f"celery-task-meta-{task_id}") or b"{}")
            return meta if meta.get("status") in ("SUCCESS", "FAILURE") else {}

        assert wait_until(lambda: bool(final_state()), 30), "the copy never ended"
        meta = final_state()
    finally:
        publisher.close()
        broker.close()

    # Then: the copy refused to undo the call, saying why, and the mark stays for `toolfleet recover`
    assert number(counts, ns, "undo_starts") == 0, side_effects(counts, ns)
    assert meta["status"] == "FAILURE", meta
    assert "abandoned at its deadline by its orchestrator" in json.dumps(meta["result"]), meta
