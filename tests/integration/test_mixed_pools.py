"""One pool, one tool set: two real workers on pool `mixpool`, one serving `mix_echo` and `mix_shout`,
the other `mix_echo` only. The second refuses to start, or with `--allow-mixed-pool` starts and warns;
`toolfleet tools` flags the pool; a call that lands on the worker lacking its tool is told so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import tests.integration.mixed_pool_tools as mix
from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest
from orchestrator.executors.celery import CeleryExecutor
from orchestrator.messages import ToolExecutionResultMessage
from tests.integration.worker_processes import REPO_ROOT, tool_worker
from workers.runtime.catalog import Catalog
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

FULL = "tests.integration.mixed_pool_tools"
PARTIAL = "tests.integration.mixed_pool_partial_tools"
FULL_HOST = "mix-full@integration"
PARTIAL_HOST = "mix-partial@integration"
CONFLICT = (
    f"Worker '{PARTIAL_HOST}' would serve pool '{mix.POOL}' with mix_echo, while its live workers serve "
    f"other tools: '{FULL_HOST}' serves mix_echo, mix_shout. A call lands on any worker of its pool: a call "
    "of a tool that worker lacks fails there (NotRegistered)."
)


def _worker(redis_url: str, logs: Path, module: str, hostname: str, *extra_args: str) -> WorkerProcess:
    log_path = logs / f"{hostname.split('@')[0]}-{uuid.uuid4().hex[:6]}.log"
    return tool_worker(redis_url, [mix.POOL], [module], log_path, hostname, extra_args=extra_args)


def _log(worker: WorkerProcess) -> str:
    assert worker.log_path is not None
    return worker.log_path.read_text(errors="replace")


def _toolfleet_tools(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "tools", "--pool", mix.POOL, *args],
        env={**os.environ, "TOOLFLEET_REDIS_URL": redis_url, "PYTHONPATH": REPO_ROOT},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture
def full_worker(redis_url: str, worker_logs: Path) -> Iterator[WorkerProcess]:
    with _worker(redis_url, worker_logs, FULL, FULL_HOST).running(timeout_s=60) as worker:
        yield worker


def test_a_worker_serving_other_tools_than_its_pools_live_workers_refuses_to_start(
    redis_url: str, worker_logs: Path, full_worker: WorkerProcess
) -> None:
    # Given: a live worker of the pool serving mix_echo and mix_shout
    # When: a worker serving mix_echo only joins the pool
    partial = _worker(redis_url, worker_logs, PARTIAL, PARTIAL_HOST)
    try:
        code = partial.process.wait(timeout=40)
    finally:
        partial.stop()

    # Then: it exits 2, naming both tool sets and the way out, and never joined the catalog
    log = _log(partial)
    assert code == 2, log
    assert f"toolfleet worker: {CONFLICT}" in log
    assert (
        "Serve the same --tools on every worker of a pool, or give these tools another pool; "
        "--allow-mixed-pool starts this worker anyway."
    ) in log
    client = redis.Redis.from_url(redis_url)
    try:
        assert not Catalog(client).worker_alive(PARTIAL_HOST)
    finally:
        client.close()


def test_with_allow_mixed_pool_it_starts_warns_is_flagged_and_a_call_it_lacks_says_so(
    redis_url: str, settings: Settings, worker_logs: Path, full_worker: WorkerProcess
) -> None:
    # Given: the worker serving mix_echo only joins anyway
    partial = _worker(redis_url, worker_logs, PARTIAL, PARTIAL_HOST, "--allow-mixed-pool")
    with partial.running(timeout_s=60):
        # Then: it warned, naming both tool sets
        warning = f"WARNING workers.runtime.worker: {CONFLICT} Starting anyway (--allow-mixed-pool)."
        assert warning in _log(partial)

        # And: `toolfleet tools` flags the pool, in text and in JSON
        text = _toolfleet_tools(redis_url)
        assert text.returncode == 0, text.stderr
        assert (
            "Mixed pools (1): their workers serve different tools, and a call lands on any worker of its "
            "pool: on one that lacks the tool it fails (NotRegistered).\n"
            f"  pool '{mix.POOL}':\n"
            f"    '{FULL_HOST}' serves mix_echo, mix_shout\n"
            f"    '{PARTIAL_HOST}' serves mix_echo\n"
            "  Serve the same --tools on every worker of a pool.\n"
        ) in text.stdout
        rows = {
            line.split()[0]: line.split() for line in text.stdout.splitlines() if line.startswith("  mix_")
        }
        behaviour = ["no", "-", "no", "-"]  # approval, heartbeat, idempotent, compensation
        assert rows["mix_echo"][:9] == ["mix_echo", mix.POOL, "10", "s", *behaviour, "2"]
        assert rows["mix_shout"][:11] == ["mix_shout", mix.POOL, "10", "s", *behaviour, "1", "of", "2"]
        listed = _toolfleet_tools(redis_url, "--json")
        assert json.loads(listed.stdout)["mixed_pools"] == [
            {"pool": mix.POOL, "workers": {FULL_HOST: ["mix_echo", "mix_shout"], PARTIAL_HOST: ["mix_echo"]}}
        ]

        # When: the full worker is gone and the model calls mix_shout, which lands on the partial worker
        full_worker.stop()
        executor = CeleryExecutor(settings=settings)
        model = ScriptedChatModel(
            [
                AiMessage(tool_execution_requests=[ToolExecutionRequest("1", "mix_shout", '{"text": "hi"}')]),
                "It could not shout",
            ]
        )
        try:
            service = AiService(chat_model=model, tools=[mix], executor=executor)
            result = service.chat("Shout hi")
        finally:
            executor.close()

    # Then: the outcome says which worker lacked which tool, and that is what the model read
    expected = (
        f"Tool 'mix_shout' is not served by worker '{PARTIAL_HOST}' of pool '{mix.POOL}' "
        f"(its workers serve different tools: '{PARTIAL_HOST}' serves mix_echo)"
    )
    (execution,) = result.tool_executions
    assert (execution.result, execution.has_failed, execution.worker) == (expected, True, PARTIAL_HOST)
    told = [m for m in model.requests[1].messages if isinstance(m, ToolExecutionResultMessage)]
    assert [(m.text, m.is_error) for m in told] == [(expected, True)]
