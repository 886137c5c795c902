"""Settings out of their allowed range are refused where they are read, naming the variable and range.

`Settings` checks itself, so the environment (`Settings.from_env`), code (`Settings(...)`,
`dataclasses.replace`) and every command that starts from the environment refuse the same values.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path

import pytest

from tests._cli import CLI, run_command
from workers.errors import SettingsError, ToolfleetError
from workers.settings import ENVIRONMENT, Settings

REPO = Path(__file__).resolve().parents[1]
CELERY = str(Path(sys.executable).parent / "celery")

# (field, value as the environment writes it, the range the refusal states)
OUT_OF_RANGE = [
    ("heartbeat_ttl_s", "-1", "a number >= 0.1"),
    ("heartbeat_ttl_s", "0", "a number >= 0.1"),
    ("invocation_heartbeat_s", "0", "a number >= 0.01"),
    ("max_fanout", "0", "an integer >= 1"),
    ("max_fanout", "-3", "an integer >= 1"),
    ("default_tool_timeout_s", "0", "a number > 0"),
    ("default_tool_timeout_s", "-5", "a number > 0"),
    ("default_tool_timeout_s", "nan", "a number > 0"),
    ("default_tool_timeout_s", "inf", "a number > 0"),
    ("visibility_timeout_s", "0", "a number > 0"),
    ("result_expires_s", "0", "an integer >= 1"),
    ("liveness_check_interval_s", "0", "a number > 0"),
    ("max_argument_bytes", "0", "an integer >= 1"),
    ("max_result_bytes", "-1", "an integer >= 1"),
    ("compensation_retries", "-1", "an integer >= 0"),
    ("retry_backoff_s", "-0.1", "a number >= 0"),
    ("retry_backoff_max_s", "-1", "a number >= 0"),
]


def _typed(field: str, raw: str) -> object:
    kind = str(next(f.type for f in dataclasses.fields(Settings) if f.name == field))
    return int(raw) if "int" in kind else float(raw)


@pytest.mark.parametrize(
    ("field", "raw", "allowed"), OUT_OF_RANGE, ids=[f"{f}={r}" for f, r, _ in OUT_OF_RANGE]
)
def test_a_setting_out_of_range_is_refused_from_the_environment_and_from_code(
    field: str, raw: str, allowed: str
) -> None:
    variable = ENVIRONMENT[field]
    expected = f"{variable} must be {allowed}, got "
    # from the environment
    with pytest.raises(SettingsError, match=f"^{re.escape(expected)}") as from_env:
        Settings.from_env({variable: raw})
    # built in code, directly or by replacing a field of valid settings
    with pytest.raises(SettingsError, match=f"^{re.escape(expected)}"):
        Settings(**{field: _typed(field, raw)})  # type: ignore[arg-type]
    with pytest.raises(SettingsError, match=f"^{re.escape(expected)}"):
        dataclasses.replace(Settings(), **{field: _typed(field, raw)})
    # one toolfleet error, and a ValueError as before
    assert isinstance(from_env.value, ToolfleetError) and isinstance(from_env.value, ValueError)


@pytest.mark.parametrize(("interval", "ttl"), [("6", "6"), ("7", "6"), ("2", "1")])
def test_a_liveness_interval_not_below_the_heartbeat_ttl_is_refused(interval: str, ttl: str) -> None:
    environ = {"TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": interval, "TOOLFLEET_HEARTBEAT_TTL_S": ttl}
    refused = f"TOOLFLEET_LIVENESS_CHECK_INTERVAL_S must be less than TOOLFLEET_HEARTBEAT_TTL_S \\({ttl} s\\)"
    with pytest.raises(SettingsError, match=refused):
        Settings.from_env(environ)
    with pytest.raises(SettingsError, match=refused):
        Settings(liveness_check_interval_s=float(interval), heartbeat_ttl_s=float(ttl))


def test_values_at_the_edges_of_their_ranges_are_accepted() -> None:
    settings = Settings.from_env(
        {
            "TOOLFLEET_HEARTBEAT_TTL_S": "0.1",
            "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "0.05",
            "TOOLFLEET_MAX_FANOUT": "1",
            "TOOLFLEET_COMPENSATION_RETRIES": "0",
            "TOOLFLEET_RETRY_BACKOFF_S": "0",
            "TOOLFLEET_RESULT_EXPIRES_S": "1",
            "TOOLFLEET_MAX_ARGUMENT_BYTES": "1",
        }
    )
    assert (settings.heartbeat_ttl_s, settings.max_fanout, settings.compensation_retries) == (0.1, 1, 0)
    assert Settings(visibility_timeout_s=None).visibility_timeout_s is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://user:hunter2@cache:6379/0", "it must start with redis://, rediss://, unix://"),
        ("redis://:hunter2@cache:port/0", "Port could not be cast to integer value"),
    ],
)
def test_a_redis_url_that_is_not_one_is_refused_with_its_password_masked(url: str, reason: str) -> None:
    with pytest.raises(SettingsError, match=r"^TOOLFLEET_REDIS_URL=") as refused:
        Settings.from_env({"TOOLFLEET_REDIS_URL": url})
    assert reason in str(refused.value)
    assert "hunter2" not in str(refused.value) and ":***@cache" in str(refused.value)


def test_a_command_started_with_a_setting_out_of_range_exits_naming_it() -> None:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "TOOLFLEET_MAX_FANOUT": "0"}
    done = run_command([*CLI, "tools"], env=environment)
    assert done.returncode == 2, done
    assert done.stderr.strip() == "toolfleet: TOOLFLEET_MAX_FANOUT must be an integer >= 1, got 0"


# The ways a worker or a replica starts; none gets as far as its broker with a log format it cannot write.
STARTS = {
    "toolfleet worker": [*CLI, "worker", "--pool", "logs", "--tools", "tests.integration.log_tools"],
    "toolfleet serve": [*CLI, "serve", "--agent", "assistant=tests.integration.serve_agents:assistant"],
    "celery -A workers.app worker": [CELERY, "-A", "workers.app", "worker", "--pool", "solo", "-Q", "logs"],
}


@pytest.mark.parametrize("start", list(STARTS))
def test_a_log_format_it_cannot_write_stops_a_process_at_its_start_in_one_line(start: str) -> None:
    # given: a log format that is neither text nor json (and a broker that never answers, should it start)
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TOOLFLEET_LOG_FORMAT": "bogus",
        "TOOLFLEET_TOOLS": "tests.integration.log_tools",
        "TOOLFLEET_REDIS_URL": "redis://127.0.0.1:1/0",
    }
    # when: the process starts
    done = run_command(STARTS[start], env=environment, cwd=REPO, timeout_s=30)
    # then: it exits at once with one line naming the variable, the value and the allowed ones
    assert done.returncode != 0, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].endswith("TOOLFLEET_LOG_FORMAT must be one of text, json, got 'bogus'"), lines[0]
    if start.startswith("toolfleet"):
        assert (done.returncode, lines[0]) == (2, f"toolfleet: {lines[0].partition(': ')[2]}")
