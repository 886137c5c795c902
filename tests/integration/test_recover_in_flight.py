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
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from orchestrator.saga.journal import CallRecord, Journal
from tests._waiting import wait_until
from tests.integration.recover_tools import POOL, k, release
from workers.protocol import META_PREFIX, call_task_id, compensation_task_id
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

REPO_ROOT = str(Path(__file__).resolve().parents[2])
TOOLS_MODULE = "tests.integration.recover_tools"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("recover")


@pytest.fixture(scope="module")
def worker(redis_url: str, logs: Path) -> Iterator[WorkerProcess]:
    """One prefork worker with one child on pool `recover`: a second call waits in its queue (a
    threads pool would hand it to its thread pool's own queue at once, past the reach of a revoke)."""
    process = WorkerProcess(
        pools=[POOL],
        modules=[TOOLS_MODULE],
        redis_url=redis_url,
        kind="prefork",
        concurrency=1,
        hostname=f"recover-{os.getpid()}-{uuid.uuid4().hex[:6]}@recover",
        env={"TOOLFLEET_HEARTBEAT_TTL_S": "2", "PYTHONPATH": REPO_ROOT},
        log_path=logs / "worker.log",
        loglevel="INFO",
    )
    with process.running(timeout_s=60):
        yield process


@pytest.fixture
def keys(text_client: redis.Redis) -> Iterator[list[str]]:
    """The call keys a test uses; every call still blocked is released when the test ends."""
    used: list[str] = []
    yield used
    for key in used:
        if int(text_client.get(k(key, "done")) or 0) == 0:
            release(text_client, key)


# -- helpers -------------------------------------------------------------------------------------


def _env(redis_url: str, journal_file: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": REPO_ROOT,
        "TOOLFLEET_REDIS_URL": redis_url,
        "TOOLFLEET_DATABASE_URL": f"sqlite:///{journal_file}",
        "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "0.2",
        "TOOLFLEET_HEARTBEAT_TTL_S": "2",
    }
    env.pop("TOOLFLEET_BROKER_URL", None)
    env.pop("TOOLFLEET_RESULT_BACKEND", None)
    return env


def toolfleet(args: list[str], redis_url: str, journal_file: Path) -> subprocess.CompletedProcess[str]:
    """`toolfleet ARGS` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=REPO_ROOT,
        env=_env(redis_url, journal_file),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def recover(redis_url: str, journal_file: Path) -> subprocess.CompletedProcess[str]:
    done = toolfleet(["recover", "--stale-after", "0", "--tools", TOOLS_MODULE], redis_url, journal_file)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def kill_orchestrator_when(
    ready: Callable[[], bool], calls: list[str], redis_url: str, journal_file: Path, logs: Path
) -> None:
    """Run `recover_driver.py` with `calls` and SIGKILL it once `ready()` holds."""
    log_path = logs / f"driver-{uuid.uuid4().hex[:8]}.log"
    with open(log_path, "wb") as log:
        driver = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.recover_driver", str(journal_file), *calls],
            cwd=REPO_ROOT,
            env=_env(redis_url, journal_file),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        reached = wait_until(lambda: ready() or driver.poll() is not None, 30.0) and driver.poll() is None
        assert reached, f"the orchestrator never reached the point to kill it at\n{log_path.read_text()}"
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=10)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=10)
    assert driver.returncode == -signal.SIGKILL


def counts(text_client: redis.Redis, key: str) -> dict[str, int]:
    return {what: int(text_client.get(k(key, what)) or 0) for what in ("runs", "done", "comps")}


def status(text_client: redis.Redis, task_id: str) -> str | None:
    raw = text_client.get(f"celery-task-meta-{task_id}")
    return str(json.loads(raw)["status"]) if raw else None


def left_calls(journal_file: Path) -> tuple[str, list[CallRecord]]:
    """The one invocation the dead orchestrator left, and its calls as journaled."""
    journal = Journal(f"sqlite:///{journal_file}")
    try:
        [left] = journal.invocations()
        return left.id, journal.calls(left.id)
    finally:
        journal.engine.dispose()


def journaled_task_ids(journal_file: Path) -> list[str]:
    """The task ids the orchestrator journaled so far, read without creating or migrating the file."""
    if not journal_file.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(journal_file, timeout=1.0)) as db:
            rows = db.execute("SELECT task_id FROM toolfleet_tool_calls WHERE task_id IS NOT NULL").fetchall()
    except sqlite3.Error:  # the schema is not there yet
        return []
    return [str(task_id) for (task_id,) in rows]


def published(client: redis.Redis, task_id: str) -> bool:
    """Whether `task_id` reached the broker: stored state, a message in its pool's queue, or reserved."""
    if client.exists(META_PREFIX + task_id):
        return True
    queues = [q for q in client.scan_iter(match=f"{POOL}*") if client.type(q) == "list"]
    if any(task_id in message for queue in queues for message in client.lrange(queue, 0, -1)):
        return True
    return any(task_id in message for message in client.hvals("unacked"))


def new_key(keys: list[str], prefix: str) -> str:
    key = f"{prefix}-{uuid.uuid4().hex[:8]}"
    keys.append(key)
    return key


# -- the story end to end ------------------------------------------------------------------------


def test_credit_running_when_its_orchestrator_dies_is_undone_once_after_recover(
    worker: WorkerProcess,
    redis_url: str,
    text_client: redis.Redis,
    journal_file: Path,
    logs: Path,
    keys: list[str],
) -> None:
    # Given: an orchestrator whose compensable credit runs on the worker
    key = new_key(keys, "running")

    # When: the orchestrator is SIGKILLed while the credit runs
    kill_orchestrator_when(
        lambda: counts(text_client, key)["runs"] == 1, [f"rc_credit:{key}"], redis_url, journal_file, logs
    )
    invocation_id, [call] = left_calls(journal_file)
    # ... the call was journaled, with its task id, before it was published under that id
    assert call.state == "dispatched"
    assert call.task_id == call_task_id(call.idempotency_key)
    assert wait_until(lambda: status(text_client, call_task_id(call.idempotency_key)) == "STARTED", 10)

    # ... and `toolfleet recover` runs from another process while the credit still runs
    recovered = recover(redis_url, journal_file)

    # Then: recover revokes it and marks it abandoned; nothing is undone yet, nothing lost
    assert f"invocation {invocation_id}:" in recovered.stdout
    assert "abandoned    rc_credit (1)" in recovered.stdout
    assert "unknown" not in recovered.stdout
    assert counts(text_client, key) == {"runs": 1, "done": 0, "comps": 0}

    # When: the credit finishes anyway
    release(text_client, key)

    # Then: its worker undoes it, exactly once
    assert wait_until(
        lambda: status(text_client, compensation_task_id(call.idempotency_key)) == "SUCCESS", 30
    )
    assert counts(text_client, key) == {"runs": 1, "done": 1, "comps": 1}
    assert text_client.get(k(key, "effect")) is None
    # ... `toolfleet show` says so
    shown = toolfleet(["show", invocation_id], redis_url, journal_file)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "abandoned" in shown.stdout
    assert "late compensation: compensated: undone by its worker after it finished late" in shown.stdout
    assert "revoked and abandoned while in flight" in shown.stdout
    # ... and recovering again undoes nothing twice
    again = recover(redis_url, journal_file)
    assert "Nothing to recover" in again.stdout
    assert counts(text_client, key) == {"runs": 1, "done": 1, "comps": 1}


# -- each state recover finds --------------------------------------------------------------------


def test_credit_that_succeeded_unjournaled_is_compensated_by_recover(
    worker: WorkerProcess,
    redis_url: str,
    text_client: redis.Redis,
    journal_file: Path,
    logs: Path,
    keys: list[str],
) -> None:
    # Given: an orchestrator SIGKILLed while its credit runs, and the credit then succeeds
    key = new_key(keys, "succeeded")
    kill_orchestrator_when(
        lambda: counts(text_client, key)["runs"] == 1, [f"rc_credit:{key}"], redis_url, journal_file, logs
    )
    invocation_id, [call] = left_calls(journal_file)
    release(text_client, key)
    assert wait_until(lambda: status(text_client, call_task_id(call.idempotency_key)) == "SUCCESS", 30)
    assert counts(text_client, key) == {"runs": 1, "done": 1, "comps": 0}

    # When: recover runs
    recovered = recover(redis_url, journal_file)

    # Then: the credit is compensated, once
    assert "compensated  rc_credit (1)" in recovered.stdout
    assert counts(text_client, key) == {"runs": 1, "done": 1, "comps": 1}
    assert text_client.get(k(key, "effect")) is None
    _, [settled] = left_calls(journal_file)
    assert (settled.state, settled.result) == ("compensated", f"credited {key}")
    shown = toolfleet(["show", invocation_id], redis_url, journal_file)
    assert "compensation succeeded after 1 attempt(s) (recovered: the orchestrator stopped" in shown.stdout


def test_payment_that_failed_unjournaled_is_left_alone_by_recover(
    worker: WorkerProcess,
    redis_url: str,
    text_client: redis.Redis,
    journal_file: Path,
    logs: Path,
    keys: list[str],
) -> None:
    # Given: an orchestrator SIGKILLed while its payment runs, and the payment then fails
    key = new_key(keys, "failed")
    kill_orchestrator_when(
        lambda: counts(text_client, key)["runs"] == 1, [f"rc_pay:{key}"], redis_url, journal_file, logs
    )
    invocation_id, [call] = left_calls(journal_file)
    release(text_client, key)
    assert wait_until(lambda: status(text_client, call_task_id(call.idempotency_key)) == "FAILURE", 30)

    # When: recover runs
    recovered = recover(redis_url, journal_file)

    # Then: nothing is undone, and everyone is told why
    assert "not undone   rc_pay (1)  (it failed: nothing to undo)" in recovered.stdout
    assert counts(text_client, key) == {"runs": 1, "done": 1, "comps": 0}
    _, [settled] = left_calls(journal_file)
    assert (settled.state, settled.result) == ("failed", f"payment {key} rejected")
    shown = toolfleet(["show", invocation_id], redis_url, journal_file)
    assert "nothing to undo: the call failed" in shown.stdout
    assert status(text_client, compensation_task_id(call.idempotency_key)) is None


def test_queued_and_running_credits_are_revoked_and_abandoned_and_undone_once_if_they_finish(
    worker: WorkerProcess,
    worker_app: Celery,
    redis_url: str,
    text_client: redis.Redis,
    journal_file: Path,
    logs: Path,
    keys: list[str],
) -> None:
    # Given: an orchestrator whose two credits went out at once to a worker with one slot
    first, second = new_key(keys, "slot-a"), new_key(keys, "slot-b")

    def one_runs_one_waits() -> bool:
        # one credit ran, and both left the orchestrator: journaled, then in the broker or started
        running = counts(text_client, first)["runs"] + counts(text_client, second)["runs"] == 1
        task_ids = journaled_task_ids(journal_file)
        return running and len(task_ids) == 2 and all(published(text_client, t) for t in task_ids)

    # When: it is SIGKILLed while one credit runs and the other waits in the queue
    kill_orchestrator_when(
        one_runs_one_waits, [f"rc_credit:{first}", f"rc_credit:{second}"], redis_url, journal_file, logs
    )
    invocation_id, calls = left_calls(journal_file)
    running, queued = (first, second) if counts(text_client, first)["runs"] else (second, first)
    by_key = {json.loads(c.arguments)["key"]: c for c in calls}
    queued_task = call_task_id(by_key[queued].idempotency_key)
    recovered = recover(redis_url, journal_file)

    # Then: both are revoked and abandoned
    assert recovered.stdout.count("abandoned    rc_credit") == 2, recovered.stdout
    assert {c.state for c in left_calls(journal_file)[1]} == {"abandoned"}

    def revoked_on_the_worker() -> bool:
        answer = worker_app.control.inspect(timeout=1.0, destination=[worker.hostname]).revoked() or {}
        return any(queued_task in ids for ids in answer.values())

    assert wait_until(revoked_on_the_worker, 10)

    # When: the running credit finishes anyway, freeing the slot for the queued one
    release(text_client, running)

    # Then: the running one is undone once by its worker; the queued one never runs
    assert wait_until(lambda: counts(text_client, running)["comps"] == 1, 30)
    assert wait_until(lambda: status(text_client, queued_task) == "REVOKED", 10)
    assert counts(text_client, running) == {"runs": 1, "done": 1, "comps": 1}
    assert counts(text_client, queued) == {"runs": 0, "done": 0, "comps": 0}
    shown = toolfleet(["show", invocation_id], redis_url, journal_file).stdout
    assert "late compensation: compensated: undone by its worker after it finished late" in shown
    assert "late compensation: not_finished: revoked before it ran: nothing to undo" in shown
