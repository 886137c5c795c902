"""Fault injection: pools without workers, and workers that die.

How these tests run: tests/integration/redis_faults/__init__.py.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from orchestrator import CeleryExecutor
from orchestrator.executors.celery import CallEvent
from tests._background import Background
from tests._waiting import wait_until
from tests.integration import redis_fault_tools as rft
from tests.integration.redis_fault_tools import DECLINED, tally
from tests.integration.redis_faults._faults import SHORT_TTL_S, count, start_worker, timed_calls
from tests.integration.scripts import call
from workers import OutcomeKind
from workers.settings import Settings

pytestmark = pytest.mark.integration


# -- 3. pools without workers ----------------------------------------------------------------------


def test_a_pool_without_workers_fails_fast(settings: Settings) -> None:
    # Given: a tool whose pool no worker serves
    executor = CeleryExecutor(settings=settings, tools=[rft.tools])
    try:
        # When: it is called once, then 10 times at once
        started = time.monotonic()
        [single] = timed_calls(executor, [call("n", "rf_nobody")])
        single_s = single.at - started
        started = time.monotonic()
        batch = timed_calls(executor, [call(f"n{i}", "rf_nobody") for i in range(10)])
        batch_s = max(r.at for r in batch) - started
    finally:
        executor.close()

    # Then: each ends with NO_WORKER at once, naming the pool, long before the 30 s deadline
    print(f"\nno worker: one call {single_s * 1000:.1f} ms, 10 calls {batch_s * 1000:.1f} ms")
    for timed in [single, *batch]:
        assert (timed.outcome.kind, timed.outcome.text) == (
            OutcomeKind.NO_WORKER,
            "No live worker serves pool 'rf-nobody' of tool 'rf_nobody'",
        )
    assert single_s < 0.1
    assert batch_s < 0.1


def test_calls_on_a_pool_whose_only_worker_dies_end_within_the_heartbeat_ttl(
    redis_url: str, settings: Settings, logs: Path, ledger: Path
) -> None:
    # Given: the only worker of a pool (1 thread, heartbeat TTL 2 s) runs one 20 s call; 3 more queue
    worker = start_worker(redis_url, logs, rft.DOOMED_POOL, "threads", 1, SHORT_TTL_S)
    events: list[CallEvent] = []
    executor = CeleryExecutor(settings=settings, tools=[rft.tools], on_call=events.append)
    try:
        worker.wait_ready(timeout_s=60)
        calls = [call(f"d{i}", "rf_doomed", ledger=str(ledger), key=f"d{i}", seconds=20) for i in range(4)]
        batch = Background(lambda: timed_calls(executor, calls))
        assert wait_until(lambda: count(ledger, "run") == 1, 15), tally(ledger, "run")
        # ... and the running call's STARTED state has reached the orchestrator
        assert wait_until(lambda: any(e.state == "started" for e in events), 15), events

        # When: the worker is SIGKILLed
        worker.kill()
        killed_at = time.monotonic()
        results = batch.join(40)
    finally:
        executor.close()
        worker.stop()

    # Then: the running call ends as worker lost, the queued ones as no worker, all within the
    # heartbeat TTL plus a few seconds, not at their 30 s deadline
    kinds = Counter(r.outcome.kind for r in results)
    latest_s = max(r.at for r in results) - killed_at
    print(
        f"\nonly worker killed: {dict(kinds)}, the last {latest_s:.2f} s after the kill (TTL {SHORT_TTL_S} s)"
    )
    assert kinds == {OutcomeKind.WORKER_LOST: 1, OutcomeKind.NO_WORKER: 3}
    [lost] = [r.outcome for r in results if r.outcome.kind is OutcomeKind.WORKER_LOST]
    assert lost.text == f"Tool 'rf_doomed' lost its worker {worker.hostname} before finishing"
    assert latest_s < SHORT_TTL_S + 3
    # ... and the queued calls never ran
    assert count(ledger, "run") == 1


def test_a_tool_error_on_a_prefork_pool_leaves_its_worker_serving(
    redis_url: str, settings: Settings, logs: Path, ledger: Path
) -> None:
    # Given: a prefork worker (one child) serving a tool that always declines, and one that answers.
    # (Until e410242 the pool's parent could not unpickle the failure class its child had created:
    # the first decline stopped the worker, the next call hung to its deadline.)
    worker = start_worker(redis_url, logs, rft.PREFORK_POOL, "prefork", 1, SHORT_TTL_S)
    executor = CeleryExecutor(settings=settings, tools=[rft.tools])
    try:
        worker.wait_ready(timeout_s=60)

        # When: the declining tool is called twice, then the other one
        results = [
            timed_calls(executor, [call(key, name, ledger=str(ledger), key=key)])[0]
            for name, key in (("rf_refuse", "r1"), ("rf_refuse", "r2"), ("rf_fine", "f1"))
        ]
        alive = worker.process.poll() is None and executor.catalog.worker_alive(worker.hostname)
    finally:
        executor.close()
        worker.stop(timeout_s=5)

    # Then: each decline is reported at once, and the worker goes on serving
    assert [(r.outcome.kind, r.outcome.text) for r in results] == [
        (OutcomeKind.EXECUTION_ERROR, DECLINED),
        (OutcomeKind.EXECUTION_ERROR, DECLINED),
        (OutcomeKind.SUCCESS, "fine f1"),
    ]
    assert alive
