"""Publish/subscribe: a typed view of redis-py's connection (the methods toolfleet calls on it), and
each process' one listening thread per Redis, calling a handler for each message of its channels.

redis-py annotates `PubSub` a method at a time, release by release (8.2 typed `Redis.pubsub()` and
`subscribe`, not `unsubscribe` or `listen`). Called directly under mypy's strict mode, each release
turns a needed `type: ignore` into an unused one, or the reverse. Reached through `Subscription`, the
calls type-check the same whichever of these methods a release annotates, and a release whose
annotations contradict how toolfleet calls them is still an error here, where it can be read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import redis

from workers.redis_client import connect as connect_redis
from workers.settings import redact_url

__all__ = ["Subscription", "on_message", "subscription"]

log = logging.getLogger(__name__)

RETRY_FIRST_S, RETRY_MAX_S = 0.5, 10.0  # the listener's pause before subscribing again, doubling
_WAIT_S = 0.5  # a wait for the next message: channels added meanwhile are subscribed after it

_listeners: dict[str, _Listener] = {}
_listeners_lock = threading.Lock()


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


def on_message(redis_url: str, channel: str, handle: Callable[[str], None]) -> None:
    """Call `handle(data)` for every message published on `channel` of the Redis at `redis_url`, on this
    process' one listening thread for that Redis: started by the first call, it subscribes again
    whenever Redis answers again after an outage (saying so once per outage, its password masked). A
    channel has one handler, the last given."""
    with _listeners_lock:
        listener = _listeners.get(redis_url)
        if listener is None or not listener.is_alive():
            listener = _listeners[redis_url] = _Listener(redis_url)
            listener.handlers[channel] = handle
            listener.start()
        else:
            listener.handlers[channel] = handle


class _Listener(threading.Thread):
    """Calls each channel's handler with the messages published on it."""

    def __init__(self, redis_url: str) -> None:
        super().__init__(name="toolfleet-listener", daemon=True)
        self.redis_url = redis_url
        self.handlers: dict[str, Callable[[str], None]] = {}

    def run(self) -> None:
        pause = RETRY_FIRST_S
        while True:
            client = connect_redis(self.redis_url, health_check_interval=30)
            try:
                pubsub = subscription(client, ignore_subscribe_messages=True)
                subscribed: set[str] = set()
                while True:
                    added = set(self.handlers) - subscribed
                    if added:
                        pubsub.subscribe(*added)
                        subscribed |= added
                        pause = RETRY_FIRST_S  # subscribed: a later loss is news again
                    message = pubsub.get_message(timeout=_WAIT_S)
                    if message is not None:
                        self._handle(message.get("channel"), message.get("data"))
            except Exception as exc:  # Redis away: listen again once it is back, said once per outage
                say = log.warning if pause == RETRY_FIRST_S else log.debug
                say("listener on %s lost its subscription: %s", redact_url(self.redis_url), exc)
            finally:
                client.close()
            threading.Event().wait(pause)
            pause = min(pause * 2, RETRY_MAX_S)

    def _handle(self, channel: object, data: object) -> None:
        if isinstance(channel, bytes) and isinstance(data, bytes):
            handle = self.handlers.get(channel.decode())
            if handle is not None:
                handle(data.decode())
