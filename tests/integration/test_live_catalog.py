"""`AiService(executor=CeleryExecutor())` without `tools=`, on real worker processes: the model sees the
tools live workers serve; a worker that joins adds its tools from the next invocation, and one that
leaves takes them away.

The catalog copy is at most `CATALOG_MAX_AGE_S` old, so an invocation that must see a change starts
at least that long after the previous read: the test waits out that documented bound, once the
change itself (a worker in or out of the catalog) is observed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import tests.integration.live_catalog_tools as lc
from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    ChatRequest,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    send_exception_message_to_llm,
)
from orchestrator.loop.catalog_tools import CATALOG_MAX_AGE_S
from tests._waiting import wait_for
from tests.integration.worker_processes import tool_worker
from workers.runtime.catalog import Catalog
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

MODULE = "tests.integration.live_catalog_tools"


def _worker(redis_url: str, logs: Path, pool: str) -> WorkerProcess:
    return tool_worker(redis_url, [pool], [MODULE], logs / f"{pool}.log", f"{pool}@integration")


def _calls_what_the_user_names(request: ChatRequest) -> AiMessage | str:
    """Calls the tool the user message names if the model is shown it; else says it is not there."""
    last = request.messages[-1]
    if isinstance(last, ToolExecutionResultMessage):
        return last.text
    wanted = last.single_text  # type: ignore[union-attr]
    if wanted in {spec.name for spec in request.tool_specifications}:
        return AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", wanted, '{"question": "q"}')])
    return f"no tool {wanted}"


def _past_the_copy_age(last_read_at: float) -> None:
    """Start the next invocation once the catalog copy read at `last_read_at` is due again."""
    remaining = last_read_at + CATALOG_MAX_AGE_S - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)


@pytest.fixture
def catalog(redis_url: str) -> Iterator[Catalog]:
    client = redis.Redis.from_url(redis_url)
    yield Catalog(client)
    client.close()


def test_a_worker_that_joins_adds_its_tools_and_one_that_leaves_takes_them_away(
    redis_url: str, settings: Settings, worker_logs: Path, catalog: Catalog
) -> None:
    # given: a service with no tools= on a CeleryExecutor, and a worker serving only the first pool
    executor = CeleryExecutor(settings=settings)
    model = ScriptedChatModel(_calls_what_the_user_names)
    service = AiService(
        chat_model=model,
        executor=executor,
        tool_arguments_error_handler=send_exception_message_to_llm(),
        tool_execution_error_handler=send_exception_message_to_llm(),
    )
    try:
        with _worker(redis_url, worker_logs, lc.FIRST).running(timeout_s=60):
            alone = service.chat("second_answer")
            first_call = service.chat("first_answer")
            before = time.monotonic()  # the copy the service holds was read before this
            shown_alone = {s.name for s in model.requests[0].tool_specifications}

            # when: a worker of the second pool joins
            joining = _worker(redis_url, worker_logs, lc.SECOND)
            with joining.running(timeout_s=60):
                _past_the_copy_age(before)
                joined_requests = len(model.requests)
                joined = service.chat("second_answer")
                before = time.monotonic()
                shown_joined = {s.name for s in model.requests[joined_requests].tool_specifications}

            # and when: it leaves (a warm shutdown removes it from the catalog)
            wait_for(lambda: not catalog.worker_alive(joining.hostname), 15.0, "the second worker left")
            _past_the_copy_age(before)
            left_requests = len(model.requests)
            left = service.chat("second_answer")
            shown_left = {s.name for s in model.requests[left_requests].tool_specifications}
    finally:
        executor.close()

    # then: the model saw the second pool's tool only while its worker lived, and it ran there
    assert "first_answer" in shown_alone and "second_answer" not in shown_alone
    assert alone.content == "no tool second_answer"
    assert first_call.content == "first: q"
    assert {"first_answer", "second_answer"} <= shown_joined
    assert joined.content == "second: q"
    assert joined.tool_executions[0].worker == f"{lc.SECOND}@integration"
    assert "first_answer" in shown_left and "second_answer" not in shown_left
    assert left.content == "no tool second_answer"
