"""One fan-out limit, `max_fanout` (`TOOLFLEET_MAX_FANOUT`), honoured by `AiService` on a real worker.

Concurrency is counted on the worker side: each call of `occupy` (tests/integration/fanout_tools.py)
increments a Redis counter when it starts, records what it saw, holds its slot, and decrements it.
The worker has more threads than the invocation has calls, so only the orchestrator's limit can
hold calls back.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import tests.integration.fanout_tools as fanout
from orchestrator import AiMessage, AiService, CeleryExecutor, ScriptedChatModel
from workers import ToolExecutionRequest
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

CALLS = 6
HOLD_S = 0.8
HOSTNAME = "fanout@integration"


@pytest.fixture(scope="module")
def fanout_worker(redis_url: str, worker_logs: Path) -> Iterator[WorkerProcess]:
    worker = fanout.start_worker(redis_url, worker_logs / "fanout.log", HOSTNAME, concurrency=CALLS + 2)
    with worker.running(timeout_s=60):
        yield worker


def _most_in_flight(client: redis.Redis, executor: CeleryExecutor, max_fanout: int | None) -> int:
    """Run one invocation whose model asks for CALLS `occupy` calls at once; the most seen running."""
    run = str(uuid.uuid4())
    calls = [
        ToolExecutionRequest(f"call-{i}", "occupy", json.dumps({"run": run, "seconds": HOLD_S}))
        for i in range(CALLS)
    ]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "done"])
    service = AiService(chat_model=model, tools=[fanout], executor=executor, max_fanout=max_fanout)
    result = service.chat("occupy the worker")
    assert result.content == "done"
    assert [e.status for e in result.tool_executions] == ["success"] * CALLS
    assert {e.worker for e in result.tool_executions} == {HOSTNAME}  # they really ran on the worker
    seen = [int(value) for value in client.lrange(fanout.seen_key(run), 0, -1)]
    assert len(seen) == CALLS
    assert client.get(fanout.in_flight_key(run)) == b"0"
    return max(seen)


@pytest.mark.parametrize(
    ("variable", "keyword", "limit"),
    [("2", None, 2), (None, 3, 3), ("2", 5, 5), (None, None, CALLS)],
    ids=["TOOLFLEET_MAX_FANOUT=2", "max_fanout=3", "the-keyword-wins", "default-64"],
)
def test_ai_service_keeps_at_most_max_fanout_calls_in_flight_on_a_worker(
    fanout_worker: WorkerProcess,
    client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    variable: str | None,
    keyword: int | None,
    limit: int,
) -> None:
    # given: the limit from the environment (read by the executor's settings) and/or the keyword
    if variable is not None:
        monkeypatch.setenv("TOOLFLEET_MAX_FANOUT", variable)
    executor = CeleryExecutor()  # settings from TOOLFLEET_* variables, as in production
    try:
        # when: the model asks for six calls in one response
        most = _most_in_flight(client, executor, keyword)
    finally:
        executor.close()
    # then: never more than the limit ran at once, and the limit was reached (the calls overlapped)
    assert most == limit
