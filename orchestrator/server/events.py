"""An invocation's events, kept in a Redis stream of their own so that any replica can serve them.

Each event is one stream entry (`toolfleet:events:<invocation id>`, field `event`, JSON with a
`type`); the entry's id is the SSE `id`, so a client that reconnects with `Last-Event-ID` (to any
replica) reads on from the next entry: nothing lost, nothing repeated. The stream expires
`EVENTS_TTL_S` after its last event. The last event of an invocation is one of `TERMINAL_TYPES`.

The types: `invocation.started`, `text.delta`, `tool_call.queued`, `tool_call.started`,
`tool_call.finished` (tool, pool, worker, outcome, elapsed), `compensation.queued`,
`compensation.started`, `compensation.finished`, then `invocation.succeeded` (content,
finish_reason, usage), `invocation.failed` (error) or `invocation.cancelled`. An invocation that
pauses for approvals adds `approval.requested` (the waiting calls) and `invocation.paused`; when it
is resumed, on any replica, its stream goes on from `invocation.resumed` (the decisions), written by
the process that took it (of several trying at once, one does).

A stream followed over HTTP stays open through any quiet stretch (a tool that runs for minutes without
a word): each read blocks for less than the Redis client's socket timeout, and after `KEEPALIVE_S`
without an event a comment line (`: keep-alive`) goes out, which SSE clients ignore and proxies see as
traffic. A Redis restart under a followed stream does not end it: the read goes on from the same
entry once Redis answers again (within `FOLLOW_OUTAGE_S`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from orchestrator.saga.async_journal import JournalRunner
from workers.artifacts import refs_in
from workers.redis_client import connect_async, is_sentinel

_T = TypeVar("_T")

__all__ = [
    "EVENTS_KEY",
    "EVENTS_TTL_S",
    "KEEPALIVE",
    "KEEPALIVE_S",
    "TERMINAL_TYPES",
    "EventLog",
    "Retold",
    "call_finished",
    "sse",
    "stream_position",
    "tell_settled",
]

EVENTS_KEY = "toolfleet:events:{}"
RUNNER_KEY = "toolfleet:events:{}:runner"  # the run whose events the stream takes
END_KEY = "toolfleet:events:{}:ended"  # set with the stream's one terminal event
EVENTS_TTL_S = 24 * 3600
MAX_EVENTS = 100_000  # an invocation that streams more keeps its latest (approximately)
TERMINAL_TYPES = frozenset({"invocation.succeeded", "invocation.failed", "invocation.cancelled"})
KEEPALIVE_S = 15.0  # a followed stream's longest silence
KEEPALIVE = ": keep-alive\n\n"  # an SSE comment: ignored by clients, traffic for proxies
MIN_BLOCK_MS = 100
_STREAM_ID = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")
_MAX_ID_PART = 2**64 - 1  # each part of a Redis stream id is an unsigned 64-bit number


FOLLOW_OUTAGE_S = 60.0  # a followed stream waits this long for an unreachable Redis, then fails
FOLLOW_RETRY_S = 0.5  # ... trying again this often
ADD_OUTAGE_S = 15.0  # an event is tried again this long while Redis does not answer
RETRY_LOOK_BACK = 200  # the latest entries an event sent again is looked for among
_PROCESS = uuid.uuid4().hex[:8]  # with a count of this process's writes, each write's token
_WRITES = itertools.count()

# Fenced and ended once: a superseded run's events are dropped, and nothing lands after a terminal event.
# Written once: an event sent again after its first write's answer was lost (Redis restarting) is found
# by its token among the stream's latest entries, and not written twice.
_ADD = """
if ARGV[7] == '1' then
  for _, entry in ipairs(redis.call('xrevrange', KEYS[1], '+', '-', 'COUNT', ARGV[8])) do
    local fields = entry[2]
    for i = 1, #fields, 2 do
      if fields[i] == 't' and fields[i + 1] == ARGV[6] then return entry[1] end
    end
  end
end
if ARGV[4] ~= '' then
  local current = redis.call('get', KEYS[2])
  if current and current ~= ARGV[4] then return false end
end
if redis.call('exists', KEYS[3]) == 1 then return false end
if ARGV[5] == '1' then redis.call('set', KEYS[3], '1', 'EX', ARGV[3]) end
local id = redis.call('xadd', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'event', ARGV[1], 't', ARGV[6])
redis.call('expire', KEYS[1], ARGV[3])
return id
"""

REDIS_CONNECTIONS = 1000  # a replica's connections to Redis at most; more requests wait for one
REDIS_WAIT_S = 30.0  # ... for up to this long


def service_redis(url: str) -> aioredis.Redis:
    """A replica's Redis client. Every stream followed holds a connection while its read blocks, and
    every event written takes one: past `REDIS_CONNECTIONS` they wait their turn (redis-py's own pool
    would refuse the 101st at once, failing the invocation that wrote). Behind Sentinel, the pool is
    the one that follows the master, and grows as needed."""
    if is_sentinel(url):
        return connect_async(url)
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=REDIS_CONNECTIONS, timeout=REDIS_WAIT_S
    )
    return aioredis.Redis(connection_pool=pool)


async def _through_outage(step: Callable[[], Awaitable[_T]]) -> _T:
    """`step()`, tried again while Redis does not answer (a restart), for up to `ADD_OUTAGE_S`."""
    deadline = time.monotonic() + ADD_OUTAGE_S
    while True:
        try:
            return await step()
        except RedisConnectionError:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(FOLLOW_RETRY_S)


class Retold:
    """What an adopting run's stream has told already: each call's and compensation's events, by
    (type, call id), and the text at its end that no later step followed (the answer its superseded
    run had begun to stream, its turn not journaled). The adopter's answer skips that much of its own
    text when it begins the same (`text`); one that differs is told as it comes."""

    def __init__(self, calls: set[tuple[str, str]] | None = None, text: str = "") -> None:
        self.calls = calls or set()
        self._text = text

    def text(self, text: str) -> str:
        """What of the adopter's next piece of text is not told yet."""
        told, self._text = self._text, ""
        if told.startswith(text):
            self._text = told[len(text) :]
            return ""
        return text[len(told) :] if text.startswith(told) else text


class EventLog:
    """The event streams of every invocation, in one Redis."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client
        self._add = client.register_script(_ADD)

    async def take(self, invocation_id: str, runner: str) -> None:
        """Make `runner` (one run of the invocation: its start, a resume, an adoption) the one whose
        events the stream takes from now on: a run superseded (its replica taken for dead, yet still
        going) writes no more."""
        await self.client.set(RUNNER_KEY.format(invocation_id), runner, ex=EVENTS_TTL_S)

    async def add(
        self, invocation_id: str, event: dict[str, Any], *, runner: str | None = None
    ) -> str | None:
        """Append `event`; its stream id. None, and nothing written, when `runner` is no longer the
        invocation's (see `take`), or when the event would end an invocation whose stream has ended:
        a stream tells one end, whoever else tries to write one (a recovery, a superseded run), and
        nothing after it. Tried again while Redis restarts (for `ADD_OUTAGE_S`): an invocation's end
        written as Redis comes back is not lost, nor told twice."""
        token, tries = f"{_PROCESS}{next(_WRITES)}", 0

        def once() -> Awaitable[str | None]:
            nonlocal tries
            tries += 1
            return self._add_once(invocation_id, event, runner, token, again=tries > 1)

        return await _through_outage(once)

    async def _add_once(
        self, invocation_id: str, event: dict[str, Any], runner: str | None, token: str, *, again: bool
    ) -> str | None:
        entry_id = await self._add(
            keys=[
                EVENTS_KEY.format(invocation_id),
                RUNNER_KEY.format(invocation_id),
                END_KEY.format(invocation_id),
            ],
            args=[
                json.dumps(event, separators=(",", ":")),
                MAX_EVENTS,
                EVENTS_TTL_S,
                runner or "",
                1 if event.get("type") in TERMINAL_TYPES else 0,
                token,
                1 if again else 0,
                RETRY_LOOK_BACK,
            ],
        )
        if entry_id is None:
            return None
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    async def exists(self, invocation_id: str) -> bool:
        return bool(await self.client.exists(EVENTS_KEY.format(invocation_id)))

    async def ended(self, invocation_id: str) -> bool:
        """Whether the invocation's stream has told its end."""
        return bool(await self.client.exists(END_KEY.format(invocation_id)))

    async def unended(self, invocation_ids: list[str]) -> list[str]:
        """Those of `invocation_ids` whose stream exists and has not told its end (one round trip)."""
        async with self.client.pipeline(transaction=False) as pipe:
            for invocation_id in invocation_ids:
                pipe.exists(EVENTS_KEY.format(invocation_id))
                pipe.exists(END_KEY.format(invocation_id))
            found = await pipe.execute()
        return [i for n, i in enumerate(invocation_ids) if found[2 * n] and not found[2 * n + 1]]

    async def first(self, invocation_id: str) -> dict[str, Any] | None:
        """The invocation's first event (`invocation.started`: its agent and conversation), or None."""
        entries: Any = await self.client.xrange(EVENTS_KEY.format(invocation_id), count=1)
        return json.loads(entries[0][1][b"event"]) if entries else None

    async def last_id(self, invocation_id: str) -> str:
        """The id of the invocation's latest event ("0": none yet)."""
        entries: Any = await self.client.xrevrange(EVENTS_KEY.format(invocation_id), count=1)
        if not entries:
            return "0"
        raw = entries[0][0]
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    async def told(self, invocation_id: str) -> set[tuple[str, str]]:
        """The (type, call id) of every call and compensation event written so far: what an adopter
        of the invocation does not tell again. Read again while Redis restarts (for `ADD_OUTAGE_S`)."""
        return (await self.retold(invocation_id)).calls

    async def retold(self, invocation_id: str) -> Retold:
        """What a run adopting the invocation need not tell again (`Retold`), read once it took the
        stream (`take`): nothing its superseded run writes lands after that."""
        entries: Any = await _through_outage(lambda: self.client.xrange(EVENTS_KEY.format(invocation_id)))
        calls, tail = set(), []
        for _, fields in entries:
            event = json.loads(fields[b"event"])
            if event.get("call_id") is not None:
                calls.add((str(event["type"]), str(event["call_id"])))
            if event.get("type") == "text.delta":
                tail.append(str(event.get("text") or ""))
            elif event.get("type") != "invocation.adopted":
                tail = []  # text before a later step was a journaled turn's
        return Retold(calls, "".join(tail))

    async def last(self, invocation_id: str) -> dict[str, Any] | None:
        """The invocation's latest event, or None."""
        entries: Any = await self.client.xrevrange(EVENTS_KEY.format(invocation_id), count=1)
        return json.loads(entries[0][1][b"event"]) if entries else None

    async def follow(
        self, invocation_id: str, after: str = "0", *, keepalive_s: float = KEEPALIVE_S
    ) -> AsyncIterator[str]:
        """The events after stream id `after` ("0": all) as server-sent events, waiting for new ones
        until a terminal one; `KEEPALIVE` after each `keepalive_s` without an event."""
        async for entry in self.entries(invocation_id, after, keepalive_s=keepalive_s):
            yield KEEPALIVE if entry is None else sse(*entry)

    async def entries(
        self, invocation_id: str, after: str = "0", *, keepalive_s: float = KEEPALIVE_S
    ) -> AsyncIterator[tuple[str, dict[str, Any]] | None]:
        """The events after stream id `after` ("0": all), each with its id, waiting for new ones until
        a terminal one; None after each `keepalive_s` without an event. Ends at once for a stream
        that does not exist (expired, or never was)."""
        key = EVENTS_KEY.format(invocation_id)
        cursor = after
        block_ms = self._block_ms(keepalive_s)
        quiet_since = time.monotonic()
        unreachable_since: float | None = None
        while True:
            try:
                batches: Any = await self.client.xread({key: cursor}, count=500, block=block_ms)
                exists = bool(batches) or bool(await self.client.exists(key))
                unreachable_since = None
            except RedisTimeoutError:  # the reply came later than the socket timeout: nothing new yet
                batches, exists = [], True
            except RedisConnectionError:  # Redis restarting: read on from the same place once it is back
                now = time.monotonic()
                unreachable_since = unreachable_since or now
                if now - unreachable_since > FOLLOW_OUTAGE_S:
                    raise
                await asyncio.sleep(FOLLOW_RETRY_S)
                batches, exists = [], True
            for _, entries in batches:
                for raw_id, fields in entries:
                    cursor = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
                    event = json.loads(fields[b"event"])
                    yield cursor, event
                    if event.get("type") in TERMINAL_TYPES:
                        return
                quiet_since = time.monotonic()
            if not batches:
                if not exists:
                    return  # expired, or never was
                if time.monotonic() - quiet_since >= keepalive_s:
                    yield None
                    quiet_since = time.monotonic()

    def _block_ms(self, keepalive_s: float) -> int:
        """How long one read may block: within the keep-alive interval, and well within the client's
        socket timeout (redis-py 8 sets 5 s by default), else the read fails before Redis answers."""
        block_s = keepalive_s
        socket_timeout = self.client.connection_pool.connection_kwargs.get("socket_timeout")
        if socket_timeout:
            block_s = min(block_s, float(socket_timeout) / 2)
        return max(MIN_BLOCK_MS, int(block_s * 1000))


def stream_position(value: str) -> str | None:
    """`value` as a position to follow a stream from: "0" (its start) or a stream id `<ms>-<seq>`
    within Redis's range, in canonical form; None for anything else (a client's `Last-Event-ID`)."""
    if value == "0":
        return value
    match = _STREAM_ID.fullmatch(value)
    if match is None or max(int(match[1]), int(match[2])) > _MAX_ID_PART:
        return None
    return f"{int(match[1])}-{int(match[2])}"


def sse(entry_id: str, event: dict[str, Any]) -> str:
    """One server-sent event: its id (for `Last-Event-ID`), its type and its JSON."""
    return f"id: {entry_id}\nevent: {event.get('type', 'message')}\ndata: {_json(event)}\n\n"


def _json(event: dict[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"))


JOURNAL_WAIT_S = 3.0  # how long an invocation whose events have begun may take to be journaled


async def once_journaled(
    log: EventLog, invocation_id: str, read: Callable[[], Awaitable[_T | None]]
) -> _T | None:
    """`read()` of the invocation's journal row; for an invocation whose events have begun but whose
    row is not written yet (its run writes it a moment after its first event, later on a busy
    replica), read again for up to `JOURNAL_WAIT_S`."""
    found = await read()
    if found is not None or not await log.exists(invocation_id):
        return found
    deadline = time.monotonic() + JOURNAL_WAIT_S
    while found is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        found = await read()
    return found


def call_finished(
    call_id: str | None,
    tool: str,
    pool: str | None,
    worker: str | None,
    task_id: str | None,
    outcome: str | None,
    elapsed_s: float | None,
    result_object: Any = None,
    result_text: str | None = None,
) -> dict[str, Any]:
    """A tool call's end, as the stream tells it (`tool_call.finished`), whoever learnt it: the run
    that made the call, or the recovery that settled it; `artifacts`, the references of the artifacts
    its result holds (`result_object`, its text `result_text`)."""
    return {
        "type": "tool_call.finished",
        "call_id": call_id,
        "tool": tool,
        "pool": pool,
        "worker": worker,
        "task_id": task_id,
        "outcome": outcome,
        "elapsed_ms": None if elapsed_s is None else round(elapsed_s * 1000, 1),
        "artifacts": [ref.to_json() for ref in refs_in(result_object, text=result_text)],
    }


async def tell_settled(journal: JournalRunner, events: EventLog, invocation_id: str) -> None:
    """Tell the stream the end of each call the journal knows (recovery learnt it, or the dead replica
    knew but did not tell): `tool_call.finished`, as a run tells it, before the invocation's end."""
    calls = await journal.run(lambda j: j.calls(invocation_id))
    told = await events.told(invocation_id)
    for call in calls:
        if call.outcome is None or call.call_id is None or ("tool_call.finished", call.call_id) in told:
            continue
        elapsed = None if call.finished_at is None else (call.finished_at - call.started_at).total_seconds()
        ids = (call.call_id, call.tool, call.pool, call.worker, call.task_id, call.outcome, elapsed)
        await events.add(invocation_id, call_finished(*ids, call.result_object, call.result))
