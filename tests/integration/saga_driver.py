"""An orchestrator process for the saga fault tests: one invocation whose saga compensates slowly.

    python -m tests.integration.saga_driver JOURNAL_FILE GROUP UNDO_SECONDS [BOOKINGS]

The scripted model books `GROUP-a`, `GROUP-b` and `GROUP-c` (`fault_book`, one round trip each;
only the first BOOKINGS of them when given), then calls `fault_fail`; the saga then undoes c, b, a
on pool `faults`, each undo taking `UNDO_SECONDS`. The journal is the SQLite file `JOURNAL_FILE`;
Redis is `TOOLFLEET_REDIS_URL`. The test kills this process mid-saga and lets `toolfleet recover`
finish the work.
"""

from __future__ import annotations

import json
import sys

from orchestrator import AiMessage, AiService, CeleryExecutor, ScriptedChatModel, ToolExecutionRequest
from orchestrator.saga.journal import Journal
from orchestrator.telemetry import setup_tracing
from tests.integration import fault_tools
from workers.settings import Settings


def booking_keys(group: str, bookings: int = 3) -> list[str]:
    return [f"{group}-{suffix}" for suffix in "abc"[:bookings]]


def main(argv: list[str]) -> int:
    journal_file, group, undo_seconds = argv[0], argv[1], float(argv[2])
    bookings = int(argv[3]) if len(argv) > 3 else 3
    script: list[AiMessage | str] = [
        AiMessage(
            tool_execution_requests=[
                ToolExecutionRequest(
                    id=f"book-{key}",
                    name="fault_book",
                    arguments=json.dumps({"key": key, "group": group, "undo_seconds": undo_seconds}),
                )
            ]
        )
        for key in booking_keys(group, bookings)
    ]
    script.append(
        AiMessage(
            tool_execution_requests=[
                ToolExecutionRequest(id="fail-1", name="fault_fail", arguments=json.dumps({"reason": group}))
            ]
        )
    )
    script.append("all undone")
    setup_tracing("saga-driver")  # when the test configures an OTLP endpoint
    executor = CeleryExecutor(settings=Settings.from_env())
    try:
        service = AiService(
            chat_model=ScriptedChatModel(script),
            tools=[fault_tools.tools],
            executor=executor,
            compensate_on_tool_errors=True,
            journal=Journal(f"sqlite:///{journal_file}"),
            name="saga-driver",
        )
        result = service.chat(f"book three for {group}")
        print(result.content, flush=True)
    finally:
        executor.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
