"""What the distributed executor must show, on real Redis (and RabbitMQ) with real worker processes.

Pools, placement, fan-out, deadlines (threads and prefork), missing pools, lost workers (a killed
prefork child, a killed worker), retries, a RabbitMQ broker, and how failures look in Celery.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import signal
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.executors.celery import CeleryExecutor
from tests._environment import LOCAL_RABBITMQ_URL, rabbitmq_listens
from tests._waiting import wait_until
from tests.integration.states import META, StateRecorder
from tests.integration.worker_processes import tool_worker
from workers import OutcomeKind, ToolDefinition, ToolExecutionRequest, ToolOutcome
from workers.app import make_publisher
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.broker]

RABBIT_URL = LOCAL_RABBITMQ_URL
HEARTBEAT_TTL_S = 2.0
HEARTBEAT_ENV = {"TOOLFLEET_HEARTBEAT_TTL_S": str(HEARTBEAT_TTL_S)}


# -- helpers -------------------------------------------------------------------------------------


def _request(name: str, **arguments: Any) -> ToolExecutionRequest:
    return ToolExecutionRequest(f"call-{uuid.uuid4().hex[:8]}", name, json.dumps(arguments))


def _meta(client: redis.Redis, task_id: str | None) -> dict[str, Any] | None:
    """The stored Celery state of a task (`celery-task-meta-<task_id>`), if any."""
    assert task_id is not None
    raw = client.get(META + task_id)
    return json.loads(raw) if raw else None


def _with_options(definition: ToolDefinition | None, **changes: Any) -> ToolDefinition:
    assert definition is not None
    return dataclasses.replace(definition, options=dataclasses.replace(definition.options, **changes))


async def _until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.01)


def _timed(awaitable: Awaitable[ToolOutcome]) -> tuple[ToolOutcome, float]:
    async def run() -> tuple[ToolOutcome, float]:
        started = time.monotonic()
        outcome = await awaitable
        return outcome, time.monotonic() - started

    return asyncio.run(run())


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def executor(pools: dict[str, WorkerProcess], settings: Settings) -> Iterator[CeleryExecutor]:
    executor = CeleryExecutor(settings=settings)
    yield executor
    executor.close()


@pytest.fixture
def killable(redis_url: str, worker_logs: Path) -> Iterator[WorkerProcess]:
    """A fresh prefork worker (one child) for the `killable` pool, for one test to kill."""
    name = f"killable-{uuid.uuid4().hex[:6]}"
    modules, log_path = ["tests.integration.kill_tools"], worker_logs / f"{name}.log"
    worker = tool_worker(
        redis_url,
        ["killable"],
        modules,
        log_path,
        f"{name}@test",
        kind="prefork",
        concurrency=1,
        env=HEARTBEAT_ENV,
    )
    with worker.running(timeout_s=30):
        yield worker


# -- (1) pools on separate worker processes ------------------------------------------------------


def test_each_pool_runs_on_its_own_worker_process(
    pools: dict[str, WorkerProcess], executor: CeleryExecutor
) -> None:
    # given: `whereami` on pool alpha and `whereami_beta` on pool beta, served by two processes

    # when: both are called
    async def both() -> list[ToolOutcome]:
        return list(
            await asyncio.gather(
                executor.execute(_request("whereami")), executor.execute(_request("whereami_beta"))
            )
        )

    alpha, beta = asyncio.run(both())

    # then: each ran in its pool's worker process (threads pools run tools in the worker's own pid)
    assert (alpha.kind, beta.kind) == (OutcomeKind.SUCCESS, OutcomeKind.SUCCESS)
    assert alpha.result_object["pid"] == pools["alpha"].pid
    assert beta.result_object["pid"] == pools["beta"].pid
    assert alpha.result_object["pid"] != beta.result_object["pid"]
    assert (alpha.worker, alpha.pool) == ("alpha@integration", "alpha")
    assert (beta.worker, beta.pool) == ("beta@integration", "beta")


# -- (2) a batch of 100 calls at once ------------------------------------------------------------


def test_a_batch_of_100_calls_succeeds_in_request_order_with_stored_results(
    executor: CeleryExecutor, client: redis.Redis
) -> None:
    # given: 100 calls of `echo`, each with its own text
    requests = [ToolExecutionRequest(f"call-{i}", "echo", json.dumps({"text": f"n{i}"})) for i in range(100)]

    # when: they are dispatched at once
    async def batch() -> list[ToolOutcome]:
        return list(await asyncio.gather(*(executor.execute(r) for r in requests)))

    outcomes, elapsed = _timed(batch())

    # then: all succeed, in request order, each call a distinct task with its result stored in Redis
    assert [o.kind for o in outcomes] == [OutcomeKind.SUCCESS] * 100
    assert [o.text for o in outcomes] == [f"n{i}" for i in range(100)]
    assert len({o.task_id for o in outcomes}) == 100
    for i, outcome in enumerate(outcomes):
        meta = _meta(client, outcome.task_id)
        assert meta is not None, f"no stored result for call {i}"
        assert meta["status"] == "SUCCESS"
        assert meta["task_id"] == outcome.task_id
        assert meta["result"]["worker"] == "alpha@integration"
        assert meta["result"] == outcome.to_wire("alpha@integration")
        assert meta["result"]["text"] == f"n{i}"
    assert elapsed < 5.0


# -- (3) deadlines -------------------------------------------------------------------------------


def test_a_deadline_on_a_threads_pool_times_out_on_time(executor: CeleryExecutor) -> None:
    # given: `slow` (pool alpha, threads) with its deadline cut to 0.3 s, asked to sleep 5 s
    definition = _with_options(executor.definition("slow"), timeout=0.3)

    # when: it is called
    outcome, elapsed = _timed(executor.execute(_request("slow", seconds=5), definition))

    # then: it is declared timed out at its deadline, with system text the model can see
    assert outcome.kind is OutcomeKind.TIMED_OUT
    assert outcome.text == "Tool 'slow' did not finish within 0.3 s"
    assert outcome.error_type == "TimeoutError"
    assert 0.29 <= elapsed <= 0.6, elapsed


def test_a_deadline_on_a_prefork_pool_times_out_and_terminates_the_call(
    executor: CeleryExecutor, client: redis.Redis
) -> None:
    # given: `slow_heavy` (pool heavy, prefork) with its deadline cut to 0.3 s, asked to sleep 5 s
    definition = _with_options(executor.definition("slow_heavy"), timeout=0.3)
    dispatched = time.monotonic()

    # when: it is called
    outcome, elapsed = _timed(executor.execute(_request("slow_heavy", seconds=5), definition))

    # then: it is declared timed out at its deadline
    assert outcome.kind is OutcomeKind.TIMED_OUT
    assert outcome.text == "Tool 'slow_heavy' did not finish within 0.3 s"
    assert 0.29 <= elapsed <= 0.6, elapsed

    # and then: the task is stopped on the worker: it ends REVOKED or FAILURE within ~2 s ...
    async def stopped() -> None:
        await _until(
            lambda: (_meta(client, outcome.task_id) or {}).get("status") in ("REVOKED", "FAILURE"),
            2.0,
            "the abandoned call is revoked or failed",
        )

    asyncio.run(stopped())
    # ... and never completes: past the time its 5 s sleep would have ended, it is still not SUCCESS
    statuses = set()
    while time.monotonic() < dispatched + 5.8:
        meta = _meta(client, outcome.task_id)
        assert meta is not None
        statuses.add(meta["status"])
        time.sleep(0.05)
    assert "SUCCESS" not in statuses
    assert statuses <= {"REVOKED", "FAILURE"}, statuses


# -- (4) a pool nobody serves --------------------------------------------------------------------


def test_a_pool_without_a_live_worker_fails_fast(executor: CeleryExecutor) -> None:
    # given: `echo` re-routed to pool "nobody", which no worker serves
    definition = _with_options(executor.definition("echo"), pool="nobody")

    # when: it is called
    outcome, elapsed = _timed(executor.execute(_request("echo", text="hi"), definition))

    # then: it fails at once instead of waiting out its 10 s deadline
    assert outcome.kind is OutcomeKind.NO_WORKER
    assert outcome.text == "No live worker serves pool 'nobody' of tool 'echo'"
    assert outcome.error_type == "NoWorkerError"
    assert elapsed < 0.1, elapsed


# -- (5) lost workers ----------------------------------------------------------------------------


async def _start_and_wait_until_running(
    executor: CeleryExecutor, client: redis.Redis, request: ToolExecutionRequest, key: str
) -> asyncio.Future[ToolOutcome]:
    call = asyncio.ensure_future(executor.execute(request))
    await _until(lambda: client.get(f"test:runs:{key}") == b"1", 5.0, "the tool has started")
    return call


def _only_child(worker: WorkerProcess) -> int:
    children = worker.child_pids()
    assert len(children) == 1, children
    return children[0]


def test_a_killed_prefork_child_is_a_lost_worker(
    killable: WorkerProcess, executor: CeleryExecutor, client: redis.Redis
) -> None:
    # given: a non-idempotent tool running on the killable worker's only child
    key = uuid.uuid4().hex
    request = _request("count_and_sleep_killable", key=key, seconds=2)

    async def scenario() -> tuple[ToolOutcome, float, float]:
        call = await _start_and_wait_until_running(executor, client, request, key)
        started = time.monotonic()
        # when: the child is SIGKILLed mid-call
        os.kill(_only_child(killable), signal.SIGKILL)
        killed = time.monotonic()
        outcome = await call
        return outcome, time.monotonic() - killed, started

    outcome, after_kill, started = asyncio.run(scenario())

    # then: the call ends as a lost worker: the prefork master sees its child die and fails the call
    # with WorkerLostError. That takes from ~20 ms to ~5 s: Celery's AsynPool usually reacts to the
    # child's exit at once, but sometimes only on its periodic `maintain_pool` (every 5 s,
    # celery/concurrency/asynpool.py `timers`); the stored FAILURE's date_done shows the same delay.
    assert outcome.kind is OutcomeKind.WORKER_LOST
    assert re.fullmatch(
        rf"Tool 'count_and_sleep_killable' lost its worker {re.escape(killable.hostname)} before "
        r"finishing \(Worker exited prematurely: signal 9 \(SIGKILL\) Job: \d+\.\)",
        outcome.text,
    ), outcome.text
    assert outcome.error_type == "WorkerLostError"
    assert outcome.worker == killable.hostname
    assert after_kill < 6.0, after_kill
    # and then: it is not run again, and never finishes (checked past the end of its 2 s sleep)
    # (a non-event: waited out, there is nothing to await)
    time.sleep(max(0.0, started + 2.5 - time.monotonic()))
    assert client.get(f"test:runs:{key}") == b"1"
    assert client.get(f"test:done:{key}") is None


def test_an_idempotent_call_survives_a_killed_prefork_child(
    killable: WorkerProcess, executor: CeleryExecutor, client: redis.Redis, redis_url: str
) -> None:
    # given: an idempotent tool (acks_late + reject_on_worker_lost) running on the only child
    key = uuid.uuid4().hex
    request = _request("count_and_sleep_killable_idempotent", key=key, seconds=1)
    recorder = StateRecorder(redis_url)

    async def scenario() -> ToolOutcome:
        call = await _start_and_wait_until_running(executor, client, request, key)
        # when: the child is SIGKILLed mid-call
        os.kill(_only_child(killable), signal.SIGKILL)
        return await call

    try:
        outcome = asyncio.run(scenario())
        statuses = recorder.statuses(outcome.task_id)
    finally:
        recorder.close()

    # then: Celery redelivers the same task (not the executor dispatching a new one) to a new
    # child, and the call completes, exactly once
    assert outcome.kind is OutcomeKind.SUCCESS, outcome
    assert statuses == ["STARTED", "STARTED", "SUCCESS"]
    assert outcome.text == "2"  # the second run
    assert outcome.worker == killable.hostname
    assert client.get(f"test:runs:{key}") == b"2"
    assert client.get(f"test:done:{key}") == b"1"


def test_a_killed_worker_is_detected_by_its_heartbeat_expiry(
    killable: WorkerProcess, executor: CeleryExecutor, client: redis.Redis
) -> None:
    # given: a non-idempotent tool running on the killable worker, with a 20 s deadline
    key = uuid.uuid4().hex
    request = _request("count_and_sleep_killable", key=key, seconds=10)

    async def scenario() -> tuple[ToolOutcome, float]:
        call = await _start_and_wait_until_running(executor, client, request, key)
        # when: the whole worker (main process and child) is SIGKILLed: nobody writes a result
        killable.kill()
        killed = time.monotonic()
        outcome = await call
        return outcome, time.monotonic() - killed

    outcome, after_kill = asyncio.run(scenario())

    # then: the call is lost once the worker's heartbeat expires, long before its 20 s deadline
    assert outcome.kind is OutcomeKind.WORKER_LOST
    assert outcome.text == (
        f"Tool 'count_and_sleep_killable' lost its worker {killable.hostname} before finishing"
    )
    assert outcome.error_type == "WorkerLostError"
    assert 1.0 <= after_kill <= HEARTBEAT_TTL_S + 2.0, after_kill
    assert client.get(f"test:done:{key}") is None


# -- (6) retries ---------------------------------------------------------------------------------


def test_a_transient_failure_is_retried_until_it_succeeds(
    executor: CeleryExecutor, client: redis.Redis, redis_url: str
) -> None:
    # given: `flaky` (retries=3 on Flaky) that fails its first 2 attempts
    key = uuid.uuid4().hex
    recorder = StateRecorder(redis_url)

    # when: it is called once
    try:
        outcome, _ = _timed(executor.execute(_request("flaky", key=key, failures=2)))
        statuses = recorder.statuses(outcome.task_id)
    finally:
        recorder.close()

    # then: the third attempt succeeds, and Celery shows the two retries
    assert outcome.kind is OutcomeKind.SUCCESS, outcome
    assert outcome.text == "3"
    assert client.get(f"test:attempts:{key}") == b"3"
    # Celery sends the retried message before it stores RETRY, so another process may start the
    # next attempt before the earlier one's RETRY is published: three starts, two retries, each
    # retry after a start of its own, success last
    assert sorted(statuses) == sorted(["STARTED"] * 3 + ["RETRY"] * 2 + ["SUCCESS"]), statuses
    assert statuses[0] == "STARTED" and statuses[-1] == "SUCCESS", statuses
    for seen in range(1, len(statuses) + 1):
        head = statuses[:seen]
        assert head.count("RETRY") <= head.count("STARTED"), statuses
    meta = _meta(client, outcome.task_id)
    assert meta is not None
    assert meta["status"] == "SUCCESS"


def test_a_transient_failure_that_persists_fails_after_all_attempts(
    executor: CeleryExecutor, client: redis.Redis
) -> None:
    # given: `flaky` (retries=3 on Flaky) that fails its first 5 attempts
    key = uuid.uuid4().hex

    # when: it is called once
    outcome, _ = _timed(executor.execute(_request("flaky", key=key, failures=5)))

    # then: it fails with the last attempt's error after 1 + 3 attempts
    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.text == "attempt 4 failed"
    assert outcome.error_type == "Flaky"
    assert client.get(f"test:attempts:{key}") == b"4"
    meta = _meta(client, outcome.task_id)
    assert meta is not None
    assert (meta["status"], meta["result"]["exc_type"]) == ("FAILURE", "Flaky")


# -- (7) RabbitMQ as the broker ------------------------------------------------------------------


def test_a_rabbitmq_broker_behaves_as_redis(
    pools: dict[str, WorkerProcess],
    executor: CeleryExecutor,
    settings: Settings,
    redis_url: str,
    worker_logs: Path,
) -> None:
    if not rabbitmq_listens():
        pytest.skip("no RabbitMQ listens on 127.0.0.1:5672: the AMQP broker variant cannot run")
    # given: a worker for pool `rabbit` taking its tasks from RabbitMQ, its results going to Redis,
    # and an executor publishing to RabbitMQ
    env = {"TOOLFLEET_BROKER_URL": RABBIT_URL, "TOOLFLEET_RESULT_BACKEND": redis_url, **HEARTBEAT_ENV}
    rabbit_settings = dataclasses.replace(settings, broker_url=RABBIT_URL)
    with make_publisher(rabbit_settings).connection_for_write() as connection:
        connection.default_channel.queue_delete("rabbit")  # of an earlier run, perhaps of another type
    modules = ["tests.integration.rabbit_tools"]
    worker = tool_worker(
        redis_url, ["rabbit"], modules, worker_logs / "rabbit.log", "rabbit@integration", env=env
    )
    rabbit = CeleryExecutor(settings=rabbit_settings)
    try:
        worker.wait_ready(timeout_s=30)

        # when: a success, an execution error and a 0.3 s deadline run over RabbitMQ and over Redis
        def both(name: str, **arguments: Any) -> tuple[ToolOutcome, ToolOutcome]:
            over_rabbit = asyncio.run(rabbit.execute(_request(f"{name}_rabbit", **arguments)))
            over_redis = asyncio.run(executor.execute(_request(name, **arguments)))
            return over_rabbit, over_redis

        success, success_redis = both("echo", text="hi", times=2)
        failure, failure_redis = both("fail", how="other")
        slow = _with_options(rabbit.definition("slow_rabbit"), timeout=0.3)
        timed_out, elapsed = _timed(rabbit.execute(_request("slow_rabbit", seconds=2), slow))
        slow_redis = _with_options(executor.definition("slow"), timeout=0.3)
        timed_out_redis = asyncio.run(executor.execute(_request("slow", seconds=2), slow_redis))
    finally:
        rabbit.close()
        worker.stop()

    # then: each ends as it does with Redis as the broker
    assert success.to_json() == success_redis.to_json()
    assert (success.kind, success.text) == (OutcomeKind.SUCCESS, "hi hi")
    assert (success.worker, success.pool) == ("rabbit@integration", "rabbit")
    assert failure.to_json() == failure_redis.to_json()
    assert (failure.kind, failure.text, failure.error_type) == (
        OutcomeKind.EXECUTION_ERROR,
        "broken: other",
        "ValueError",
    )
    assert timed_out.kind is OutcomeKind.TIMED_OUT
    assert timed_out.text == "Tool 'slow_rabbit' did not finish within 0.3 s"
    assert 0.29 <= elapsed <= 0.6, elapsed
    assert timed_out.to_json() == {
        **timed_out_redis.to_json(),
        "text": timed_out_redis.text.replace("'slow'", "'slow_rabbit'"),
    }


# -- (8) how failures look in Celery -------------------------------------------------------------


def test_a_failed_tool_is_a_celery_failure_with_the_tools_exception_type(
    executor: CeleryExecutor, client: redis.Redis
) -> None:
    # given: `fail` raising ValueError("broken: other")

    # when: it is called
    outcome, _ = _timed(executor.execute(_request("fail", how="other")))

    # then: the orchestrator gets the structured outcome, and Celery (and Flower) shows a FAILURE
    # with the tool's exception type and message
    assert (outcome.kind, outcome.text) == (OutcomeKind.EXECUTION_ERROR, "broken: other")
    meta = _meta(client, outcome.task_id)
    assert meta is not None
    assert meta["status"] == "FAILURE"
    assert meta["result"]["exc_type"] == "ValueError"
    assert meta["result"]["exc_message"][0] == "broken: other"


def test_a_forged_task_name_never_runs(
    pools: dict[str, WorkerProcess], settings: Settings, client: redis.Redis, redis_url: str
) -> None:
    # given: a publisher with broker access, and a task name no worker registered
    publisher = make_publisher(settings)
    recorder = StateRecorder(redis_url)
    try:
        # when: it sends `tool.not_registered` to the alpha queue
        sent_at = time.monotonic()
        task_id = publisher.send_task("tool.not_registered", queue="alpha").id
        # the FAILURE the worker stores when it rejects the message, awaited; and 1 s waited out in
        # all, for what a run would publish (a non-event: nothing to await)
        window_ends = sent_at + 1.0
        wait_until(lambda: time.monotonic() >= window_ends and recorder.statuses(task_id, final=False), 15)
        statuses = recorder.statuses(task_id, final=False)
    finally:
        recorder.close()
        publisher.close()

    # then: it never runs: no worker starts it, and within 1 s no SUCCESS (or any other result of a
    # run) appears. The worker's consumer (workers/_unregistered.py, as Celery's on_unknown_task)
    # rejects the message and stores one FAILURE with `NotRegistered`: the only result there is. It
    # names the worker, the pool and the tools that worker serves there.
    assert statuses == ["FAILURE"]
    meta = _meta(client, task_id)
    assert meta is not None
    assert meta["status"] == "FAILURE"
    assert meta["result"]["exc_type"] == "NotRegistered"
    assert meta["result"]["exc_module"] == "celery.exceptions"
    name, detail = meta["result"]["exc_message"]
    assert name == "tool.not_registered"
    assert (detail["worker"], detail["pool"]) == (pools["alpha"].hostname, "alpha")
    assert "echo" in detail["tools"] and "whereami_beta" not in detail["tools"]
    # and then: the worker logs that it discarded an unregistered task, at ERROR:
    #   ERROR celery.worker.consumer.consumer: Received unregistered task of type 'tool.not_registered'.
    #   The message has been ignored and discarded.
    #   Did you remember to import the module containing this task? ...
    #   The full contents of the message body was: ... {'task': 'tool.not_registered', 'id': '<id>', ...}
    #   ... KeyError: 'tool.not_registered'
    log_path = pools["alpha"].log_path
    assert log_path is not None
    log = log_path.read_text(errors="replace")
    assert (
        "ERROR celery.worker.consumer.consumer: Received unregistered task of type 'tool.not_registered'."
        in log
    )
    assert "The message has been ignored and discarded." in log
    assert task_id in log
