"""`python -m bench._dbos_child [--schema NAME]`: DBOS Transact for measure 16, in a process of its own.

DBOS is a process-wide singleton with threads of its own (a poller per queue, a pool running the
dequeued workflows), so it stays out of the benchmark's process. This process imports nothing of
toolfleet: the standard library and `dbos` only.

Its system database is the schema NAME (default `toolfleet_bench_dbos`) of the PostgreSQL database at
`TOOLFLEET_BENCH_POSTGRES_URL` (default `postgresql+psycopg://postgres@127.0.0.1:5432/test`), dropped
when the process starts and again when it ends: DBOS keeps its queues in the system database and polls
every queue it finds there, so what an earlier run left would be polled too.

The benchmark drives it over stdin and stdout, one line each way:

- it prints `ready <seconds> <dbos version>` once DBOS is launched, its queue registered and one call
  has gone through it (the seconds that took), or `skip <reason>` if `dbos` cannot be imported (then
  it exits with status 0);
- `one`: one no-op step enqueued on the queue, and its result waited for;
- `direct`: the fastest path, without the queue: a workflow of one no-op step called in this thread;
- `sleeps`: `CALLS` steps sleeping `SLEEP_S` each, enqueued one after the other, then every result
  waited for (the queue runs up to `CALLS` at once);
- `batches`: `BATCHES` successive batches of `CALLS` no-op steps, each batch enqueued then waited for;
- each answers one JSON object: `wall` (seconds), `cpu` (CPU seconds of this process, all its threads,
  DBOS's pollers included) and, for `batches`, `batch_walls`;
- `end` (or the end of stdin) shuts DBOS down, drops the schema and exits.

A call that does not return its result ends the process with an error on stderr; the benchmark then
sees its stdout close. The settings (`QUEUE_POLL_S`, `RESULT_POLL_S`, `EXECUTOR_THREADS`) and why are
in bench/_measures/dbos_peer.py.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "BATCHES",
    "CALLS",
    "DEFAULT_SCHEMA",
    "EXECUTOR_THREADS",
    "QUEUE_POLL_S",
    "RESULT_POLL_S",
    "SLEEP_S",
    "main",
]

DEFAULT_POSTGRES_URL = (
    "postgresql+psycopg://postgres@127.0.0.1:5432/test"  # as bench/_measures/serve_journal.py
)
POSTGRES_URL_VARIABLE = "TOOLFLEET_BENCH_POSTGRES_URL"
DEFAULT_SCHEMA = "toolfleet_bench_dbos"
APPLICATION = "toolfleet-bench"
QUEUE = "toolfleet_bench"
CALLS = 100  # calls of one batch, and the queue's slots (worker_concurrency)
BATCHES = 10
SLEEP_S = 0.1
QUEUE_POLL_S = 0.01  # the queue's polling_interval_sec (DBOS's default: 1 s)
RESULT_POLL_S = 0.001  # get_result's polling_interval_sec (DBOS's default: 1 s)
EXECUTOR_THREADS = 128  # max_executor_threads: room for the CALLS slots (Python's default here: 6)
WARMUP_CALLS = 5
OK = "ok"


def _answer(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _drop_schema(url: str, schema: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        engine.dispose()


class Peer:
    """DBOS launched on the schema, one queue of `CALLS` slots, and the functions the commands time."""

    def __init__(self, url: str, schema: str) -> None:
        from dbos import DBOS, DBOSConfig

        self.dbos = DBOS
        config: DBOSConfig = {
            "name": APPLICATION,
            "system_database_url": url,
            "dbos_system_schema": schema,
            "max_executor_threads": EXECUTOR_THREADS,
            "log_level": "WARNING",
        }
        DBOS(config=config)

        # Registered before launch, as DBOS requires; named, so their names do not depend on this code.
        @DBOS.step(name="toolfleet_bench.noop")
        def noop() -> str:
            return OK

        @DBOS.step(name="toolfleet_bench.sleep_for")
        def sleep_for(seconds: float) -> str:
            time.sleep(seconds)
            return OK

        @DBOS.workflow(name="toolfleet_bench.noop_workflow")
        def noop_workflow() -> str:
            return noop()

        self.noop, self.sleep_for, self.noop_workflow = noop, sleep_for, noop_workflow
        DBOS.launch()
        self.queue = DBOS.register_queue(
            QUEUE, worker_concurrency=CALLS, polling_interval_sec=QUEUE_POLL_S, on_conflict="always_update"
        )

    def call(self, function: Callable[..., str], *arguments: Any) -> None:
        """One enqueued call, its result waited for."""
        _expect([self.queue.enqueue(function, *arguments).get_result(polling_interval_sec=RESULT_POLL_S)])

    def calls(self, function: Callable[..., str], *arguments: Any) -> None:
        """`CALLS` calls enqueued one after the other, then every result waited for."""
        handles = [self.queue.enqueue(function, *arguments) for _ in range(CALLS)]
        _expect([handle.get_result(polling_interval_sec=RESULT_POLL_S) for handle in handles])

    def direct(self) -> None:
        _expect([self.noop_workflow()])

    def close(self) -> None:
        self.dbos.destroy()


def _expect(results: Sequence[object]) -> None:
    wrong = [result for result in results if result != OK]
    if wrong:
        raise RuntimeError(f"{len(wrong)} calls returned something else than {OK!r}: {wrong[:3]!r}")


def _timed(run: Callable[[], object]) -> dict[str, Any]:
    cpu_before = time.process_time()
    wall_before = time.perf_counter()
    extra = run()
    answer: dict[str, Any] = {
        "wall": time.perf_counter() - wall_before,
        "cpu": time.process_time() - cpu_before,
    }
    if isinstance(extra, dict):
        answer.update(extra)
    return answer


def _serve(peer: Peer) -> None:
    def batches() -> dict[str, list[float]]:
        walls = []
        for _ in range(BATCHES):
            started = time.perf_counter()
            peer.calls(peer.noop)
            walls.append(time.perf_counter() - started)
        return {"batch_walls": walls}

    commands: dict[str, Callable[[], object]] = {
        "one": lambda: peer.call(peer.noop),
        "direct": peer.direct,
        "sleeps": lambda: peer.calls(peer.sleep_for, SLEEP_S),
        "batches": batches,
    }
    for line in sys.stdin:
        command = line.strip()
        if command == "end":
            return
        if command not in commands:
            raise RuntimeError(f"unknown command {command!r}")
        _answer(json.dumps(_timed(commands[command])))


def main(argv: Sequence[str]) -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(prog="python -m bench._dbos_child")
    parser.add_argument("--schema", default=DEFAULT_SCHEMA, help="the system database's schema (dropped)")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", args.schema):
        parser.error(f"--schema must be a lower-case SQL name, not {args.schema!r}")
    try:
        import dbos  # noqa: F401
    except ImportError as exc:
        _answer(f"skip dbos cannot be imported (the bench extra: pip install 'toolfleet[bench]'): {exc}")
        return 0
    url = os.environ.get(POSTGRES_URL_VARIABLE) or DEFAULT_POSTGRES_URL
    _drop_schema(url, args.schema)
    peer = Peer(url, args.schema)
    try:
        for _ in range(WARMUP_CALLS):  # the first waits for the queue's poller to start (up to 1 s)
            peer.call(peer.noop)
        version = importlib.metadata.version("dbos")
        _answer(f"ready {time.perf_counter() - started:.6f} {version}")
        _serve(peer)
    finally:
        peer.close()
        _drop_schema(url, args.schema)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
