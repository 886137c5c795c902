"""Replicas watching each other: each beats in Redis, and a live one finishes the sagas of one that died.

A replica is known by its journal owner id (host and process, the `owner` of the invocations it
runs). It adds that id to `REPLICAS_KEY` once and keeps `REPLICA_KEY` alive with a heartbeat that
expires after the workers' heartbeat TTL. Every half TTL each replica looks for known replicas
whose heartbeat has expired; the one that takes `RECOVERY_LOCK_KEY` carries their unfinished
invocations on where it can (`adopt`: the invocation goes on here from its checkpoints), and finishes
the others as `toolfleet recover` does (settle in-flight calls, compensate what succeeded, latest
first), ending each one's event stream; then it forgets the dead replica. A replica takes up its own
invocations the same way when nothing of it runs or beats for them (a run that failed before it
began). Invocations of processes that never were replicas (scripts, `toolfleet chat`) are left to
`toolfleet recover`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from orchestrator.executors.base import ToolExecutor
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.journal import owner_id
from orchestrator.saga.recovery import Recovered, recover
from orchestrator.saga.states import InvocationState
from orchestrator.server.events import EventLog, tell_settled

__all__ = ["ADOPTED", "ELSEWHERE", "RECOVERY_LOCK_KEY", "REPLICAS_KEY", "REPLICA_KEY", "ReplicaWatch"]

log = logging.getLogger(__name__)

REPLICAS_KEY = "toolfleet:replicas"  # set: every replica's owner id, until a live one recovers it
REPLICA_KEY = "toolfleet:replica:{}"  # a live replica's heartbeat, by owner id (expiring)
RECOVERY_LOCK_KEY = "toolfleet:replica-recovery"
ADOPTED = "adopted"  # the invocation goes on here
ELSEWHERE = "elsewhere"  # it could go on, on a replica that serves its agent

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


@dataclass
class ReplicaWatch:
    """This replica's heartbeat, and its share of recovering dead replicas (`executor()` makes the
    executor recovery dispatches compensations on, when first needed)."""

    client: aioredis.Redis
    journal: AsyncJournal
    executor: Callable[[], ToolExecutor]
    events: EventLog
    ttl_s: float
    # How long an invocation's own journal heartbeat must have been silent too before it is taken over:
    # a replica whose Redis beat lapsed while its invocations still beat is slow, not dead.
    stale_after_s: float = 0.0
    owner: str = field(default_factory=owner_id)
    # Run with each look for dead replicas (the approvals this replica goes on with, for one).
    housekeeping: Callable[[], Awaitable[object]] | None = None
    # Carries on here a dead replica's invocation (its id, the dead replica): ADOPTED; ELSEWHERE when
    # a replica serving its agent could (it is left for one, `leave_for_others_s` at most); anything
    # else, and what is left longer, is recovered (its saga finished, what succeeded compensated).
    adopt: Callable[[str, str], Awaitable[str]] | None = None
    leave_for_others_s: float = 0.0
    # This replica's own invocations that stopped beating while not running here (a run that failed
    # before it began, after its invocation was adopted or resumed here) are lost to it: past
    # `orphaned_after_s` without a beat (longer than a turn may wait to begin), it takes them up as
    # it would a dead replica's. 0: never. `running_here()`: the invocations this replica runs now.
    orphaned_after_s: float = 0.0
    running_here: Callable[[], Collection[str]] = tuple
    # Tells the ends a dead replica journaled but never told in their streams (`unended.py`); how
    # many are left for a later look.
    tell_unended: Callable[[str], Awaitable[int]] | None = None
    _left_since: dict[str, float] = field(default_factory=dict)

    async def run(self) -> None:
        """Beat every third of the TTL and look for dead replicas every half (until cancelled); the
        housekeeping runs every half TTL too, in a task of its own, so that a slow database under load
        never delays a beat (a late beat makes the other replicas take this one for dead)."""
        beat_every = self.ttl_s / 3
        looked_at = 0.0
        loop = asyncio.get_running_loop()
        housekeeping = asyncio.create_task(self._housekeep()) if self.housekeeping is not None else None
        try:
            while True:
                try:
                    # Known again with every beat: a replica taken for dead while its beat lapsed (a
                    # stalled link) and forgotten, having nothing to recover, is known once more.
                    async with self.client.pipeline(transaction=True) as beat:
                        beat.set(REPLICA_KEY.format(self.owner), b"1", px=int(self.ttl_s * 1000))
                        beat.sadd(REPLICAS_KEY, self.owner)
                        await beat.execute()
                    if loop.time() - looked_at >= self.ttl_s / 2:
                        looked_at = loop.time()
                        await self.recover_dead()
                        await self.recover_stale()
                        await self.recover_orphaned()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # a Redis or database hiccup: beat again next time
                    log.warning("replica heartbeat or recovery failed: %s", exc)
                await asyncio.sleep(beat_every)
        finally:
            if housekeeping is not None:
                housekeeping.cancel()
                await asyncio.gather(housekeeping, return_exceptions=True)

    async def _housekeep(self) -> None:
        assert self.housekeeping is not None
        while True:
            await asyncio.sleep(self.ttl_s / 2)
            try:
                await self.housekeeping()
            except Exception as exc:  # a database hiccup: the next round
                log.warning("replica housekeeping failed: %s", exc)

    async def stop(self) -> None:
        """Leave cleanly: no heartbeat, and no longer a replica anyone recovers."""
        await self.client.delete(REPLICA_KEY.format(self.owner))
        await self.client.srem(REPLICAS_KEY, self.owner)

    async def dead(self) -> list[str]:
        """Known replicas whose heartbeat has expired."""
        found = []
        for owner in await self._members():
            if owner != self.owner and not await self.client.exists(REPLICA_KEY.format(owner)):
                found.append(owner)
        return found

    async def recover_dead(self) -> list[Recovered]:
        """Finish the sagas of dead replicas, if this replica takes the recovery lock."""
        dead = await self.dead()
        if not dead:
            return []
        reports: list[Recovered] = []
        async with self._recovery_lock() as held:
            for owner in dead if held else []:
                recovered, left = await self._recover_owner(owner)
                if self.tell_unended is not None:
                    left += await self.tell_unended(owner)
                reports += recovered
                if not left:  # forgotten once none of its invocations is left to take over
                    await self.client.srem(REPLICAS_KEY, owner)
        return reports

    async def recover_stale(self) -> list[Recovered]:
        """Finish what live replicas gave up on: an invocation whose loop ended owing compensations
        (one still failed after its retries, or was cut short by a cancel) is left `compensating`
        with what it owes in its error, and stops beating; whichever replica takes the recovery lock
        retries what it owes, as `toolfleet recover` would, so the fleet settles it without an
        operator. A `running` one is left alone: it may be waiting for its turn, adopted."""
        stale = await self.journal.run(lambda journal: journal.unfinished(self.stale_after_s))
        live = set(await self._members()) - set(await self.dead()) if stale else set()
        ids = [r.id for r in stale if r.owner in live and r.state is InvocationState.COMPENSATING and r.error]
        if not ids:
            return []
        reports: list[Recovered] = []
        async with self._recovery_lock() as held:
            for invocation_id in ids if held else []:
                log.warning(
                    "invocation %s owes compensations its replica gave up on: retrying them", invocation_id
                )
                reports += await recover(
                    self.journal,
                    self.executor(),
                    stale_after_s=self.stale_after_s,
                    invocation_id=invocation_id,
                )
        return reports

    async def recover_orphaned(self) -> list[Recovered]:
        """Take up this replica's own invocations that nothing here runs or beats for (see
        `orphaned_after_s`): carried on where they can be, else recovered."""
        if self.orphaned_after_s <= 0:
            return []
        # No fleet lock: only this replica takes up its own (one held by a replica killed meanwhile
        # would keep every replica from recovering the dead for its whole TTL).
        stale = await self.journal.run(lambda journal: journal.unfinished(self.orphaned_after_s))
        here = set(self.running_here())
        if not any(record.owner == self.owner and record.id not in here for record in stale):
            return []
        reports, _ = await self._recover_owner(self.owner, stale_after_s=self.orphaned_after_s, skip=here)
        return reports

    @contextlib.asynccontextmanager
    async def _recovery_lock(self) -> AsyncIterator[bool]:
        """Whether this replica holds the fleet's recovery lock (one recoverer at a time) for the block."""
        token = uuid.uuid4().hex
        held = await self.client.set(RECOVERY_LOCK_KEY, token, nx=True, px=int(max(self.ttl_s, 1) * 10_000))
        try:
            yield bool(held)
        finally:
            if held:
                await self.client.eval(_RELEASE, 1, RECOVERY_LOCK_KEY, token)

    async def _members(self) -> list[str]:
        raw: Any = await self.client.smembers(REPLICAS_KEY)
        return [m.decode() if isinstance(m, bytes) else str(m) for m in raw]

    async def _recover_owner(
        self, owner: str, *, stale_after_s: float | None = None, skip: Collection[str] = ()
    ) -> tuple[list[Recovered], int]:
        """Recover the dead replica's invocations whose journal heartbeat is stale too (for
        `stale_after_s`, else the watch's), but those in `skip`; those recovered, and how many of its
        invocations are left (their heartbeat still fresh: looked at again later)."""
        after = self.stale_after_s if stale_after_s is None else stale_after_s
        unfinished = await self.journal.run(lambda journal: journal.unfinished(0.0))
        mine = [record for record in unfinished if record.owner == owner]
        stale = await self.journal.run(lambda journal: journal.unfinished(after))
        ids = [record.id for record in stale if record.owner == owner and record.id not in skip]
        reports: list[Recovered] = []
        waiting = 0  # left for a replica that serves their agent
        now = asyncio.get_running_loop().time()
        for invocation_id in ids:
            verdict = await self.adopt(invocation_id, owner) if self.adopt is not None else None
            if verdict == ADOPTED:
                continue
            if verdict == ELSEWHERE:
                since = self._left_since.setdefault(invocation_id, now)
                if now - since < self.leave_for_others_s:
                    waiting += 1
                    continue
                log.warning("no replica serving its agent took %s in %.0f s", invocation_id, now - since)
            self._left_since.pop(invocation_id, None)
            log.warning("replica %s stopped: recovering its invocation %s", owner, invocation_id)
            for report in await recover(
                self.journal, self.executor(), stale_after_s=self.stale_after_s, invocation_id=invocation_id
            ):
                reports.append(report)
                await tell_settled(self.journal, self.events, invocation_id)
                await self.events.add(invocation_id, _ended(owner, report))
        return reports, len(mine) - len(ids) + waiting


def _ended(owner: str, report: Recovered) -> dict[str, object]:
    """The last event of an invocation whose replica died: failed, and what recovery did."""
    return {
        "type": "invocation.failed",
        "error": f"its replica {owner} stopped; recovered by {owner_id()}",
        "recovered": {
            "compensated": report.compensated,
            "compensation_failed": report.failed,
            "nothing_to_undo": report.nothing_to_undo,
            "abandoned": report.abandoned,
            "unknown": report.unknown,
        },
    }
