"""Load on two `toolfleet serve` replicas: 200 concurrent conversations, each streaming an answer
after two tool calls on the worker pool, half on each replica; every one completes, and every call
is accounted for in the journal. The latencies are reported (`-s` shows them), not asserted:
speed targets live in `bench/`."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

import openai
import pytest

from orchestrator import Journal
from tests.integration.serve.replicas import AGENT, API_KEY, Replica

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONVERSATIONS = 200


@pytest.fixture(scope="module")
def replica_changes() -> dict[str, str | None]:
    """A heartbeat TTL of 10 s instead of the serve tests' 2 s. Under this load, on a two-core machine
    running other tests beside, a replica's beat can come more than 2 s late; the other replica then
    takes it for dead and recovers its live invocations (they end `failed`). How replicas judge each
    other is the subject of tests/integration/serve/test_replica_faults.py, not of this one."""
    return {"TOOLFLEET_HEARTBEAT_TTL_S": "10"}


async def _converse(client: openai.AsyncOpenAI, n: int) -> tuple[str, str, float]:
    """One conversation's turn: its invocation id, its streamed answer, and how long it took."""
    started = time.perf_counter()
    stream = await client.chat.completions.create(
        model=AGENT,
        messages=[{"role": "user", "content": f"add {n} 1 & add {n} 2"}],
        metadata={"conversation_id": f"load-{uuid.uuid4().hex}"},
        stream=True,
    )
    completion_id, parts = "", []
    async for chunk in stream:
        completion_id = chunk.id
        parts.extend(c.delta.content or "" for c in chunk.choices)
    return completion_id.removeprefix("chatcmpl-"), "".join(parts), time.perf_counter() - started


@pytest.mark.timeout(300)
def test_200_concurrent_streaming_conversations_across_two_replicas(
    replicas: tuple[Replica, Replica], database_url: str
) -> None:
    async def run() -> list[tuple[str, str, float]]:
        clients = [
            openai.AsyncOpenAI(base_url=r.base_url, api_key=API_KEY, max_retries=0, timeout=120)
            for r in replicas
        ]
        try:
            return await asyncio.gather(*(_converse(clients[n % 2], n) for n in range(CONVERSATIONS)))
        finally:
            for client in clients:
                await client.close()

    wall = time.perf_counter()
    results = asyncio.run(run())
    wall = time.perf_counter() - wall

    # every conversation got its own answer
    for n, (_, answer, _) in enumerate(results):
        assert answer.strip() == f"done: {n + 1} | {n + 2}", n
    # every call is in the journal, succeeded, two per invocation
    journal = Journal(database_url)
    try:
        calls = [call for invocation_id, _, _ in results for call in journal.calls(invocation_id)]
        states = {str(journal.invocation(i).state) for i, _, _ in results}  # type: ignore[union-attr]
    finally:
        journal.engine.dispose()
    assert len(calls) == 2 * CONVERSATIONS
    assert {str(call.state) for call in calls} == {"succeeded"}
    assert states == {"succeeded"}
    latencies = sorted(seconds for _, _, seconds in results)
    p50 = statistics.median(latencies)
    p99 = latencies[int(0.99 * len(latencies)) - 1]
    print(
        f"\n{CONVERSATIONS} conversations on 2 replicas in {wall:.2f} s: "
        f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms"
    )
