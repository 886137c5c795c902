"""Measure 9: how soon a tool's progress report reaches `AiService.stream()` as a `ToolProgress`.

The tool stamps each report (`ProgressReport.at`, wall clock) as it makes it; the latency is the
wall clock when `stream()` yields the event minus that stamp (tool, worker and orchestrator share
this machine's clock). Reports are paced above the rate limit (50 ms), so none waits for it: the
figure is the path worker → result backend → collector → event loop → stream.
"""

from __future__ import annotations

import json
import time

from bench._context import Bench
from bench._timing import Measure, ms, summarize
from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest, ToolProgress

TARGET_S = 0.020
REPORTS = 120
INTERVAL_S = 0.06  # above the reporter's 50 ms rate limit


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def measure_progress(b: Bench) -> Measure:
    m = Measure(
        "progress",
        f"progress report -> ToolProgress in stream() ({INTERVAL_S * 1000:.0f} ms apart)",
        "Wall time from a tool's progress() (the report's own timestamp) to the ToolProgress event "
        f"AiService.stream() yields for it; report_steps reports every {INTERVAL_S * 1000:.0f} ms, above "
        "the 50 ms rate limit, so no report is held; median and p99 over the reports of one call.",
        f"median <= {ms(TARGET_S):.0f} ms",
    )
    count = b.reps(REPORTS)
    arguments = json.dumps({"count": count, "interval_s": INTERVAL_S})
    script: list[AiMessage | str] = [
        AiMessage(tool_execution_requests=[ToolExecutionRequest("p1", "report_steps", arguments)]),
        "done",
    ]
    service = AiService(chat_model=ScriptedChatModel(script), executor=b.executor)
    latencies: list[float] = []
    async for event in service.stream("report"):
        if isinstance(event, ToolProgress):
            latencies.append(time.time() - event.at.timestamp())
    if not latencies:
        raise RuntimeError("report_steps reported no progress through stream()")
    took = summarize(latencies)
    p99 = _p99(latencies)
    m.sides = {"report_to_event": took}
    m.details = {"reports": count, "received": len(latencies), "p99_ms": ms(p99)}
    m.met = took.median <= TARGET_S
    m.result = f"median {ms(took.median):.1f} ms, p99 {ms(p99):.1f} ms ({len(latencies)} of {count} reports)"
    return m
