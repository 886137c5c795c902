"""One trace per invocation, across processes: the orchestrator's spans go to the SDK's in-memory
exporter, a real worker process exports its own over OTLP/HTTP to a receiver this test runs, and the
worker's spans hang under the orchestrator's through the message headers."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest
from orchestrator.executors.celery import CeleryExecutor
from tests._tracing import traced_to_memory
from tests.integration import telemetry_tools
from tests.integration.worker_processes import tool_worker
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

TOOLS = "tests.integration.telemetry_tools"


@pytest.fixture(scope="module")
def traced_worker(redis_url: str, worker_logs: Path, receiver: OtlpReceiver) -> Iterator[WorkerProcess]:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "test-worker",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    worker = tool_worker(
        redis_url,
        [telemetry_tools.POOL_A, telemetry_tools.POOL_B],
        [TOOLS],
        worker_logs / f"traced-{uuid.uuid4().hex[:6]}.log",
        f"traced-{uuid.uuid4().hex[:6]}@test",
        env=env,
    )
    with worker.running(timeout_s=60) as running:
        yield running


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    with traced_to_memory("test-orchestrator") as memory:
        yield memory


def test_an_invocation_is_one_trace_with_the_workers_spans_under_the_orchestrators(
    settings: Settings, traced_worker: WorkerProcess, receiver: OtlpReceiver, exporter: InMemorySpanExporter
) -> None:
    # Given: a model asking for two calls on two pools, the second failing, so the first is undone
    ns = uuid.uuid4().hex
    calls = [
        ToolExecutionRequest(id="r1", name="reserve", arguments=json.dumps({"ns": ns, "item": "lamp"})),
        ToolExecutionRequest(
            id="c1", name="charge", arguments=json.dumps({"ns": ns, "amount": 5, "decline": True})
        ),
    ]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "Sorry, the card was declined"])
    executor = CeleryExecutor(settings=dataclasses.replace(settings))
    service = AiService(
        chat_model=model, tools=[telemetry_tools.shop], executor=executor, compensate_on_tool_errors=True
    )

    # When: it runs
    try:
        result = service.chat("Buy a lamp")
    finally:
        executor.close()

    # Then: the orchestrator's spans are one trace, under the invocation's span
    assert result.content == "Sorry, the card was declined"
    local = {s.name: s for s in exporter.get_finished_spans()}
    assert {
        "invoke_agent default",
        "execute_tool reserve",
        "execute_tool charge",
        "compensate reserve",
    } <= set(local), sorted(local)
    root = local["invoke_agent default"]
    trace_id = format(root.context.trace_id, "032x")
    assert {format(s.context.trace_id, "032x") for s in local.values()} == {trace_id}
    chats = [s for s in exporter.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(chats) == 2
    assert all(s.parent is not None and s.parent.span_id == root.context.span_id for s in chats)
    # and: the GenAI attributes of the orchestrator's tool calls
    reserve = local["execute_tool reserve"]
    assert reserve.attributes["gen_ai.operation.name"] == "execute_tool"
    assert reserve.attributes["gen_ai.tool.name"] == "reserve"
    assert reserve.attributes["gen_ai.tool.call.id"] == "r1"
    assert reserve.attributes["toolfleet.pool"] == telemetry_tools.POOL_A
    assert local["execute_tool charge"].attributes["toolfleet.pool"] == telemetry_tools.POOL_B
    assert local["execute_tool charge"].attributes["toolfleet.outcome.kind"] == "execution_error"
    assert local["compensate reserve"].attributes["toolfleet.compensation.result"] == "succeeded"

    # And: the worker's spans arrive over OTLP, in the same trace, each run a child of its call's span
    runs = {"run/tool.reserve", "run/tool.charge", "run/compensate.reserve"}
    received = [s for s in receiver.wait_for(runs) if s.trace_id == trace_id]
    by_name: dict[str, ReceivedSpan] = {s.name: s for s in received}
    assert runs <= set(by_name), sorted(by_name)
    local_ids = {format(s.context.span_id, "032x")[-16:]: s.name for s in local.values()}
    assert local_ids[by_name["run/tool.reserve"].parent_id] == "execute_tool reserve"
    assert local_ids[by_name["run/tool.charge"].parent_id] == "execute_tool charge"
    assert local_ids[by_name["run/compensate.reserve"].parent_id] == "compensate reserve"
    assert {s.service for s in received} == {"test-worker"}
    # and: every other worker span is a descendant of one of those runs, with the GenAI attributes
    worker_ids = {s.span_id: s for s in received}
    for span in received:
        if span.name.startswith("run/"):
            continue
        assert worker_ids[span.parent_id].name.startswith("run/"), span
        assert span.attributes["gen_ai.tool.name"] in ("reserve", "charge"), span
        assert span.attributes["toolfleet.worker"] == traced_worker.hostname
    worker_tool = next(s for s in received if s.name == "execute_tool reserve")
    assert worker_tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert worker_tool.attributes["gen_ai.tool.call.id"] == "r1"
    assert worker_tool.attributes["toolfleet.outcome.kind"] == "success"
    assert worker_tool.attributes["toolfleet.invocation.id"] == result.invocation_id


def test_a_tools_progress_reports_are_events_of_its_span_on_the_worker(
    settings: Settings, traced_worker: WorkerProcess, receiver: OtlpReceiver, exporter: InMemorySpanExporter
) -> None:
    call = ToolExecutionRequest(id="t1", name="tally", arguments=json.dumps({"steps": 3}))
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[call]), "counted"])
    executor = CeleryExecutor(settings=dataclasses.replace(settings))
    try:
        result = AiService(chat_model=model, tools=[telemetry_tools.tally], executor=executor).chat("count")
    finally:
        executor.close()

    assert result.content == "counted"
    [local] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool tally"]
    trace_id = format(local.context.trace_id, "032x")
    receiver.wait_for({"execute_tool tally"})
    [run] = [s for s in receiver.spans if s.name == "execute_tool tally" and s.trace_id == trace_id]
    assert run.events == ["progress", "progress", "progress"]  # each report, sent as made
    assert run.attributes["toolfleet.outcome.kind"] == "success"
