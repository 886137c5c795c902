"""An orchestrator process for the concurrency-limit tests: one batch of calls, their outcomes printed.

    python -m tests.integration.slot_driver TOOL RUN CALLS SECONDS [TENANT]

Calls `TOOL` (of `slot_tools`) CALLS times at once, each sleeping SECONDS, on the Redis of
`TOOLFLEET_REDIS_URL`, in an invocation of TENANT if given; prints one JSON line per outcome (kind,
text), then one with the batch's wall time (`elapsed_s`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from orchestrator import CeleryExecutor, ToolExecutionRequest
from tests.integration import slot_tools
from workers.calls.invocation import Invocation
from workers.settings import Settings


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
