"""`toolfleet recover` settles the compensable calls a dead orchestrator left in flight.

Real Redis, a real worker process, real orchestrator processes (`recover_driver.py`) SIGKILLed while
their calls are queued or running, and `toolfleet recover` / `toolfleet show` run as the commands
they are. Every call is counted in the test Redis (`recover_tools.py`), so "undone exactly once" is
read from counters the worker, the orchestrator and the test share.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from celery import Celery

from orchestrator.saga.journal import CallRecord, Journal
from tests._waiting import wait_until
from tests.integration.orchestrator_processes import STALE_AFTER, kill_driver_when, toolfleet_on
from tests.integration.recover_driver import ASKED_KEY, NAME
from tests.integration.recover_tools import POOL, k, release
from tests.integration.worker_processes import tool_worker
from workers.protocol import META_PREFIX, call_state_key, call_task_id, compensation_task_id
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

TOOLS_MODULE = "tests.integration.recover_tools"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("recover")


@pytest.fixture(scope="module")
def worker(redis_url: str, logs: Path) -> Iterator[WorkerProcess]:
    """One prefork worker with one child on pool `recover`: a second call waits in its queue (a
    threads pool would hand it to its thread pool's own queue at once, past the reach of a revoke)."""
    hostname = f"recover-{os.getpid()}-{uuid.uuid4().hex[:6]}@recover"
    process = tool_worker(
        redis_url, [POOL], [TOOLS_MODULE], logs / "worker.log", hostname, kind="prefork", concurrency=1
    )
    with process.running(timeout_s=60):
        yield process


@dataclass
class Stage:
    """What each test here works on: the test Redis, a SQL log file of its own, and its calls' keys."""

    redis_url: str
    client: redis.Redis
    journal_file: Path
    logs: Path
    keys: list[str]

    def new_key(self, prefix: str) -> str:
        key = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.keys.append(key)
        return key

    def counts(self, key: str) -> dict[str, int]:
        return {what: int(self.client.get(k(key, what)) or 0) for what in ("runs", "done", "comps")}

    def status(self, task_id: str) -> str | None:
        raw = self.client.get(f"celery-task-meta-{task_id}")
        return str(json.loads(raw)["status"]) if raw else None

    def kill_orchestrator_when(self, ready: Callable[[], bool], calls: list[str]) -> None:
        """Run `recover_driver.py` with `calls` and SIGKILL it once `ready()` holds."""
        args = [str(self.journal_file), *calls]
        kill_driver_when(ready, "recover_driver", args, self.redis_url, self.logs, 30.0)

    def kill_while_running(self, tool: str, key: str) -> tuple[str, CallRecord]:
        """SIGKILL an orchestrator once its one call, `tool` for `key`, runs on the worker: the invocation
        it left, and that call as journaled."""
        self.kill_orchestrator_when(lambda: self.counts(key)["runs"] == 1, [f"{tool}:{key}"])
        invocation_id, [call] = self.left_calls()
        return invocation_id, call

    def finish_after_the_kill(self, tool: str, prefix: str, status: str) -> tuple[str, str, CallRecord]:
        """SIGKILL an orchestrator while its one call of `tool` runs, then let the call end, with its task
        in `status`: the call's key, the invocation left, and the call as journaled."""
        key = self.new_key(prefix)
        invocation_id, call = self.kill_while_running(tool, key)
        release(self.client, key)
        assert wait_until(lambda: self.status(call_task_id(call.idempotency_key)) == status, 30)
        return key, invocation_id, call

    def journaled_task_ids(self) -> list[str]:
        """The task ids the orchestrator journaled so far, read without creating or migrating the file."""
        if not self.journal_file.exists():
            return []
        try:
            with contextlib.closing(sqlite3.connect(self.journal_file, timeout=1.0)) as db:
                query = "SELECT task_id FROM toolfleet_tool_calls WHERE task_id IS NOT NULL"
                rows = db.execute(query).fetchall()
        except sqlite3.Error:  # the schema is not there yet
            return []
        return [str(task_id) for (task_id,) in rows]

    def published(self, task_id: str) -> bool:
        """Whether `task_id` reached the broker: a stored state, a message in its pool's queue, or one a
        worker reserved."""
        if self.client.exists(META_PREFIX + task_id):
            return True
        queues = [q for q in self.client.scan_iter(match=f"{POOL}*") if self.client.type(q) == "list"]
        if any(task_id in message for queue in queues for message in self.client.lrange(queue, 0, -1)):
            return True
        return any(task_id in message for message in self.client.hvals("unacked"))

    def left_calls(self) -> tuple[str, list[CallRecord]]:
        """The one invocation the dead orchestrator left, and its calls as journaled."""
        journal = Journal(f"sqlite:///{self.journal_file}")
        try:
            [left] = journal.invocations()
            return left.id, journal.calls(left.id)
        finally:
            journal.engine.dispose()

    def recover(self) -> subprocess.CompletedProcess[str]:
        done = self.toolfleet("recover", "--stale-after", STALE_AFTER, "--tools", TOOLS_MODULE)
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def toolfleet(self, *args: str) -> subprocess.CompletedProcess[str]:
        return toolfleet_on(list(args), self.redis_url, self.journal_file)


@pytest.fixture
def stage(redis_url: str, text_client: redis.Redis, journal_file: Path, logs: Path) -> Iterator[Stage]:
    """A test's stage; every call still blocked is released when the test ends."""
    used = Stage(redis_url, text_client, journal_file, logs, [])
    yield used
    for key in used.keys:
        if int(text_client.get(k(key, "done")) or 0) == 0:
            release(text_client, key)


# -- the story end to end ------------------------------------------------------------------------


def test_credit_running_when_its_orchestrator_dies_is_undone_once_after_recover(
    worker: WorkerProcess, stage: Stage
) -> None:
    # Given: an orchestrator whose compensable credit runs on the worker
    key = stage.new_key("running")

    # When: the orchestrator is SIGKILLed while the credit runs
    invocation_id, call = stage.kill_while_running("rc_credit", key)
    # ... the call was journaled, with its task id, before it was published under that id
    assert call.state == "dispatched"
    assert call.task_id == call_task_id(call.idempotency_key)
    assert wait_until(lambda: stage.status(call_task_id(call.idempotency_key)) == "STARTED", 10)

    # ... and `toolfleet recover` runs from another process while the credit still runs
    recovered = stage.recover()

    # Then: recover revokes it and marks it abandoned; nothing is undone yet, nothing lost
    assert f"invocation {invocation_id}:" in recovered.stdout
    assert "abandoned    rc_credit (1)" in recovered.stdout
    assert "unknown" not in recovered.stdout
    assert stage.counts(key) == {"runs": 1, "done": 0, "comps": 0}

    # When: the credit finishes anyway
    release(stage.client, key)

    # Then: its worker undoes it, exactly once
    assert wait_until(lambda: stage.status(compensation_task_id(call.idempotency_key)) == "SUCCESS", 30)
    assert stage.counts(key) == {"runs": 1, "done": 1, "comps": 1}
    assert stage.client.get(k(key, "effect")) is None
    # ... `toolfleet show` says so
    shown = stage.toolfleet("show", invocation_id)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "abandoned" in shown.stdout
    assert "late compensation: compensated: undone by its worker after it finished late" in shown.stdout
    assert "revoked and abandoned while in flight" in shown.stdout
    # ... and recovering again undoes nothing twice
    again = stage.recover()
    assert "Nothing to recover" in again.stdout
    assert stage.counts(key) == {"runs": 1, "done": 1, "comps": 1}


# -- each state recover finds --------------------------------------------------------------------


def test_credit_that_succeeded_unjournaled_is_compensated_by_recover(
    worker: WorkerProcess, stage: Stage
) -> None:
    # Given: an orchestrator SIGKILLed while its credit runs, and the credit then succeeds
    key, invocation_id, _ = stage.finish_after_the_kill("rc_credit", "succeeded", "SUCCESS")
    assert stage.counts(key) == {"runs": 1, "done": 1, "comps": 0}

    # When: recover runs
    recovered = stage.recover()

    # Then: the credit is compensated, once
    assert "compensated  rc_credit (1)" in recovered.stdout
    assert stage.counts(key) == {"runs": 1, "done": 1, "comps": 1}
    assert stage.client.get(k(key, "effect")) is None
    _, [settled] = stage.left_calls()
    assert (settled.state, settled.result) == ("compensated", f"credited {key}")
    shown = stage.toolfleet("show", invocation_id)
    assert "compensation succeeded after 1 attempt(s) (recovered: the orchestrator stopped" in shown.stdout


def test_credit_marked_finished_without_its_result_is_left_for_the_next_recover(
    worker: WorkerProcess, stage: Stage
) -> None:
    # Given: an orchestrator SIGKILLed while its credit runs, and the credit marked finished (as its
    # worker marks a call once the tool returned) while its result is not in the backend
    key = stage.new_key("no-result")
    invocation_id, call = stage.kill_while_running("rc_credit", key)
    task_id = call_task_id(call.idempotency_key)
    stage.client.set(call_state_key(task_id), "finished")

    # When: recover runs, and the result does not arrive within its grace time
    recovered = stage.recover()

    # Then: the outcome is unknown: nothing is undone on a made-up result, the call stays dispatched,
    # and the invocation stays unfinished
    assert "unknown      rc_credit (1)" in recovered.stdout
    assert "compensated" not in recovered.stdout
    assert stage.counts(key) == {"runs": 1, "done": 0, "comps": 0}
    _, [left] = stage.left_calls()
    assert (left.state, left.result) == ("dispatched", None)
    journal = Journal(f"sqlite:///{stage.journal_file}")
    try:
        record = journal.invocation(invocation_id)
        assert record is not None and record.state == "compensating"
    finally:
        journal.engine.dispose()

    # When: the credit's result arrives, and recover runs again
    release(stage.client, key)
    assert wait_until(lambda: stage.status(task_id) == "SUCCESS", 30)
    again = stage.recover()

    # Then: the credit is compensated once, its real result journaled
    assert "compensated  rc_credit (1)" in again.stdout
    assert stage.counts(key) == {"runs": 1, "done": 1, "comps": 1}
    _, [settled] = stage.left_calls()
    assert (settled.state, settled.result) == ("compensated", f"credited {key}")


def test_payment_that_failed_unjournaled_is_left_alone_by_recover(
    worker: WorkerProcess, stage: Stage
) -> None:
    # Given: an orchestrator SIGKILLed while its payment runs, and the payment then fails
    key, invocation_id, call = stage.finish_after_the_kill("rc_pay", "failed", "FAILURE")

    # When: recover runs
    recovered = stage.recover()

    # Then: nothing is undone, and everyone is told why
    assert "not undone   rc_pay (1)  (it failed: nothing to undo)" in recovered.stdout
    assert stage.counts(key) == {"runs": 1, "done": 1, "comps": 0}
    _, [settled] = stage.left_calls()
    assert (settled.state, settled.result) == ("failed", f"payment {key} rejected")
    shown = stage.toolfleet("show", invocation_id)
    assert "nothing to undo: the call failed" in shown.stdout
    assert stage.status(compensation_task_id(call.idempotency_key)) is None


def test_queued_and_running_credits_are_revoked_and_abandoned_and_undone_once_if_they_finish(
    worker: WorkerProcess, worker_app: Celery, stage: Stage
) -> None:
    # Given: an orchestrator whose two credits went out at once to a worker with one slot
    first, second = stage.new_key("slot-a"), stage.new_key("slot-b")

    def one_runs_one_waits() -> bool:
        # one credit ran, and both left the orchestrator: journaled, then in the broker or started
        running = stage.counts(first)["runs"] + stage.counts(second)["runs"] == 1
        task_ids = stage.journaled_task_ids()
        return running and len(task_ids) == 2 and all(stage.published(t) for t in task_ids)

    # When: it is SIGKILLed while one credit runs and the other waits in the queue
    stage.kill_orchestrator_when(one_runs_one_waits, [f"rc_credit:{first}", f"rc_credit:{second}"])
    invocation_id, calls = stage.left_calls()
    running, queued = (first, second) if stage.counts(first)["runs"] else (second, first)
    by_key = {json.loads(c.arguments)["key"]: c for c in calls}
    queued_task = call_task_id(by_key[queued].idempotency_key)
    recovered = stage.recover()

    # Then: both are revoked and abandoned
    assert recovered.stdout.count("abandoned    rc_credit") == 2, recovered.stdout
    assert {c.state for c in stage.left_calls()[1]} == {"abandoned"}

    def revoked_on_the_worker() -> bool:
        answer = worker_app.control.inspect(timeout=1.0, destination=[worker.hostname]).revoked() or {}
        return any(queued_task in ids for ids in answer.values())

    assert wait_until(revoked_on_the_worker, 10)

    # When: the running credit finishes anyway, freeing the slot for the queued one
    release(stage.client, running)

    # Then: the running one is undone once by its worker; the queued one never runs
    assert wait_until(lambda: stage.counts(running)["comps"] == 1, 30)
    assert wait_until(lambda: stage.status(queued_task) == "REVOKED", 10)
    assert stage.counts(running) == {"runs": 1, "done": 1, "comps": 1}
    assert stage.counts(queued) == {"runs": 0, "done": 0, "comps": 0}
    shown = stage.toolfleet("show", invocation_id).stdout
    assert "late compensation: compensated: undone by its worker after it finished late" in shown
    assert "late compensation: not_finished: revoked before it ran: nothing to undo" in shown


# -- carried on, not undone ----------------------------------------------------------------------


def test_recover_with_the_agent_carries_the_invocation_on_to_its_answer(
    worker: WorkerProcess, stage: Stage
) -> None:
    # Given: an orchestrator SIGKILLed while its credit runs (released a moment after recover began)
    key = stage.new_key("carried")
    asked_before = int(stage.client.get(ASKED_KEY) or 0)
    invocation_id, call = stage.kill_while_running("rc_credit", key)
    threading.Timer(1.0, release, (stage.client, key)).start()

    # When: `toolfleet recover` runs with the invocation's agent
    agent = f"{NAME}=tests.integration.recover_driver:agent"
    done = stage.toolfleet("recover", "--stale-after", STALE_AFTER, "--agent", agent)

    # Then: the invocation went on: the running credit re-attached to (it ran once, nothing undone),
    # its result to the model, asked once, whose answer ends it; the journal says it succeeded
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"invocation {invocation_id}:\n  carried on   to its answer: 'done'" in done.stdout, done.stdout
    assert stage.counts(key) == {"runs": 1, "done": 1, "comps": 0}
    assert stage.client.get(k(key, "effect")) == "credited"
    assert int(stage.client.get(ASKED_KEY) or 0) == asked_before + 1
    journal = Journal(f"sqlite:///{stage.journal_file}")
    try:
        record = journal.invocation(invocation_id)
        assert record is not None and record.state == "succeeded" and record.final_answer == "done"
        assert [c.state for c in journal.calls(invocation_id)] == ["succeeded"]
        assert journal.calls(invocation_id)[0].id == call.id
    finally:
        journal.engine.dispose()


def test_recover_without_the_agent_undoes_it_and_says_so(worker: WorkerProcess, stage: Stage) -> None:
    # Given: an orchestrator SIGKILLed after its credit succeeded
    key, invocation_id, _ = stage.finish_after_the_kill("rc_credit", "undone", "SUCCESS")

    # When: `toolfleet recover` runs without an agent
    done = stage.recover()

    # Then: it is compensated as before, and the command says it could have gone on
    assert "1 invocation(s) could go on from their checkpoints, but no --agent" in done.stdout
    assert f"invocation {invocation_id}:" in done.stdout and "compensated  rc_credit (1)" in done.stdout
    assert stage.counts(key) == {"runs": 1, "done": 1, "comps": 1}
