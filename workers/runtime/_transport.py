"""kombu's Redis transport, with one reusable client per channel.

kombu builds a new `redis.Redis` object for every publish, ack and state read; with redis-py 8 that
construction costs more than the command itself (measured: ~160 µs against ~60 µs for a PING).
The client is thread-safe (it draws connections from the channel's pool), so one per channel is
enough. Used for `redis://` and `rediss://` brokers, and (`SentinelTransport`) for a Redis behind
Sentinel, whose channel asks the sentinels for the master whenever it connects again.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis

__all__ = ["SentinelTransport", "Transport"]


class _OneClient:
    """The channel's synchronous client, built once."""

    _toolfleet_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[misc]
        client = self._toolfleet_client
        if client is None:
            client = self._toolfleet_client = super()._create_client(asynchronous=False)  # type: ignore[misc]
        return client


class Channel(_OneClient, kombu_redis.Channel):
    pass


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelChannel(_OneClient, kombu_redis.SentinelChannel):
    pass


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel
