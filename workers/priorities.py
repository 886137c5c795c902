"""Call priorities: an invocation's priority (its parameter `priority`, 0 to 9, higher sooner; 5 when it
has none) orders the calls waiting in the same pool's queue, on either broker.

RabbitMQ orders a queue's messages by their priority itself (the queue is declared with
`x-max-priority`), higher first. Redis has no priorities: kombu's Redis transport keeps one list per
priority *step* and a worker takes from the lowest-numbered step first, so there 0 is the highest.
Every call is therefore published with a priority, the scale turned over for Redis, and the Redis
transport keeps one list per priority (steps 0 to 9): with kombu's default steps (0, 3, 6, 9) a call
without a priority would land in the first list and outrank every other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workers.redis_client import is_redis

__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_PRIORITY",
    "PRIORITY_PARAMETER",
    "PRIORITY_STEPS",
    "broker_priority",
    "check_priority",
    "message_priority",
    "priority_of",
    "redis_lists",
]

PRIORITY_PARAMETER = "priority"
MAX_PRIORITY = 9
DEFAULT_PRIORITY = 5
PRIORITY_STEPS = tuple(range(MAX_PRIORITY + 1))  # the Redis transport's lists of a queue, first served first


def redis_lists(queue: str) -> list[str]:
    """The lists a queue is on a Redis broker, one per priority, first served first (kombu names the
    list of step 0 after the queue itself, the others `{queue}\x06\x16{step}`)."""
    return [f"{queue}\x06\x16{step}" if step else queue for step in PRIORITY_STEPS]


def check_priority(value: object, where: str = "priority") -> int:
    """`value` as a priority, or ValueError naming `where`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PRIORITY:
        raise ValueError(
            f"{where} must be a whole number from 0 to {MAX_PRIORITY} (higher sooner), got {value!r}"
        )
    return value


def priority_of(parameters: Mapping[str, Any]) -> int:
    """An invocation's priority: its parameter `priority` when it is a valid one, else the default."""
    try:
        return check_priority(parameters.get(PRIORITY_PARAMETER, DEFAULT_PRIORITY))
    except ValueError:  # checked where it is given (the service answers 400); here, never fatal
        return DEFAULT_PRIORITY


def broker_priority(priority: int, broker_url: str) -> int:
    """The message priority the broker at `broker_url` reads as `priority` (Redis's scale turned over)."""
    if is_redis(broker_url):
        return MAX_PRIORITY - priority
    return priority


def message_priority(parameters: Mapping[str, Any], broker_url: str) -> int:
    """The message priority of a call of an invocation of `parameters`, on the broker at `broker_url`."""
    return broker_priority(priority_of(parameters), broker_url)
