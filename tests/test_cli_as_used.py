"""The installed `toolfleet` command as people use it: `--version`, one-line errors for tool modules
that cannot be loaded, output cut short by `head`, which journal a reading command reads, and
invocations named by the beginning of their id."""

from __future__ import annotations

import importlib.metadata
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from orchestrator.saga.journal import Journal, invocations
from tests._cli import TOOLFLEET, environment, on_journal, run_command, toolfleet
from workers import InvocationContext

TOOL_MODULE = """
from workers import tool


@tool("Says where it runs", pool="cwd")
def where() -> str:
    return __file__
"""


def _journal_url(path: Path) -> str:
    return f"sqlite:///{path}"


def _invocations(url: str, ids: list[str]) -> None:
    """Invocations with these ids in the journal at `url`, as the loop starts them."""
    journal = Journal(url)
    try:
        for invocation_id in ids:
            context = InvocationContext(
                invocation_id=uuid.UUID(invocation_id), user_message=f"ask {invocation_id}"
            )
            journal.start_invocation(context, {"context": context.to_json(), "parameters": {}})
    finally:
        journal.engine.dispose()


def test_version_is_the_distributions(tmp_path: Path) -> None:
    # when
    result = toolfleet("--version", cwd=tmp_path)
    # then
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"toolfleet {importlib.metadata.version('toolfleet')}\n"


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        ("cwdtools:Missing", "--tools cwdtools:Missing: module cwdtools has no attribute 'Missing'"),
        ("no_such_tools_module", "--tools no_such_tools_module: no module named 'no_such_tools_module'"),
        ("cwdtools,nopkg.sub", "--tools nopkg.sub: no module named 'nopkg'"),
    ],
)
@pytest.mark.parametrize("command", ["worker", "recover"])
def test_tool_modules_that_cannot_be_loaded_are_a_one_line_error_with_status_2(
    tmp_path: Path, command: str, tools: str, expected: str
) -> None:
    # given: a tool module in the current directory
    (tmp_path / "cwdtools.py").write_text(TOOL_MODULE)
    args = [command, "--tools", tools] + (["--pool", "cwd"] if command == "worker" else [])
    # when
    result = toolfleet(*args, cwd=tmp_path, env={"TOOLFLEET_DATABASE_URL": _journal_url(tmp_path / "j.db")})
    # then: one line naming what was asked for, no traceback
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"toolfleet {command}: {expected}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_a_broken_module_is_a_one_line_error_naming_its_failure(tmp_path: Path) -> None:
    # given: a module in the current directory whose own import fails
    (tmp_path / "brokentools.py").write_text("import a_dependency_that_is_not_installed\n")
    # when
    result = toolfleet("worker", "--pool", "cwd", "--tools", "brokentools", cwd=tmp_path)
    # then
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "toolfleet worker: --tools brokentools: importing brokentools failed: "
        "No module named 'a_dependency_that_is_not_installed'"
    )


def test_output_cut_short_by_its_reader_ends_quietly(tmp_path: Path) -> None:
    # given: more invocations than a pipe holds (each listed on a line of ~130 bytes)
    url = _journal_url(tmp_path / "many.db")
    Journal(url).engine.dispose()
    now = datetime.now(UTC)
    with sa.create_engine(url).begin() as connection:
        connection.execute(
            sa.insert(invocations),
            [
                {
                    "id": str(uuid.uuid4()),
                    "memory_id": "default",
                    "user_message": "a question long enough to fill the line " * 2,
                    "state": "succeeded",
                    "owner": "host:1",
                    "started_at": now,
                    "heartbeat_at": now,
                }
                for _ in range(3000)
            ],
        )
    # when: `toolfleet runs | head -n 1`, in a shell
    shell = f'"{TOOLFLEET}" runs --limit 3000 | head -n 1; exit "${{PIPESTATUS[0]}}"'
    result = run_command(
        ["bash", "-c", shell], cwd=tmp_path, env=environment({"TOOLFLEET_DATABASE_URL": url})
    )
    # then: the first line, then a quiet end with the status of a process ended by SIGPIPE
    assert result.stdout.startswith("invocation"), result.stdout
    assert len(result.stdout.splitlines()) == 1
    assert "Error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 141


@pytest.mark.parametrize("command", [["runs"], ["sagas"], ["show", "0"]])
def test_reading_commands_say_when_they_read_the_default_journal_here(
    tmp_path: Path, command: list[str]
) -> None:
    # when: no TOOLFLEET_DATABASE_URL
    result = toolfleet(*command, cwd=tmp_path, env={"TOOLFLEET_DATABASE_URL": None})
    # then
    line = result.stderr.splitlines()[0]
    assert line == (
        f"toolfleet {command[0]}: reading the default journal ./toolfleet.db in {tmp_path} "
        "(set TOOLFLEET_DATABASE_URL to read another; it does not exist yet, so nothing was journaled here)"
    )


@pytest.mark.parametrize("command", [["runs"], ["sagas"], ["show", "0"]])
def test_reading_commands_name_the_journal_they_read_without_its_password(
    tmp_path: Path, command: list[str]
) -> None:
    # given: a journal elsewhere, and one behind a password
    elsewhere = _journal_url(tmp_path / "elsewhere.db")
    guarded = "postgresql+psycopg://reader:s3cret@127.0.0.1:1/journal?connect_timeout=2"
    # when
    plain = toolfleet(*command, cwd=tmp_path, env={"TOOLFLEET_DATABASE_URL": elsewhere})
    secret = toolfleet(*command, cwd=tmp_path, env={"TOOLFLEET_DATABASE_URL": guarded})
    # then
    assert plain.stderr.splitlines()[0] == (
        f"toolfleet {command[0]}: reading the journal at {elsewhere} (TOOLFLEET_DATABASE_URL)"
    )
    assert secret.stderr.splitlines()[0] == (
        f"toolfleet {command[0]}: reading the journal at "
        "postgresql+psycopg://reader:***@127.0.0.1:1/journal?connect_timeout=2 (TOOLFLEET_DATABASE_URL)"
    )
    assert "s3cret" not in secret.stderr + secret.stdout
    assert secret.returncode == 2


def test_show_takes_a_unique_beginning_of_the_id(tmp_path: Path) -> None:
    # given
    url = _journal_url(tmp_path / "j.db")
    ids = ["1a2b3c4d-0000-4000-8000-000000000001", "1a2b9999-0000-4000-8000-000000000002"]
    _invocations(url, ids)
    # when
    result = on_journal(url, "show", "1a2b3", cwd=tmp_path)
    # then
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"invocation {ids[0]}  [running]")
    assert f"user: ask {ids[0]}" in result.stdout


def test_show_lists_the_candidates_of_an_ambiguous_beginning(tmp_path: Path) -> None:
    # given
    url = _journal_url(tmp_path / "j.db")
    ids = ["1a2b3c4d-0000-4000-8000-000000000001", "1a2b9999-0000-4000-8000-000000000002"]
    _invocations(url, [*ids, "ffff0000-0000-4000-8000-000000000003"])
    # when
    result = on_journal(url, "show", "1a2b", cwd=tmp_path)
    # then
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines()[1:] == [
        "toolfleet show: 1a2b is the beginning of several invocations; give more of the id:",
        f"  {ids[0]}",
        f"  {ids[1]}",
    ]


@pytest.mark.parametrize("given", ["2b", "1a2b3c4d-0000-4000-8000-0000000000019", "1a2b%"])
def test_show_of_an_id_nothing_starts_with_is_an_error(tmp_path: Path, given: str) -> None:
    # given
    url = _journal_url(tmp_path / "j.db")
    _invocations(url, ["1a2b3c4d-0000-4000-8000-000000000001"])
    # when
    result = on_journal(url, "show", given, cwd=tmp_path)
    # then
    assert result.returncode == 2
    assert result.stdout == ""
    assert (
        result.stderr.splitlines()[1]
        == f"toolfleet show: no invocation {given} (nor one starting so) in {url}"
    )
