"""A replica is taken for dead by its Redis heartbeat, but its invocations are taken over only once their
own journal heartbeat is stale too: a replica whose Redis beat lapsed under load while its invocations
still beat is slow, not dead, and stays known until what it ran is recovered."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
import sqlalchemy as sa

from orchestrator import LocalExecutor
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.journal import Journal, invocations, utc_now
from orchestrator.saga.recovery import Recovered
from orchestrator.server.events import EventLog
from orchestrator.server.replicas import ELSEWHERE, REPLICA_KEY, REPLICAS_KEY, ReplicaWatch
from workers.calls.invocation import Invocation, InvocationContext
from workers.protocol import OutcomeKind, ToolExecutionRequest, ToolOutcome

pytestmark = pytest.mark.integration

GHOST = f"ghost-host:{uuid.uuid4().hex[:8]}"  # a replica whose Redis heartbeat has expired


def run_by_the_ghost(journal: Journal, beat_s_ago: float) -> str:
    """An invocation the ghost replica runs, its last journal beat `beat_s_ago` seconds ago."""
    context = InvocationContext(invocation_id=uuid.uuid4(), memory_id="default", user_message="book")
    invocation_id = str(context.invocation_id)
    journal.start_invocation(context, Invocation(context).to_json())
    beat(journal, invocation_id, beat_s_ago)
    return invocation_id


def beat(journal: Journal, invocation_id: str, s_ago: float, owner: str = GHOST) -> None:
    with journal.engine.begin() as connection:
        connection.execute(
            sa.update(invocations)
            .where(invocations.c.id == invocation_id)
            .values(owner=owner, heartbeat_at=utc_now() - timedelta(seconds=s_ago))
        )


def looked(
    redis_url: str, journal_file: Path, look: Callable[[ReplicaWatch], Awaitable[list[Recovered]]]
) -> list[str]:
    """The invocations one look of a live replica's watch (`recover_dead`, `recover_stale`) took."""

    async def run() -> list[str]:
        client = aioredis.Redis.from_url(redis_url)
        executor = LocalExecutor()
        watch = ReplicaWatch(
            client,
            AsyncJournal(f"sqlite:///{journal_file}"),
            lambda: executor,
            EventLog(client),
            ttl_s=2.0,
            stale_after_s=1.5,
        )
        try:
            return [report.invocation_id for report in await look(watch)]
        finally:
            executor.close()
            await client.aclose()

    return asyncio.run(run())


def test_a_dead_replicas_invocation_still_beating_is_left_until_its_beat_is_stale(
    redis_url: str, journal_file: Path, journal: Journal
) -> None:
    # given: the ghost is a known replica without a Redis heartbeat; its invocation beat just now
    invocation_id = run_by_the_ghost(journal, beat_s_ago=0.0)
    redis.Redis.from_url(redis_url).sadd(REPLICAS_KEY, GHOST)

    # when: a live replica looks for dead ones
    taken = looked(redis_url, journal_file, ReplicaWatch.recover_dead)

    # then: it takes nothing, and still knows the ghost
    assert taken == []
    record = journal.invocation(invocation_id)
    assert record is not None and (record.state, record.owner) == ("running", GHOST)
    assert redis.Redis.from_url(redis_url).sismember(REPLICAS_KEY, GHOST)

    # when: the invocation's beat is stale too (2 s, past 1.5 s), and the replica looks again
    beat(journal, invocation_id, 2.0)
    taken = looked(redis_url, journal_file, ReplicaWatch.recover_dead)

    # then: it is recovered, and the ghost forgotten
    assert taken == [invocation_id]
    record = journal.invocation(invocation_id)
    assert record is not None and record.state == "failed"
    assert not redis.Redis.from_url(redis_url).sismember(REPLICAS_KEY, GHOST)


def test_an_invocation_another_replica_could_carry_on_is_left_for_it_a_while_then_undone(
    redis_url: str, journal_file: Path, journal: Journal
) -> None:
    # given: a dead replica's stale invocation, which this replica could not carry on but a replica
    # serving its agent could (its adopt says ELSEWHERE), left for one for 0.5 s at most
    invocation_id = run_by_the_ghost(journal, beat_s_ago=5.0)
    redis.Redis.from_url(redis_url).sadd(REPLICAS_KEY, GHOST)
    asked: list[str] = []

    async def elsewhere(invocation: str, dead: str) -> str:
        asked.append(invocation)
        return ELSEWHERE

    async def look(watch: ReplicaWatch) -> list[str]:
        return [report.invocation_id for report in await watch.recover_dead()]

    async def story() -> tuple[list[str], bool, list[str]]:
        client = aioredis.Redis.from_url(redis_url)
        executor = LocalExecutor()
        watch = ReplicaWatch(
            client, AsyncJournal(f"sqlite:///{journal_file}"), lambda: executor, EventLog(client), ttl_s=2.0
        )
        watch.adopt, watch.leave_for_others_s = elsewhere, 0.5
        try:
            first = await look(watch)
            known = bool(await client.sismember(REPLICAS_KEY, GHOST))
            await asyncio.sleep(0.6)
            return first, known, await look(watch)
        finally:
            executor.close()
            await client.aclose()

    # when: a replica looks, and again once the time to leave it has passed
    first, known, later = asyncio.run(story())

    # then: the first look leaves it (the ghost still known), the later one undoes it
    assert first == [] and known
    assert asked == [invocation_id, invocation_id]
    assert later == [invocation_id]
    record = journal.invocation(invocation_id)
    assert record is not None and record.state == "failed"
    assert not redis.Redis.from_url(redis_url).sismember(REPLICAS_KEY, GHOST)


LIVE = f"live-host:{uuid.uuid4().hex[:8]}"  # a replica whose Redis heartbeat is alive


def test_what_a_live_replica_gave_up_owing_is_retried_by_the_fleet(
    redis_url: str, journal_file: Path, journal: Journal
) -> None:
    # given: a live replica; one of its invocations ended owing a compensation (stale, as it no longer
    # beats), one still beats, one is running but silent (adopted, waiting for its turn, say), one
    # is silent midway through undoing a failed batch
    client = redis.Redis.from_url(redis_url)
    client.sadd(REPLICAS_KEY, LIVE)
    client.set(REPLICA_KEY.format(LIVE), b"1", px=60_000)
    owing = run_by_the_ghost(journal, beat_s_ago=5.0)
    journal.set_invocation_state(owing, "compensating", "1 compensation(s) owed", final_answer="done")
    beating = run_by_the_ghost(journal, beat_s_ago=0.0)
    silent = run_by_the_ghost(journal, beat_s_ago=5.0)
    midway = run_by_the_ghost(journal, beat_s_ago=5.0)  # undoing a failed batch, its loop going on after
    journal.set_invocation_state(midway, "compensating")
    for invocation_id, s_ago in ((owing, 5.0), (beating, 0.0), (silent, 5.0), (midway, 5.0)):
        beat(journal, invocation_id, s_ago, owner=LIVE)

    # when: a replica looks for what live ones gave up on
    taken = looked(redis_url, journal_file, ReplicaWatch.recover_stale)

    # then: it settles the one that owed (nothing left to undo: it ends, failed as recovery ends
    # what it finished), and leaves the others to their replica
    assert taken == [owing]
    states = {i: journal.invocation(i) for i in (owing, beating, silent)}
    assert states[owing] is not None and states[owing].state == "failed"
    assert states[beating] is not None and states[beating].state == "running"
    assert states[silent] is not None and states[silent].state == "running"
    record = journal.invocation(midway)
    assert record is not None and record.state == "compensating"


def test_an_invocation_of_its_own_that_nothing_here_runs_is_taken_up_once_silent_long_enough(
    redis_url: str, journal_file: Path, journal: Journal
) -> None:
    # given: this replica's own invocations, silent for 3 s: one nothing here runs (its run failed
    # before it began, after it was adopted here), one this replica runs now; and one silent 0.5 s
    async def story() -> tuple[str, list[str]]:
        client = aioredis.Redis.from_url(redis_url)
        executor = LocalExecutor()
        watch = ReplicaWatch(
            client,
            AsyncJournal(f"sqlite:///{journal_file}"),
            lambda: executor,
            EventLog(client),
            ttl_s=2.0,
            stale_after_s=0.3,
        )
        lost, running, recent = (run_by_the_ghost(journal, 3.0) for _ in range(3))
        for invocation_id, silent_s in ((lost, 3.0), (running, 3.0), (recent, 0.5)):
            beat(journal, invocation_id, silent_s, owner=watch.owner)
        watch.orphaned_after_s, watch.running_here = 2.0, lambda: [running]
        try:
            return lost, [report.invocation_id for report in await watch.recover_orphaned()]
        finally:
            executor.close()
            await client.aclose()

    lost, taken = asyncio.run(story())

    # then: only the lost one is taken up (recovered here: no adopter is set)
    assert taken == [lost]
    record = journal.invocation(lost)
    assert record is not None and record.state == "failed"


def test_a_dead_replicas_invocation_tells_each_known_calls_end_before_its_own(
    redis_url: str, journal_file: Path, journal: Journal
) -> None:
    # given: a dead replica's invocation whose call ended (journaled) without its end told on the stream
    invocation_id = run_by_the_ghost(journal, beat_s_ago=5.0)
    request = ToolExecutionRequest("c1", "crunch", "{}")
    row = journal.record_intent(
        invocation_id, 1, request, pool="heavy", compensable=False, idempotency_key=f"{invocation_id}:c1"
    )
    journal.record_outcome(row, ToolOutcome(OutcomeKind.SUCCESS, "crunched"), "crunched")
    redis.Redis.from_url(redis_url).sadd(REPLICAS_KEY, GHOST)

    # when: a live replica recovers it
    taken = looked(redis_url, journal_file, ReplicaWatch.recover_dead)

    # then: its stream tells the call's end, then the invocation's
    assert taken == [invocation_id]

    async def read() -> list[tuple[str, str | None, str | None]]:
        client = aioredis.Redis.from_url(redis_url)
        try:
            entries = await client.xrange(f"toolfleet:events:{invocation_id}")
        finally:
            await client.aclose()
        events = [json.loads(fields[b"event"]) for _, fields in entries]
        return [(e["type"], e.get("call_id"), e.get("outcome")) for e in events]

    assert asyncio.run(read()) == [("tool_call.finished", "c1", "success"), ("invocation.failed", None, None)]


def test_a_live_replica_forgotten_while_its_beat_lapsed_is_known_again_with_its_next_beat(
    redis_url: str, journal_file: Path
) -> None:
    # given: a replica beating (its set membership written with each beat), then forgotten by another
    # that took it for dead while its link stalled and found nothing of it to recover
    async def story() -> tuple[bool, bool]:
        client = aioredis.Redis.from_url(redis_url)
        executor = LocalExecutor()
        watch = ReplicaWatch(
            client, AsyncJournal(f"sqlite:///{journal_file}"), lambda: executor, EventLog(client), ttl_s=0.3
        )
        beating = asyncio.create_task(watch.run())
        try:
            await asyncio.sleep(0.2)
            known = bool(await client.sismember(REPLICAS_KEY, watch.owner))
            await client.srem(REPLICAS_KEY, watch.owner)  # forgotten
            await asyncio.sleep(0.3)  # a beat or more later
            return known, bool(await client.sismember(REPLICAS_KEY, watch.owner))
        finally:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)
            await watch.stop()
            executor.close()
            await client.aclose()

    # then: it is known again (when it dies for good, its invocations are recovered)
    assert asyncio.run(story()) == (True, True)
