"""A fleet on a Redis behind Sentinel: broker, result backend, catalog and the service's own keys all
reach the master the sentinel names, and carry on when the master dies and its replica is promoted.

The group is real (`sentinel_group`: master, replica, sentinel, SIGKILL of the master); the worker is a
real process and nothing is restarted after the failover.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from orchestrator.executors.celery import CeleryExecutor
from tests.integration.sentinel_group import SentinelGroup, sentinel_group
from tests.integration.worker_processes import tool_worker
from workers import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.errors import RedisUnavailableError
from workers.redis_client import connect
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

TOOLS = "tests.integration.tools"
CARRY_ON_S = 45.0  # failover, then every client finding the new master, with room for a slow machine


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    with sentinel_group(tmp_path_factory.mktemp("sentinel")) as running:
        yield running


@pytest.fixture(scope="module")
def worker(group: SentinelGroup, worker_logs: Path) -> Iterator[WorkerProcess]:
    process = tool_worker(
        group.url,
        ["alpha"],
        [TOOLS],
        worker_logs / "sentinel-alpha.log",
        "sentinel-alpha@integration",
        env={"TOOLFLEET_BROKER_URL": group.url, "TOOLFLEET_RESULT_BACKEND": group.url},
    )
    with process.running(timeout_s=60) as running:
        yield running


def _echo(executor: CeleryExecutor, text: str) -> ToolOutcome:
    return asyncio.run(executor.execute(ToolExecutionRequest(text, "echo", f'{{"text": "{text}"}}')))


def _echo_through_failover(executor: CeleryExecutor, text: str) -> ToolOutcome | RedisUnavailableError:
    """The outcome, or the error a call meets while the sentinel is still finishing the failover (it
    names the new master before it clears its own failover state, and answers "no master" meanwhile)."""
    try:
        return _echo(executor, text)
    except RedisUnavailableError as exc:
        return exc


def _succeeded(outcome: ToolOutcome | RedisUnavailableError) -> bool:
    return isinstance(outcome, ToolOutcome) and outcome.kind is OutcomeKind.SUCCESS


def test_a_sentinel_url_reaches_the_master_it_names(group: SentinelGroup) -> None:
    # given: a client of the group's URL, and a direct client of each server
    client = connect(group.url, socket_timeout=2)
    master = redis.Redis(port=group.master_port)
    replica = redis.Redis(port=group.replica_port)
    try:
        # when: it writes
        client.set("toolfleet:test:where", "here")
        # then: the master has it, and the replica, being one, refuses writes of its own
        assert master.get("toolfleet:test:where") == b"here"
        with pytest.raises(redis.ReadOnlyError):
            replica.set("toolfleet:test:where", "there")
    finally:
        for each in (client, master, replica):
            each.close()


def test_the_fleet_carries_on_when_the_master_dies_and_its_replica_is_promoted(
    group: SentinelGroup, worker: WorkerProcess
) -> None:
    # given: an executor and a worker whose broker, result backend and catalog are the group
    settings = Settings.from_env(
        {
            "TOOLFLEET_REDIS_URL": group.url,
            "TOOLFLEET_HEARTBEAT_TTL_S": "2",
            "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "0.2",
        }
    )
    executor = CeleryExecutor(settings=settings)
    try:
        before = _echo(executor, "before")
        assert (before.kind, before.text, before.worker) == (
            OutcomeKind.SUCCESS,
            "before",
            "sentinel-alpha@integration",
        )

        # when: the master is SIGKILLed and the sentinel promotes the replica
        took_s = group.fail_over()
        assert group.master_port_now() == group.replica_port

        # then: without restarting anything, calls succeed again on the same worker, through the
        # new master (the old one is gone for good)
        started = time.monotonic()
        after = _echo_through_failover(executor, "after-0")
        attempts = 1
        while not _succeeded(after) and time.monotonic() - started < CARRY_ON_S:
            time.sleep(0.1)
            after = _echo_through_failover(executor, f"after-{attempts}")
            attempts += 1
        assert isinstance(after, ToolOutcome), (after, group.tail("sentinel"))
        assert after.kind is OutcomeKind.SUCCESS, (after, group.tail("sentinel"))
        assert after.worker == "sentinel-alpha@integration"
        promoted = redis.Redis(port=group.replica_port)
        try:
            assert promoted.info("replication")["role"] == "master"
            assert promoted.exists(f"celery-task-meta-{after.task_id}")
        finally:
            promoted.close()
        print(
            f"failover {took_s:.2f} s; first success {time.monotonic() - started:.2f} s later, "
            f"{attempts} call(s)"
        )
        # and: every later call succeeds at once
        for n in range(5):
            assert _echo(executor, f"later-{n}").kind is OutcomeKind.SUCCESS
        assert worker.process.poll() is None
    finally:
        executor.close()
