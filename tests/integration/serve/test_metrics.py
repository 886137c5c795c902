"""`GET /metrics` of `toolfleet serve`: after known calls, the replica that ran them counts exactly
them — tool calls by tool, pool and outcome, the compensation, the invocation, the model calls —
without asking for the API key."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from orchestrator import Journal
from orchestrator.saga.journal import WaitingCall
from tests.integration.serve.replicas import AGENT, API_KEY, Replica
from tests.metrics_scrape import scrape, total
from workers.calls.invocation import InvocationContext

pytestmark = pytest.mark.integration


def test_a_replicas_metrics_count_the_calls_of_its_invocations(
    replicas: tuple[Replica, Replica], database_url: str, ns: str
) -> None:
    # Given: a replica that has served nothing yet
    first, other = replicas
    before = scrape(f"{first.root}/metrics")
    assert total(before, "toolfleet_tool_calls_total") == 0

    # When: one completion runs two additions, then a booking and a refusal (which undoes the booking)
    response = httpx.post(
        f"{first.base_url}/chat/completions",
        json={
            "model": AGENT,
            "messages": [{"role": "user", "content": f"add 1 2 & add 3 4; book {ns} x & refuse {ns}"}],
        },
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text

    # Then: its page counts them exactly, with no key asked
    samples = scrape(f"{first.root}/metrics")
    calls = "toolfleet_tool_calls_total"
    assert total(samples, calls, tool="add", pool="serve", outcome="success") == 2
    assert total(samples, calls, tool="book", pool="serve", outcome="success") == 1
    assert total(samples, calls, tool="refuse", pool="serve", outcome="execution_error") == 1
    assert total(samples, calls) == 4
    assert total(samples, "toolfleet_tool_call_duration_seconds_count", tool="add") == 2
    assert total(samples, "toolfleet_tool_calls_in_flight") == 0
    assert total(samples, "toolfleet_compensations_total", tool="book", pool="serve", result="succeeded") == 1
    assert total(samples, "toolfleet_invocations_total", finish_reason="stop") == 1
    assert total(samples, "toolfleet_model_call_duration_seconds_count") == 3
    # and: the other replica ran none of them
    assert total(scrape(f"{other.root}/metrics"), calls) == 0


def test_the_approvals_waiting_are_counted_by_tool_and_pool(
    replicas: tuple[Replica, Replica], database_url: str
) -> None:
    # given: an invocation of the shared journal paused on two calls of a tool of its own, one on a
    # call of another
    tool, other = f"probe_{uuid.uuid4().hex[:8]}", f"probe_{uuid.uuid4().hex[:8]}"
    journal = Journal(database_url)
    context = InvocationContext(service_name="metrics-probe")
    invocation_id = str(context.invocation_id)
    journal.start_invocation(context, {})
    waiting = [
        WaitingCall("c1", tool, "probes", "{}"),
        WaitingCall("c2", tool, "probes", '{"n": 2}'),
        WaitingCall("c3", other, None, "{}"),
    ]
    journal.pause(
        invocation_id, {}, waiting, expires_at=datetime.now(UTC) + timedelta(hours=1), requested_by="t"
    )
    try:
        # when: a replica is scraped
        samples = scrape(f"{replicas[1].root}/metrics")
        # then: each tool's calls waiting are counted, under its pool (none: in-process)
        assert total(samples, "toolfleet_approvals_waiting", tool=tool, pool="probes") == 2
        assert total(samples, "toolfleet_approvals_waiting", tool=other, pool="") == 1
        # and: a decided call waits no more
        journal.decide(invocation_id, "c1", approve=True)
        assert total(scrape(f"{replicas[1].root}/metrics"), "toolfleet_approvals_waiting", tool=tool) == 1
    finally:
        journal.cancel_paused(invocation_id, "test")
        journal.engine.dispose()


def test_a_replica_exports_the_pools_queue_signals(replicas: tuple[Replica, Replica]) -> None:
    # given: the replicas' pool, served by a live worker that keeps its queue empty
    # then: each replica exports its depth and its oldest call's age, from its background sample
    for replica in replicas:
        samples = scrape(f"{replica.root}/metrics")
        assert total(samples, "toolfleet_pool_queue_depth", pool="serve") == 0
        assert total(samples, "toolfleet_pool_oldest_wait_seconds", pool="serve") == 0
        assert ("toolfleet_pool_queue_depth", frozenset({("pool", "serve")})) in samples, samples
