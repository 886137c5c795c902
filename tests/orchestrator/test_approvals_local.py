"""Approvals in one process, on `LocalExecutor` and a SQLite journal: what pauses (a tool's mark, the
service's policy), what a decision may and may not do (edited arguments, the hash it is bound to, a
second or contrary decision), and what `stream()` / `stream_resume()` tell. The cross-process
guarantees are tested on real workers and PostgreSQL in tests/integration/approvals."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from orchestrator import (
    AiMessage,
    AiService,
    ApprovalConflictError,
    ApprovalError,
    ApprovalRequested,
    ApprovalState,
    InvocationResumed,
    InvocationState,
    Journal,
    LocalExecutor,
    OrchestratorError,
    ScriptedChatModel,
    ToolExecuted,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    approve,
    reject,
)
from orchestrator.models.base import ChatRequest, FinishReason
from orchestrator.result import CompleteResponse
from orchestrator.saga.async_journal import AsyncJournal
from workers import ToolErrorVisibleToLlm, compensate_for, tool
from workers.runtime.catalog import CatalogTool
from workers.tools.registry import ToolRegistry

RAN: list[dict[str, Any]] = []
_T = TypeVar("_T")


@tool(requires_approval=True)
def pay(to: str, amount: int) -> str:
    RAN.append({"to": to, "amount": amount})
    return f"paid {amount} to {to}"


@tool
def note(text: str) -> str:
    RAN.append({"note": text})
    return "noted"


def _one_batch(*requests: ToolExecutionRequest) -> Callable[[ChatRequest], AiMessage | str]:
    """A model that asks for one batch of `requests`, then answers with their results, joined."""

    def script(request: ChatRequest) -> AiMessage | str:
        results = [m for m in request.messages if isinstance(m, ToolExecutionResultMessage)]
        if results:
            return " | ".join(r.text for r in results)
        return AiMessage(tool_execution_requests=list(requests))

    return script


_script = _one_batch(
    ToolExecutionRequest("n1", "note", json.dumps({"text": "before"})),
    ToolExecutionRequest("p1", "pay", json.dumps({"to": "mario", "amount": 100})),
)


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def _service(journal: Journal, **options: Any) -> AiService:
    return AiService(
        chat_model=ScriptedChatModel(_script),
        tools=[pay, note],
        executor=LocalExecutor(),
        journal=journal,
        **options,
    )


def test_a_marked_tool_pauses_after_the_calls_that_need_no_approval_ran(journal: Journal) -> None:
    result = _service(journal).chat("go")

    assert result.finish_reason is FinishReason.APPROVAL_REQUIRED and result.content is None
    [waiting] = result.pending_approvals
    assert (waiting.call_id, waiting.tool, waiting.state) == ("p1", "pay", ApprovalState.PENDING)
    assert json.loads(waiting.arguments) == {"to": "mario", "amount": 100}
    assert RAN == [{"note": "before"}]
    record = journal.invocation(result.invocation_id or "")
    assert record is not None and record.state is InvocationState.PAUSED


def test_the_model_reads_every_result_of_the_batch_in_request_order_once_approved(journal: Journal) -> None:
    service = _service(journal)
    paused = service.chat("go")

    done = service.resume(paused.invocation_id or "", {"p1": approve()})

    assert done is not None and done.content == "noted | paid 100 to mario"
    assert [e.request.name for e in done.tool_executions] == ["note", "pay"]
    assert RAN == [{"note": "before"}, {"to": "mario", "amount": 100}]


def test_a_policy_decides_per_call(journal: Journal) -> None:
    def notes_need_approval(request: ToolExecutionRequest, context: Any) -> bool:
        return request.name == "note" and context.memory_id == "default"

    result = _service(journal, approval_policy=notes_need_approval).chat("go")

    assert sorted(a.call_id for a in result.pending_approvals) == ["n1", "p1"]
    assert RAN == []


def test_edited_arguments_run_as_edited_and_a_decision_for_other_arguments_is_refused(
    journal: Journal,
) -> None:
    service = _service(journal)
    paused = service.chat("go")
    invocation_id = paused.invocation_id or ""

    with pytest.raises(ApprovalConflictError, match="other arguments"):
        service.resume(invocation_id, {"p1": approve(arguments_hash="0" * 64)})
    with pytest.raises(ApprovalError, match="no call nope"):
        service.resume(invocation_id, {"nope": approve()})
    done = service.resume(invocation_id, {"p1": approve({"to": "mario", "amount": 5})})

    assert done is not None and done.content == "noted | paid 5 to mario"
    assert RAN[-1] == {"to": "mario", "amount": 5}


def test_deciding_again_is_idempotent_and_a_contrary_decision_is_refused(journal: Journal) -> None:
    service = _service(journal)
    invocation_id = service.chat("go").invocation_id or ""
    done = service.resume(invocation_id, {"p1": reject("not today")})
    assert done is not None and done.content == "noted | The user rejected the call to 'pay': not today"

    assert service.resume(invocation_id, {"p1": reject("not today")}) is None
    with pytest.raises(ApprovalConflictError, match="already rejected"):
        service.resume(invocation_id, {"p1": approve()})
    assert {"to": "mario", "amount": 100} not in RAN


def test_stream_and_stream_resume_tell_the_pause_and_the_decisions(journal: Journal) -> None:
    service = _service(journal)

    async def run() -> tuple[list[Any], list[Any]]:
        first = [event async for event in service.stream("go")]
        invocation_id = first[-1].result.invocation_id
        second = [event async for event in service.stream_resume(invocation_id, {"p1": approve()})]
        return first, second

    first, second = asyncio.run(run())

    requested = [e for e in first if isinstance(e, ApprovalRequested)]
    assert [a.call_id for a in requested[0].approvals] == ["p1"]
    assert first[-1].result.finish_reason is FinishReason.APPROVAL_REQUIRED
    assert isinstance(second[0], InvocationResumed)
    assert [(a.call_id, a.state) for a in second[0].approvals] == [("p1", ApprovalState.APPROVED)]
    assert [e.execution.request.name for e in second if isinstance(e, ToolExecuted)] == ["pay"]
    assert (
        isinstance(second[-1], CompleteResponse) and second[-1].result.content == "noted | paid 100 to mario"
    )


class Desk:
    """A booking that can be undone, a payment that needs a person, and a check that always fails."""

    def __init__(self) -> None:
        self.undone: list[str] = []

    @tool("Books a room")
    def book(self, room: str) -> str:
        RAN.append({"book": room})
        return f"booked {room}"

    @compensate_for("book")
    def unbook(self, room: str) -> None:
        self.undone.append(room)

    @tool("Pays, once a person says so", requires_approval=True)
    def settle(self, amount: int) -> str:
        RAN.append({"settle": amount})
        return f"settled {amount}"

    @tool("A check that always fails")
    def check(self) -> str:
        raise ToolErrorVisibleToLlm.from_message("check failed")


def _desk_service(journal: Journal, desk: Desk, *, compensating: bool) -> AiService:
    script = _one_batch(
        ToolExecutionRequest("b1", "book", json.dumps({"room": "12"})),
        ToolExecutionRequest("s1", "settle", json.dumps({"amount": 90})),
        ToolExecutionRequest("c1", "check", "{}"),
    )
    return AiService(
        chat_model=ScriptedChatModel(script),
        tools=[desk],
        executor=LocalExecutor(),
        journal=journal,
        compensate_on_tool_errors=compensating,
    )


def test_a_call_waiting_in_a_batch_that_failed_and_was_undone_is_never_asked_for(journal: Journal) -> None:
    desk = Desk()

    result = _desk_service(journal, desk, compensating=True).chat("go")

    # the batch was undone, so the payment waiting in it would stand alone: nobody is asked, it never runs
    assert result.finish_reason is not FinishReason.APPROVAL_REQUIRED and result.pending_approvals == []
    assert RAN == [{"book": "12"}] and desk.undone == ["12"]
    not_run = (
        "The call to 'settle' did not run: tool 'check' of the same batch failed, "
        "so the batch was rolled back"
    )
    assert result.content is not None and not_run in result.content
    assert [e.status for e in result.tool_executions if e.request.name == "settle"] == ["not_run"]
    assert journal.approvals(result.invocation_id or "") == []
    record = journal.invocation(result.invocation_id or "")
    assert record is not None and record.state is InvocationState.SUCCEEDED


def test_without_compensation_a_failed_batch_still_asks_for_its_waiting_call(journal: Journal) -> None:
    desk = Desk()

    result = _desk_service(journal, desk, compensating=False).chat("go")

    assert [a.call_id for a in result.pending_approvals] == ["s1"]
    assert desk.undone == []


def test_the_catalog_tells_remote_orchestrators_a_tool_needs_approval(tmp_path: Path) -> None:
    definition = ToolRegistry([pay]).get("pay")
    assert definition is not None

    advertised = CatalogTool.from_json(CatalogTool.of(definition).to_json())

    assert advertised.definition().requires_approval


class _CancelledAsItPaused(AsyncJournal):
    """A journal whose write pausing the invocation is made, then its caller is cancelled."""

    cancelled = False

    async def run(self, fn: Callable[[Journal], _T]) -> _T:
        result = await super().run(fn)
        if not self.cancelled and await super().run(lambda j: j.approvals(None)):
            self.cancelled = True
            raise asyncio.CancelledError
        return result


def test_an_invocation_cancelled_as_it_paused_leaves_no_approval_pending(journal_file: Path) -> None:
    # given: a batch whose approval is journaled just as the invocation is cancelled
    journal = _CancelledAsItPaused(f"sqlite:///{journal_file}")
    service = _service(cast(Journal, journal))

    # when: it runs
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(service.achat("go", invocation_id="c0ffee00-0000-4000-8000-000000000001"))

    # then: it is cancelled, and so is the approval nobody will be asked for
    reader = Journal(f"sqlite:///{journal_file}")
    record = reader.invocation("c0ffee00-0000-4000-8000-000000000001")
    assert journal.cancelled and record is not None and record.state is InvocationState.CANCELLED
    assert [(a.call_id, a.state) for a in reader.approvals(None)] == [("p1", ApprovalState.CANCELLED)]


@pytest.mark.parametrize("edited", ['{"amount": NaN}', '{"amount": -Infinity}', {"amount": float("inf")}])
def test_edited_arguments_holding_no_json_number_are_refused(edited: Any) -> None:
    with pytest.raises(OrchestratorError, match="Edited arguments are not valid JSON: amount: "):
        approve(edited)
