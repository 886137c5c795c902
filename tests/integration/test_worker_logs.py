"""A worker's log names each call (tool, ids, outcome, duration) and keeps its data out.

A real worker process logs at INFO, then at DEBUG; the tools return and raise texts holding marker
secrets, and the model's arguments hold one too. At INFO none of them appears, while each call's own
line does; at DEBUG the result shows, cut short before the secret it holds past its first characters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.integration.log_tools as log_tools
from orchestrator import CeleryExecutor
from tests.integration.worker_processes import tool_worker
from workers import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.settings import Settings

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def _worker_logging_at(loglevel: str, redis_url: str, tmp_path: Path) -> Iterator[Path]:
    """A worker serving the log tools, logging at `loglevel` to the file it yields, running while the
    block runs."""
    log_path = tmp_path / f"{loglevel.lower()}.log"
    hostname = f"logs-{loglevel.lower()}-{uuid.uuid4().hex[:6]}@integration"
    worker = tool_worker(
        redis_url,
        [log_tools.POOL],
        ["tests.integration.log_tools"],
        log_path,
        hostname,
        concurrency=2,
        loglevel=loglevel,
    )
    with worker.running(timeout_s=60):
        yield log_path


@pytest.fixture
def executor(settings: Settings) -> Iterator[CeleryExecutor]:
    running = CeleryExecutor(settings=settings, tools=[log_tools])
    yield running
    running.close()


def _call(executor: CeleryExecutor, tool: str) -> tuple[str, ToolOutcome]:
    call_id = f"call-{uuid.uuid4().hex[:8]}"
    arguments = json.dumps({"path": f"/etc/{log_tools.ARGUMENT_SECRET}"})
    outcome = asyncio.run(executor.execute(ToolExecutionRequest(id=call_id, name=tool, arguments=arguments)))
    return call_id, outcome


def _line(log_path: Path, pattern: str, timeout_s: float = 10.0) -> str:
    """The worker's log once a line matches `pattern` (the worker logs after it stored the result)."""
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        if re.search(pattern, text):
            return text
        time.sleep(0.05)
    raise AssertionError(f"no line matching {pattern!r} in the worker's log:\n{text[-3000:]}")


def test_at_info_a_worker_logs_each_call_and_none_of_its_data(
    redis_url: str, executor: CeleryExecutor, tmp_path: Path
) -> None:
    # given a worker logging at INFO
    with _worker_logging_at("INFO", redis_url, tmp_path) as log_path:
        # when a tool returns a secret, and another raises one, both called with a secret argument
        read_id, read = _call(executor, "logs_read_file")
        fail_id, failed = _call(executor, "logs_read_and_fail")
        assert read.kind is OutcomeKind.SUCCESS and log_tools.RESULT_SECRET in read.text
        assert failed.kind is OutcomeKind.EXECUTION_ERROR and log_tools.ERROR_SECRET in failed.text
        # then each call has its line: tool, call id, task id, outcome, duration
        _line(log_path, rf"tool logs_read_file call {read_id} task {read.task_id}: success in \d+\.\d ms")
        log = _line(
            log_path,
            rf"tool logs_read_and_fail call {fail_id} task {failed.task_id}: "
            rf"execution_error \(ValueError\) in \d+\.\d ms",
        )
    # and no secret, nor any part of the result, is anywhere in the log, read whole once the worker stopped
    log = log_path.read_text(errors="replace")
    for secret in (log_tools.RESULT_SECRET, log_tools.ERROR_SECRET, log_tools.ARGUMENT_SECRET):
        assert secret not in log, f"{secret} logged at INFO:\n{log}"
    assert log_tools.RESULT_HEAD not in log


def test_at_debug_a_result_is_logged_cut_short(
    redis_url: str, executor: CeleryExecutor, tmp_path: Path
) -> None:
    # given a worker logging at DEBUG
    with _worker_logging_at("DEBUG", redis_url, tmp_path) as log_path:
        # when a tool returns a long result whose secret lies past its first 200 characters
        call_id, outcome = _call(executor, "logs_read_file")
        assert outcome.kind is OutcomeKind.SUCCESS
        # then the call's content line shows the result's beginning, and says how much is left out
        log = _line(
            log_path, rf"tool logs_read_file call {call_id} content: '{log_tools.RESULT_HEAD}\.+'… \(\d+ more"
        )
    # and the secret past the cut appears nowhere in the log, read whole once the worker stopped
    log = log_path.read_text(errors="replace")
    assert log_tools.RESULT_SECRET not in log, log
