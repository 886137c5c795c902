"""`toolfleet tools` and `toolfleet flower`, run as a user runs them, against a real Redis and worker.

The worker serves pool `io` (the example weather tool) and pool `behave` (tests/integration/
behaviour_tools.py: a tool needing approval with a compensation, one that must beat, ...), so that
the table shows each kind of behaviour. The catalog tests use their own Redis database
(`TOOLFLEET_TEST_CLI_REDIS_DB`, default 12) on the server at `TOOLFLEET_REDIS_URL`, flushed first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from orchestrator.cli.commands import tools
from tests._cli import CLI, run_command
from tests._environment import emptied_redis, integration_redis_url
from tests._ports import free_port
from workers.app import registry_from_modules
from workers.protocol import WORKER_KEY, WORKERS_KEY
from workers.runtime.catalog import CatalogTool, WorkerEntry
from workers.runtime.process import WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
HOSTNAME = "io-cli-tools@test"
BEHAVE = "behave"
LEGACY = "legacy"
JOURNAL_WARNING = "TOOLFLEET_JOURNAL_KEYS is not set"


def _environment(**variables: str) -> dict[str, str]:
    """This process's environment without toolfleet's or Flower's variables, plus `variables`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLFLEET_", "FLOWER_"))}
    return {**base, "PYTHONPATH": str(ROOT), **variables}


def _toolfleet(*args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    return run_command([*CLI, *args], env=_environment(**variables), timeout_s=30)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    url = integration_redis_url(os.environ, db_variable="TOOLFLEET_TEST_CLI_REDIS_DB", default_db="12")
    client = emptied_redis(url, "these tests")
    yield url
    client.close()


@pytest.fixture(scope="module")
def worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    process = WorkerProcess(
        pools=["io", BEHAVE],
        modules=["workers.examples.weather", "tests.integration.behaviour_tools"],
        redis_url=redis_url,
        kind="threads",
        concurrency=4,
        hostname=HOSTNAME,
        # a heartbeat TTL long enough that a loaded machine never lets the live worker lapse mid-test
        env={"PYTHONPATH": str(ROOT), "TOOLFLEET_HEARTBEAT_TTL_S": "10"},
        log_path=tmp_path_factory.mktemp("cli-tools") / "worker.log",
        loglevel="INFO",
    )
    with process.running(timeout_s=60):
        yield process


def _tool_rows(lines: list[str]) -> dict[str, dict[str, str]]:
    """The rows of the tools table by tool name, each cell read between its column's start and the
    next one's; every cell must fit its column (a space before the next column starts)."""
    at = next(i for i, line in enumerate(lines) if line.split()[:2] == ["NAME", "POOL"])
    header = lines[at]
    starts = [match.start() for match in re.finditer(r"\S+", header)]
    names = header.split()
    rows: dict[str, dict[str, str]] = {}
    for line in lines[at + 1 :]:
        if not line.startswith("  ") or not line.strip():
            break
        for start in starts[1:]:
            assert line[start - 1] == " ", f"a cell runs into column {start}: {line!r}"
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], len(line)], strict=True)]
        rows[cells[0]] = dict(zip(names, cells, strict=True))
    return rows


# --- toolfleet tools -------------------------------------------------------------------------------


@pytest.mark.integration
def test_tools_lists_the_live_worker_and_its_tools(redis_url: str, worker: WorkerProcess) -> None:
    # when
    result = _toolfleet("tools", TOOLFLEET_REDIS_URL=redis_url)
    # then
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"Catalog at {redis_url}" in lines[0]
    assert [line.split() for line in lines if HOSTNAME in line] == [[HOSTNAME, "behave,io", "threads", "4"]]
    weather = _tool_rows(lines)["get_weather"]
    assert {column: cell for column, cell in weather.items() if column != "VERSION"} == {
        "NAME": "get_weather",
        "POOL": "io",
        "TIMEOUT": "10 s",
        "APPROVAL": "no",
        "HEARTBEAT": "-",
        "IDEMPOTENT": "yes",
        "COMPENSATION": "-",
        "WORKERS": "1",
        "DESCRIPTION": "Returns the weather forecast for a given city",
    }
    assert len(weather["VERSION"]) == 12 and int(weather["VERSION"], 16) >= 0  # the digest of its definition
    # and reading the catalog journals nothing: no word of the journal's key
    assert JOURNAL_WARNING not in result.stderr


@pytest.mark.integration
def test_tools_json_is_machine_readable(redis_url: str, worker: WorkerProcess) -> None:
    # when
    result = _toolfleet("tools", "--json", TOOLFLEET_REDIS_URL=redis_url)
    # then
    assert result.returncode == 0, result.stderr
    catalog = json.loads(result.stdout)
    assert catalog["redis_url"] == redis_url
    (entry,) = catalog["workers"]
    assert entry["hostname"] == HOSTNAME
    assert (entry["pools"], entry["pool_kind"], entry["concurrency"]) == (["behave", "io"], "threads", 4)
    assert entry["pid"] == worker.pid
    assert entry["tools"] == ["get_weather", "hold_seat", "watch", "wire"]
    weather = next(tool for tool in catalog["tools"] if tool["name"] == "get_weather")
    assert {k: weather[k] for k in ("name", "pool", "timeout", "idempotent", "compensable", "workers")} == {
        "name": "get_weather",
        "pool": "io",
        "timeout": 10,
        "idempotent": True,
        "compensable": False,
        "workers": [HOSTNAME],
    }
    assert weather["description"] == "Returns the weather forecast for a given city"
    assert weather["parameters"]["required"] == ["city"]


@pytest.mark.integration
def test_tools_of_one_pool(redis_url: str, worker: WorkerProcess) -> None:
    # when
    served = _toolfleet("tools", "--pool", "io", "--json", TOOLFLEET_REDIS_URL=redis_url)
    unserved = _toolfleet("tools", "--pool", "payments", TOOLFLEET_REDIS_URL=redis_url)
    unserved_json = _toolfleet("tools", "--pool", "payments", "--json", TOOLFLEET_REDIS_URL=redis_url)
    # then
    assert served.returncode == 0, served.stderr
    assert [t["name"] for t in json.loads(served.stdout)["tools"]] == ["get_weather"]
    assert unserved.returncode == 0, unserved.stderr
    assert "No live workers for pool(s) payments" in unserved.stdout
    assert "toolfleet worker --pool payments --tools MODULE" in unserved.stdout
    assert json.loads(unserved_json.stdout) == {
        "redis_url": redis_url,
        "pools": ["payments"],
        "workers": [],
        "tools": [],
        "mixed_pools": [],
    }


@pytest.mark.integration
def test_tools_shows_how_each_tool_behaves(redis_url: str, worker: WorkerProcess) -> None:
    # when
    result = _toolfleet("tools", "--pool", BEHAVE, TOOLFLEET_REDIS_URL=redis_url)
    # then: approval, heartbeat, idempotence and compensation, each in its column
    assert result.returncode == 0, result.stderr
    rows = _tool_rows(result.stdout.splitlines())
    assert _behaviour_cells(result.stdout) == {
        "hold_seat": ("no", "-", "no", "release_seat"),
        "watch": ("no", "5 s", "yes", "-"),
        "wire": ("yes", "-", "no", "Payments.wire_back"),
    }
    assert {row["VERSION"] for row in rows.values()} != {"-"}
    assert "?" not in result.stdout, "a worker of this release advertises every fact"


@pytest.mark.integration
def test_tools_json_says_how_each_tool_behaves(redis_url: str, worker: WorkerProcess) -> None:
    # when
    result = _toolfleet("tools", "--pool", BEHAVE, "--json", TOOLFLEET_REDIS_URL=redis_url)
    # then
    assert result.returncode == 0, result.stderr
    facts = ("requires_approval", "heartbeat_timeout_s", "idempotent", "compensable", "compensation")
    tools_by_name = {tool["name"]: tool for tool in json.loads(result.stdout)["tools"]}
    assert {name: {k: tool[k] for k in (*facts, "unknown")} for name, tool in tools_by_name.items()} == {
        "hold_seat": dict(zip(facts, (False, None, False, True, "release_seat"), strict=True), unknown=[]),
        "watch": dict(zip(facts, (False, 5, True, False, None), strict=True), unknown=[]),
        "wire": dict(zip(facts, (True, None, False, True, "Payments.wire_back"), strict=True), unknown=[]),
    }
    assert all(tool["version"] for tool in tools_by_name.values())


def _earlier_entry(hostname: str, drop: tuple[str, ...]) -> dict[str, Any]:
    """An entry for pool `legacy` as a worker of an earlier toolfleet wrote it: today's, less `drop`."""
    tools = []
    for definition in registry_from_modules(["tests.integration.behaviour_tools"]):
        legacy = dataclasses.replace(definition, options=dataclasses.replace(definition.options, pool=LEGACY))
        published = CatalogTool.of(legacy).to_json()
        tools.append({key: value for key, value in published.items() if key not in drop})
    return {**WorkerEntry(hostname, [LEGACY], "threads", 2, 1, time.time()).to_json(), "tools": tools}


@contextlib.contextmanager
def _published(redis_url: str, hostname: str, entry: dict[str, Any]) -> Iterator[None]:
    """`entry` live in the catalog, as its worker's heartbeat keeps it, while the block runs."""
    client = redis.Redis.from_url(redis_url)
    client.set(WORKER_KEY.format(hostname), json.dumps(entry), ex=60)
    client.zadd(WORKERS_KEY, {hostname: time.time() + 60})
    try:
        yield
    finally:
        client.delete(WORKER_KEY.format(hostname))
        client.zrem(WORKERS_KEY, hostname)
        client.close()


def _behaviour_cells(stdout: str) -> dict[str, tuple[str, ...]]:
    rows = _tool_rows(stdout.splitlines())
    return {
        name: tuple(row[c] for c in ("APPROVAL", "HEARTBEAT", "IDEMPOTENT", "COMPENSATION"))
        for name, row in rows.items()
    }


@pytest.mark.integration
def test_a_worker_of_the_previous_release_shows_its_compensations_unnamed(redis_url: str) -> None:
    # given: a worker whose entry names no compensation (the release before this one)
    hostname = "legacy-previous@test"
    with _published(redis_url, hostname, _earlier_entry(hostname, ("compensation",))):
        # when
        table = _toolfleet("tools", "--pool", LEGACY, TOOLFLEET_REDIS_URL=redis_url)
        as_json = _toolfleet("tools", "--pool", LEGACY, "--json", TOOLFLEET_REDIS_URL=redis_url)
    # then: read, and nothing guessed: a compensation it has, whose name it did not say
    assert table.returncode == 0, table.stderr
    assert as_json.returncode == 0, as_json.stderr
    assert _behaviour_cells(table.stdout) == {
        "hold_seat": ("no", "-", "no", "yes"),
        "watch": ("no", "5 s", "yes", "-"),
        "wire": ("yes", "-", "no", "yes"),
    }
    tools_by_name = {tool["name"]: tool for tool in json.loads(as_json.stdout)["tools"]}
    assert (tools_by_name["wire"]["compensable"], tools_by_name["wire"]["compensation"]) == (True, None)
    assert tools_by_name["wire"]["unknown"] == ["compensation"]
    assert tools_by_name["watch"]["unknown"] == []


@pytest.mark.integration
def test_a_worker_from_before_approvals_and_heartbeats_shows_them_unknown(redis_url: str) -> None:
    # given: a worker whose entry says nothing of approvals, heartbeats or compensations' names
    hostname = "legacy-oldest@test"
    entry = _earlier_entry(hostname, ("compensation", "requires_approval", "heartbeat_timeout_s"))
    with _published(redis_url, hostname, entry):
        # when
        table = _toolfleet("tools", "--pool", LEGACY, TOOLFLEET_REDIS_URL=redis_url)
        as_json = _toolfleet("tools", "--pool", LEGACY, "--json", TOOLFLEET_REDIS_URL=redis_url)
    # then
    assert table.returncode == 0, table.stderr
    assert _behaviour_cells(table.stdout) == {
        "hold_seat": ("?", "?", "no", "yes"),
        "watch": ("?", "?", "yes", "-"),
        "wire": ("?", "?", "no", "yes"),
    }
    assert "?: not in the catalog entry of the worker (an earlier toolfleet's)." in table.stdout
    wire = next(tool for tool in json.loads(as_json.stdout)["tools"] if tool["name"] == "wire")
    assert (wire["requires_approval"], wire["heartbeat_timeout_s"], wire["compensation"]) == (
        None,
        None,
        None,
    )
    assert wire["unknown"] == ["compensation", "heartbeat_timeout_s", "requires_approval"]


def test_the_table_stays_aligned_whatever_the_widths() -> None:
    # given: cells wider and narrower than their headers, wide (CJK) and combining characters
    rows = [
        ("a", "预订座位", "-", "x"),
        ("a-much-longer-name", "e\u0301", "Payments.wire_back", "y"),
        ("ü", "io", "-", "z"),
    ]
    out = io.StringIO()
    # when
    tools._table(out, ("NAME", "POOL", "COMPENSATION", "DESCRIPTION"), rows)
    # then: every column starts at the same terminal column on every line
    lines = out.getvalue().splitlines()
    starts = []
    for line, row in zip(lines, [("NAME", "POOL", "COMPENSATION", "DESCRIPTION"), *rows], strict=True):
        offsets, at = [], 0
        for cell in row:
            at = line.index(cell, at)
            offsets.append(tools.display_width(line[:at]))
            at += len(cell)
        starts.append(offsets[1:])
    assert len(set(map(tuple, starts))) == 1, lines
    assert tools.display_width("预订") == 4 and tools.display_width("e\u0301") == 1


@pytest.mark.integration
def test_the_worker_never_warns_about_the_journals_key(redis_url: str, worker: WorkerProcess) -> None:
    # given: a worker without TOOLFLEET_JOURNAL_KEYS that has served the catalog all along
    assert worker.log_path is not None
    assert _toolfleet("tools", TOOLFLEET_REDIS_URL=redis_url).returncode == 0
    # then: a worker writes no journal, so it says nothing of the journal's key
    log = worker.log_path.read_text()
    assert f"worker {HOSTNAME} serves pools behave,io" in log
    assert JOURNAL_WARNING not in log


def test_no_live_workers_is_an_answer_with_a_hint() -> None:
    # given
    out = io.StringIO()
    # when
    tools._print_text(out, "redis://:***@redis:6379/0", None, [], [])
    # then
    text = out.getvalue()
    assert text.startswith("No live workers in the catalog at redis://:***@redis:6379/0.\n")
    assert "toolfleet worker --pool POOL --tools MODULE" in text
    assert "toolfleet worker --pool io --tools workers.examples.weather" in text


def test_unreachable_redis_is_a_clear_error_without_the_password() -> None:
    # given
    port = free_port()
    # when
    result = _toolfleet("tools", TOOLFLEET_REDIS_URL=f"redis://:s3cret-pw@127.0.0.1:{port}/0")
    # then
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(
        f"toolfleet tools: cannot read the catalog from Redis at redis://:***@127.0.0.1:{port}/0 "
        "(TOOLFLEET_REDIS_URL): "
    )
    assert "s3cret-pw" not in result.stderr


# --- toolfleet flower ------------------------------------------------------------------------------


def test_flower_help_shows_its_options_and_authentication() -> None:
    # when
    result = _toolfleet("flower", "--help")
    # then
    assert result.returncode == 0
    for option in ("--port", "--address", "--basic-auth", "--unauthenticated-api", "FLOWER_BASIC_AUTH"):
        assert option in result.stdout


def test_flower_refuses_to_listen_beyond_loopback_without_authentication() -> None:
    # when
    result = _toolfleet("flower", "--address", "0.0.0.0", "--port", str(free_port()))
    # then
    assert result.returncode == 2
    assert "refusing to serve Flower on 0.0.0.0 without authentication" in result.stderr
    assert "FLOWER_BASIC_AUTH" in result.stderr


def test_flower_rejects_malformed_credentials_without_echoing_them() -> None:
    # when
    result = _toolfleet("flower", "--port", str(free_port()), FLOWER_BASIC_AUTH="only-a-s3cret")
    # then
    assert result.returncode == 2
    assert "FLOWER_BASIC_AUTH must be USER:PASSWORD" in result.stderr
    assert "s3cret" not in result.stderr


@pytest.mark.integration
def test_flower_serves_the_workers_behind_basic_auth(redis_url: str, worker: WorkerProcess) -> None:
    # given
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "flower", "--port", str(port)],
        env=_environment(TOOLFLEET_REDIS_URL=redis_url, FLOWER_BASIC_AUTH="admin:fl0wer-s3cret"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.communicate()
            try:
                if httpx.get(f"{base}/healthcheck", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "Flower did not start within 30 s"
            time.sleep(0.1)
        # when
        anonymous = httpx.get(f"{base}/api/workers", timeout=10)
        workers = httpx.get(f"{base}/api/workers?refresh=1", auth=("admin", "fl0wer-s3cret"), timeout=20)
        queues = httpx.get(f"{base}/api/queues/length", auth=("admin", "fl0wer-s3cret"), timeout=10)
        # then
        assert anonymous.status_code == 401
        assert workers.status_code == 200
        assert HOSTNAME in workers.json()
        assert queues.status_code == 200, queues.text  # Flower reads the broker's queues through its URL
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        out, err = process.communicate(timeout=20)
    assert "fl0wer-s3cret" not in out + err
    assert f"toolfleet flower: http://127.0.0.1:{port} (basic auth for admin)" in err
