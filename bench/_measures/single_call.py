"""Measure 1: a one-call response through `AiService` against the same call as a stock Celery task,
at equal visibility and on the lean floor (`bench._twins`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from statistics import median
from typing import Any

from bench._commands import commands_per_call, total
from bench._context import WORKER_CONCURRENCY, Bench, bench_redis_url, expect
from bench._timing import Measure, Sample, Side, cpu_json, ms, summarize, walls
from bench._twins import Quiet, Twin, quiet_toolfleet, twins
from orchestrator import (
    AiMessage,
    AiService,
    ScriptedChatModel,
    ToolExecutionRequest,
    UserMessage,
    send_exception_message_to_llm,
)
from orchestrator.models.base import ChatRequest
from workers import OutcomeKind

VISIBLE_TARGET = 1.0  # against stock Celery with the same events and STARTED states
LEAN_TARGET = 1.25  # against stock Celery with events and STARTED states off
WARMUP = 30  # turns
ROUNDS = 7
TURNS = 40  # per round: each side once per turn, the order rotating
COUNTED = 200  # calls of each side whose Redis commands are counted


def response(b: Bench, calls: int, executor: Any = None, noop: Any = None) -> Side:
    """An `AiService` answer whose model asks for `calls` `noop` calls at once, then answers (on the
    benchmark's executor and `noop`, unless given others); the service is built once, as a server
    builds its agents."""
    executor, noop = executor or b.executor, noop or b.noop
    requests = [ToolExecutionRequest(id=f"n{i}", name=noop.name, arguments="{}") for i in range(calls)]

    def model(request: ChatRequest) -> AiMessage:
        if isinstance(request.messages[-1], UserMessage):
            return AiMessage(tool_execution_requests=requests)
        return AiMessage(text="done")

    scripted = ScriptedChatModel(model)
    service = AiService(
        chat_model=scripted,
        tools=[noop],
        executor=executor,
        tool_arguments_error_handler=send_exception_message_to_llm(),
        tool_execution_error_handler=send_exception_message_to_llm(),
    )

    async def respond() -> None:
        scripted.requests.clear()
        result = await service.achat("go")
        if result.content != "done" or len(result.tool_executions) != calls:
            raise RuntimeError("the response did not end with the model's answer")
        if any(e.has_failed for e in result.tool_executions):
            raise RuntimeError(f"a call failed: {result.tool_executions[0].result}")

    return respond


def raw_call(twin: Twin) -> Side:
    async def call() -> None:
        if twin.noop.apply_async().get(timeout=10) != "ok":
            raise RuntimeError(f"the {twin.name} twin returned something else than ok")

    return call


def ratios(rounds: list[dict[str, list[Sample]]], side: str, against: str) -> list[float]:
    return [median(walls(r[side])) / median(walls(r[against])) for r in rounds]


@contextmanager
def peers() -> Iterator[tuple[dict[str, Twin], Quiet]]:
    """The stock Celery twins and toolfleet's quiet worker, started for one measure."""
    url, env = bench_redis_url(), dict(os.environ)
    concurrency = WORKER_CONCURRENCY
    with twins(url, env, concurrency) as started, quiet_toolfleet(url, env, concurrency) as quiet:
        yield started, quiet


def verdict(rounds: list[dict[str, list[Sample]]]) -> tuple[dict[str, float], bool]:
    """The ratios of the targets (and of toolfleet with events on to the lean floor), and whether both
    targets were met."""
    found = {
        "median_ratio": median(ratios(rounds, "toolfleet", "celery")),
        "median_ratio_quiet_lean": median(ratios(rounds, "toolfleet_quiet", "lean")),
        "median_ratio_lean": median(ratios(rounds, "toolfleet", "lean")),
    }
    met = found["median_ratio"] <= VISIBLE_TARGET and found["median_ratio_quiet_lean"] <= LEAN_TARGET
    return {k: round(v, 4) for k, v in found.items()}, met


def headline(found: dict[str, float]) -> str:
    return (
        f"x{found['median_ratio']:.2f} celery, x{found['median_ratio_quiet_lean']:.2f} lean "
        f"(events off; x{found['median_ratio_lean']:.2f} with them)"
    )


async def measure_single(b: Bench) -> Measure:
    m = Measure(
        "single_call",
        "1-call response: toolfleet / raw Celery",
        "An AiService answer whose scripted model asks for one `noop` call on the benchmark's worker, "
        "then answers, against `noop.apply_async().get()` on a stock Celery twin worker (same pool, "
        "Celery's own transport and result backend, the result heard on its pub/sub channel): `celery` "
        "with task events (worker and task-sent) and STARTED states on, as toolfleet has them; `lean` "
        "with both off. `toolfleet_quiet` is toolfleet with its task events off "
        "(TOOLFLEET_TASK_EVENTS=false, a worker of its own), compared with `lean`. `executor` is the "
        "call through CeleryExecutor.execute "
        "alone. Sides "
        "rotated (ABCD, BCDA, …); the result is the median over rounds of each round's ratio of medians.",
        f"<= {VISIBLE_TARGET:g}x celery; events off, <= {LEAN_TARGET:g}x lean",
    )

    async def executor_call() -> None:
        expect([await b.executor.execute(b.request("noop"), b.noop)], OutcomeKind.SUCCESS)

    with peers() as (started, quiet):
        sides = {
            "toolfleet": response(b, 1),
            "toolfleet_quiet": response(b, 1, quiet.executor, quiet.noop),
            "executor": executor_call,
            "celery": raw_call(started["celery"]),
            "lean": raw_call(started["lean"]),
        }
        pids = {name: twin.worker_pid for name, twin in started.items()}
        pids["toolfleet_quiet"] = quiet.worker_pid
        await b.timer.rotated(sides, b.reps(WARMUP), pids)
        rounds = [await b.timer.rotated(sides, b.reps(TURNS), pids) for _ in range(b.reps(ROUNDS))]
        counted = b.reps(COUNTED)
        commands = {name: await commands_per_call(b.redis, side, counted) for name, side in sides.items()}
    runs = {name: [s for r in rounds for s in r[name]] for name in sides}
    found, met = verdict(rounds)
    m.rounds = [
        {f"{name}_median_ms": ms(median(walls(r[name]))) for name in sides}
        | {"ratio_celery": round(median(walls(r["toolfleet"])) / median(walls(r["celery"])), 4)}
        for r in rounds
    ]
    m.sides = {name: summarize(walls(samples)) for name, samples in runs.items()}
    m.cpu = {name: cpu_json(samples, 1) for name, samples in runs.items()}
    m.details = found | {
        "executor_ratio": round(median(ratios(rounds, "executor", "celery")), 4),
        "redis_commands_per_call": {side: total(counts) for side, counts in commands.items()},
        "redis_commands": commands,
    }
    m.met = met
    wall = {name: ms(median(walls(samples))) for name, samples in runs.items()}
    count = {name: total(counts) for name, counts in commands.items()}
    m.result = (
        f"{headline(found)}: {wall['toolfleet']:.2f} vs {wall['celery']:.2f} ms, "
        f"{wall['toolfleet_quiet']:.2f} vs {wall['lean']:.2f} ms; Redis commands {count['toolfleet']:g} "
        f"vs {count['celery']:g}, {count['toolfleet_quiet']:g} vs {count['lean']:g}"
    )
    return m
