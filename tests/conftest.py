"""Session-wide rules of the test suite.

- Hermetic: the caller's `TOOLFLEET_*` and `FLOWER_*` variables are removed before anything is
  collected (tests/_environment.py), so no test and no process a test starts reads them.
- Parallel: `make test` runs the suite in several processes (pytest-xdist); each has a redis-server and
  a PostgreSQL database of its own (tests/_parallel.py), so no two tests share state.
- Bounded: a Hypothesis test that reaches its per-test timeout ends there. pytest-timeout raises
  `Failed`, which Hypothesis would take for a failing example, shrink and replay, running on for
  minutes; here that timeout is raised as an exception Hypothesis lets through.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from types import FrameType

import pytest

from orchestrator.saga.journal import Journal
from tests._environment import make_hermetic
from tests._parallel import own_servers, worker_id
from workers.settings import redact_url

pytest_plugins = ["tests.artifact_stores"]  # the artifact stores: a directory, S3 on moto
_removed: list[str] = []


class PropertyTestTimeout(BaseException):
    """A Hypothesis test ran past its per-test timeout (not an example failure: nothing to shrink)."""


@pytest.fixture
def journal_file(tmp_path: Path) -> Path:
    """Where a test's own SQLite journal lives (a driver process may open it too)."""
    return tmp_path / "journal.db"


@pytest.fixture
def journal(journal_file: Path) -> Iterator[Journal]:
    """A fresh journal of this test alone, in `journal_file`."""
    journal = Journal(f"sqlite:///{journal_file}")
    yield journal
    journal.engine.dispose()


def pytest_configure(config: pytest.Config) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="toolfleet-tests-"))
    config.add_cleanup(lambda: shutil.rmtree(scratch, ignore_errors=True))
    worker = worker_id(config)
    if worker is not None:
        servers = contextlib.ExitStack()
        config.add_cleanup(servers.close)
        servers.enter_context(own_servers(worker, scratch, os.environ))
    _removed[:] = make_hermetic(os.environ, scratch)


def pytest_report_header(config: pytest.Config) -> str:
    ignored = ", ".join(_removed) or "none"
    server = redact_url(os.environ["TOOLFLEET_REDIS_URL"])
    return f"toolfleet: test Redis {server}; caller's variables ignored: {ignored}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    timeout_handler = signal.getsignal(signal.SIGALRM)
    if not getattr(getattr(item, "obj", None), "is_hypothesis_test", False) or not callable(timeout_handler):
        return (yield)

    def end_the_test(signum: int, frame: FrameType | None) -> None:
        try:
            timeout_handler(signum, frame)
        except pytest.fail.Exception as exc:
            raise PropertyTestTimeout(str(exc)) from None

    signal.signal(signal.SIGALRM, end_the_test)
    try:
        return (yield)
    finally:
        if signal.getsignal(signal.SIGALRM) is end_the_test:
            signal.signal(signal.SIGALRM, timeout_handler)
