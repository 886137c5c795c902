"""Fleet-wide concurrency slots: leases in Redis, handed out round-robin between groups.

A *scope* (a tool, a tool and one value of its concurrency key, a pool) has a limit: at most that many
calls hold one of its slots at once, across every orchestrator and worker of the fleet. A slot is a
lease held by a call's task id, with an expiry renewed while the call runs and removed when it ends;
a holder that dies (an orchestrator, a worker) stops renewing and its slot is free once the lease
expires. All of it happens in atomic scripts on Redis's clock, so no two processes hand out one slot.

Calls waiting for a slot wait in their *group* (the tenant, by default): whenever a slot is free it
goes to the first waiter of the group served least recently, so a group with 1,000 waiting calls does
not starve one with 1. A waiter shows it is alive each time it asks; one that stopped asking for
`WAITER_TTL_MS` is forgotten. A slot granted to a waiter while it was not asking is published on
`GRANTED_CHANNEL` (its task id), so its process wakes it at once; it finds the slot on its next ask
(it is already the holder), which it makes anyway before long should the message be lost.

Keys of a scope `S`: `S:holders` (task id -> lease expiry, ms), `S:turns` (group -> when last served),
`S:seen` (group NUL task id -> last ask, ms), `S:served` (a counter), and `S:waiting:<group>` (task id
-> arrival order).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoScriptError

__all__ = ["GRANTED_CHANNEL", "LEASE_TTL_MS", "SLOTS_PREFIX", "WAITER_TTL_MS", "RedisScript", "Slots"]

SLOTS_PREFIX = "toolfleet:slots:"
GRANTED_CHANNEL = "toolfleet:slots:granted"  # a slot granted to a waiter: its task id, published
LEASE_TTL_MS = 10_000  # a holder renews well within this; a dead one's slot is free after it
WAITER_TTL_MS = 3_000  # a waiter asks far more often than this; one silent longer is gone

# Redis's clock, in milliseconds: every script's time.
_NOW = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

# Shared by acquire and release: drop expired leases and silent waiters, then hand free slots out in
# turn.
_GRANT = (
    _NOW
    + """
local function grant(scope, limit, ttl, waiter_ttl, now)
  local holders, turns, seen = scope .. ':holders', scope .. ':turns', scope .. ':seen'
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', seen, '-inf', now - waiter_ttl, 'LIMIT', 0, 100)) do
    local sep = string.find(gone, '\\0', 1, true)
    redis.call('ZREM', scope .. ':waiting:' .. string.sub(gone, 1, sep - 1), string.sub(gone, sep + 1))
    redis.call('ZREM', seen, gone)
  end
  local free = limit - redis.call('ZCARD', holders)
  while free > 0 do
    local group = nil
    for _, candidate in ipairs(redis.call('ZRANGE', turns, 0, 9)) do
      if redis.call('ZCARD', scope .. ':waiting:' .. candidate) > 0 then
        group = candidate
        break
      end
      redis.call('ZREM', turns, candidate)
    end
    if group == nil then
      return
    end
    local waiting = scope .. ':waiting:' .. group
    local head = redis.call('ZRANGE', waiting, 0, 0)[1]
    redis.call('ZREM', waiting, head)
    redis.call('ZREM', seen, group .. '\\0' .. head)
    redis.call('ZADD', holders, now + ttl, head)
    redis.call('PUBLISH', 'toolfleet:slots:granted', head)  -- its waiter wakes now, not at its next ask
    if redis.call('ZCARD', waiting) > 0 then
      redis.call('ZADD', turns, redis.call('INCR', scope .. ':served'), group)
    else
      redis.call('ZREM', turns, group)
    end
    free = free - 1
  end
end
"""
)

# KEYS: none (the scope's keys derive from ARGV[1]). ARGV: scope, group, task id, limit, lease ttl ms,
# waiter ttl ms. Returns 1 if the task holds a slot (its lease renewed), else 0 (it waits in line).
_ACQUIRE = (
    _GRANT
    + """
local scope, group, member = ARGV[1], ARGV[2], ARGV[3]
local limit, ttl, waiter_ttl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local now = now_ms()
local holders = scope .. ':holders'
if redis.call('ZSCORE', holders, member) and tonumber(redis.call('ZSCORE', holders, member)) > now then
  redis.call('ZADD', holders, now + ttl, member)
  return 1
end
redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
if redis.call('ZCARD', scope .. ':turns') == 0 and redis.call('ZCARD', holders) < limit then
  redis.call('ZADD', holders, now + ttl, member)  -- a free slot and nobody in line: no line to join
  return 1
end
local waiting = scope .. ':waiting:' .. group
if not redis.call('ZSCORE', waiting, member) then
  redis.call('ZADD', waiting, redis.call('INCR', scope .. ':served'), member)
  if not redis.call('ZSCORE', scope .. ':turns', group) then
    redis.call('ZADD', scope .. ':turns', 0, group)
  end
end
redis.call('ZADD', scope .. ':seen', now, group .. '\\0' .. member)
grant(scope, limit, ttl, waiter_ttl, now)
if redis.call('ZSCORE', holders, member) then
  return 1
end
return 0
"""
)

# ARGV: scope, group, task id, limit, lease ttl ms, waiter ttl ms. The task leaves the line if it
# waited in it; the slot it held, if any, goes to the next in turn.
_RELEASE = (
    _GRANT
    + """
local scope, group, member = ARGV[1], ARGV[2], ARGV[3]
redis.call('ZREM', scope .. ':waiting:' .. group, member)
redis.call('ZREM', scope .. ':seen', group .. '\\0' .. member)
local removed = redis.call('ZREM', scope .. ':holders', member)
grant(scope, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), now_ms())
return removed
"""
)

# ARGV: scope, lease ttl ms, task ids... Renews the leases still held; returns how many were.
_RENEW = (
    _NOW
    + """
local now = now_ms()
local holders, renewed = ARGV[1] .. ':holders', 0
for i = 3, #ARGV do
  local expiry = redis.call('ZSCORE', holders, ARGV[i])
  if expiry and tonumber(expiry) > now then
    redis.call('ZADD', holders, now + tonumber(ARGV[2]), ARGV[i])
    renewed = renewed + 1
  end
end
return renewed
"""
)


class RedisScript:
    """A script sent once per Redis server: by its digest (`EVALSHA`), its text only when the server has
    not got it (first use, or after a restart)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()

    def __call__(self, client: Any, *args: Any) -> Any:
        try:
            return client.evalsha(self.sha, 0, *args)
        except NoScriptError:
            return client.eval(self.text, 0, *args)


_ACQUIRE_SCRIPT, _RELEASE_SCRIPT = RedisScript(_ACQUIRE), RedisScript(_RELEASE)
_RENEW_SCRIPT = RedisScript(_RENEW)


@dataclass(frozen=True)
class Slots:
    """The slots of one scope (`name`, e.g. `tool:render`), at most `limit` held at once."""

    client: Any  # a redis.Redis
    name: str
    limit: int
    lease_ttl_ms: int = LEASE_TTL_MS
    waiter_ttl_ms: int = WAITER_TTL_MS

    @property
    def scope(self) -> str:
        return SLOTS_PREFIX + self.name

    def try_acquire(self, task_id: str, group: str = "default") -> bool:
        """Whether `task_id` holds a slot now (taken, or granted while it waited in `group`'s line); if
        not, it waits in line, and must ask again within `waiter_ttl_ms` to keep its place."""
        held = _ACQUIRE_SCRIPT(
            self.client, self.scope, group, task_id, self.limit, self.lease_ttl_ms, self.waiter_ttl_ms
        )
        return bool(held)

    def renew(self, *task_ids: str) -> int:
        """Extend the leases of those of `task_ids` still holding a slot; how many were."""
        if not task_ids:
            return 0
        return int(_RENEW_SCRIPT(self.client, self.scope, self.lease_ttl_ms, *task_ids))

    def release(self, task_id: str, group: str = "default") -> bool:
        """Free `task_id`'s slot (the next waiter in turn gets it), or take it out of `group`'s line;
        whether it held a slot."""
        freed = _RELEASE_SCRIPT(
            self.client, self.scope, group, task_id, self.limit, self.lease_ttl_ms, self.waiter_ttl_ms
        )
        return bool(freed)

    def holders(self) -> list[str]:
        """The task ids holding a slot now (leases not yet expired)."""
        now_s, now_us = self.client.time()
        now_ms = now_s * 1000 + now_us // 1000
        return [
            member.decode() if isinstance(member, bytes) else member
            for member in self.client.zrangebyscore(self.scope + ":holders", now_ms + 1, "+inf")
        ]
