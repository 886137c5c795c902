"""A tool search the model asked for badly is a result the model reads, not a failed tool call: it
rolls nothing back, and it does not hold up an immediate return."""

from __future__ import annotations

import json

import pytest

from orchestrator import (
    AiMessage,
    AiService,
    FinishReason,
    LocalExecutor,
    ScriptedChatModel,
    SimpleToolSearchStrategy,
    ToolExecutionRequest,
)
from orchestrator.saga.journal import Journal
from workers import ReturnBehavior, SearchBehavior, compensate_for, tool

SEARCH = SimpleToolSearchStrategy.NAME
BAD_SEARCH = ToolExecutionRequest("s-1", SEARCH, json.dumps({"terms": "not an array"}))


class Ledger:
    """A compensable deposit the model always sees, and a tool that ends the invocation at once."""

    def __init__(self) -> None:
        self.undone: list[int] = []

    @tool("Deposits money", search_behavior=SearchBehavior.ALWAYS_VISIBLE)
    def deposit(self, amount: int) -> str:
        return f"Deposited {amount}"

    @compensate_for("deposit")
    def undeposit(self, amount: int) -> None:
        self.undone.append(amount)

    @tool(
        "Closes the ledger",
        search_behavior=SearchBehavior.ALWAYS_VISIBLE,
        return_behavior=ReturnBehavior.IMMEDIATE_IF_LAST,
    )
    def close(self) -> str:
        return "closed"


def _service(ledger: Ledger, script: list[AiMessage | str], journal: Journal) -> AiService:
    return AiService(
        chat_model=ScriptedChatModel(script),
        tools=[ledger],
        executor=LocalExecutor(compensation_retries=0),
        tool_search_strategy=SimpleToolSearchStrategy(),
        compensate_on_tool_errors=True,
        journal=journal,
    )


def _deposit(call_id: str) -> ToolExecutionRequest:
    return ToolExecutionRequest(call_id, "deposit", json.dumps({"amount": 5}))


@pytest.mark.parametrize("same_batch", [True, False], ids=["same batch", "next batch"])
def test_a_malformed_search_compensates_nothing(journal: Journal, same_batch: bool) -> None:
    # given: a compensable deposit succeeds, then (with it or in the next turn) a malformed search
    if same_batch:
        script: list[AiMessage | str] = [
            AiMessage(tool_execution_requests=[_deposit("d-1"), BAD_SEARCH]),
            "done",
        ]
    else:
        script = [
            AiMessage(tool_execution_requests=[_deposit("d-1")]),
            AiMessage(tool_execution_requests=[BAD_SEARCH]),
            "done",
        ]
    ledger = Ledger()

    # when
    result = _service(ledger, script, journal).chat("deposit 5")

    # then: the deposit stands, the model read the search's arguments error
    assert ledger.undone == []
    assert result.content == "done"
    deposit, search = result.tool_executions
    assert (deposit.status, deposit.has_failed) == ("success", False)
    assert (search.status, search.has_failed) == ("arguments_error", True)
    assert journal.compensations(result.invocation_id) == []


def test_a_malformed_search_does_not_hold_up_an_immediate_return(journal: Journal) -> None:
    # given: a malformed search, then a tool that returns at once when it is the batch's last
    script: list[AiMessage | str] = [
        AiMessage(tool_execution_requests=[BAD_SEARCH, ToolExecutionRequest("c-1", "close", "{}")])
    ]

    # when
    result = _service(Ledger(), script, journal).chat("close")

    # then: the invocation returns with the tool results, without asking the model again
    assert result.finish_reason is FinishReason.TOOL_EXECUTION
    assert [e.request.name for e in result.tool_executions] == [SEARCH, "close"]
