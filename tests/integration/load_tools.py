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

import redis

from tests.integration.side_effects import process_client
from workers import InvocationContext, ToolErrorVisibleToLlm, compensate_for, tool

POOL_A = "loadA"
POOL_B = "loadB"
REFUSED = "{what} refused: {subject}"
BROKEN = "{what} is on fire: {subject}"


def _redis() -> redis.Redis:
    return process_client(socket_timeout=10)


def key_of(context: InvocationContext, call: str) -> str:
    return f"{context.invocation_id}:{call}"


def ns_key(ns: str, what: str) -> str:
    """The Redis key of `what` (`runs`, `comps`, `balances`, `held`) under the namespace `ns`."""
    return f"load:{ns}:{what}"


class Refused(ToolErrorVisibleToLlm, Exception):
    """The bank or the warehouse said no; the model is told."""


class OnFire(Exception):
    """Not visible to the model: under `achat`'s defaults it ends the invocation."""


def _fail_if_told(fail: str, ns: str, key: str, what: str, subject: str) -> None:
    if not fail:
        return
    _redis().hincrby(ns_key(ns, "runs"), key, 1)
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
        pipe.hincrby(ns_key(ns, "runs"), key_of(context, call), 1)
        pipe.hincrby(ns_key(ns, "balances"), account, amount)
        balance = pipe.execute()[1]
        return f"deposited {amount} into {account}; balance {balance}"

    @compensate_for("load_deposit")
    def load_undeposit(
        self, ns: str, call: str, account: str, amount: int, context: InvocationContext, fail: str = ""
    ) -> None:
        pipe = _redis().pipeline(transaction=True)
        pipe.hincrby(ns_key(ns, "comps"), key_of(context, call), 1)
        pipe.hincrby(ns_key(ns, "balances"), account, -amount)
        pipe.execute()

    @tool("Reads the balance of an account", pool=POOL_A, timeout=30)
    def load_lookup(self, ns: str, call: str, account: str, context: InvocationContext) -> str:
        pipe = _redis().pipeline(transaction=True)
        pipe.hincrby(ns_key(ns, "runs"), key_of(context, call), 1)
        pipe.hget(ns_key(ns, "balances"), account)
        balance = pipe.execute()[1]
        return f"{account} holds {int(balance or 0)}"

    @tool("Holds an item in the warehouse", pool=POOL_B, timeout=30)
    def load_hold(self, ns: str, call: str, item: str, context: InvocationContext, fail: str = "") -> str:
        _fail_if_told(fail, ns, key_of(context, call), "the warehouse", item)
        pipe = _redis().pipeline(transaction=True)
        pipe.hincrby(ns_key(ns, "runs"), key_of(context, call), 1)
        pipe.sadd(ns_key(ns, "held"), item)
        pipe.execute()
        return f"holding {item}"

    @compensate_for("load_hold")
    def load_release(self, ns: str, call: str, item: str, context: InvocationContext, fail: str = "") -> None:
        pipe = _redis().pipeline(transaction=True)
        pipe.hincrby(ns_key(ns, "comps"), key_of(context, call), 1)
        pipe.srem(ns_key(ns, "held"), item)
        pipe.execute()


tools = LoadTools()
