"""The demo's stories read right: the calls the scripted model makes are the ones the user asked for,
and the live table tells calls of one tool apart."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.approvals import ApprovalState, approve
from orchestrator.cli.console import LiveTable, progress_text, short_arguments
from orchestrator.cli.demo import CITIES, STORIES, Script, write_summary
from orchestrator.executors.celery import CallEvent
from orchestrator.executors.local import LocalExecutor
from orchestrator.messages import UserMessage
from orchestrator.models.base import ChatRequest, FinishReason
from orchestrator.models.scripted import ScriptedChatModel
from orchestrator.result import Result
from orchestrator.saga.journal import Journal
from orchestrator.service import AiService
from workers.examples.bank import BankTools
from workers.examples.teller import APPROVAL_THRESHOLD, large_transfer, teller
from workers.protocol import ToolExecution, ToolExecutionRequest


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


def test_a_progress_message_too_long_for_its_row_is_cut_with_an_ellipsis() -> None:
    shown = progress_text(0.4, "copied " + "part " * 30)

    assert shown.startswith("40% copied part") and shown.endswith("…")
    assert len(shown) == len("40% ") + 48


LONG_WORKER = "io@worker-7f9c8d5b6-xk2lpq.tools.production.example.internal"  # 60 characters
# Where the state column begins in a row: after the indent, task 24, pool 6 and worker 12.
STATE_AT = 4 + 24 + 1 + 6 + 1 + 12 + 1


def _placed_events(worker: str, task_id: str, call_id: str) -> list[CallEvent]:
    arguments = json.dumps({"city": "Lisbon"})
    return [
        CallEvent(task_id, "tool.get_weather", "io", "queued", None, 10.0, arguments, call_id),
        CallEvent(task_id, "tool.get_weather", "io", "started", worker, 10.1, arguments, call_id),
        CallEvent(task_id, "tool.get_weather", "io", "success", worker, 10.6, arguments, call_id),
    ]


def test_a_worker_name_longer_than_its_column_is_cut_and_the_rows_stay_aligned() -> None:
    # given: one call on a worker with a short name, one on a worker with a 60-character name
    assert len(LONG_WORKER) == 60
    out = io.StringIO()
    table = LiveTable(out)
    # when
    for event in [*_placed_events("io@demo", "t1", "c1"), *_placed_events(LONG_WORKER, "t2", "c2")]:
        table(event)
    # then: the long name is cut to its column, ending with an ellipsis, and every row's state
    # starts where the others' does
    lines = out.getvalue().splitlines()
    assert len(lines) == 6
    assert [line[STATE_AT:].split()[0] for line in lines] == ["queued", "started", "success"] * 2
    assert {line[4 + 24 + 1 + 6 + 1 : STATE_AT] for line in lines[4:]} == {LONG_WORKER[:11] + "… "}
    assert LONG_WORKER not in out.getvalue()


def test_on_a_terminal_a_long_worker_name_keeps_the_rows_under_the_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out = _Terminal()
    table = LiveTable(out)
    table.redraw = True
    for event in [*_placed_events("io@demo", "t1", "c1"), *_placed_events(LONG_WORKER, "t2", "c2")]:
        table(event)
    header, *rows = out.getvalue().split("\x1b[J")[-1].split("\x1b[3F")[0].splitlines()
    assert header.index("state") == STATE_AT
    assert [row[STATE_AT:].split()[0] for row in rows] == ["success", "success"]


def _execution(
    name: str, call_id: str, result: str, *, status: str = "success", pool: str | None, worker: str | None
) -> ToolExecution:
    began = datetime(2026, 1, 1, tzinfo=UTC)
    return ToolExecution(
        ToolExecutionRequest(call_id, name, "{}"),
        result,
        status=status,
        started_at=began,
        finished_at=began + timedelta(milliseconds=20),
        pool=pool,
        worker=worker,
    )


def _summary_lines(tmp_path: Path, executions: list[ToolExecution], table: LiveTable) -> list[str]:
    out = io.StringIO()
    result = Result("done", executions, invocation_id="inv-1")
    write_summary(out, "Story", result, Journal(f"sqlite:///{tmp_path}/journal.db"), table.placed())
    return [line for line in out.getvalue().splitlines() if line.startswith("    ")]


def test_the_summary_cuts_a_long_result_with_an_ellipsis_on_one_line(tmp_path: Path) -> None:
    # given: a result longer than the summary shows, over two lines
    text = "Tool 'credit' was executed successfully but was rolled back\ndue to failure of tool 'withdraw'"
    executions = [_execution("credit", "c1", text, pool="io", worker="io@demo")]
    # when
    (line,) = _summary_lines(tmp_path, executions, LiveTable(io.StringIO()))
    # then: one line, the result cut to 70 characters, the last an ellipsis
    shown = line.split(" ms  ", 1)[1]
    assert len(shown) == 70 and shown.endswith("…")
    assert shown.startswith("Tool 'credit' was executed successfully but was rolled back due to")


def test_the_summary_names_the_pool_and_worker_the_live_table_showed(tmp_path: Path) -> None:
    # given: a call that timed out (its outcome knows the pool, not the worker) and a cancelled one
    # (its outcome knows neither), both seen starting on a worker by the live table
    table = LiveTable(io.StringIO())
    for task, pool, call_id, worker, end in [
        ("tool.rentCar", "heavy", "call_car", "heavy@demo", "timed_out"),
        ("tool.watch_fare", "io", "call_watch", "io@demo", "cancelled"),
    ]:
        table(CallEvent(call_id, task, pool, "queued", None, 1.0, "{}", call_id))
        table(CallEvent(call_id, task, pool, "started", worker, 1.1, "{}", call_id))
        table(CallEvent(call_id, task, pool, end, None, 3.1, "{}", call_id))
    executions = [
        _execution(
            "rentCar",
            "call_car",
            "Tool 'rentCar' did not finish",
            status="timed_out",
            pool="heavy",
            worker=None,
        ),
        _execution(
            "watch_fare",
            "call_watch",
            "Tool 'watch_fare' was cancelled",
            status="execution_error",
            pool=None,
            worker=None,
        ),
    ]
    # when
    car, watch = _summary_lines(tmp_path, executions, table)
    # then: each names where it ran, as the table did
    assert car.split()[:4] == ["rentCar", "timed_out", "heavy", "heavy@demo"]
    assert watch.split()[:4] == ["watch_fare", "execution_error", "io", "io@demo"]


def test_the_summary_widens_a_column_to_a_long_worker_name_and_stays_aligned(tmp_path: Path) -> None:
    executions = [
        _execution("get_weather", "c1", "sunny", pool="io", worker="io@demo"),
        _execution("get_weather", "c2", "rain", pool="io", worker=LONG_WORKER),
    ]

    short, long = _summary_lines(tmp_path, executions, LiveTable(io.StringIO()))

    assert LONG_WORKER in long
    assert short.index("20 ms") == long.index("20 ms")
