"""An orchestrator process for the recovery tests: one invocation, one batch of calls, then done.

    python -m tests.integration.recover_driver JOURNAL_FILE TOOL:KEY [TOOL:KEY ...]

The scripted model asks for every `TOOL(key=KEY)` in one batch (call ids 1, 2, ...) and then answers
"done". The calls run on pool `recover` through a `CeleryExecutor`; the journal is the SQLite file
`JOURNAL_FILE`; Redis is `TOOLFLEET_REDIS_URL`. The tests SIGKILL this process while its calls are
queued or running and let `toolfleet recover` settle them.
"""

from __future__ import annotations

import json
import sys

from orchestrator import AiMessage, AiService, CeleryExecutor, ScriptedChatModel, ToolExecutionRequest
from orchestrator.saga.journal import Journal
from tests.integration import recover_tools
from workers.settings import Settings


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
            name="recover-driver",
        )
        print(service.chat("credit them").content, flush=True)
    finally:
        executor.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
