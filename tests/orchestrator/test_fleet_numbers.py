"""The fleet page's numbers from a journal of known calls, on SQLite (percentiles in Python) and on
PostgreSQL (percentiles in SQL): the same exact counts, rates, percentiles and buckets on both; a
tenant's own calls only; the window's edges; and the bounded read of SQLite, said when it bounds."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.saga.journal import Journal
from orchestrator.server.ui.fleet_data import WINDOWS, Fleet, Numbers, fleet, percentile
from tests.orchestrator._databases import KINDS, fresh_database
from tests.orchestrator._fleet_calls import Call, write_calls

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)  # the 1 h window is [11:00, 12:00), in 2-minute buckets
HOUR = WINDOWS["1h"]


def at(hour: int, minute: int, second: float = 0) -> datetime:
    return datetime(2025, 6, 1, hour, minute, tzinfo=UTC) + timedelta(seconds=second)


CALLS = [
    # acme's, in the window
    Call("acme", "alpha", "book", "success", at(11, 10), 100, queued_ms=10),  # a bucket's first instant
    Call("acme", "alpha", "book", "success", at(11, 10, 30), 200, queued_ms=20),
    Call("acme", "alpha", "book", "execution_error", at(11, 50), 300, queued_ms=30),
    Call("acme", "alpha", "book", "timed_out", at(11, 59, 59), 400),  # its queue wait unknown
    Call("acme", "alpha", "pay", "success", at(11, 0), 1000, queued_ms=5),  # the window's first instant
    # globex's, in the window
    Call("globex", "alpha", "book", "success", at(11, 20), 5000, queued_ms=999),
    Call("globex", "beta", "crawl", "success", at(11, 30), 50),
    Call("globex", "beta", "crawl", "worker_lost", at(11, 31, 59.999), 150),
    # outside the window, or never ended
    Call("acme", "alpha", "book", "success", at(10, 59, 59.999), 7),
    Call("acme", "alpha", "book", "success", NOW, 7),  # the window ends before now
    Call("acme", "alpha", "book", "success", at(12, 0, 1), 7),
    Call("acme", "alpha", "book", None, at(11, 30), 7),  # in flight
    Call("acme", "gamma", "idle", None, at(11, 30), 7),  # a pool with nothing ended
]


@pytest.fixture(params=KINDS)
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    with fresh_database(request.param, tmp_path) as url:
        journal = Journal(url, keys=())
        try:
            write_calls(journal, CALLS)
            yield journal
        finally:
            journal.engine.dispose()


def _by_tool(result: Fleet) -> dict[tuple[str, str], Numbers]:
    return {(pool.name, tool.name): tool.numbers for pool in result.pools for tool in pool.tools}


def test_an_operator_sees_every_tenants_calls_with_exact_rates_and_percentiles(journal: Journal) -> None:
    # when
    result = fleet(journal, HOUR, None, now=NOW)

    # then: per tool, of the 8 calls that ended in the window
    assert _by_tool(result) == {
        ("alpha", "book"): Numbers(5, 2, 1, 4, 300.0, 4080.0, 25.0, 853.65),
        ("alpha", "pay"): Numbers(1, 0, 0, 1, 1000.0, 1000.0, 5.0, 5.0),
        ("beta", "crawl"): Numbers(2, 1, 0, 0, 100.0, 145.0, None, None),
    }
    # and: per pool, over all its tools' calls (not from the tools' percentiles)
    assert {pool.name: pool.numbers for pool in result.pools} == {
        "alpha": Numbers(6, 2, 1, 5, 350.0, 4000.0, 20.0, 805.2),
        "beta": Numbers(2, 1, 0, 0, 100.0, 145.0, None, None),
    }
    alpha = result.pools[0].numbers
    assert (alpha.failure_rate, alpha.timeout_rate) == (2 / 6, 1 / 6)
    assert (result.calls, result.sampled) == (8, None)
    assert (result.since, result.until) == (at(11, 0), NOW)


def test_each_bucket_holds_the_calls_that_ended_in_it(journal: Journal) -> None:
    # when
    result = fleet(journal, HOUR, None, now=NOW)

    # then: 30 buckets of 2 minutes from 11:00; a call at a bucket's edge is the later bucket's
    alpha, beta = result.pools
    assert [b.start for b in alpha.buckets] == [at(11, 0) + timedelta(minutes=2 * i) for i in range(30)]
    assert {i: (b.calls, b.failed, b.latency_p95_ms) for i, b in enumerate(alpha.buckets) if b.calls} == {
        0: (1, 0, 1000.0),
        5: (2, 0, 195.0),
        10: (1, 0, 5000.0),
        25: (1, 1, 300.0),
        29: (1, 1, 400.0),
    }
    assert {i: (b.calls, b.failed, b.latency_p95_ms) for i, b in enumerate(beta.buckets) if b.calls} == {
        15: (2, 1, 145.0)
    }
    assert all(b.latency_p95_ms is None for b in alpha.buckets if not b.calls)


def test_a_tenant_sees_only_its_own_calls(journal: Journal) -> None:
    # when
    result = fleet(journal, HOUR, "acme", now=NOW)

    # then: globex's book call and its whole pool beta are left out
    assert _by_tool(result) == {
        ("alpha", "book"): Numbers(4, 2, 1, 3, 250.0, 385.0, 20.0, 29.0),
        ("alpha", "pay"): Numbers(1, 0, 0, 1, 1000.0, 1000.0, 5.0, 5.0),
    }
    assert [(p.name, p.numbers) for p in result.pools] == [
        ("alpha", Numbers(5, 2, 1, 4, 300.0, 880.0, 15.0, 28.5))
    ]
    assert [i for i, b in enumerate(result.pools[0].buckets) if b.calls] == [0, 5, 25, 29]


@pytest.mark.parametrize(("name", "buckets", "calls"), [("15m", 15, 2), ("24h", 48, 13 - 4)])
def test_the_other_windows(journal: Journal, name: str, buckets: int, calls: int) -> None:
    # when: the last 15 minutes (two calls ended there), the last 24 hours (all ended but the future one)
    result = fleet(journal, WINDOWS[name], None, now=NOW)

    # then
    assert result.calls == calls
    assert {len(pool.buckets) for pool in result.pools} == {buckets}
    assert sum(b.calls for pool in result.pools for b in pool.buckets) == calls


def test_a_window_without_calls_has_no_pools(journal: Journal) -> None:
    result = fleet(journal, HOUR, None, now=NOW + timedelta(days=2))
    assert (result.pools, result.calls) == ([], 0)
    assert fleet(journal, HOUR, "initech", now=NOW).pools == []


def test_percentiles_are_bounded_on_sqlite_and_the_bound_is_said(tmp_path: Path) -> None:
    # given: SQLite, whose percentiles are computed in Python, over at most 3 calls
    with fresh_database("sqlite", tmp_path) as url:
        journal = Journal(url, keys=())
        write_calls(journal, CALLS)

        # when
        result = fleet(journal, HOUR, None, now=NOW, max_rows=3)

    # then: counts are over every call; percentiles over the latest 3 (book 300 and 400, crawl 150)
    assert (result.calls, result.sampled) == (8, 3)
    numbers = _by_tool(result)
    assert numbers["alpha", "book"] == Numbers(5, 2, 1, 4, 350.0, 395.0, 30.0, 30.0)
    assert numbers["alpha", "pay"] == Numbers(1, 0, 0, 1, None, None, None, None)
    assert numbers["beta", "crawl"] == Numbers(2, 1, 0, 0, 150.0, 150.0, None, None)


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [([], 0.5, None), ([7.0], 0.95, 7.0), ([1.0, 2.0], 0.5, 1.5), ([4.0, 1.0, 3.0, 2.0], 0.95, 3.85)],
)
def test_percentile_interpolates_between_ranks_as_postgresql_does(
    values: list[float], fraction: float, expected: float | None
) -> None:
    assert percentile(values, fraction) == pytest.approx(expected)
