"""`toolfleet worker-health`, the workers' health check, run as a container runs it, against a real
worker process: live → 0; stopped (SIGSTOP) or killed (SIGKILL) → 1 once its heartbeat expires; back
to 0 when a stopped worker goes on.

The tests use the test Redis database and leave what other tests keep there alone: the checks that
must fail name their worker (`--hostname`), so that no other worker of this host answers for it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests._cli import CLI, run_command
from tests._environment import answering_redis, integration_redis_url
from tests._ports import free_port
from workers.protocol import WORKER_KEY, WORKERS_KEY
from workers.runtime.catalog import WorkerEntry
from workers.runtime.process import WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
HEARTBEAT_TTL_S = 2.0
UNHEALTHY, UNREACHABLE = 1, 2

pytestmark = pytest.mark.integration


def _health(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`toolfleet worker-health ARGS` with nothing but the worker's own settings."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLFLEET_", "FLOWER_"))}
    env = {
        **base,
        "PYTHONPATH": str(ROOT),
        "TOOLFLEET_REDIS_URL": redis_url,
        "TOOLFLEET_HEARTBEAT_TTL_S": str(HEARTBEAT_TTL_S),
    }
    return run_command([*CLI, "worker-health", *args], env=env, timeout_s=30)


def _until(
    redis_url: str, hostname: str, status: int, timeout_s: float
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run the check of `hostname` until it exits with `status`; how long that took, and that run."""
    started = time.monotonic()
    while True:
        result = _health(redis_url, "--hostname", hostname)
        if result.returncode == status:
            return time.monotonic() - started, result
        assert time.monotonic() - started < timeout_s, (
            f"still {result.returncode}, not {status}, after {timeout_s} s: {result.stdout}{result.stderr}"
        )


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    url = integration_redis_url(os.environ)
    answering_redis(url, "these tests").close()  # its database is left as it is: others share it
    yield url


@pytest.fixture
def worker(redis_url: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    """A worker named as `toolfleet worker` names it by default (POOLS-PID@HOST), on this host."""
    process = WorkerProcess(
        pools=["io"],
        modules=["workers.examples.weather"],
        redis_url=redis_url,
        kind="threads",
        concurrency=2,
        hostname=f"io-{uuid.uuid4().hex[:8]}@{socket.gethostname()}",
        env={"PYTHONPATH": str(ROOT), "TOOLFLEET_HEARTBEAT_TTL_S": str(HEARTBEAT_TTL_S)},
        log_path=tmp_path / "worker.log",
    )
    try:
        with process.running(timeout_s=60):
            yield process
    finally:
        if process.process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)  # a stopped worker cannot take its SIGTERM


def test_a_live_worker_is_healthy(redis_url: str, worker: WorkerProcess) -> None:
    # when
    result = _health(redis_url)
    named = _health(redis_url, "--hostname", worker.hostname)
    # then
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()  # (any other live worker of this host is listed too)
    assert any(line.startswith(f"{worker.hostname}: live (pools io, pid {worker.pid}; ") for line in lines), (
        lines
    )
    assert result.stderr == ""
    assert named.returncode == 0, named.stderr


def test_only_this_hosts_workers_count(redis_url: str) -> None:
    # given: a live worker of another host
    elsewhere = f"io-1@elsewhere-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    entry = WorkerEntry(elsewhere, ["io"], "threads", 2, 1, time.time())
    client.set(WORKER_KEY.format(elsewhere), json.dumps(entry.to_json()), ex=30)
    client.zadd(WORKERS_KEY, {elsewhere: time.time() + 30})
    try:
        # when
        here = _health(redis_url)
        named = _health(redis_url, "--hostname", elsewhere)
        missing = _health(redis_url, "--hostname", f"{elsewhere}-gone")
    finally:
        client.delete(WORKER_KEY.format(elsewhere))
        client.zrem(WORKERS_KEY, elsewhere)
        client.close()
    # then: it is not this host's worker; asked for by name, it is found; a name no worker has is not
    assert elsewhere not in here.stdout + here.stderr
    assert named.returncode == 0, named.stderr
    assert named.stdout.startswith(f"{elsewhere}: live (pools io, pid 1; ")
    assert missing.returncode == UNHEALTHY
    assert missing.stdout == ""
    assert f"no live worker '{elsewhere}-gone' in the catalog at {redis_url}" in missing.stderr


def test_a_stopped_worker_is_unhealthy_once_its_heartbeat_expires_and_healthy_again_when_it_goes_on(
    redis_url: str, worker: WorkerProcess
) -> None:
    # given
    assert _health(redis_url, "--hostname", worker.hostname).returncode == 0
    # when: the worker hangs (SIGSTOP stops every thread, its heartbeat among them)
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        took_s, result = _until(redis_url, worker.hostname, UNHEALTHY, timeout_s=HEARTBEAT_TTL_S + 20)
        # then: unhealthy, within a heartbeat's time to live (and the check's own start-up)
        assert took_s < HEARTBEAT_TTL_S + 10
        assert f"no live worker '{worker.hostname}'" in result.stderr
        assert f"TOOLFLEET_HEARTBEAT_TTL_S ({HEARTBEAT_TTL_S:g} s)" in result.stderr
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    # and when it goes on, it beats again and is healthy
    _until(redis_url, worker.hostname, 0, timeout_s=HEARTBEAT_TTL_S + 20)


def test_a_killed_worker_is_unhealthy_once_its_heartbeat_expires(
    redis_url: str, worker: WorkerProcess
) -> None:
    # given
    assert _health(redis_url, "--hostname", worker.hostname).returncode == 0
    # when: the worker dies without a goodbye (its entry stays until it expires)
    worker.kill()
    # then
    took_s, result = _until(redis_url, worker.hostname, UNHEALTHY, timeout_s=HEARTBEAT_TTL_S + 20)
    assert took_s < HEARTBEAT_TTL_S + 10
    assert result.stdout == ""


def test_an_unreachable_redis_is_exit_2_without_the_password() -> None:
    # when
    result = _health(f"redis://:h3alth-pw@127.0.0.1:{free_port()}/0")
    # then
    assert result.returncode == UNREACHABLE
    assert (
        "toolfleet worker-health: cannot read the catalog from Redis at redis://:***@127.0.0.1:"
        in result.stderr
    )
    assert "h3alth-pw" not in result.stderr
