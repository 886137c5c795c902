"""`Idempotency-Key`: a request sent again (a client's retry after a dropped connection, to any
replica) attaches to the invocation the first one started instead of starting another.

The key is the client's (the header, as Stripe's and OpenAI's APIs take it), scoped by the request's
tenant (whichever of its keys sent it: a retry across a key's rotation attaches too) and route, and
held in Redis for as long as the invocation's events are (a day): a SET NX decides which request is
first, atomically across replicas. The first request's body is held as a
digest: the same key with another body is a 409. A first request refused before its invocation
started (at capacity, its conversation busy) lets the key go, so that its retry starts afresh; one
that died before starting it lets its starting lease lapse, and a retry then starts it afresh too.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator

import redis.asyncio as aioredis
from starlette.requests import Request

from orchestrator.errors import ApiError
from orchestrator.server.events import EVENTS_KEY, EVENTS_TTL_S

__all__ = ["HEADER", "IdempotencyKey", "key_of", "until_started"]

HEADER = "Idempotency-Key"
# The first request holds its key's starting lease until its invocation has started; a retry finding
# the key held, the invocation never started and the lease lapsed (that request died) starts it afresh.
STARTING_LEASE_S = 10.0
_CLAIM = """
if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return 0 end
redis.call('set', KEYS[2], ARGV[3], 'PX', ARGV[4])
return 1
"""
_TAKE_OVER = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('set', KEYS[1], ARGV[2], 'EX', ARGV[3])
redis.call('set', KEYS[2], ARGV[4], 'PX', ARGV[5])
return 1
"""
KEY = "toolfleet:idempotency:{}"
MAX_KEY_CHARS = 255


class IdempotencyKey:
    """One request's key: which invocation it names (`claim`), and letting it go (`release`)."""

    def __init__(self, client: aioredis.Redis, name: str, body: bytes) -> None:
        self.client = client
        self.name = name
        self.digest = hashlib.sha256(body).hexdigest()

    async def claim(self, invocation_id: str) -> str:
        """`invocation_id` if this request is the first with its key (it starts the invocation), else
        the invocation the first one started; a 409 if that one was sent with another body."""
        value = json.dumps({"invocation_id": invocation_id, "body": self.digest})
        for _ in range(3):  # the held key may expire or be let go between the two reads
            lease_ms = int(STARTING_LEASE_S * 1000)
            if await self.client.eval(
                _CLAIM, 2, self.name, self.lease, value, EVENTS_TTL_S, invocation_id, lease_ms
            ):
                return invocation_id
            raw = await self.client.get(self.name)
            if raw is None:
                continue
            held = json.loads(raw)
            if held["body"] == self.digest and await self._orphaned(str(held["invocation_id"])):
                # its first request died before starting it: this one starts it afresh
                if await self.client.eval(
                    _TAKE_OVER,
                    2,
                    self.name,
                    self.lease,
                    raw,
                    value,
                    EVENTS_TTL_S,
                    invocation_id,
                    int(STARTING_LEASE_S * 1000),
                ):
                    return invocation_id
                continue
            if held["body"] != self.digest:
                raise ApiError(
                    409,
                    f"this {HEADER} was sent with another request body: a key names one request",
                    param=HEADER,
                    code="idempotency_key_reused",
                )
            return str(held["invocation_id"])
        raise ApiError(409, f"this {HEADER} is being taken and let go: retry", param=HEADER)

    @property
    def lease(self) -> str:
        """Held (renewed) by the first request until its invocation has started."""
        return f"{self.name}:starting"

    async def _orphaned(self, invocation_id: str) -> bool:
        """Whether the key's invocation never started and nobody is starting it any more."""
        if await self.client.exists(EVENTS_KEY.format(invocation_id)):
            return False
        return not await self.client.exists(self.lease)

    async def renew(self, invocation_id: str) -> None:
        """Keep the starting lease while the first request starts its invocation (until cancelled)."""
        while True:
            await asyncio.sleep(STARTING_LEASE_S / 4)
            with contextlib.suppress(Exception):  # a Redis blip: the next renewal, within the lease
                await self.client.set(self.lease, invocation_id, px=int(STARTING_LEASE_S * 1000))

    async def holds(self, invocation_id: str) -> bool:
        """Whether the key still names `invocation_id` (its first request did not let it go)."""
        raw = await self.client.get(self.name)
        return raw is not None and json.loads(raw)["invocation_id"] == invocation_id

    async def release(self, invocation_id: str) -> None:
        """Let the key go: its first request was refused before `invocation_id` started."""
        if await self.holds(invocation_id):
            await self.client.delete(self.name)


@contextlib.asynccontextmanager
async def until_started(key: IdempotencyKey | None, invocation_id: str) -> AsyncIterator[None]:
    """Let `key` go (if any) when what this wraps fails: its first request was refused before
    `invocation_id` started, so that the request sent again starts afresh."""
    renewing = asyncio.ensure_future(key.renew(invocation_id)) if key is not None else None
    try:
        yield
    except BaseException:
        if key is not None:
            await key.release(invocation_id)
        raise
    finally:
        if renewing is not None:
            renewing.cancel()


def key_of(
    request: Request, client: aioredis.Redis, route: str, body: bytes, tenant: str
) -> IdempotencyKey | None:
    """The request's `Idempotency-Key` (None without one), `tenant`'s: another tenant's same key names
    another request; a 400 for one that is empty, too long, or not printable ASCII."""
    given = request.headers.get(HEADER)
    if given is None:
        return None
    if not given or len(given) > MAX_KEY_CHARS or not (given.isascii() and given.isprintable()):
        raise ApiError(400, f"{HEADER} must be 1 to {MAX_KEY_CHARS} printable ASCII characters", param=HEADER)
    scope = hashlib.sha256(f"{tenant}\0{route}\0{given}".encode()).hexdigest()
    return IdempotencyKey(client, KEY.format(scope), body)
