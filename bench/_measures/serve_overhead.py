"""Measure 6: one chat completion with one tool call through `toolfleet serve`, against the same agent's
`achat` in-process; the difference is what the service adds."""

from __future__ import annotations

from statistics import median
from typing import Any

import httpx

from bench import agents
from bench._context import Bench
from bench._replica import serve_replica
from bench._timing import Measure, cpu_json, ms, process_cpu_s, summarize, walls

TARGET_S = 0.003
WARMUP = 30  # pairs
ROUNDS = 5
PAIRS = 40  # per round
AGENT = "plain"
QUESTION = "go"


def completion_request(agent: str) -> dict[str, Any]:
    """The body of a non-streaming chat completion asking `agent` the benchmark's question."""
    return {"model": agent, "messages": [{"role": "user", "content": QUESTION}]}


def check_completion(response: httpx.Response) -> None:
    """Raise unless the response is the agent's answer: a measure times only calls that did their work."""
    if response.status_code != 200:
        raise RuntimeError(f"toolfleet serve answered {response.status_code}: {response.text[:500]}")
    content = response.json()["choices"][0]["message"]["content"]
    if content != agents.ANSWER:
        raise RuntimeError(f"the served agent answered {content!r}, not {agents.ANSWER!r}")


async def measure_serve_overhead(b: Bench) -> Measure:
    m = Measure(
        "serve_overhead",
        "1 tool-calling completion: serve - in-process",
        "One non-streaming POST /v1/chat/completions to a `toolfleet serve` replica (a subprocess on "
        "127.0.0.1, httpx over one keep-alive connection), against the same AiService's achat() in this "
        "process. The agent (bench/agents.py): a ScriptedChatModel asking for one `noop` call on the "
        "bench worker through CeleryExecutor, then answering; no journal. Sides interleaved (AB, BA, …); "
        "the result is the median over rounds of each round's difference of medians.",
        f"service adds <= {ms(TARGET_S):g} ms",
    )
    service = agents.agent(executor=b.executor)
    body = completion_request(AGENT)

    async def in_process() -> None:
        result = await service.achat(QUESTION)
        if result.content != agents.ANSWER:
            raise RuntimeError(f"the agent answered {result.content!r}, not {agents.ANSWER!r}")

    with serve_replica({AGENT: "plain"}) as replica:
        async with httpx.AsyncClient(base_url=replica.root, timeout=30) as client:

            async def served() -> None:
                check_completion(await client.post("/v1/chat/completions", json=body))

            await b.timer.interleaved(served, in_process, b.reps(WARMUP))
            replica_before = process_cpu_s(replica.pid) if replica.pid else None
            served_runs, local_runs, medians = await b.rounds(served, in_process, rounds=ROUNDS, pairs=PAIRS)
            replica_after = process_cpu_s(replica.pid) if replica.pid else None
    replica_cpu = None
    if replica_before is not None and replica_after is not None:
        replica_cpu = ms((replica_after - replica_before) / len(served_runs))
    differences = [served_median - local_median for served_median, local_median in medians]
    m.rounds = [
        {"served_median_ms": ms(s), "in_process_median_ms": ms(i), "difference_ms": ms(s - i)}
        for s, i in medians
    ]
    difference = median(differences)
    served_ms, local_ms = ms(median(walls(served_runs))), ms(median(walls(local_runs)))
    m.sides = {"served": summarize(walls(served_runs)), "in_process": summarize(walls(local_runs))}
    m.cpu = {"served": cpu_json(served_runs, 1), "in_process": cpu_json(local_runs, 1)}
    m.details = {
        "median_difference_ms": ms(difference),
        "difference_min_ms": ms(min(differences)),
        "difference_max_ms": ms(max(differences)),
        "target_ms": ms(TARGET_S),
        "replica_cpu_ms_per_call": replica_cpu,
        "replica_command": " ".join(replica.command[1:]),
    }
    m.met = difference <= TARGET_S
    m.result = f"{ms(difference):+.2f} ms ({served_ms:.2f} vs {local_ms:.2f} ms)"
    return m
