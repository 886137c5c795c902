"""What the saga acceptance tests share: the tools' names and texts, the `Ledger` that reads the
tools' side effects from the test Redis, and helpers that build calls and services.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import redis

import tests.integration.saga_tools as saga
from orchestrator import AiService, CeleryExecutor, LocalExecutor, ScriptedChatModel, ToolExecutionRequest
from orchestrator.saga.journal import Journal
from tests.integration.scripts import call, results_of, tool_result

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


@dataclasses.dataclass
class Ledger:
    """The state the saga tools keep in Redis under one test's namespace (a client decoding to str)."""

    client: redis.Redis
    ns: str

    def open_accounts(self, **balances: int) -> None:
        for name, amount in balances.items():
            self.client.hset(saga.key(self.ns, "balances"), name, amount)

    def balances(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.client.hgetall(saga.key(self.ns, "balances")).items()}

    def add_booking(self, booking_id: str, what: str) -> None:
        self.client.hset(saga.key(self.ns, "bookings"), booking_id, what)

    def bookings(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.client.hgetall(saga.key(self.ns, "bookings")).items()}

    def booked(self) -> dict[str, str]:
        """Tool name -> the booking id it made (each tool books at most once per test)."""
        entries = [str(e).split(" ") for e in self.client.lrange(saga.key(self.ns, "booked"), 0, -1)]
        booked = {name: booking_id for name, booking_id in entries}
        assert len(booked) == len(entries), f"a tool booked twice: {entries}"
        return booked

    def undone(self) -> list[str]:
        """Every compensation run, in the order they ran."""
        return [str(e) for e in self.client.lrange(saga.key(self.ns, "undo"), 0, -1)]

    def received(self, booking_id: str) -> dict[str, Any]:
        """The `ToolExecution` (JSON) the compensation that cancelled `booking_id` received."""
        raw = self.client.hget(saga.key(self.ns, "received"), booking_id)
        assert raw is not None, f"no compensation received booking {booking_id}"
        data: dict[str, Any] = json.loads(raw)
        return data

    def seats(self) -> set[str]:
        return {str(s) for s in self.client.smembers(saga.key(self.ns, "seats"))}


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
