"""The environment every test runs in: none of the caller's toolfleet or Flower settings.

A developer's shell, a CI job or a container may export `TOOLFLEET_*` (and Flower's `FLOWER_*`)
variables. The tests' own processes (worker pools, Flower, drivers) inherit this process's
environment, so a stray `TOOLFLEET_BROKER_URL` would send a worker to another broker than the
publisher. The harness keeps only what tells it where its servers are, and sets the rest itself.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, MutableMapping
from pathlib import Path

import pytest
import redis

__all__ = [
    "BROKER_VARIABLE",
    "HARNESS_PREFIX",
    "HARNESS_VARIABLES",
    "broker_environment",
    "emptied_redis",
    "integration_redis_url",
    "make_hermetic",
]

# Read by the harness to find its servers and choose its databases: kept.
HARNESS_VARIABLES = frozenset({"TOOLFLEET_REDIS_URL"})
HARNESS_PREFIX = "TOOLFLEET_TEST_"
# Read by toolfleet or Flower in any process a test starts: removed unless the harness reads it.
_PRODUCT_PREFIXES = ("TOOLFLEET_", "FLOWER_")

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# Another broker for the tests marked `broker` (`amqp://…` for RabbitMQ): their executors publish there
# and their workers consume from there; results, catalog and events stay in the test Redis.
BROKER_VARIABLE = "TOOLFLEET_TEST_BROKER_URL"
DEFAULT_TEST_REDIS_DB = "13"


def integration_redis_url(
    environ: MutableMapping[str, str],
    *,
    db_variable: str = "TOOLFLEET_TEST_REDIS_DB",
    default_db: str = DEFAULT_TEST_REDIS_DB,
) -> str:
    """The test database (`TOOLFLEET_TEST_REDIS_DB`, default 13, unless another variable and default are
    given) on the server at `TOOLFLEET_REDIS_URL`."""
    base = environ.get("TOOLFLEET_REDIS_URL") or DEFAULT_REDIS_URL
    db = environ.get(db_variable) or default_db
    return base.rsplit("/", 1)[0] + "/" + db if base.count("/") >= 3 else base + "/" + db


def broker_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """`TOOLFLEET_BROKER_URL` set to the broker of `TOOLFLEET_TEST_BROKER_URL`, or nothing when none is
    given (the broker is then the test Redis)."""
    url = environ.get(BROKER_VARIABLE)
    return {"TOOLFLEET_BROKER_URL": url} if url else {}


def answering_redis(url: str, needed_by: str) -> redis.Redis:
    """A client of the Redis database at `url`; when no Redis answers there, the test fails saying
    that `needed_by` needs one."""
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        client.close()
        pytest.fail(f"{needed_by} need a Redis at {url} (make test starts one): {exc}")
    return client


def emptied_redis(url: str, needed_by: str) -> redis.Redis:
    """`answering_redis`, its database emptied."""
    client = answering_redis(url, needed_by)
    client.flushdb()
    return client


def make_hermetic(environ: MutableMapping[str, str], scratch: Path) -> list[str]:
    """Remove every toolfleet and Flower variable the harness does not read, then set what the tests
    need: the test Redis database, a journal and an artifact store in `scratch`. Returns the names
    removed."""
    removed = sorted(
        name
        for name in environ
        if name.startswith(_PRODUCT_PREFIXES)
        and name not in HARNESS_VARIABLES
        and not name.startswith(HARNESS_PREFIX)
    )
    for name in removed:
        del environ[name]
    environ["TOOLFLEET_REDIS_URL"] = integration_redis_url(environ)
    environ["TOOLFLEET_DATABASE_URL"] = f"sqlite:///{scratch / 'toolfleet.db'}"
    environ["TOOLFLEET_ARTIFACT_URL"] = (scratch / "artifacts").as_uri()
    return removed


LOCAL_RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"


def rabbitmq_listens() -> bool:
    """Whether this machine's RabbitMQ (`LOCAL_RABBITMQ_URL`) accepts a connection."""
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=1):
            return True
    except OSError:
        return False
