"""MCP servers served by a worker pool, end to end, on real Redis with real processes.

Two MCP servers written with the SDK's own `MCPServer` (tests/integration/mcp_servers.py): `calc`
over stdio, a subprocess of the worker, and `web` over streamable HTTP, started here. A worker
serves both on pool `mcp` (tests/integration/mcp_tools.py); the orchestrator side knows nothing of
MCP: it finds the tools in the live catalog and calls them through `CeleryExecutor`, as `tool.<name>`
tasks with their deadlines, like any other tool.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    LocalExecutor,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
)
from orchestrator.executors.celery import CallEvent
from tests._ports import free_port
from tests._waiting import wait_until
from tests.integration.mcp_servers import PIXEL_BASE64, build
from tests.integration.worker_processes import celery_executor, tool_worker
from workers import Image, ImageContent, OutcomeKind, SearchBehavior, TextContent, ToolOutcome
from workers.calls.invocation import Invocation
from workers.mcp import McpServer, mcp_tools
from workers.mcp._session import McpSessions
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

SERVERS_SCRIPT = str(Path(__file__).with_name("mcp_servers.py"))
POOL = "mcp"  # tests/integration/mcp_tools.py's default pool (importing it would connect to the servers)


class HttpMcpServer:
    """`mcp_servers.py http PORT web` in a subprocess, on a port that stays the same across restarts."""

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> HttpMcpServer:
        self.process = subprocess.Popen(
            [sys.executable, SERVERS_SCRIPT, "http", str(self.port), "web"],
            stdout=self._log,
            stderr=self._log,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"MCP HTTP server exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("MCP HTTP server did not listen within 20 s")

    def halt(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        self.halt()
        self._log.close()


@pytest.fixture(scope="module")
def web_server(worker_logs: Path) -> Iterator[HttpMcpServer]:
    server = HttpMcpServer(worker_logs / "mcp-web.log").start()
    try:
        yield server
    finally:
        server.stop()


def _mcp_worker(
    redis_url: str, worker_logs: Path, web: HttpMcpServer, *, kind: str, name: str, pool: str = POOL
) -> WorkerProcess:
    env = {"TOOLFLEET_TEST_MCP_URL": web.url, "TOOLFLEET_TEST_MCP_POOL": pool}
    concurrency = 8 if kind == "threads" else 2
    return tool_worker(
        redis_url,
        [pool],
        ["tests.integration.mcp_tools"],
        worker_logs / f"{name}.log",
        f"{name}@integration",
        kind=kind,
        concurrency=concurrency,
        env=env,
    )


@pytest.fixture(scope="module")
def mcp_worker(redis_url: str, worker_logs: Path, web_server: HttpMcpServer) -> Iterator[WorkerProcess]:
    """A threads worker serving pool `mcp`: the tools of `calc` (stdio) and `web` (HTTP)."""
    worker = _mcp_worker(redis_url, worker_logs, web_server, kind="threads", name="mcp")
    with worker.running(timeout_s=60):
        yield worker


@pytest.fixture
def executor(settings: Settings, mcp_worker: WorkerProcess) -> Iterator[CeleryExecutor]:
    with celery_executor(settings) as celery:
        yield celery


def _call(name: str, /, **arguments: Any) -> ToolExecutionRequest:
    return ToolExecutionRequest(f"call-{uuid.uuid4().hex[:8]}", name, json.dumps(arguments))


def _execute(executor: CeleryExecutor, name: str, /, **arguments: Any) -> ToolOutcome:
    return asyncio.run(executor.execute(_call(name, **arguments)))


CALC_CONNECTED = "connected to MCP server 'calc'"  # the worker's log line of each session it opens


def _pid(executor: CeleryExecutor, tool: str) -> int:
    outcome = _execute(executor, tool)
    assert outcome.kind is OutcomeKind.SUCCESS, outcome.text
    pid = outcome.result_object["pid"]
    assert isinstance(pid, int)
    return pid


# -- the catalog ----------------------------------------------------------------------------------


def test_the_catalog_shows_mcp_tools_as_ordinary_specifications(executor: CeleryExecutor) -> None:
    # when: the orchestrator reads the live catalog (it has no MCP code, no server address)
    tools = {d.name: d for d in executor.catalog_definitions() if d.pool == POOL}

    # then: each exposed tool of each server, under its server's prefix
    assert sorted(tools) == [
        "calc_add",
        "calc_describe_image",
        "calc_fail",
        "calc_header",
        "calc_sleep",
        "calc_tag",
        "calc_whoami",
        "web_add",
        "web_fail",
        "web_header",
        "web_sleep",
        "web_whoami",
    ]
    # and: the server's own description and input schema, its server's timeout and visibility
    add = tools["calc_add"]
    assert add.specification.description == "Adds two integers."
    assert add.specification.parameters is not None
    assert add.specification.parameters["required"] == ["a", "b"]
    assert add.search_behavior is SearchBehavior.ALWAYS_VISIBLE
    assert tools["calc_fail"].search_behavior is SearchBehavior.SEARCHABLE
    assert (add.timeout, tools["web_add"].timeout) == (10, 3)


# -- a scripted invocation ------------------------------------------------------------------------


@pytest.mark.parametrize("server", ["calc", "web"], ids=["stdio", "http"])
def test_an_invocation_calls_two_mcp_tools_in_parallel_and_one_fails(
    executor: CeleryExecutor, mcp_worker: WorkerProcess, server: str
) -> None:
    # given: a model that calls two tools of the server at once, one of which fails, then answers
    add = _call(f"{server}_add", a=2, b=3)
    fail = _call(f"{server}_fail", reason="disk full")
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[add, fail]), "Added; the other failed."])
    events: list[CallEvent] = []
    executor.on_call = events.append
    service = AiService(chat_model=model, tools=executor.catalog_definitions(), executor=executor)

    # when
    result = service.chat("Add 2 and 3, and try the failing tool")

    # then: the invocation completes with both executions, in request order
    assert result.content == "Added; the other failed."
    succeeded, failed = result.tool_executions
    assert (succeeded.result, succeeded.result_object, succeeded.has_failed) == ("5", {"result": 5}, False)
    assert (succeeded.pool, succeeded.worker) == ("mcp", mcp_worker.hostname)
    assert failed.has_failed
    assert failed.result == f"Error executing tool fail: {server} refused: disk full"
    # and: the model read both results, the failure as the server's text
    results = [m for m in model.requests[1].messages if isinstance(m, ToolExecutionResultMessage)]
    assert [(m.tool_name, m.text) for m in results] == [
        (f"{server}_add", "5"),
        (f"{server}_fail", f"Error executing tool fail: {server} refused: disk full"),
    ]
    # and: each call was its own Celery task `tool.<name>`, queued, started, then ended, in that order
    assert {e.task_name for e in events} == {f"tool.{server}_add", f"tool.{server}_fail"}
    steps = {name: [e.state for e in events if e.task_name == name] for name in {e.task_name for e in events}}
    assert steps == {
        f"tool.{server}_add": ["queued", "started", "success"],
        f"tool.{server}_fail": ["queued", "started", "execution_error"],
    }, [(e.task_name, e.state) for e in events]
    # ... and both were dispatched before either ended. The calls of a batch are published one after
    # the other, so the first may already have started when the second is queued.
    last_queued = max(i for i, e in enumerate(events) if e.state == "queued")
    first_ended = min(i for i, e in enumerate(events) if e.state not in ("queued", "started"))
    assert last_queued < first_ended, [(e.task_name, e.state) for e in events]


def test_the_same_invocation_in_process_behaves_the_same() -> None:
    # given: the MCP tools run in this process (LocalExecutor), over the SDK's in-process transport
    held = McpSessions()
    tools = mcp_tools([McpServer("calc", in_process=build("calc"), include=["add", "fail"])], using=held)
    model = ScriptedChatModel(
        [
            AiMessage(tool_execution_requests=[_call("add", a=2, b=3), _call("fail", reason="disk full")]),
            "done",
        ]
    )
    executor = LocalExecutor()
    try:
        result = AiService(chat_model=model, tools=tools, executor=executor).chat("add, and fail")
    finally:
        executor.close()
        held.close()

    # then: as on the worker pool
    assert result.content == "done"
    assert [(e.result, e.has_failed) for e in result.tool_executions] == [
        ("5", False),
        ("Error executing tool fail: calc refused: disk full", True),
    ]


def test_calls_on_one_mcp_session_run_concurrently(executor: CeleryExecutor) -> None:
    calls = [_call("calc_sleep", seconds=1), _call("calc_sleep", seconds=1), _call("web_sleep", seconds=1)]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "done"])
    service = AiService(chat_model=model, tools=executor.catalog_definitions(), executor=executor)

    started = time.monotonic()
    result = service.chat("sleep three times")
    elapsed = time.monotonic() - started

    assert [e.result for e in result.tool_executions] == ["slept 1.0"] * 3
    assert elapsed < 2.0, f"three 1 s calls took {elapsed:.2f} s"


# -- results --------------------------------------------------------------------------------------


def test_images_and_meta_come_back_through_the_pool(executor: CeleryExecutor) -> None:
    image = _execute(executor, "calc_describe_image")
    tagged = _execute(executor, "calc_tag", label="urgent")

    assert image.kind is OutcomeKind.SUCCESS
    assert image.contents == [
        ImageContent(Image(base64_data=PIXEL_BASE64, mime_type="image/png")),
        TextContent("a single red pixel"),
    ]
    assert (tagged.text, tagged.attributes) == ("tagged urgent", {"label": "urgent", "server": "calc"})


def test_the_declared_headers_go_with_every_http_request(executor: CeleryExecutor) -> None:
    assert _execute(executor, "web_header", name="X-Toolfleet-Test").text == "sent by the worker"


def test_a_call_past_the_server_timeout_times_out_at_its_deadline(executor: CeleryExecutor) -> None:
    started = time.monotonic()
    outcome = _execute(executor, "web_sleep", seconds=10)  # the web server's timeout_s is 3

    assert outcome.kind is OutcomeKind.TIMED_OUT
    assert 2.5 < time.monotonic() - started < 5.0
    # and: the pool's session still serves
    assert _execute(executor, "web_add", a=1, b=1).text == "2"


# -- reconnection ---------------------------------------------------------------------------------


def test_the_worker_starts_a_new_stdio_server_when_its_server_dies(
    executor: CeleryExecutor, mcp_worker: WorkerProcess
) -> None:
    # given: the stdio server the worker started
    before = _pid(executor, "calc_whoami")
    assert mcp_worker.log_path is not None
    connected = mcp_worker.log_path.read_text(errors="replace").count(CALC_CONNECTED)

    # when: its process dies between two calls, and the worker has seen its session end and connected
    # again (a call sent before the worker sees the end fails: the request that found the pipe closed
    # is not sent again)
    os.kill(before, signal.SIGKILL)
    assert wait_until(
        lambda: mcp_worker.log_path.read_text(errors="replace").count(CALC_CONNECTED) > connected, 10
    )

    # then: the next call is served by a new server process
    after = _pid(executor, "calc_whoami")
    assert after != before
    assert _execute(executor, "calc_add", a=20, b=22).text == "42"


def test_a_call_in_flight_when_the_stdio_server_dies_is_a_connection_error(executor: CeleryExecutor) -> None:
    # given: a slow call running on the stdio server
    server_pid = _pid(executor, "calc_whoami")
    killer = threading.Timer(0.5, os.kill, (server_pid, signal.SIGKILL))
    killer.start()

    # when: the server process dies while the call runs
    outcome = _execute(executor, "calc_sleep", seconds=5)
    killer.join()

    # then: the call fails as a (transient) connection error — it may have run, so it is not resent
    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.error_type == "McpConnectionError"
    assert outcome.text == "Connection to MCP server 'calc' ended during the request"
    # and: the next call is served by a new server process
    assert _pid(executor, "calc_whoami") != server_pid


def test_the_worker_reconnects_when_the_http_server_restarts(
    executor: CeleryExecutor, web_server: HttpMcpServer
) -> None:
    before = _pid(executor, "web_whoami")

    # when: the server goes away, a call fails as a connection error
    web_server.halt()
    down = _execute(executor, "web_add", a=1, b=2)
    assert down.kind is OutcomeKind.EXECUTION_ERROR
    assert down.error_type == "McpConnectionError"
    assert "MCP server 'web'" in down.text

    # then: once it is back, calls reach the new server process
    web_server.start()
    after = _pid(executor, "web_whoami")
    assert after != before
    assert _execute(executor, "web_add", a=1, b=2).text == "3"


# -- a prefork pool -------------------------------------------------------------------------------


def test_a_prefork_pool_serves_mcp_tools_with_sessions_of_its_children(
    redis_url: str, worker_logs: Path, web_server: HttpMcpServer, settings: Settings
) -> None:
    # given: the same servers on a prefork worker of a pool of its own (children fork after the
    # parent listed the tools; each child opens its own sessions)
    pool = "mcp-prefork"
    worker = _mcp_worker(redis_url, worker_logs, web_server, kind="prefork", name=pool, pool=pool)
    executor = CeleryExecutor(settings=settings)
    try:
        worker.wait_ready(timeout_s=60)
        on_prefork = {
            d.name: dataclasses.replace(d, options=dataclasses.replace(d.options, pool=pool))
            for d in executor.catalog_definitions()
            if d.name in ("calc_add", "web_fail")
        }
        calls = [(_call("calc_add", a=1, b=2), on_prefork["calc_add"])]
        calls.append((_call("web_fail", reason="no"), on_prefork["web_fail"]))

        # when: two calls at once
        added, failed = asyncio.run(executor.execute_batch(calls, Invocation()))
    finally:
        executor.close()
        worker.stop()

    # then
    assert (added.kind, added.text, added.worker) == (OutcomeKind.SUCCESS, "3", worker.hostname)
    assert failed.kind is OutcomeKind.EXECUTION_ERROR
    assert failed.message_for_llm == "Error executing tool fail: web refused: no"
