"""A worker logging JSON (`TOOLFLEET_LOG_FORMAT=json`), prefork, started either way (`toolfleet worker`,
`celery -A workers.app worker`): every line it writes, from its start to its exit, is one JSON object;
so is every line of `toolfleet ui` (`toolfleet serve`'s: tests/integration/serve/test_serve_telemetry.py).

Its tools log, print on standard output and error, log through Celery's task logger and as
multiprocessing, warn, fail, log a traceback and leave a thread to die of an exception, all in the
pool's child processes; the banner is one record carrying its facts, the stop (SIGTERM, or SIGINT as
at a terminal) one more.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import tests.integration.json_log_tools as tools
from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest
from orchestrator.executors.celery import CeleryExecutor
from tests._cli import TOOLFLEET
from tests._ports import free_port
from tests._processes import reap
from tests._waiting import wait_for
from tests.integration.worker_processes import REPO_ROOT, celery_worker, tool_worker
from workers.settings import Settings

pytestmark = pytest.mark.integration

MODULE = "tests.integration.json_log_tools"
BANNER_LOGGER = "workers.runtime._program"
SERVED = ["jsonlogs_book", "jsonlogs_fail", "jsonlogs_speak", "jsonlogs_stray", "jsonlogs_warn"]
CONCURRENCY = 2


@contextlib.contextmanager
def _toolfleet_worker(redis_url: str, log_path: Path, hostname: str) -> Iterator[signal.Signals]:
    """`toolfleet worker`, stopped as a container runtime stops it (SIGTERM)."""
    worker = tool_worker(
        redis_url,
        [tools.POOL],
        [MODULE],
        log_path,
        hostname,
        kind="prefork",
        concurrency=CONCURRENCY,
        env={"TOOLFLEET_LOG_FORMAT": "json"},
    )
    with worker.running(timeout_s=60):
        yield signal.SIGTERM


@contextlib.contextmanager
def _celery_worker(redis_url: str, log_path: Path, hostname: str) -> Iterator[signal.Signals]:
    """`celery -A workers.app worker`, as an operator may start it, stopped by Ctrl-C (SIGINT)."""
    json_mode = {"TOOLFLEET_LOG_FORMAT": "json"}
    with celery_worker(
        redis_url,
        tools.POOL,
        MODULE,
        log_path,
        hostname,
        kind="prefork",
        concurrency=CONCURRENCY,
        env=json_mode,
    ) as process:
        yield signal.SIGINT
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


STARTS = {"toolfleet worker": _toolfleet_worker, "celery -A workers.app worker": _celery_worker}


def every_line(log_path: Path) -> list[dict[str, Any]]:
    """Each line of the log as the one JSON object it must be; the test fails at the first that is not."""
    text = log_path.read_text(encoding="utf-8")
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            entry = json.loads(line)
        except ValueError:
            pytest.fail(f"line {number} is not JSON: {line!r}\n--- the log ---\n{text[-5000:]}")
        assert isinstance(entry, dict), line
        entries.append(entry)
    return entries


def _call_every_tool(settings: Settings) -> list[str]:
    """One invocation calling each tool of the pool once, in one batch; the calls' statuses."""
    names = ["jsonlogs_speak", "jsonlogs_warn", "jsonlogs_fail", "jsonlogs_stray"]
    calls = [
        ToolExecutionRequest(id=f"call-{n}", name=name, arguments=json.dumps({"text": "caf\u00e9\nline two"}))
        for n, name in enumerate(names)
    ]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "called"])
    executor = CeleryExecutor(settings=settings)
    try:
        result = AiService(chat_model=model, tools=[tools], executor=executor).chat("call them all")
    finally:
        executor.close()
    assert result.content == "called"
    return [execution.status for execution in result.tool_executions]


def _one(entries: list[dict[str, Any]], logger: str, text: str) -> dict[str, Any]:
    found = [e for e in entries if e["logger"] == logger and text in e["message"]]
    assert len(found) == 1, (logger, text, [e for e in entries if e["logger"] == logger])
    return found[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start", list(STARTS))
def test_every_line_a_prefork_worker_writes_is_one_json_object(
    start: str, redis_url: str, settings: Settings, tmp_path: Path
) -> None:
    # given: a prefork worker logging JSON, serving the tools of one pool of a module of two pools
    hostname = f"jsonlines-{uuid.uuid4().hex[:6]}@test"
    log_path = tmp_path / "worker.log"
    with STARTS[start](redis_url, log_path, hostname) as stop_signal:
        # when: each tool is called once, one failing; then the worker is stopped
        statuses = _call_every_tool(settings)
    assert statuses == ["success", "success", "execution_error", "success"]

    # then: every line it wrote is one JSON object
    entries = every_line(log_path)
    # and: the banner is one record of its facts, naming only the tools of the pool it serves
    (banner,) = [e for e in entries if e["logger"] == BANNER_LOGGER and "tools" in e]
    assert banner["hostname"] == hostname
    assert banner["pools"] == [tools.POOL]
    assert banner["tools"] == SERVED
    assert "compensate.jsonlogs_book" in banner["tasks"]
    assert (banner["pool_kind"], banner["concurrency"]) == ("prefork", CONCURRENCY)
    assert banner["queues"][0] == tools.POOL and banner["task_events"] is True
    assert "jsonlogs_elsewhere" not in log_path.read_text(encoding="utf-8")
    # and: what the tools wrote, in the pool's children, is a record each, tracebacks inside them
    children = {e["process"] for e in entries} - {banner["process"]}
    said = _one(entries, MODULE, "speaking about caf\u00e9\nline two")
    assert said["process"] in children and said["tool"] == "jsonlogs_speak"
    printed = _one(entries, "celery.redirected", f"{tools.PRINTED}: caf\u00e9\nline two\nits second line")
    assert printed["level"] == "WARNING"
    _one(entries, "celery.redirected", f"{tools.PRINTED} on standard error")
    _one(entries, tools.TASK_LOGGER, "task logger: caf\u00e9")
    _one(entries, "multiprocessing", "multiprocessing says caf\u00e9")
    warned = _one(entries, "py.warnings", f"UserWarning: {tools.WARNING_TEXT}: caf\u00e9\nline two")
    assert warned["process"] in children
    looked_up = _one(entries, MODULE, "looking up caf\u00e9\nline two failed")
    assert looked_up["exception"].startswith("Traceback (most recent call last):")
    assert "KeyError" in looked_up["exception"]
    stray = _one(entries, "workers.telemetry.logs", f"in thread {tools.THREAD_NAME}")
    assert stray["exception"].rstrip().endswith("RuntimeError: the stray thread of caf\u00e9\nline two died")
    failed = _one(entries, "workers.calls.runner", "jsonlogs_fail")
    assert "execution_error (ValueError)" in failed["message"]
    # and: the stop is a record too, naming the signal
    (stopped,) = [e for e in entries if e["logger"] == BANNER_LOGGER and "signal" in e]
    assert (stopped["signal"], stopped["hostname"]) == (stop_signal.name, hostname)
    assert stopped["shutdown"] == "warm"


def test_a_workers_banner_lists_only_the_tools_of_the_pools_it_serves(redis_url: str, tmp_path: Path) -> None:
    # given: a module with tools of two pools; a worker (text logs, at INFO) for each pool
    workers = {
        pool: tool_worker(
            redis_url, [pool], [MODULE], tmp_path / f"{pool}.log", f"{pool}-{uuid.uuid4().hex[:6]}@test"
        )
        for pool in (tools.POOL, tools.OTHER_POOL)
    }
    try:
        for worker in workers.values():
            worker.wait_ready(timeout_s=60)
    finally:
        for worker in workers.values():
            worker.stop()
    # then: each banner's tasks are the calls and compensations of its own pool's tools
    listed = {pool: _banner_tasks(tmp_path / f"{pool}.log") for pool in workers}
    assert listed[tools.POOL] == [
        "compensate.jsonlogs_book",
        *(f"tool.{name}" for name in SERVED),
    ]
    assert listed[tools.OTHER_POOL] == ["tool.jsonlogs_elsewhere"]


def _banner_tasks(log_path: Path) -> list[str]:
    """The tasks listed under `[tasks]` in the banner of the worker's log."""
    lines = log_path.read_text(encoding="utf-8").splitlines()
    assert "[tasks]" in lines, lines
    tasks = []
    for line in lines[lines.index("[tasks]") + 1 :]:
        if not line.startswith("  . "):
            break
        tasks.append(line.removeprefix("  . "))
    return tasks


def test_every_line_of_toolfleet_ui_is_one_json_object(redis_url: str, tmp_path: Path) -> None:
    # given: `toolfleet ui` logging JSON, on a journal of its own
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TOOLFLEET_")},
        "TOOLFLEET_LOG_FORMAT": "json",
        "TOOLFLEET_REDIS_URL": redis_url,
        "TOOLFLEET_DATABASE_URL": f"sqlite:///{tmp_path / 'journal.db'}",
    }
    log_path = tmp_path / "ui.log"
    with open(log_path, "ab") as out:
        process = subprocess.Popen(
            [TOOLFLEET, "ui", "--port", str(port)], cwd=REPO_ROOT, env=env, stdout=out, stderr=out
        )
    try:

        def answers() -> bool:
            assert process.poll() is None, log_path.read_text(errors="replace")
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        # when: it serves the run view, then is stopped
        wait_for(answers, timeout_s=30, what="toolfleet ui answering")
        assert httpx.get(f"http://127.0.0.1:{port}/ui", timeout=10).status_code == 200
        process.terminate()
        process.wait(timeout=30)
    finally:
        reap(process)
    # then: every line it wrote is one JSON object, its notice of where it serves among them
    entries = every_line(log_path)
    notices = [e["message"] for e in entries if e["logger"] == "orchestrator.cli.commands.ui"]
    assert notices == [f"toolfleet ui: the run view on http://127.0.0.1:{port}/ui (open, loopback only)"]
