"""Stock Celery twins of the benchmark's worker, for measures 1 and 2.

Two workers of plain Celery (`bench.floor_app`: Celery's own Redis transport and result backend,
one no-op task), each on a queue of its own, with the benchmark worker's pool (`-P threads -c 100`,
prefetch 1, no gossip or mingle):

- `celery`: at equal visibility with toolfleet (what Flower shows): task events on the worker (`-E`)
  and from the client (`task-sent`), STARTED states stored;
- `lean`: the floor, events and STARTED states off.

The benchmark calls each through a client app of the same settings: `apply_async()` then `get()`,
the result heard on the backend's pub/sub channel (Celery's `ResultConsumer`). Against `lean`,
toolfleet is also measured with its task events off (`quiet_toolfleet`: a worker of its own for the
`bench.quiet` pool, and an executor that sends no `task-sent`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._worker import REPO, BenchWorker, log_tail, spawn, stop_group
from bench.floor_app import NOOP, make_floor_app

__all__ = ["QUIET", "TWINS", "Quiet", "Twin", "quiet_toolfleet", "twins"]

# name: (task events and STARTED states on, queue)
TWINS = {"celery": (True, "bench.twin.celery"), "lean": (False, "bench.twin.lean")}
READY_TIMEOUT_S = 60.0
QUIET = "bench.quiet"  # the pool of toolfleet's quiet worker


@dataclass
class Twin:
    name: str
    app: Any
    noop: Any
    worker_pid: int


@contextlib.contextmanager
def twins(url: str, env: Mapping[str, str], concurrency: int) -> Iterator[dict[str, Twin]]:
    """Both twins' workers started and answering a first no-op; stopped (with their process groups)
    on the way out."""
    processes: list[Any] = []
    logs: list[Path] = []
    try:
        started: dict[str, Twin] = {}
        for name, (visible, queue) in TWINS.items():
            handle, log_name = tempfile.mkstemp(prefix=f"toolfleet-bench-{name}-", suffix=".log")
            os.close(handle)
            logs.append(Path(log_name))
            flags = {
                "BENCH_FLOOR_EVENTS": "1" if visible else "0",
                "BENCH_FLOOR_STARTED": "1" if visible else "0",
            }
            child_env = {
                **{k: v for k, v in env.items() if not k.startswith("BENCH_FLOOR_")},
                **flags,
                "BENCH_FLOOR_URL": url,
                "BENCH_FLOOR_QUEUE": queue,
                "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
            }
            command = [sys.executable, "-m", "celery", "-A", "bench.floor_app", "worker", "-P", "threads"]
            command += ["-c", str(concurrency), "-Q", queue, "--without-gossip", "--without-mingle"]
            command += ["-n", f"{name}-{os.getpid()}@%h", "-l", "WARNING"] + (["-E"] if visible else [])
            process = spawn(command, child_env, logs[-1])
            processes.append(process)
            app = make_floor_app(url, events=visible, started=visible, queue=queue)
            started[name] = Twin(name, app, app.tasks[NOOP], process.pid)
        for twin, log in zip(started.values(), logs, strict=True):
            try:
                twin.noop.apply_async().get(timeout=READY_TIMEOUT_S)
            except Exception as exc:
                tail = log_tail(log, twin.name)
                raise RuntimeError(f"the {twin.name} twin worker did not answer: {exc}{tail}") from exc
        yield started
    finally:
        for process in processes:
            stop_group(process, 15.0)
        for log in logs:
            with contextlib.suppress(OSError):
                log.unlink()


@dataclass
class Quiet:
    """toolfleet with task events off (`TOOLFLEET_TASK_EVENTS=false`): its own worker of the
    `bench.quiet` pool and an executor that sends no `task-sent` event."""

    executor: Any
    noop: Any
    worker_pid: int


@contextlib.contextmanager
def quiet_toolfleet(url: str, env: Mapping[str, str], concurrency: int) -> Iterator[Quiet]:
    """The quiet worker started (in the catalog) and its executor; both stopped on the way out."""
    from bench import tools
    from orchestrator.executors.celery import CeleryExecutor
    from workers.settings import Settings

    worker = BenchWorker(url, {**env, "TOOLFLEET_TASK_EVENTS": "false"}, concurrency=concurrency, queue=QUIET)
    executor = None
    try:
        worker.start()
        assert worker.pid is not None
        settings = dataclasses.replace(Settings.from_env(env), task_events=False)
        executor = CeleryExecutor(settings=settings, tools=[tools])
        yield Quiet(executor, executor.registry.get("quiet_noop"), worker.pid)
    finally:
        if executor is not None:
            executor.close()
        worker.stop()
