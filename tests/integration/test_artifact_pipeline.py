"""Artifacts across a fleet: made on one pool, consumed by reference on another, an over-inline result
stored instead of refused, an image shown to a model that takes images, and refused references."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from orchestrator import AiService, send_exception_message_to_llm
from orchestrator.executors.celery import CeleryExecutor
from orchestrator.messages import AiMessage, ToolExecutionResultMessage
from orchestrator.models.base import ChatRequest
from orchestrator.models.scripted import ScriptedChatModel
from tests.integration import artifact_pipeline_tools as tools
from tests.integration.worker_processes import all_running, tool_worker
from tests.orchestrator.models._anthropic import MODEL, make_model
from tests.orchestrator.models._harness import Recorder
from workers import ImageContent, ToolExecutionRequest
from workers.artifacts import ArtifactStore, refs_in
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

INLINE_BYTES = 4096
ROWS = 500  # an export of 500 rows: 25,000 bytes, over the inline limit


@pytest.fixture(scope="module")
def artifact_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="module")
def pools(redis_url: str, worker_logs: Path, artifact_dir: Path) -> Iterator[list[WorkerProcess]]:
    """One worker per pool, sharing a directory store; results over 4 KiB become artifacts."""
    env = {
        "TOOLFLEET_ARTIFACT_URL": artifact_dir.as_uri(),
        "TOOLFLEET_INLINE_RESULT_BYTES": str(INLINE_BYTES),
    }
    starts = {
        pool: functools.partial(
            tool_worker,
            redis_url,
            [pool],
            [tools.__name__],
            worker_logs / f"{pool}.log",
            f"{pool}@artifacts",
            env=env,
        )
        for pool in (tools.RENDER_POOL, tools.MEASURE_POOL)
    }
    with all_running(starts, timeout_s=60) as workers:
        yield list(workers.values())


@pytest.fixture
def executor(
    pools: list[WorkerProcess], settings: Settings, artifact_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[CeleryExecutor]:
    # the orchestrator reads the same store (an image for the model)
    monkeypatch.setenv("TOOLFLEET_ARTIFACT_URL", artifact_dir.as_uri())
    monkeypatch.setenv("TOOLFLEET_INLINE_RESULT_BYTES", str(INLINE_BYTES))
    executor = CeleryExecutor(settings=settings)
    yield executor
    executor.close()


def _results(request: ChatRequest) -> dict[str, ToolExecutionResultMessage]:
    return {m.tool_name: m for m in request.messages if isinstance(m, ToolExecutionResultMessage)}


def _call(call_id: str, name: str, **arguments: Any) -> ToolExecutionRequest:
    return ToolExecutionRequest(call_id, name, json.dumps(arguments))


def _pipeline(request: ChatRequest) -> AiMessage | str:
    """Turn 1 renders and exports; turn 2 measures both by the references their results gave."""
    results = _results(request)
    if not results:
        return AiMessage(
            tool_execution_requests=[
                _call("c1", "render_chart", title="sales"),
                _call("c2", "export_rows", rows=ROWS),
            ]
        )
    if "measure" not in results:
        chart = results["render_chart"].text.rsplit("artifact:", 1)[1].rstrip("]")
        export = results["export_rows"].text.rsplit("artifact:", 1)[1].rstrip("]")
        return AiMessage(
            tool_execution_requests=[
                _call("c3", "measure", source=f"artifact:{chart}"),
                _call("c4", "measure", source=f"artifact:{export}"),
            ]
        )
    return "measured"


def test_artifacts_made_on_one_pool_are_measured_on_another(
    executor: CeleryExecutor, artifact_dir: Path, redis_url: str
) -> None:
    # given: a model that renders and exports, then asks another pool to measure both by reference
    model = ScriptedChatModel(_pipeline)
    service = AiService(chat_model=model, tools=[tools], executor=executor)
    # when
    result = service.chat("render and measure")
    # then: every call succeeded: the 25,000-byte export is an artifact, not an execution error
    assert result.content == "measured"
    assert [e.status for e in result.tool_executions] == ["success"] * 4, [
        e.result for e in result.tool_executions
    ]
    render, export, chart_measure, export_measure = result.tool_executions
    store = ArtifactStore.from_url(artifact_dir.as_uri())
    (export_ref,) = refs_in(export.result_object)
    assert export_ref.size == len(tools.export_text(ROWS)) and export_ref.name == "export_rows-result.txt"
    assert b"".join(store.chunks(export_ref.id)).decode() == tools.export_text(ROWS)
    assert export.result.startswith("row 000000: ") and len(export.result.encode()) < INLINE_BYTES
    assert export_ref.ref in export.result  # the model is told where the rest is
    # what the result backend keeps of the call (what Flower shows) is the reference, not the 25,000 bytes
    meta = redis.Redis.from_url(redis_url).get(f"celery-task-meta-{export.task_id}")
    assert meta is not None and export_ref.ref.encode() in meta and len(meta) < INLINE_BYTES
    # and the measuring pool read both from the store, on its own worker
    (chart_ref,) = refs_in(render.result_object)
    assert (
        chart_measure.pool == tools.MEASURE_POOL and chart_measure.worker == f"{tools.MEASURE_POOL}@artifacts"
    )
    assert chart_measure.result_object["sha256"] == chart_ref.sha256 == hashlib.sha256(tools.PNG).hexdigest()
    assert export_measure.result_object["sha256"] == export_ref.sha256
    assert chart_measure.result_object["pid"] != os.getpid()


def test_an_image_artifact_reaches_a_model_that_takes_images_as_image_content(
    executor: CeleryExecutor,
) -> None:
    model = ScriptedChatModel(
        [AiMessage(tool_execution_requests=[_call("c1", "render_chart", title="q3")]), "seen"]
    )
    result = AiService(chat_model=model, tools=[tools], executor=executor).chat("draw")
    assert result.content == "seen"
    # the model's second request holds the image's bytes, read from the store
    sent = _results(model.requests[1])["render_chart"]
    images = [part for part in sent.contents or () if isinstance(part, ImageContent)]
    assert len(images) == 1 and images[0].image.mime_type == "image/png"
    assert base64.b64decode(images[0].image.base64_data or "") == tools.PNG
    # while the call's own contents keep the reference, never the bytes
    (kept,) = [p for p in result.tool_executions[0].result_contents or () if isinstance(p, ImageContent)]
    assert (
        kept.image.url is not None
        and kept.image.url.startswith("artifact:")
        and kept.image.base64_data is None
    )


class _TextOnlyModel(ScriptedChatModel):
    supports_tool_result_images = False


def test_a_model_without_images_reads_the_note_of_the_image(executor: CeleryExecutor) -> None:
    model = _TextOnlyModel(
        [AiMessage(tool_execution_requests=[_call("c1", "render_chart", title="q4")]), "noted"]
    )
    AiService(chat_model=model, tools=[tools], executor=executor).chat("draw")
    sent = _results(model.requests[1])["render_chart"]
    assert sent.contents is None
    assert sent.text.startswith("[artifact q4.png (image/png, 70 bytes): artifact:")


def test_a_reference_to_nothing_or_to_another_tenants_artifact_is_an_arguments_error(
    executor: CeleryExecutor,
) -> None:
    # given: an artifact tenant "alpha" made
    made = AiService(
        chat_model=ScriptedChatModel(
            [AiMessage(tool_execution_requests=[_call("c1", "render_chart", title="a")]), "ok"]
        ),
        tools=[tools],
        executor=executor,
    ).chat("draw", parameters={"tenant": "alpha"})
    (ref,) = refs_in(made.tool_executions[0].result_object)
    for tenant, source in (("beta", ref.ref), ("alpha", "artifact:" + "0" * 32), ("alpha", "report.png")):
        model = ScriptedChatModel(
            [AiMessage(tool_execution_requests=[_call("c2", "measure", source=source)]), "ok"]
        )
        # when: another tenant's invocation, or a reference to nothing, asks for it
        service = AiService(
            chat_model=model,
            tools=[tools],
            executor=executor,
            tool_arguments_error_handler=send_exception_message_to_llm(),
        )
        result = service.chat("measure", parameters={"tenant": tenant})
        # then: the model reads why, and the tool never ran
        (execution,) = result.tool_executions
        assert execution.status == "arguments_error"
        expected = (
            "is not an artifact reference" if source == "report.png" else "does not exist (or was removed)"
        )
        assert expected in execution.result, execution.result


def _message(content: list[dict[str, Any]], stop_reason: str) -> httpx.Response:
    """A Messages API response, as Anthropic sends one."""
    body = {
        "id": "msg_artifact",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "usage": {"input_tokens": 20, "output_tokens": 10},
    }
    return httpx.Response(200, json=body)


def test_an_image_artifact_reaches_anthropic_as_an_image_block_of_the_tool_result(
    executor: CeleryExecutor,
) -> None:
    # given: Anthropic's Messages API (recorded shapes, on a local transport) asking for a chart
    asked = {"type": "tool_use", "id": "toolu_chart", "name": "render_chart", "input": {"title": "q3"}}
    server = Recorder(_message([asked], "tool_use"), _message([{"type": "text", "text": "seen"}], "end_turn"))
    model = make_model(server)
    # when
    result = AiService(chat_model=model, tools=[tools], executor=executor).chat("draw")
    # then: the second request carries the worker's PNG, read from the store, as a base64 image block
    assert result.content == "seen"
    (tool_result,) = server.body()["messages"][-1]["content"]
    assert tool_result["type"] == "tool_result" and tool_result["tool_use_id"] == "toolu_chart"
    note, image = tool_result["content"]
    assert note["type"] == "text" and note["text"].startswith(
        "[artifact q3.png (image/png, 70 bytes): artifact:"
    )
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(tools.PNG).decode()},
    }
