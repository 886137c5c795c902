"""Measure 2: a 100-call response through `AiService` against 100 stock Celery tasks sent at once and
awaited, at equal visibility and on the lean floor (`bench._twins`)."""

from __future__ import annotations

from statistics import median

from bench._context import BATCH_SIZE, Bench
from bench._measures.single_call import LEAN_TARGET, VISIBLE_TARGET, headline, peers, response, verdict
from bench._timing import Measure, Side, cpu_json, ms, summarize, walls
from bench._twins import Twin

WARMUP = 2  # turns
ROUNDS = 3
TURNS = 5  # per round: each side once per turn, the order rotating


def raw_batch(twin: Twin) -> Side:
    """`BATCH_SIZE` `apply_async()` at once, then each one's `get()` (the pub/sub channel of each)."""

    async def batch() -> None:
        results = [twin.noop.apply_async() for _ in range(BATCH_SIZE)]
        if any(result.get(timeout=30) != "ok" for result in results):
            raise RuntimeError(f"the {twin.name} twin returned something else than ok")

    return batch


async def measure_batch(b: Bench) -> Measure:
    m = Measure(
        "batch_100",
        f"{BATCH_SIZE}-call response: toolfleet / raw Celery",
        f"An AiService answer whose scripted model asks for {BATCH_SIZE} `noop` calls at once, then "
        f"answers, against {BATCH_SIZE} `noop.apply_async()` then each result's `get()` on the stock "
        "Celery twins of measure 1 (`celery`: events and STARTED on; `lean`: off), and on toolfleet's quiet "
        "worker (`toolfleet_quiet`, task events off). Sides rotated; the "
        "result is the median over rounds of each round's ratio of medians.",
        f"<= {VISIBLE_TARGET:g}x celery; events off, <= {LEAN_TARGET:g}x lean",
    )
    with peers() as (started, quiet):
        sides = {
            "toolfleet": response(b, BATCH_SIZE),
            "toolfleet_quiet": response(b, BATCH_SIZE, quiet.executor, quiet.noop),
            "celery": raw_batch(started["celery"]),
            "lean": raw_batch(started["lean"]),
        }
        pids = {name: twin.worker_pid for name, twin in started.items()}
        pids["toolfleet_quiet"] = quiet.worker_pid
        await b.timer.rotated(sides, b.reps(WARMUP), pids)
        rounds = [await b.timer.rotated(sides, b.reps(TURNS), pids) for _ in range(b.reps(ROUNDS))]
    runs = {name: [s for r in rounds for s in r[name]] for name in sides}
    found, met = verdict(rounds)
    m.rounds = [{f"{name}_median_ms": ms(median(walls(r[name]))) for name in sides} for r in rounds]
    m.sides = {name: summarize(walls(samples)) for name, samples in runs.items()}
    m.cpu = {name: cpu_json(samples, BATCH_SIZE) for name, samples in runs.items()}
    m.details = found
    m.met = met
    wall = {name: ms(median(walls(samples))) for name, samples in runs.items()}
    m.result = (
        f"{headline(found)}: {wall['toolfleet']:.0f} vs {wall['celery']:.0f} ms, "
        f"{wall['toolfleet_quiet']:.0f} vs {wall['lean']:.0f} ms"
    )
    return m
