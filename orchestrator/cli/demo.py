"""`toolfleet demo`: the whole system on one machine — two worker pools, eight scripted stories.

An embedded Redis is started when none answers at `TOOLFLEET_REDIS_URL`; an `io` pool (threads) and a
`heavy` pool (prefork) run as worker processes with the example tools; the orchestrator discovers
the tools from the live catalog (it imports none of their code) and runs, in order: the square-root
example of the documentation, weather lookups fanned out in parallel, a bank transfer whose second
call fails and whose first is compensated, and a trip booking where the car rental times out and
the two other bookings are undone in reverse order, a fare watch cancelled after a few checks, and a
large transfer that waits for a person's approval and is approved, and goes on, in a second process,
and an outlook report rendered on the heavy pool and returned as an artifact, which the answer links
(`demo_report`); last, an MCP client calls the io pool's fare search through `toolfleet mcp serve`,
hearing its progress.
`--model openai:<name>` (or `anthropic:<name>`) runs the same tools with a real model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TextIO

from cryptography.fernet import Fernet

from orchestrator.cli.commands._journal_source import DEFAULT_DATABASE_URL
from orchestrator.cli.console import LiveTable, aligned, chat_model, cut, progress_text
from orchestrator.cli.demo_approval import approve_in_another_process, shared_environment
from orchestrator.cli.demo_mcp import MCP_STORY, mcp_story
from orchestrator.cli.demo_report import (
    REPORT_QUESTION,
    REPORT_STORY,
    report_script,
    shared_artifact_url,
    skipped_because,
    write_artifacts,
)
from orchestrator.cli.demo_scripts import Script, asks, call, last_results
from orchestrator.executors.celery import CeleryExecutor
from orchestrator.handlers import fail_invocation_unless_visible_to_llm, send_exception_message_to_llm
from orchestrator.messages import AiMessage, ToolExecutionResultMessage, UserMessage
from orchestrator.models.base import ChatModel, ChatRequest, CompleteToolCall
from orchestrator.models.scripted import ScriptedChatModel
from orchestrator.result import CompleteResponse, Result, ToolProgress
from orchestrator.saga.journal import Journal
from orchestrator.service import AiService
from workers.artifacts import ArtifactStore, store_for
from workers.examples.teller import teller, teller_script, transfer_asked
from workers.protocol import ToolExecution
from workers.redis_client import connect as connect_redis
from workers.runtime.catalog import Catalog
from workers.runtime.process import WorkerProcess
from workers.settings import Settings
from workers.tools import ToolDefinition

__all__ = ["STORIES", "run_demo", "write_summary"]


def _square_root(request: ChatRequest) -> AiMessage | str:
    if asks(request):
        return AiMessage(tool_execution_requests=[call("call_sqrt", "squareRoot", x=475695037565)])
    (result,) = last_results(request)
    return f"The square root of 475695037565 is {float(result.text):.6f}."


CITIES = ("London", "Kyiv", "Tokyo", "Lima", "Nairobi")


def _weather(request: ChatRequest) -> AiMessage | str:
    if asks(request):
        calls = [call(f"call_w{i}", "get_weather", city=c, delay_s=0.5) for i, c in enumerate(CITIES)]
        return AiMessage(tool_execution_requests=calls)
    parts = []
    for result in last_results(request):
        forecast = json.loads(result.text)
        parts.append(f"{forecast['city']} {forecast['temperature']}°C {forecast['summary']}")
    return "Forecasts: " + "; ".join(parts) + "."


def _transfer_asked(request: ChatRequest) -> tuple[float, str, str]:
    """Amount, payer and payee, read from the user's "Transfer <amount> from <payer> to <payee>", as a
    model would: the calls the script makes are the ones the user asked for."""
    question = next((m.text or "" for m in request.messages if isinstance(m, UserMessage)), "")
    asked = transfer_asked(question)
    if asked is None:
        raise ValueError(f"the transfer story cannot read a transfer from {question!r}")
    return asked


def _transfer(request: ChatRequest) -> AiMessage | str:
    amount, payer, payee = _transfer_asked(request)
    if asks(request):
        return AiMessage(tool_execution_requests=[call("call_credit", "credit", name=payee, amount=amount)])
    results = last_results(request)
    if results and results[-1].tool_name == "credit":
        return AiMessage(
            tool_execution_requests=[call("call_withdraw", "withdraw", name=payer, amount=amount)]
        )
    rolled = [
        m.text
        for m in request.messages
        if isinstance(m, ToolExecutionResultMessage) and m.id == "call_credit"
    ]
    return f"The transfer did not happen: {results[-1].text}. {rolled[0]}."


def _trip(request: ChatRequest) -> AiMessage | str:
    if asks(request):
        return AiMessage(
            tool_execution_requests=[
                call("call_flight", "book_flight", origin="Kyiv", destination="Lisbon", day="2026-12-24"),
                call("call_hotel", "book_hotel", city="Lisbon", nights=3),
                call("call_car", "rentCar", city="Lisbon", days=3),
            ]
        )
    return "I could not book the whole trip: " + " | ".join(m.text for m in last_results(request))


def _fares(request: ChatRequest) -> AiMessage | str:
    if asks(request):
        return AiMessage(tool_execution_requests=[call("call_search", "search_fares", destination="Lisbon")])
    results = last_results(request)
    if results[-1].tool_name == "search_fares":
        watch = call("call_watch", "watch_fare", destination="Lisbon", below=80)
        return AiMessage(tool_execution_requests=[watch])
    searched = next(m.text for m in request.messages if isinstance(m, ToolExecutionResultMessage))
    return f"{searched}. I stopped watching the fare: {results[-1].text}."


STORIES: list[tuple[str, str, Script]] = [
    ("Square root", "What is the square root of 475695037565?", _square_root),
    ("Weather, fanned out", f"What is the weather in {', '.join(CITIES)}?", _weather),
    # More than Mario's 1000 (workers/examples/bank.py): the withdrawal fails for want of funds.
    ("Bank transfer, compensated", "Transfer 2000 from Mario to Dmytro.", _transfer),
    ("Trip booking, a timeout undone", "Book me a flight, a hotel and a car in Lisbon for Christmas.", _trip),
    (
        "Fares, watched and cancelled",
        "Find me a fare to Lisbon, and watch it until it drops below 80 EUR.",
        _fares,
    ),
    # More than the teller's threshold: the transfer waits until a second process approves it.
    ("Large transfer, approved by another process", "Transfer 1500 from Olena to Dmytro.", teller_script),
    (REPORT_STORY, REPORT_QUESTION, report_script),
]
# The fifth story's user stops the fare watch once it has checked this many times.
WATCH_CHECKS_BEFORE_CANCEL = 5


def _model(spec: str | None, script: Script) -> ChatModel:
    return ScriptedChatModel(script) if spec is None else chat_model(spec)


def _service(
    model: ChatModel,
    script: Script,
    tools: list[ToolDefinition],
    executor: CeleryExecutor,
    journal: Journal,
) -> AiService:
    """The story's agent: the bank teller (whose large transfers wait for approval) for its story, one
    with the live catalog's tools for the others."""
    if script is teller_script:
        return teller(chat_model=model, executor=executor, tools=tools, journal=journal)
    return AiService(
        chat_model=model,
        tools=tools,
        executor=executor,
        # achat()'s defaults, set so that no notice about them interrupts the stories
        tool_arguments_error_handler=send_exception_message_to_llm(),
        tool_execution_error_handler=fail_invocation_unless_visible_to_llm(),
        compensate_on_tool_errors=True,
        journal=journal,
        name="demo",
    )


# The summary's columns at their narrowest: tool, status, pool, worker; a longer name widens its column.
SUMMARY_WIDTHS = (12, 16, 6, 12)
RESULT_WIDTH = 70


def write_summary(
    out: TextIO,
    title: str,
    result: Result,
    journal: Journal,
    placed: Mapping[tuple[str, str], tuple[str, str | None]],
    store: ArtifactStore | None = None,
) -> None:
    """The story's calls, each with where it ran (`placed`: as the live table showed it, else as its
    outcome tells), how long it took and its result; then the compensations, the artifacts the calls
    made (where they are in `store`), and the answer."""
    out.write(f"  Summary of '{title}' (invocation {result.invocation_id}):\n")
    rows = [_summary_row(execution, placed) for execution in result.tool_executions]
    widths = [max([width, *(len(row[i]) for row in rows)]) for i, width in enumerate(SUMMARY_WIDTHS)]
    for *cells, took, text in rows:
        out.write(f"    {aligned(cells, widths)} {took:>8}  {text}\n")
    compensations = journal.compensations(result.invocation_id)
    for compensation in compensations:
        out.write(f"    compensation of {compensation.tool}: {compensation.state} (#{compensation.id})\n")
    if store is not None:
        write_artifacts(out, result, store)
    out.write(f"  Answer: {result.content}\n\n")


def _summary_row(
    execution: ToolExecution, placed: Mapping[tuple[str, str], tuple[str, str | None]]
) -> tuple[str, ...]:
    """Tool, status, pool, worker, duration and result (on one line, cut) of one call."""
    pool, worker = placed.get((f"tool.{execution.request.name}", execution.request.id or ""), ("", None))
    took = f"{execution.duration_s * 1000:.0f} ms" if execution.duration_s is not None else "-"
    return (
        execution.request.name,
        execution.status,
        pool or execution.pool or "-",
        worker or execution.worker or "-",
        took,
        cut(" ".join(execution.result.split()), RESULT_WIDTH),
    )


@contextlib.contextmanager
def _pools(settings: Settings, logs: str, out: TextIO, artifact_url: str) -> Iterator[list[str]]:
    """The demo's worker pools: those already live (a deployed stack), else two started here."""
    catalog = Catalog(connect_redis(settings.redis_url))
    live = {pool: catalog.live_workers(pool) for pool in ("io", "heavy")}
    if all(live.values()):
        out.write(
            "Using the live worker pools: "
            + ", ".join(f"{p}: {', '.join(w)}" for p, w in live.items())
            + "\n"
        )
        yield [w for names in live.values() for w in names]
        out.write("The live worker pools were left running.\n")
        return
    out.write(
        "Starting worker pools: io (threads x16: weather, bank, fares), "
        "heavy (prefork x3: math, travel, report)\n"
    )
    with _own_pools(settings, logs, artifact_url) as workers:
        yield [w.hostname for w in workers]
    out.write("The demo's worker processes stopped.\n")


# The demo's pools: name, kind, concurrency, example modules.
DEMO_POOLS = (
    ("io", "threads", 16, ["workers.examples.weather", "workers.examples.bank", "workers.examples.fares"]),
    ("heavy", "prefork", 3, ["workers.examples.math", "workers.examples.travel", "workers.examples.report"]),
)


@contextlib.contextmanager
def _own_pools(settings: Settings, logs: str, artifact_url: str) -> Iterator[list[WorkerProcess]]:
    env = {
        "TOOLFLEET_ARTIFACT_URL": artifact_url,
        "TOOLFLEET_EXAMPLES_SLOW": "car=4",
        "TOOLFLEET_HEARTBEAT_TTL_S": "3",
        "TOOLFLEET_BROKER_URL": settings.broker_url,
        "TOOLFLEET_RESULT_BACKEND": settings.result_backend,
    }
    workers = [
        WorkerProcess(
            pools=[pool],
            modules=modules,
            redis_url=settings.redis_url,
            kind=kind,
            concurrency=concurrency,
            hostname=f"{pool}@demo",
            env=env,
            log_path=Path(logs) / f"{pool}.log",
        )
        for pool, kind, concurrency, modules in DEMO_POOLS
    ]
    try:
        for worker in workers:
            worker.wait_ready(timeout_s=60)
        yield workers
    finally:
        for worker in workers:
            worker.stop()


async def _streamed(service: AiService, question: str, table: LiveTable) -> Result:
    """One story's invocation, its calls' progress shown in the table as it comes; the fare watch is
    cancelled (by the user, as it were) once it has checked a few times."""
    invocation_id = str(uuid.uuid4())
    arguments: dict[str | None, str] = {}
    result: Result | None = None
    async for event in service.stream(question, invocation_id=invocation_id):
        if isinstance(event, CompleteToolCall):
            arguments[event.request.id] = event.request.arguments
        elif isinstance(event, ToolProgress):
            table.progress(
                f"tool.{event.tool_name}",
                arguments.get(event.request_id, ""),
                progress_text(event.fraction, event.message),
            )
            if event.tool_name == "watch_fare" and (event.message or "").startswith(
                f"checked {WATCH_CHECKS_BEFORE_CANCEL} "
            ):
                service.cancel_call(invocation_id, event.request_id or "")
        elif isinstance(event, CompleteResponse):
            result = event.result
    assert result is not None  # a stream ends with its CompleteResponse
    return result


def run_demo(out: TextIO, *, settings: Settings | None = None, model: str | None = None) -> int:
    """Run the eight stories; returns the exit code."""
    from workers._devredis import embedded_redis

    settings = settings or Settings.from_env()
    with tempfile.TemporaryDirectory(prefix="toolfleet-demo-") as scratch, embedded_redis(settings.redis_url):
        if settings.database_url != DEFAULT_DATABASE_URL:  # a journal of the user's (TOOLFLEET_DATABASE_URL)
            database_url, keys = settings.database_url, settings.journal_keys
        else:
            # A scratch journal that dies with the demo: sealed with a key of its own, used once.
            database_url, keys = f"sqlite:///{scratch}/demo.db", Fernet.generate_key().decode()
        journal = Journal(database_url, keys=keys)
        # Every process of the demo keeps its artifacts in one store, which outlives the demo.
        artifact_url = shared_artifact_url(settings)
        store = store_for(artifact_url)
        out.write(f"Artifacts are stored in {store.url} (TOOLFLEET_ARTIFACT_URL)\n")
        # A second process (the approval story's) reaches the same Redis, broker, journal and store.
        environment = shared_environment(settings, database_url, keys, artifact_url)
        started = time.monotonic()
        with _pools(settings, scratch, out, artifact_url) as workers:
            names = ", ".join(workers)
            out.write(f"Pools ready in {time.monotonic() - started:.1f} s: {names}\n\n")
            table = LiveTable(out)
            executor = CeleryExecutor(settings=settings, on_call=table)
            try:
                tools = executor.catalog_definitions()
                out.write(f"Tools found in the live catalog: {', '.join(sorted(t.name for t in tools))}\n\n")
                for number, (title, question, script) in enumerate(STORIES, 1):
                    out.write(f"== {number}. {title}\n  User: {question}\n")
                    skipped = skipped_because(script, [t.name for t in tools])
                    if skipped is not None:
                        out.write(f"  ({skipped})\n\n")
                        continue
                    service = _service(_model(model, script), script, tools, executor, journal)
                    began = time.monotonic()
                    result = asyncio.run(_streamed(service, question, table))
                    placed = table.placed()
                    table.close()
                    out.write(f"  ({time.monotonic() - began:.2f} s)\n")
                    if result.pending_approvals:
                        approve_in_another_process(out, result, journal, environment)
                        out.write("\n")
                    else:
                        write_summary(out, title, result, journal, placed, store)
                out.write(f"== {len(STORIES) + 1}. {MCP_STORY}\n")
                mcp_story(out, environment, scratch)
            finally:
                executor.close()
    out.write("Demo complete.\n")
    return 0
