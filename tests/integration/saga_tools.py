"""Tools of the saga acceptance tests (SPEC §7), served on pool `saga` by the `saga/` tests' own worker.

Every side effect lives in the test Redis (`TOOLFLEET_REDIS_URL`), so the worker process and the test
see the same state, under a namespace the test passes as the argument `ns` (a fresh uuid per test):

- `saga:<ns>:balances` (hash): the `RedisBank` accounts, integer amounts;
- `saga:<ns>:bookings` (hash): the `RedisTravel` bookings, booking id -> what was booked;
- `saga:<ns>:booked` (list): every booking made, as `<tool> <booking id>`;
- `saga:<ns>:seats` (set): the seats `SeatDesk` holds;
- `saga:<ns>:undo` (list): every compensation run, in the order they ran
  (`uncredit Dmytro 100`, `cancel_flight F-1a2b3c4d5e`, `cancel_lounge attempt L-...`);
- `saga:<ns>:received` (hash): booking id -> the `ToolExecution` its compensation received (JSON).

Compensations of `RedisBank` and `SeatDesk` take the tool's own parameters; those of `RedisTravel` take
one `ToolExecution` and cancel by `execution.result_object` (the id the tool returned). The
compensation of `book_lounge` always raises. `SeatDesk` inherits its tool and its compensation.
"""

from __future__ import annotations

import json
import time
import uuid

import redis

from tests.integration.side_effects import process_client
from workers import ToolErrorVisibleToLlm, ToolExecution, compensate_for, tool

POOL = "saga"
LOUNGE_ERROR = "the lounge desk is unreachable"


def redis_client() -> redis.Redis:
    """This process' client of the test Redis (tools run on threads of this process or of a worker)."""
    return process_client(socket_timeout=5)


def key(ns: str, what: str) -> str:
    """Where the tools keep `what` ("balances", "bookings", "booked", "seats", "undo", "received") of
    namespace `ns` in the test Redis."""
    return f"saga:{ns}:{what}"


def _undone(ns: str, entry: str) -> None:
    redis_client().rpush(key(ns, "undo"), entry)


# -- the bank ---------------------------------------------------------------------------------------


class InsufficientFunds(ToolErrorVisibleToLlm, Exception):
    """The account holds less than the amount to withdraw."""


_WITHDRAW = """
local balance = redis.call('HGET', KEYS[1], ARGV[1])
if not balance then return {0, 0} end
balance = tonumber(balance)
if balance < tonumber(ARGV[2]) then return {1, balance} end
return {2, redis.call('HINCRBY', KEYS[1], ARGV[1], -tonumber(ARGV[2]))}
"""


class RedisBank:
    """Accounts in a Redis hash; `credit` and `withdraw` are undone by `uncredit` and `unwithdraw`."""

    @tool("Credits money to a bank account", pool=POOL, timeout=10)
    def credit(self, ns: str, name: str, amount: int) -> str:
        client = redis_client()
        if not client.hexists(key(ns, "balances"), name):
            raise ToolErrorVisibleToLlm.from_message(f"No account belongs to {name}")
        balance = client.hincrby(key(ns, "balances"), name, amount)
        return f"Credited {amount} to {name}; balance {balance}"

    @compensate_for("credit")
    def uncredit(self, ns: str, name: str, amount: int) -> None:
        redis_client().hincrby(key(ns, "balances"), name, -amount)
        _undone(ns, f"uncredit {name} {amount}")

    @tool("Withdraws money from a bank account", pool=POOL, timeout=10)
    def withdraw(self, ns: str, name: str, amount: int) -> str:
        status, balance = redis_client().eval(_WITHDRAW, 1, key(ns, "balances"), name, amount)
        if status == 0:
            raise ToolErrorVisibleToLlm.from_message(f"No account belongs to {name}")
        if status == 1:
            raise InsufficientFunds(f"{name} has insufficient funds to withdraw {amount}")
        return f"Withdrew {amount} from {name}; balance {balance}"

    @compensate_for("withdraw")
    def unwithdraw(self, ns: str, name: str, amount: int) -> None:
        redis_client().hincrby(key(ns, "balances"), name, amount)
        _undone(ns, f"unwithdraw {name} {amount}")


# -- the travel agency ------------------------------------------------------------------------------


class SoldOut(ToolErrorVisibleToLlm, Exception):
    """Nothing left to book."""


class RedisTravel:
    """Bookings in a Redis hash; each booking returns its id, and cancelling needs that id.

    Every booking tool can be told to fail (`fail=True`) or to take its time first (`delay_s`).
    """

    def _book(self, ns: str, tool_name: str, prefix: str, what: str, fail: bool, delay_s: float) -> str:
        if delay_s > 0:
            time.sleep(delay_s)
        if fail:
            raise SoldOut(f"No {what} available")
        booking_id = f"{prefix}-{uuid.uuid4().hex[:10]}"
        client = redis_client()
        client.hset(key(ns, "bookings"), booking_id, what)
        client.rpush(key(ns, "booked"), f"{tool_name} {booking_id}")
        return booking_id

    def _cancel(self, compensation: str, execution: ToolExecution) -> None:
        ns = json.loads(execution.request.arguments)["ns"]
        booking_id = str(execution.result_object)
        client = redis_client()
        client.hset(key(ns, "received"), booking_id, json.dumps(execution.to_json()))
        client.hdel(key(ns, "bookings"), booking_id)
        _undone(ns, f"{compensation} {booking_id}")

    @tool("Books a flight and returns the booking id", pool=POOL, timeout=10)
    def book_flight(
        self, ns: str, origin: str, destination: str, fail: bool = False, delay_s: float = 0.0
    ) -> str:
        return self._book(ns, "book_flight", "F", f"flight {origin}->{destination}", fail, delay_s)

    @compensate_for("book_flight")
    def cancel_flight(self, execution: ToolExecution) -> None:
        self._cancel("cancel_flight", execution)

    @tool("Books a hotel room and returns the booking id", pool=POOL, timeout=10)
    def book_hotel(self, ns: str, city: str, nights: int, fail: bool = False, delay_s: float = 0.0) -> str:
        return self._book(ns, "book_hotel", "H", f"hotel in {city} for {nights} nights", fail, delay_s)

    @compensate_for("book_hotel")
    def cancel_hotel(self, execution: ToolExecution) -> None:
        self._cancel("cancel_hotel", execution)

    @tool("Rents a car and returns the rental id", name="rentCar", pool=POOL, timeout=10)
    def rent_car(self, ns: str, city: str, days: int, fail: bool = False, delay_s: float = 0.0) -> str:
        return self._book(ns, "rentCar", "C", f"car in {city} for {days} days", fail, delay_s)

    @compensate_for("rentCar")
    def cancel_car(self, execution: ToolExecution) -> None:
        self._cancel("cancel_car", execution)

    @tool("Books an airport lounge and returns the booking id", pool=POOL, timeout=10)
    def book_lounge(self, ns: str, airport: str) -> str:
        return self._book(ns, "book_lounge", "L", f"lounge at {airport}", False, 0.0)

    @compensate_for("book_lounge")
    def cancel_lounge(self, execution: ToolExecution) -> None:
        ns = json.loads(execution.request.arguments)["ns"]
        _undone(ns, f"cancel_lounge attempt {execution.result_object}")
        raise RuntimeError(LOUNGE_ERROR)


# -- inherited tools --------------------------------------------------------------------------------


class SeatDeskBase:
    """Declares a seat reservation and its compensation; never instantiated here."""

    @tool("Reserves a seat", pool=POOL, timeout=10)
    def reserve_seat(self, ns: str, seat: str) -> str:
        redis_client().sadd(key(ns, "seats"), seat)
        return f"Seat {seat} reserved"

    @compensate_for("reserve_seat")
    def release_seat(self, ns: str, seat: str) -> None:
        redis_client().srem(key(ns, "seats"), seat)
        _undone(ns, f"release_seat {seat}")


class SeatDesk(SeatDeskBase):
    """Inherits `reserve_seat` and its compensation `release_seat` from its base."""


bank = RedisBank()
travel = RedisTravel()
seats = SeatDesk()
