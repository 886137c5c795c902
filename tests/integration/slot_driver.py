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

from orchestrator import CeleryExecutor, ToolExecutionRequest
from tests.integration import slot_tools
from tests.integration.orchestrator_processes import orchestrator_env
from tests.integration.worker_processes import REPO_ROOT
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


def main(argv: list[str]) -> int:
    tool_name, run, calls, seconds = argv[0], argv[1], int(argv[2]), float(argv[3])
    executor = CeleryExecutor(settings=Settings.from_env(), tools=[slot_tools])
    requests = [
        (ToolExecutionRequest(f"c{i}", tool_name, json.dumps({"run": run, "seconds": seconds})), None)
        for i in range(calls)
    ]
    invocation = Invocation(parameters={"tenant": argv[4]} if len(argv) > 4 else {})
    started = time.monotonic()
    try:
        outcomes = asyncio.run(executor.execute_batch(requests, invocation))
    finally:
        elapsed = time.monotonic() - started
        executor.close()
    for outcome in outcomes:
        print(json.dumps({"kind": outcome.kind.value, "text": outcome.text}), flush=True)
    print(json.dumps({"elapsed_s": elapsed}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
