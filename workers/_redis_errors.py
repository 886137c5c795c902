"""Redis errors mapped once, at the calls a library user makes, to one `RedisUnavailableError`.

The error names the server (password masked) and the setting that points at it, and keeps redis-py's
exception as its cause, so a stopped Redis reads as one line instead of a page of traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import redis

from workers.errors import RedisUnavailableError
from workers.settings import ENVIRONMENT, redact_url

__all__ = ["REDIS_SETTING", "client_url", "mapped_redis_errors", "unavailable"]

REDIS_SETTING = ENVIRONMENT["redis_url"]


def client_url(client: redis.Redis) -> str:
    """The URL `client` connects to, rebuilt from its connection settings, password masked."""
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    db = kwargs.get("db", 0)
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}?db={db}"
    scheme = "rediss" if issubclass(pool.connection_class, redis.SSLConnection) else "redis"
    user = kwargs.get("username") or ""
    credentials = f"{user}:***@" if kwargs.get("password") else (f"{user}@" if user else "")
    return f"{scheme}://{credentials}{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{db}"


def unavailable(
    exc: redis.RedisError, where: str | redis.Redis, setting: str = REDIS_SETTING
) -> RedisUnavailableError:
    """The toolfleet error for `exc`, met talking to `where` (a URL or a client) named by `setting`."""
    url = redact_url(where) if isinstance(where, str) else client_url(where)
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if isinstance(where, str) and "://" in where:
        password = _password(where)
        if password:
            reason = reason.replace(password, "***")
    state = "is unreachable" if isinstance(exc, redis.ConnectionError | redis.TimeoutError) else "failed"
    return RedisUnavailableError(f"Redis at {url} ({setting}) {state}: {reason}", url=url, setting=setting)


@contextmanager
def mapped_redis_errors(where: str | redis.Redis, setting: str = REDIS_SETTING) -> Iterator[None]:
    """Raise a redis-py error met inside as `RedisUnavailableError`, from the original."""
    try:
        yield
    except RedisUnavailableError:
        raise
    except redis.RedisError as exc:
        raise unavailable(exc, where, setting) from exc


def _password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None
