"""The documentation's examples run as written: the README's first tool and first agent, and the
examples of "Defining tools" (docs/tools.md), "The AI service" (docs/ai-service.md) and "Pools and
workers" (docs/pools.md).

The fenced python blocks are read from those pages. The first block of "Defining tools" is a tool
module whose first line names its path and the worker command that serves it; the test writes it
there, in a temporary directory, and starts that worker (pools and modules taken from the command)
with the directory on its PYTHONPATH; the README's first tool is that same module. Every other block
runs as a script of its own, in a fresh directory, the way a newcomer would run it: only the blocks
of "Defining tools" see the tool code; the orchestrator's blocks run without it, against the worker.

One substitution, and only one: the agents' model line
`chat_model=OpenAiChatModel("gpt-4o-mini"),  # key from OPENAI_API_KEY` is asserted verbatim and given
`base_url=` of a local server that speaks OpenAI's chat-completions format (tests/integration/
fake_openai.py) and answers from the script below, recording what the model was shown.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.fake_openai import FakeOpenAi, Reply, ToolCall, fake_openai
from tests.integration.worker_processes import tool_worker
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TOOLS_PAGE = ROOT / "docs" / "tools.md"
AI_SERVICE_PAGE = ROOT / "docs" / "ai-service.md"
POOLS_PAGE = ROOT / "docs" / "pools.md"
MODEL_LINE = '    chat_model=OpenAiChatModel("gpt-4o-mini"),  # key from OPENAI_API_KEY\n'
NOTICE = "Tool error handlers are not configured"
MODULE_HEADER = re.compile(
    r"# (?P<path>\S+\.py): served by `toolfleet worker --pool (?P<pools>\S+) --tools (?P<mods>\S+)`"
)


def python_blocks(page: Path, section: str | None = None) -> list[str]:
    """The fenced python blocks of `page`, or of its section headed `section` (at any level), up to
    the next heading of that level or above."""
    text = page.read_text()
    if section is not None:
        heading = re.search(rf"^(#+) {re.escape(section)}\n", text, re.MULTILINE)
        assert heading is not None, f"{page.name} has no section '{section}'"
        rest = text[heading.end() :]
        end = re.search(rf"^#{{1,{len(heading.group(1))}}} ", _without_code(rest), re.MULTILINE)
        text = rest[: end.start()] if end else rest
    return re.findall(r"^```python\n(.*?)^```\n", text, re.MULTILINE | re.DOTALL)


def _without_code(text: str) -> str:
    """`text` with the lines of its fenced blocks blanked (a `# comment` there is no heading), the
    offsets of everything else kept."""
    return re.sub(r"^```.*?^```", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.M | re.S)


@dataclass(frozen=True)
class Ran:
    stdout: str
    stderr: str


def run_script(code: str, directory: Path, *, tool_code: Path | None = None, **env: str) -> Ran:
    """Run `code` as `python example.py` in `directory`; the tool code is importable only if given."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "example.py"
    script.write_text(code)
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment.update({"TOOLFLEET_HEARTBEAT_TTL_S": "2", **env})
    if tool_code is not None:
        environment["PYTHONPATH"] = str(tool_code)
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert completed.returncode == 0, f"the example failed:\n{completed.stdout}\n{completed.stderr}"
    return Ran(completed.stdout, completed.stderr)


# -- the fixtures: the tool module of "Defining tools", served by the worker its first line names ----


@dataclass(frozen=True)
class ExampleWorker:
    tool_code: Path
    worker: WorkerProcess


@pytest.fixture(scope="module")
def example_worker(
    redis_url: str, worker_logs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ExampleWorker]:
    module = python_blocks(TOOLS_PAGE)[0]
    header = MODULE_HEADER.match(module.splitlines()[0])
    assert header is not None, f"the tool module's first line names no path and worker: {module[:120]!r}"
    tool_code = tmp_path_factory.mktemp("example-tools")
    (tool_code / header["path"]).parent.mkdir(parents=True, exist_ok=True)
    (tool_code / header["path"]).write_text(module)
    pools, modules = header["pools"].split(","), header["mods"].split(",")
    log_path, code_path = worker_logs / "examples.log", {"PYTHONPATH": str(tool_code)}
    worker = tool_worker(
        redis_url, pools, modules, log_path, "examples@integration", concurrency=8, env=code_path
    )
    with worker.running(timeout_s=60):
        yield ExampleWorker(tool_code, worker)


# -- the model: what a sensible model would answer to the examples' questions ------------------------


def _bank_clerk(body: dict[str, Any]) -> Reply:
    """Calls the tools the examples' questions need, if the model is shown them; then sums up."""
    messages = body["messages"]
    shown = {tool["function"]["name"] for tool in body.get("tools") or []}
    last = messages[-1]
    if last["role"] == "tool":
        results = [m["content"] for m in messages[_last_user(messages) :] if m["role"] == "tool"]
        return Reply(content="Done: " + "; ".join(results))
    question = last["content"] if isinstance(last["content"], str) else json.dumps(last["content"])
    if question.startswith("Transfer 100 from Mario to Dmytro") and {"withdraw", "credit"} <= shown:
        return Reply(
            tool_calls=[
                ToolCall("call_w", "withdraw", {"name": "Mario", "amount": 100}),
                ToolCall("call_c", "credit", {"name": "Dmytro", "amount": 100}),
            ]
        )
    if question.startswith("What is 2 + 3?") and "add" in shown:
        return Reply(tool_calls=[ToolCall("call_a", "add", {"a": 2, "b": 3})])
    if question.startswith("Thanks"):
        return Reply(content="You are welcome.")
    return Reply(content=f"I have no tool for that (shown: {sorted(shown)})")


def _last_user(messages: list[dict[str, Any]]) -> int:
    return max(i for i, m in enumerate(messages) if m["role"] == "user")


@pytest.fixture
def model() -> Iterator[FakeOpenAi]:
    with fake_openai(_bank_clerk) as server:
        yield server


def _agent_example(code: str, base_url: str, *, drop: str | None = None) -> str:
    assert code.count(MODEL_LINE) == 1, f"the example's model line changed; expected {MODEL_LINE!r}"
    code = code.replace(
        MODEL_LINE, f'    chat_model=OpenAiChatModel("gpt-4o-mini", base_url="{base_url}"),\n'
    )
    if drop is not None:  # the control: the same example without one of its lines
        assert code.count(drop) == 1
        code = code.replace(drop, "")
    return code


# -- the tests ----------------------------------------------------------------------------------------


def test_defining_tools_runs_its_tools_in_process(example_worker: ExampleWorker, tmp_path: Path) -> None:
    # given: the section's other block, with the tool module importable
    blocks = python_blocks(TOOLS_PAGE)
    assert len(blocks) == 2

    # when
    ran = run_script(blocks[1], tmp_path, tool_code=example_worker.tool_code)

    # then: the outcome its comment shows
    assert ran.stdout == "success 2\n"


def test_pools_and_workers_example_calls_the_worker_of_the_tools_page(
    example_worker: ExampleWorker, tmp_path: Path
) -> None:
    # given: the python block of the catalog's section, run without the tool code
    (code,) = python_blocks(POOLS_PAGE, "The catalog")

    # when
    ran = run_script(code, tmp_path)

    # then: `credit` ran on the example's worker, and the catalog lists the module's tools
    outcome, names = ran.stdout.splitlines()
    assert re.fullmatch(r"success Dmytro now has \d+\.0 examples@integration", outcome), outcome
    assert {"add", "credit", "withdraw"} <= set(json.loads(names.replace("'", '"')))


def test_the_ai_service_example_runs_on_the_live_catalog(
    example_worker: ExampleWorker, model: FakeOpenAi, tmp_path: Path
) -> None:
    # given: the example as written, its model pointed at the local server
    (code,) = python_blocks(AI_SERVICE_PAGE)
    code = _agent_example(code, model.base_url)

    # when
    ran = run_script(code, tmp_path, OPENAI_API_KEY="sk-doc-example")

    # then: with no tools= the model was shown what the worker serves, and the calls ran there
    assert {"withdraw", "credit", "add"} <= model.tool_names(0)
    lines = ran.stdout.splitlines()
    assert re.fullmatch(
        r"Done: Mario has \d+\.0 left; Dmytro now has \d+\.0 \['withdraw', 'credit'\]", lines[0]
    ), lines[0]
    assert lines[1] == "5"  # add returns immediately: the tool's result, no further model call
    assert lines[2:] == ["PartialResponse"] * 3 + ["CompleteResponse"]  # "You are welcome."
    # and the conversation of memory id user-42 was kept: the stream's request holds the transfer
    stream_request = model.requests[-1]
    assert stream_request["stream"] is True
    assert any("Transfer 100" in str(m.get("content")) for m in stream_request["messages"])
    # and both error handlers are set, so no notice about unconfigured handlers
    assert NOTICE not in ran.stderr


def test_the_handler_notice_appears_without_the_arguments_handler(
    example_worker: ExampleWorker, model: FakeOpenAi, tmp_path: Path
) -> None:
    # given: the control for the check above: the example without its arguments handler
    (code,) = python_blocks(AI_SERVICE_PAGE)
    code = _agent_example(
        code, model.base_url, drop="    tool_arguments_error_handler=send_exception_message_to_llm(),\n"
    )

    # when
    ran = run_script(code, tmp_path, OPENAI_API_KEY="sk-doc-example")

    # then: the process says once that the defaults apply
    assert ran.stderr.count(NOTICE) == 1


def test_the_readme_first_tool_is_the_module_the_worker_serves() -> None:
    # the README's first tool is the module the tests serve: it runs as written
    assert python_blocks(README, "A first tool") == [python_blocks(TOOLS_PAGE)[0]]


def test_the_readme_first_agent_runs_on_the_live_catalog(
    example_worker: ExampleWorker, model: FakeOpenAi, tmp_path: Path
) -> None:
    # given: the README's agent as written, its model pointed at the local server
    (code,) = python_blocks(README, "A first agent")
    code = _agent_example(code, model.base_url)

    # when
    ran = run_script(code, tmp_path, OPENAI_API_KEY="sk-doc-example")

    # then: the model was shown what the worker serves, and the transfer ran there
    assert {"withdraw", "credit"} <= model.tool_names(0)
    assert re.fullmatch(
        r"Done: Mario has \d+\.0 left; Dmytro now has \d+\.0 \['withdraw', 'credit'\]\n", ran.stdout
    ), ran.stdout
    assert NOTICE not in ran.stderr
