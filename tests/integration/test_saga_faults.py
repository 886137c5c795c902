"""Fault injection into saga compensation (SPEC §7): late calls, dead orchestrators, dead workers.

Real Redis, real worker processes, real orchestrator processes; no eager mode, no mocks. The tools
(`fault_tools.py`) count every run and every compensation in the test Redis, so "exactly once" is
read back from counters that the test, the workers and the orchestrator subprocesses all share.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from orchestrator import CeleryExecutor, LocalExecutor, Result, ScriptedChatModel, ToolExecutionResultMessage
from orchestrator.saga import rolled_back_text
from orchestrator.saga._late import late_compensation
from orchestrator.saga.journal import Journal
from tests._background import Background
from tests._waiting import wait_until
from tests.integration import fault_tools
from tests.integration.fault_tools import HEAVY_POOL, POOL, k, order_key
from tests.integration.orchestrator_processes import (
    STALE_AFTER,
    failed_saga_row,
    kill_driver_when,
    toolfleet_on,
)
from tests.integration.saga_driver import booking_keys
from tests.integration.scripts import ask, call, saga_service
from tests.integration.worker_processes import tool_worker
from tests.otlp_receiver import OtlpReceiver
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

TOOLS_MODULE = "tests.integration.fault_tools"
RECOVER = ["recover", "--stale-after", STALE_AFTER, "--tools", TOOLS_MODULE]  # every stale invocation, now
LATE_TEXT = "Tool 'fault_late' did not finish within 0.3 s"
# Few, fast retries of a failing compensation: for the worker and the orchestrator alike.
RETRY_ENV = {"TOOLFLEET_COMPENSATION_RETRIES": "1", "TOOLFLEET_RETRY_BACKOFF_S": "0.01"}


# -- fixtures ------------------------------------------------------------------------------------


def _worker(
    redis_url: str, logs: Path, pool: str, kind: str, concurrency: int, name: str, env: dict[str, str]
) -> WorkerProcess:
    hostname = f"{name}-{os.getpid()}-{uuid.uuid4().hex[:6]}@faults"
    log_path = logs / f"{name}.log"
    return tool_worker(
        redis_url, [pool], [TOOLS_MODULE], log_path, hostname, kind=kind, concurrency=concurrency, env=env
    )


# Where the shared `executor` fixture (tests/integration/conftest.py) runs this module's calls.
WORKERS = ["faults_worker"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("saga-faults")


@pytest.fixture(scope="module")
def faults_worker(redis_url: str, logs: Path) -> Iterator[WorkerProcess]:
    """One threads worker serving pool `faults`, with few, fast compensation retries."""
    worker = _worker(redis_url, logs, POOL, "threads", 16, "faults", RETRY_ENV)
    with worker.running(timeout_s=60):
        yield worker


@pytest.fixture
def start_heavy(redis_url: str, logs: Path) -> Iterator[Callable[..., list[WorkerProcess]]]:
    """Start N prefork workers (concurrency 1) on pool `faults-heavy`, with `env` added to theirs; all
    stopped after the test."""
    started: list[WorkerProcess] = []

    def start(count: int, env: dict[str, str] | None = None) -> list[WorkerProcess]:
        fresh = [
            _worker(redis_url, logs, HEAVY_POOL, "prefork", 1, f"heavy{len(started) + i}", env or {})
            for i in range(count)
        ]
        started.extend(fresh)
        for worker in fresh:
            worker.wait_ready(timeout_s=60)
        return fresh

    try:
        yield start
    finally:
        for worker in started:
            worker.stop(timeout_s=5)


@pytest.fixture
def celery_executor(settings: Settings) -> Iterator[CeleryExecutor]:
    chosen = CeleryExecutor(settings=settings)
    yield chosen
    chosen.close()


# -- helpers -------------------------------------------------------------------------------------


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def count(text_client: redis.Redis, key: str, what: str) -> int:
    return int(text_client.get(k(key, what)) or 0)


def counts(text_client: redis.Redis, key: str) -> dict[str, int]:
    """Tool runs started/finished and compensations started/completed of call `key`."""
    return {what: count(text_client, key, what) for what in ("runs", "done", "comp_starts", "comps")}


def undone_after_finish(text_client: redis.Redis, key: str) -> bool:
    """The (latest) compensation of `key` started after its tool finished."""
    finished, compensated = text_client.get(k(key, "finished_at")), text_client.get(k(key, "comp_at"))
    assert finished is not None and compensated is not None, (finished, compensated)
    return float(compensated) >= float(finished)


def kill_saga_driver_when(
    ready: Callable[[], bool],
    args: list[str],
    redis_url: str,
    logs: Path,
    env: dict[str, str | None] | None = None,
) -> None:
    """Run `saga_driver.py ARGS` in a subprocess and SIGKILL it once `ready()` holds."""
    kill_driver_when(ready, "saga_driver", args, redis_url, logs, 25.0, env)


def owner_of(pid: int, workers: list[WorkerProcess]) -> WorkerProcess:
    owners = [w for w in workers if pid in w.child_pids()]
    assert len(owners) == 1, f"pid {pid} is a child of {[w.hostname for w in owners]}"
    return owners[0]


# -- 1. a call abandoned at its deadline is compensated once, after it finishes ---------------------


def test_call_finishing_after_its_deadline_is_compensated_once_after_it_finishes(
    executor: LocalExecutor | CeleryExecutor, text_client: redis.Redis, journal: Journal
) -> None:
    # Given: a compensable tool with a 0.3 s deadline that books after 1 s
    key = unique("late")
    late = call("late-1", "fault_late", key=key, seconds=1.0)
    model = ScriptedChatModel([ask(late), "went on"])

    # When: the model calls it
    started = time.monotonic()
    result = saga_service(model, executor, journal, [fault_tools.tools]).chat("book late")
    elapsed = time.monotonic() - started

    # Then: the invocation gets the timeout text at the deadline and goes on without waiting
    assert result.content == "went on"
    assert elapsed < 1.0, f"the invocation waited {elapsed:.2f} s for the late call"
    [execution] = result.tool_executions
    assert (execution.result, execution.has_failed) == (LATE_TEXT, True)
    sent = model.requests[1].messages[-1]
    assert isinstance(sent, ToolExecutionResultMessage)
    assert (sent.tool_name, sent.text, sent.is_error) == ("fault_late", LATE_TEXT, True)
    assert count(text_client, key, "done") == 0, "the tool finished before its deadline: nothing was late"

    # ... and once the tool finishes, its booking is undone exactly once, after it finished
    assert wait_until(lambda: count(text_client, key, "comps") >= 1, 5.0), counts(text_client, key)
    assert text_client.get(k(key, "effect")) is None
    assert undone_after_finish(text_client, key)
    time.sleep(2.0)  # a non-event (no second run, no second undo): waited out, there is nothing to await
    assert counts(text_client, key) == {"runs": 1, "done": 1, "comp_starts": 1, "comps": 1}
    assert text_client.get(k(key, "effect")) is None
    # ... and the journal shows the call abandoned; on workers, Redis has its late compensation done
    [record] = journal.abandoned_calls(result.invocation_id)
    assert record.tool == "fault_late"
    if isinstance(executor, CeleryExecutor):
        assert late_compensation(text_client, record).state == "compensated"


def test_call_finishing_at_its_deadline_is_either_collected_or_compensated(
    executor: LocalExecutor | CeleryExecutor, text_client: redis.Redis, journal: Journal
) -> None:
    # Given: a tool with a 0.3 s deadline that finishes at ~0.29 s, on both sides of the deadline
    durations = [0.28, 0.285, 0.29, 0.29, 0.295, 0.297, 0.299, 0.3, 0.302, 0.305, 0.31]

    # When: each is the single call of its own invocation
    outcomes: dict[str, bool] = {}  # key -> timed out
    for index, seconds in enumerate(durations):
        key = unique(f"race{index}")
        model = ScriptedChatModel(
            [ask(call(f"race-{index}", "fault_late", key=key, seconds=seconds)), "done"]
        )
        result = saga_service(model, executor, journal, [fault_tools.tools]).chat("book on time")
        [execution] = result.tool_executions
        outcomes[key] = execution.has_failed
        expected = LATE_TEXT if execution.has_failed else f"booked {key}"
        assert execution.result == expected, (seconds, execution)
    timed_out = [key for key, late in outcomes.items() if late]
    collected = [key for key, late in outcomes.items() if not late]

    # Then: every abandoned call that ran is compensated once after it finished; no collected call
    # is, nor one that never started before its deadline (its task expired unrun: nothing to undo)
    def settled(key: str) -> bool:
        done = counts(text_client, key)
        return done["runs"] == 0 or done["comps"] >= 1

    assert wait_until(lambda: all(settled(key) for key in timed_out), 5.0), {
        key: counts(text_client, key) for key in timed_out
    }
    time.sleep(1.0)  # a wrong compensation of a collected call would have started by now
    ran = [key for key in timed_out if count(text_client, key, "runs") > 0]
    for key in collected:
        assert counts(text_client, key) == {"runs": 1, "done": 1, "comp_starts": 0, "comps": 0}, key
        assert text_client.get(k(key, "effect")) == "booked"
    for key in set(timed_out) - set(ran):
        assert counts(text_client, key) == {"runs": 0, "done": 0, "comp_starts": 0, "comps": 0}, key
    for key in ran:
        assert counts(text_client, key) == {"runs": 1, "done": 1, "comp_starts": 1, "comps": 1}, key
        assert text_client.get(k(key, "effect")) is None
        assert undone_after_finish(text_client, key)
    unrun = len(timed_out) - len(ran)
    print(f"collected {len(collected)}, abandoned and compensated {len(ran)}, expired unrun {unrun}")


# -- 2. an orchestrator killed mid-compensation: `toolfleet recover` finishes the saga -------------


def test_orchestrator_killed_mid_compensation_is_finished_by_recover(
    faults_worker: WorkerProcess, redis_url: str, text_client: redis.Redis, journal_file: Path, logs: Path
) -> None:
    # Given: an orchestrator process whose saga undoes three bookings (c, b, a), 1.5 s each
    group = unique("kill")
    a, b, c = booking_keys(group)

    # When: it is SIGKILLed while the second compensation (b) runs
    kill_saga_driver_when(
        lambda: text_client.llen(order_key(group)) >= 2, [str(journal_file), group, "1.5"], redis_url, logs
    )
    journal = Journal(f"sqlite:///{journal_file}")
    [left] = journal.invocations()
    assert left.state == "compensating"
    states = {row.tool_call_id: row.state for row in journal.compensations(left.id)}
    assert sorted(states.values()) == ["pending", "running", "succeeded"], states
    assert count(text_client, a, "comp_starts") == 0

    recovered = toolfleet_on(
        ["recover", "--stale-after", STALE_AFTER, "--tools", TOOLS_MODULE], redis_url, journal_file
    )

    # Then: recover completes the saga and exits 0
    output = recovered.stdout + recovered.stderr
    assert recovered.returncode == 0, output
    assert f"invocation {left.id}:" in recovered.stdout
    assert f"compensated  fault_book (book-{a})" in recovered.stdout
    assert f"compensated  fault_book (book-{b})" in recovered.stdout
    assert "FAILED" not in recovered.stdout
    # ... every booking was undone exactly once, latest first, none started twice
    for key in (a, b, c):
        assert counts(text_client, key) == {"runs": 1, "done": 1, "comp_starts": 1, "comps": 1}, key
        assert text_client.get(k(key, "effect")) is None
    assert text_client.lrange(order_key(group), 0, -1) == [c, b, a]
    # ... the journal shows every compensation succeeded and the invocation failed, recovered
    assert [row.state for row in journal.compensations(left.id)] == ["succeeded"] * 3
    calls = {row.call_id: row.state for row in journal.calls(left.id)}
    assert calls == {
        f"book-{a}": "compensated",
        f"book-{b}": "compensated",
        f"book-{c}": "compensated",
        "fail-1": "failed",
    }
    record = journal.invocation(left.id)
    assert record is not None and record.state == "failed"
    assert record.error is not None and "recovered after its orchestrator stopped" in record.error
    # ... and a second run finds nothing left to do
    again = toolfleet_on(RECOVER, redis_url, journal_file)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Nothing to recover" in again.stdout
    for key in (a, b, c):
        assert counts(text_client, key) == {"runs": 1, "done": 1, "comp_starts": 1, "comps": 1}, key


def test_a_recovered_saga_continues_the_trace_of_the_orchestrator_that_died(
    faults_worker: WorkerProcess,
    redis_url: str,
    text_client: redis.Redis,
    journal_file: Path,
    logs: Path,
    receiver: OtlpReceiver,
) -> None:
    # Given: a traced orchestrator process SIGKILLed mid-compensation (its invocation's span never ends),
    # once the spans of its two bookings have reached the receiver (its exporter sends every 50 ms, or
    # later on a busy machine: a kill before that would lose them, which is not what is tested here)
    group = unique("traced")
    traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}

    def bookings_exported() -> bool:
        return len([s for s in receiver.spans if s.name == "execute_tool fault_book"]) >= 2

    kill_saga_driver_when(
        lambda: text_client.llen(order_key(group)) >= 1 and bookings_exported(),
        [str(journal_file), group, "1.0", "2"],
        redis_url,
        logs,
        traced,
    )
    [left] = Journal(f"sqlite:///{journal_file}").invocations()
    booked = [s for s in receiver.spans if s.name == "execute_tool fault_book"]
    assert len(booked) == 2 and all(s.service == "saga-driver" for s in booked), receiver.spans
    # When: a traced `toolfleet recover` finishes the saga
    recovered = toolfleet_on(RECOVER, redis_url, journal_file, env=traced)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    spans = receiver.wait_for({"recover_invocation", "compensate fault_book"})
    # Then: its spans are in the dead process's trace, under the invocation's span
    [recovery] = [s for s in spans if s.name == "recover_invocation"]
    assert recovery.service == "toolfleet-orchestrator"
    assert recovery.attributes["toolfleet.invocation.id"] == left.id
    assert (recovery.trace_id, recovery.parent_id) == (booked[0].trace_id, booked[0].parent_id)
    undone = [s for s in spans if s.name == "compensate fault_book" and s.parent_id == recovery.span_id]
    assert undone and all(s.trace_id == recovery.trace_id for s in undone)
    assert recovery.attributes["toolfleet.compensated"] == 2


# -- 3. a worker killed during a compensation: redelivered and completed -------------------------


@dataclasses.dataclass
class HeavySaga:
    """Sagas that book on the prefork pool (the booking's undo takes 1.5 s) and then fail."""

    executor: CeleryExecutor
    journal: Journal
    client: redis.Redis

    def undoing(self, prefix: str) -> tuple[str, Background[Result], int]:
        """One such saga, run in the background until the booking's compensation has started: the
        booking's key, the running saga, and the pid of the process undoing it."""
        group = unique(prefix)
        key = f"{group}-x"
        model = ScriptedChatModel(
            [
                ask(call("heavy-1", "heavy_book", key=key, group=group, undo_seconds=1.5)),
                ask(call("fail-1", "fault_fail", reason=group)),
                "rolled back",
            ]
        )
        running = Background(
            lambda: saga_service(model, self.executor, self.journal, [fault_tools.tools]).chat("book heavy")
        )
        assert wait_until(lambda: count(self.client, key, "comp_starts") >= 1, 20.0), counts(self.client, key)
        return key, running, int(self.client.get(k(key, "comp_pid")) or 0)

    def assert_rolled_back(self, result: Result) -> None:
        """The booking was undone once and the model told so; the journal says the same."""
        assert result.content == "rolled back"
        booked, failed = result.tool_executions
        assert (booked.request.name, booked.result, booked.status) == (
            "heavy_book",
            rolled_back_text("heavy_book", "fault_fail"),
            "rolled_back",
        )
        assert failed.has_failed
        assert result.invocation_id is not None
        [compensation] = self.journal.compensations(result.invocation_id)
        assert (compensation.tool, compensation.state, compensation.error) == (
            "heavy_book",
            "succeeded",
            None,
        )
        record = self.journal.invocation(result.invocation_id)
        assert record is not None and record.state == "succeeded"


@pytest.fixture
def heavy_saga(
    faults_worker: WorkerProcess, celery_executor: CeleryExecutor, text_client: redis.Redis, journal: Journal
) -> HeavySaga:
    return HeavySaga(celery_executor, journal, text_client)


def test_compensation_whose_prefork_child_is_killed_is_redelivered_and_completed(
    start_heavy: Callable[[int], list[WorkerProcess]], heavy_saga: HeavySaga
) -> None:
    # Given: a prefork worker (one child) whose compensation of `heavy_book` takes 1.5 s
    [worker] = start_heavy(1)

    # When: the pool child is SIGKILLed while it undoes the booking
    key, running, child = heavy_saga.undoing("child")
    assert child in worker.child_pids()
    os.kill(child, signal.SIGKILL)

    # Then: the compensation is delivered again, taken over from the dead child, and completes once
    result = running.join(30.0)
    heavy_saga.assert_rolled_back(result)
    assert counts(heavy_saga.client, key) == {"runs": 1, "done": 1, "comp_starts": 2, "comps": 1}
    assert int(heavy_saga.client.get(k(key, "comp_pid")) or 0) != child
    assert heavy_saga.client.get(k(key, "effect")) is None
    time.sleep(1.0)  # a non-event (no second completion): waited out, there is nothing to await
    assert count(heavy_saga.client, key, "comps") == 1


def test_compensation_whose_worker_is_killed_completes_on_another_worker(
    start_heavy: Callable[[int], list[WorkerProcess]], heavy_saga: HeavySaga
) -> None:
    # Given: two prefork workers on the same pool; the compensation of `heavy_book` takes 1.5 s
    workers = start_heavy(2)

    # When: the whole worker that runs the compensation is SIGKILLed
    key, running, first = heavy_saga.undoing("worker")
    doomed = owner_of(first, workers)
    survivor = next(w for w in workers if w is not doomed)
    doomed.kill()

    # Then: the other worker takes the lock over from the dead holder and completes it, once
    result = running.join(20.0)
    heavy_saga.assert_rolled_back(result)
    assert counts(heavy_saga.client, key) == {"runs": 1, "done": 1, "comp_starts": 2, "comps": 1}
    assert owner_of(int(heavy_saga.client.get(k(key, "comp_pid")) or 0), workers) is survivor
    assert heavy_saga.client.get(k(key, "effect")) is None


# -- 4. a compensation that kept failing is listed by `toolfleet sagas --failed` -----------------


def test_compensation_that_kept_failing_is_listed_by_sagas_failed(
    faults_worker: WorkerProcess,
    redis_url: str,
    text_client: redis.Redis,
    journal: Journal,
    journal_file: Path,
) -> None:
    # Given: a booking whose compensation always raises, with one retry on worker and orchestrator
    settings = Settings.from_env(
        {
            "TOOLFLEET_REDIS_URL": redis_url,
            "TOOLFLEET_HEARTBEAT_TTL_S": "2",
            "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "0.2",
            **RETRY_ENV,
        }
    )
    assert (settings.compensation_retries, settings.retry_backoff_s) == (1, 0.01)
    key = unique("fragile")
    model = ScriptedChatModel(
        [
            ask(call("fragile-1", "fault_fragile", key=key)),
            ask(call("fail-1", "fault_fail", reason=key)),
            "sorry",
        ]
    )
    executor = CeleryExecutor(settings=settings)
    try:
        # When: a later call fails, so the saga tries to undo the booking
        result = saga_service(model, executor, journal, [fault_tools.tools]).chat("book fragile")
    finally:
        executor.close()

    # Then: the undo was tried twice (one retry), kept failing, and the saga went on
    assert result.content == "sorry"
    assert counts(text_client, key) == {"runs": 1, "done": 1, "comp_starts": 2, "comps": 0}
    assert text_client.get(k(key, "effect")) == "booked"
    error = f"the booking {key} cannot be cancelled"
    assert result.invocation_id is not None
    [compensation] = journal.compensations(result.invocation_id)
    assert (compensation.tool, compensation.state, compensation.error) == ("fault_fragile", "failed", error)
    # ... and the CLI lists it for a person
    row = failed_saga_row(result.invocation_id, redis_url, journal_file)
    assert row[:2] == [result.invocation_id, "fragile-1"], row
    assert row[2].startswith('fault_fragile({"key":') and "failed" in row[3:], row
    assert " ".join(row).endswith(error), row


# -- 5. a concurrent batch: its compensations follow request order, not completion order ---------


def test_compensations_of_a_concurrent_batch_run_latest_first_in_request_order(
    executor: LocalExecutor | CeleryExecutor, text_client: redis.Redis, journal: Journal
) -> None:
    # Given: one batch of three bookings finishing in another order than requested (b, c, a), and a failure
    group = unique("order")
    a, b, c = (f"{group}-{suffix}" for suffix in "abc")
    batch = [
        call("book-a", "fault_slow_book", key=a, group=group, seconds=0.6),
        call("book-b", "fault_slow_book", key=b, group=group, seconds=0.0),
        call("book-c", "fault_slow_book", key=c, group=group, seconds=0.3),
        call("fail-1", "fault_fail", reason=group),
    ]
    model = ScriptedChatModel([ask(*batch), "rolled back"])

    # When: the saga compensates
    result = saga_service(model, executor, journal, [fault_tools.tools]).chat("book three at once")

    # Then: every booking was undone once, latest (in request order) first
    assert [execution.status for execution in result.tool_executions][:3] == ["rolled_back"] * 3
    for key in (a, b, c):
        assert counts(text_client, key) == {"runs": 1, "done": 1, "comp_starts": 1, "comps": 1}, key
    assert text_client.lrange(order_key(group), 0, -1) == [c, b, a]


# -- found while writing the above: product bugs, kept as strict xfails ---------------------------


def test_recover_waits_for_a_compensation_that_is_still_running(
    faults_worker: WorkerProcess, redis_url: str, text_client: redis.Redis, journal_file: Path, logs: Path
) -> None:
    # Given: an orchestrator killed right after it dispatched a compensation that takes 8 s
    group = unique("longundo")
    [booked] = booking_keys(group, 1)
    kill_saga_driver_when(
        lambda: count(text_client, booked, "comp_starts") >= 1,
        [str(journal_file), group, "8", "1"],
        redis_url,
        logs,
    )

    # When: `toolfleet recover` runs while that compensation still runs on its (live) worker
    recovered = toolfleet_on(
        ["recover", "--stale-after", STALE_AFTER, "--tools", TOOLS_MODULE], redis_url, journal_file
    )

    # Then: it waits for it instead of running it again, and reports it compensated
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert f"compensated  fault_book (book-{booked})" in recovered.stdout
    journal = Journal(f"sqlite:///{journal_file}")
    [record] = journal.invocations()
    assert [(row.state, row.error) for row in journal.compensations(record.id)] == [("succeeded", None)]
    assert counts(text_client, booked) == {"runs": 1, "done": 1, "comp_starts": 1, "comps": 1}


def test_late_call_is_compensated_even_if_the_local_executor_is_closed_meanwhile(
    text_client: redis.Redis, journal: Journal
) -> None:
    # Given: an in-process compensable call abandoned at its 0.3 s deadline, finishing at 1 s
    key = unique("closed")
    executor = LocalExecutor()
    model = ScriptedChatModel([ask(call("late-1", "fault_late", key=key, seconds=1.0)), "went on"])
    result = saga_service(model, executor, journal, [fault_tools.tools]).chat("book late")
    assert result.tool_executions[0].result == LATE_TEXT

    # When: the application closes its executor before the call finishes
    executor.close()

    # Then: the late call is still compensated once it finishes
    assert wait_until(lambda: count(text_client, key, "done") == 1, 3.0)
    assert wait_until(lambda: count(text_client, key, "comps") == 1, 3.0), counts(text_client, key)
    assert text_client.get(k(key, "effect")) is None
