"""An orchestrator process of the approval tests; it exits once its invocation paused or ended.

python -m tests.integration.approvals.driver start KEY     # prints {"invocation_id", "pending"}
python -m tests.integration.approvals.driver resume INVOCATION   # prints {"outcome", "content"}
"""

from __future__ import annotations

import json
import sys

from orchestrator.telemetry import setup_tracing, stop_tracing
from tests.integration.approvals.agent import agent


def main(argv: list[str]) -> int:
    command, value = argv
    setup_tracing("approvals-driver")  # when an OTLP endpoint is configured; spans exported at the end
    try:
        return _run(command, value)
    finally:
        stop_tracing()


def _run(command: str, value: str) -> int:
    service = agent()
    if command == "start":
        result = service.chat(value)
        pending = [a.call_id for a in result.pending_approvals]
        print(
            json.dumps({"invocation_id": result.invocation_id, "pending": pending, "content": result.content})
        )
        return 0
    resumed = service.resume(value, by="driver")
    outcome = "elsewhere" if resumed is None else "paused" if resumed.pending_approvals else "ran"
    print(json.dumps({"outcome": outcome, "content": None if resumed is None else resumed.content}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
