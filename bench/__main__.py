"""`python -m bench`: toolfleet's CeleryExecutor against raw Celery, on one real worker, with targets.

Runs on a dedicated Redis database (db 14 of the server at `TOOLFLEET_REDIS_URL`, flushed at start;
`TOOLFLEET_BENCH_REDIS_DB` picks another), starts one threads-pool worker (`celery -A bench.worker`,
concurrency 100) that serves both the tool tasks and the raw baseline tasks, prints a table and
writes JSON to `bench/results/`. A missed target is reported, not an error: the exit status is 0
unless the benchmark itself could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import itertools
import json
import os
import signal
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import celery
import redis
from celery.exceptions import TimeoutError as CeleryTimeoutError

from bench._measure import Measure, Sample, Timer, cpu_json, machine_info, ms, summarize, walls
from bench._worker import BenchWorker
from orchestrator.executors.base import execute_batch
from orchestrator.executors.celery import CeleryExecutor
from workers import OutcomeKind, ToolDefinition, ToolExecutionRequest, ToolOutcome
from workers.app import make_publisher
from workers.calls.invocation import Invocation
from workers.settings import Settings

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
BENCH_DB = "14"

SINGLE_RATIO_TARGET = 1.25
BATCH_SIZE = 100
BATCH_TARGET_S = 0.150
BATCH_SPEEDUP_TARGET = 4.0
DEADLINE_S = 0.3
DEADLINE_TARGET_S = 0.35
SLOW_TOOL_S = 5.0
SLEEP_S = 0.1
SLEEPS_TARGET_S = 0.25
IN_FLIGHT_BATCHES = 200
FEW_BATCHES = 20
IN_FLIGHT_SLEEP_S = 0.2
IN_FLIGHT_TARGET_S = 1.5
WORKER_CONCURRENCY = 100
ANCHOR_QUEUE = "bench.anchor"


def bench_redis_url() -> str:
    """The `TOOLFLEET_REDIS_URL` server with the benchmark's own database."""
    base = os.environ.get("TOOLFLEET_REDIS_URL") or DEFAULT_REDIS_URL
    db = os.environ.get("TOOLFLEET_BENCH_REDIS_DB") or BENCH_DB
    parts = urlsplit(base)
    if parts.scheme not in ("redis", "rediss"):
        raise SystemExit(
            f"bench: TOOLFLEET_REDIS_URL must be a redis:// or rediss:// URL, not {parts.scheme}://"
        )
    return urlunsplit(parts._replace(path=f"/{db}"))


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


class _Signals:
    terminated = False


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM stops the run the way Ctrl-C does (asyncio.run's handler when inside it), so that the
    worker is stopped on the way out."""
    _Signals.terminated = True
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


@dataclass(frozen=True)
class Scale:
    """Repetitions of each measure (`--quick` cuts them down for a smoke run)."""

    single_warmup: int = 40
    single_rounds: int = 7
    single_pairs: int = 60
    batch_warmup: int = 2
    batch_pairs: int = 12
    deadline_warmup: int = 1
    deadline_pairs: int = 8
    sleeps_warmup: int = 2
    sleeps_reps: int = 12
    in_flight_warmup: int = 1
    in_flight_pairs: int = 5
    anchor_reps: int = 300

    @classmethod
    def quick(cls) -> Scale:
        return cls(
            single_warmup=10,
            single_rounds=3,
            single_pairs=20,
            batch_warmup=1,
            batch_pairs=4,
            deadline_warmup=1,
            deadline_pairs=3,
            sleeps_warmup=1,
            sleeps_reps=4,
            in_flight_warmup=1,
            in_flight_pairs=2,
            anchor_reps=100,
        )


class Bench:
    """What the measures share: the executor, the tool definitions and the raw Celery tasks."""

    def __init__(self, scale: Scale, worker_pid: int | None) -> None:
        # Imported only now: bench.worker builds its app from the TOOLFLEET_* variables main() sets.
        from bench import tools
        from bench import worker as bench_worker

        self.scale = scale
        self.timer = Timer(worker_pid)
        self.settings = Settings.from_env()
        self.raw_noop: Any = bench_worker.raw_noop
        self.raw_sleep: Any = bench_worker.raw_sleep
        self.executor = CeleryExecutor(settings=self.settings, tools=[tools])
        self.publisher = make_publisher(self.settings)
        self.redis = redis.Redis.from_url(self.settings.redis_url)
        noop = self.executor.registry.get("noop")
        sleep_for = self.executor.registry.get("sleep_for")
        if noop is None or sleep_for is None:
            raise RuntimeError("bench.tools must define the tools noop and sleep_for")
        self.noop: ToolDefinition = noop
        self.sleep_for: ToolDefinition = sleep_for
        self._ids = itertools.count(1)

    def request(self, name: str, arguments: str = "{}") -> ToolExecutionRequest:
        return ToolExecutionRequest(f"bench-{next(self._ids)}", name, arguments)

    async def calls(self, definition: ToolDefinition, arguments: str, count: int) -> list[ToolOutcome]:
        """`count` calls at once: asyncio.gather of `execute`."""
        requests = [self.request(definition.name, arguments) for _ in range(count)]
        return list(await asyncio.gather(*(self.executor.execute(r, definition) for r in requests)))

    def close(self) -> None:
        self.executor.close()
        self.publisher.close()
        self.redis.close()
        # The executor's shared result collector (a daemon thread) is process-wide; stop it too.
        with contextlib.suppress(ImportError, AttributeError):
            from orchestrator.executors._collector import ResultCollector

            ResultCollector.shared(self.settings.redis_url).close()


def _expect(outcomes: Sequence[ToolOutcome], kind: OutcomeKind) -> None:
    for outcome in outcomes:
        if outcome.kind is not kind:
            raise RuntimeError(f"expected a {kind} outcome, got {outcome.kind}: {outcome.text}")


def _med(values: Sequence[float]) -> float:
    return statistics.median(values)


# -- 1. one call -------------------------------------------------------------------------------------


async def measure_single(b: Bench) -> Measure:
    m = Measure(
        "single_call",
        "1 no-op call: executor / raw Celery",
        "One `noop` tool call through CeleryExecutor.execute, against `bench.raw_noop.apply_async().get()` "
        "with the worker app's Redis result backend, on the same worker. Sides interleaved (AB, BA, …); "
        "the result is the median over rounds of each round's ratio of medians.",
        f"median ratio <= {SINGLE_RATIO_TARGET}",
    )

    async def tool_call() -> None:
        _expect([await b.executor.execute(b.request("noop"), b.noop)], OutcomeKind.SUCCESS)

    async def raw_call() -> None:
        b.raw_noop.apply_async().get(timeout=10)

    s = b.scale
    await b.timer.interleaved(tool_call, raw_call, s.single_warmup)
    tool_runs: list[Sample] = []
    raw_runs: list[Sample] = []
    ratios: list[float] = []
    for _ in range(s.single_rounds):
        tool_round, raw_round = await b.timer.interleaved(tool_call, raw_call, s.single_pairs)
        tool_runs += tool_round
        raw_runs += raw_round
        ratio = _med(walls(tool_round)) / _med(walls(raw_round))
        ratios.append(ratio)
        m.rounds.append(
            {
                "executor_median_ms": ms(_med(walls(tool_round))),
                "celery_median_ms": ms(_med(walls(raw_round))),
                "ratio": round(ratio, 4),
            }
        )
    ratio = _med(ratios)
    m.sides = {"executor": summarize(walls(tool_runs)), "celery": summarize(walls(raw_runs))}
    m.cpu = {"executor": cpu_json(tool_runs, 1), "celery": cpu_json(raw_runs, 1)}
    m.details = {"median_ratio": round(ratio, 4), "ratio_min": min(ratios), "ratio_max": max(ratios)}
    m.met = ratio <= SINGLE_RATIO_TARGET
    tool_ms, raw_ms = ms(_med(walls(tool_runs))), ms(_med(walls(raw_runs)))
    m.result = f"x{ratio:.2f} ({tool_ms:.2f} vs {raw_ms:.2f} ms)"
    return m


# -- 2. 100 calls in one batch --------------------------------------------------------------------


async def measure_batch(b: Bench) -> Measure:
    m = Measure(
        "batch_100",
        f"{BATCH_SIZE} no-ops in one batch",
        f"asyncio.gather of {BATCH_SIZE} CeleryExecutor.execute(noop) calls, against "
        f"celery.group({BATCH_SIZE} x bench.raw_noop).apply_async().get() (GroupResult.get) on the same "
        "worker, interleaved; speed-up = median over pairs of group time / executor time.",
        f"median <= {ms(BATCH_TARGET_S):.0f} ms and >= {BATCH_SPEEDUP_TARGET:g}x faster than group",
    )

    async def tool_batch() -> None:
        _expect(await b.calls(b.noop, "{}", BATCH_SIZE), OutcomeKind.SUCCESS)

    async def group_batch() -> None:
        result = celery.group(b.raw_noop.s() for _ in range(BATCH_SIZE)).apply_async()
        values = result.get(timeout=30)
        if len(values) != BATCH_SIZE:
            raise RuntimeError(f"group returned {len(values)} results")

    s = b.scale
    await b.timer.interleaved(tool_batch, group_batch, s.batch_warmup)
    tool_runs, group_runs = await b.timer.interleaved(tool_batch, group_batch, s.batch_pairs)
    tool_times, group_times = walls(tool_runs), walls(group_runs)
    pairs = list(zip(tool_times, group_times, strict=True))
    speedup = _med([g / t for t, g in pairs])
    median = _med(tool_times)
    m.rounds = [{"executor_ms": ms(t), "group_ms": ms(g), "speedup": round(g / t, 3)} for t, g in pairs]
    m.sides = {"executor": summarize(tool_times), "celery_group": summarize(group_times)}
    m.cpu = {"executor": cpu_json(tool_runs, BATCH_SIZE), "celery_group": cpu_json(group_runs, BATCH_SIZE)}
    m.details = {
        "median_speedup": round(speedup, 3),
        "latency_met": median <= BATCH_TARGET_S,
        "speedup_met": speedup >= BATCH_SPEEDUP_TARGET,
        "ms_per_call": ms(median / BATCH_SIZE),
    }
    m.met = median <= BATCH_TARGET_S and speedup >= BATCH_SPEEDUP_TARGET
    m.result = f"{ms(median):.0f} ms, x{speedup:.1f} vs group ({ms(_med(group_times)):.0f} ms)"
    return m


# -- 3. a deadline --------------------------------------------------------------------------------


async def measure_deadline(b: Bench) -> Measure:
    m = Measure(
        "deadline",
        f"{DEADLINE_S:g} s deadline on sleep_for({SLOW_TOOL_S:g})",
        f"Time from CeleryExecutor.execute(sleep_for({SLOW_TOOL_S:g})), the definition's timeout replaced "
        f"by {DEADLINE_S:g} s, to its TIMED_OUT outcome; against bench.raw_sleep({SLOW_TOOL_S:g})"
        f".apply_async().get(timeout={DEADLINE_S:g}) raising celery.exceptions.TimeoutError; interleaved. "
        "The abandoned calls keep worker threads busy (a threads pool cannot stop them), so this "
        "measure runs last.",
        f"median <= {ms(DEADLINE_TARGET_S):.0f} ms",
    )
    options = dataclasses.replace(b.sleep_for.options, timeout=DEADLINE_S)
    slow = dataclasses.replace(b.sleep_for, options=options)
    arguments = json.dumps({"seconds": SLOW_TOOL_S})

    async def tool_call() -> None:
        _expect([await b.executor.execute(b.request("sleep_for", arguments), slow)], OutcomeKind.TIMED_OUT)

    async def raw_call() -> None:
        result = b.raw_sleep.apply_async((SLOW_TOOL_S,))
        try:
            result.get(timeout=DEADLINE_S)
        except CeleryTimeoutError:
            return
        finally:
            # Unsubscribe now, not from AsyncResult.__del__ at interpreter exit.
            result.backend.remove_pending_result(result)
        raise RuntimeError(f"raw_sleep({SLOW_TOOL_S:g}) finished within its {DEADLINE_S:g} s timeout")

    s = b.scale
    await b.timer.interleaved(tool_call, raw_call, s.deadline_warmup)
    tool_runs, raw_runs = await b.timer.interleaved(tool_call, raw_call, s.deadline_pairs)
    tool_times, raw_times = walls(tool_runs), walls(raw_runs)
    median = _med(tool_times)
    m.sides = {"executor": summarize(tool_times), "celery_get_timeout": summarize(raw_times)}
    m.rounds = [
        {"executor_ms": ms(t), "celery_ms": ms(r)} for t, r in zip(tool_times, raw_times, strict=True)
    ]
    m.details = {
        "deadline_ms": ms(DEADLINE_S),
        "executor_overshoot_ms": ms(median - DEADLINE_S),
        "celery_overshoot_ms": ms(_med(raw_times) - DEADLINE_S),
    }
    m.met = median <= DEADLINE_TARGET_S
    m.result = f"{ms(median):.0f} ms (Celery get: {ms(_med(raw_times)):.0f} ms)"
    return m


# -- 4. 100 sleeps on 100 threads -----------------------------------------------------------------


async def measure_sleeps(b: Bench) -> Measure:
    m = Measure(
        "sleeps_100",
        f"{BATCH_SIZE} x sleep_for({SLEEP_S:g}), {WORKER_CONCURRENCY} threads",
        f"asyncio.gather of {BATCH_SIZE} CeleryExecutor.execute(sleep_for({SLEEP_S:g})) calls on the "
        f"worker's threads pool of {WORKER_CONCURRENCY} (floor {ms(SLEEP_S):.0f} ms).",
        f"median <= {ms(SLEEPS_TARGET_S):.0f} ms",
    )
    arguments = json.dumps({"seconds": SLEEP_S})

    async def sleeps() -> None:
        _expect(await b.calls(b.sleep_for, arguments, BATCH_SIZE), OutcomeKind.SUCCESS)

    await b.timer.repeat(sleeps, b.scale.sleeps_warmup)
    runs = await b.timer.repeat(sleeps, b.scale.sleeps_reps)
    median = _med(walls(runs))
    m.sides = {"executor": summarize(walls(runs))}
    m.cpu = {"executor": cpu_json(runs, BATCH_SIZE)}
    m.rounds = [{"ms": ms(run.wall)} for run in runs]
    m.details = {"floor_ms": ms(SLEEP_S), "overhead_ms": ms(median - SLEEP_S)}
    m.met = median <= SLEEPS_TARGET_S
    m.result = f"{ms(median):.0f} ms"
    return m


# -- 5. many batches in flight --------------------------------------------------------------------


@dataclass
class _InFlightRun:
    batches: int
    elapsed: float
    threads_before: int
    threads_peak: int
    peak_in_flight: int

    @property
    def growth(self) -> int:
        return self.threads_peak - self.threads_before

    def to_json(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "elapsed_ms": ms(self.elapsed),
            "threads_before": self.threads_before,
            "threads_peak": self.threads_peak,
            "thread_growth": self.growth,
            "peak_batches_in_flight": self.peak_in_flight,
        }


async def _batches_in_flight(b: Bench, count: int) -> _InFlightRun:
    """`count` concurrent `execute_batch` calls of one sleep_for call each; samples the thread count."""
    in_flight = 0
    peak_in_flight = 0
    finished = asyncio.Event()
    arguments = json.dumps({"seconds": IN_FLIGHT_SLEEP_S})

    async def one_batch() -> list[ToolOutcome]:
        nonlocal in_flight, peak_in_flight
        in_flight += 1
        peak_in_flight = max(peak_in_flight, in_flight)
        try:
            calls = [(b.request("sleep_for", arguments), b.sleep_for)]
            return await execute_batch(b.executor, calls, Invocation(), max_fanout=b.settings.max_fanout)
        finally:
            in_flight -= 1

    threads_before = threading.active_count()
    threads_peak = threads_before

    async def sample_threads() -> None:
        nonlocal threads_peak
        while not finished.is_set():
            threads_peak = max(threads_peak, threading.active_count())
            await asyncio.sleep(0.002)

    sampler = asyncio.create_task(sample_threads())
    start = time.perf_counter()
    try:
        results = await asyncio.gather(*(one_batch() for _ in range(count)))
    finally:
        elapsed = time.perf_counter() - start
        finished.set()
        await sampler
    _expect([outcome for batch in results for outcome in batch], OutcomeKind.SUCCESS)
    return _InFlightRun(count, elapsed, threads_before, threads_peak, peak_in_flight)


async def measure_in_flight(b: Bench) -> Measure:
    m = Measure(
        "batches_in_flight",
        f"{IN_FLIGHT_BATCHES} batches in flight, 1 orchestrator",
        f"{IN_FLIGHT_BATCHES} concurrent execute_batch() calls in one asyncio loop, each waiting on one "
        f"sleep_for({IN_FLIGHT_SLEEP_S:g}) call ({IN_FLIGHT_BATCHES} calls on {WORKER_CONCURRENCY} worker "
        f"threads: floor {ms(IN_FLIGHT_SLEEP_S * 2):.0f} ms). Interleaved with runs of {FEW_BATCHES} "
        "batches; threading.active_count() is sampled every 2 ms and its growth must not depend on the "
        "number of batches.",
        f"median <= {ms(IN_FLIGHT_TARGET_S):.0f} ms, no thread per batch",
    )
    runs: list[_InFlightRun] = []

    async def many() -> None:
        runs.append(await _batches_in_flight(b, IN_FLIGHT_BATCHES))

    async def few() -> None:
        runs.append(await _batches_in_flight(b, FEW_BATCHES))

    s = b.scale
    await b.timer.interleaved(many, few, s.in_flight_warmup)
    runs.clear()
    many_runs, few_runs = await b.timer.interleaved(many, few, s.in_flight_pairs)
    many_info = [r for r in runs if r.batches == IN_FLIGHT_BATCHES]
    few_info = [r for r in runs if r.batches == FEW_BATCHES]
    growth_many = max(r.growth for r in many_info)
    growth_few = max(r.growth for r in few_info)
    median = _med(walls(many_runs))
    threads_before = min(r.threads_before for r in many_info)
    threads_peak = max(r.threads_peak for r in many_info)
    no_thread_per_batch = growth_many <= growth_few and growth_many < FEW_BATCHES
    m.sides = {
        f"{IN_FLIGHT_BATCHES}_batches": summarize(walls(many_runs)),
        f"{FEW_BATCHES}_batches": summarize(walls(few_runs)),
    }
    m.cpu = {
        f"{IN_FLIGHT_BATCHES}_batches": cpu_json(many_runs, IN_FLIGHT_BATCHES),
        f"{FEW_BATCHES}_batches": cpu_json(few_runs, FEW_BATCHES),
    }
    m.rounds = [r.to_json() for r in runs]
    m.details = {
        "thread_growth_max": {str(IN_FLIGHT_BATCHES): growth_many, str(FEW_BATCHES): growth_few},
        "threads_before": threads_before,
        "threads_peak": threads_peak,
        "peak_batches_in_flight": max(r.peak_in_flight for r in many_info),
        "no_thread_per_batch": no_thread_per_batch,
        "latency_met": median <= IN_FLIGHT_TARGET_S,
        "floor_ms": ms(IN_FLIGHT_SLEEP_S * 2),
    }
    m.met = median <= IN_FLIGHT_TARGET_S and no_thread_per_batch
    m.result = f"{ms(median):.0f} ms, threads {threads_before}->{threads_peak}"
    return m


# -- anchors (no target) --------------------------------------------------------------------------


async def measure_anchors(b: Bench) -> dict[str, Any]:
    """Redis PING and a bare publish: the floors the measures stand on."""
    reps = b.scale.anchor_reps
    pings = [0.0] * reps
    for index in range(reps):
        start = time.perf_counter()
        b.redis.ping()
        pings[index] = time.perf_counter() - start
    publishes = [0.0] * reps
    for index in range(reps):
        start = time.perf_counter()
        b.publisher.send_task("bench.raw_noop", queue=ANCHOR_QUEUE, ignore_result=True)
        publishes[index] = time.perf_counter() - start
    b.redis.delete(ANCHOR_QUEUE)
    return {
        "redis_ping": summarize(pings).to_json(),
        "publish_only": summarize(publishes).to_json(),
        "note": f"publish_only: make_publisher(settings).send_task(...) to queue {ANCHOR_QUEUE!r}, which no "
        "worker consumes (so the worker does not compete for the CPU)",
    }


# -- running and reporting ------------------------------------------------------------------------

Runner = Callable[[Bench], Awaitable[Measure]]

# In report order. `deadline` runs last: its abandoned calls occupy worker threads for 5 s.
MEASURES: dict[str, Runner] = {
    "1": measure_single,
    "2": measure_batch,
    "3": measure_deadline,
    "4": measure_sleeps,
    "5": measure_in_flight,
}
RUN_ORDER = ["1", "2", "4", "5", "3"]


async def run_all(b: Bench) -> tuple[dict[str, Measure], dict[str, Any]]:
    measures: dict[str, Measure] = {}
    anchors = await measure_anchors(b)
    for number in RUN_ORDER:
        runner = MEASURES[number]
        started = time.monotonic()
        try:
            measure = await runner(b)
        except Exception as exc:
            measure = Measure(runner.__name__, runner.__name__.removeprefix("measure_"), "", "")
            measure.error = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        measure.details["seconds"] = round(time.monotonic() - started, 2)
        measures[number] = measure
        summary = measure.result or measure.error
        print(f"bench: {number}. {measure.title}: {summary} [{measure.verdict}]", file=sys.stderr, flush=True)
    gc.collect()  # run pending AsyncResult finalizers while Redis clients still work
    return {number: measures[number] for number in MEASURES}, anchors


def _main_p90(measure: Measure) -> str:
    if not measure.sides:
        return ""
    first = next(iter(measure.sides.values()))
    return f"{ms(first.p90):.{2 if first.p90 < 0.1 else 0}f} ms"


def table(measures: dict[str, Measure], anchors: dict[str, Any]) -> str:
    rows = [("#", "measure", "result (median)", "p90", "target", "verdict")]
    for number, m in measures.items():
        rows.append((number, m.title, m.result or str(m.error), _main_p90(m), m.target, m.verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    ping = anchors["redis_ping"]
    publish = anchors["publish_only"]
    lines.append("")
    lines.append(
        f"anchors: Redis PING {ping['median_ms']:.3f} ms (p90 {ping['p90_ms']:.3f}), "
        f"bare Celery publish {publish['median_ms']:.3f} ms (p90 {publish['p90_ms']:.3f})"
    )
    missed = [f"{n}. {m.title}" for n, m in measures.items() if m.verdict != "met"]
    if missed:
        lines.append(f"MISSED {len(missed)} of {len(measures)} targets: " + "; ".join(missed))
    else:
        lines.append(f"all {len(measures)} targets met")
    return "\n".join(lines)


def write_json(report: dict[str, Any], stamp: str) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    path = RESULTS_DIR / f"{stamp}.json"
    path.write_text(text)
    (RESULTS_DIR / "latest.json").write_text(text)
    return path


def _prepare_redis(url: str) -> str | None:
    """Flush the benchmark's database; the server's version, or None (with a message) if unreachable."""
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        server = client.info("server")
        client.flushdb()
        return str(server.get("redis_version"))
    except redis.RedisError as exc:
        print(f"bench: no Redis at {redact(url)} ({exc}); `make bench` starts one", file=sys.stderr)
        return None
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="toolfleet benchmarks with targets")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, noisier)")
    parser.add_argument("--no-save", action="store_true", help="print the table only, write no JSON")
    args = parser.parse_args(argv)

    url = bench_redis_url()
    # Client, bench.worker's app and the worker subprocess all use the benchmark's database.
    for variable in ("TOOLFLEET_REDIS_URL", "TOOLFLEET_BROKER_URL", "TOOLFLEET_RESULT_BACKEND"):
        os.environ[variable] = url
    redis_version = _prepare_redis(url)
    if redis_version is None:
        return 2

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    started_at = datetime.now(UTC)
    started = time.monotonic()
    machine = machine_info()
    worker = BenchWorker(url, dict(os.environ), concurrency=WORKER_CONCURRENCY)
    bench: Bench | None = None
    failed = False
    try:
        print(f"bench: Redis {redact(url)}; starting worker {worker.hostname}", file=sys.stderr, flush=True)
        ready_s = worker.start()
        bench = Bench(Scale.quick() if args.quick else Scale(), worker.pid)
        measures, anchors = asyncio.run(run_all(bench))
    except KeyboardInterrupt:
        print("bench: interrupted; stopping the worker", file=sys.stderr)
        return 128 + (signal.SIGTERM if _Signals.terminated else signal.SIGINT)
    except (RuntimeError, TimeoutError, OSError, redis.RedisError) as exc:
        failed = True
        print(f"bench: could not run: {exc}", file=sys.stderr)
        return 1
    finally:
        try:
            if bench is not None:
                bench.close()
        finally:
            stopping = time.monotonic()
            worker.stop()
            signal.signal(signal.SIGTERM, previous)
            print(f"bench: worker stopped in {time.monotonic() - stopping:.1f} s", file=sys.stderr)
            if failed:
                print(worker.log_tail(), file=sys.stderr)
            worker.remove_log()

    machine["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    machine["redis_server"] = redis_version
    report = {
        "started_at": started_at.isoformat(timespec="seconds"),
        "duration_s": round(time.monotonic() - started, 1),
        "quick": args.quick,
        "redis_url": redact(url),
        "machine": machine,
        "worker": {
            "command": " ".join(worker.command[1:]),
            "pool": "threads",
            "concurrency": worker.concurrency,
            "ready_s": round(ready_s, 3),
        },
        "anchors": anchors,
        "summary": {
            "met": [n for n, m in measures.items() if m.verdict == "met"],
            "missed": [n for n, m in measures.items() if m.verdict != "met"],
        },
        "measures": {n: m.to_json() for n, m in measures.items()},
    }
    print(table(measures, anchors))
    if not args.no_save:
        path = write_json(report, started_at.strftime("%Y%m%dT%H%M%SZ"))
        shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
        print(f"\nresults: {shown} (and {RESULTS_DIR.name}/latest.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
