"""Fault injection: Redis restarted, or down for long, while calls run.

How these tests run: tests/integration/redis_faults/__init__.py.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import redis

from orchestrator import AiMessage, AiService, CeleryExecutor, ScriptedChatModel
from orchestrator.executors.celery import CallEvent
from orchestrator.saga import rolled_back_text
from orchestrator.saga.journal import Journal
from tests._background import Background
from tests._waiting import wait_until
from tests.integration import redis_fault_tools as rft
from tests.integration.private_redis import PrivateRedis, settings_for
from tests.integration.redis_fault_tools import DECLINED, finished_at, tally
from tests.integration.redis_faults._faults import (
    FINAL_STATES,
    RECOVERY_BOUND_S,
    SHORT_TTL_S,
    CollectorRetries,
    Outage,
    count,
    once_each,
    outage,
    outage_ending_before_a_reconnect,
    start_worker,
    timed_calls,
)
from tests.integration.scripts import call
from workers import OutcomeKind
from workers.priorities import redis_lists
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration


# -- 1. Redis restarted while calls run ------------------------------------------------------------


def test_a_batch_in_flight_survives_a_redis_restart_with_every_result(
    up: PrivateRedis, private_executor: CeleryExecutor, ledger: Path
) -> None:
    # Given: 20 calls of a tool that sleeps 1.5 s (deadline 20 s) on 32 threads: all run at once
    calls = [call(f"c{i}", "rf_sleep", ledger=str(ledger), key=f"k{i}", seconds=1.5) for i in range(20)]
    dispatched = time.monotonic()
    batch = Background(lambda: timed_calls(private_executor, calls))

    # When: once all 20 run, Redis is stopped (SIGTERM) and kept down until every tool has finished
    # (so every result is written while Redis is down), at least 1 s; then started on the same port
    # and data
    assert wait_until(lambda: count(ledger, "run") == 20, 15), tally(ledger, "run")
    fault = outage(up, min_down_s=1.0, until=lambda: count(ledger, "done") == 20)
    results = batch.join(30)

    # Then: every call ends with its own result: none lost, none failed, none run twice
    assert [(r.outcome.kind, r.outcome.text) for r in results] == [
        (OutcomeKind.SUCCESS, f"slept k{i}") for i in range(20)
    ]
    keys = [f"k{i}" for i in range(20)]
    assert tally(ledger, "run") == tally(ledger, "done") == once_each(*keys)

    # ... collected within seconds of Redis answering again, long before the 20 s deadline
    recovery_s = max(r.at for r in results) - fault.up_at
    print(
        f"\nrestart, results written while down: down {fault.down_s:.2f} s; all 20 results "
        f"{recovery_s:.2f} s after Redis answered (first {min(r.at for r in results) - fault.up_at:.2f} s)"
    )
    assert recovery_s < RECOVERY_BOUND_S
    assert max(r.at for r in results) - dispatched < 20

    # ... and the pool serves the next call as before
    [after] = timed_calls(
        private_executor, [call("after", "rf_sleep", ledger=str(ledger), key="after", seconds=0)]
    )
    assert (after.outcome.kind, after.outcome.text) == (OutcomeKind.SUCCESS, "slept after")


def test_calls_queued_behind_busy_workers_survive_a_redis_restart(
    up: PrivateRedis, logs: Path, ledger: Path
) -> None:
    # Given: 6 calls of 1 s on a pool of 2 threads: 2 run, 4 wait in the queue (kept in the AOF)
    worker = start_worker(up.url, logs, rft.NARROW_POOL, "threads", 2, 6.0)
    executor = CeleryExecutor(settings=settings_for(up.url), tools=[rft.tools])
    try:
        worker.wait_ready(timeout_s=60)
        calls = [call(f"q{i}", "rf_queued", ledger=str(ledger), key=f"q{i}", seconds=1.0) for i in range(6)]
        batch = Background(lambda: timed_calls(executor, calls))

        # When: Redis is restarted while the first 2 run, once every call is published (started, or in
        # the broker: queued, or reserved by the worker)
        with redis.Redis.from_url(up.url) as broker:

            def published() -> int:
                return count(ledger, "run") + _queued(broker, rft.NARROW_POOL) + int(broker.hlen("unacked"))

            assert wait_until(lambda: count(ledger, "run") >= 2 and published() == len(calls), 15), (
                tally(ledger, "run"),
                published(),
            )
        fault = outage(up, min_down_s=1.0)
        results = batch.join(30)
    finally:
        executor.close()
        worker.stop()

    # Then: the queued calls ran after the restart, each once, and every call has its result
    assert [(r.outcome.kind, r.outcome.text) for r in results] == [
        (OutcomeKind.SUCCESS, f"slept q{i}") for i in range(6)
    ]
    assert tally(ledger, "run") == tally(ledger, "done") == once_each(*(f"q{i}" for i in range(6)))
    last_s = max(r.at for r in results) - fault.up_at
    print(f"\nrestart with 4 calls queued: down {fault.down_s:.2f} s; last result {last_s:.2f} s after")


@pytest.mark.parametrize(
    "when",
    [
        "back_before_they_finish",
        pytest.param("down_when_they_finish"),
    ],
)
def test_a_saga_in_flight_survives_a_redis_restart(
    when: str, up: PrivateRedis, rfault_worker: WorkerProcess, ledger: Path, tmp_path: Path
) -> None:
    # Given: an invocation (compensation on, a journal) whose first response books 20 times (each
    # booking 1.5-2 s, compensable) and whose second calls a tool that declines
    events: list[CallEvent] = []
    executor = CeleryExecutor(settings=settings_for(up.url), tools=[rft.tools], on_call=events.append)
    journal = Journal(f"sqlite:///{tmp_path / 'journal.db'}")
    seconds = 2.0 if when == "back_before_they_finish" else 1.5
    bookings = [call(f"b{i}", "rf_book", ledger=str(ledger), key=f"b{i}", seconds=seconds) for i in range(20)]
    decline = call("d", "rf_decline", ledger=str(ledger), key="d")
    model = ScriptedChatModel(
        [AiMessage(tool_execution_requests=bookings), AiMessage(tool_execution_requests=[decline]), "done"]
    )
    service = AiService(
        chat_model=model,
        tools=[rft.tools],
        executor=executor,
        compensate_on_tool_errors=True,
        journal=journal,
    )
    offset = time.time() - time.monotonic()

    # When: Redis is restarted while the 20 bookings run: back ~0.6 s later, before they finish; or
    # kept down until every booking has finished
    chat = Background(lambda: service.chat("book 20 things, then the one that is declined"))
    try:
        assert wait_until(lambda: count(ledger, "run") == 20, 15), tally(ledger, "run")
        if when == "back_before_they_finish":
            fault = outage(up, min_down_s=0.6)
            assert count(ledger, "done") == 0, "a booking finished while Redis was down: outage too long"
        else:
            fault = outage(up, min_down_s=1.0, until=lambda: count(ledger, "done") == 20)
        result = chat.join(60)
    finally:
        executor.close()

    # Then: the invocation answers; every booking succeeded and was rolled back after the decline
    keys = [f"b{i}" for i in range(20)]
    assert result.content == "done"
    assert [(e.request.id, e.status, e.result) for e in result.tool_executions] == [
        *((key, "rolled_back", rolled_back_text("rf_book", "rf_decline")) for key in keys),
        ("d", "execution_error", DECLINED),
    ]

    # ... the journal holds the 21 calls and the 20 compensations, all succeeded
    record = journal.invocation(result.invocation_id or "")
    assert record is not None and record.state == "succeeded"
    states = {c.call_id: (c.state, c.outcome) for c in journal.calls(record.id)}
    assert states == {**dict.fromkeys(keys, ("compensated", "success")), "d": ("failed", "execution_error")}
    compensations = journal.compensations(record.id)
    assert [(c.state, c.attempts) for c in compensations] == [("succeeded", 1)] * 20
    journal.engine.dispose()

    # ... and the tools' own ledger agrees: each booking made once and undone once, nothing made and
    # left standing, nothing undone twice
    assert tally(ledger, "run") == once_each(*keys, "d")
    assert tally(ledger, "done") == tally(ledger, "undo") == once_each(*keys)

    # ... the bookings' results were collected within seconds of Redis (or the tool) being back
    collected = [e.at for e in events if e.task_name == "tool.rf_book" and e.state in FINAL_STATES]
    assert len(collected) == 20
    ready = max(fault.up_at, max(finished_at(ledger, "done").values()) - offset)
    recovery_s = max(collected) - ready
    print(
        f"\nsaga through a restart ({when}): down {fault.down_s:.2f} s; last booking collected "
        f"{recovery_s:.2f} s after Redis and the tools were both back"
    )
    assert recovery_s < RECOVERY_BOUND_S


def test_an_outage_longer_than_the_heartbeat_ttl_does_not_declare_running_calls_lost(
    up: PrivateRedis, logs: Path, ledger: Path
) -> None:
    # Given: 10 calls of 20 s (deadline 40 s) on a worker whose heartbeat expires after 2 s
    worker = start_worker(up.url, logs, rft.HEARTBEAT_POOL, "threads", 16, SHORT_TTL_S)
    retries = CollectorRetries()
    collector_log = logging.getLogger("orchestrator.executors._collector")
    collector_log.addHandler(retries)
    events: list[CallEvent] = []
    executor = CeleryExecutor(settings=settings_for(up.url), tools=[rft.tools], on_call=events.append)
    outages: list[Outage] = []
    try:
        worker.wait_ready(timeout_s=60)
        calls = [call(f"h{i}", "rf_hb_sleep", ledger=str(ledger), key=f"h{i}", seconds=20) for i in range(10)]
        batch = Background(lambda: timed_calls(executor, calls))
        assert wait_until(lambda: count(ledger, "run") == 10, 15), tally(ledger, "run")

        # When: Redis is down for 2.3 s (longer than the heartbeat TTL), and back just before the
        # orchestrator reconnects; up to 3 times while the calls run
        for _ in range(3):
            outages.append(outage_ending_before_a_reconnect(up, retries, min_down_s=SHORT_TTL_S + 0.3))
            if wait_until(lambda: any(e.state in FINAL_STATES for e in events), 1.0):
                break
        results = batch.join(40)
    finally:
        collector_log.removeHandler(retries)
        executor.close()
        worker.stop(timeout_s=2)

    # Then: every call ends with its result: its worker never died
    lost = [r.outcome.text for r in results if r.outcome.kind is not OutcomeKind.SUCCESS]
    print(
        f"\noutages longer than the heartbeat TTL: {len(outages)} "
        f"({', '.join(f'{o.down_s:.2f} s' for o in outages)}); {len(lost)} of 10 calls not collected"
    )
    assert lost == []
    assert [r.outcome.text for r in results] == [f"slept h{i}" for i in range(10)]
    assert tally(ledger, "run") == once_each(*(f"h{i}" for i in range(10)))


def test_a_worker_rides_out_a_redis_outage_of_15_s(up: PrivateRedis, logs: Path, ledger: Path) -> None:
    # Given: a worker serving a pool on the private Redis
    worker = start_worker(up.url, logs, rft.NARROW_POOL, "threads", 2, 6.0)
    executor = CeleryExecutor(settings=settings_for(up.url), tools=[rft.tools])
    try:
        worker.wait_ready(timeout_s=60)

        # When: Redis is down for 15 s (the test stops waiting early if the worker exits)
        began = time.monotonic()
        fault = outage(
            up,
            min_down_s=0,
            until=lambda: worker.process.poll() is not None or time.monotonic() - began >= 15,
            timeout_s=30,
        )
        exited = worker.process.poll()

        # Then: the worker is still running, back in the catalog, and serves the next call
        print(f"\n15 s outage: worker {'exited with ' + str(exited) if exited is not None else 'alive'}")
        assert exited is None, f"the worker exited with {exited} after {fault.down_s:.1f} s of outage"
        worker.wait_ready(timeout_s=15)
        [after] = timed_calls(executor, [call("a", "rf_queued", ledger=str(ledger), key="a", seconds=0)])
        assert (after.outcome.kind, after.outcome.text) == (OutcomeKind.SUCCESS, "slept a")
    finally:
        executor.close()
        worker.stop()


def _queued(broker: redis.Redis, pool: str) -> int:
    """The calls waiting in `pool`'s queue, at any priority."""
    return sum(int(broker.llen(queue)) for queue in redis_lists(pool))
