"""Turns of one conversation, one at a time across every replica, in the order they arrived.

A turn reads its conversation's history at its start and writes it back at its end: two turns of one
conversation at once would each read the same history and the later write would drop the earlier
turn. So a turn with a `conversation_id` first takes its place in the conversation's queue in Redis
(`TURNS_KEY`, a list of tickets in arrival order) and waits until its ticket is at the head, up to
`TOOLFLEET_SERVE_TURN_WAIT_S`; past that it is refused (409 `conversation_busy`) and leaves the queue.

Each ticket has a lease (`LEASE_KEY`) its replica renews while the turn waits or runs. A replica that
dies stops renewing: once its lease has expired, the turn behind it takes the head from it, so a lost
replica holds a conversation for at most `LEASE_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass

import redis.asyncio as aioredis

from orchestrator.errors import ApiError
from orchestrator.saga.async_journal import to_the_end

__all__ = ["LEASE_S", "TURNS_KEY", "Turn", "take_turn"]

log = logging.getLogger(__name__)

LEAVE_TRIES = 6  # a turn tries to leave its queue this many times, `LEAVE_RETRY_S` apart
LEAVE_RETRY_S = 0.5

TURNS_KEY = "toolfleet:turns:{}"  # list: the tickets of a conversation's turns, in arrival order
LEASE_KEY = "toolfleet:turn:{}"  # a ticket's lease, renewed by its replica (expiring)
LEASE_S = 10.0
RENEW_EVERY_S = LEASE_S / 4
POLL_S = 0.02
QUEUE_TTL_S = 24 * 3600

# The head of the queue, after taking the head from a ticket whose lease expired (its replica died).
_HEAD = """
local head = redis.call('lindex', KEYS[1], 0)
while head and head ~= ARGV[1] and redis.call('exists', ARGV[2] .. head) == 0 do
  redis.call('lpop', KEYS[1])
  head = redis.call('lindex', KEYS[1], 0)
end
return head
"""


@dataclass
class Turn:
    """A turn's place at the head of its conversation's queue, held until `release()`."""

    client: aioredis.Redis
    queue: str
    ticket: str
    renewing: asyncio.Task[None] | None = None
    released: bool = False

    async def release(self) -> None:
        """Leave the queue (the next turn goes on); idempotent, and done even while cancelled."""
        if self.released:
            return
        self.released = True
        if self.renewing is not None:
            self.renewing.cancel()
        _, cancelled = await to_the_end(self._leave())
        if cancelled:
            raise asyncio.CancelledError

    async def _leave(self) -> None:
        for attempt in range(
            LEAVE_TRIES
        ):  # through a Redis restart, the next turn need not wait out the lease
            try:
                async with self.client.pipeline(transaction=True) as pipe:
                    pipe.lrem(self.queue, 0, self.ticket)
                    pipe.delete(LEASE_KEY.format(self.ticket))
                    await pipe.execute()
                return
            except Exception as exc:  # its lease expires: the next turn takes the head then
                if attempt == LEAVE_TRIES - 1:
                    log.warning("turn %s did not leave %s: %s", self.ticket, self.queue, exc)
                else:
                    await asyncio.sleep(LEAVE_RETRY_S)


async def take_turn(client: aioredis.Redis, conversation: str, wait_s: float) -> Turn:
    """Wait for the turn of one more call on `conversation` (its turns in arrival order, across
    replicas), at most `wait_s`; an `ApiError` 409 `conversation_busy` past that."""
    turn = Turn(client, TURNS_KEY.format(conversation), uuid.uuid4().hex)
    lease = LEASE_KEY.format(turn.ticket)
    async with client.pipeline(transaction=True) as pipe:
        pipe.set(lease, 1, px=int(LEASE_S * 1000))
        pipe.rpush(turn.queue, turn.ticket)
        pipe.expire(turn.queue, QUEUE_TTL_S)
        await pipe.execute()
    turn.renewing = asyncio.ensure_future(_renew(client, lease))
    deadline = time.monotonic() + wait_s
    try:
        while True:
            head = await client.eval(_HEAD, 1, turn.queue, turn.ticket, LEASE_KEY.format(""))
            if head is None or (head.decode() if isinstance(head, bytes) else str(head)) == turn.ticket:
                return turn
            if time.monotonic() >= deadline:
                raise ApiError(
                    409,
                    f"conversation {conversation!r} is busy: an earlier turn has not ended within "
                    f"{wait_s:g} s (TOOLFLEET_SERVE_TURN_WAIT_S); try again",
                    code="conversation_busy",
                )
            await asyncio.sleep(POLL_S)
    except BaseException:
        await turn.release()
        raise


async def _renew(client: aioredis.Redis, lease: str) -> None:
    while True:
        await asyncio.sleep(RENEW_EVERY_S)
        with contextlib.suppress(Exception):  # a Redis blip: the next renewal, within the lease
            await client.pexpire(lease, int(LEASE_S * 1000))
