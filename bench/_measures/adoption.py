"""Measure 12: how long after its replica is SIGKILLed an invocation is adopted by another replica.

A survivor replica and, each round, a doomed one serve `napping` (bench/agents.py: one 2 s call, its
journal on PostgreSQL), with the replicas' heartbeat TTL at 2 s and the invocations' beat at 0.5 s.
An invocation is started on the doomed replica; once its call runs, the doomed replica is SIGKILLed,
and the time from the kill to the invocation's `invocation.adopted` event (written by the survivor,
its stream id's milliseconds) is one sample; the round ends when the invocation completes there.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

from bench import agents
from bench._context import Bench, bench_redis_url
from bench._measures.serve_journal import DEFAULT_POSTGRES_URL, POSTGRES_URL_VARIABLE, postgres_problem
from bench._replica import ServeReplica, serve_replica
from bench._timing import Measure, summarize

HEARTBEAT_TTL_S = 2.0
INVOCATION_BEAT_S = 0.5
TARGET_S = HEARTBEAT_TTL_S + 2.0  # the TTL running out, half a TTL until a replica looks, and slack
ROUNDS = 10
ROUND_TIMEOUT_S = 30.0


async def measure_adoption(b: Bench) -> Measure:
    m = Measure(
        "adoption_delay",
        "adoption after a SIGKILL (TTL 2 s)",
        "A survivor replica and, each round, a new replica serve `napping` (one 2 s `sleep_for` call, "
        "journal on PostgreSQL) with TOOLFLEET_HEARTBEAT_TTL_S=2 and TOOLFLEET_INVOCATION_HEARTBEAT_S=0.5; "
        "an invocation starts on the new replica, which is SIGKILLed once the call runs; one sample is "
        "the time from the kill to the invocation.adopted event the survivor writes; the invocation "
        "must then complete on the survivor.",
        f"median <= {TARGET_S:g} s (the TTL + 2 s)",
    )
    url = os.environ.get(POSTGRES_URL_VARIABLE) or DEFAULT_POSTGRES_URL
    problem = await asyncio.to_thread(postgres_problem, url)
    if problem is not None:
        return m.skip(problem)
    env = {  # the replicas' own database is the agent's journal: where they find each other's work
        agents.JOURNAL_URL_VARIABLE: url,
        "TOOLFLEET_DATABASE_URL": url,
        "TOOLFLEET_HEARTBEAT_TTL_S": f"{HEARTBEAT_TTL_S:g}",
        "TOOLFLEET_INVOCATION_HEARTBEAT_S": f"{INVOCATION_BEAT_S:g}",
        "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "0.2",
    }
    samples: list[float] = []
    client = aioredis.Redis.from_url(bench_redis_url())
    try:
        with serve_replica({"napping": "napping"}, env):
            for _ in range(b.reps(ROUNDS)):
                with tempfile.TemporaryDirectory(prefix="toolfleet-bench-doomed-") as directory:
                    doomed = ServeReplica({"napping": "napping"}, Path(directory), env)
                    await asyncio.to_thread(doomed.start)
                    try:
                        samples.append(await _one_round(client, doomed.root, doomed.pid))
                    finally:
                        doomed.stop()  # killed already, unless the round failed first
    finally:
        await client.aclose()
    summary = summarize(samples)
    m.sides = {"adoption": summary}
    m.rounds = [{"adopted_after_s": round(s, 3)} for s in samples]
    m.details = {"heartbeat_ttl_s": HEARTBEAT_TTL_S, "invocation_heartbeat_s": INVOCATION_BEAT_S}
    m.met = summary.median <= TARGET_S
    m.result = f"median {summary.median:.2f} s, max {max(samples):.2f} s over {len(samples)}"
    return m


async def _one_round(client: aioredis.Redis, root: str, pid: int | None) -> float:
    """Start an invocation on the doomed replica, kill it mid-call, and time its adoption."""
    assert pid is not None
    async with httpx.AsyncClient(base_url=root, timeout=30) as http:
        started = await http.post("/v1/agents/napping/invocations", json={"input": "nap"})
        started.raise_for_status()
        invocation_id = str(started.json()["id"])
    key = f"toolfleet:events:{invocation_id}"
    await _until(client, key, "tool_call.started")
    os.killpg(pid, signal.SIGKILL)  # the replica and whatever it started
    killed_at = time.time()
    adopted_id = await _until(client, key, "invocation.adopted")
    await _until(client, key, "invocation.succeeded")
    return int(adopted_id.split("-")[0]) / 1000 - killed_at


async def _until(client: aioredis.Redis, key: str, kind: str) -> str:
    """The id of the first event of `kind` in the stream at `key`, once it is there."""
    deadline = time.monotonic() + ROUND_TIMEOUT_S
    while time.monotonic() < deadline:
        entries: Any = await client.xrange(key)
        for entry_id, fields in entries:
            if json.loads(fields[b"event"]).get("type") == kind:
                return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
        await asyncio.sleep(0.02)
    raise TimeoutError(f"no {kind} in {key} within {ROUND_TIMEOUT_S:g} s")
