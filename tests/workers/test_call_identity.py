"""`ToolCallIdentity`: injected into tools and compensations like `InvocationParameters`, never shown
to the model, with one idempotency key per call on every attempt."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from orchestrator import LocalExecutor
from orchestrator.executors.base import idempotency_key
from tests.workers._schemas import parameters
from workers import (
    InvocationContext,
    ToolCallIdentity,
    ToolDefinitionError,
    ToolExecution,
    ToolExecutionRequest,
    compensate_for,
    tool,
    tool_specifications_from,
)
from workers.calls.compensating import run_compensation
from workers.calls.invocation import Invocation
from workers.calls.runner import call_identity, run_tool
from workers.tools import check_compensations, discover_tools

INVOCATION_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
INVOCATION = Invocation(InvocationContext(invocation_id=INVOCATION_ID))
AMOUNT_ONLY = parameters(["amount"], amount="integer")
"""The parameters the model sees of a tool taking an `amount` and the identity."""


@tool
def charge(amount: int, call: ToolCallIdentity) -> dict[str, object]:
    """Charges a card."""
    return {"key": call.idempotency_key, "call_id": call.call_id, "attempt": call.attempt}


@tool
def charge_optional(amount: int, call: ToolCallIdentity | None) -> str:
    """Charges a card, the identity declared optional."""
    assert call is not None
    return call.idempotency_key


class Payments:
    """Its compensation takes the tool's parameters, plus the identity."""

    def __init__(self) -> None:
        self.undone: list[tuple[object, ToolCallIdentity]] = []

    @tool("Pays")
    def pay(self, amount: int) -> str:
        return f"paid {amount}"

    @compensate_for("pay")
    def refund(self, amount: int, call: ToolCallIdentity) -> None:
        self.undone.append((amount, call))


class Transfers:
    """Its compensation takes the execution, plus the identity."""

    def __init__(self) -> None:
        self.undone: list[tuple[object, ToolCallIdentity]] = []

    @tool("Transfers")
    def transfer(self, amount: int) -> str:
        return "sent"

    @compensate_for("transfer")
    def reverse(self, execution: ToolExecution, call: ToolCallIdentity) -> None:
        self.undone.append((execution, call))


PAYMENT = ToolExecution(ToolExecutionRequest("c-5", "pay", '{"amount": 7}'), "paid 7")
TRANSFER = ToolExecution(ToolExecutionRequest("c-6", "transfer", '{"amount": 1}'), "sent")


def test_the_identity_is_injected_and_never_shown_to_the_model() -> None:
    # given
    (specification,) = tool_specifications_from(charge)

    # then: only `amount` is a parameter the model sees
    assert specification.parameters == AMOUNT_ONLY

    # when: the call runs
    (definition,) = discover_tools(charge)
    outcome = run_tool(definition, ToolExecutionRequest("c-1", "charge", '{"amount": 3}'), INVOCATION)

    # then: the tool received invocation id + call id as its key, first attempt
    assert outcome.result_object == {"key": f"{INVOCATION_ID}:c-1", "call_id": "c-1", "attempt": 1}


def test_an_optional_identity_is_injected_too() -> None:
    (definition,) = discover_tools(charge_optional)

    outcome = run_tool(
        definition, ToolExecutionRequest("c-2", "charge_optional", '{"amount": 1}'), INVOCATION
    )

    assert outcome.text == f"{INVOCATION_ID}:c-2"
    assert tool_specifications_from(charge_optional)[0].parameters == AMOUNT_ONLY


def test_the_key_is_the_one_the_orchestrator_journals_and_dispatches() -> None:
    # given: a call with an id and one without
    with_id = ToolExecutionRequest("c-1", "charge", "{}")
    without_id = ToolExecutionRequest(None, "charge", "{}")

    # then: one definition of the key on both sides
    for request in (with_id, without_id):
        assert call_identity(INVOCATION, request).idempotency_key == idempotency_key(INVOCATION, request)
    assert call_identity(INVOCATION, without_id).call_id is None


def test_a_dispatched_key_and_attempt_are_passed_through() -> None:
    (definition,) = discover_tools(charge)
    request = ToolExecutionRequest("c-1", "charge", '{"amount": 3}')

    outcome = run_tool(
        definition, request, INVOCATION, call_identity(INVOCATION, request, attempt=4, key="k-9")
    )

    assert outcome.result_object == {"key": "k-9", "call_id": "c-1", "attempt": 4}


def test_an_injected_identity_cannot_have_a_default() -> None:
    def with_default(amount: int, call: ToolCallIdentity = None) -> str:  # type: ignore[assignment]
        return ""

    with pytest.raises(ToolDefinitionError, match=r'Parameter "call" of tool "with_default" is injected'):
        discover_tools(tool(with_default))


@pytest.mark.parametrize(
    ("kind", "execution", "received"),
    [
        pytest.param(Payments, PAYMENT, 7, id="with the tool's parameters"),
        pytest.param(Transfers, TRANSFER, TRANSFER, id="with the execution"),
    ],
)
def test_a_compensation_may_ask_for_the_identity_the_tool_does_not_take(
    kind: type[Payments | Transfers], execution: ToolExecution, received: object
) -> None:
    # given: a compensation taking the tool's parameters or the execution, plus the identity
    tools = kind()

    # then: it passes the registration check
    check_compensations(tools)

    # when: it undoes a call
    (definition,) = discover_tools(tools)
    outcome = run_compensation(definition, execution, INVOCATION)

    # then: it received what it asked for, and the undone call's identity
    call_id = execution.request.id
    assert not outcome.is_error, outcome.text
    assert tools.undone == [
        (received, ToolCallIdentity(INVOCATION_ID, call_id, f"{INVOCATION_ID}:{call_id}", 1))
    ]


def test_a_compensation_with_other_visible_parameters_is_still_refused() -> None:
    class Wrong:
        @tool("Pays")
        def pay(self, amount: int) -> str:
            return ""

        @compensate_for("pay")
        def refund(self, total: int, call: ToolCallIdentity) -> None: ...

    with pytest.raises(ToolDefinitionError, match="same parameters"):
        check_compensations(Wrong())


class Flaky(Exception):
    """Retryable."""


def test_local_retries_count_attempts_under_one_key() -> None:
    # given: a tool that fails twice with an error it declares retryable
    seen: list[ToolCallIdentity] = []

    @tool(retries=2, retry_on=(Flaky,))
    def flaky(call: ToolCallIdentity) -> int:
        seen.append(call)
        if call.attempt < 3:
            raise Flaky("not yet")
        return call.attempt

    executor = LocalExecutor(tools=[flaky], retry_backoff_s=0.01, retry_backoff_max_s=0.02)
    try:
        # when
        outcome = executor.run(ToolExecutionRequest("c-3", "flaky", "{}"), INVOCATION)
    finally:
        executor.close()

    # then
    assert outcome.text == "3"
    key = f"{INVOCATION_ID}:c-3"
    assert seen == [ToolCallIdentity(INVOCATION_ID, "c-3", key, attempt) for attempt in (1, 2, 3)]


def test_local_compensation_retries_count_attempts_under_the_call_key() -> None:
    # given: a compensation that fails once
    attempts: list[ToolCallIdentity] = []

    class Once:
        @tool("Books")
        def book(self, seat: str) -> str:
            return "booked"

        @compensate_for("book")
        def unbook(self, seat: str, call: ToolCallIdentity) -> None:
            attempts.append(call)
            if call.attempt == 1:
                raise RuntimeError("busy")

    executor = LocalExecutor(retry_backoff_s=0.01, retry_backoff_max_s=0.02)
    (definition,) = discover_tools(Once())
    execution = ToolExecution(ToolExecutionRequest("c-4", "book", '{"seat": "1A"}'), "booked")
    try:
        # when
        outcome = asyncio.run(executor.compensate(definition, execution, INVOCATION))
    finally:
        executor.close()

    # then
    assert not outcome.is_error, outcome.text
    key = f"{INVOCATION_ID}:c-4"
    assert attempts == [ToolCallIdentity(INVOCATION_ID, "c-4", key, n) for n in (1, 2)]
