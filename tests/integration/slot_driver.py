"""An orchestrator process for the concurrency-limit tests: one batch of calls, their outcomes printed.

    python -m tests.integration.slot_driver TOOL RUN CALLS SECONDS [TENANT]

Calls `TOOL` (of `slot_tools`) CALLS times at once, each sleeping SECONDS, on the Redis of
`TOOLFLEET_REDIS_URL`, in an invocation of TENANT if given; prints one JSON line per outcome (kind,
text), then one with the batch's wall time (`elapsed_s`).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

from prometheus_client import REGISTRY

from orchestrator import CeleryExecutor, ToolExecutionRequest
from tests.integration import slot_tools
from tests.integration.orchestrator_processes import orchestrator_env
from tests.integration.worker_processes import REPO_ROOT
from workers import ToolOutcome
from workers.calls.invocation import Invocation
from workers.settings import Settings


def launch(
    redis_url: str, tool: str, run: str, calls: int, seconds: float, tenant: str | None = None
) -> subprocess.Popen[str]:
    """A driver process calling `tool` `calls` times at once, on `redis_url` only (its `TOOLFLEET_*`
    variables are the test's, whatever the caller's environment holds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLFLEET_")}
    env.update({k: v for k, v in orchestrator_env(redis_url).items() if v is not None})
    argv = [sys.executable, "-m", "tests.integration.slot_driver", tool, run, str(calls), str(seconds)]
    return subprocess.Popen(
        [*argv, *([tenant] if tenant else [])],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ended(driver: subprocess.Popen[str]) -> tuple[list[str], float]:
    """A driver's outcome kinds and its batch's wall time, once it exited cleanly."""
    stdout, stderr = driver.communicate(timeout=180)
    assert driver.returncode == 0, stderr[-3000:]
    lines = [json.loads(line) for line in stdout.splitlines()]
    return [line["kind"] for line in lines[:-1]], lines[-1]["elapsed_s"]


def batch_of(tool: str, *arguments: dict[str, Any]) -> list[tuple[ToolExecutionRequest, None]]:
    """One batch of calls of `tool` (of `slot_tools`), one per `arguments`, with ids c0, c1, ..."""
    return [(ToolExecutionRequest(f"c{i}", tool, json.dumps(args)), None) for i, args in enumerate(arguments)]


def run_batch(
    settings: Settings, calls: list[tuple[ToolExecutionRequest, None]], invocation: Invocation | None = None
) -> list[ToolOutcome]:
    """Run one batch of `slot_tools` calls in this process, on an executor of its own."""
    executor = CeleryExecutor(settings=settings, tools=[slot_tools])
    try:
        return asyncio.run(executor.execute_batch(calls, invocation or Invocation()))
    finally:
        executor.close()


def wait_counts(tool: str, reason: str) -> dict[str, float]:
    """How many calls of `tool` this process counted waiting for `reason`, by result (taken, timed_out)."""
    return {
        sample.labels["result"]: sample.value
        for metric in REGISTRY.collect()
        if metric.name == "toolfleet_tool_call_wait_seconds"
        for sample in metric.samples
        if sample.name.endswith("_count")
        and sample.labels["tool"] == tool
        and sample.labels["reason"] == reason
    }


def main(argv: list[str]) -> int:
    tool_name, run, calls, seconds = argv[0], argv[1], int(argv[2]), float(argv[3])
    requests = batch_of(tool_name, *[{"run": run, "seconds": seconds}] * calls)
    invocation = Invocation(parameters={"tenant": argv[4]} if len(argv) > 4 else {})
    started = time.monotonic()
    try:
        outcomes = run_batch(Settings.from_env(), requests, invocation)
    finally:
        elapsed = time.monotonic() - started
    for outcome in outcomes:
        print(json.dumps({"kind": outcome.kind.value, "text": outcome.text}), flush=True)
    print(json.dumps({"elapsed_s": elapsed}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
