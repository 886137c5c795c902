"""`toolfleet tools` and `toolfleet flower`, run as a user runs them, against a real Redis and worker.

The catalog tests use their own Redis database (`TOOLFLEET_TEST_CLI_REDIS_DB`, default 12) on the
server at `TOOLFLEET_REDIS_URL`, flushed first.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.cli.commands import tools
from tests._cli import CLI, run_command
from tests._environment import emptied_redis, integration_redis_url
from tests._ports import free_port
from workers.runtime.process import WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
HOSTNAME = "io-cli-tools@test"


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
        pools=["io"],
        modules=["workers.examples.weather"],
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


# --- toolfleet tools -------------------------------------------------------------------------------


@pytest.mark.integration
def test_tools_lists_the_live_worker_and_its_tools(redis_url: str, worker: WorkerProcess) -> None:
    # when
    result = _toolfleet("tools", TOOLFLEET_REDIS_URL=redis_url)
    # then
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"Catalog at {redis_url}" in lines[0]
    assert [line.split() for line in lines if HOSTNAME in line] == [[HOSTNAME, "io", "threads", "4"]]
    row = next(line.split() for line in lines if line.strip().startswith("get_weather"))
    assert row[:7] == ["get_weather", "io", "10", "s", "yes", "no", "1"]
    assert len(row[7]) == 12 and int(row[7], 16) >= 0  # its version: the digest of its definition
    assert " ".join(row[8:]) == "Returns the weather forecast for a given city"


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
    assert (entry["pools"], entry["pool_kind"], entry["concurrency"]) == (["io"], "threads", 4)
    assert entry["pid"] == worker.pid
    assert entry["tools"] == ["get_weather"]
    (weather,) = catalog["tools"]
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
