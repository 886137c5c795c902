"""The processes of the approval tests: the orchestrator driver, the command line, their environment,
and what the tools did (kept in Redis by the worker)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests._cli import CLI, environment, run_command
from tests.integration.approvals import tools
from tests.integration.approvals.agent import APPROVAL_TIMEOUT_VARIABLE
from tests.integration.side_effects import process_client
from tests.integration.worker_processes import REPO_ROOT

__all__ = ["AGENT", "DRIVER", "cli", "count", "env", "resume", "start", "transfers"]

AGENT = "bank=tests.integration.approvals.agent:agent"
DRIVER = (sys.executable, "-m", "tests.integration.approvals.driver")


def env(redis_url: str, postgres: str, **extra: str | None) -> dict[str, str]:
    """Every variable the processes of a test read, set here whatever the caller's environment holds."""
    return environment(
        {
            "TOOLFLEET_REDIS_URL": redis_url,
            "TOOLFLEET_DATABASE_URL": postgres,
            "TOOLFLEET_AGENTS": None,
            "PYTHONPATH": REPO_ROOT,
            APPROVAL_TIMEOUT_VARIABLE: "3600",
            "OTEL_EXPORTER_OTLP_ENDPOINT": None,  # traced only where a test says so
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": None,
            **extra,
        }
    )


def _driver(variables: dict[str, str], *args: str) -> dict[str, Any]:
    """Run an orchestrator process of the tests to its end; what it printed last, as JSON."""
    done = run_command([*DRIVER, *args], env=variables, cwd=Path(REPO_ROOT), timeout_s=90)
    assert done.returncode == 0, done.stderr
    printed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return printed


def start(variables: dict[str, str], key: str) -> tuple[str, list[str]]:
    """Run an orchestrator process until its invocation pauses; it has exited when this returns."""
    printed = _driver(variables, "start", key)
    return printed["invocation_id"], printed["pending"]


def resume(variables: dict[str, str], invocation: str) -> dict[str, Any]:
    """Run an orchestrator process that goes on with a decided invocation; what it printed."""
    return _driver(variables, "resume", invocation)


def cli(variables: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_command([*CLI, *args], env=variables, cwd=Path(REPO_ROOT), timeout_s=90)


def transfers(key: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in process_client().lrange(tools.runs_key(key, "transfers"), 0, -1)]


def count(key: str, what: str) -> int:
    return int(process_client().get(tools.runs_key(key, what)) or 0)
