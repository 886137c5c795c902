"""The anchors below the table, without targets: a Redis `PING` and a bare Celery publish."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench._context import Bench
from bench._timing import summarize

QUEUE = "bench.anchor"  # no worker consumes it, so the worker does not compete for the CPU
REPS = 300


def _times(action: Callable[[], object], reps: int) -> list[float]:
    """Wall seconds of `reps` synchronous calls of `action`, one by one."""
    times = [0.0] * reps
    for index in range(reps):
        start = time.perf_counter()
        action()
        times[index] = time.perf_counter() - start
    return times


async def measure_anchors(b: Bench) -> dict[str, Any]:
    """Redis PING and a bare publish: the floors the measures stand on."""
    reps = b.reps(REPS)
    pings = _times(b.redis.ping, reps)
    publishes = _times(lambda: b.publisher.send_task("bench.raw_noop", queue=QUEUE, ignore_result=True), reps)
    b.redis.delete(QUEUE)
    return {
        "redis_ping": summarize(pings).to_json(),
        "publish_only": summarize(publishes).to_json(),
        "note": f"publish_only: make_publisher(settings).send_task(...) to queue {QUEUE!r}, which no "
        "worker consumes (so the worker does not compete for the CPU)",
    }
