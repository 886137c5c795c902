"""The telemetry of a wait for a person, in one process (the cross-process trace is tested on real
workers in tests/integration/approvals): each decided call's wait is a span under the paused
invocation's and an observation of `toolfleet_approval_wait_seconds` by decision; the resumption is a
child of the paused invocation's span."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from orchestrator import (
    AiMessage,
    AiService,
    Journal,
    LocalExecutor,
    ScriptedChatModel,
    ToolExecutionRequest,
    approve,
    reject,
)
from tests._tracing import traced_to_memory
from workers import tool


@tool(requires_approval=True)
def wire(amount: int) -> str:
    return f"wired {amount}"


def _service(journal: Journal, **options: float) -> AiService:
    asks = AiMessage(tool_execution_requests=[ToolExecutionRequest("w1", "wire", json.dumps({"amount": 7}))])
    return AiService(
        chat_model=ScriptedChatModel(lambda request: asks if len(request.messages) == 1 else "done"),
        tools=[wire],
        executor=LocalExecutor(),
        journal=journal,
        name="teller",
        **options,
    )


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    with traced_to_memory("test-approvals") as memory:
        yield memory


def waits(decision: str) -> float:
    labels = {"tool": "wire", "pool": "default", "decision": decision}
    return REGISTRY.get_sample_value("toolfleet_approval_wait_seconds_count", labels) or 0.0


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def test_an_approved_wait_is_a_span_under_the_paused_invocation_and_a_histogram_observation(
    journal: Journal, exporter: InMemorySpanExporter
) -> None:
    service = _service(journal)
    before = waits("approved")
    paused = service.chat("go")
    time.sleep(0.2)

    done = service.resume(paused.invocation_id or "", {"w1": approve()}, by="ana")

    assert done is not None and done.content == "done"
    assert waits("approved") == before + 1
    spans = exporter.get_finished_spans()
    first, resumed = named(spans, "invoke_agent teller")
    assert first.parent is None and [e.name for e in first.events] == ["approval requested"]
    assert first.attributes is not None and first.attributes["gen_ai.response.finish_reasons"] == (
        "approval_required",
    )
    [wait] = named(spans, "await_approval wire")
    assert wait.parent is not None and wait.parent.span_id == first.context.span_id
    assert wait.attributes is not None and wait.attributes["toolfleet.approval.decided_by"] == "ana"
    assert wait.attributes["toolfleet.approval.arguments_edited"] is False
    assert wait.start_time is not None and wait.end_time is not None
    assert wait.end_time - wait.start_time >= 0.2e9
    assert resumed.parent is not None and resumed.parent.span_id == first.context.span_id
    assert resumed.context.trace_id == first.context.trace_id
    [run] = named(spans, "execute_tool wire")
    assert run.parent is not None and run.parent.span_id == resumed.context.span_id


def test_rejected_and_expired_waits_are_counted_by_their_decision(journal: Journal) -> None:
    rejected, expired = waits("rejected"), waits("expired")
    service = _service(journal)
    service.resume(service.chat("go").invocation_id or "", {"w1": reject("no")})
    assert waits("rejected") == rejected + 1

    hasty = _service(journal, approval_timeout_s=0.05)
    paused = hasty.chat("go")
    time.sleep(0.1)
    assert hasty.resume(paused.invocation_id or "") is not None
    assert waits("expired") == expired + 1
