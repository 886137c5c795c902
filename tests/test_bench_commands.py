"""The benchmark's count of Redis commands per call, on a real Redis: what a run of calls sent, per
call, with the reads of the counts themselves left out."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from bench._commands import commands_per_call, total
from tests._environment import emptied_redis, integration_redis_url

pytestmark = pytest.mark.integration


def test_each_command_a_run_of_calls_sent_is_counted_per_call() -> None:
    client = emptied_redis(integration_redis_url(os.environ), "the benchmark's command counts")
    key = f"bench-count-{uuid.uuid4().hex}"

    async def call() -> None:
        pipe = client.pipeline(transaction=False)
        pipe.set(key, "1").incr(key).incr(key).get(key)
        pipe.execute()

    try:
        counted = asyncio.run(commands_per_call(client, call, 20))
    finally:
        client.delete(key)
        client.close()
    # The counts are the server's: a thread another test left running in this process may add a SET
    # or a GET of its own now and then, never remove one. INCRBY is this test's alone.
    assert counted["incrby"] == 2.0
    assert 1.0 <= counted["set"] < 1.5 and 1.0 <= counted["get"] < 1.5
    assert "info" not in counted
    assert 4.0 <= total(counted) < 5.0
