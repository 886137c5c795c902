"""The warning that `TOOLFLEET_JOURNAL_KEYS` is not set: shown once per process, and only by a process
that writes invocation parameters to the journal — never by one that reads the journal, the catalog,
or serves tools.

The commands run as a user runs them, each in its own process, their stderr read whole.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from orchestrator.saga import _journal_crypto
from orchestrator.saga._journal_crypto import JournalCipher
from orchestrator.saga._journal_tables import invocations
from tests._cli import CLI, run_command
from tests._fake_openai import FakeOpenAi

ROOT = Path(__file__).resolve().parents[1]
WARNING = "TOOLFLEET_JOURNAL_KEYS is not set"
QUESTIONS = [f"What is the weather in {city}?" for city in ("Lisbon", "Kyiv", "Tokyo")]


# --- in one process ----------------------------------------------------------------------------------


class _SlowHandler(logging.Handler):
    """Keeps each record, taking a while over it as a handler writing to a slow terminal does."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        time.sleep(0.05)
        self.messages.append(record.getMessage())


@pytest.fixture
def slow_handler() -> Iterator[_SlowHandler]:
    handler = _SlowHandler()
    logger = logging.getLogger(_journal_crypto.__name__)
    _journal_crypto._warn_once.cache_clear()  # this process has not warned yet
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def test_writers_racing_through_their_first_write_warn_once(slow_handler: _SlowHandler) -> None:
    # given: a service's concurrent invocations, each about to seal its parameters without a key
    cipher = JournalCipher("")
    ready = threading.Barrier(16)

    def write() -> None:
        ready.wait(timeout=10)
        for _ in range(5):
            cipher.seal('{"api_token": "t0ken"}')

    threads = [threading.Thread(target=write) for _ in range(16)]
    # when
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # then: one warning between them, which says how to make a key
    assert [m for m in slow_handler.messages if WARNING in m] == [slow_handler.messages[0]]
    assert _journal_crypto.MAKE_KEY in slow_handler.messages[0]


def test_a_key_means_no_warning(slow_handler: _SlowHandler) -> None:
    # when
    JournalCipher(Fernet.generate_key().decode()).seal('{"api_token": "t0ken"}')
    # then
    assert slow_handler.messages == []


# --- commands, each in a process of its own -----------------------------------------------------------


def _environment(journal_url: str, redis_url: str, **variables: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLFLEET_", "FLOWER_"))}
    base = {k: v for k, v in base.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    return {
        **base,
        "PYTHONPATH": str(ROOT),
        "TOOLFLEET_DATABASE_URL": journal_url,
        "TOOLFLEET_REDIS_URL": redis_url,
        **variables,
    }


def _chat(journal_url: str, redis_url: str, **variables: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """`toolfleet chat` asking QUESTIONS one after another (a tool call each, in this process); its run
    and the number of invocations it journaled."""
    with FakeOpenAi() as server:
        result = run_command(
            [*CLI, "chat", "--base-url", server.base_url, "--tools", "workers.examples.weather"],
            env=_environment(journal_url, redis_url, **variables),
            stdin="\n".join(QUESTIONS) + "\n",
            timeout_s=90,
        )
    engine = sa.create_engine(journal_url)
    try:
        with engine.connect() as connection:
            count = connection.execute(sa.select(sa.func.count()).select_from(invocations)).scalar_one()
    finally:
        engine.dispose()
    return result, int(count)


@pytest.fixture
def redis_url() -> str:
    return os.environ.get("TOOLFLEET_REDIS_URL") or "redis://127.0.0.1:6379/0"


def test_a_command_that_journals_parameters_warns_once_for_all_its_writes(
    tmp_path: Path, redis_url: str
) -> None:
    # when: three questions, each an invocation whose parameters (and conversation) are journaled
    result, journaled = _chat(f"sqlite:///{tmp_path / 'journal.db'}", redis_url)
    # then
    assert result.returncode == 0, result.stderr
    assert journaled == len(QUESTIONS)
    assert result.stderr.count(WARNING) == 1, result.stderr
    assert "Forecast for Tokyo: " in result.stdout


def test_the_same_command_with_a_key_does_not_warn(tmp_path: Path, redis_url: str) -> None:
    # when
    key = Fernet.generate_key().decode()
    result, journaled = _chat(f"sqlite:///{tmp_path / 'journal.db'}", redis_url, TOOLFLEET_JOURNAL_KEYS=key)
    # then
    assert result.returncode == 0, result.stderr
    assert journaled == len(QUESTIONS)
    assert WARNING not in result.stderr


@pytest.fixture(scope="module")
def journal_in_clear(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A journal holding invocations whose parameters were written without a key; (its URL, the id
    of one of its invocations)."""
    journal_url = f"sqlite:///{tmp_path_factory.mktemp('clear') / 'journal.db'}"
    result, journaled = _chat(
        journal_url, os.environ.get("TOOLFLEET_REDIS_URL") or "redis://127.0.0.1:6379/0"
    )
    assert result.returncode == 0 and journaled == len(QUESTIONS), result.stderr
    engine = sa.create_engine(journal_url)
    try:
        with engine.connect() as connection:
            invocation_id = str(connection.execute(sa.select(invocations.c.id).limit(1)).scalar_one())
    finally:
        engine.dispose()
    return journal_url, invocation_id


@pytest.mark.parametrize(
    "args",
    [
        ("runs",),
        ("show", "{invocation}"),
        ("sagas",),
        ("approvals",),
        ("recover",),
        ("db", "upgrade"),
        ("tools",),
        ("worker-health",),
    ],
    ids=lambda args: " ".join(args).replace(" {invocation}", ""),
)
def test_commands_that_journal_no_parameters_do_not_warn(
    journal_in_clear: tuple[str, str], redis_url: str, args: tuple[str, ...]
) -> None:
    # given: a journal whose parameters are in clear, and no key
    journal_url, invocation_id = journal_in_clear
    # when
    result = run_command(
        [*CLI, *(arg.format(invocation=invocation_id) for arg in args)],
        env=_environment(journal_url, redis_url),
        timeout_s=60,
    )
    # then: it ran (the health check answers 1 where no worker of this host runs), and said nothing of the key
    assert result.returncode in ((0, 1) if args[0] == "worker-health" else (0,)), result.stderr
    assert WARNING not in result.stderr + result.stdout
