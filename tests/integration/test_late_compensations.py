"""`toolfleet show` and `toolfleet sagas` report the compensations workers run for late calls.

A call abandoned at its deadline that finishes later is undone by its worker, which has no database:
the compensation's state is in the result backend under the call's compensation task id. Here the
journal rows are written through `Journal` and the states through the worker app's own result backend,
as a worker stores them.
"""

from __future__ import annotations

import argparse
import dataclasses
import uuid
from pathlib import Path

import pytest
import redis
from celery import Celery, states

from orchestrator.cli.commands import sagas, show
from orchestrator.cli.main import build_parser
from orchestrator.saga._late import late_compensation
from orchestrator.saga.journal import CallRecord, Journal
from tests._ports import free_port
from workers.calls.invocation import InvocationContext
from workers.protocol import (
    OutcomeKind,
    ToolExecutionRequest,
    ToolOutcome,
    call_state_key,
    compensation_task_id,
)
from workers.settings import Settings


@pytest.fixture
def cli_settings(settings: Settings, journal_file: Path) -> Settings:
    return dataclasses.replace(settings, database_url=f"sqlite:///{journal_file}")


def _abandoned(journal: Journal, invocation_id: str, tool: str) -> CallRecord:
    """A compensable call of `tool`, journaled as the loop does for one abandoned at its deadline."""
    key = f"{invocation_id}:{uuid.uuid4().hex[:8]}"
    row = journal.record_intent(
        invocation_id,
        1,
        ToolExecutionRequest("c1", tool, "{}"),
        pool="faults",
        compensable=True,
        idempotency_key=key,
    )
    task_id = str(uuid.uuid4())
    timed_out = ToolOutcome(
        OutcomeKind.TIMED_OUT, f"Tool '{tool}' did not finish within 0.3 s", task_id=task_id
    )
    journal.record_outcome(row, timed_out, timed_out.text)
    journal.set_call_state(row, "abandoned")
    [call] = [c for c in journal.calls(invocation_id) if c.id == row]
    return call


def _invocation(journal: Journal) -> str:
    context = InvocationContext()
    journal.start_invocation(context, {})
    return str(context.invocation_id)


def test_each_state_of_a_late_compensation_is_read_from_redis(
    journal: Journal, worker_app: Celery, client: redis.Redis
) -> None:
    invocation_id = _invocation(journal)
    done, failed, running, pending, gone = (_abandoned(journal, invocation_id, "book") for _ in range(5))

    # given: what the workers stored for each (their own result backend, their own call marks)
    worker_app.backend.mark_as_done(compensation_task_id(done.idempotency_key), {"kind": "success"})
    worker_app.backend.mark_as_failure(
        compensation_task_id(failed.idempotency_key), ValueError("card expired")
    )
    worker_app.backend.store_result(compensation_task_id(running.idempotency_key), {"pid": 1}, states.STARTED)
    assert pending.task_id is not None
    client.set(call_state_key(pending.task_id), "abandoned")

    # then: each reads as what happened
    assert late_compensation(client, done).state == "compensated"
    failure = late_compensation(client, failed)
    assert (failure.state, failure.text) == (
        "failed",
        "the late compensation failed: ValueError: card expired",
    )
    assert late_compensation(client, running).state == "running"
    assert late_compensation(client, pending).state == "not_finished"
    assert late_compensation(client, gone).state == "unknown"
    assert journal.abandoned_calls(invocation_id) == [done, failed, running, pending, gone]


def test_show_and_sagas_report_late_compensations(
    journal: Journal, cli_settings: Settings, worker_app: Celery, capsys: pytest.CaptureFixture[str]
) -> None:
    # given: an invocation with one call undone late and one whose late compensation failed
    invocation_id = _invocation(journal)
    undone = _abandoned(journal, invocation_id, "book_hotel")
    broken = _abandoned(journal, invocation_id, "book_car")
    worker_app.backend.mark_as_done(compensation_task_id(undone.idempotency_key), {"kind": "success"})
    worker_app.backend.mark_as_failure(
        compensation_task_id(broken.idempotency_key), ValueError("no such booking")
    )

    # when: an operator looks at the invocation, and at the compensations that need a person
    assert show.run(_args("show", invocation_id), cli_settings) == 0
    shown = capsys.readouterr().out
    assert sagas.run(_args("sagas", "--failed"), cli_settings) == 0
    failed = capsys.readouterr().out

    # then: `show` tells both, and `sagas --failed` lists the failed one only
    assert "late compensation: compensated: undone by its worker after it finished late" in shown
    assert "late compensation: failed: the late compensation failed: ValueError: no such booking" in shown
    assert compensation_task_id(undone.idempotency_key) in shown
    [row] = [line for line in failed.splitlines() if invocation_id in line]
    assert "book_car" in row and "failed" in row and "no such booking" in row


def _args(*argv: str) -> argparse.Namespace:
    """A command's arguments as `toolfleet`'s own parser reads them, defaults included."""
    return build_parser().parse_args(list(argv))


def test_show_says_so_when_redis_is_unreachable(
    journal: Journal, cli_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    invocation_id = _invocation(journal)
    _abandoned(journal, invocation_id, "book")
    unreachable = dataclasses.replace(cli_settings, redis_url=f"redis://127.0.0.1:{free_port()}/0")

    assert show.run(_args("show", invocation_id), unreachable) == 0

    assert "late compensation: unknown (Redis unreachable:" in capsys.readouterr().out
