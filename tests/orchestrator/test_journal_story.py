"""The journal keeps the whole story of an invocation: the model turn of each call, the failed call
that set off a rollback, and the final answer."""

from __future__ import annotations

import pytest

from orchestrator import AiMessage
from orchestrator.models.scripted import ScriptExhaustedError
from orchestrator.saga.journal import Journal
from tests.orchestrator._bank import ROLLED_BACK, invocation_of
from tests.orchestrator._service import call


def test_the_final_answer_and_the_turn_of_each_call_are_journaled(journal: Journal) -> None:
    # given: two calls in the first turn, one in the second, then the answer
    script: list[AiMessage | str] = [
        AiMessage(tool_execution_requests=[call("deposit", "d1", amount=40), call("credit", "c1", amount=5)]),
        AiMessage(tool_execution_requests=[call("credit", "c2", amount=7)]),
        "Deposited 40 and credited 12.",
    ]
    # when
    invocation_id = invocation_of(journal, script, "deposit 40, credit 5 then 7")
    # then
    record = journal.invocation(invocation_id)
    assert record is not None and record.state == "succeeded"
    assert record.user_message == "deposit 40, credit 5 then 7"
    assert record.final_answer == "Deposited 40 and credited 12."
    assert [(c.call_id, c.turn, c.sequence) for c in journal.calls(invocation_id)] == [
        ("d1", 1, 1),
        ("c1", 1, 2),
        ("c2", 2, 3),
    ]


def test_the_compensations_name_the_failed_call_that_set_them_off(journal: Journal) -> None:
    # given: a deposit and a credit stand, then a payment fails, then the model answers
    # when
    invocation_id = invocation_of(journal, ROLLED_BACK, "deposit, credit and pay")
    # then
    reasons = {c.tool: c.reason for c in journal.compensations(invocation_id)}
    assert reasons == {"deposit": "tool 'pay' call p1 failed", "credit": "tool 'pay' call p1 failed"}
    record = journal.invocation(invocation_id)
    assert record is not None and record.final_answer == "The payment was declined; nothing was kept."
    assert {c.call_id: c.turn for c in journal.calls(invocation_id)} == {"d1": 1, "c1": 2, "p1": 2}


def test_an_invocation_that_fails_journals_no_answer(journal: Journal) -> None:
    # given: the model's script ends before an answer
    script: list[AiMessage | str] = [AiMessage(tool_execution_requests=[call("deposit", "d1", amount=1)])]
    # when
    with pytest.raises(ScriptExhaustedError):
        invocation_of(journal, script, "deposit 1")
    # then
    [record] = journal.invocations()
    assert record.state == "failed" and record.final_answer is None
    assert record.error is not None and record.error.startswith("ScriptExhaustedError")
