"""Timing helpers: samples and their summaries, interleaved A/B rounds, and a measure's record."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Measure",
    "Sample",
    "Summary",
    "Timer",
    "cpu_json",
    "ms",
    "process_cpu_s",
    "summarize",
    "walls",
]

Side = Callable[[], Awaitable[object]]


@dataclass(frozen=True)
class Summary:
    """The distribution of one side's samples, in seconds."""

    n: int
    median: float
    p90: float
    min: float
    max: float
    mean: float

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "median_ms": ms(self.median),
            "p90_ms": ms(self.p90),
            "min_ms": ms(self.min),
            "max_ms": ms(self.max),
            "mean_ms": ms(self.mean),
        }


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def p90(values: Sequence[float]) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[8]


def summarize(samples: Sequence[float]) -> Summary:
    if not samples:
        raise ValueError("no samples")
    return Summary(
        n=len(samples),
        median=statistics.median(samples),
        p90=p90(samples),
        min=min(samples),
        max=max(samples),
        mean=statistics.fmean(samples),
    )


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` (all threads), from /proc; None where unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Sample:
    """One timed run: wall seconds, and CPU seconds of this process and of the worker meanwhile."""

    wall: float
    client_cpu: float
    worker_cpu: float | None


class Timer:
    """Times awaitables; also meters this process's CPU and, from /proc, the worker's."""

    def __init__(self, worker_pid: int | None = None) -> None:
        self.worker_pid = worker_pid

    async def run(self, side: Side, worker_pid: int | None = None) -> Sample:
        """One timed run of `side`, with the CPU of `worker_pid` (by default the benchmark's worker)."""
        worker_pid = worker_pid or self.worker_pid
        worker_before = process_cpu_s(worker_pid) if worker_pid else None
        cpu_before = time.process_time()
        start = time.perf_counter()
        await side()
        wall = time.perf_counter() - start
        client_cpu = time.process_time() - cpu_before
        worker_after = process_cpu_s(worker_pid) if worker_pid else None
        worker_cpu = None
        if worker_before is not None and worker_after is not None:
            worker_cpu = worker_after - worker_before
        return Sample(wall, client_cpu, worker_cpu)

    async def interleaved(self, a: Side, b: Side, pairs: int) -> tuple[list[Sample], list[Sample]]:
        """Run `a` and `b` alternately, `pairs` times each; the order flips every pair (AB, BA, AB…).

        Noise from the machine (another process, a CPU frequency step) then lands on both sides
        alike, and neither side always runs right after the other one.
        """
        runs_a: list[Sample] = []
        runs_b: list[Sample] = []
        for index in range(pairs):
            if index % 2 == 0:
                runs_a.append(await self.run(a))
                runs_b.append(await self.run(b))
            else:
                runs_b.append(await self.run(b))
                runs_a.append(await self.run(a))
        return runs_a, runs_b

    async def rotated(
        self, sides: dict[str, Side], times: int, worker_pids: dict[str, int] | None = None
    ) -> dict[str, list[Sample]]:
        """Run every side `times` times, one of each in turn, the order rotating each turn (ABC, BCA,
        CAB…): `interleaved` for more than two sides. A side's worker CPU is that of its process in
        `worker_pids`, by default the benchmark's worker."""
        pids = worker_pids or {}
        names = list(sides)
        runs: dict[str, list[Sample]] = {name: [] for name in names}
        for index in range(times):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                runs[name].append(await self.run(sides[name], pids.get(name)))
        return runs

    async def repeat(self, side: Side, times: int) -> list[Sample]:
        return [await self.run(side) for _ in range(times)]


def walls(samples: Sequence[Sample]) -> list[float]:
    return [sample.wall for sample in samples]


def cpu_json(samples: Sequence[Sample], calls_per_run: int) -> dict[str, float | None]:
    """Mean CPU per run and per call, client and worker (the worker's /proc clock ticks are 10 ms:
    only means over many runs are meaningful; its work for one run may spill into the next run)."""
    runs = len(samples)
    client = sum(s.client_cpu for s in samples) / runs
    worker_values = [s.worker_cpu for s in samples if s.worker_cpu is not None]
    worker = sum(worker_values) / len(worker_values) if worker_values else None
    return {
        "client_cpu_ms_per_run": ms(client),
        "worker_cpu_ms_per_run": ms(worker) if worker is not None else None,
        "client_cpu_ms_per_call": ms(client / calls_per_run),
        "worker_cpu_ms_per_call": ms(worker / calls_per_run) if worker is not None else None,
    }


@dataclass
class Measure:
    """One benchmark: what it measured, its headline result, the target, and whether it was met."""

    key: str
    title: str
    description: str
    target: str
    result: str = ""
    met: bool = False
    sides: dict[str, Summary] = field(default_factory=dict)
    cpu: dict[str, dict[str, float | None]] = field(default_factory=dict)
    rounds: list[dict[str, float]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    skipped: str | None = None  # why the measure could not run here (e.g. a service that does not answer)

    @property
    def verdict(self) -> str:
        if self.error is not None:
            return "ERROR"
        if self.skipped is not None:
            return "skipped"
        return "met" if self.met else "MISSED"

    def skip(self, why: str) -> Measure:
        """Mark the measure as not run here, saying why; returns it."""
        self.skipped = why
        self.result = f"skipped: {why}"
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "description": self.description,
            "target": self.target,
            "result": self.result,
            "verdict": self.verdict,
            "met": self.met and self.error is None and self.skipped is None,
            "sides": {name: summary.to_json() for name, summary in self.sides.items()},
            "cpu": self.cpu,
            "rounds": self.rounds,
            "details": self.details,
            "error": self.error,
            "skipped": self.skipped,
        }
