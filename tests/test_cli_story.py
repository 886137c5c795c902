"""`toolfleet show` tells an invocation's whole story and `toolfleet sagas` names the calls it undid."""

from __future__ import annotations

from pathlib import Path

from orchestrator import AiMessage
from orchestrator.saga.journal import Journal
from tests._cli import journal_lines
from tests.orchestrator._bank import ROLLED_BACK, invocation_of
from tests.orchestrator._service import call


def _journaled(url: str, script: list[AiMessage | str], message: str) -> str:
    """The id of one invocation compensating on tool errors, journaled at `url`."""
    journal = Journal(url)
    try:
        return invocation_of(journal, script, message)
    finally:
        journal.engine.dispose()


def _rolled_back_invocation(url: str) -> str:
    """Turn 1 deposits, turn 2 credits and pays (declined): both are undone; then the answer."""
    return _journaled(url, ROLLED_BACK, "deposit 40, credit 5, then pay")


def test_show_tells_the_question_the_turns_the_rollback_cause_and_the_answer(tmp_path: Path) -> None:
    # given
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    invocation_id = _rolled_back_invocation(url)
    # when
    lines = journal_lines(url, "show", invocation_id, cwd=tmp_path)
    # then
    assert lines[0] == f"invocation {invocation_id}  [succeeded]  owner {lines[0].rsplit(' ', 1)[1]}"
    story = [line for line in lines if not line.startswith("      ") and not line.startswith("  service")]
    assert story[1:] == [
        "  user: deposit 40, credit 5, then pay",
        "  answer: The payment was declined; nothing was kept.",
        "  rolled back (#2 credit, #1 deposit) because tool 'pay' call p1 failed",
        "turn 1:",
        '  #1 call d1  deposit({"amount": 40})',
        "turn 2:",
        '  #2 call c1  credit({"amount": 5})',
        "  #3 call p1  pay({})",
    ]
    after_pay = lines[lines.index("  #3 call p1  pay({})") + 1 :]
    assert "      this failure rolled back the successful calls before it" in after_pay
    assert sum("this failure rolled back" in line for line in lines) == 1
    assert "      compensation succeeded after 1 attempt(s) (tool 'pay' call p1 failed)" in lines


def test_sagas_rows_name_the_call_and_its_arguments(tmp_path: Path) -> None:
    # given
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    invocation_id = _rolled_back_invocation(url)
    # when
    header, *rows = journal_lines(url, "sagas", cwd=tmp_path)
    # then: one row per compensation, each naming its call id and the call
    assert header.split()[:4] == ["invocation", "call", "tool(arguments)", "state"]
    assert [row.split()[:4] for row in rows] == [
        [invocation_id, "c1", 'credit({"amount":', "5})"],
        [invocation_id, "d1", 'deposit({"amount":', "40})"],
    ]


def test_sagas_bounds_long_arguments(tmp_path: Path) -> None:
    # given: a compensated call with long arguments
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    script: list[AiMessage | str] = [
        AiMessage(tool_execution_requests=[call("deposit", "d1", amount=40, memo="m" * 500)]),
        AiMessage(tool_execution_requests=[call("pay", "p1")]),
        "declined",
    ]
    _journaled(url, script, "deposit a lot, then pay")
    # when
    header, row = journal_lines(url, "sagas", cwd=tmp_path)
    # then: the call is cut to its column, with an ellipsis
    column = header.index("tool(arguments)")
    shown = row[column : column + 48]
    assert shown.startswith('deposit({"amount": 40, "memo": "mmm') and shown.endswith("…")
    assert len(shown) == 48
