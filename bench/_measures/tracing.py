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
from workers.telemetry.tracing import setup_tracing, stop_tracing, tracer_provider

TARGET_RATIO = 1.10
WARMUP = 2  # pairs
PAIRS = 12


@contextlib.contextmanager
def _no_op_receiver() -> Iterator[tuple[str, list[int]]]:
    """An OTLP/HTTP endpoint on loopback that answers every export with 200 and keeps nothing but
    their count (the list's one item: span exports received at /v1/traces)."""
    received = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            received[0] += self.path == "/v1/traces"
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
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

    with _no_op_receiver() as (endpoint, receiver_posts):
        # One provider for the whole measure; switching tracing on and off costs nothing itself, and
        # spans go out in the background, as in a service (their export is not waited for).
        setup_tracing("toolfleet-bench", environ={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
        provider = tracer_provider()
        assert provider is not None

        async def on() -> None:
            setup_tracing("toolfleet-bench", tracer_provider=provider)
            await service().achat("go")

        async def off() -> None:
            stop_tracing(flush=False)
            await service().achat("go")

        try:
            on_runs, off_runs = await b.interleaved(on, off, warmup=WARMUP, pairs=PAIRS)
            stop_tracing()  # every span exported: the receiver answered them all
            exported = receiver_posts[0]
        finally:
            stop_tracing(flush=False)
            provider.shutdown()
    on_times, off_times = walls(on_runs), walls(off_runs)
    ratio = median([t_on / t_off for t_on, t_off in zip(on_times, off_times, strict=True)])
    m.rounds = [
        {"on_ms": ms(a), "off_ms": ms(o), "ratio": round(a / o, 3)}
        for a, o in zip(on_times, off_times, strict=True)
    ]
    m.sides = {"tracing_on": summarize(on_times), "tracing_off": summarize(off_times)}
    m.details = {"median_ratio": round(ratio, 3), "span_exports_received": exported}
    m.met = ratio <= TARGET_RATIO and exported > 0  # no export received: the spans went nowhere
    m.result = f"x{ratio:.3f} ({ms(median(on_times)):.0f} ms on, {ms(median(off_times)):.0f} ms off)"
    return m
