"""Measure 3: how soon a call past its deadline comes back `TIMED_OUT`, against Celery's `get(timeout=)`.

It runs last: a threads pool cannot stop an abandoned call, so each timed-out `sleep_for` holds a
worker thread for its whole sleep and would skew the measures after it.
"""

from __future__ import annotations

import dataclasses
import json
from statistics import median

from celery.exceptions import TimeoutError as CeleryTimeoutError

from bench._context import Bench, expect
from bench._timing import Measure, ms, summarize, walls
from workers import OutcomeKind
from workers.tools.versions import tool_version

DEADLINE_S = 0.3
TARGET_S = 0.35
SLOW_TOOL_S = 5.0
WARMUP = 1  # pairs
PAIRS = 8


async def measure_deadline(b: Bench) -> Measure:
    m = Measure(
        "deadline",
        f"{DEADLINE_S:g} s deadline on sleep_for({SLOW_TOOL_S:g})",
        f"Time from CeleryExecutor.execute(sleep_for({SLOW_TOOL_S:g})), the definition's timeout replaced "
        f"by {DEADLINE_S:g} s, to its TIMED_OUT outcome; against bench.raw_sleep({SLOW_TOOL_S:g})"
        f".apply_async().get(timeout={DEADLINE_S:g}) raising celery.exceptions.TimeoutError; interleaved. "
        "The abandoned calls keep worker threads busy (a threads pool cannot stop them), so this "
        "measure runs last.",
        f"median <= {ms(TARGET_S):.0f} ms",
    )
    options = dataclasses.replace(b.sleep_for.options, timeout=DEADLINE_S)
    # The worker's definition, with a shorter deadline on this side only: still the version it serves.
    slow = dataclasses.replace(b.sleep_for, options=options, version=tool_version(b.sleep_for))
    arguments = json.dumps({"seconds": SLOW_TOOL_S})

    async def tool_call() -> None:
        expect([await b.executor.execute(b.request("sleep_for", arguments), slow)], OutcomeKind.TIMED_OUT)

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

    tool_runs, raw_runs = await b.interleaved(tool_call, raw_call, warmup=WARMUP, pairs=PAIRS)
    tool_times, raw_times = walls(tool_runs), walls(raw_runs)
    took = median(tool_times)
    m.sides = {"executor": summarize(tool_times), "celery_get_timeout": summarize(raw_times)}
    m.rounds = [
        {"executor_ms": ms(t), "celery_ms": ms(r)} for t, r in zip(tool_times, raw_times, strict=True)
    ]
    m.details = {
        "deadline_ms": ms(DEADLINE_S),
        "executor_overshoot_ms": ms(took - DEADLINE_S),
        "celery_overshoot_ms": ms(median(raw_times) - DEADLINE_S),
    }
    m.met = took <= TARGET_S
    m.result = f"{ms(took):.0f} ms (Celery get: {ms(median(raw_times)):.0f} ms)"
    return m
