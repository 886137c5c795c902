"""Invocation parameters sealed at rest: the journal's column never holds a secret in clear when a
key is set, reading and recovery give them back, old keys still decrypt after rotation, and a
missing or wrong key is a clear error naming TOOLFLEET_JOURNAL_KEYS, raised only where the
parameters are opened (recovering that invocation): listing and showing the journal need no key."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from orchestrator import LocalExecutor
from orchestrator.cli import main
from orchestrator.cli.commands._journal_source import open_journal
from orchestrator.saga import _journal_crypto
from orchestrator.saga._journal_crypto import JournalKeyError
from orchestrator.saga._journal_tables import invocations
from orchestrator.saga.journal import Journal
from orchestrator.saga.recovery import recover
from workers import InvocationParameters, compensate_for, tool
from workers.calls.invocation import InvocationContext
from workers.protocol import ToolExecutionRequest
from workers.settings import Settings

SECRET = "sk-live-7f3a9c1e5b2d4860"


def _key() -> str:
    return Fernet.generate_key().decode()


def _parameters(context: InvocationContext) -> dict[str, Any]:
    return {"context": context.to_json(), "parameters": {"api_token": SECRET, "account": "alice"}}


def _write(journal: Journal) -> str:
    context = InvocationContext(memory_id="m", user_message="pay the invoice")
    journal.start_invocation(context, _parameters(context))
    return str(context.invocation_id)


def _pay_succeeded(journal: Journal, invocation_id: str) -> None:
    """Journals a compensable `pay` call, c1, that succeeded."""
    row = journal.record_intent(
        invocation_id,
        0,
        ToolExecutionRequest("c1", "pay", '{"invoice": "INV-1"}'),
        pool=None,
        compensable=True,
        idempotency_key=f"{invocation_id}:c1",
    )
    journal.set_call_state(row, "succeeded")


def _raw(journal: Journal, invocation_id: str) -> str:
    with journal.engine.connect() as connection:
        return str(
            connection.execute(
                sa.select(invocations.c.invocation_json).where(invocations.c.id == invocation_id)
            ).scalar_one()
        )


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'journal.db'}"


@pytest.fixture(autouse=True)
def _no_inherited_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOOLFLEET_DATABASE_URL", "TOOLFLEET_JOURNAL_KEYS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def journals() -> Iterator[list[Journal]]:
    made: list[Journal] = []
    yield made
    for journal in made:
        journal.engine.dispose()


def test_with_a_key_in_the_environment_no_secret_reaches_the_database_in_clear(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, journals: list[Journal]
) -> None:
    # given: a journal whose key comes from TOOLFLEET_JOURNAL_KEYS
    monkeypatch.setenv("TOOLFLEET_JOURNAL_KEYS", _key())
    journal = Journal(url)
    journals.append(journal)
    # when
    invocation_id = _write(journal)
    journal.engine.dispose()
    # then: neither the column nor the database file holds the secret
    assert SECRET not in _raw(journal, invocation_id)
    assert "alice" not in _raw(journal, invocation_id)
    assert SECRET.encode() not in (tmp_path / "journal.db").read_bytes()


def test_reading_with_the_key_gives_the_parameters_back(url: str, journals: list[Journal]) -> None:
    # given
    key = _key()
    journal = Journal(url, keys=[key])
    journals.append(journal)
    context = InvocationContext(memory_id="m")
    journal.start_invocation(context, _parameters(context))
    # when: read by another journal with the same key, one by one and as recovery lists them
    reader = Journal(url, keys=key)
    journals.append(reader)
    record = reader.invocation(str(context.invocation_id))
    unfinished = reader.unfinished(0)
    # then
    assert record is not None
    assert record.invocation_json == _parameters(context)
    assert [r.invocation_json for r in unfinished] == [_parameters(context)]


class Payments:
    def __init__(self) -> None:
        self.refunded_with: list[str] = []

    @tool("Pays an invoice")
    def pay(self, invoice: str, parameters: InvocationParameters) -> str:
        return f"paid {invoice} with {parameters['account']}"

    @compensate_for("pay")
    def refund(self, invoice: str, parameters: InvocationParameters) -> None:
        self.refunded_with.append(str(parameters["api_token"]))


def test_recovery_compensates_with_the_decrypted_parameters(url: str, journals: list[Journal]) -> None:
    # given: an orchestrator died after a compensable call succeeded; its parameters are sealed
    key = _key()
    dead = Journal(url, keys=[key])
    journals.append(dead)
    invocation_id = _write(dead)
    _pay_succeeded(dead, invocation_id)
    payments = Payments()
    # when: recovery runs with the key
    recoverer = Journal(url, keys=[key])
    journals.append(recoverer)
    reports = asyncio.run(recover(recoverer, LocalExecutor(tools=[payments]), stale_after_s=0))
    # then: the compensation got the secret parameter back
    assert [report.compensated for report in reports] == [["pay (c1)"]]
    assert payments.refunded_with == [SECRET]


def test_after_rotation_old_rows_still_decrypt_and_new_rows_use_the_new_key(
    url: str, journals: list[Journal]
) -> None:
    # given: a row written under the old key
    old, new = _key(), _key()
    before = Journal(url, keys=[old])
    journals.append(before)
    old_row = _write(before)
    # when: the new key is put first, the old one kept after it
    rotated = Journal(url, keys=f"{new}, {old}")
    journals.append(rotated)
    new_row = _write(rotated)
    # then: both rows read back
    for invocation_id in (old_row, new_row):
        record = rotated.invocation(invocation_id)
        assert record is not None
        assert record.invocation_json["parameters"]["api_token"] == SECRET
    # and the new row was sealed with the new key alone: a journal with only the new key reads it,
    # and refuses the old row with a clear error
    only_new = Journal(url, keys=[new])
    journals.append(only_new)
    record = only_new.invocation(new_row)
    assert record is not None and record.invocation_json["parameters"]["api_token"] == SECRET
    old_record = only_new.invocation(old_row)
    assert old_record is not None
    with pytest.raises(
        JournalKeyError, match=rf"invocation {old_row}: none of the 1 keys in TOOLFLEET_JOURNAL_KEYS"
    ):
        _ = old_record.invocation_json


def test_a_sealed_row_without_a_key_is_a_clear_error(url: str, journals: list[Journal]) -> None:
    # given
    writer = Journal(url, keys=[_key()])
    journals.append(writer)
    invocation_id = _write(writer)
    reader = Journal(url, keys="")
    journals.append(reader)
    # when: recovery lists the stale invocations
    [record] = reader.unfinished(0)
    # then: listed, and opening its parameters is the error
    assert record.id == invocation_id
    with pytest.raises(
        JournalKeyError, match=rf"invocation {invocation_id}: .*TOOLFLEET_JOURNAL_KEYS is not set"
    ):
        _ = record.invocation_json


def test_a_row_no_key_opens_leaves_the_other_invocations_readable(url: str, journals: list[Journal]) -> None:
    # given: two stale invocations, one sealed with a key since lost
    key = _key()
    lost = Journal(url, keys=[_key()])
    kept = Journal(url, keys=[key])
    journals.extend([lost, kept])
    unreadable = _write(lost)
    readable = _write(kept)
    # when: a journal with the remaining key lists them
    records = {record.id: record for record in kept.unfinished(0)}
    # then: both are listed; only the lost one's parameters are refused
    assert set(records) == {unreadable, readable}
    assert records[readable].invocation_json["parameters"]["api_token"] == SECRET
    with pytest.raises(JournalKeyError, match=rf"invocation {unreadable}: none of the 1 keys"):
        _ = records[unreadable].invocation_json


def test_a_record_shows_no_parameter_when_printed(url: str, journals: list[Journal]) -> None:
    # given: parameters stored in clear (no key)
    journal = Journal(url, keys="")
    journals.append(journal)
    invocation_id = _write(journal)
    # when
    record = journal.invocation(invocation_id)
    # then: its repr (logs, tracebacks) carries neither the parameters nor the sealed column
    assert record is not None
    assert SECRET not in repr(record)
    assert "alice" not in repr(record)


@pytest.mark.parametrize("reader_keys", ["wrong", "none"])
def test_runs_show_and_sagas_need_no_key_and_recovery_of_the_row_names_the_key_error(
    reader_keys: str,
    url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    journals: list[Journal],
) -> None:
    # given: a stale invocation sealed with one key, owing a compensation; the commands given another
    # key, or none
    writer = Journal(url, keys=[_key()])
    journals.append(writer)
    invocation_id = _write(writer)
    _pay_succeeded(writer, invocation_id)
    [call] = writer.calls(invocation_id)
    writer.plan_compensations(invocation_id, [call], "the invoice was wrong")
    monkeypatch.setenv("TOOLFLEET_DATABASE_URL", url)
    if reader_keys == "wrong":
        monkeypatch.setenv("TOOLFLEET_JOURNAL_KEYS", _key())
    # when: the journal is listed, shown and its owed compensations listed
    codes = [main(["runs"]), main(["show", invocation_id]), main(["sagas", "--failed", "--stale-after", "0"])]
    out = capsys.readouterr()
    # then: each works, naming the invocation and its call
    assert codes == [0, 0, 0], out.err
    lines = out.out.splitlines()
    assert lines[1].startswith(invocation_id) and "pay the invoice" in lines[1]  # runs
    assert "compensation pending" in out.out  # show
    assert any(line.startswith(invocation_id) and "pay(" in line for line in lines[2:])  # sagas
    assert "not finished; its invocation stopped" in out.out
    assert "Traceback" not in out.err
    # and recovering it is where the key error is: it names the invocation and the variable
    recoverer = Journal(url)
    journals.append(recoverer)
    [report] = asyncio.run(recover(recoverer, LocalExecutor(), stale_after_s=0))
    assert report.invocation_id == invocation_id and report.compensated == []
    assert re.search(rf"invocation {invocation_id}: .*TOOLFLEET_JOURNAL_KEYS", report.error or "")
    # and the row is left as it was, unclaimed, for a recoverer that holds the key
    assert recoverer.invocation(invocation_id).state == "running"


def test_a_command_seals_with_the_keys_of_its_settings(url: str, journals: list[Journal]) -> None:
    # given: the key in the command's settings, none in the environment
    key = _key()
    settings = Settings(database_url=url, journal_keys=key)
    # when: a command opens the journal from its settings and an invocation is written
    journal = open_journal(settings, "runs")
    journals.append(journal)
    invocation_id = _write(journal)
    # then: sealed, with that key
    assert SECRET not in _raw(journal, invocation_id)
    record = Journal(url, keys=[key]).invocation(invocation_id)
    assert record is not None and record.invocation_json["parameters"]["api_token"] == SECRET


def test_a_malformed_key_is_refused_at_construction(url: str) -> None:
    with pytest.raises(JournalKeyError, match=r"TOOLFLEET_JOURNAL_KEYS: key 2 of 2 is not a Fernet key"):
        Journal(url, keys=[_key(), "not-a-key"])


def test_without_a_key_parameters_are_stored_in_clear_with_one_warning(
    url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, journals: list[Journal]
) -> None:
    # given: a process that has not warned yet, and no key
    _journal_crypto._warn_once.cache_clear()
    journal = Journal(url)
    journals.append(journal)
    # when: two invocations are written
    with caplog.at_level(logging.WARNING, logger="orchestrator.saga._journal_crypto"):
        first = _write(journal)
        _write(journal)
    # then: one warning naming the variable, the parameters in clear, readable by a keyed journal later
    warnings = [r for r in caplog.records if "TOOLFLEET_JOURNAL_KEYS is not set" in r.getMessage()]
    assert len(warnings) == 1
    assert SECRET in _raw(journal, first)
    keyed = Journal(url, keys=[_key()])
    journals.append(keyed)
    record = keyed.invocation(first)
    assert record is not None and record.invocation_json["parameters"]["api_token"] == SECRET


def test_settings_read_the_keys_and_never_show_them() -> None:
    # given
    keys = f"{_key()},{_key()}"
    # when
    settings = Settings.from_env({"TOOLFLEET_JOURNAL_KEYS": keys})
    # then
    assert settings.journal_keys == keys
    assert settings.redacted()["journal_keys"] == "***"
    assert keys.split(",")[0] not in repr(settings)
    assert Settings.from_env({}).redacted()["journal_keys"] == ""
