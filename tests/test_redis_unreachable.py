"""A Redis that does not answer reads as one toolfleet error naming the URL and the setting.

Whatever a library user calls that meets Redis outside a call's outcome — the executor's catalog,
a tool looked up by name, the catalog itself, what became of an abandoned call — raises
`RedisUnavailableError`: the server's URL with its password masked, `TOOLFLEET_REDIS_URL`, and
redis-py's exception kept as the cause. Nothing listens on the port used here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from orchestrator import CeleryExecutor
from orchestrator.saga._journal_records import CallRecord
from orchestrator.saga._late import late_compensation
from orchestrator.saga.journal import Journal
from tests._ports import free_port
from workers import InvocationContext, ToolExecutionRequest
from workers.errors import RedisUnavailableError, ToolfleetError
from workers.runtime.catalog import Catalog
from workers.settings import Settings

PASSWORD = "hunter2-s3cret"


@pytest.fixture
def url() -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"


@pytest.fixture
def executor(url: str) -> Iterator[CeleryExecutor]:
    running = CeleryExecutor(settings=Settings(redis_url=url, broker_url=url, result_backend=url))
    yield running
    running.close()


@pytest.fixture
def client(url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(url, socket_connect_timeout=2)
    yield connection
    connection.close()


def _abandoned_call() -> CallRecord:
    """A compensable call journaled as abandoned at its deadline, as recovery reads it back."""
    journal = Journal("sqlite://")
    try:
        context = InvocationContext(memory_id="m")
        journal.start_invocation(context, {})
        invocation_id = str(context.invocation_id)
        request = ToolExecutionRequest("call-1", "book", "{}")
        key = f"{invocation_id}:call-1"
        row = journal.record_intent(
            invocation_id, 1, request, pool="io", compensable=True, idempotency_key=key
        )
        journal.set_call_state(row, "abandoned")
        [call] = journal.abandoned_calls()
        return call
    finally:
        journal.engine.dispose()


def _assert_names_redis(raised: pytest.ExceptionInfo[RedisUnavailableError], url: str) -> None:
    error = raised.value
    masked = url.replace(PASSWORD, "***")
    assert str(error).startswith(f"Redis at {masked} (TOOLFLEET_REDIS_URL) is unreachable: "), str(error)
    assert PASSWORD not in str(error)
    assert (error.url, error.setting) == (masked, "TOOLFLEET_REDIS_URL")
    assert isinstance(error, ToolfleetError)
    assert isinstance(error.__cause__, redis.ConnectionError)
    assert not isinstance(error.__cause__, RedisUnavailableError)


CALLS: dict[str, Callable[[CeleryExecutor, redis.Redis], Any]] = {
    "catalog_definitions": lambda executor, _: executor.catalog_definitions(),
    "definition": lambda executor, _: executor.definition("lookup"),
    "execute": lambda executor, _: asyncio.run(
        executor.execute(ToolExecutionRequest("call-1", "lookup", "{}"))
    ),
    "Catalog.workers": lambda _, client: Catalog(client).workers(),
    "Catalog.tools": lambda _, client: Catalog(client).tools(),
    "Catalog.live_workers": lambda _, client: Catalog(client).live_workers("io"),
    "late_compensation": lambda _, client: late_compensation(client, _abandoned_call()),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_an_unreachable_redis_raises_one_toolfleet_error_naming_url_and_setting(
    call: str, url: str, executor: CeleryExecutor, client: redis.Redis
) -> None:
    with pytest.raises(RedisUnavailableError) as raised:
        CALLS[call](executor, client)
    _assert_names_redis(raised, url)


def test_the_error_is_still_a_redis_connection_error_for_code_that_handles_outages(
    url: str, client: redis.Redis
) -> None:
    with pytest.raises(redis.ConnectionError):
        Catalog(client).workers()
