"""`toolfleet chat` as a user runs it, against a local server that speaks OpenAI's streamed wire format;
tools in-process (`--tools`), so no Redis and no worker is needed here (tests/integration/test_chat_pools.py
runs them on a worker pool)."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests._cli import CLI, run_command
from tests._fake_openai import FakeOpenAi
from tests._processes import reap

QUESTION = "What is the weather in Lisbon?"
ROOT = Path(__file__).resolve().parents[1]


def chat_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    env["TOOLFLEET_DATABASE_URL"] = f"sqlite:///{tmp_path}/chat.db"
    env["PYTHONPATH"] = str(ROOT)
    return {**env, **extra}


def chat_command(*args: str) -> list[str]:
    return [*CLI, "chat", *args]


def run_chat(
    env: Mapping[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_command(chat_command(*args), env=env, stdin=stdin)


class _Output:
    """A child's stdout, read as it comes."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self._stream = process.stdout
        self._text = b""
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while chunk := os.read(self._stream.fileno(), 4096):
            with self._changed:
                self._text += chunk
                self._changed.notify_all()

    @property
    def text(self) -> str:
        with self._changed:
            return self._text.decode(errors="replace")

    def wait_for(self, needle: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while needle.encode() not in self._text:
                left = deadline - time.monotonic()
                assert left > 0, f"{needle!r} never appeared in:\n{self._text.decode(errors='replace')}"
                self._changed.wait(left)
            return self._text.decode(errors="replace")

    def finish(self) -> str:
        self._thread.join(timeout=30)
        return self.text


def test_one_question_streams_the_answer_and_shows_the_in_process_call(tmp_path: Path) -> None:
    # given: a model server that pauses its answer after the first words, and a key in a variable of our own
    with FakeOpenAi(hold_s=30) as server:
        env = chat_env(tmp_path, CHAT_TEST_KEY="sk-chat-test")
        with subprocess.Popen(
            chat_command(
                "--model",
                "openai:gpt-4o-mini",
                "--base-url",
                server.base_url,
                "--api-key-env",
                "CHAT_TEST_KEY",
                "--tools",
                "workers.examples.weather",
                "--system",
                "Answer in one line.",
                QUESTION,
            ),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        ) as process:
            try:
                output = _Output(process)
                # when: the first words of the answer are sent
                shown = output.wait_for("Forecast for Lisbon: ", timeout_s=30)
                # then: they are on the terminal while the server still holds the rest
                assert server.hold.is_set() and not server.release.is_set()
                assert "°C" not in shown
                server.release.set()
                code = process.wait(timeout=30)
                out = output.finish()
            finally:
                reap(process)
            assert process.stderr is not None
            err = process.stderr.read().decode()
    assert code == 0, err
    # the call ran in this process, shown live with its arguments
    assert re.search(r"tool\.get_weather +io +in-process +started +\d+\.\d\d s  city=Lisbon", out), out
    assert re.search(r"tool\.get_weather +io +in-process +success +\d+\.\d\d s  city=Lisbon", out), out
    # the answer quotes the tool's result, so the result reached the model
    assert re.search(r"^Forecast for Lisbon: -?\d+\.\d°C, \w+\.$", out, re.MULTILINE), out
    # what the model was sent: the key, the system message, the question, then the call and its result
    assert [h["authorization"] for h in server.headers] == ["Bearer sk-chat-test"] * 2
    first, second = server.requests
    assert first["model"] == "gpt-4o-mini"
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather"]
    assert first["messages"] == [
        {"role": "system", "content": "Answer in one line."},
        {"role": "user", "content": QUESTION},
    ]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert '"city":"Lisbon"' in second["messages"][-1]["content"]


def prompt_loop(tmp_path: Path, server: FakeOpenAi, stdin: str) -> subprocess.CompletedProcess[str]:
    """`toolfleet chat` without a question, reading `stdin`, with the example weather tool in process."""
    return run_chat(
        chat_env(tmp_path), "--base-url", server.base_url, "--tools", "workers.examples.weather", stdin=stdin
    )


def test_the_prompt_loop_answers_each_line_until_exit(tmp_path: Path) -> None:
    # given: three questions on stdin, `/exit` before the third, and a blank line between
    lines = "\n".join(
        [QUESTION, "", "What is the weather in Kyiv?", "/exit", "What is the weather in Tokyo?", ""]
    )
    with FakeOpenAi() as server:
        # when
        result = prompt_loop(tmp_path, server, lines)
    # then: two answers, in order, each after its own call; Tokyo was never asked
    assert result.returncode == 0, result.stderr
    out = result.stdout
    lisbon, kyiv = out.index("Forecast for Lisbon: "), out.index("Forecast for Kyiv: ")
    assert out.index("success          ") < lisbon < out.index("city=Kyiv") < kyiv
    assert "Tokyo" not in out
    assert len(server.requests) == 4
    # the second question comes with the first turn: one conversation for the session
    roles = [m["role"] for m in server.requests[2]["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]
    assert server.requests[2]["messages"][3]["content"].startswith("Forecast for Lisbon: ")


def test_end_of_input_ends_the_prompt_loop(tmp_path: Path) -> None:
    with FakeOpenAi() as server:
        result = prompt_loop(tmp_path, server, f"{QUESTION}\n")
    assert result.returncode == 0, result.stderr
    assert "Forecast for Lisbon: " in result.stdout
    assert len(server.requests) == 2


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


LIVE = "--base-url http://127.0.0.1:{live}/v1"  # a model server that answers
NO_MODULE_TOOLS = "Module 'json' does not have any functions annotated with @tool"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            "--model mistral:large hi",
            "--model must be openai:<model> or anthropic:<model>, got 'mistral:large'",
        ),
        ("--model openai:gpt-4o-mini hi", "no API key for openai:gpt-4o-mini: set OPENAI_API_KEY"),
        (
            "--model anthropic:claude-sonnet-4-5 hi",
            "no API key for anthropic:claude-sonnet-4-5: set ANTHROPIC_API_KEY",
        ),
        (
            "--api-key-env CHAT_TEST_UNSET hi",
            "no API key: the environment variable CHAT_TEST_UNSET is not set",
        ),
        (
            "--base-url http://127.0.0.1:{port}/v1 hi",
            "the model server at http://127.0.0.1:{port}/v1 cannot be reached",
        ),
        ("--base-url ftp://example.org/v1 hi", "--base-url must be an http:// or https:// URL"),
        (f"{LIVE} --tools json hi", f"cannot load the tools of json: {NO_MODULE_TOOLS}"),
        (f"{LIVE} --tools no_such_module_here hi", "cannot load the tools of no_such_module_here"),
        (f"{LIVE} --executor local hi", "--executor local runs the tools of --tools modules"),
    ],
)
def test_setup_errors_are_one_line_and_exit_2(tmp_path: Path, args: str, message: str) -> None:
    # given: no key in the environment; a port nothing listens on; a live server
    with FakeOpenAi() as server:
        live = server.base_url.rsplit(":", 1)[1].split("/")[0]
        values = {"port": str(_free_port()), "live": live}
        # when
        result = run_chat(chat_env(tmp_path), *args.format(**values).split())
    # then
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("toolfleet chat: " + message.format(**values)), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert server.requests == []
