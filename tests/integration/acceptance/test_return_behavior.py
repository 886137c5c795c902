"""Acceptance tests of `AiService`: when an invocation returns a tool's result at once (SPEC §5).

How every case runs: tests/integration/acceptance/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import tests.integration.acceptance_tools as acc
from orchestrator import AiService, AiServiceTool, FinishReason, ScriptedChatModel, ToolExecuted, UserMessage
from tests.integration.acceptance._service import (
    FINAL,
    IF_LAST,
    IMMEDIATE,
    TO_LLM,
    TOOL_OF,
    assert_ran_where_expected,
    executions,
    explicit_handlers,
    invoke,
    run_stream,
    service_for,
)
from tests.integration.scripts import ask, call, tool_result
from workers import ReturnBehavior, ToolSpecification

pytestmark = pytest.mark.integration


# -- 1. return behavior (SPEC §5) ----------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One batch of calls (one per behavior), which call fails (if any), and the expected outcome."""

    behaviors: tuple[ReturnBehavior, ...]
    failed: int | None
    immediate: bool

    @property
    def id(self) -> str:
        names = "+".join(b.value for b in self.behaviors)
        return f"{names}/{'ok' if self.failed is None else f'call{self.failed}-fails'}"


# The rule: return at once iff no call of the batch failed AND (the last call is IMMEDIATE_IF_LAST
# or every call is IMMEDIATE / IMMEDIATE_IF_LAST). 3 single calls x {ok, failed} = 6 rows, and the 6
# pairs below x {ok, one call failed} = 12 rows. A failing call keeps its tool's behavior.
#
#   batch                              ok            one call fails
#   [IMMEDIATE]                        immediate     to model
#   [IMMEDIATE_IF_LAST]                immediate     to model
#   [TO_LLM]                           to model      to model
#   [IMMEDIATE, IMMEDIATE]             immediate     to model   (2nd fails)
#   [TO_LLM, IMMEDIATE_IF_LAST]        immediate     to model   (1st fails; the last is still IF_LAST)
#   [IMMEDIATE_IF_LAST, TO_LLM]        to model      to model   (2nd fails)
#   [IMMEDIATE, TO_LLM]                to model      to model   (1st fails)
#   [IMMEDIATE, IMMEDIATE_IF_LAST]     immediate     to model   (1st fails)
#   [IMMEDIATE_IF_LAST, IMMEDIATE]     immediate     to model   (2nd fails; all immediate otherwise)
# Each batch: whether it returns at once when no call fails, and which call fails in its failing row
# (that row always goes to the model).
BATCHES: list[tuple[tuple[ReturnBehavior, ...], bool, int]] = [
    ((IMMEDIATE,), True, 0),
    ((IF_LAST,), True, 0),
    ((TO_LLM,), False, 0),
    ((IMMEDIATE, IMMEDIATE), True, 1),
    ((TO_LLM, IF_LAST), True, 0),
    ((IF_LAST, TO_LLM), False, 1),
    ((IMMEDIATE, TO_LLM), False, 0),
    ((IMMEDIATE, IF_LAST), True, 0),
    ((IF_LAST, IMMEDIATE), True, 1),
]
ROWS = [
    row
    for behaviors, immediate_if_ok, failing in BATCHES
    for row in (Row(behaviors, None, immediate_if_ok), Row(behaviors, failing, False))
]


def test_the_table_has_the_18_distinct_rows() -> None:
    assert len(ROWS) == 18
    assert len({(r.behaviors, r.failed) for r in ROWS}) == 18


@pytest.mark.parametrize("mode", ["chat", "stream"])
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_return_behavior_rule(executor: Any, row: Row, mode: str) -> None:
    # given one response calling one tool per behavior of the row, then a final text
    calls = [
        call(f"c{i}", TOOL_OF[b], label=f"#{i}", fail=i == row.failed) for i, b in enumerate(row.behaviors)
    ]
    model = ScriptedChatModel([ask(*calls), FINAL])
    service = service_for(model, executor, **explicit_handlers())
    expected_results = [
        (f"c{i}", TOOL_OF[b], f"{b.value} #{i} {'failed' if i == row.failed else 'done'}", i == row.failed)
        for i, b in enumerate(row.behaviors)
    ]

    # when
    if mode == "stream":
        events, result = run_stream(service)
        executed = [str(e.execution.request.id) for e in events if isinstance(e, ToolExecuted)]
        assert sorted(executed) == [c.id for c in calls]  # one ToolExecuted per call
    else:
        result = service.chat("go")

    # then
    assert [(e[0], e[1], e[2], e[3]) for e in executions(result)] == expected_results
    assert [e.status for e in result.tool_executions] == [
        "execution_error" if i == row.failed else "success" for i in range(len(calls))
    ]
    assert_ran_where_expected(result, executor)
    if row.immediate:
        assert result.content is None
        assert result.finish_reason is FinishReason.TOOL_EXECUTION
        assert len(model.requests) == 1
        assert model.remaining == 1
    else:
        assert result.content == FINAL
        assert result.finish_reason is FinishReason.STOP
        assert len(model.requests) == 2
        assert model.requests[1].messages == [
            UserMessage("go"),
            ask(*calls),
            *(
                tool_result(c, text, is_error=failed)
                for c, (_, _, text, failed) in zip(calls, expected_results, strict=True)
            ),
        ]


@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_immediate_return_holds_every_execution_of_the_invocation(executor: Any, mode: str) -> None:
    # given a TO_LLM round, then an IMMEDIATE one
    first, second = call("r1", "acc_to_llm", label="a"), call("r2", "acc_immediate", label="b")
    model = ScriptedChatModel([ask(first), ask(second), FINAL])
    service = service_for(model, executor, **explicit_handlers())

    # when
    result = invoke(service, mode)

    # then the invocation returns after the second round with both executions
    assert (result.content, result.finish_reason) == (None, FinishReason.TOOL_EXECUTION)
    assert executions(result) == [
        ("r1", "acc_to_llm", "TO_LLM a done", False, "success"),
        ("r2", "acc_immediate", "IMMEDIATE b done", False, "success"),
    ]
    assert len(model.requests) == 2


@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_programmatic_tool_defaults_to_to_llm(executor: Any, mode: str) -> None:
    # given a programmatic tool built without a return behavior, called with an IMMEDIATE tool
    programmatic = AiServiceTool(
        ToolSpecification(name="acc_programmatic", description="Runs in the orchestrator"),
        lambda request, context: f"programmatic {request.id}",
    )
    calls = [call("p1", "acc_immediate", label="x"), call("p2", "acc_programmatic")]
    model = ScriptedChatModel([ask(*calls), FINAL])
    service = AiService(chat_model=model, tools=[acc, programmatic], executor=executor, **explicit_handlers())

    # when
    result = invoke(service, mode)

    # then it counts as TO_LLM: not every call is immediate, so the model is asked again
    assert programmatic.return_behavior is ReturnBehavior.TO_LLM
    assert (result.content, result.finish_reason) == (FINAL, FinishReason.STOP)
    assert model.requests[1].messages[-2:] == [
        tool_result(calls[0], "IMMEDIATE x done", is_error=False),
        tool_result(calls[1], "programmatic p2", is_error=False),
    ]
