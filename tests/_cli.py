"""Running commands as a user does, the installed `toolfleet` first, and journals for it to read."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

TOOLFLEET = str(Path(sys.executable).parent / "toolfleet")
CLI = (sys.executable, "-m", "orchestrator.cli")
"""The command line, run by this interpreter from the source tree."""


def toolfleet(
    *args: str, cwd: Path, env: Mapping[str, str | None] | None = None, timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """`toolfleet ARGS` in `cwd`; `env` entries set (or, when None, remove) variables."""
    return run_command([TOOLFLEET, *args], cwd=cwd, env=environment(env), timeout_s=timeout_s)


def run_command(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
    timeout_s: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """`command` run to its end, its output captured as text; `env` is the whole environment (this
    process's when None). Its exit status is the caller's to check."""
    return subprocess.run(
        command, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def on_journal(url: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`toolfleet ARGS` in `cwd`, reading the journal at `url`."""
    return toolfleet(*args, cwd=cwd, env={"TOOLFLEET_DATABASE_URL": url})


def journal_lines(url: str, *args: str, cwd: Path) -> list[str]:
    """The lines `toolfleet ARGS` prints reading the journal at `url`; the command must succeed."""
    result = on_journal(url, *args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def environment(changes: Mapping[str, str | None] | None = None) -> dict[str, str]:
    result = dict(os.environ)
    for name, value in (changes or {}).items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = value
    return result
