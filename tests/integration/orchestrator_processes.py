"""Orchestrators the integration tests run in processes of their own: `toolfleet` commands on the test
Redis, and drivers (`python -m tests.integration.<driver>`) a test SIGKILLs in the middle of a saga.

Both run from the repository root with the caller's environment, pointed at the test Redis (as broker
and result backend), checking liveness every 0.2 s against 2 s heartbeats.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from tests._cli import environment, toolfleet
from tests._waiting import wait_until
from tests.integration.worker_processes import REPO_ROOT

# Orchestrators here beat in the journal every 0.1 s, so that `recover` may take over one killed as soon
# as 0.3 s after its last beat (three intervals, the least it accepts).
INVOCATION_HEARTBEAT_S = "0.1"
STALE_AFTER = "0.3"


def orchestrator_env(redis_url: str, journal_file: Path | None = None) -> dict[str, str | None]:
    """The changes to the caller's environment (None: removed); the SQL log in `journal_file` if given."""
    return {
        "PYTHONPATH": REPO_ROOT,
        "TOOLFLEET_REDIS_URL": redis_url,
        "TOOLFLEET_DATABASE_URL": None if journal_file is None else f"sqlite:///{journal_file}",
        "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "0.2",
        "TOOLFLEET_HEARTBEAT_TTL_S": "2",
        "TOOLFLEET_INVOCATION_HEARTBEAT_S": INVOCATION_HEARTBEAT_S,
        "TOOLFLEET_BROKER_URL": None,
        "TOOLFLEET_RESULT_BACKEND": None,
        "OTEL_EXPORTER_OTLP_ENDPOINT": None,  # traced only where a test says so
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": None,
    }


def toolfleet_on(
    args: list[str],
    redis_url: str,
    journal_file: Path,
    timeout_s: float = 60.0,
    env: Mapping[str, str | None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`toolfleet ARGS` on the Redis at `redis_url`, reading and writing the SQL log in `journal_file`;
    `env` changes the defaults above (None: removed)."""
    env = {**orchestrator_env(redis_url, journal_file), **(env or {})}
    return toolfleet(*args, cwd=Path(REPO_ROOT), env=env, timeout_s=timeout_s)


def failed_saga_row(
    invocation_id: str,
    redis_url: str,
    journal_file: Path,
    timeout_s: float = 60.0,
    env: Mapping[str, str | None] | None = None,
) -> list[str]:
    """The one line `toolfleet sagas --failed` lists for `invocation_id`, split into words; fails if the
    command fails or lists that invocation on no line or on more than one."""
    listed = toolfleet_on(["sagas", "--failed"], redis_url, journal_file, timeout_s, env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines() if line.startswith(invocation_id)]
    assert len(rows) == 1, listed.stdout
    return rows[0]


def kill_driver_when(
    ready: Callable[[], bool],
    driver: str,
    args: list[str],
    redis_url: str,
    logs: Path,
    timeout_s: float,
    env: Mapping[str, str | None] | None = None,
) -> None:
    """Run `python -m tests.integration.<driver> ARGS` (its output to a file in `logs`) and SIGKILL it
    once `ready()` holds; fails if the driver ends, or `ready()` does not hold, within `timeout_s`.
    `env` changes the defaults of `orchestrator_env` (None: removed)."""
    log_path = logs / f"{driver}-{uuid.uuid4().hex[:8]}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", f"tests.integration.{driver}", *args],
            cwd=REPO_ROOT,
            env=environment({**orchestrator_env(redis_url), **(env or {})}),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        reached = (
            wait_until(lambda: ready() or process.poll() is not None, timeout_s) and process.poll() is None
        )
        assert reached, f"{driver} never reached the point to kill it at\n{log_path.read_text()}"
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    assert process.returncode == -signal.SIGKILL
