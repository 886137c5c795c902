"""Measure 15: one `noop` call by an MCP client through `toolfleet mcp serve` (streamable HTTP), against
the same call through an `AiService` in-process (a scripted model asking for it, then answering)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from statistics import median

import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from bench import agents
from bench._context import Bench
from bench._timing import Measure, cpu_json, ms, summarize, walls
from bench._worker import REPO
from orchestrator.cli.demo_mcp import running_gateway

RATIO_TARGET = 1.5
WARMUP = 30  # pairs
ROUNDS = 5
PAIRS = 40  # per round


@contextlib.contextmanager
def _gateway() -> Iterator[str]:
    """`toolfleet mcp serve --pool bench` as a subprocess, with the benchmark's environment; its URL."""
    with tempfile.TemporaryDirectory(prefix="toolfleet-bench-mcp-") as directory:
        keys = ("TOOLFLEET_API_KEYS", "TOOLFLEET_API_KEYS_FILE")
        env = {k: v for k, v in os.environ.items() if k not in keys}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        env["TOOLFLEET_DATABASE_URL"] = f"sqlite:///{Path(directory) / 'gateway.db'}"
        with running_gateway(env, Path(directory) / "gateway.log", ["bench"]) as url:
            yield url


@contextlib.asynccontextmanager
async def _client(url: str) -> AsyncIterator[ClientSession]:
    async with (
        create_mcp_http_client() as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.list_tools()
        yield session


async def measure_mcp_call(b: Bench) -> Measure:
    m = Measure(
        "mcp_call",
        "1 no-op call: MCP tools/call / AiService",
        "One `noop` tools/call by the official MCP client (one session, streamable HTTP, kept open) to "
        "`toolfleet mcp serve --pool bench` (a subprocess on 127.0.0.1), against the same call through "
        "an AiService in this process (bench/agents.py: a ScriptedChatModel asking for one `noop` call "
        "through CeleryExecutor, then answering; no journal), on the same worker. Sides interleaved "
        "(AB, BA, …); the result is the median over rounds of each round's ratio of medians.",
        f"median ratio <= {RATIO_TARGET}",
    )
    service = agents.agent(executor=b.executor)

    async def in_process() -> None:
        result = await service.achat("go")
        if result.content != agents.ANSWER:
            raise RuntimeError(f"the agent answered {result.content!r}, not {agents.ANSWER!r}")

    with _gateway() as url:
        async with _client(url) as session:

            async def over_mcp() -> None:
                result = await session.call_tool("noop", {})
                if result.is_error:
                    text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
                    raise RuntimeError(f"the MCP call failed: {text}")

            await b.timer.interleaved(over_mcp, in_process, b.reps(WARMUP))
            mcp_runs, local_runs, medians = await b.rounds(over_mcp, in_process, rounds=ROUNDS, pairs=PAIRS)
    ratios = [mcp_median / local_median for mcp_median, local_median in medians]
    ratio = median(ratios)
    m.rounds = [
        {"mcp_median_ms": ms(a), "ai_service_median_ms": ms(s), "ratio": round(a / s, 4)} for a, s in medians
    ]
    m.sides = {"mcp": summarize(walls(mcp_runs)), "ai_service": summarize(walls(local_runs))}
    m.cpu = {"mcp": cpu_json(mcp_runs, 1), "ai_service": cpu_json(local_runs, 1)}
    m.details = {"median_ratio": round(ratio, 4), "ratio_min": min(ratios), "ratio_max": max(ratios)}
    m.met = ratio <= RATIO_TARGET
    mcp_ms, local_ms = ms(median(walls(mcp_runs))), ms(median(walls(local_runs)))
    m.result = f"x{ratio:.2f} ({mcp_ms:.2f} vs {local_ms:.2f} ms)"
    return m
