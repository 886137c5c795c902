"""The integration tests ignore the caller's `TOOLFLEET_*` variables: hostile but valid values in the
environment change nothing. A short subset runs in a child pytest on a private Redis server, with a
broker and result backend at another database of that server, a fan-out of one, a half-second default
deadline, a slow heartbeat and a journal at a path that cannot exist."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.private_redis import PrivateRedis

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SUBSET = ["tests/integration/test_smoke.py", "tests/integration/test_fanout.py"]


def hostile(server_url: str) -> dict[str, str]:
    """Valid settings that would break the tests if their processes read them."""
    other = server_url.rsplit("/", 1)[0] + "/9"
    return {
        "TOOLFLEET_BROKER_URL": other,
        "TOOLFLEET_RESULT_BACKEND": other,
        "TOOLFLEET_MAX_FANOUT": "1",
        "TOOLFLEET_DEFAULT_TOOL_TIMEOUT_S": "0.5",
        "TOOLFLEET_HEARTBEAT_TTL_S": "30",
        "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "5",
        "TOOLFLEET_DATABASE_URL": "sqlite:////nonexistent-toolfleet-dir/journal.db",
        "TOOLFLEET_TOOLS": "no.such.module",
        "TOOLFLEET_ARTIFACT_URL": "s3://no-such-toolfleet-bucket/artifacts",
        "FLOWER_UNAUTHENTICATED_API": "true",
    }


@pytest.mark.timeout(200)
def test_the_integration_tests_pass_with_hostile_toolfleet_variables_in_the_environment(
    tmp_path: Path,
) -> None:
    # given: a Redis server of this test's own (the child session flushes its test database)
    server = PrivateRedis(tmp_path)
    server.start()
    variables = hostile(server.url)
    env = {
        **os.environ,
        **variables,
        "PYTHONPATH": str(REPO),
        "TOOLFLEET_REDIS_URL": server.url,
        "TOOLFLEET_TEST_REDIS_DB": "1",
    }
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'inner'}"]
    command += ["-o", "timeout=40", *SUBSET]
    # when
    try:
        expected = _collected(command, env)
        returncode, output = _run_pytest(command, env, timeout_s=120)
    finally:
        server.stop()
    # then: every test of the subset ran and passed, none skipped, and the child session says what it
    # ignored
    assert returncode == 0, output[-6000:]
    assert expected > 0
    assert _summary(output) == f"{expected} passed", output[-6000:]
    assert f"caller's variables ignored: {', '.join(sorted(variables))}" in output


def _collected(command: list[str], env: dict[str, str]) -> int:
    """How many tests `command` would run: its own collection, counted by a child pytest."""
    listing = subprocess.run(
        [*command, "--collect-only", "-q"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert listing.returncode == 0, listing.stdout[-3000:] + listing.stderr[-3000:]
    return sum(1 for line in listing.stdout.splitlines() if "::" in line)


def _summary(output: str) -> str:
    """The counts of pytest's closing line (`== 9 passed, 1 skipped in 3.2s ==` -> `9 passed, 1 skipped`)."""
    lines = [line for line in output.splitlines() if re.fullmatch(r"=+ .* in [\d.]+s( \([\d:]+\))? =+", line)]
    assert lines, f"no summary line in the child's output:\n{output[-3000:]}"
    return re.sub(r"^=+ | in [\d.]+s( \([\d:]+\))? =+$", "", lines[-1])


def _run_pytest(command: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str]:
    """Run a child pytest; past `timeout_s`, interrupt it (its fixtures then stop the workers it
    started, each in a process group of its own), and kill it if it does not end."""
    child = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        output, _ = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGINT)
        try:
            output, _ = child.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            output, _ = child.communicate()
        output = f"(interrupted after {timeout_s} s)\n{output}"
    return child.returncode, output
