"""Measure 10: the 100-call batch through `AiService` with tracing on (spans exported over OTLP/HTTP to
a local receiver that answers and keeps nothing) against tracing off, interleaved."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from statistics import median
from typing import Any

from bench._context import BATCH_SIZE, Bench
from bench._timing import Measure, ms, summarize, walls
from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest
from workers.telemetry.tracing import setup_tracing, stop_tracing

TARGET_RATIO = 1.10
WARMUP = 2  # pairs
PAIRS = 12


@contextlib.contextmanager
def _no_op_receiver() -> Iterator[str]:
    """An OTLP/HTTP endpoint on loopback that answers every export with 200 and keeps nothing."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def measure_tracing(b: Bench) -> Measure:
    m = Measure(
        "tracing_batch_100",
        f"{BATCH_SIZE} no-ops, tracing on vs off",
        f"one AiService invocation whose model asks for {BATCH_SIZE} noop calls at once, with the "
        "orchestrator's tracing on (OTLP/HTTP, batch span processor, to a no-op receiver on loopback) "
        "and off, interleaved; overhead = median over pairs of on / off.",
        f"median overhead <= {TARGET_RATIO - 1:.0%}",
    )
    calls = [ToolExecutionRequest(id=f"n{i}", name=b.noop.name, arguments="{}") for i in range(BATCH_SIZE)]

    def service() -> AiService:
        model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "done"])
        return AiService(chat_model=model, tools=[b.noop], executor=b.executor)

    async def off() -> None:
        stop_tracing()
        await service().achat("go")

    with _no_op_receiver() as endpoint:
        environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}

        async def on() -> None:
            setup_tracing("toolfleet-bench", environ=environ)
            await service().achat("go")

        try:
            on_runs, off_runs = await b.interleaved(on, off, warmup=WARMUP, pairs=PAIRS)
        finally:
            stop_tracing()
    on_times, off_times = walls(on_runs), walls(off_runs)
    ratio = median([t_on / t_off for t_on, t_off in zip(on_times, off_times, strict=True)])
    m.rounds = [
        {"on_ms": ms(a), "off_ms": ms(o), "ratio": round(a / o, 3)}
        for a, o in zip(on_times, off_times, strict=True)
    ]
    m.sides = {"tracing_on": summarize(on_times), "tracing_off": summarize(off_times)}
    m.details = {"median_ratio": round(ratio, 3)}
    m.met = ratio <= TARGET_RATIO
    m.result = f"x{ratio:.3f} ({ms(median(on_times)):.0f} ms on, {ms(median(off_times)):.0f} ms off)"
    return m
