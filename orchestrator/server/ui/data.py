"""What the run view shows, read from the journal and from Redis: the list of invocations, one
invocation's story, and the live catalog of pools.

The journal is read through `run(fn)` of a `JournalRunner` (an `AsyncJournal` in the service), so no
query blocks the event loop; Redis' catalog and late compensations are read by the synchronous
readers the command line uses, in a thread.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
import sqlalchemy as sa

from orchestrator.saga._journal_tables import approvals, compensations, invocations, tool_calls
from orchestrator.saga._late import LateCompensation, late_compensation
from orchestrator.saga.journal import CallRecord, CompensationRecord, InvocationRecord, Journal
from workers.protocol import POOL_KEY
from workers.runtime.catalog import Catalog, WorkerEntry, pool_tools

__all__ = [
    "SEARCH_CHARS",
    "SINCE",
    "STATES",
    "PoolView",
    "RunFilter",
    "RunRow",
    "Story",
    "TurnView",
    "agent_names",
    "arguments_text",
    "calls_in_flight",
    "catalog_pools",
    "first_words",
    "late_compensations",
    "pool_views",
    "run_rows",
    "story",
]

# The state filter's choices, each the invocations it keeps.
# The journal's own states, and `compensated`: the invocations with a compensation that succeeded.
STATES = ("running", "paused", "compensating", "succeeded", "failed", "cancelled", "compensated")
SINCE = {"1h": 3600, "24h": 24 * 3600, "7d": 7 * 24 * 3600, "all": None}
ACTIVE = ("running", "compensating", "paused")  # invocations whose dispatched calls are in flight
SEARCH_CHARS = 255  # the longest search kept (an id, a conversation, a tool name fit)
FIRST_WORDS = 12
FIRST_CHARS = 90


@dataclass(frozen=True)
class RunFilter:
    agent: str = ""
    state: str = ""
    since: str = "all"
    # an invocation id's first characters, a conversation (its id or first characters), or a tool
    # one of its calls ran: the invocations that match any of them
    search: str = ""
    limit: int = 100


@dataclass(frozen=True)
class RunRow:
    """One invocation in the list."""

    id: str
    agent: str
    conversation: str
    input: str
    calls: int
    undone: int
    state: str
    started_at: datetime
    finished_at: datetime | None
    error: str | None

    @property
    def duration_s(self) -> float:
        end = self.finished_at or datetime.now(UTC)
        return max(0.0, (end - self.started_at).total_seconds())

    @property
    def outcome(self) -> str:
        return f"{self.state}, compensated ({self.undone} undone)" if self.undone else self.state


def first_words(text: str | None) -> str:
    words = (text or "").split()
    shown = " ".join(words[:FIRST_WORDS])
    if len(shown) > FIRST_CHARS:
        shown = shown[:FIRST_CHARS].rstrip()
    return shown + (" …" if shown != " ".join(words) else "")


def run_rows(journal: Journal, chosen: RunFilter, tenant: str | None = None) -> list[RunRow]:
    """The invocations `chosen` keeps (of `tenant` only, if given), latest first, with their number of
    calls (those waiting for approval included) and of undone calls."""
    # The page's invocations are chosen first; their calls are then counted for them alone (through
    # each table's invocation_id index), not over the whole tables: every page showing the list reads
    # it again every few seconds.
    page = sa.select(invocations.c.id).order_by(invocations.c.started_at.desc()).limit(chosen.limit)
    if tenant is not None:
        page = page.where(invocations.c.tenant == tenant)
    if chosen.agent:
        page = page.where(invocations.c.service_name == chosen.agent)
    if chosen.state == "compensated":
        page = page.where(_count_of(compensations, compensations.c.state == "succeeded") > 0)
    elif chosen.state in STATES:
        page = page.where(invocations.c.state == chosen.state)
    if chosen.search:
        page = page.where(_matching(chosen.search))
    seconds = SINCE.get(chosen.since)
    if seconds is not None:
        page = page.where(invocations.c.started_at >= datetime.now(UTC) - timedelta(seconds=seconds))
    chosen_ids = page.subquery()
    calls = _count_of(tool_calls) + _count_of(approvals, approvals.c.state == "pending")
    undone = _count_of(compensations, compensations.c.state == "succeeded")
    query = (
        sa.select(
            invocations.c.id,
            invocations.c.service_name,
            invocations.c.memory_id,
            invocations.c.user_message,
            invocations.c.state,
            invocations.c.started_at,
            invocations.c.finished_at,
            invocations.c.error,
            calls.label("calls"),
            undone.label("undone"),
        )
        .join(chosen_ids, chosen_ids.c.id == invocations.c.id)
        .order_by(invocations.c.started_at.desc())
    )
    return [
        RunRow(
            id=row["id"],
            agent=row["service_name"] or "—",
            conversation=row["memory_id"],
            input=first_words(row["user_message"]),
            calls=int(row["calls"]),
            undone=int(row["undone"]),
            state=row["state"],
            started_at=_utc(row["started_at"]),
            finished_at=_utc(row["finished_at"]) if row["finished_at"] else None,
            error=row["error"],
        )
        for row in journal.select(query)
    ]


def _count_of(table: sa.Table, *where: sa.ColumnElement[bool]) -> sa.ScalarSelect[int]:
    """The number of `table`'s rows (those `where` keeps) of the invocation of the outer query's row."""
    return (
        sa.select(sa.func.count())
        .where(table.c.invocation_id == invocations.c.id, *where)
        .correlate(invocations)
        .scalar_subquery()
    )


def _matching(search: str) -> sa.ColumnElement[bool]:
    """Invocations whose id or conversation starts with `search`, or with a call of the tool `search`."""
    prefix = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    of_tool = sa.select(tool_calls.c.invocation_id).where(tool_calls.c.tool == search)
    waits_for_tool = sa.select(approvals.c.invocation_id).where(approvals.c.tool == search)
    return sa.or_(
        invocations.c.id.like(prefix.lower(), escape="\\"),
        invocations.c.memory_id.like(prefix, escape="\\"),
        invocations.c.id.in_(of_tool),
        invocations.c.id.in_(waits_for_tool),
    )


def agent_names(journal: Journal, tenant: str | None = None) -> list[str]:
    """The agents of the journal's invocations (of `tenant`'s, if given), for the list's filter."""
    query = sa.select(invocations.c.service_name).where(invocations.c.service_name.is_not(None)).distinct()
    if tenant is not None:
        query = query.where(invocations.c.tenant == tenant)
    return sorted(str(row["service_name"]) for row in journal.select(query))


@dataclass(frozen=True)
class TurnView:
    """One model turn: the calls it asked for, in request order."""

    turn: int | None
    calls: list[CallRecord]


@dataclass
class Story:
    """One invocation as the journal (and Redis, for late compensations) tells it."""

    record: InvocationRecord
    turns: list[TurnView]
    compensations: list[CompensationRecord]
    late: dict[int, LateCompensation] = field(default_factory=dict)
    waiting: list[Any] = field(default_factory=list)  # the calls it waits on (`ApprovalRecord`s)
    live: dict[str, Any] = field(default_factory=dict)  # its running calls' latest steps (`LiveStep`s)

    def call_of(self, row: int) -> CallRecord | None:
        """The call of journal row `row` (what a compensation undoes)."""
        return next((call for call in self.calls if call.id == row), None)

    @property
    def calls(self) -> list[CallRecord]:
        return [call for turn in self.turns for call in turn.calls]


def story(journal: Journal, invocation_id: str) -> Story | None:
    record = journal.invocation(invocation_id)
    if record is None:
        return None
    turns: list[TurnView] = []
    for call in journal.calls(invocation_id):
        if turns and turns[-1].turn == call.turn:
            turns[-1].calls.append(call)
        else:
            turns.append(TurnView(call.turn, [call]))
    ran = sorted(
        journal.compensations(invocation_id), key=lambda c: (c.state == "pending", c.updated_at, c.id)
    )
    pending = journal.approvals(invocation_id, state="pending") if record.state == "paused" else []
    return Story(record, turns, ran, waiting=pending)


def late_compensations(client: redis.Redis, calls: list[CallRecord]) -> dict[int, LateCompensation]:
    """Where the compensation each abandoned compensable call is owed stands (blocking: in a thread)."""
    return {
        call.id: late_compensation(client, call)
        for call in calls
        if call.state == "abandoned" and call.compensable
    }


def arguments_text(arguments: str) -> str:
    """A call's arguments, indented when they are JSON."""
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


@dataclass(frozen=True)
class PoolView:
    """One pool of the live catalog."""

    name: str
    workers: list[WorkerEntry]
    expires_in_s: dict[str, float]
    tools: tuple[str, ...]
    in_flight: int

    @property
    def kinds(self) -> str:
        return ", ".join(sorted({w.pool_kind for w in self.workers})) or "—"

    @property
    def concurrency(self) -> int:
        return sum(w.concurrency for w in self.workers)


def catalog_pools(client: redis.Redis) -> tuple[list[WorkerEntry], dict[str, dict[str, float]]]:
    """Live workers, and each pool's hostnames with the seconds left on their heartbeat (blocking)."""
    workers = Catalog(client).workers()
    now = time.time()
    beats: dict[str, dict[str, float]] = {}
    for pool in sorted({p for w in workers for p in w.pools}):
        entries: Any = client.zrangebyscore(POOL_KEY.format(pool), now, "+inf", withscores=True)
        beats[pool] = {_text(name): round(score - now, 1) for name, score in entries}
    return workers, beats


def calls_in_flight(journal: Journal, tenant: str | None = None) -> dict[str, int]:
    """Dispatched calls of unfinished invocations (of `tenant`'s, if given), by pool."""
    query = (
        sa.select(tool_calls.c.pool, sa.func.count().label("n"))
        .join(invocations, invocations.c.id == tool_calls.c.invocation_id)
        .where(tool_calls.c.state == "dispatched", invocations.c.state.in_(ACTIVE))
        .group_by(tool_calls.c.pool)
    )
    if tenant is not None:
        query = query.where(invocations.c.tenant == tenant)
    return {str(row["pool"] or "—"): int(row["n"]) for row in journal.select(query)}


def pool_views(
    workers: list[WorkerEntry], beats: dict[str, dict[str, float]], in_flight: dict[str, int]
) -> list[PoolView]:
    names = sorted(set(beats) | set(in_flight))
    views = []
    for name in names:
        members = [w for w in workers if name in w.pools]
        tools = pool_tools([t for w in members for t in w.tools], name)
        views.append(
            PoolView(name, members, beats.get(name, {}), tuple(dict.fromkeys(tools)), in_flight.get(name, 0))
        )
    return views


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
