"""Measure 11: measure 10's 100-call invocation with OpenTelemetry not installed against installed with
tracing off, each in a process of its own (`bench/batch_child.py`); a second installed process, run
the same way, measures the noise.

This process has OpenTelemetry loaded (measure 10, and redis-py imports its metrics SDK whenever it is
installed), so the sides run in child processes: `absent` hides it before anything is imported,
`installed` and `installed_again` are plain. All three use the benchmark's worker and settings, no
`OTEL_*` variable, and take turns in rounds (A B B', B B' A, B' A B, …).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import fields
from pathlib import Path
from statistics import median, quantiles
from typing import Any

from bench._child import BatchChild
from bench._context import BATCH_SIZE, Bench
from bench._timing import Measure, Sample, cpu_json, ms, process_cpu_s, summarize, walls
from bench._worker import REPO
from bench.batch_child import WITHOUT_FLAG
from workers.settings import ENVIRONMENT, Settings

NOISE_FLOOR = 0.03
GENERATIONS = 3  # sets of fresh processes: the noise between processes is measured too
WARMUP = 2  # rounds, per generation
ROUNDS = 8  # per generation
READY_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 60.0
ABSENT, INSTALLED, AGAIN = "absent", "installed", "installed_again"
SIDES = (ABSENT, INSTALLED, AGAIN)
# The spread of one ratio from the interquartile range (of a normal distribution: 1.349 sigma), and
# the standard error of a median of n such ratios: 1.2533 sigma / sqrt(n).
IQR_PER_SIGMA = 1.349
MEDIAN_SE_PER_SIGMA = 1.2533


def child_environment(settings: Settings) -> dict[str, str]:
    """The benchmark's environment without any `OTEL_*` variable, with every `TOOLFLEET_*` setting
    written out from `settings` (so a child's settings are the benchmark's own) and the repository
    on `PYTHONPATH`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TOOLFLEET_"))}
    for item in fields(Settings):
        value = getattr(settings, item.name)
        if value is not None:
            env[ENVIRONMENT[item.name]] = str(value).lower() if isinstance(value, bool) else str(value)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    if Settings.from_env(env) != settings:
        raise RuntimeError("the children's TOOLFLEET_* variables do not give the benchmark's settings")
    return env


def noise_band(controls: Sequence[float], generations: Sequence[float] = ()) -> float:
    """How far from 1 a median of ratios may be between two identical sides, from the rounds' ratios
    `controls` of two such sides and the medians of those ratios per generation of processes
    (`generations`): the largest of `NOISE_FLOOR`, twice the standard error of their median (the
    spread of one ratio from their interquartile range), how far their own median is from 1, and how
    far any generation's is (two identical processes differ more than two runs of one process)."""
    deviations = [abs(median(controls) - 1), *(abs(g - 1) for g in generations)]
    if len(controls) < 2:
        return max(NOISE_FLOOR, *deviations)
    first, _, third = quantiles(controls, n=4, method="inclusive")
    sigma = (third - first) / IQR_PER_SIGMA
    standard_error = MEDIAN_SE_PER_SIGMA * sigma / math.sqrt(len(controls))
    return max(NOISE_FLOOR, 2 * standard_error, *deviations)


async def _run(child: BatchChild, worker_pid: int | None) -> Sample:
    """One invocation in `child`: its own wall and CPU time, and the worker's CPU meanwhile."""
    worker_before = process_cpu_s(worker_pid) if worker_pid else None
    wall, cpu = (float(value) for value in (await asyncio.to_thread(child.ask, "run", RUN_TIMEOUT_S)).split())
    worker_after = process_cpu_s(worker_pid) if worker_pid else None
    worker_cpu = None
    if worker_before is not None and worker_after is not None:
        worker_cpu = worker_after - worker_before
    return Sample(wall, cpu, worker_cpu)


async def _rounds(children: list[BatchChild], count: int, worker_pid: int | None) -> dict[str, list[Sample]]:
    """`count` rounds of one run per child; each round starts one child further (A B C, B C A, …)."""
    samples: dict[str, list[Sample]] = {child.side: [] for child in children}
    for index in range(count):
        shift = index % len(children)
        for child in children[shift:] + children[:shift]:
            samples[child.side].append(await _run(child, worker_pid))
    return samples


def _ratios(tops: Sequence[float], bottoms: Sequence[float]) -> list[float]:
    return [top / bottom for top, bottom in zip(tops, bottoms, strict=True)]


async def _generation(
    b: Bench,
    env: dict[str, str],
    setup_s: dict[str, list[float]],
    probes: dict[str, list[int]],
    ends: dict[str, Any],
) -> dict[str, list[Sample]]:
    """One generation: three fresh children, warmed up, then `ROUNDS` rounds; each child's set-up
    time, its count of OpenTelemetry calls in one more invocation (`probe`) and its last words."""
    flags = {ABSENT: [WITHOUT_FLAG], INSTALLED: [], AGAIN: []}
    # Every child is stopped on the way out (each one even if stopping another fails), before its
    # directory goes.
    with tempfile.TemporaryDirectory(prefix="toolfleet-bench-otel-") as directory, ExitStack() as running:
        children = [BatchChild(side, side_flags, env, Path(directory)) for side, side_flags in flags.items()]
        for child in children:  # one at a time: each one's set-up time is its own
            running.callback(child.stop)
            child.start()
            setup_s[child.side].append(await asyncio.to_thread(child.ready, READY_TIMEOUT_S))
        await _rounds(children, b.reps(WARMUP), b.timer.worker_pid)
        samples = await _rounds(children, b.reps(ROUNDS), b.timer.worker_pid)
        for child in children:
            probes[child.side].append(int(await asyncio.to_thread(child.ask, "probe", RUN_TIMEOUT_S)))
            ends[child.side] = json.loads(child.ask("end", RUN_TIMEOUT_S))
    return samples


async def measure_otel_absent(b: Bench) -> Measure:
    m = Measure(
        "otel_absent_batch_100",
        f"{BATCH_SIZE} no-ops, otel extra absent vs installed",
        f"measure 10's invocation (an AiService whose model asks for {BATCH_SIZE} noop calls at once "
        "through CeleryExecutor) in three child processes with tracing off and no OTEL_* variable: "
        "`absent`, where OpenTelemetry is hidden from the import system before anything is imported "
        "(as if `toolfleet[otel]` were not installed), `installed` and `installed_again`, plain. "
        f"{GENERATIONS} generations of three fresh processes, each warmed up, then rounds of one run "
        "each, the order rotating; ratio = median over all rounds of absent / installed; noise = the "
        "largest of 3 %, twice the standard error of a median of the rounds' installed_again / "
        "installed ratios (sigma from their interquartile range / 1.349), and how far their median, "
        "overall and in any one generation, is from 1. After its rounds each child runs one more "
        "invocation under a profile hook counting the calls into OpenTelemetry's code.",
        f"|ratio - 1| <= noise (>= {NOISE_FLOOR:.0%}); no opentelemetry module in `absent`; "
        "no call into it in `installed`",
    )
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        return m.skip("the otel extra is not installed here: nothing to compare")
    env = child_environment(b.settings)
    samples: dict[str, list[Sample]] = {side: [] for side in SIDES}
    generation_controls, generation_ratios = [], []
    setup_s: dict[str, list[float]] = {side: [] for side in SIDES}
    probes: dict[str, list[int]] = {side: [] for side in SIDES}
    ends: dict[str, Any] = {}
    for _ in range(GENERATIONS):
        generation = await _generation(b, env, setup_s, probes, ends)
        for side in SIDES:
            samples[side] += generation[side]
        installed_walls = walls(generation[INSTALLED])
        generation_controls.append(median(_ratios(walls(generation[AGAIN]), installed_walls)))
        generation_ratios.append(median(_ratios(walls(generation[ABSENT]), installed_walls)))
    absent, installed, again = (walls(samples[side]) for side in (ABSENT, INSTALLED, AGAIN))
    ratios, controls = _ratios(absent, installed), _ratios(again, installed)
    ratio, band = median(ratios), noise_band(controls, generation_controls)
    cpu_of = {side: [sample.client_cpu for sample in samples[side]] for side in samples}
    cpu_controls = _ratios(cpu_of[AGAIN], cpu_of[INSTALLED])
    m.rounds = [
        {
            "absent_ms": ms(a),
            "installed_ms": ms(i),
            "installed_again_ms": ms(g),
            "absent_ratio": round(a / i, 3),
            "control_ratio": round(g / i, 3),
        }
        for a, i, g in zip(absent, installed, again, strict=True)
    ]
    m.sides = {side: summarize(walls(samples[side])) for side in (ABSENT, INSTALLED, AGAIN)}
    m.cpu = {side: cpu_json(samples[side], BATCH_SIZE) for side in (ABSENT, INSTALLED, AGAIN)}
    m.details = {
        "median_ratio": round(ratio, 3),
        "control_ratio": round(median(controls), 3),
        "noise_band": round(band, 3),
        "cpu_median_ratio": round(median(_ratios(cpu_of[ABSENT], cpu_of[INSTALLED])), 3),
        "cpu_control_ratio": round(median(cpu_controls), 3),
        "cpu_noise_band": round(noise_band(cpu_controls), 3),
        "opentelemetry_modules": {side: len(end["loaded"]) for side, end in ends.items()},
        "opentelemetry_importable": {side: end["importable"] for side, end in ends.items()},
        "generation_ratios": [round(r, 3) for r in generation_ratios],
        "generation_control_ratios": [round(r, 3) for r in generation_controls],
        "opentelemetry_calls_in_one_invocation": {side: max(counts) for side, counts in probes.items()},
        "setup_s": {side: [round(seconds, 3) for seconds in times] for side, times in setup_s.items()},
        "child_command": f"python -m bench.batch_child [{WITHOUT_FLAG}]",
    }
    hidden = not ends[ABSENT]["loaded"] and not ends[ABSENT]["importable"]
    # Both installed sides must see the package: else the comparison is of two absences.
    installed_seen = ends[INSTALLED]["importable"] and ends[AGAIN]["importable"]
    # With the package installed and tracing off, not one call goes into its code: the sides run the same.
    untouched = not any(probes[INSTALLED]) and not any(probes[AGAIN])
    m.met = abs(ratio - 1) <= band and hidden and installed_seen and untouched
    m.result = (
        f"x{ratio:.3f}, noise ±{band:.1%} ({ms(median(absent)):.0f} vs {ms(median(installed)):.0f} ms; "
        f"installed twice x{median(controls):.3f})"
    )
    return m
