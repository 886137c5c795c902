"""`toolfleet worker --tools MODULE` finds MODULE in the current directory, as `celery -A` does, and
so do the prefork pool's children that run its tools."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from orchestrator.executors.celery import CeleryExecutor
from tests._cli import TOOLFLEET, environment
from workers import OutcomeKind, ToolExecutionRequest
from workers.runtime.catalog import Catalog
from workers.settings import Settings

pytestmark = pytest.mark.integration

TOOL_MODULE = """
import os

from workers import tool


@tool("Says which module file and process it runs in", pool="cwdpool")
def where_am_i() -> str:
    return f"{__file__} {os.getpid()}"
"""


def test_a_prefork_worker_serves_a_tool_module_of_the_current_directory(
    tmp_path: Path, redis_url: str, settings: Settings
) -> None:
    # given: a tool module in the directory the worker starts in, which is not on PYTHONPATH
    (tmp_path / "herehere_tools.py").write_text(TOOL_MODULE)
    hostname = f"cwd-{os.getpid()}@test"
    env = environment(
        {
            "TOOLFLEET_REDIS_URL": redis_url,
            "TOOLFLEET_BROKER_URL": redis_url,
            "TOOLFLEET_RESULT_BACKEND": redis_url,
        }
    )
    assert str(tmp_path) not in env.get("PYTHONPATH", "").split(os.pathsep)
    command = [TOOLFLEET, "worker", "--pool", "cwdpool", "--tools", "herehere_tools", "--kind", "prefork"]
    command += ["--concurrency", "1", "--hostname", hostname, "--loglevel", "WARNING"]
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=out, stderr=out, start_new_session=True
        )
    executor = CeleryExecutor(settings=settings)
    try:
        _wait_until_serving(worker, hostname, redis_url, log)
        # when: a call of its tool
        outcome = asyncio.run(executor.execute(ToolExecutionRequest("1", "where_am_i", "{}")))
        # then: it ran the module of the current directory, in a child of the worker
        assert outcome.kind is OutcomeKind.SUCCESS, outcome.text
        path, pid = outcome.text.rsplit(" ", 1)
        assert Path(path) == tmp_path / "herehere_tools.py"
        assert int(pid) != worker.pid
        assert _parent_of(int(pid)) == worker.pid
    finally:
        executor.close()
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(timeout=10)


def _wait_until_serving(worker: subprocess.Popen[bytes], hostname: str, redis_url: str, log: Path) -> None:
    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            assert worker.poll() is None, (
                f"the worker exited with {worker.returncode}: {log.read_text()[-3000:]}"
            )
            if Catalog(client).worker_alive(hostname):
                return
            time.sleep(0.05)
    finally:
        client.close()
    raise AssertionError(f"the worker was not serving within 30 s: {log.read_text()[-3000:]}")


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])
