"""`toolfleet chat` with its tool calls on a real worker pool, and conversations continued from the SQL
store; the model is a local server speaking OpenAI's streamed wire format (tests/_fake_openai.py)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import Journal
from orchestrator.cli.console import COLUMN_WIDTHS, cut
from tests._cli import CLI, toolfleet
from tests._fake_openai import FakeOpenAi
from tests._waiting import wait_for
from tests.integration import slow_weather_tools
from tests.integration.private_redis import PrivateRedis
from tests.integration.worker_processes import tool_worker
from tests.test_chat import chat_env, run_chat
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

HOST = "chat-io@integration"
SHOWN = re.escape(cut(HOST, COLUMN_WIDTHS[2]))  # the live table's worker column cuts it to its width


@pytest.fixture(scope="module")
def weather_worker(redis_url: str, worker_logs: Path) -> Iterator[WorkerProcess]:
    """A worker serving pool `io` with the example weather tool."""
    worker = tool_worker(redis_url, ["io"], ["workers.examples.weather"], worker_logs / "chat-io.log", HOST)
    try:
        worker.wait_ready(timeout_s=60)
        yield worker
    finally:
        worker.stop()


def _env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    return chat_env(
        tmp_path,
        TOOLFLEET_REDIS_URL=redis_url,
        TOOLFLEET_BROKER_URL=redis_url,
        TOOLFLEET_RESULT_BACKEND=redis_url,
    )


def _row(out: str, state: str, city: str) -> bool:
    pattern = rf"tool\.get_weather +io +({SHOWN}|-) +{state} +\d+\.\d\d s  city={city}"
    return re.search(pattern, out) is not None


def test_calls_run_on_the_pool_and_a_memory_id_continues_the_conversation(
    weather_worker: WorkerProcess, redis_url: str, tmp_path: Path
) -> None:
    env = _env(tmp_path, redis_url)
    with FakeOpenAi() as server:
        # when: a question, its tool found in the live catalog
        first = run_chat(
            env, "--base-url", server.base_url, "--memory-id", "trip-7", "What is the weather in Lisbon?"
        )
        # then: the call is shown live on its way through the pool, and the answer follows
        assert first.returncode == 0, first.stderr
        for state in ("queued", "started", "success"):
            assert _row(first.stdout, state, "Lisbon"), first.stdout
        assert re.search(rf"tool\.get_weather +io +{SHOWN} +success", first.stdout), first.stdout
        assert re.search(r"^Forecast for Lisbon: -?\d+\.\d°C, \w+\.$", first.stdout, re.MULTILINE)
        assert len(server.requests) == 2

        # when: the same conversation goes on in another process
        second = run_chat(
            env, "--base-url", server.base_url, "--memory-id", "trip-7", "What is the weather in Kyiv?"
        )
        # then: the model is sent the earlier turns from the store, and the new question after them
        assert second.returncode == 0, second.stderr
        assert "Forecast for Kyiv: " in second.stdout and "Lisbon" not in second.stdout
        sent = server.requests[2]["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
        assert sent[0]["content"] == "What is the weather in Lisbon?"
        assert sent[1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Lisbon"}'
        assert '"city":"Lisbon"' in sent[2]["content"]
        assert sent[3]["content"] == first.stdout.strip().splitlines()[-1]
        assert sent[4]["content"] == "What is the weather in Kyiv?"

        # and another memory id starts afresh
        third = run_chat(
            env, "--base-url", server.base_url, "--memory-id", "other", "What is the weather in Lima?"
        )
        assert third.returncode == 0, third.stderr
        assert [m["role"] for m in server.requests[4]["messages"]] == ["user"]


def test_tools_of_modules_run_on_the_pool_with_executor_celery(
    weather_worker: WorkerProcess, redis_url: str, tmp_path: Path
) -> None:
    with FakeOpenAi() as server:
        result = run_chat(
            _env(tmp_path, redis_url),
            "--base-url",
            server.base_url,
            "--tools",
            "workers.examples.weather",
            "--executor",
            "celery",
            "What is the weather in Nairobi?",
        )
    assert result.returncode == 0, result.stderr
    assert re.search(rf"tool\.get_weather +io +{SHOWN} +success .* city=Nairobi", result.stdout)
    assert "Forecast for Nairobi: " in result.stdout
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["get_weather"]


def test_an_empty_catalog_is_a_setup_error(tmp_path: Path) -> None:
    # given: a Redis of our own that no worker ever joined
    redis = PrivateRedis(tmp_path)
    redis.start()
    try:
        with FakeOpenAi() as server:
            # when
            result = run_chat(_env(tmp_path, redis.url), "--base-url", server.base_url, "hi")
    finally:
        redis.stop()
    # then
    assert result.returncode == 2
    assert result.stderr.startswith(
        "toolfleet chat: no tools found: no live worker serves any tool at redis://"
    )
    assert result.stderr.count("\n") == 1


@pytest.fixture(scope="module")
def slow_weather_worker(redis_url: str, worker_logs: Path) -> Iterator[WorkerProcess]:
    """A worker serving the pool of a weather tool that takes 30 s."""
    worker = tool_worker(
        redis_url,
        [slow_weather_tools.POOL],
        [slow_weather_tools.__name__],
        worker_logs / "chat-slow-weather.log",
        "chat-slow-weather@integration",
    )
    try:
        worker.wait_ready(timeout_s=60)
        yield worker
    finally:
        worker.stop()


def test_a_question_cancelled_from_another_shell_ends_with_one_line_and_status_130(
    slow_weather_worker: WorkerProcess, redis_url: str, tmp_path: Path
) -> None:
    env = _env(tmp_path, redis_url)
    journal = Journal(env["TOOLFLEET_DATABASE_URL"])
    # the slow tool by its module: the live catalog may offer the quick `get_weather` of pool `io` too
    tools = ["--tools", slow_weather_tools.__name__, "--executor", "celery"]
    with FakeOpenAi() as server:
        # given: a question whose tool call runs for 30 s
        command = [*CLI, "chat", "--base-url", server.base_url, *tools, "What is the weather in Oslo?"]
        with subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as chat:
            try:
                [running] = wait_for(journal.invocations, timeout_s=30, what="the chat's invocation")
                wait_for(lambda: journal.calls(running.id), timeout_s=30, what="the weather call under way")
                # when: another shell cancels it
                cancelled = toolfleet("cancel", running.id, cwd=tmp_path, env=env)
                assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
                out, err = chat.communicate(timeout=30)
            finally:
                if chat.poll() is None:
                    chat.kill()
    # then: the chat says so in one line, no traceback, and exits as an interrupted command does
    assert chat.returncode == 130, out + err
    assert "Traceback" not in err and "CancelledError" not in err, err
    assert err.strip().splitlines()[-1] == "toolfleet chat: the invocation was cancelled", err
