"""A Hypothesis test that reaches its per-test timeout fails there, instead of shrinking on for minutes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tests._cli import run_command

REPO = Path(__file__).resolve().parents[1]

# Each example waits like a call whose worker never answers, then fails: shrinking and replaying
# such examples would take 30 s each.
HANGING = """
import time

from hypothesis import given, settings, strategies as st


@settings(database=None, deadline=None)
@given(st.integers())
def test_waits_for_an_answer_that_never_comes(n):
    with open("examples.log", "a") as examples:
        print(n, file=examples)
    time.sleep(30)
    raise AssertionError("no answer")
"""


def test_a_property_test_ends_at_its_per_test_timeout(tmp_path: Path) -> None:
    # given: the suite's rules (tests/conftest.py) and a one-second per-test timeout
    (tmp_path / "test_hangs.py").write_text(HANGING)
    command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider"]
    command += ["-o", "timeout=1", "-q", "test_hangs.py"]
    # when
    started = time.monotonic()
    done = run_command(command, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout_s=25)
    elapsed = time.monotonic() - started
    # then: it failed on the timeout, without trying another example (each would wait 30 s: the child
    # ran well within 25 s, its own start included, however busy the machine)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "PropertyTestTimeout" in done.stdout and "Timeout (>1.0s)" in done.stdout, done.stdout[-3000:]
    assert "1 failed" in done.stdout
    assert len((tmp_path / "examples.log").read_text().splitlines()) == 1
    assert elapsed < 25, f"took {elapsed:.1f} s"
