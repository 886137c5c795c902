"""A typed view of redis-py's publish/subscribe connection: the methods toolfleet calls on it.

redis-py annotates `PubSub` a method at a time, release by release (8.2 typed `Redis.pubsub()` and
`subscribe`, not `unsubscribe` or `listen`). Called directly under mypy's strict mode, each release
turns a needed `type: ignore` into an unused one, or the reverse. Reached through `Subscription`, the
calls type-check the same whichever of these methods a release annotates, and a release whose
annotations contradict how toolfleet calls them is still an error here, where it can be read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import redis

__all__ = ["Subscription", "subscription"]


class Subscription(Protocol):
    """What toolfleet calls on a `redis.client.PubSub`."""

    def subscribe(self, *channels: str) -> object: ...

    def unsubscribe(self, *channels: str) -> object: ...

    def get_message(
        self, ignore_subscribe_messages: bool = False, timeout: float = 0.0
    ) -> dict[str, Any] | None: ...

    def listen(self) -> Iterator[dict[str, Any]]: ...

    def close(self) -> None: ...


def subscription(client: redis.Redis, *, ignore_subscribe_messages: bool = False) -> Subscription:
    """A new publish/subscribe connection of `client` (subscribed to nothing yet)."""
    open_pubsub: Callable[..., Subscription] = client.pubsub
    return open_pubsub(ignore_subscribe_messages=ignore_subscribe_messages)
