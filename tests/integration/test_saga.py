"""Acceptance tests of saga compensation (SPEC §7, with the error handling of §6).

Every case runs twice: with `LocalExecutor` (tools and compensations in this process) and with
`CeleryExecutor` against the real Redis and one real worker process serving
`tests.integration.saga_tools` on pool `saga` (compensations run there as `compensate.<tool>` tasks).
The model is a `ScriptedChatModel`; what it was sent is read back from `model.requests`. Every side
effect of the tools — balances, bookings, and the order in which compensations ran — is kept in the
test Redis under a fresh namespace per test, so the test reads what the worker did. Every service has
`compensate_on_tool_errors=True` and its own SQLite journal.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import tests.integration.saga_tools as saga
from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    ChatRequest,
    HallucinatedToolNameError,
    LocalExecutor,
    MessageWindowChatMemory,
    ModelServerError,
    RoundTripLimitError,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    fail_invocation,
)
from orchestrator.saga.journal import Journal
from workers import ToolDefinitionError, ToolExecution, compensate_for, tool
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

REPO_ROOT = str(Path(__file__).resolve().parents[2])
TOOLS_MODULE = "tests.integration.saga_tools"
COMPENSATION_RETRIES = 1
RETRY_BACKOFF_S = 0.01

TOOL_NAMES = {"credit", "withdraw", "book_flight", "book_hotel", "rentCar", "book_lounge", "reserve_seat"}
COMPENSATION_NAMES = {
    "uncredit",
    "unwithdraw",
    "cancel_flight",
    "cancel_hotel",
    "cancel_car",
    "cancel_lounge",
    "release_seat",
}
BOOKINGS = ("book_flight", "book_hotel", "rentCar")
CANCEL_OF = {"book_flight": "cancel_flight", "book_hotel": "cancel_hotel", "rentCar": "cancel_car"}
SOLD_OUT = {
    "book_flight": "No flight Kyiv->Rome available",
    "book_hotel": "No hotel in Rome for 3 nights available",
    "rentCar": "No car in Rome for 3 days available",
}
# Delays that make the three parallel bookings complete in request order, or in the reverse order.
IN_REQUEST_ORDER = (0.0, 0.25, 0.5)
IN_REVERSE_ORDER = (0.5, 0.25, 0.0)
INSUFFICIENT = "Mario has insufficient funds to withdraw 100"


def rolled_back(tool_name: str, failed: str) -> str:
    """SPEC §7, exact text."""
    return (
        f"Tool '{tool_name}' was executed successfully but was rolled back due to failure of tool '{failed}'"
    )


# -- fixtures ------------------------------------------------------------------------------------


# Where the shared `executor` fixture (tests/integration/conftest.py) runs this module's calls.
WORKERS = ["saga_worker"]
EXECUTOR_OPTIONS = {"compensation_retries": COMPENSATION_RETRIES, "retry_backoff_s": RETRY_BACKOFF_S}


@pytest.fixture(scope="module")
def saga_worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """One threads worker serving the saga tools on pool `saga`, with small compensation retries."""
    worker = WorkerProcess(
        pools=[saga.POOL],
        modules=[TOOLS_MODULE],
        redis_url=redis_url,
        kind="threads",
        concurrency=8,
        hostname=f"saga-{os.getpid()}@saga",
        env={
            "TOOLFLEET_HEARTBEAT_TTL_S": "2",
            "PYTHONPATH": REPO_ROOT,
            # The worker retries compensations itself, reading these from its own environment.
            "TOOLFLEET_COMPENSATION_RETRIES": str(COMPENSATION_RETRIES),
            "TOOLFLEET_RETRY_BACKOFF_S": str(RETRY_BACKOFF_S),
        },
        log_path=tmp_path_factory.mktemp("saga-worker") / "saga.log",
        loglevel="INFO",
    )
    with worker.running(timeout_s=60):
        yield worker


@dataclasses.dataclass
class Ledger:
    """The state the saga tools keep in Redis under one test's namespace (a client decoding to str)."""

    client: redis.Redis
    ns: str

    def open_accounts(self, **balances: int) -> None:
        for name, amount in balances.items():
            self.client.hset(saga.balances_key(self.ns), name, amount)

    def balances(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.client.hgetall(saga.balances_key(self.ns)).items()}

    def add_booking(self, booking_id: str, what: str) -> None:
        self.client.hset(saga.bookings_key(self.ns), booking_id, what)

    def bookings(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.client.hgetall(saga.bookings_key(self.ns)).items()}

    def booked(self) -> dict[str, str]:
        """Tool name -> the booking id it made (each tool books at most once per test)."""
        entries = [str(e).split(" ") for e in self.client.lrange(saga.booked_key(self.ns), 0, -1)]
        booked = {name: booking_id for name, booking_id in entries}
        assert len(booked) == len(entries), f"a tool booked twice: {entries}"
        return booked

    def undone(self) -> list[str]:
        """Every compensation run, in the order they ran."""
        return [str(e) for e in self.client.lrange(saga.undo_key(self.ns), 0, -1)]

    def received(self, booking_id: str) -> dict[str, Any]:
        """The `ToolExecution` (JSON) the compensation that cancelled `booking_id` received."""
        raw = self.client.hget(saga.received_key(self.ns), booking_id)
        assert raw is not None, f"no compensation received booking {booking_id}"
        data: dict[str, Any] = json.loads(raw)
        return data

    def seats(self) -> set[str]:
        return {str(s) for s in self.client.smembers(saga.seats_key(self.ns))}


@pytest.fixture
def ledger(redis_url: str) -> Iterator[Ledger]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    book = Ledger(client, uuid.uuid4().hex)
    yield book
    keys = list(client.scan_iter(f"saga:{book.ns}:*"))
    if keys:
        client.delete(*keys)
    client.close()


# -- helpers -------------------------------------------------------------------------------------


def call(call_id: str, tool_name: str, /, **arguments: Any) -> ToolExecutionRequest:
    return ToolExecutionRequest(id=call_id, name=tool_name, arguments=json.dumps(arguments))


def ask(*calls: ToolExecutionRequest) -> AiMessage:
    return AiMessage(tool_execution_requests=list(calls))


def tool_result(request: ToolExecutionRequest, text: str, *, is_error: bool) -> ToolExecutionResultMessage:
    return ToolExecutionResultMessage(id=request.id, tool_name=request.name, text=text, is_error=is_error)


def results_of(request: ChatRequest) -> list[ToolExecutionResultMessage]:
    return [m for m in request.messages if isinstance(m, ToolExecutionResultMessage)]


def saga_service(
    model: ScriptedChatModel,
    executor: LocalExecutor | CeleryExecutor,
    journal: Journal,
    tools: list[object] | None = None,
    **config: Any,
) -> AiService:
    return AiService(
        chat_model=model,
        tools=tools if tools is not None else [saga.RedisBank(), saga.RedisTravel(), saga.SeatDesk()],
        executor=executor,
        compensate_on_tool_errors=True,
        journal=journal,
        **config,
    )


def travel_calls(ns: str, failing: str, delays: tuple[float, float, float]) -> list[ToolExecutionRequest]:
    """Three bookings of one trip, `failing` told to fail, each waiting its delay first."""
    flight, hotel, car = delays
    return [
        call(
            "flight-1",
            "book_flight",
            ns=ns,
            origin="Kyiv",
            destination="Rome",
            fail=failing == "book_flight",
            delay_s=flight,
        ),
        call(
            "hotel-1", "book_hotel", ns=ns, city="Rome", nights=3, fail=failing == "book_hotel", delay_s=hotel
        ),
        call("car-1", "rentCar", ns=ns, city="Rome", days=3, fail=failing == "rentCar", delay_s=car),
    ]


def assert_trip_undone_latest_first(
    ledger: Ledger,
    journal: Journal,
    model: ScriptedChatModel,
    invocation_id: str | None,
    requests: list[ToolExecutionRequest],
    failing: str,
) -> None:
    """The bookings that succeeded were cancelled in reverse request order, and the model was told."""
    succeeded = [r.name for r in requests if r.name != failing]
    booked = ledger.booked()
    assert sorted(booked) == sorted(succeeded)
    assert ledger.undone() == [f"{CANCEL_OF[name]} {booked[name]}" for name in reversed(succeeded)]
    assert ledger.bookings() == {}
    assert results_of(model.requests[1]) == [
        tool_result(
            r, SOLD_OUT[failing] if r.name == failing else rolled_back(r.name, failing), is_error=True
        )
        for r in requests
    ]
    assert invocation_id is not None
    assert [(c.tool, c.state) for c in journal.compensations(invocation_id)] == [
        (name, "succeeded") for name in reversed(succeeded)
    ]


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


def test_compensated_call_is_not_compensated_again_after_a_later_failure(
    executor: LocalExecutor | CeleryExecutor, ledger: Ledger, journal: Journal
) -> None:
    # Given: a credit rolled back by a failed withdrawal, a retried credit that succeeds, and a second
    # failed withdrawal in a later round
    ledger.open_accounts(Mario=50, Dmytro=10)
    first_credit = call("credit-1", "credit", ns=ledger.ns, name="Dmytro", amount=100)
    first_withdraw = call("withdraw-1", "withdraw", ns=ledger.ns, name="Mario", amount=100)
    retried_credit = call("credit-2", "credit", ns=ledger.ns, name="Dmytro", amount=30)
    second_withdraw = call("withdraw-2", "withdraw", ns=ledger.ns, name="Mario", amount=100)
    model = ScriptedChatModel(
        [ask(first_credit, first_withdraw), ask(retried_credit), ask(second_withdraw), "Giving up"]
    )
    service = saga_service(model, executor, journal)

    # When
    result = service.chat("Transfer 100 from Mario to Dmytro")

    # Then: the first credit was undone once (before the retry ran), the retried credit once
    assert result.content == "Giving up"
    assert ledger.undone() == ["uncredit Dmytro 100", "uncredit Dmytro 30"]
    assert ledger.balances() == {"Mario": 50, "Dmytro": 10}
    assert model.requests[2].messages[-1] == tool_result(
        retried_credit, "Credited 30 to Dmytro; balance 40", is_error=False
    )
    assert results_of(model.requests[3]) == [
        tool_result(first_credit, rolled_back("credit", "withdraw"), is_error=True),
        tool_result(first_withdraw, INSUFFICIENT, is_error=True),
        tool_result(retried_credit, rolled_back("credit", "withdraw"), is_error=True),
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
        (rows["credit-1"], "succeeded"),
        (rows["credit-2"], "succeeded"),
    ]


def test_identical_retry_under_a_repeated_call_id_is_compensated_too(
    executor: LocalExecutor | CeleryExecutor, ledger: Ledger, journal: Journal
) -> None:
    # Given: a provider that omits call ids, so the same call at the same index gets the same id; the
    # model retries the rolled-back credit exactly, then a withdrawal fails in a later round
    ledger.open_accounts(Mario=50, Dmytro=10)
    credit = call("call_0_5e1fd2c0a1b2c3d4", "credit", ns=ledger.ns, name="Dmytro", amount=100)
    withdraw = call("call_1_9a8b7c6d5e4f3a2b", "withdraw", ns=ledger.ns, name="Mario", amount=100)
    withdraw_again = call("call_0_9a8b7c6d5e4f3a2b", "withdraw", ns=ledger.ns, name="Mario", amount=100)
    model = ScriptedChatModel([ask(credit, withdraw), ask(credit), ask(withdraw_again), "Giving up"])
    service = saga_service(model, executor, journal)

    # When
    result = service.chat("Transfer 100 from Mario to Dmytro")

    # Then: the repeated id was made unique for this invocation (so the retry has a key of its own),
    # both credits were undone, each once, and the balances are exactly as before
    assert result.content == "Giving up"
    retried = dataclasses.replace(credit, id=f"{credit.id}_2")
    assert model.requests[2].messages[-1] == tool_result(
        retried, "Credited 100 to Dmytro; balance 110", is_error=False
    )
    assert ledger.undone() == ["uncredit Dmytro 100", "uncredit Dmytro 100"]
    assert ledger.balances() == {"Mario": 50, "Dmytro": 10}


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
    executor: LocalExecutor | CeleryExecutor, ledger: Ledger, journal: Journal
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
        *[f"cancel_lounge attempt {lounge_id}"] * (1 + COMPENSATION_RETRIES),
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


def test_compensation_for_a_missing_tool_is_refused_at_construction(
    executor: LocalExecutor | CeleryExecutor, journal: Journal
) -> None:
    # Given
    model = ScriptedChatModel([])

    # When
    with pytest.raises(ToolDefinitionError) as raised:
        AiService(
            chat_model=model,
            tools=[MissingToolBank()],
            executor=executor,
            compensate_on_tool_errors=True,
            journal=journal,
        )

    # Then
    assert '@compensate_for("missing")' in str(raised.value)
    assert model.requests == []


@pytest.mark.parametrize("bank", WRONG_PARAMETERS, ids=lambda cls: cls.__name__)
def test_compensation_with_other_parameters_is_refused_at_construction(
    executor: LocalExecutor | CeleryExecutor, journal: Journal, bank: type
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
    assert '@compensate_for("credit")' in str(raised.value)
    assert "same parameters" in str(raised.value)


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
