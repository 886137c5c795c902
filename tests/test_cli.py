"""The `toolfleet` command as a user runs it."""

from __future__ import annotations

import subprocess
import sys

from orchestrator.cli import main


def test_help_lists_the_commands(capsys: object) -> None:
    # when
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "--help"], capture_output=True, text=True, check=False
    )
    # then
    assert result.returncode == 0
    for command in ("demo", "worker"):
        assert command in result.stdout


def test_demo_shows_specifications_and_in_process_calls(capsys: object) -> None:
    # when
    code = main(["demo"])
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    # then
    assert code == 0
    assert '{"name": "squareRoot", "description": "Returns a square root of a given number."' in out
    assert 'squareRoot({"x": 475695037565}) -> [success] 689706.4865324959' in out
    assert (
        'add({"a": 1.5, "b": 2}) -> [arguments_error] Argument "a" has non-integer value for int: <1.5>'
        in out
    )


def test_worker_with_a_pool_no_tool_belongs_to_fails_clearly() -> None:
    # when
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "worker",
            "--pool",
            "nowhere",
            "--tools",
            "workers.examples.math",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    # then
    assert result.returncode == 2
    assert (
        "No tool of workers.examples.math belongs to pool(s) nowhere; their pools are: default"
        in result.stderr
    )
