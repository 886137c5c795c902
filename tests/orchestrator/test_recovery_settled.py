"""How `recover` journals a call its executor settled (`ToolExecutor.settle`), whatever the executor
knows of the tool: a stored success is the tool's own outcome, and a success without its result is
unknown, never a made-up outcome to undo."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis

from orchestrator.executors.base import Settled
from orchestrator.saga.journal import Journal
from orchestrator.saga.recovery import recover
from orchestrator.saga.states import CANCELLED_BY_CALLER, CANCELLED_WHILE_PAUSED
from workers import ToolDefinition, ToolExecution, ToolExecutionRequest, ToolOutcome, compensate_for, tool
from workers.calls.invocation import Invocation, InvocationContext
from workers.protocol import OutcomeKind
from workers.tools.registry import ToolRegistry


class SettledExecutor:
    """An executor that knows no tool and settles every call as it was told; it records undos."""

    max_fanout = 1

    def __init__(self, settled: Settled) -> None:
        self.settled = settled
        self.compensated: list[str] = []

    async def execute(self, *arguments: Any, **options: Any) -> ToolOutcome:
        raise AssertionError("recovery runs no call")

    async def compensate(
        self, definition: ToolDefinition, execution: ToolExecution, invocation: Invocation
    ) -> ToolOutcome:
        self.compensated.append(execution.result)
        return ToolOutcome(OutcomeKind.SUCCESS, "undone")

    async def execute_batch(self, *arguments: Any) -> list[ToolOutcome]:
        raise AssertionError("recovery runs no call")

    def definition(self, name: str) -> ToolDefinition | None:
        return None

    async def settle(self, key: str, definition: ToolDefinition | None) -> Settled:
        return self.settled

    def close(self) -> None:
        pass


def left_in_flight(journal: Journal, *, compensable: bool = True) -> str:
    """An invocation whose orchestrator died with its `credit` (compensable unless told) dispatched."""
    context = InvocationContext(invocation_id=uuid.uuid4(), memory_id="default", user_message="credit")
    invocation_id = str(context.invocation_id)
    journal.start_invocation(context, Invocation(context).to_json())
    request = ToolExecutionRequest("c1", "credit", '{"amount": 5}')
    journal.record_intent(
        invocation_id, 1, request, pool="bank", compensable=compensable, idempotency_key=f"{invocation_id}:c1"
    )
    return invocation_id


def success_meta(text: str) -> dict[str, Any]:
    """A SUCCESS state as a worker stores it: the tool's outcome, and the worker that ran it."""
    return {"status": "SUCCESS", "result": {"kind": "success", "text": text, "worker": "bank@h"}}


def test_a_stored_success_of_a_tool_nobody_knows_is_journaled_with_its_own_result(
    journal: Journal,
) -> None:
    # given: a call that succeeded on a worker, of a tool neither the recoverer nor the catalog knows
    invocation_id = left_in_flight(journal)
    executor = SettledExecutor(Settled("succeeded", "t-1", success_meta("credited 5")))

    # when: recover settles it
    [report] = asyncio.run(recover(journal, executor, stale_after_s=0))

    # then: the call's own result is journaled, with where it ran; it cannot be undone here
    [call] = journal.calls(invocation_id)
    assert (call.result, call.task_id, call.worker) == ("credited 5", "t-1", "bank@h")
    assert call.state == "compensation_failed"
    assert report.failed == ["credit (c1)"]


def test_a_success_whose_result_never_arrived_is_unknown_and_read_again_later(journal: Journal) -> None:
    # given: a call its worker marked finished, whose result had not reached the backend
    invocation_id = left_in_flight(journal)
    executor = SettledExecutor(Settled("succeeded", "t-1", None))

    # when: recover settles it
    [report] = asyncio.run(recover(journal, executor, stale_after_s=0))

    # then: nothing is undone, the call stays dispatched and the invocation unfinished
    assert (report.unknown, report.compensated, report.failed, executor.compensated) == (
        ["credit (c1)"],
        [],
        [],
        [],
    )
    [call] = journal.calls(invocation_id)
    assert (call.state, call.result) == ("dispatched", None)
    record = journal.invocation(invocation_id)
    assert record is not None and record.state == "compensating"
    assert record.error is not None and "read again by the next recover: credit (c1)" in record.error

    # when: the result has arrived by the next recover
    executor.settled = Settled("succeeded", "t-1", success_meta("credited 5"))
    [again] = asyncio.run(recover(journal, executor, stale_after_s=0))

    # then: the call is journaled with it (and, its tool unknown here, owed)
    [call] = journal.calls(invocation_id)
    assert call.result == "credited 5"
    assert again.unknown == []


class UnreadableExecutor(SettledExecutor):
    """An executor whose Redis cannot be read while it settles."""

    async def settle(self, key: str, definition: ToolDefinition | None) -> Settled:
        raise redis.ConnectionError("Connection refused")


@pytest.mark.parametrize(
    "executor",
    [
        SettledExecutor(Settled("succeeded", "t-1", None)),
        UnreadableExecutor(Settled("succeeded", "t-1", None)),
    ],
    ids=["result never arrived", "state unreadable"],
)
def test_a_call_with_nothing_to_undo_whose_outcome_is_unknown_is_journaled_abandoned(
    journal: Journal, executor: SettledExecutor
) -> None:
    # given: a call of a tool with no compensation, its outcome not to be learnt
    invocation_id = left_in_flight(journal, compensable=False)

    # when
    [report] = asyncio.run(recover(journal, executor, stale_after_s=0))

    # then: it is not left dispatched (nothing would ever settle it): the invocation gave it up, and ended
    assert report.unknown == ["credit (c1)"]
    [call] = journal.calls(invocation_id)
    assert call.state == "abandoned"
    record = journal.invocation(invocation_id)
    assert record is not None and record.state == "failed"


def test_a_call_with_nothing_to_undo_is_journaled_with_its_stored_outcome(journal: Journal) -> None:
    invocation_id = left_in_flight(journal, compensable=False)
    executor = SettledExecutor(Settled("succeeded", "t-1", success_meta("credited 5")))

    asyncio.run(recover(journal, executor, stale_after_s=0))

    [call] = journal.calls(invocation_id)
    assert (call.state, call.result, call.worker) == ("succeeded", "credited 5", "bank@h")


class Till:
    @tool("Credits an account")
    def credit(self, amount: int) -> str:
        return f"credited {amount}"

    @compensate_for("credit")
    def uncredit(self, amount: int) -> None: ...


@pytest.mark.parametrize(
    ("ended_with", "recovered_as"),
    [
        (CANCELLED_BY_CALLER, "cancelled"),
        (CANCELLED_WHILE_PAUSED, "cancelled"),
        ("the invocation failed: RuntimeError", "failed"),
    ],
)
def test_an_invocation_that_ended_owing_compensations_is_recovered_to_the_end_it_was_told(
    journal: Journal, ended_with: str, recovered_as: str
) -> None:
    # given: an invocation whose loop ended (cancelled, or failing) owing the undo of its `credit`
    invocation_id = left_in_flight(journal)
    [call] = journal.calls(invocation_id)
    journal.record_outcome(call.id, ToolOutcome(OutcomeKind.SUCCESS, "credited 5"), "credited 5")
    journal.plan_compensations(invocation_id, journal.calls(invocation_id), "the invocation was cancelled")
    journal.set_invocation_state(
        invocation_id,
        "compensating",
        f"{ended_with}; 1 compensation(s) owed, `toolfleet recover` retries them",
    )
    executor = SettledExecutor(Settled("succeeded", "t-1", None))
    definitions = {d.name: d for d in ToolRegistry().add(Till())}

    # when: recovery finishes what it owed
    [report] = asyncio.run(recover(journal, executor, definitions, stale_after_s=0))

    # then: undone, and it ends as its clients were told it ended
    assert report.compensated == ["credit (c1)"] and executor.compensated == ["credited 5"]
    record = journal.invocation(invocation_id)
    assert record is not None and record.state == recovered_as
