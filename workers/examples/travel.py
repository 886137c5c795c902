"""A travel agency whose bookings are undone by id: compensations that take the `ToolExecution`."""

from __future__ import annotations

import itertools
import os
import threading
import time
from datetime import date

from workers import ToolErrorVisibleToLlm, ToolExecution, compensate_for, tool


class SoldOut(ToolErrorVisibleToLlm, Exception):
    """Nothing left to book."""


class TravelAgency:
    """Flights, hotels and cars; a booking returns its id, and cancelling needs that id."""

    def __init__(self, sold_out: set[str] | None = None, slow: dict[str, float] | None = None) -> None:
        self.sold_out = set(sold_out or ())
        self.slow = dict(slow or {})
        self.bookings: dict[str, str] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def _book(self, kind: str, what: str) -> str:
        delay = self.slow.get(kind, 0.0)
        if delay:
            time.sleep(delay)
        if kind in self.sold_out:
            raise SoldOut(f"No {kind} available for {what}")
        with self._lock:
            booking_id = f"{kind[0].upper()}-{next(self._ids):04d}"
            self.bookings[booking_id] = what
        return booking_id

    def _cancel(self, execution: ToolExecution) -> None:
        with self._lock:
            self.bookings.pop(str(execution.result_object), None)

    @tool("Books a flight and returns the booking id", pool="heavy", timeout=5)
    def book_flight(self, origin: str, destination: str, day: date) -> str:
        return self._book("flight", f"{origin}->{destination} on {day.isoformat()}")

    @compensate_for("book_flight")
    def cancel_flight(self, execution: ToolExecution) -> None:
        self._cancel(execution)

    @tool("Books a hotel room and returns the booking id", pool="heavy", timeout=5)
    def book_hotel(self, city: str, nights: int) -> str:
        return self._book("hotel", f"{city} for {nights} nights")

    @compensate_for("book_hotel")
    def cancel_hotel(self, execution: ToolExecution) -> None:
        self._cancel(execution)

    @tool("Rents a car and returns the rental id", name="rentCar", pool="heavy", timeout=2)
    def rent_car(self, city: str, days: int) -> str:
        return self._book("car", f"{city} for {days} days")

    @compensate_for("rentCar")
    def cancel_car(self, execution: ToolExecution) -> None:
        self._cancel(execution)


def _slow_from_environment() -> dict[str, float]:
    """`TOOLFLEET_EXAMPLES_SLOW="car=4,hotel=0.5"`: seconds each kind of booking takes (the demo's
    slow car rental that times out)."""
    slow: dict[str, float] = {}
    for item in os.environ.get("TOOLFLEET_EXAMPLES_SLOW", "").split(","):
        kind, _, seconds = item.partition("=")
        if kind.strip() and seconds.strip():
            slow[kind.strip()] = float(seconds)
    return slow


agency = TravelAgency(slow=_slow_from_environment())
