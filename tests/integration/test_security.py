"""Security defaults (DESIGN.md "Defaults that keep users safe"), against a real Redis and worker.

- Only JSON crosses Celery: a pickled task message is refused unread, the tool never runs.
- A worker runs only registered tools: a forged task name runs nothing.
- With `send_generic_message_to_llm_unless_visible_to_llm`, an exception's text and its cause never
  reach the model.
- Invocation parameters (they may hold credentials) never appear in Flower's view of a task (its
  `kwargsrepr`) nor stay in Redis. API keys and passwords in logs, reprs and CLI output:
  tests/test_secrets.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.states import READY_STATES
from kombu import Connection, Exchange, Queue

import tests.integration.badinput_tools as bad
from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    LocalExecutor,
    ScriptedChatModel,
    ToolExecutionResultMessage,
    send_generic_message_to_llm_unless_visible_to_llm,
)
from orchestrator.messages import message_to_json
from tests._waiting import wait_for
from tests.integration.task_events import task_events
from workers import OutcomeKind, ToolExecutionRequest
from workers.app import make_publisher
from workers.calls.invocation import Invocation, InvocationContext
from workers.runtime.process import WorkerProcess
from workers.settings import Settings
from workers.tools.registry import ToolRegistry

pytestmark = pytest.mark.integration

HOSTNAME = "bad@security"
GENERIC = "Tool failed"


# Where the shared `executor` fixture (tests/integration/conftest.py) runs this module's calls.
WORKERS = ["bad_worker"]


@pytest.fixture(scope="module")
def worker_log(worker_logs: Path) -> Path:
    return worker_logs / "security.log"


@pytest.fixture(scope="module")
def bad_worker(redis_url: str, worker_log: Path) -> Iterator[WorkerProcess]:
    worker = bad.start_worker(redis_url, worker_log, HOSTNAME)
    with worker.running(timeout_s=60):
        yield worker


@pytest.fixture(scope="module")
def celery(bad_worker: WorkerProcess, settings: Settings) -> Iterator[CeleryExecutor]:
    executor = CeleryExecutor(settings=settings)
    yield executor
    executor.close()


@dataclasses.dataclass
class Forger:
    """Publishes crafted task messages to pool `bad`, and reads what its worker made of them."""

    redis_url: str
    client: redis.Redis
    worker: WorkerProcess
    celery: CeleryExecutor
    log: Path

    def publish(self, task: str, kwargs: dict[str, Any], serializer: str) -> str:
        return _publish(self.redis_url, task, kwargs, serializer)

    def final(self, task_id: str) -> dict[str, Any] | None:
        """The task's stored state once it is final (a worker stores STARTED first)."""
        stored = self.stored(task_id)
        return stored if stored is not None and stored["status"] in READY_STATES else None

    def stored(self, task_id: str) -> dict[str, Any] | None:
        raw = self.client.get(f"celery-task-meta-{task_id}")
        return json.loads(raw) if raw else None

    def log_count(self, text: str) -> int:
        return self.log.read_text(errors="replace").count(text) if self.log.exists() else 0

    def assert_healthy(self) -> None:
        """The worker lives, and still runs a real call."""
        assert self.worker.process.poll() is None, f"the worker died (exit {self.worker.process.returncode})"
        request = ToolExecutionRequest("healthy", "bad_str", '{"value": "ok"}')
        outcome = asyncio.run(self.celery.execute(request))
        assert (outcome.kind, outcome.text, outcome.worker) == (OutcomeKind.SUCCESS, "ok", HOSTNAME)


@pytest.fixture
def forger(
    redis_url: str, client: redis.Redis, bad_worker: WorkerProcess, celery: CeleryExecutor, worker_log: Path
) -> Forger:
    return Forger(redis_url, client, bad_worker, celery, worker_log)


# ---- only JSON, only registered tools --------------------------------------------------------------


class _OpensAFile:
    """Unpickling this calls open(path, "w"): proof that a payload would have run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.path), "w"))


def _publish(redis_url: str, task: str, kwargs: dict[str, Any], serializer: str) -> str:
    """A Celery protocol-2 task message, crafted and published with kombu alone, to pool `bad`."""
    task_id = str(uuid.uuid4())
    headers = {
        "lang": "py",
        "task": task,
        "id": task_id,
        "root_id": task_id,
        "parent_id": None,
        "group": None,
        "shadow": None,
        "retries": 0,
        "eta": None,
        "expires": None,
        "timelimit": [None, None],
        "argsrepr": "()",
        "kwargsrepr": "{}",
        "origin": "forger@test",
        "ignore_result": False,
    }
    body = ([], kwargs, {"callbacks": None, "errbacks": None, "chain": None, "chord": None})
    exchange = Exchange(bad.POOL)
    with Connection(redis_url) as connection:
        connection.Producer().publish(
            body,
            serializer=serializer,
            exchange=exchange,
            routing_key=bad.POOL,
            declare=[Queue(bad.POOL, exchange, routing_key=bad.POOL)],
            headers=headers,
            correlation_id=task_id,
            reply_to="forger",
        )
    return task_id


def _mark_call(key: str) -> dict[str, Any]:
    request = ToolExecutionRequest("forged", "bad_mark", json.dumps({"key": key}))
    return {"request": request.to_json(), "invocation": Invocation(InvocationContext(), {}).to_json()}


def test_a_pickled_task_message_is_refused_unread_and_never_runs(forger: Forger, tmp_path: Path) -> None:
    # given: a pickled message for a real tool, carrying an object whose unpickling creates a file
    refusal = "Refusing to deserialize untrusted content of type pickle (application/x-python-serialize)"
    refusals_before = forger.log_count(refusal)
    marker = tmp_path / "unpickled"
    pickled_key, json_key = f"pickled-{uuid.uuid4()}", f"json-{uuid.uuid4()}"
    pickled_id = forger.publish(
        "tool.bad_mark", {**_mark_call(pickled_key), "payload": _OpensAFile(marker)}, "pickle"
    )
    # when: then the same call as JSON (the control), behind it in the queue
    json_id = forger.publish("tool.bad_mark", _mark_call(json_key), "json")
    # then: the JSON message ran
    control = wait_for(lambda: forger.final(json_id), what="the JSON control's result")
    assert control["status"] == "SUCCESS" and control["result"]["text"] == f"marked {json_key}"
    assert forger.client.get(f"badinput:ran:{json_key}") == b"1"
    # and the pickled one was refused unread: the worker logged the refusal, nothing ran or was stored
    wait_for(lambda: forger.log_count(refusal) > refusals_before, what="the refusal in the log")
    assert "kombu.exceptions.ContentDisallowed" in forger.log.read_text(errors="replace")
    assert not marker.exists(), "the pickle was deserialized"
    assert forger.client.get(f"badinput:ran:{pickled_key}") is None
    assert forger.stored(pickled_id) is None
    forger.assert_healthy()


def test_a_forged_task_name_runs_nothing(forger: Forger, tmp_path: Path) -> None:
    # given: a well-formed JSON message naming a task no worker registered
    marker = tmp_path / "forged"
    unregistered = "Received unregistered task of type 'tool.os_system'"
    before = forger.log_count(unregistered)
    # when
    task_id = forger.publish("tool.os_system", {"command": f"touch {marker}"}, "json")
    # then: Celery records it as not registered; the worker logged it and ran nothing
    stored = wait_for(lambda: forger.final(task_id), what="the refusal's stored state")
    assert stored["status"] == "FAILURE"
    assert stored["result"]["exc_type"] == "NotRegistered"
    wait_for(lambda: forger.log_count(unregistered) > before, what="the refusal in the log")
    assert not marker.exists()
    forger.assert_healthy()


def test_a_forged_message_for_a_real_tool_without_a_call_runs_nothing(
    forger: Forger,
) -> None:
    # given: a message for `tool.bad_mark` whose kwargs are not a call at all
    task_id = forger.publish("tool.bad_mark", {"key": "direct"}, "json")
    # then: it fails before binding anything; the tool did not run
    stored = wait_for(lambda: forger.final(task_id), what="the failure")
    assert (stored["status"], stored["result"]["exc_type"]) == ("FAILURE", "KeyError")
    assert forger.client.get("badinput:ran:direct") is None
    forger.assert_healthy()


def test_a_worker_registers_only_the_tools_and_compensations_of_its_modules(
    settings: Settings, bad_worker: WorkerProcess
) -> None:
    registry = ToolRegistry([bad])
    expected = {f"tool.{d.name}" for d in registry} | {
        f"compensate.{d.name}" for d in registry if d.compensation is not None
    }
    publisher = make_publisher(settings)
    try:
        answers = publisher.control.inspect(destination=[HOSTNAME], timeout=3).registered()
    finally:
        publisher.close()
    assert answers is not None, "the worker did not answer"
    # Celery's own `celery.*` tasks are not listed; every other task is one of our tools.
    assert set(answers[HOSTNAME]) == expected


# ---- exception texts and the model -------------------------------------------------------------------


def _everything_sent(model: ScriptedChatModel) -> str:
    """Every request the model received, as JSON: messages, tools and parameters."""
    return json.dumps(
        [
            {
                "messages": [message_to_json(m) for m in request.messages],
                "tools": [spec.to_json() for spec in request.tool_specifications],
                "parameters": request.parameters,
            }
            for request in model.requests
        ],
        default=str,
    )


def _calls_once(tool_name: str) -> ScriptedChatModel:
    """A model that calls the tool `tool_name` once, without arguments, then says sorry."""
    calls = [ToolExecutionRequest("1", tool_name, "{}")]
    return ScriptedChatModel([AiMessage(tool_execution_requests=calls), "sorry"])


def _generic_service(
    model: ScriptedChatModel, tool: object, executor: LocalExecutor | CeleryExecutor
) -> AiService:
    """`tool` behind the handler that shows the model `GENERIC` unless the error is marked visible."""
    return AiService(
        chat_model=model,
        tools=[tool],
        executor=executor,
        tool_execution_error_handler=send_generic_message_to_llm_unless_visible_to_llm(GENERIC),
    )


def test_the_generic_handler_keeps_an_exceptions_text_and_cause_from_the_model(
    executor: LocalExecutor | CeleryExecutor,
) -> None:
    # given: a tool whose exception holds a secret in its message and another in its __cause__
    model = _calls_once("bad_secret")
    # when
    result = _generic_service(model, bad.bad_secret, executor).chat("connect")
    # then: the model read only the generic text, never the message or the cause
    assert result.tool_executions[0].result == GENERIC and result.tool_executions[0].has_failed
    sent = _everything_sent(model)
    assert bad.SECRET not in sent and bad.CAUSE_SECRET not in sent
    last = model.requests[1].messages[-1]
    assert isinstance(last, ToolExecutionResultMessage) and (last.text, last.is_error) == (GENERIC, True)


def test_a_visible_message_reaches_the_model_but_its_cause_does_not(
    executor: LocalExecutor | CeleryExecutor,
) -> None:
    model = _calls_once("bad_visible_secret")
    _generic_service(model, bad.bad_visible_secret, executor).chat("pay")
    last = model.requests[1].messages[-1]
    assert isinstance(last, ToolExecutionResultMessage) and last.text == "Card declined"
    assert bad.SECRET not in _everything_sent(model)


# ---- Flower's view of a task: kwargsrepr -------------------------------------------------------------


def _task_events(
    settings: Settings, celery: CeleryExecutor
) -> contextlib.AbstractContextManager[list[dict[str, Any]]]:
    """Every task event on the broker (what Flower sees) while the block runs."""
    return task_events(settings, celery, ToolExecutionRequest("probe", "bad_str", '{"value": "probe"}'))


def _events_of(events: list[dict[str, Any]], task_id: str | None) -> list[dict[str, Any]]:
    return [e for e in events if e.get("uuid") == task_id]


def _redis_holds(client: redis.Redis, secret: str) -> list[str]:
    """Keys of the test database whose value contains `secret`."""
    needle = secret.encode()
    found = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        if kind == b"string":
            values: list[Any] = [client.get(key)]
        elif kind == b"list":
            values = list(client.lrange(key, 0, -1))
        elif kind == b"hash":
            values = list(client.hgetall(key).values())
        elif kind == b"set":
            values = list(client.smembers(key))
        elif kind == b"zset":
            values = [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
        else:
            continue
        if any(needle in (v or b"") for v in values):
            found.append(key.decode(errors="replace"))
    return found


def test_invocation_parameters_never_reach_flower_or_stay_in_redis(
    settings: Settings, celery: CeleryExecutor, client: redis.Redis, worker_log: Path
) -> None:
    # given: an invocation whose parameters hold a credential, calling a tool on the worker
    secret = f"sk-secret-{uuid.uuid4().hex}"
    calls = [ToolExecutionRequest("1", "bad_param_reader", '{"name": "api_key"}')]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "done"])
    service = AiService(chat_model=model, tools=[bad.bad_param_reader], executor=celery)
    with _task_events(settings, celery) as events:
        # when
        result = service.chat("go", parameters={"api_key": secret})
        task_id = result.tool_executions[0].task_id
        assert result.tool_executions[0].result == "present"  # the tool did receive the parameters
        wait_for(
            lambda: {e["type"] for e in _events_of(events, task_id)} >= {"task-sent", "task-received"},
            what="the call's task events",
        )
    # then: Flower's view (kwargsrepr, in the sent and received events) shows the call, not the parameters
    shown = [e for e in _events_of(events, task_id) if e["type"] in ("task-sent", "task-received")]
    for event in shown:
        assert '{"name": "api_key"}' in event["kwargs"] and "'call_id': '1'" in event["kwargs"]
        assert secret not in event["kwargs"] and "parameters" not in event["kwargs"]
    assert secret not in json.dumps(_events_of(events, task_id), default=str)
    # and nothing in Redis or the worker's log holds it once the call is done
    assert _redis_holds(client, secret) == []
    assert secret not in worker_log.read_text(errors="replace")


def test_a_retried_call_keeps_its_parameters_out_of_flower(
    settings: Settings, celery: CeleryExecutor
) -> None:
    secret = f"sk-secret-{uuid.uuid4().hex}"
    calls = [ToolExecutionRequest("1", "bad_flaky", json.dumps({"key": str(uuid.uuid4()), "failures": 1}))]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "done"])
    service = AiService(chat_model=model, tools=[bad.bad_flaky], executor=celery)
    with _task_events(settings, celery) as events:
        result = service.chat("go", parameters={"api_key": secret})
        task_id = result.tool_executions[0].task_id
        assert result.tool_executions[0].result == "2"  # failed once, retried on the worker, succeeded
        wait_for(
            lambda: sum(e["type"] == "task-received" for e in _events_of(events, task_id)) >= 2,
            what="both deliveries' events",
        )
    leaking = [e["type"] for e in _events_of(events, task_id) if secret in str(e.get("kwargs"))]
    assert leaking == []


def test_a_late_compensation_keeps_its_parameters_out_of_flower(
    settings: Settings, celery: CeleryExecutor, client: redis.Redis
) -> None:
    # given: a compensable call that finishes after its 1 s deadline, so its worker compensates it
    secret = f"sk-secret-{uuid.uuid4().hex}"
    key = str(uuid.uuid4())
    request = ToolExecutionRequest("1", "bad_late", json.dumps({"key": key, "seconds": 2}))
    invocation = Invocation(InvocationContext(), {"api_key": secret})
    with _task_events(settings, celery) as events:
        outcome = asyncio.run(celery.execute(request, None, invocation, compensate_if_late=True))
        assert outcome.kind is OutcomeKind.TIMED_OUT
        wait_for(lambda: client.get(f"badinput:undone:{key}") == b"1", what="the late compensation")
        compensations = wait_for(
            lambda: [e for e in events if str(e.get("name", "")).startswith("compensate.bad_late")],
            what="the compensation's events",
        )
    assert all(secret not in str(e.get("kwargs")) for e in compensations)
