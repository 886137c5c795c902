"""Saga acceptance tests (SPEC §7): what a failure rolls back, in which order, and never twice.

How every case runs: tests/integration/saga/__init__.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator import (
    AiMessage,
    CeleryExecutor,
    LocalExecutor,
    MessageWindowChatMemory,
    ScriptedChatModel,
    UserMessage,
)
from orchestrator.saga.journal import Journal
from tests.integration.saga._ledger import (
    BOOKINGS,
    IN_REQUEST_ORDER,
    IN_REVERSE_ORDER,
    INSUFFICIENT,
    SOLD_OUT,
    Ledger,
    assert_trip_undone_latest_first,
    rolled_back,
    saga_service,
    travel_calls,
)
from tests.integration.scripts import ask, call, results_of, tool_result

pytestmark = [pytest.mark.integration, pytest.mark.broker]


# -- 1. the bank transfer ------------------------------------------------------------------------


def test_failed_withdrawal_rolls_back_the_earlier_credit(
    executor: LocalExecutor | CeleryExecutor, ledger: Ledger, journal: Journal
) -> None:
    # Given: Mario holds 50, Dmytro 10; the model credits Dmytro 100, then withdraws 100 from Mario
    ledger.open_accounts(Mario=50, Dmytro=10)
    credit = call("credit-1", "credit", ns=ledger.ns, name="Dmytro", amount=100)
    withdraw = call("withdraw-1", "withdraw", ns=ledger.ns, name="Mario", amount=100)
    model = ScriptedChatModel([ask(credit), ask(withdraw), "The transfer could not be made"])
    memory = MessageWindowChatMemory(50)
    service = saga_service(model, executor, journal, chat_memory=memory)

    # When
    result = service.chat("Transfer 100 from Mario to Dmytro")

    # Then: no exception; the credit was undone exactly once and the balances are exactly as before
    assert result.content == "The transfer could not be made"
    assert ledger.undone() == ["uncredit Dmytro 100"]
    assert ledger.balances() == {"Mario": 50, "Dmytro": 10}
    # the model saw the credit succeed in round trip 2, and rolled back in round trip 3
    assert len(model.requests) == 3
    assert model.requests[1].messages[-1] == tool_result(
        credit, "Credited 100 to Dmytro; balance 110", is_error=False
    )
    rolled = tool_result(credit, rolled_back("credit", "withdraw"), is_error=True)
    assert rolled.text == (
        "Tool 'credit' was executed successfully but was rolled back due to failure of tool 'withdraw'"
    )
    conversation = [
        UserMessage("Transfer 100 from Mario to Dmytro"),
        ask(credit),
        rolled,
        ask(withdraw),
        tool_result(withdraw, INSUFFICIENT, is_error=True),
    ]
    assert model.requests[2].messages == conversation
    assert memory.messages() == [*conversation, AiMessage("The transfer could not be made")]
    credited, withdrawn = result.tool_executions
    assert (credited.request, credited.status, credited.result) == (
        credit,
        "rolled_back",
        rolled_back("credit", "withdraw"),
    )
    assert (withdrawn.request, withdrawn.has_failed, withdrawn.status) == (withdraw, True, "execution_error")
    # and the journal shows the credit compensated by a compensation that succeeded
    assert result.invocation_id is not None
    calls = journal.calls(result.invocation_id)
    assert [(c.call_id, c.tool, c.state) for c in calls] == [
        ("credit-1", "credit", "compensated"),
        ("withdraw-1", "withdraw", "failed"),
    ]
    compensations = journal.compensations(result.invocation_id)
    assert [(c.tool_call_id, c.tool, c.state) for c in compensations] == [
        (calls[0].id, "credit", "succeeded")
    ]
    record = journal.invocation(result.invocation_id)
    assert record is not None and record.state == "succeeded"


# -- 2. parallel bookings ------------------------------------------------------------------------


@pytest.mark.parametrize("failing", BOOKINGS)
def test_failed_booking_undoes_the_parallel_others_latest_first(
    executor: LocalExecutor | CeleryExecutor, ledger: Ledger, journal: Journal, failing: str
) -> None:
    # Given: flight, hotel and car booked in one response, completing in request order; one fails
    requests = travel_calls(ledger.ns, failing, IN_REQUEST_ORDER)
    model = ScriptedChatModel([ask(*requests), "Sorry, the trip could not be booked"])
    service = saga_service(model, executor, journal)

    # When
    result = service.chat("Book me a trip to Rome")

    # Then: the other two are cancelled, latest first; no booking is left; the texts name the failure
    assert result.content == "Sorry, the trip could not be booked"
    assert_trip_undone_latest_first(ledger, journal, model, result.invocation_id, requests, failing)
    assert [e.status for e in result.tool_executions] == [
        "execution_error" if r.name == failing else "rolled_back" for r in requests
    ]


def test_rolled_back_text_names_the_first_failed_tool_of_the_batch_in_request_order(
    executor: LocalExecutor | CeleryExecutor, ledger: Ledger, journal: Journal
) -> None:
    # Given: the flight succeeds; the hotel fails late and the car fails at once
    flight = call("flight-1", "book_flight", ns=ledger.ns, origin="Kyiv", destination="Rome")
    hotel = call("hotel-1", "book_hotel", ns=ledger.ns, city="Rome", nights=3, fail=True, delay_s=0.3)
    car = call("car-1", "rentCar", ns=ledger.ns, city="Rome", days=3, fail=True)
    model = ScriptedChatModel([ask(flight, hotel, car), "Sorry"])
    service = saga_service(model, executor, journal)

    # When
    result = service.chat("Book me a trip to Rome")

    # Then: the flight is cancelled, and its text names the hotel, the first failure in request order
    flight_id = ledger.booked()["book_flight"]
    assert ledger.undone() == [f"cancel_flight {flight_id}"]
    assert results_of(model.requests[1]) == [
        tool_result(flight, rolled_back("book_flight", "book_hotel"), is_error=True),
        tool_result(hotel, SOLD_OUT["book_hotel"], is_error=True),
        tool_result(car, SOLD_OUT["rentCar"], is_error=True),
    ]
    assert result.content == "Sorry"


def test_latest_first_follows_request_order_not_completion_order(
    executor: LocalExecutor | CeleryExecutor, ledger: Ledger, journal: Journal
) -> None:
    # Given: flight and hotel succeed in one response but complete in reverse order; the car fails at once
    requests = travel_calls(ledger.ns, "rentCar", IN_REVERSE_ORDER)
    model = ScriptedChatModel([ask(*requests), "Sorry"])
    service = saga_service(model, executor, journal)

    # When
    result = service.chat("Book me a trip to Rome")

    # Then: the hotel (requested later) is cancelled before the flight (requested earlier)
    assert result.content == "Sorry"
    assert_trip_undone_latest_first(ledger, journal, model, result.invocation_id, requests, "rentCar")


# -- 3. nothing compensated twice ----------------------------------------------------------------


# The ids of a credit, the withdrawal that fails with it, the credit retried, and a second failing
# withdrawal; how much the retry credits; and the id the retry reaches the model and journal under.
RETRIES = [
    # a retry under a call id of its own
    pytest.param(("credit-1", "withdraw-1", "credit-2", "withdraw-2"), 30, "credit-2", id="new-id"),
    # a provider that omits call ids, so the same call at the same index gets the same id: the model
    # retries the rolled-back credit exactly, and the repeated id is made unique for this invocation
    # (so the retry has a key of its own)
    pytest.param(
        (
            "call_0_5e1fd2c0a1b2c3d4",
            "call_1_9a8b7c6d5e4f3a2b",
            "call_0_5e1fd2c0a1b2c3d4",
            "call_0_9a8b7c6d5e4f3a2b",
        ),
        100,
        "call_0_5e1fd2c0a1b2c3d4_2",
        id="repeated-id",
    ),
]


@pytest.mark.parametrize(("ids", "amount", "retried_id"), RETRIES)
def test_compensated_call_is_not_compensated_again_and_its_retry_is_compensated_too(
    executor: LocalExecutor | CeleryExecutor,
    ledger: Ledger,
    journal: Journal,
    ids: tuple[str, str, str, str],
    amount: int,
    retried_id: str,
) -> None:
    # Given: a credit rolled back by a failed withdrawal, a retried credit that succeeds, and a second
    # failed withdrawal in a later round
    ledger.open_accounts(Mario=50, Dmytro=10)
    first_credit = call(ids[0], "credit", ns=ledger.ns, name="Dmytro", amount=100)
    first_withdraw = call(ids[1], "withdraw", ns=ledger.ns, name="Mario", amount=100)
    retried_credit = call(ids[2], "credit", ns=ledger.ns, name="Dmytro", amount=amount)
    second_withdraw = call(ids[3], "withdraw", ns=ledger.ns, name="Mario", amount=100)
    model = ScriptedChatModel(
        [ask(first_credit, first_withdraw), ask(retried_credit), ask(second_withdraw), "Giving up"]
    )
    service = saga_service(model, executor, journal)

    # When
    result = service.chat("Transfer 100 from Mario to Dmytro")

    # Then: the first credit was undone once (before the retry ran), the retried credit once, and the
    # balances are exactly as before
    assert result.content == "Giving up"
    assert ledger.undone() == ["uncredit Dmytro 100", f"uncredit Dmytro {amount}"]
    assert ledger.balances() == {"Mario": 50, "Dmytro": 10}
    retried = dataclasses.replace(retried_credit, id=retried_id)
    assert model.requests[2].messages[-1] == tool_result(
        retried, f"Credited {amount} to Dmytro; balance {10 + amount}", is_error=False
    )
    assert results_of(model.requests[3]) == [
        tool_result(first_credit, rolled_back("credit", "withdraw"), is_error=True),
        tool_result(first_withdraw, INSUFFICIENT, is_error=True),
        tool_result(retried, rolled_back("credit", "withdraw"), is_error=True),
        tool_result(second_withdraw, INSUFFICIENT, is_error=True),
    ]
    assert [e.status for e in result.tool_executions] == [
        "rolled_back",
        "execution_error",
        "rolled_back",
        "execution_error",
    ]
    assert result.invocation_id is not None
    rows = {c.call_id: c.id for c in journal.calls(result.invocation_id)}
    assert [(c.tool_call_id, c.state) for c in journal.compensations(result.invocation_id)] == [
        (rows[ids[0]], "succeeded"),
        (rows[retried_id], "succeeded"),
    ]
