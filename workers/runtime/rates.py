"""Fleet-wide rate limits: each call reserves its start time in Redis, in arrival order.

A *scope* (a tool, or a tool and one value of its rate-limit key) starts at most `limit` calls per
period across every orchestrator of the fleet, spaced evenly: one every period / limit, as Celery's own
(per-worker) rate limits do, so neither the tool nor an API behind it ever sees a burst. A call asks
once: an atomic script on Redis's clock gives it the first start free after the last one reserved and
records it, so the caller sleeps exactly until then, asking nothing more (no polling), and calls start
in the order they asked. A call whose start would come after its deadline reserves nothing and is told
how long it would have waited. The scope's key holds one value, the last start reserved.

A call reaches its worker a few milliseconds after its reserved start, by how long its publish and
delivery take, and that lag varies: a later call may travel faster than an earlier one. So the worker
checks the spacing once more, on the starts it actually made (`take_now`, a scope of its own): a call
that arrives early waits there the few milliseconds it must, and the tool, or the API behind it, never
sees two starts closer than the limit allows. Reservations are kept `DISPATCH_GUARD_MS` per period
further apart than the limit alone asks, so that the workers seldom wait at all.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis

from workers.protocol import CallTask
from workers.runtime.slots import RedisScript
from workers.tools import ToolDefinition
from workers.tools.rate_limits import RateLimit, parse_rate_limit

__all__ = [
    "DISPATCH_GUARD_MS",
    "RATES_PREFIX",
    "START_GUARD_MS",
    "Rates",
    "Turn",
    "key_value",
    "rates_of",
    "wait_for_start",
]

log = logging.getLogger(__name__)

RATES_PREFIX = "toolfleet:rates:"
DISPATCH_GUARD_MS = 25  # reservations' extra spacing per period, for the publish's varying lag
START_GUARD_MS = 2  # starts' extra spacing per period, for the lag between Redis's answer and the tool
_KEY_VALUE_MAX = 64  # longer values of a key are named by their hash

# ARGV: key, spacing ms, longest wait ms. Returns {reserved (1/0), wait ms, start}: the start is now +
# wait; when it would be later than the longest wait, nothing is reserved. Starts are kept to the
# microsecond as text, so fractional spacings add up without drifting.
_RESERVE = """
local key, spacing, longest = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local last = redis.call('GET', key)
local start = now
if last then
  start = math.max(now, tonumber(last) + spacing)
end
local wait = math.ceil(start - now)
if wait > longest then
  return {0, wait, ''}
end
local text = string.format('%.3f', start)
redis.call('SET', key, text, 'PX', wait + math.ceil(spacing) + 1000)
return {1, wait, text}
"""

# ARGV: key, spacing ms, start. A turn not yet come and the last one reserved is given back: the next
# call gets it.
_GIVE_BACK = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local start = tonumber(ARGV[3])
if redis.call('GET', ARGV[1]) == ARGV[3] and start > now then
  redis.call('SET', ARGV[1], string.format('%.3f', start - tonumber(ARGV[2])), 'KEEPTTL')
  return 1
end
return 0
"""

# ARGV: key, spacing ms. Returns {taken (1/0), wait ms}: a start is taken now when the last one taken is
# a spacing behind; else the caller waits and asks again.
_TAKE_NOW = """
local key, spacing = ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local last = redis.call('GET', key)
if last and now < tonumber(last) + spacing then
  return {0, math.ceil(tonumber(last) + spacing - now)}
end
redis.call('SET', key, string.format('%.3f', now), 'PX', math.ceil(spacing) + 1000)
return {1, 0}
"""

_RESERVE_SCRIPT, _GIVE_BACK_SCRIPT = RedisScript(_RESERVE), RedisScript(_GIVE_BACK)
_TAKE_NOW_SCRIPT = RedisScript(_TAKE_NOW)


def key_value(key: str, parameters: Mapping[str, Any], arguments: str) -> str:
    """The value of a concurrency or rate-limit key for one call: its invocation parameter `key`, else its
    argument `key`; a long value is named by its hash."""
    value = parameters.get(key)
    if value is None:
        try:
            parsed = json.loads(arguments) if arguments else {}
        except ValueError:
            parsed = {}
        value = parsed.get(key) if isinstance(parsed, dict) else None
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    if len(text) > _KEY_VALUE_MAX:
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return text


@dataclass(frozen=True)
class Turn:
    """A call's answer from its rate limit: whether a start is reserved, the ms until it (or that the
    call would have waited), and the start itself (Redis-clock ms, as text) to give it back."""

    reserved: bool
    wait_ms: int
    start: str


@dataclass(frozen=True)
class Rates:
    """The starts of one scope (`name`, e.g. `tool:geocode`, and what it counts: `dispatch`, the
    orchestrators' reservations, or `start`, the workers' starts) under `rate`."""

    client: Any  # a redis.Redis
    name: str
    rate: RateLimit
    guard_ms: int = DISPATCH_GUARD_MS

    @property
    def key(self) -> str:
        return RATES_PREFIX + self.name

    @property
    def spacing_ms(self) -> float:
        """How far apart two starts are kept."""
        return (self.rate.period_ms + self.guard_ms) / self.rate.limit

    def reserve(self, longest_wait_ms: int) -> Turn:
        """Reserve the next start free, unless the call would wait longer than `longest_wait_ms` for it."""
        reserved, wait_ms, start = _RESERVE_SCRIPT(
            self.client, self.key, repr(self.spacing_ms), max(0, longest_wait_ms)
        )
        text = start.decode() if isinstance(start, bytes) else str(start)
        return Turn(bool(reserved), int(wait_ms), text)

    def give_back(self, turn: Turn) -> bool:
        """Give a reserved start back if it has not come and no later one was reserved since; whether it
        was."""
        if not turn.reserved:
            return False
        return bool(_GIVE_BACK_SCRIPT(self.client, self.key, repr(self.spacing_ms), turn.start))

    def take_now(self) -> int:
        """Take a start now if the last one taken is far enough behind: 0 — else the ms to wait before
        asking again."""
        taken, wait_ms = _TAKE_NOW_SCRIPT(self.client, self.key, repr(self.spacing_ms))
        return 0 if taken else max(1, int(wait_ms))


def rates_of(
    client: Any, definition: ToolDefinition, call: CallTask, *, at_start: bool = False
) -> Rates | None:
    """The starts a call of `definition` counts among under its tool's rate limit (per value of its key,
    if it has one): the orchestrators' reservations, or, `at_start`, the workers' starts; None for a
    tool without a rate limit."""
    options = definition.options
    if options.rate_limit is None:
        return None
    name = f"tool:{definition.name}"
    if options.rate_limit_key is not None:
        value = key_value(options.rate_limit_key, call.invocation.parameters, call.request.arguments)
        name += f":{options.rate_limit_key}={value}"
    rate = parse_rate_limit(options.rate_limit)
    if at_start:
        return Rates(client, f"{name}:start", rate, START_GUARD_MS)
    return Rates(client, f"{name}:dispatch", rate)


def wait_for_start(rates: Rates, definition: ToolDefinition, deadline: float | None) -> bool:
    """On the worker, before a rate-limited tool runs (`rates`: its workers' starts): wait (a few ms,
    seldom more) until its start keeps the limit's spacing; False if its `deadline` comes first. A
    Redis that does not answer lets the call start: its publish already waited its turn."""
    try:
        while (wait_ms := rates.take_now()) > 0:
            if deadline is not None and time.time() + wait_ms / 1000 >= deadline:
                return False
            time.sleep(wait_ms / 1000)
    except redis.RedisError as exc:
        log.warning("could not check the rate limit of %s before it started: %s", definition.name, exc)
    return True
