"""Tools of the load test (`test_load.py`): pools `loadA` (threads) and `loadB` (prefork).

Every side effect lives in the test Redis (`TOOLFLEET_REDIS_URL`) under `load:<ns>:`, `ns` being an
argument the test passes (fresh per run):

- `runs` (hash): idempotency key of a call -> how many times a tool ran for it;
- `comps` (hash): idempotency key -> how many times a compensation undid it;
- `balances` (hash): account -> amount, moved by `load_deposit` and back by `load_undeposit`;
- `held` (set): the items `load_hold` holds, released by `load_release`.

A call's idempotency key is `<invocation id>:<call id>`, as the orchestrator builds it (and writes it
to the journal): the tools get the invocation id injected and the call id as the argument `call`.
`load_deposit` and `load_hold` with `fail="visible"` fail with an error the model is shown; with
`fail="fatal"`, with one that ends the invocation under `achat`'s default error handler. Either way the
failed run is counted too.
"""

from __future__ import annotations

import os

import redis

from workers import InvocationContext, ToolErrorVisibleToLlm, compensate_for, tool

POOL_A = "loadA"
POOL_B = "loadB"
REFUSED = "{what} refused: {subject}"
BROKEN = "{what} is on fire: {subject}"

_clients: dict[int, redis.Redis] = {}


def _redis() -> redis.Redis:
    # One client per process: prefork children must not share their parent's sockets.
    client = _clients.get(os.getpid())
    if client is None:
        client = _clients[os.getpid()] = redis.Redis.from_url(
            os.environ["TOOLFLEET_REDIS_URL"], socket_timeout=10
        )
    return client


def key_of(context: InvocationContext, call: str) -> str:
    return f"{context.invocation_id}:{call}"


def runs_key(ns: str) -> str:
    return f"load:{ns}:runs"


def comps_key(ns: str) -> str:
    return f"load:{ns}:comps"


def balances_key(ns: str) -> str:
    return f"load:{ns}:balances"


def held_key(ns: str) -> str:
    return f"load:{ns}:held"


class Refused(ToolErrorVisibleToLlm, Exception):
    """The bank or the warehouse said no; the model is told."""


class OnFire(Exception):
    """Not visible to the model: under `achat`'s defaults it ends the invocation."""


def _fail_if_told(fail: str, ns: str, key: str, what: str, subject: str) -> None:
    if not fail:
        return
    _redis().hincrby(runs_key(ns), key, 1)
    if fail == "visible":
        raise Refused(REFUSED.format(what=what, subject=subject))
    raise OnFire(BROKEN.format(what=what, subject=subject))


class LoadTools:
    """Deposits and lookups on `loadA`, holds on `loadB`; deposits and holds are compensable."""

    @tool("Deposits an amount into an account", pool=POOL_A, timeout=30)
    def load_deposit(
        self, ns: str, call: str, account: str, amount: int, context: InvocationContext, fail: str = ""
    ) -> str:
        _fail_if_told(fail, ns, key_of(context, call), "the bank", account)
        pipe = _redis().pipeline(transaction=True)
        pipe.hincrby(runs_key(ns), key_of(context, call), 1)
        pipe.hincrby(balances_key(ns), account, amount)
        balance = pipe.execute()[1]
        return f"deposited {amount} into {account}; balance {balance}"

    @compensate_for("load_deposit")
    def load_undeposit(
        self, ns: str, call: str, account: str, amount: int, context: InvocationContext, fail: str = ""
    ) -> None:
        pipe = _redis().pipeline(transaction=True)
        pipe.hincrby(comps_key(ns), key_of(context, call), 1)
        pipe.hincrby(balances_key(ns), account, -amount)
        pipe.execute()

    @tool("Reads the balance of an account", pool=POOL_A, timeout=30)
    def load_lookup(self, ns: str, call: str, account: str, context: InvocationContext) -> str:
        pipe = _redis().pipeline(transaction=True)
        pipe.hincrby(runs_key(ns), key_of(context, call), 1)
        pipe.hget(balances_key(ns), account)
        balance = pipe.execute()[1]
        return f"{account} holds {int(balance or 0)}"

    @tool("Holds an item in the warehouse", pool=POOL_B, timeout=30)
    def load_hold(self, ns: str, call: str, item: str, context: InvocationContext, fail: str = "") -> str:
        _fail_if_told(fail, ns, key_of(context, call), "the warehouse", item)
        pipe = _redis().pipeline(transaction=True)
        pipe.hincrby(runs_key(ns), key_of(context, call), 1)
        pipe.sadd(held_key(ns), item)
        pipe.execute()
        return f"holding {item}"

    @compensate_for("load_hold")
    def load_release(self, ns: str, call: str, item: str, context: InvocationContext, fail: str = "") -> None:
        pipe = _redis().pipeline(transaction=True)
        pipe.hincrby(comps_key(ns), key_of(context, call), 1)
        pipe.srem(held_key(ns), item)
        pipe.execute()


tools = LoadTools()
