"""The demo's stories read right: the calls the scripted model makes are the ones the user asked for,
and the live table tells calls of one tool apart."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from orchestrator.approvals import ApprovalState, approve
from orchestrator.cli.console import LiveTable, short_arguments
from orchestrator.cli.demo import CITIES, STORIES, Script
from orchestrator.executors.celery import CallEvent
from orchestrator.executors.local import LocalExecutor
from orchestrator.messages import UserMessage
from orchestrator.models.base import ChatRequest, FinishReason
from orchestrator.models.scripted import ScriptedChatModel
from orchestrator.saga.journal import Journal
from orchestrator.service import AiService
from workers.examples.bank import BankTools
from workers.examples.teller import APPROVAL_THRESHOLD, large_transfer, teller
from workers.protocol import ToolExecutionRequest


def _story(title: str) -> tuple[str, Script]:
    for name, question, script in STORIES:
        if name == title:
            return question, script
    raise AssertionError(f"no story {title!r}")


def test_the_transfer_story_moves_the_amount_the_user_asked_for_and_fails_for_want_of_funds(
    tmp_path: Path,
) -> None:
    # given: the bank story, its accounts as the demo's workers hold them
    question, script = _story("Bank transfer, compensated")
    bank = BankTools()
    service = AiService(
        chat_model=ScriptedChatModel(script),
        tools=[bank],
        executor=LocalExecutor(),
        compensate_on_tool_errors=True,
        journal=Journal(f"sqlite:///{tmp_path}/journal.db"),
    )
    asked = re.fullmatch(r"Transfer (\d+) from (\w+) to (\w+)\.", question)
    assert asked is not None, question
    amount, payer, payee = int(asked[1]), asked[2], asked[3]
    # when
    result = service.chat(question)
    # then: the payee is credited and the payer debited exactly what the user asked, no other amount
    credit, withdraw = result.tool_executions
    assert (credit.request.name, json.loads(credit.request.arguments)) == (
        "credit",
        {"name": payee, "amount": amount},
    )
    assert (withdraw.request.name, json.loads(withdraw.request.arguments)) == (
        "withdraw",
        {"name": payer, "amount": amount},
    )
    # the withdrawal fails because the payer holds less than that, and the credit is undone
    assert amount > BankTools().balances[payer]
    assert withdraw.has_failed and withdraw.result == f"{payer} has insufficient funds to withdraw {amount}"
    assert result.content == (
        f"The transfer did not happen: {payer} has insufficient funds to withdraw {amount}. "
        "Tool 'credit' was executed successfully but was rolled back due to failure of tool 'withdraw'."
    )
    assert bank.balances == BankTools().balances


def test_the_transfer_script_follows_the_request_it_is_given() -> None:
    # a script that reads the request, as a model would: another amount, other accounts
    _, script = _story("Bank transfer, compensated")
    response = script(ChatRequest(messages=[UserMessage("Transfer 1,250 from Dmytro to Mario.")]))
    assert not isinstance(response, str)
    (call,) = response.tool_execution_requests
    assert json.loads(call.arguments) == {"name": "Mario", "amount": 1250}


def test_the_large_transfer_waits_for_approval_and_runs_once_where_it_is_approved(tmp_path: Path) -> None:
    # given: the approval story's teller, on the demo's accounts, journaled in a file
    question, _ = _story("Large transfer, approved by another process")
    bank = BankTools()
    url = f"sqlite:///{tmp_path}/journal.db"
    asking = teller(executor=LocalExecutor(), tools=[bank], journal=Journal(url))
    # when
    paused = asking.chat(question)
    # then: the transfer the user asked for waits, above the threshold, and nothing has moved
    assert paused.finish_reason is FinishReason.APPROVAL_REQUIRED and paused.content is None
    (waiting,) = paused.pending_approvals
    assert (waiting.tool, json.loads(waiting.arguments)) == (
        "transfer",
        {"payer": "Olena", "payee": "Dmytro", "amount": 1500},
    )
    assert APPROVAL_THRESHOLD < 1500 and waiting.state is ApprovalState.PENDING
    assert bank.balances == BankTools().balances
    # when: another teller (as in a second process) approves it, on the same journal
    approving = teller(executor=LocalExecutor(), tools=[bank], journal=Journal(url))
    result = approving.resume(paused.invocation_id or "", {waiting.call_id or "": approve()}, by="ops")
    # then: the transfer ran once, and the answer says so
    assert result is not None
    assert [(e.request.name, e.status) for e in result.tool_executions] == [("transfer", "success")]
    assert result.content == (
        "Done: Transferred 1500 from Olena to Dmytro; balances Olena 248500, Dmytro 1550."
    )
    assert (bank.balances["Olena"], bank.balances["Dmytro"]) == (248500, 1550)
    (call,) = Journal(url).calls(paused.invocation_id or "")
    assert (call.tool, call.state.value) == ("transfer", "succeeded")


def test_only_transfers_above_the_threshold_wait_for_approval(tmp_path: Path) -> None:
    def asks(tool: str, **arguments: object) -> bool:
        request = ToolExecutionRequest("call", tool, json.dumps(arguments))
        return large_transfer(request, None)  # type: ignore[arg-type]  # the policy reads no context

    assert asks("transfer", payer="Olena", payee="Dmytro", amount=APPROVAL_THRESHOLD + 0.01)
    assert not asks("transfer", payer="Olena", payee="Dmytro", amount=APPROVAL_THRESHOLD)
    assert not asks("credit", name="Dmytro", amount=5000)
    assert asks("transfer", payer="Olena", payee="Dmytro")  # no amount to read: a person decides
    # and a small transfer runs at once
    bank = BankTools()
    service = teller(executor=LocalExecutor(), tools=[bank], journal=Journal(f"sqlite:///{tmp_path}/j.db"))
    result = service.chat("Transfer 200 from Olena to Mario.")
    assert result.finish_reason is not FinishReason.APPROVAL_REQUIRED and not result.pending_approvals
    assert result.content == "Done: Transferred 200 from Olena to Mario; balances Olena 249800, Mario 1200."


def _weather_events() -> list[CallEvent]:
    question, script = _story("Weather, fanned out")
    response = script(ChatRequest(messages=[UserMessage(question)]))
    assert not isinstance(response, str)
    events = []
    for number, call in enumerate(response.tool_execution_requests):
        task_id = f"task-{number}"
        events.append(CallEvent(task_id, "tool.get_weather", "io", "queued", None, 10.0, call.arguments))
        events.append(
            CallEvent(task_id, "tool.get_weather", "io", "started", "io@demo", 10.1, call.arguments)
        )
        events.append(
            CallEvent(task_id, "tool.get_weather", "io", "success", "io@demo", 10.6, call.arguments)
        )
    return events


def test_the_live_table_shows_which_city_each_weather_call_is_for() -> None:
    # given: the demo's five weather calls, on a pipe (a line per change)
    out = io.StringIO()
    table = LiveTable(out)
    # when
    for event in _weather_events():
        table(event)
    # then: every row names its city
    done = [line for line in out.getvalue().splitlines() if " success " in line]
    assert len(done) == 5
    for line, city in zip(done, CITIES, strict=True):
        assert re.fullmatch(
            rf"    tool\.get_weather +io +io@demo +success +0\.60 s  city={city}, delay_s=0\.5", line
        ), line


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_table_is_redrawn_in_place_and_text_goes_below_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out = _Terminal()
    table = LiveTable(out)
    table.redraw = True
    events = _weather_events()
    # when: the calls progress, then an answer streams
    for event in events:
        table(event)
    table.write_text("Forecasts: ...")
    # then: each redraw clears below, writes the header and a row per call, and goes back to its top
    frames = out.getvalue().split("\x1b[J")[1:]
    assert len(frames) == len(events)
    last = frames[-1]
    rows = last.split("\x1b[6F")[0].splitlines()
    assert len(rows) == 6 and rows[0].split() == ["task", "pool", "worker", "state", "elapsed", "call"]
    assert [r.rsplit("city=", 1)[1].split(",")[0] for r in rows[1:]] == list(CITIES)
    # and the text starts below the table, not over it
    assert last.endswith("\x1b[6F\x1b[6EForecasts: ...")


def test_on_a_narrow_terminal_rows_are_cut_so_they_never_wrap(monkeypatch: pytest.MonkeyPatch) -> None:
    # given: a terminal 60 columns wide
    monkeypatch.setenv("COLUMNS", "60")
    out = _Terminal()
    table = LiveTable(out)
    table.redraw = True
    # when
    for event in _weather_events():
        table(event)
    # then: every line of the last frame fits, so moving up six lines finds the table's top
    rows = out.getvalue().split("\x1b[J")[-1].split("\x1b[6F")[0].splitlines()
    assert len(rows) == 6 and all(len(row) <= 59 for row in rows) and rows[1].endswith("…")


def test_arguments_are_shortened_to_fit_a_row() -> None:
    assert short_arguments('{"city": "London", "delay_s": 0.5}') == "city=London, delay_s=0.5"
    assert (
        short_arguments('{"ids": [1, 2], "when": {"day": "2026-12-24"}}')
        == 'ids=[1,2], when={"day":"2026-12-24"}'
    )
    assert short_arguments("") == ""
    assert short_arguments("not json at all") == "not json at all"
    long = short_arguments(json.dumps({"text": "x" * 100}))
    assert len(long) == 48 and long.endswith("…")
