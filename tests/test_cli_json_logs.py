"""With `TOOLFLEET_LOG_FORMAT=json` the `toolfleet` command's own error lines are records too: a setting
it refuses (any but the log format itself) and a database that fails are each one JSON object on
standard error; in text mode they are the lines they always were."""

from __future__ import annotations

import json
from pathlib import Path

from tests._cli import toolfleet

REFUSED_DATABASE = "postgresql+psycopg://127.0.0.1:1/toolfleet"  # nothing listens on port 1


def _records(stderr: str) -> list[dict[str, object]]:
    records = [json.loads(line) for line in stderr.splitlines()]
    assert all(isinstance(record, dict) for record in records), stderr
    return records


def test_a_refused_setting_is_one_record_in_json_mode(tmp_path: Path) -> None:
    env = {"TOOLFLEET_LOG_FORMAT": "json", "TOOLFLEET_MAX_FANOUT": "0"}
    result = toolfleet("runs", cwd=tmp_path, env=env)
    assert result.returncode == 2
    (record,) = _records(result.stderr)
    assert (record["level"], record["logger"]) == ("ERROR", "orchestrator.cli.main")
    assert record["message"] == "toolfleet: TOOLFLEET_MAX_FANOUT must be an integer >= 1, got 0"


def test_a_refused_setting_is_its_line_in_text_mode(tmp_path: Path) -> None:
    result = toolfleet("runs", cwd=tmp_path, env={"TOOLFLEET_MAX_FANOUT": "0"})
    assert result.returncode == 2
    assert result.stderr == "toolfleet: TOOLFLEET_MAX_FANOUT must be an integer >= 1, got 0\n"


def test_a_failing_database_is_one_record_in_json_mode(tmp_path: Path) -> None:
    env = {"TOOLFLEET_LOG_FORMAT": "json", "TOOLFLEET_DATABASE_URL": REFUSED_DATABASE}
    result = toolfleet("db", "upgrade", cwd=tmp_path, env=env)
    assert result.returncode == 2
    (record,) = _records(result.stderr)
    assert record["level"] == "ERROR"
    assert str(record["message"]).startswith(f"toolfleet db: the database at {REFUSED_DATABASE} failed: ")


def test_a_command_that_refuses_to_start_says_why_in_one_record_in_json_mode(tmp_path: Path) -> None:
    env = {"TOOLFLEET_LOG_FORMAT": "json"}
    result = toolfleet("serve", "--agent", "not-a-spec", cwd=tmp_path, env=env)
    assert result.returncode == 2
    (record,) = _records(result.stderr)
    assert (record["level"], record["logger"]) == ("ERROR", "orchestrator.cli.commands._command")
    said = str(record["message"])
    assert said.startswith("toolfleet serve: agent 'not-a-spec' is not NAME=MODULE:ATTRIBUTE"), said
