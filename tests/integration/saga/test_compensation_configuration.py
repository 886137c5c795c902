"""Saga acceptance tests (SPEC §7): which compensations a service accepts, and whom they are shown to.

How every case runs: tests/integration/saga/__init__.py.
"""

from __future__ import annotations

import pytest

import tests.integration.saga_tools as saga
from orchestrator import AiService, CeleryExecutor, LocalExecutor, ScriptedChatModel
from orchestrator.saga.journal import Journal
from tests.integration.saga._ledger import (
    COMPENSATION_NAMES,
    INSUFFICIENT,
    TOOL_NAMES,
    Ledger,
    rolled_back,
    saga_service,
)
from tests.integration.scripts import ask, call, results_of, tool_result
from workers import ToolDefinitionError, ToolExecution, compensate_for, tool

pytestmark = [pytest.mark.integration, pytest.mark.broker]


# -- 7. configuration ----------------------------------------------------------------------------


class MissingToolBank:
    @tool("Credits money to a bank account", pool=saga.POOL)
    def credit(self, ns: str, name: str, amount: int) -> str:
        return "credited"

    @compensate_for("missing")
    def undo_missing(self, ns: str, name: str, amount: int) -> None:
        raise AssertionError("never runs")


class _CreditOnly:
    @tool("Credits money to a bank account", pool=saga.POOL)
    def credit(self, ns: str, name: str, amount: int) -> str:
        return "credited"


class DroppedParameterBank(_CreditOnly):
    @compensate_for("credit")
    def uncredit(self, ns: str, name: str) -> None:
        raise AssertionError("never runs")


class RetypedParameterBank(_CreditOnly):
    @compensate_for("credit")
    def uncredit(self, ns: str, name: str, amount: str) -> None:
        raise AssertionError("never runs")


class ReorderedParameterBank(_CreditOnly):
    @compensate_for("credit")
    def uncredit(self, ns: str, amount: int, name: str) -> None:
        raise AssertionError("never runs")


class ExecutionAndMoreBank(_CreditOnly):
    @compensate_for("credit")
    def uncredit(self, execution: ToolExecution, amount: int) -> None:
        raise AssertionError("never runs")


WRONG_PARAMETERS = [DroppedParameterBank, RetypedParameterBank, ReorderedParameterBank, ExecutionAndMoreBank]
# Each refused bank, and what the refusal says.
REFUSED = [
    pytest.param(MissingToolBank, ['@compensate_for("missing")'], id="MissingToolBank"),
    *(
        pytest.param(bank, ['@compensate_for("credit")', "same parameters"], id=bank.__name__)
        for bank in WRONG_PARAMETERS
    ),
]


@pytest.mark.parametrize(("bank", "says"), REFUSED)
def test_a_compensation_for_a_missing_tool_or_with_other_parameters_is_refused_at_construction(
    executor: LocalExecutor | CeleryExecutor, journal: Journal, bank: type, says: list[str]
) -> None:
    # Given
    model = ScriptedChatModel([])

    # When
    with pytest.raises(ToolDefinitionError) as raised:
        AiService(
            chat_model=model,
            tools=[bank()],
            executor=executor,
            compensate_on_tool_errors=True,
            journal=journal,
        )

    # Then
    for text in says:
        assert text in str(raised.value)
    assert model.requests == []


def test_with_compensation_disabled_compensations_are_neither_checked_nor_run(
    executor: LocalExecutor | CeleryExecutor, ledger: Ledger, journal: Journal
) -> None:
    # Given: compensations that would be refused are accepted when compensation is off
    for bank in [MissingToolBank, *WRONG_PARAMETERS]:
        AiService(
            chat_model=ScriptedChatModel([]),
            tools=[bank()],
            executor=executor,
            compensate_on_tool_errors=False,
            journal=journal,
        )
    # and a transfer whose withdrawal fails, with compensation off
    ledger.open_accounts(Mario=50, Dmytro=10)
    credit = call("credit-1", "credit", ns=ledger.ns, name="Dmytro", amount=100)
    withdraw = call("withdraw-1", "withdraw", ns=ledger.ns, name="Mario", amount=100)
    model = ScriptedChatModel([ask(credit), ask(withdraw), "The withdrawal failed"])
    service = AiService(
        chat_model=model,
        tools=[saga.RedisBank()],
        executor=executor,
        compensate_on_tool_errors=False,
        journal=journal,
    )

    # When
    result = service.chat("Transfer 100 from Mario to Dmytro")

    # Then: nothing is undone, and the model reads the credit's own result
    assert result.content == "The withdrawal failed"
    assert ledger.undone() == []
    assert ledger.balances() == {"Mario": 50, "Dmytro": 110}
    assert results_of(model.requests[2]) == [
        tool_result(credit, "Credited 100 to Dmytro; balance 110", is_error=False),
        tool_result(withdraw, INSUFFICIENT, is_error=True),
    ]
    assert [e.status for e in result.tool_executions] == ["success", "execution_error"]
    assert journal.compensations() == []


def test_inherited_compensation_undoes_an_inherited_tool(
    executor: LocalExecutor | CeleryExecutor, ledger: Ledger, journal: Journal
) -> None:
    # Given: SeatDesk inherits reserve_seat and its compensation; a seat is reserved, then the car fails
    seat = call("seat-1", "reserve_seat", ns=ledger.ns, seat="12A")
    car = call("car-1", "rentCar", ns=ledger.ns, city="Rome", days=2, fail=True)
    model = ScriptedChatModel([ask(seat), ask(car), "Sorry"])
    service = saga_service(model, executor, journal, tools=[saga.SeatDesk(), saga.RedisTravel()])

    # When
    result = service.chat("Reserve seat 12A and rent a car")

    # Then
    assert result.content == "Sorry"
    assert model.requests[1].messages[-1] == tool_result(seat, "Seat 12A reserved", is_error=False)
    assert ledger.undone() == ["release_seat 12A"]
    assert ledger.seats() == set()
    assert results_of(model.requests[2]) == [
        tool_result(seat, rolled_back("reserve_seat", "rentCar"), is_error=True),
        tool_result(car, "No car in Rome for 2 days available", is_error=True),
    ]


def test_compensations_are_never_shown_to_the_model(
    executor: LocalExecutor | CeleryExecutor, journal: Journal
) -> None:
    # Given
    model = ScriptedChatModel(["Hello"])
    service = saga_service(model, executor, journal)

    # When
    service.chat("Hi")

    # Then
    names = [s.name for s in model.requests[0].tool_specifications]
    assert sorted(names) == sorted(TOOL_NAMES)
    assert not set(names) & COMPENSATION_NAMES
