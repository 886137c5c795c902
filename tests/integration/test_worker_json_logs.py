"""A real worker with `TOOLFLEET_LOG_FORMAT=json`, started either way (`toolfleet worker`, `celery -A
workers.app worker`), at DEBUG, with tracing on: every line it writes about a call is one JSON object
carrying the call (invocation id, call id, tool, pool, worker) and the trace of the invocation that
made it, the tool's failure and the arguments' newlines and non-ASCII text included."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.integration.log_tools as log_tools
from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest
from orchestrator.executors.celery import CeleryExecutor
from tests._tracing import traced_to_memory
from tests.integration.worker_processes import celery_worker, tool_worker
from tests.otlp_receiver import OtlpReceiver
from workers.settings import Settings

pytestmark = pytest.mark.integration

MODULE = "tests.integration.log_tools"


def _environment(receiver: OtlpReceiver) -> dict[str, str]:
    return {
        "TOOLFLEET_LOG_FORMAT": "json",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }


@contextlib.contextmanager
def _toolfleet_worker(redis_url: str, log_path: Path, hostname: str, env: dict[str, str]) -> Iterator[None]:
    worker = tool_worker(redis_url, [log_tools.POOL], [MODULE], log_path, hostname, loglevel="DEBUG", env=env)
    with worker.running(timeout_s=60):
        yield


@contextlib.contextmanager
def _celery_worker(redis_url: str, log_path: Path, hostname: str, env: dict[str, str]) -> Iterator[None]:
    """`celery -A workers.app worker` serving the log tools, as an operator may start it."""
    with celery_worker(redis_url, log_tools.POOL, MODULE, log_path, hostname, loglevel="DEBUG", env=env):
        yield


# Lines written outside the call's context, which toolfleet binds in the task's body: Celery's as the
# message arrives (naming the task; at DEBUG showing its arguments) and the Celery instrumentation's
# DEBUG lines before and after the task runs. They carry none of the call's fields.
OUTSIDE_THE_CALL = {"celery.worker.strategy", "celery.pool", "opentelemetry.instrumentation.celery"}
STARTS = {"toolfleet worker": _toolfleet_worker, "celery -A workers.app worker": _celery_worker}


@pytest.mark.parametrize("start", list(STARTS))
def test_every_line_a_worker_writes_about_a_call_is_one_json_object_naming_it(
    start: str, redis_url: str, settings: Settings, tmp_path: Path
) -> None:
    # given: a worker logging JSON at DEBUG, tracing on; this process traces to memory
    hostname = f"json-{uuid.uuid4().hex[:6]}@test"
    log_path = tmp_path / "worker.log"
    path = '/etc/na\u00efve\n"quoted"\\u2028 \u6771\u4eac'  # a newline, quotes, non-ASCII in the arguments
    calls = [
        ToolExecutionRequest(id="read-1", name="logs_read_file", arguments=json.dumps({"path": path})),
        ToolExecutionRequest(id="fail-1", name="logs_read_and_fail", arguments=json.dumps({"path": path})),
    ]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "read it"])
    with OtlpReceiver() as receiver, STARTS[start](redis_url, log_path, hostname, _environment(receiver)):
        executor = CeleryExecutor(settings=settings)
        try:
            with traced_to_memory("json-logs-test") as memory:
                # when: one invocation makes a call that succeeds and one that fails, in one batch
                service = AiService(chat_model=model, tools=[log_tools], executor=executor)
                result = service.chat("read the file")
        finally:
            executor.close()
    assert result.content == "read it"
    assert [e.status for e in result.tool_executions] == ["success", "execution_error"]
    root = next(s for s in memory.get_finished_spans() if s.name.startswith("invoke_agent"))
    assert root.context is not None
    trace_id = format(root.context.trace_id, "032x")

    # then: read whole once the worker stopped, each line is one JSON object
    lines = log_path.read_text(encoding="utf-8").splitlines()
    names = {call.id: call for call in calls}
    for execution, call in zip(result.tool_executions, calls, strict=True):
        names[execution.task_id or call.id] = call
    assert len(names) == 4, result.tool_executions
    about: dict[str, list[dict[str, Any]]] = {call.id: [] for call in calls}
    banners = []
    for line in lines:
        entry = json.loads(line)  # every line, Celery's banner and Python's warnings included
        assert isinstance(entry, dict), line
        if "tools" in entry and entry["logger"] == "workers.runtime._program":
            banners.append(entry)
        named = {call.id for name, call in names.items() if name in line}
        if entry["logger"] not in OUTSIDE_THE_CALL:
            for call_id in named:
                about[call_id].append(entry)
    # and: each call has its lines (the outcome's at INFO, the content's at DEBUG), each carrying the
    # call, the worker that ran it and the invocation's trace
    for call in calls:
        entries = about[call.id]
        assert len(entries) >= 2, (call.id, entries)
        for entry in entries:
            assert entry.get("invocation_id") == result.invocation_id, entry
            assert (entry.get("call_id"), entry.get("tool")) == (call.id, call.name), entry
            assert (entry.get("pool"), entry.get("worker")) == (log_tools.POOL, hostname), entry
            assert entry.get("trace_id") == trace_id, entry
    # and: the banner is one record, naming the pool kind as `toolfleet worker --kind` does
    (banner,) = banners
    assert (banner["hostname"], banner["pool_kind"]) == (hostname, "threads")
    assert banner["tools"] == ["logs_read_and_fail", "logs_read_file"]
    failed = [e["message"] for e in about["fail-1"]]
    assert any("execution_error (ValueError)" in message for message in failed), failed
