"""Redis clients from toolfleet's URLs: one server (`redis://`, `rediss://`, `unix://`) or a group watched
by Redis Sentinel.

A Sentinel URL names the sentinels, `;`-separated as Celery writes them, with the group's name in the
`master_name` query parameter (default `mymaster`) and the database and the master's password as in a
Redis URL:

    sentinel://:secret@10.0.0.1:26379;sentinel://10.0.0.2:26379;sentinel://10.0.0.3:26379/0?master_name=fleet

Every client built here asks the sentinels for the current master and asks again when its connection
fails, so a failover (a replica promoted) is followed without restarting anything. Celery takes the
same URL without the query, the group's name going into its `master_name` transport option
(`celery_url`); the broker and result backend then follow a failover as well.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.sentinel import Sentinel

__all__ = [
    "DEFAULT_MASTER_NAME",
    "SENTINEL_SCHEME",
    "URL_LIST",
    "SentinelTarget",
    "celery_url",
    "connect",
    "connect_async",
    "is_redis",
    "is_sentinel",
    "parse_sentinel_url",
]

SENTINEL_SCHEME = "sentinel://"
DEFAULT_MASTER_NAME = "mymaster"
DEFAULT_SENTINEL_PORT = 26379
SENTINEL_SOCKET_TIMEOUT_S = 2.0  # asking a sentinel where the master is: a sentinel that hangs is skipped
SENTINEL_KWARGS = {"socket_timeout": SENTINEL_SOCKET_TIMEOUT_S}  # the sentinels' own connections


URL_LIST = re.compile(r";(?=[A-Za-z][A-Za-z0-9+.-]*://)")  # between the URLs of a list, not in a password
REDIS_FAMILY = ("redis://", "rediss://", "unix://", SENTINEL_SCHEME)


def is_sentinel(url: str) -> bool:
    return url.startswith(SENTINEL_SCHEME)


def is_redis(url: str) -> bool:
    """Whether `url` names a Redis: one server, or a group behind Sentinel."""
    return url.startswith(REDIS_FAMILY)


@dataclass(frozen=True)
class SentinelTarget:
    """Where a Sentinel URL points: its sentinels, the group's name, and the master's database and
    credentials."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str = DEFAULT_MASTER_NAME
    db: int = 0
    username: str | None = None
    password: str | None = None

    def connection_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"db": self.db}
        if self.username:
            kwargs["username"] = self.username
        if self.password:
            kwargs["password"] = self.password
        return kwargs


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The sentinels, group, database and credentials of a Sentinel URL; ValueError saying what is wrong.

    Each `;`-separated part is one sentinel (`sentinel://[user:password@]host[:port][/db][?query]`); the
    database, credentials and `master_name` may be written on any part, the first written counting.
    """
    sentinels: list[tuple[str, int]] = []
    master_name: str | None = None
    db: int | None = None
    username: str | None = None
    password: str | None = None
    for part in (p.strip() for p in URL_LIST.split(url)):
        if not part:
            continue
        if not part.startswith(SENTINEL_SCHEME):
            raise ValueError(f"every part must start with {SENTINEL_SCHEME}, got {part.split('://')[0]}://")
        pieces = urlsplit(part)
        try:
            port = pieces.port or DEFAULT_SENTINEL_PORT
        except ValueError:
            raise ValueError(f"{pieces.netloc.rpartition('@')[2]!r} has no valid port") from None
        if not pieces.hostname:
            raise ValueError("a sentinel without a host")
        sentinels.append((pieces.hostname, port))
        path = pieces.path.strip("/")
        if path and db is None:
            if not path.isdigit():
                raise ValueError(f"the database must be a number, got {path!r}")
            db = int(path)
        if pieces.password is not None and password is None:
            password = unquote(pieces.password)
            username = unquote(pieces.username) if pieces.username else None
        for key, value in parse_qsl(pieces.query, keep_blank_values=True):
            if key != "master_name":
                raise ValueError(f"unknown parameter {key!r} (only master_name is read)")
            if not value:
                raise ValueError("master_name is empty")
            master_name = master_name or value
    if not sentinels:
        raise ValueError("no sentinel named")
    return SentinelTarget(
        sentinels=tuple(sentinels),
        master_name=master_name or DEFAULT_MASTER_NAME,
        db=db or 0,
        username=username,
        password=password,
    )


def celery_url(url: str) -> tuple[str, dict[str, Any]]:
    """`url` as Celery's broker and result backend take it, and the transport options it needs: a
    Sentinel URL loses its query, its group's name going to `master_name`; any other URL is unchanged."""
    if not is_sentinel(url):
        return url, {}
    target = parse_sentinel_url(url)
    parts = [p.strip().split("?", 1)[0] for p in URL_LIST.split(url) if p.strip()]
    return ";".join(parts), {
        "master_name": target.master_name,
        "sentinel_kwargs": dict(SENTINEL_KWARGS),
    }


def _master_kwargs(url: str, kwargs: dict[str, Any]) -> tuple[SentinelTarget, dict[str, Any]]:
    """The group a Sentinel URL names, and what its master's clients are built with: the URL's
    database and credentials, then `kwargs`."""
    target = parse_sentinel_url(url)
    return target, {**target.connection_kwargs(), **kwargs}


def connect(url: str, **kwargs: Any) -> redis.Redis:
    """A client of the Redis at `url` (or of the master its sentinels name); `kwargs` as
    `redis.Redis.from_url` takes them."""
    if not is_sentinel(url):
        return redis.Redis.from_url(url, **kwargs)
    target, master = _master_kwargs(url, kwargs)
    sentinels = Sentinel(list(target.sentinels), sentinel_kwargs=SENTINEL_KWARGS)
    client: redis.Redis = sentinels.master_for(target.master_name, **master)
    return client


def connect_async(url: str, **kwargs: Any) -> aioredis.Redis:
    """An asyncio client of the Redis at `url` (or of the master its sentinels name)."""
    if not is_sentinel(url):
        return aioredis.Redis.from_url(url, **kwargs)
    target, master = _master_kwargs(url, kwargs)
    sentinels = AsyncSentinel(list(target.sentinels), sentinel_kwargs=SENTINEL_KWARGS)
    client: aioredis.Redis = sentinels.master_for(target.master_name, **master)
    return client
