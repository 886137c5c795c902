"""Fixtures of the MCP gateway's tests: a worker of the gateway's pools, and `toolfleet mcp serve`
as a process of its own (streamable HTTP), with a bearer key of tenant `acme` (and one of `globex`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from orchestrator.cli.demo_mcp import running_gateway
from tests._ports import free_port
from tests.integration.mcp_gateway import tools
from tests.integration.worker_processes import REPO_ROOT, tool_worker
from workers.runtime.process import WorkerProcess

MODULE = "tests.integration.mcp_gateway.tools"
KEY = "sk-mcp-gateway-test"
OTHER_KEY = "sk-mcp-gateway-globex"  # of tenant `globex`


def gateway_env(redis_url: str, database_url: str) -> dict[str, str]:
    """The gateway's whole environment: the caller's without any `TOOLFLEET_*` variable, then the test's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLFLEET_")}
    env.update(
        {
            "PYTHONPATH": REPO_ROOT,
            "TOOLFLEET_REDIS_URL": redis_url,
            "TOOLFLEET_DATABASE_URL": database_url,
            "TOOLFLEET_API_KEYS": f"acme:{KEY},globex:{OTHER_KEY}",
            # the store its workers write artifacts to (the tests' own, set for the session)
            "TOOLFLEET_ARTIFACT_URL": os.environ["TOOLFLEET_ARTIFACT_URL"],
            "TOOLFLEET_HEARTBEAT_TTL_S": "2",
            "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "0.2",
        }
    )
    return env


@dataclass
class Gateway:
    url: str
    database_url: str  # its journal, where calls that require approval wait


@pytest.fixture(scope="module")
def gateway_worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    log_path = tmp_path_factory.mktemp("gateway-worker") / "worker.log"
    worker = tool_worker(
        redis_url, [tools.POOL, tools.OTHER_POOL], [MODULE], log_path, "gateway@test", concurrency=8
    )
    worker.wait_ready(timeout_s=60)
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, gateway_worker: WorkerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """`toolfleet mcp serve --pool gateway --pool gateway-late` on a port of its own."""
    where = tmp_path_factory.mktemp("gateway")
    log_path, database_url = where / "gateway.log", f"sqlite:///{where / 'journal.db'}"
    env = gateway_env(redis_url, database_url)
    pools = [tools.POOL, tools.LATE_POOL]
    with running_gateway(env, log_path, pools, port=free_port()) as url:
        yield Gateway(url, database_url)
