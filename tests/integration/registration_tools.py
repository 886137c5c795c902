"""A module as a newcomer writes it, served whole by `toolfleet worker --tools` (pool `regmod`):

- `reg_credit`, a `@tool` function undone by `reg_uncredit`, a module-level `@compensate_for` function;
- `reg_pay`, a `@tool` function that is always declined;
- `RegNotes`, a tool class with no object here and a constructor without arguments: served;
- `RegVault`, a tool class whose constructor needs an argument: left out, and the worker says so.

Side effects go to the test Redis (`TOOLFLEET_REDIS_URL`) under `reg:<ns>:ledger` (a list), so the
worker and the test see the same state.
"""

from __future__ import annotations

import os

import redis

from workers import ToolErrorVisibleToLlm, compensate_for, tool

POOL = "regmod"


def ledger_key(ns: str) -> str:
    return f"reg:{ns}:ledger"


def _record(ns: str, entry: str) -> None:
    client = redis.Redis.from_url(os.environ["TOOLFLEET_REDIS_URL"], socket_timeout=5)
    try:
        client.rpush(ledger_key(ns), entry)
    finally:
        client.close()


@tool("Credits money to an account", pool=POOL, timeout=10)
def reg_credit(ns: str, name: str, amount: int) -> str:
    _record(ns, f"credit {name} {amount}")
    return f"Credited {amount} to {name}"


@compensate_for("reg_credit")
def reg_uncredit(ns: str, name: str, amount: int) -> None:
    _record(ns, f"uncredit {name} {amount}")


@tool("A payment that is always declined", pool=POOL, timeout=10)
def reg_pay(ns: str, name: str) -> str:
    raise ToolErrorVisibleToLlm.from_message(f"The payment of {name} was declined")


class RegNotes:
    """Served through an object the worker makes: its constructor takes no arguments."""

    @tool("Writes a note", pool=POOL, timeout=10)
    def reg_note(self, ns: str, text: str) -> str:
        _record(ns, f"note {text}")
        return "noted"


class RegVault:
    """Left out: its constructor needs a secret."""

    def __init__(self, secret: str) -> None:
        self.secret = secret

    @tool("Opens the vault", pool=POOL, timeout=10)
    def reg_open_vault(self) -> str:
        return self.secret
