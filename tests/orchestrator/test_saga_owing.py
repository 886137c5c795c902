"""An invocation that ends owing a compensation: never `succeeded`, and finished by `recover`.

In-process (`LocalExecutor`, a SQLite journal): the final-state rule and what recovery retries, with
a compensation that fails while its desk is closed and succeeds once it opens.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from orchestrator import AiMessage, LocalExecutor, Result
from orchestrator.cli.commands import sagas
from orchestrator.saga.journal import Journal, invocations
from orchestrator.saga.recovery import recover
from tests.orchestrator._bank import CLOSED, Bank, chat_compensating
from tests.orchestrator._service import call
from workers import InvocationContext, OutcomeKind, ToolOutcome
from workers.settings import Settings
from workers.tools import discover_tools


def deposit_pay_credit(bank: Bank, executor: LocalExecutor, journal: Journal) -> Result:
    """One invocation, compensating on tool errors: a deposit of 40, a payment that fails, a credit of 5."""
    script: list[AiMessage | str] = [
        AiMessage(tool_execution_requests=[call("deposit", "d1", amount=40)]),
        AiMessage(tool_execution_requests=[call("pay", "p1")]),
        AiMessage(tool_execution_requests=[call("credit", "c1", amount=5)]),
        "done",
    ]
    return chat_compensating(bank, executor, journal, script, "deposit, pay, credit")


def test_an_invocation_owing_a_compensation_is_left_compensating_and_recover_retries_only_that(
    journal: Journal,
) -> None:
    # Given: a deposit whose undo fails (desk closed), a failing payment, then a credit that stands
    desk = Bank(open=False)
    executor = LocalExecutor(compensation_retries=0)

    # When
    result = deposit_pay_credit(desk, executor, journal)

    # Then: the invocation did not end `succeeded`: it owes the deposit's compensation, named in its
    # error; the credit made after the failure stands, marked kept
    assert result.content == "done" and result.invocation_id is not None
    assert desk.balance == 45 and desk.undone == []
    record = journal.invocation(result.invocation_id)
    assert record is not None and record.state == "compensating"
    assert record.error is not None and "1 compensation(s) owed" in record.error
    assert f"deposit (d1) failed: {CLOSED}" in record.error
    states = {c.call_id: c.state for c in journal.calls(result.invocation_id)}
    assert states == {"d1": "compensation_failed", "p1": "failed", "c1": "kept"}

    # When: recovery runs while the desk is still closed
    definitions = {d.name: d for d in discover_tools(desk)}
    [first] = asyncio.run(recover(journal, executor, definitions, stale_after_s=0))

    # Then: it retried only the deposit, failed again, and left the invocation owing it
    assert (first.compensated, first.failed) == ([], ["deposit (d1)"])
    record = journal.invocation(result.invocation_id)
    assert record is not None and record.state == "compensating"

    # When: the desk opens and recovery runs again
    desk.open = True
    [second] = asyncio.run(recover(journal, executor, definitions, stale_after_s=0))

    # Then: the deposit is undone once, the credit stands, nothing is owed any more
    assert (second.compensated, second.failed) == (["deposit (d1)"], [])
    assert desk.undone == ["deposit 40"] and desk.balance == 5
    record = journal.invocation(result.invocation_id)
    assert record is not None and record.state == "failed"
    assert [c.state for c in journal.compensations(result.invocation_id)] == ["succeeded"]
    assert asyncio.run(recover(journal, executor, definitions, stale_after_s=0)) == []
    executor.close()


def test_an_invocation_whose_compensations_all_succeeded_ends_succeeded(journal: Journal) -> None:
    # Given: the same saga with the desk open
    desk = Bank(open=True)
    executor = LocalExecutor(compensation_retries=0)

    # When
    result = deposit_pay_credit(desk, executor, journal)
    executor.close()

    # Then: nothing is owed, the invocation succeeded, the standing credit keeps its state
    assert result.invocation_id is not None and desk.undone == ["deposit 40"]
    record = journal.invocation(result.invocation_id)
    assert record is not None and (record.state, record.error) == ("succeeded", None)
    states = {c.call_id: c.state for c in journal.calls(result.invocation_id)}
    assert states == {"d1": "compensated", "p1": "failed", "c1": "succeeded"}


def _stopped_mid_compensation(journal: Journal, stale: bool) -> str:
    """An invocation whose compensation was planned and started, then its orchestrator went silent."""
    context = InvocationContext(invocation_id=uuid.uuid4(), memory_id="default", user_message="deposit")
    invocation_id = str(context.invocation_id)
    journal.start_invocation(context, {})
    request = call("deposit", "d1", amount=40)
    row = journal.record_intent(
        invocation_id, 1, request, pool=None, compensable=True, idempotency_key=f"{invocation_id}:d1"
    )
    journal.record_outcome(row, ToolOutcome(kind=OutcomeKind.SUCCESS, text="Deposited 40"), "Deposited 40")
    journal.set_invocation_state(invocation_id, "compensating")
    journal.plan_compensations(invocation_id, journal.calls(invocation_id), "tool 'pay' failed")
    journal.compensation_running(row, None)
    if stale:
        with journal.engine.begin() as connection:
            connection.execute(
                sa.update(invocations)
                .where(invocations.c.id == invocation_id)
                .values(heartbeat_at=datetime.now(UTC) - timedelta(seconds=120))
            )
    return invocation_id


def test_sagas_failed_lists_compensations_an_invocation_left_unfinished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given: one invocation silent for 2 minutes with its compensation still running, and one live
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    journal = Journal(url)
    silent = _stopped_mid_compensation(journal, stale=True)
    live = _stopped_mid_compensation(journal, stale=False)
    journal.engine.dispose()
    parser = argparse.ArgumentParser()
    sagas.add_parser(parser.add_subparsers())

    # When
    args = parser.parse_args(["sagas", "--failed"])
    assert sagas.run(args, Settings(database_url=url)) == 0

    # Then: the silent one's compensation is listed as owed, the live one's is not
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith((silent, live))]
    assert len(rows) == 1 and rows[0].startswith(silent), lines
    assert rows[0].split()[1:5] == ["d1", 'deposit({"amount":', "40})", "running"]
    assert "`toolfleet recover`" in rows[0]
