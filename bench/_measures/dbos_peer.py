"""Measure 16: toolfleet side by side with a durable-execution peer, DBOS Transact, on this machine's
PostgreSQL: one call, 100 sleeps of 0.1 s on 100 slots, 1,000 no-op calls as 10 batches of 100.

DBOS runs in a child process of its own (`bench/_dbos_child.py`: DBOS is a process-wide singleton with
its own threads), with its system database in a schema of the PostgreSQL database of measure 7
(`TOOLFLEET_BENCH_POSTGRES_URL`); toolfleet runs in this process on the benchmark's worker. Each part's
runs alternate between the sides (A B, B A, …); the child times its own runs, so the pipe is not counted.

DBOS's side is each call enqueued on a DBOS queue (`DBOS.register_queue`, `Queue.enqueue` of a
`@DBOS.step`, as in its queue tutorial, which says any workflow or step can be enqueued) and its
result waited for (`WorkflowHandle.get_result`). Tuned for latency, after DBOS's documentation
(docs.dbos.dev/python/reference/queues and /configuration, and the docstrings of dbos 3.4's
`DBOS.register_queue`, `DBOSClient.register_queue` and `DBOSConfig`):

- the queue's `polling_interval_sec` = 0.01 (default 1 s): how often the queue's poller looks in the
  database for work; the documentation says smaller values reduce dequeue latency at the cost of more
  database load. 10 ms, as in the study the backlog quotes. 1 ms was tried here: one call took no
  less (about 23 ms either way: enqueue, dequeue and completion are several database round trips
  each), while the child's idle polling grew from about 30 % to about 60 % of a CPU, taken from the
  toolfleet side on the two-CPU development VM;
- `get_result(polling_interval_sec=0.001)` (default 1 s, `DEFAULT_POLLING_INTERVAL` in dbos/_core.py):
  a queued call's handle polls its status row until it is done; 1 ms, as the poll runs only while a
  caller waits;
- `worker_concurrency` = 100 on the queue: the 100 slots (each process runs at most that many of the
  queue's calls at once);
- `max_executor_threads` = 128 (`DBOSConfig`, in the configuration reference): the dequeued calls run
  on DBOS's thread pool, which without it gets Python's default size, min(32, CPUs + 4), 6 on the
  two-CPU development VM, and would run the 100 sleeps 6 at a time;
- `sys_db_pool_size` left at its default, 20 connections: 60 made no difference here (tried on a
  batch of 100 no-ops and on the 100 sleeps);
- the system database is a dedicated schema, dropped when the child starts and ends: DBOS keeps its
  queues there and polls every queue it finds, so leftovers of an earlier run would poll too.

`details.dbos_direct_ms` is DBOS's fastest path, a workflow of one step called directly in the
caller's thread (no queue, no other process, nothing run elsewhere): not the same service as a call
run on a pool, so only a line in the details.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from statistics import median
from typing import Any

from bench._child import BatchChild
from bench._context import BATCH_SIZE, Bench, expect
from bench._dbos_child import (
    BATCHES,
    CALLS,
    DEFAULT_SCHEMA,
    EXECUTOR_THREADS,
    QUEUE_POLL_S,
    RESULT_POLL_S,
    SLEEP_S,
)
from bench._measures.serve_journal import DEFAULT_POSTGRES_URL, POSTGRES_URL_VARIABLE, postgres_problem
from bench._timing import Measure, Sample, cpu_json, ms, process_cpu_s, summarize, walls
from bench._worker import REPO
from workers import OutcomeKind
from workers.settings import redact_url

__all__ = ["DBOS_CHILD_MODULE", "DbosChild", "measure_dbos_peer"]

DBOS_CHILD_MODULE = "bench._dbos_child"
RATIO_TARGET = 1.0  # DBOS / toolfleet: toolfleet at least as fast on every part
READY_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 120.0
# (warm-up pairs, pairs) per part; a DBOS run of `batches` takes about 10 s here.
PARTS: dict[str, tuple[int, int]] = {"one": (10, 60), "sleeps": (1, 8), "batches": (1, 3)}
DIRECT_RUNS = 40
Side = Callable[[], Awaitable[None]]


class DbosChild(BatchChild):
    """The `python -m bench._dbos_child` process: started, stopped and read as measure 11's children."""

    def __init__(self, env: Mapping[str, str], directory: Path, schema: str = DEFAULT_SCHEMA) -> None:
        super().__init__("dbos", [], env, directory)
        self.command = [sys.executable, "-m", DBOS_CHILD_MODULE, "--schema", schema]

    def greeting(self, timeout_s: float) -> tuple[str, str]:
        """Its first line as (`ready` or `skip`, the rest)."""
        word, _, rest = self._read_line(timeout_s).partition(" ")
        if word not in ("ready", "skip"):
            raise self._error(f"said {word!r} instead of ready")
        return word, rest

    def run(self, command: str, timeout_s: float = RUN_TIMEOUT_S) -> dict[str, Any]:
        """One command's answer: `wall` and `cpu` seconds (and, for `batches`, `batch_walls`)."""
        answer: dict[str, Any] = json.loads(self.ask(command, timeout_s))
        return answer

    def end(self) -> None:
        """Ask it to shut DBOS down and drop its schema, then stop it whatever it did."""
        process = self.process
        with contextlib.suppress(OSError, ValueError):
            if process is not None and process.stdin is not None and process.poll() is None:
                process.stdin.write(b"end\n")
                process.stdin.flush()
                process.wait(timeout=15)
        with contextlib.suppress(Exception):
            self.stop()


def child_environment(url: str) -> dict[str, str]:
    """The benchmark's environment, the PostgreSQL URL written out, the repository on `PYTHONPATH`."""
    env = dict(os.environ)
    env[POSTGRES_URL_VARIABLE] = url
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return env


async def _pairs(
    b: Bench, child: DbosChild, toolfleet: Side, command: str, warmup: int, pairs: int, idle: list[float]
) -> tuple[list[Sample], list[Sample], list[dict[str, Any]]]:
    """Warm-up pairs thrown away, then `pairs` pairs, the order flipping each pair: toolfleet's runs
    timed here, DBOS's in the child; the child's CPU during toolfleet's runs is added to `idle`
    (its CPU seconds, then the wall seconds) and DBOS's answers are kept."""

    async def tool_run() -> Sample:
        before = process_cpu_s(child.process.pid) if child.process else None
        sample = await b.timer.run(toolfleet)
        after = process_cpu_s(child.process.pid) if child.process else None
        if before is not None and after is not None:
            idle[0] += after - before
            idle[1] += sample.wall
        return sample

    async def dbos_run() -> tuple[Sample, dict[str, Any]]:
        answer = await asyncio.to_thread(child.run, command)
        return Sample(answer["wall"], answer["cpu"], None), answer

    tool_runs: list[Sample] = []
    dbos_runs: list[Sample] = []
    answers: list[dict[str, Any]] = []
    for index in range(b.reps(warmup) + b.reps(pairs)):
        if index % 2 == 0:
            tool, (peer, answer) = await tool_run(), await dbos_run()
        else:
            (peer, answer), tool = await dbos_run(), await tool_run()
        if index >= b.reps(warmup):
            tool_runs.append(tool)
            dbos_runs.append(peer)
            answers.append(answer)
    return tool_runs, dbos_runs, answers


def _describe() -> Measure:
    return Measure(
        "dbos_peer",
        "vs DBOS Transact: 1 call, 100 sleeps, 1,000 calls",
        "toolfleet (CeleryExecutor on the bench worker's 100 threads) against DBOS Transact (a child "
        f"process, its system database a schema on PostgreSQL, a queue with worker_concurrency={CALLS} "
        f"polled every {QUEUE_POLL_S * 1000:g} ms, get_result polling every {RESULT_POLL_S * 1000:g} ms, "
        f"max_executor_threads={EXECUTOR_THREADS}), runs interleaved: (a) one no-op call; (b) "
        f"{CALLS} sleeps of {SLEEP_S:g} s at once on {CALLS} slots; (c) {BATCHES * CALLS} no-op calls as "
        f"{BATCHES} successive batches of {CALLS}. toolfleet gathers its calls; DBOS enqueues each call "
        "(a @DBOS.step) then waits for every result. Ratio = median DBOS / median toolfleet per part.",
        f"DBOS / toolfleet >= {RATIO_TARGET:g} on all three",
    )


async def measure_dbos_peer(b: Bench) -> Measure:
    m = _describe()
    url = os.environ.get(POSTGRES_URL_VARIABLE) or DEFAULT_POSTGRES_URL
    problem = await asyncio.to_thread(postgres_problem, url)
    if problem is not None:
        return m.skip(problem)
    if importlib.util.find_spec("dbos") is None:
        return m.skip("dbos is not installed here (the bench extra: pip install 'toolfleet[bench]')")
    sleep_arguments = json.dumps({"seconds": SLEEP_S})

    async def one() -> None:
        expect([await b.executor.execute(b.request("noop"), b.noop)], OutcomeKind.SUCCESS)

    async def sleeps() -> None:
        expect(await b.calls(b.sleep_for, sleep_arguments, BATCH_SIZE), OutcomeKind.SUCCESS)

    async def batches() -> None:
        for _ in range(BATCHES):
            expect(await b.calls(b.noop, "{}", BATCH_SIZE), OutcomeKind.SUCCESS)

    toolfleet_sides: dict[str, Side] = {"one": one, "sleeps": sleeps, "batches": batches}
    runs: dict[str, tuple[list[Sample], list[Sample], list[dict[str, Any]]]] = {}
    idle = [0.0, 0.0]
    with tempfile.TemporaryDirectory(prefix="toolfleet-bench-dbos-") as directory:
        child = DbosChild(child_environment(url), Path(directory))
        try:
            child.start()
            word, rest = await asyncio.to_thread(child.greeting, READY_TIMEOUT_S)
            if word == "skip":
                return m.skip(rest)
            setup_s, _, version = rest.partition(" ")
            for part, (warmup, pairs) in PARTS.items():
                runs[part] = await _pairs(b, child, toolfleet_sides[part], part, warmup, pairs, idle)
            direct = [
                (await asyncio.to_thread(child.run, "direct"))["wall"] for _ in range(b.reps(DIRECT_RUNS))
            ]
        finally:
            await asyncio.to_thread(child.end)
    _report(m, runs, direct, idle, float(setup_s), version, url)
    return m


def _report(
    m: Measure,
    runs: Mapping[str, tuple[list[Sample], list[Sample], list[dict[str, Any]]]],
    direct: list[float],
    idle: list[float],
    setup_s: float,
    version: str,
    url: str,
) -> None:
    calls = {"one": 1, "sleeps": CALLS, "batches": BATCHES * CALLS}
    medians = {part: (median(walls(tool)), median(walls(peer))) for part, (tool, peer, _) in runs.items()}
    ratios = {part: peer / tool for part, (tool, peer) in medians.items()}
    for part, (tool, peer, _) in runs.items():
        m.sides[f"toolfleet_{part}"] = summarize(walls(tool))
        m.sides[f"dbos_{part}"] = summarize(walls(peer))
        m.cpu[f"toolfleet_{part}"] = cpu_json(tool, calls[part])
        m.cpu[f"dbos_{part}"] = cpu_json(peer, calls[part])
        for t, p in zip(walls(tool), walls(peer), strict=True):
            m.rounds.append(
                {f"{part}_toolfleet_ms": ms(t), f"{part}_dbos_ms": ms(p), f"{part}_ratio": round(p / t, 3)}
            )
    total = BATCHES * CALLS
    tool_rate, peer_rate = total / medians["batches"][0], total / medians["batches"][1]
    batch_walls = [wall for answer in runs["batches"][2] for wall in answer.get("batch_walls", [])]
    m.details = {
        "ratios": {part: round(ratio, 3) for part, ratio in ratios.items()},
        "median_ms": {
            part: {"toolfleet": ms(tool), "dbos": ms(peer)} for part, (tool, peer) in medians.items()
        },
        "toolfleet_calls_per_s": round(tool_rate, 1),
        "dbos_calls_per_s": round(peer_rate, 1),
        "dbos_batch_median_ms": ms(median(batch_walls)) if batch_walls else None,
        "dbos_direct_ms": ms(median(direct)) if direct else None,
        "dbos_direct_over_toolfleet_one": round(median(direct) / medians["one"][0], 3) if direct else None,
        "dbos_child_cpu_share_while_toolfleet_runs": round(idle[0] / idle[1], 3) if idle[1] else None,
        "dbos_version": version,
        "dbos_settings": {
            "queue_polling_interval_sec": QUEUE_POLL_S,
            "get_result_polling_interval_sec": RESULT_POLL_S,
            "worker_concurrency": CALLS,
            "max_executor_threads": EXECUTOR_THREADS,
            "sys_db_pool_size": "default (20)",
        },
        "dbos_setup_s": round(setup_s, 3),
        "postgres_url": redact_url(url),
        "child_command": f"python -m {DBOS_CHILD_MODULE} --schema {DEFAULT_SCHEMA}",
    }
    m.met = all(ratio >= RATIO_TARGET for ratio in ratios.values())
    (one_tool, one_peer), (sleeps_tool, sleeps_peer) = medians["one"], medians["sleeps"]
    m.result = (
        f"1 call x{ratios['one']:.1f} ({ms(one_tool):.1f} vs {ms(one_peer):.1f} ms), "
        f"sleeps x{ratios['sleeps']:.2f} ({ms(sleeps_tool):.0f} vs {ms(sleeps_peer):.0f} ms), "
        f"1,000 calls x{ratios['batches']:.1f} ({tool_rate:.0f} vs {peer_rate:.0f}/s)"
    )
