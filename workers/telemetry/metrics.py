"""A worker's Prometheus metrics, per tool and pool: what ran here, how long it waited and took.

`toolfleet worker --metrics-port PORT` serves them at `http://HOST:PORT/metrics`. They are kept in
prometheus_client's multiprocess mode, in a directory of this worker's own that the command makes
and removes, so a prefork pool's children (each call in its own process) add up to one view, as a
threads pool's one process does. Without `--metrics-port` they are kept in memory and served by no
one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["MULTIPROC_VARIABLE", "WorkerMetrics", "serve_worker_metrics", "worker_metrics"]

MULTIPROC_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"

# Seconds: from a fraction of a millisecond (a no-op on loopback) to the longest tool calls.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


@dataclass(frozen=True)
class WorkerMetrics:
    """The metrics a worker keeps (prometheus_client objects)."""

    runs: Any
    duration: Any
    queue_wait: Any
    in_flight: Any
    retries: Any
    deadline_misses: Any
    compensations: Any


_metrics: list[WorkerMetrics] = []


def worker_metrics() -> WorkerMetrics:
    """This process's metrics, made on first use (after `serve_worker_metrics` chose where they live)."""
    if not _metrics:
        from prometheus_client import Counter, Gauge, Histogram

        labels = ("tool", "pool")
        _metrics.append(
            WorkerMetrics(
                runs=Counter(
                    "toolfleet_worker_tool_runs",
                    "Tool calls run on this worker, by outcome kind (a retried attempt counts as retry)",
                    (*labels, "outcome"),
                ),
                duration=Histogram(
                    "toolfleet_worker_tool_run_duration_seconds",
                    "How long a tool call ran on this worker",
                    labels,
                    buckets=DURATION_BUCKETS,
                ),
                queue_wait=Histogram(
                    "toolfleet_worker_queue_wait_seconds",
                    "From its publication to the start of its first attempt, per call (wall clocks)",
                    labels,
                    buckets=DURATION_BUCKETS,
                ),
                in_flight=Gauge(
                    "toolfleet_worker_tool_runs_in_flight",
                    "Tool calls running on this worker now",
                    labels,
                    multiprocess_mode="livesum",
                ),
                retries=Counter(
                    "toolfleet_worker_tool_retries", "Attempts of a tool call retried after a failure", labels
                ),
                deadline_misses=Counter(
                    "toolfleet_worker_deadline_misses",
                    "Calls that did not start or finish before their deadline on this worker",
                    labels,
                ),
                compensations=Counter(
                    "toolfleet_worker_compensation_runs",
                    "Compensations run on this worker, by result (succeeded, failed)",
                    (*labels, "result"),
                ),
            )
        )
    return _metrics[0]


@contextlib.contextmanager
def serve_worker_metrics(port: int, host: str = "0.0.0.0") -> Iterator[str]:
    """Serve the metrics of this worker and its pool's processes at `http://host:port/metrics` while
    the block runs, from a fresh multiprocess directory (yielded) removed at its end."""
    directory = tempfile.mkdtemp(prefix="toolfleet-metrics-")
    previous = os.environ.get(MULTIPROC_VARIABLE)
    os.environ[MULTIPROC_VARIABLE] = directory  # read by the pool's processes, forked or spawned
    try:
        from prometheus_client import CollectorRegistry, start_http_server, values
        from prometheus_client.multiprocess import MultiProcessCollector

        # The value class is chosen when prometheus_client is first imported: choose it again now
        # the directory is set, before any of the worker's metrics is made.
        values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
        registry = CollectorRegistry()
        collector = MultiProcessCollector(None, path=directory)  # type: ignore[no-untyped-call]
        registry.register(_LiveProcessesCollector(collector, directory))
        server, thread = start_http_server(port, addr=host, registry=registry)
        try:
            yield directory
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
    finally:
        if previous is None:
            os.environ.pop(MULTIPROC_VARIABLE, None)
        else:
            os.environ[MULTIPROC_VARIABLE] = previous
        shutil.rmtree(directory, ignore_errors=True)


class _LiveProcessesCollector:
    """The multiprocess collector, which first drops the live gauges of pool processes that died
    without a word (SIGKILL, the OOM killer): a call in flight in one would be counted forever."""

    def __init__(self, collector: Any, directory: str) -> None:
        self.collector = collector
        self.directory = directory

    def collect(self) -> Any:
        for pid in _dead_processes(self.directory):
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, self.directory)  # type: ignore[no-untyped-call]
        return self.collector.collect()


def _dead_processes(directory: str) -> set[int]:
    """The processes that wrote live gauges in `directory` (files `gauge_live<mode>_<pid>.db`) and
    are gone."""
    dead = set()
    for path in Path(directory).glob("gauge_live*_*.db"):
        pid = path.stem.rsplit("_", 1)[-1]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            dead.add(int(pid))
        except PermissionError:
            pass  # alive, someone else's
    return dead


def process_ended(pid: int) -> None:
    """Drop the live gauges of a pool process that ended (its counters stay counted)."""
    if os.environ.get(MULTIPROC_VARIABLE):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
