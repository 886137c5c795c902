"""The fleet page's numbers, read from the journal: per pool and, under it, per tool, the calls that
ended in a window (the last 15 minutes, hour or day): how many per minute, the share that failed and
that timed out (their journaled outcome), latency and queue-wait percentiles; and per pool the same
over the window's buckets, for its charts.

A call's latency is its time in the journal: from its intent (written just before it is published)
to its outcome (written as the orchestrator learns it). Its queue wait is what its worker reported:
from the publish to the worker starting it (`queued_ms`, unknown for some calls).

Counts are SQL on every database. Percentiles are PostgreSQL's `percentile_cont` when the journal is
there; elsewhere (SQLite) the same interpolation runs in Python over the window's latest `MAX_ROWS`
calls, and `Fleet.sampled` says so when the window holds more.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from orchestrator.saga._journal_tables import invocations, tool_calls
from orchestrator.saga.journal import Journal
from workers.protocol import OutcomeKind

__all__ = [
    "DEFAULT_WINDOW",
    "MAX_ROWS",
    "WINDOWS",
    "Bucket",
    "Fleet",
    "Numbers",
    "PoolNumbers",
    "Readings",
    "ToolNumbers",
    "Window",
    "fleet",
    "percentile",
    "read",
    "summarize",
]

MAX_ROWS = 20_000  # the calls a window's percentiles are computed over in Python (SQLite), latest first
FAILED = tuple(kind.value for kind in OutcomeKind if kind.is_error)  # timeouts are failures too
TIMED_OUT = OutcomeKind.TIMED_OUT.value
FRACTIONS = {"p50": 0.5, "p95": 0.95}
_GROUPINGS = {"tools": ("pool", "tool"), "pools": ("pool",), "buckets": ("pool", "bucket")}


@dataclass(frozen=True)
class Window:
    """A choice of the page: how far back it looks, and the width of its charts' buckets."""

    name: str
    seconds: int
    bucket_s: int
    label: str  # "the last hour"
    choice: str  # what its link says

    @property
    def buckets(self) -> int:
        return self.seconds // self.bucket_s

    @property
    def minutes(self) -> float:
        return self.seconds / 60


WINDOWS = {
    window.name: window
    for window in (
        Window("15m", 15 * 60, 60, "the last 15 minutes", "15 min"),
        Window("1h", 3600, 120, "the last hour", "1 h"),
        Window("24h", 24 * 3600, 1800, "the last 24 hours", "24 h"),
    )
}
DEFAULT_WINDOW = "1h"


@dataclass(frozen=True)
class Numbers:
    """The calls of a pool, a tool or a bucket: how many, how they ended, how long they took (ms)."""

    calls: int = 0
    failed: int = 0  # any outcome but success, timeouts included
    timed_out: int = 0
    queued: int = 0  # of which the queue wait is known
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    queued_p50_ms: float | None = None
    queued_p95_ms: float | None = None

    @property
    def failure_rate(self) -> float | None:
        return self.failed / self.calls if self.calls else None

    @property
    def timeout_rate(self) -> float | None:
        return self.timed_out / self.calls if self.calls else None


@dataclass(frozen=True)
class ToolNumbers:
    name: str
    numbers: Numbers


@dataclass(frozen=True)
class Bucket:
    """One slice of the window: when it starts, its calls (failed among them), their latency p95."""

    start: datetime
    calls: int = 0
    failed: int = 0
    latency_p95_ms: float | None = None


@dataclass(frozen=True)
class PoolNumbers:
    name: str  # "" for calls journaled without a pool
    numbers: Numbers
    tools: list[ToolNumbers]
    buckets: list[Bucket]


@dataclass(frozen=True)
class Fleet:
    """The page: its window, from when to when, each pool's numbers; `sampled`, when percentiles are
    over the latest calls only (that many of `calls`)."""

    window: Window
    since: datetime
    until: datetime
    pools: list[PoolNumbers]
    sampled: int | None = None

    @property
    def calls(self) -> int:
        return sum(pool.numbers.calls for pool in self.pools)


@dataclass(frozen=True)
class Readings:
    """What `read` found: each grouping's counts (and, on PostgreSQL, percentiles), and on other
    databases the latest calls' latencies and queue waits, for `summarize` to compute percentiles."""

    window: Window
    since: datetime
    until: datetime
    grouped: dict[str, list[dict[str, Any]]]
    samples: list[tuple[str, str, int, float, int | None]] | None = None


def fleet(
    journal: Journal,
    window: Window,
    tenant: str | None = None,
    *,
    now: datetime | None = None,
    max_rows: int = MAX_ROWS,
) -> Fleet:
    """The numbers of the calls that ended in `window` before `now` (of `tenant`'s invocations only,
    if given)."""
    return summarize(read(journal, window, tenant, now=now, max_rows=max_rows))


def read(
    journal: Journal,
    window: Window,
    tenant: str | None = None,
    *,
    now: datetime | None = None,
    max_rows: int = MAX_ROWS,
) -> Readings:
    """The journal's part of `fleet`: SQL only, so that it may run where blocking is not welcome."""
    until = now or datetime.now(UTC)
    since = until - timedelta(seconds=window.seconds)
    ended = _ended(window, since, until, tenant)
    in_sql = journal.backend == "postgresql"
    grouped = {
        name: [dict(row) for row in journal.select(_grouped(ended, keys, in_sql))]
        for name, keys in _GROUPINGS.items()
    }
    samples = None
    if not in_sql:
        columns = ("pool", "tool", "bucket", "started_at", "finished_at", "queued_ms")
        latest = sa.select(*(ended.c[name] for name in columns)).order_by(ended.c.finished_at.desc())
        samples = [_sample(row) for row in journal.select(latest.limit(max_rows))]
    return Readings(window, since, until, grouped, samples)


def summarize(readings: Readings) -> Fleet:
    """`Fleet` from `read`'s findings (percentiles computed here when the database did not)."""
    window = readings.window
    sampled = None if readings.samples is None else _percentiles_of(readings.samples)
    numbers = {
        name: {_key(row, keys): _numbers(row, keys, sampled, name) for row in readings.grouped[name]}
        for name, keys in _GROUPINGS.items()
    }
    pools = []
    for (pool,), totals in sorted(numbers["pools"].items()):
        tools = [ToolNumbers(str(k[1]), n) for k, n in sorted(numbers["tools"].items()) if k[0] == pool]
        buckets = []
        for index in range(window.buckets):
            start = readings.since + timedelta(seconds=index * window.bucket_s)
            got = numbers["buckets"].get((pool, index))
            buckets.append(Bucket(start, got.calls, got.failed, got.latency_p95_ms) if got else Bucket(start))
        pools.append(PoolNumbers(str(pool), totals, tools, buckets))
    result = Fleet(window, readings.since, readings.until, pools)
    if readings.samples is not None and len(readings.samples) < result.calls:
        result = Fleet(window, readings.since, readings.until, pools, sampled=len(readings.samples))
    return result


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """PostgreSQL's `percentile_cont(fraction)` of `values`: between the two closest ranks of the
    sorted values, interpolated linearly; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# -- SQL --------------------------------------------------------------------------------------------


def _ended(window: Window, since: datetime, until: datetime, tenant: str | None) -> sa.Subquery:
    """The calls whose outcome was journaled in [since, until) (a call's end is written with its
    outcome), each with its bucket's index."""
    finished = tool_calls.c.finished_at
    # each bucket's end compared as a datetime: exact on every database, whatever it stores them as
    edges = [since + timedelta(seconds=window.bucket_s * i) for i in range(1, window.buckets)]
    bucket = sa.case(*((finished < edge, index) for index, edge in enumerate(edges)), else_=len(edges))
    query = sa.select(
        sa.func.coalesce(tool_calls.c.pool, "").label("pool"),
        tool_calls.c.tool,
        tool_calls.c.outcome,
        tool_calls.c.started_at,
        finished,
        tool_calls.c.queued_ms,
        bucket.label("bucket"),
    ).where(finished >= since, finished < until)
    if tenant is not None:  # a tenant's viewer: its own invocations' calls, filtered in SQL
        query = query.join(invocations, invocations.c.id == tool_calls.c.invocation_id).where(
            invocations.c.tenant == tenant
        )
    return query.subquery("ended")


def _grouped(ended: sa.Subquery, keys: Sequence[str], in_sql: bool) -> sa.Select[Any]:
    columns = [ended.c[key] for key in keys]
    selected: list[Any] = [
        *columns,
        sa.func.count().label("calls"),
        sa.func.sum(sa.case((ended.c.outcome.in_(FAILED), 1), else_=0)).label("failed"),
        sa.func.sum(sa.case((ended.c.outcome == TIMED_OUT, 1), else_=0)).label("timed_out"),
        sa.func.count(ended.c.queued_ms).label("queued"),
    ]
    if in_sql:
        latency = sa.cast(sa.extract("epoch", ended.c.finished_at - ended.c.started_at) * 1000, sa.Float)
        queued = sa.cast(ended.c.queued_ms, sa.Float)  # a call whose wait is unknown counts in neither
        for what, values in (("latency", latency), ("queued", queued)):
            for name, fraction in FRACTIONS.items():
                ordered = sa.func.percentile_cont(sa.literal(fraction, sa.Float)).within_group(values)
                selected.append(ordered.label(f"{what}_{name}_ms"))
    return sa.select(*selected).group_by(*columns)


# -- percentiles in Python --------------------------------------------------------------------------

_Sampled = dict[tuple[str, tuple[Any, ...]], dict[str, list[float]]]


def _sample(row: RowMapping) -> tuple[str, str, int, float, int | None]:
    latency_ms = (row["finished_at"] - row["started_at"]).total_seconds() * 1000
    return (str(row["pool"]), str(row["tool"]), int(row["bucket"]), latency_ms, row["queued_ms"])


def _percentiles_of(samples: Iterable[tuple[str, str, int, float, int | None]]) -> _Sampled:
    """Each grouping's latencies and known queue waits, by key."""
    found: _Sampled = defaultdict(lambda: {"latency": [], "queued": []})
    for pool, tool, bucket, latency_ms, queued_ms in samples:
        for key in (("tools", (pool, tool)), ("pools", (pool,)), ("buckets", (pool, bucket))):
            found[key]["latency"].append(latency_ms)
            if queued_ms is not None:
                found[key]["queued"].append(float(queued_ms))
    return found


def _key(row: dict[str, Any], keys: Sequence[str]) -> tuple[Any, ...]:
    return tuple(int(row[k]) if k == "bucket" else str(row[k]) for k in keys)


def _numbers(row: dict[str, Any], keys: Sequence[str], sampled: _Sampled | None, grouping: str) -> Numbers:
    if sampled is None:  # the database computed them
        found = {
            f"{what}_{name}_ms": row[f"{what}_{name}_ms"]
            for what in ("latency", "queued")
            for name in FRACTIONS
        }
    else:
        values = sampled.get((grouping, _key(row, keys)), {"latency": [], "queued": []})
        found = {
            f"{what}_{name}_ms": percentile(values[what], fraction)
            for what in ("latency", "queued")
            for name, fraction in FRACTIONS.items()
        }
    return Numbers(
        calls=int(row["calls"]),
        failed=int(row["failed"] or 0),
        timed_out=int(row["timed_out"] or 0),
        queued=int(row["queued"]),
        **{name: None if value is None else round(float(value), 3) for name, value in found.items()},
    )
