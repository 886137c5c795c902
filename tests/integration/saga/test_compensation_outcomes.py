"""Saga acceptance tests (SPEC §7, §6): what compensations receive, when they fail, and abnormal ends.

How every case runs: tests/integration/saga/__init__.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

import tests.integration.saga_tools as saga
from orchestrator import (
    AiMessage,
    CeleryExecutor,
    ChatRequest,
    HallucinatedToolNameError,
    LocalExecutor,
    ModelServerError,
    RoundTripLimitError,
    ScriptedChatModel,
    fail_invocation,
)
from orchestrator.saga.journal import Journal
from tests.integration.saga._ledger import INSUFFICIENT, Ledger, rolled_back, saga_service
from tests.integration.scripts import ask, call, results_of, tool_result
from workers import ToolExecution

pytestmark = [pytest.mark.integration, pytest.mark.broker]


# -- 4. compensations that take the ToolExecution ------------------------------------------------


def test_compensation_taking_the_execution_cancels_the_id_the_tool_returned(
    executor: LocalExecutor | CeleryExecutor, ledger: Ledger, journal: Journal
) -> None:
    # Given: a booking made elsewhere, then a flight and a hotel booked, then the car fails
    decoy = "F-decoy00000"
    ledger.add_booking(decoy, "flight Lviv->Paris")
    flight = call("flight-1", "book_flight", ns=ledger.ns, origin="Kyiv", destination="Rome")
    hotel = call("hotel-1", "book_hotel", ns=ledger.ns, city="Rome", nights=2, delay_s=0.25)
    car = call("car-1", "rentCar", ns=ledger.ns, city="Rome", days=2, fail=True)
    model = ScriptedChatModel([ask(flight, hotel), ask(car), "Sorry"])
    service = saga_service(model, executor, journal)

    # When
    result = service.chat("Book me a trip to Rome")

    # Then: each compensation cancelled exactly the id its tool returned to the model
    returned = {m.tool_name: m.text for m in results_of(model.requests[1])}
    flight_id, hotel_id = returned["book_flight"], returned["book_hotel"]
    assert flight_id.startswith("F-") and hotel_id.startswith("H-")
    assert ledger.booked() == {"book_flight": flight_id, "book_hotel": hotel_id}
    assert ledger.undone() == [f"cancel_hotel {hotel_id}", f"cancel_flight {flight_id}"]
    assert ledger.bookings() == {decoy: "flight Lviv->Paris"}
    for request, booking_id in ((flight, flight_id), (hotel, hotel_id)):
        received = ToolExecution.from_json(ledger.received(booking_id))
        assert (received.request, received.result, received.result_object, received.has_failed) == (
            request,
            booking_id,
            booking_id,
            False,
        )
    assert results_of(model.requests[2]) == [
        tool_result(flight, rolled_back("book_flight", "rentCar"), is_error=True),
        tool_result(hotel, rolled_back("book_hotel", "rentCar"), is_error=True),
        tool_result(car, "No car in Rome for 2 days available", is_error=True),
    ]
    assert result.content == "Sorry"


# -- 5. a compensation that keeps failing --------------------------------------------------------


def test_failing_compensation_is_recorded_and_the_others_still_run(
    executor: LocalExecutor | CeleryExecutor,
    ledger: Ledger,
    journal: Journal,
    executor_options: dict[str, Any],
) -> None:
    # Given: flight, lounge and hotel booked in three rounds; the lounge cannot be cancelled; the car fails
    flight = call("flight-1", "book_flight", ns=ledger.ns, origin="Kyiv", destination="Rome")
    lounge = call("lounge-1", "book_lounge", ns=ledger.ns, airport="FCO")
    hotel = call("hotel-1", "book_hotel", ns=ledger.ns, city="Rome", nights=2)
    car = call("car-1", "rentCar", ns=ledger.ns, city="Rome", days=2, fail=True)
    model = ScriptedChatModel([ask(flight), ask(lounge), ask(hotel), ask(car), "Sorry"])
    service = saga_service(model, executor, journal)

    # When
    result = service.chat("Book me a trip to Rome")

    # Then: hotel and flight are cancelled although the lounge's compensation failed after its retry
    assert result.content == "Sorry"
    booked = ledger.booked()
    flight_id, lounge_id, hotel_id = booked["book_flight"], booked["book_lounge"], booked["book_hotel"]
    assert ledger.undone() == [
        f"cancel_hotel {hotel_id}",
        *[f"cancel_lounge attempt {lounge_id}"] * (1 + executor_options["compensation_retries"]),
        f"cancel_flight {flight_id}",
    ]
    assert ledger.bookings() == {lounge_id: "lounge at FCO"}
    # the journal records the lounge's compensation as failed, the others as succeeded
    assert result.invocation_id is not None
    failed = journal.compensations(state="failed")
    assert [(c.invocation_id, c.tool) for c in failed] == [(result.invocation_id, "book_lounge")]
    assert saga.LOUNGE_ERROR in (failed[0].error or "")
    assert [(c.tool, c.state) for c in journal.compensations(result.invocation_id)] == [
        ("book_hotel", "succeeded"),
        ("book_lounge", "failed"),
        ("book_flight", "succeeded"),
    ]
    assert [(c.tool, c.state) for c in journal.calls(result.invocation_id)] == [
        ("book_flight", "compensated"),
        ("book_lounge", "compensation_failed"),
        ("book_hotel", "compensated"),
        ("rentCar", "failed"),
    ]
    # the lounge was not rolled back: its result keeps its original success text
    assert results_of(model.requests[4]) == [
        tool_result(flight, rolled_back("book_flight", "rentCar"), is_error=True),
        tool_result(lounge, lounge_id, is_error=False),
        tool_result(hotel, rolled_back("book_hotel", "rentCar"), is_error=True),
        tool_result(car, "No car in Rome for 2 days available", is_error=True),
    ]
    assert [(e.status, e.result) for e in result.tool_executions] == [
        ("rolled_back", rolled_back("book_flight", "rentCar")),
        ("success", lounge_id),
        ("rolled_back", rolled_back("book_hotel", "rentCar")),
        ("execution_error", "No car in Rome for 2 days available"),
    ]


# -- 6. abnormal ends ----------------------------------------------------------------------------

ENDINGS = [
    "handler_raises",
    "handler_raises_mid_batch",
    "hallucinated_tool",
    "round_trip_limit",
    "model_fails",
]


@pytest.mark.parametrize("ending", ENDINGS)
def test_compensation_runs_before_an_abnormal_end_propagates(
    executor: LocalExecutor | CeleryExecutor, ledger: Ledger, journal: Journal, ending: str
) -> None:
    # Given: a credit and a flight that succeed, then the invocation ends abnormally
    ledger.open_accounts(Mario=50, Dmytro=10)
    credit = call("credit-1", "credit", ns=ledger.ns, name="Dmytro", amount=100)
    flight = call("flight-1", "book_flight", ns=ledger.ns, origin="Kyiv", destination="Rome", delay_s=0.25)
    withdraw = call("withdraw-1", "withdraw", ns=ledger.ns, name="Mario", amount=100)
    config: dict[str, Any] = {}
    script: Any
    error: type[BaseException] = Exception
    if ending == "handler_raises":  # a later round fails and its handler raises
        script = [ask(credit, flight), ask(withdraw)]
        config["tool_execution_error_handler"] = fail_invocation()
        message = INSUFFICIENT
    elif ending == "handler_raises_mid_batch":  # fails at once while the flight is still running
        script = [ask(credit, flight, withdraw)]
        config["tool_execution_error_handler"] = fail_invocation()
        message = INSUFFICIENT
    elif ending == "hallucinated_tool":  # no hallucinated_tool_name_strategy: the invocation fails
        script = [ask(credit, flight), ask(call("transfer-1", "transfer_everything", ns=ledger.ns))]
        error = HallucinatedToolNameError
        message = "The LLM is trying to execute the 'transfer_everything' tool, but no such tool exists."
    elif ending == "round_trip_limit":
        script = [ask(credit, flight), ask(withdraw)]
        config["max_tool_calling_round_trips"] = 1
        error = RoundTripLimitError
        message = "Something is wrong, exceeded 1 tool calling round trips (max_tool_calling_round_trips)"
    else:
        message = "the model provider is down"

        def script(request: ChatRequest) -> AiMessage:
            if len(model.requests) == 1:
                return ask(credit, flight)
            raise ModelServerError(message, provider="scripted", status=503)

        error = ModelServerError
    model = ScriptedChatModel(script)
    service = saga_service(model, executor, journal, **config)

    # When
    with pytest.raises(error, match=re.escape(message)) as raised:
        service.chat("Transfer 100 from Mario to Dmytro and book a flight")

    # Then, as soon as the exception propagates: both successes are undone, latest first
    flight_id = ledger.booked()["book_flight"]
    assert ledger.undone() == [f"cancel_flight {flight_id}", "uncredit Dmytro 100"]
    assert ledger.balances() == {"Mario": 50, "Dmytro": 10}
    assert ledger.bookings() == {}
    # and the journal marks the invocation failed, with its successes compensated
    [invocation] = journal.invocations()
    assert invocation.state == "failed"
    assert invocation.error == f"{type(raised.value).__name__}: {raised.value}"
    states = {c.call_id: c.state for c in journal.calls(invocation.id)}
    assert states["credit-1"] == "compensated" and states["flight-1"] == "compensated"
    assert [(c.tool, c.state) for c in journal.compensations(invocation.id)] == [
        ("book_flight", "succeeded"),
        ("credit", "succeeded"),
    ]
