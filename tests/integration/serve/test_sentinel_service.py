"""`toolfleet serve` on a Redis behind Sentinel: its invocations' event streams, cancel keys and leases,
the broker and the results all live in the group, and the service carries on when the master is
SIGKILLed and its replica promoted, with nothing restarted."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.fake_openai import FakeOpenAi
from tests.integration.sentinel_group import SentinelGroup, sentinel_group
from tests.integration.serve.replicas import AGENTS_MODULE, Replica, replica_env, start_replica
from tests.integration.serve.test_invocations import AUTH, _read_all
from tests.integration.worker_processes import tool_worker

pytestmark = pytest.mark.integration

CARRY_ON_S = 45.0


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    with sentinel_group(tmp_path_factory.mktemp("sentinel")) as running:
        yield running


@pytest.fixture(scope="module")
def service(
    group: SentinelGroup, database_url: str, upstream: FakeOpenAi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    logs = tmp_path_factory.mktemp("sentinel-service")
    worker = tool_worker(
        group.url,
        ["serve"],
        [AGENTS_MODULE],
        logs / "worker.log",
        f"sentinel-serve-{uuid.uuid4().hex[:6]}@integration",
        env={"TOOLFLEET_BROKER_URL": group.url, "TOOLFLEET_RESULT_BACKEND": group.url},
    )
    with worker.running(timeout_s=60):
        replica = start_replica(replica_env(group.url, database_url, upstream.base_url), logs / "serve.log")
        try:
            yield replica
        finally:
            replica.stop()


def _added(replica: Replica, a: int, b: int) -> str | None:
    """The answer of an invocation adding `a` and `b`, or None when the service could not take or
    finish it (the group between masters; while the worker's heartbeats have not reached the new
    master yet, the answer tells of no live worker instead)."""
    try:
        response = httpx.post(
            f"{replica.base_url}/agents/assistant/invocations",
            json={"input": f"add {a} {b}"},
            headers=AUTH,
            timeout=30,
        )
        if response.status_code != 202:
            return None
        events = _read_all(replica, response.json()["id"])
    except (httpx.HTTPError, AssertionError):
        return None
    last = events[-1][1]
    return str(last["content"]).strip() if last["type"] == "invocation.succeeded" else None


def test_the_service_carries_on_through_a_failover(group: SentinelGroup, service: Replica) -> None:
    # given: a replica whose every Redis use is the group, answering
    assert _added(service, 2, 3) == "done: 5"

    # when: the master is SIGKILLed and the replica promoted
    group.fail_over()

    # then: the same replica, not restarted, answers again once the group has its new master
    started = time.monotonic()
    answer = _added(service, 4, 5)
    while answer != "done: 9" and time.monotonic() - started < CARRY_ON_S:
        time.sleep(0.2)
        answer = _added(service, 4, 5)
    assert answer == "done: 9", service.log()[-3000:]
    # and: its next invocations all succeed, and the service says it is ready
    assert [_added(service, n, 1) for n in range(3)] == [f"done: {n + 1}" for n in range(3)]
    assert httpx.get(f"{service.root}/readyz", timeout=10).status_code == 200
    assert service.process.poll() is None
