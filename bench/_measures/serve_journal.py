"""Measure 7: one replica's throughput with the PostgreSQL journal against without it.

One replica serves the agent of `bench/agents.py` twice, as `plain` and as `journaled` (its saga
written to PostgreSQL); rounds of `INVOCATIONS` completions, `CLIENTS` in flight, alternate between them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from statistics import median

import httpx
import sqlalchemy as sa

from bench import agents
from bench._context import Bench
from bench._measures.serve_overhead import check_completion, completion_request
from bench._replica import serve_replica
from bench._timing import Measure, cpu_json, ms, process_cpu_s, summarize, walls
from workers.settings import redact_url

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
POSTGRES_URL_VARIABLE = "TOOLFLEET_BENCH_POSTGRES_URL"
COST_TARGET = 0.30  # at most this share of the throughput lost to the journal
CLIENTS = 32
INVOCATIONS = 200  # per round
WARMUP = 1  # pairs
PAIRS = 6


def postgres_problem(url: str) -> str | None:
    """Why the journal's PostgreSQL cannot be used, or None when it answers."""
    try:
        engine = sa.create_engine(url, connect_args={"connect_timeout": 2})
        try:
            with engine.connect() as connection:
                connection.execute(sa.text("SELECT 1"))
        finally:
            engine.dispose()
    except Exception as exc:
        reason = (str(getattr(exc, "orig", None) or exc).splitlines() or [type(exc).__name__])[0]
        return f"PostgreSQL at {redact_url(url)} does not answer: {reason[:120]}"
    return None


async def completions(client: httpx.AsyncClient, agent: str, count: int, clients: int) -> None:
    """`count` completions of `agent`, `clients` of them in flight at a time (each client one after the
    other over its keep-alive connection); raise if one does not come back as the agent's answer."""
    body = completion_request(agent)
    left = count

    async def one_client() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            check_completion(await client.post("/v1/chat/completions", json=body))

    await asyncio.gather(*(one_client() for _ in range(clients)))


async def measure_serve_journal(b: Bench) -> Measure:
    m = Measure(
        "serve_journal_cost",
        f"serve throughput, {CLIENTS} in flight: journal / none",
        f"Rounds of {INVOCATIONS} non-streaming chat completions, {CLIENTS} clients in flight (httpx, "
        "keep-alive), against one `toolfleet serve` replica serving the agent of bench/agents.py (one "
        "`noop` call on the bench worker, then the answer) twice: `plain`, and `journaled` with "
        "journal=Journal(<PostgreSQL>). Rounds interleaved; invocations/s = invocations / the median "
        "round's time; the cost is 1 - the median over pairs of journaled / plain throughput.",
        f"journal costs <= {COST_TARGET:.0%} of the throughput",
    )
    url = os.environ.get(POSTGRES_URL_VARIABLE) or DEFAULT_POSTGRES_URL
    problem = await asyncio.to_thread(postgres_problem, url)
    if problem is not None:
        return m.skip(problem)
    extra_env = {agents.JOURNAL_URL_VARIABLE: url}
    with serve_replica({"plain": "plain", "journaled": "journaled"}, extra_env) as replica:
        replica_cpu: dict[str, list[float]] = {"plain": [], "journaled": []}
        limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
        async with httpx.AsyncClient(base_url=replica.root, timeout=60, limits=limits) as client:

            def side(agent: str) -> Callable[[], Awaitable[None]]:
                async def run() -> None:
                    before = process_cpu_s(replica.pid) if replica.pid else None
                    await completions(client, agent, INVOCATIONS, CLIENTS)
                    after = process_cpu_s(replica.pid) if replica.pid else None
                    if before is not None and after is not None:
                        replica_cpu[agent].append(after - before)

                return run

            await b.timer.interleaved(side("plain"), side("journaled"), b.reps(WARMUP))
            for values in replica_cpu.values():
                values.clear()
            plain_runs, journal_runs = await b.timer.interleaved(
                side("plain"), side("journaled"), b.reps(PAIRS)
            )
    plain_times, journal_times = walls(plain_runs), walls(journal_runs)
    ratios = [p / j for p, j in zip(plain_times, journal_times, strict=True)]  # journaled / plain rate
    ratio = median(ratios)
    cost = 1.0 - ratio
    plain_rate, journal_rate = INVOCATIONS / median(plain_times), INVOCATIONS / median(journal_times)
    m.rounds = [
        {
            "plain_per_s": round(INVOCATIONS / p, 1),
            "journaled_per_s": round(INVOCATIONS / j, 1),
            "ratio": round(p / j, 4),
        }
        for p, j in zip(plain_times, journal_times, strict=True)
    ]
    m.sides = {"plain": summarize(plain_times), "journaled": summarize(journal_times)}
    m.cpu = {"plain": cpu_json(plain_runs, INVOCATIONS), "journaled": cpu_json(journal_runs, INVOCATIONS)}
    m.details = {
        "plain_per_s": round(plain_rate, 1),
        "journaled_per_s": round(journal_rate, 1),
        "median_ratio": round(ratio, 4),
        "journal_cost": round(cost, 4),
        "clients": CLIENTS,
        "invocations_per_round": INVOCATIONS,
        "replica_cpu_ms_per_invocation": {
            agent: ms(sum(values) / len(values) / INVOCATIONS) if values else None
            for agent, values in replica_cpu.items()
        },
        "journal_url": redact_url(url),
    }
    m.met = cost <= COST_TARGET
    m.result = f"{plain_rate:.0f} vs {journal_rate:.0f} /s, x{ratio:.2f} (cost {cost:.0%})"
    return m
