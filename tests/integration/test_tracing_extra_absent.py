"""Without the `otel` extra, a configured OTLP endpoint costs one warning and nothing else.

In processes where no `opentelemetry` module can be imported (tests/no_otel/sitecustomize.py, loaded
before toolfleet) and `OTEL_EXPORTER_OTLP_ENDPOINT` is set: an application's invocation on
`LocalExecutor`, and a real `toolfleet worker` serving a call, each run to their answer, log
`pip install 'toolfleet[otel]'` once, and hold no OpenTelemetry module afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from orchestrator.executors.celery import CeleryExecutor
from tests._cli import run_command
from tests.integration import no_otel_tools
from tests.integration.worker_processes import REPO_ROOT, tool_worker
from workers import OutcomeKind, ToolExecutionRequest
from workers.settings import Settings

pytestmark = pytest.mark.integration

NO_OTEL = str(Path(REPO_ROOT) / "tests" / "no_otel")
HINT = "pip install 'toolfleet[otel]'"
NOTHING_LOADED = {"loaded": [], "importable": False}

# An application that sets tracing up itself (twice, as a careless one may), then runs an invocation
# whose one call reports the OpenTelemetry of this process; it prints what it saw, as JSON.
APPLICATION = textwrap.dedent(
    """
    import json, logging, sys
    from orchestrator import AiMessage, AiService, LocalExecutor, ScriptedChatModel, ToolExecutionRequest
    from orchestrator.telemetry import setup_tracing
    from tests.integration import no_otel_tools
    from workers.telemetry import configure_logging

    configure_logging("json", logging.INFO)
    started = [setup_tracing("no-otel-app"), setup_tracing("no-otel-app")]
    call = ToolExecutionRequest(id="c1", name="opentelemetry_here", arguments="{}")
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[call]), "done"])
    service = AiService(chat_model=model, tools=[no_otel_tools], executor=LocalExecutor())
    result = service.chat("what tracing is here?")
    loaded = sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")
    print(json.dumps({
        "started": started,
        "answer": result.content,
        "tool": json.loads(result.tool_executions[0].result),
        "loaded_at_end": loaded,
    }))
    """
)


def _without_otel(**more: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([NO_OTEL, REPO_ROOT]),
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",  # nothing is ever sent: no exporter exists
        **more,
    }


def test_an_application_runs_its_invocation_with_one_warning_and_no_opentelemetry() -> None:
    # when: the application runs where OpenTelemetry cannot be imported
    done = run_command([sys.executable, "-c", APPLICATION], env=_without_otel(), cwd=Path(REPO_ROOT))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # then: tracing did not start, the invocation ran its call to the answer
    assert seen["started"] == [False, False]
    assert seen["answer"] == "done"
    # and: no OpenTelemetry module was loaded, during the call or at the end (none could be)
    assert seen["tool"] == NOTHING_LOADED
    assert seen["loaded_at_end"] == []
    # and: the hint was logged once, as one JSON line like every other line of the process
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    hints = [line for line in lines if HINT in line["message"]]
    assert len(hints) == 1, done.stderr
    assert (hints[0]["level"], hints[0]["logger"]) == ("WARNING", "workers.telemetry.tracing")


def test_a_worker_serves_its_calls_with_one_warning_and_no_opentelemetry(
    redis_url: str, settings: Settings, worker_logs: Path
) -> None:
    # given: a worker started where OpenTelemetry cannot be imported, an OTLP endpoint configured
    log_path = worker_logs / f"no-otel-{uuid.uuid4().hex[:6]}.log"
    worker = tool_worker(
        redis_url,
        [no_otel_tools.POOL],
        ["tests.integration.no_otel_tools"],
        log_path,
        f"no-otel-{uuid.uuid4().hex[:6]}@test",
        env={k: v for k, v in _without_otel().items() if k in ("PYTHONPATH", "OTEL_EXPORTER_OTLP_ENDPOINT")},
    )
    executor = CeleryExecutor(settings=settings, tools=[no_otel_tools])
    request = ToolExecutionRequest(id="c1", name="opentelemetry_here", arguments="{}")
    try:
        with worker.running(timeout_s=60):
            # when: it serves two calls
            outcomes = [asyncio.run(executor.execute(request)) for _ in range(2)]
    finally:
        executor.close()
    # then: both succeeded in a process holding no OpenTelemetry module, none importable
    for outcome in outcomes:
        assert outcome.kind is OutcomeKind.SUCCESS, outcome
        assert json.loads(outcome.text) == NOTHING_LOADED
    # and: its log has the hint once, and never says tracing is on
    log = log_path.read_text(errors="replace")
    assert log.count(HINT) == 1, log
    assert "tracing on" not in log
