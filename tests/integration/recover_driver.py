"""An orchestrator process for the recovery tests: one invocation, one batch of calls, then done.

    python -m tests.integration.recover_driver JOURNAL_FILE TOOL:KEY [TOOL:KEY ...]

The scripted model asks for every `TOOL(key=KEY)` in one batch (call ids 1, 2, ...) and then answers
"done". The calls run on pool `recover` through a `CeleryExecutor`; the journal is the SQLite file
`JOURNAL_FILE`; Redis is `TOOLFLEET_REDIS_URL`. The tests SIGKILL this process while its calls are
queued or running and let `toolfleet recover` settle them, or carry the invocation on with `agent`,
the same service as `toolfleet recover --agent` loads it.
"""

from __future__ import annotations

import json
import os
import sys

from orchestrator import AiMessage, AiService, CeleryExecutor, ScriptedChatModel, ToolExecutionRequest
from orchestrator.saga.journal import Journal
from tests.integration import recover_tools
from tests.integration.side_effects import process_client
from workers.settings import Settings

NAME = "recover-driver"
ASKED_KEY = "recover:asked"  # how often `agent()`'s model was asked (the test Redis)


def _answer(request: object) -> str:
    process_client().incr(ASKED_KEY)
    return "done"


def agent() -> AiService:
    """The driver's service as `toolfleet recover --agent` loads it (its journal is the command's,
    TOOLFLEET_DATABASE_URL): its model, asked after the journaled batch, answers "done", counted."""
    return AiService(
        chat_model=ScriptedChatModel(_answer),
        tools=[recover_tools.tools],
        executor=CeleryExecutor(),
        compensate_on_tool_errors=True,
        journal=Journal(os.environ["TOOLFLEET_DATABASE_URL"]),
        name=NAME,
    )


def main(argv: list[str]) -> int:
    journal_file, calls = argv[0], argv[1:]
    requests = []
    for number, spec in enumerate(calls, start=1):
        name, _, key = spec.partition(":")
        requests.append(ToolExecutionRequest(id=str(number), name=name, arguments=json.dumps({"key": key})))
    executor = CeleryExecutor(settings=Settings.from_env())
    try:
        service = AiService(
            chat_model=ScriptedChatModel([AiMessage(tool_execution_requests=requests), "done"]),
            tools=[recover_tools.tools],
            executor=executor,
            compensate_on_tool_errors=True,
            journal=Journal(f"sqlite:///{journal_file}"),
            name=NAME,
        )
        print(service.chat("credit them").content, flush=True)
    finally:
        executor.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
