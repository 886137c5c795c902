"""`GET /metrics` of `toolfleet serve`: after known calls, the replica that ran them counts exactly
them — tool calls by tool, pool and outcome, the compensation, the invocation, the model calls —
without asking for the API key."""

from __future__ import annotations

import httpx
import pytest
import sqlalchemy as sa

from orchestrator.telemetry import pending_approvals
from tests.integration.serve.replicas import AGENT, API_KEY, Replica
from tests.metrics_scrape import scrape, total

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
    assert total(samples, "toolfleet_invocations_total", finish_reason="STOP") == 1
    assert total(samples, "toolfleet_model_call_duration_seconds_count") == 3
    # and: the approvals waiting are the journal's (none while the database has no approvals table)
    engine = sa.create_engine(database_url)
    try:
        assert total(samples, "toolfleet_approvals_waiting") == pending_approvals(engine)
    finally:
        engine.dispose()
    assert ("toolfleet_approvals_waiting", frozenset()) in samples
    # and: the other replica ran none of them
    assert total(scrape(f"{other.root}/metrics"), calls) == 0
