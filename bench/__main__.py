"""`python -m bench`: toolfleet's CeleryExecutor against raw Celery, on one real worker, and `toolfleet
serve` against in-process calls and with and without its journal, with targets.

Runs on a dedicated Redis database (db 14 of the server at `TOOLFLEET_REDIS_URL`, flushed at start;
`TOOLFLEET_BENCH_REDIS_DB` picks another), starts one threads-pool worker (`celery -A bench.worker`,
concurrency 100) that serves both the tool tasks and the raw baseline tasks, prints a table and
writes JSON to `bench/results/`. Measures 6 and 7 start a `toolfleet serve` replica of their own
(`bench/_replica.py`). A missed target is reported, not an error: the exit status is 0 unless the
benchmark itself could not run.

This module is the run's order of events; the measures are in `bench/_measures/`, the table and the
JSON in `bench/_report.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import redis

from bench._context import WORKER_CONCURRENCY, Bench, bench_redis_url
from bench._machine import load_average, machine_info
from bench._measures import MEASURES, RUN_ORDER, measure_anchors
from bench._report import RESULTS_DIR, build_report, table, write_json
from bench._timing import Measure
from bench._worker import BenchWorker
from workers.settings import redact_url


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


def _progress(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


async def run_all(b: Bench, only: frozenset[str] | None = None) -> tuple[dict[str, Measure], dict[str, Any]]:
    """The anchors, then every measure in `RUN_ORDER` (those in `only`, when given); a measure that
    fails is reported as an ERROR."""
    measures: dict[str, Measure] = {}
    anchors = await measure_anchors(b)
    for number in RUN_ORDER:
        if only is not None and number not in only:
            continue
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
        _progress(f"{number}. {measure.title}: {measure.result or measure.error} [{measure.verdict}]")
    gc.collect()  # run pending AsyncResult finalizers while Redis clients still work
    return {number: measures[number] for number in MEASURES if number in measures}, anchors


def _prepare_redis(url: str) -> str | None:
    """Flush the benchmark's database; the server's version, or None (with a message) if unreachable."""
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        server = client.info("server")
        client.flushdb()
        return str(server.get("redis_version"))
    except redis.RedisError as exc:
        print(f"bench: no Redis at {redact_url(url)} ({exc}); `make bench` starts one", file=sys.stderr)
        return None
    finally:
        client.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description="toolfleet benchmarks with targets")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, noisier)")
    parser.add_argument("--no-save", action="store_true", help="print the table only, write no JSON")
    parser.add_argument(
        "--only",
        type=_measure_numbers,
        metavar="N[,N]",
        help="run only these measures (and the anchors); the JSON is written without latest.json",
    )
    return parser.parse_args(argv)


def _measure_numbers(text: str) -> frozenset[str]:
    """`--only`'s measure numbers, each one of `MEASURES`."""
    numbers = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(numbers - set(MEASURES), key=lambda n: (len(n), n))
    if not numbers or unknown:
        raise argparse.ArgumentTypeError(
            f"no measure {', '.join(unknown) or repr(text)}; the measures are {', '.join(MEASURES)}"
        )
    return numbers


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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
        _progress(f"Redis {redact_url(url)}; starting worker {worker.hostname}")
        ready_s = worker.start()
        bench = Bench(quick=args.quick, worker_pid=worker.pid)
        measures, anchors = asyncio.run(run_all(bench, args.only))
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

    machine["load_average_end"] = load_average()
    machine["redis_server"] = redis_version
    report = build_report(
        started_at=started_at,
        duration_s=time.monotonic() - started,
        quick=args.quick,
        redis_url=url,
        machine=machine,
        worker={
            "command": " ".join(worker.command[1:]),
            "pool": "threads",
            "concurrency": worker.concurrency,
            "ready_s": round(ready_s, 3),
        },
        anchors=anchors,
        measures=measures,
    )
    print(table(measures, anchors))
    if not args.no_save:
        # latest.json stays the last run of every measure.
        path = write_json(report, started_at.strftime("%Y%m%dT%H%M%SZ"), latest=args.only is None)
        shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
        print(f"\nresults: {shown}" + ("" if args.only else f" (and {RESULTS_DIR.name}/latest.json)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
