"""Tools of the `ident` pool, served by the worker of `test_parity_identity_errors.py`.

They report the identity of their call (and of their compensation) into Redis, and fail in known
ways so that error handlers can be compared between `LocalExecutor` and worker pools.
"""

from __future__ import annotations

import json
import os
from typing import Any

import redis

from workers import InvocationContext, ToolCallIdentity, ToolErrorVisibleToLlm, compensate_for, tool

POOL = "ident"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["TOOLFLEET_REDIS_URL"])


def identity_json(identity: ToolCallIdentity) -> dict[str, Any]:
    return {
        "invocation_id": str(identity.invocation_id),
        "call_id": identity.call_id,
        "idempotency_key": identity.idempotency_key,
        "attempt": identity.attempt,
    }


def record_key(label: str) -> str:
    return f"test:identity:{label}"


def recorded(label: str) -> list[dict[str, Any]]:
    """Every identity recorded under `label`, in the order the calls ran."""
    return [json.loads(item) for item in _redis().lrange(record_key(label), 0, -1)]


def _record(label: str, identity: ToolCallIdentity) -> None:
    _redis().rpush(record_key(label), json.dumps(identity_json(identity)))


class Seats:
    """A compensable booking: the tool and its compensation both ask for the call's identity."""

    @tool("Books a seat", pool=POOL, timeout=10)
    def book(self, seat: str, call: ToolCallIdentity, context: InvocationContext) -> dict[str, Any]:
        _record(f"book:{seat}", call)
        return {"identity": identity_json(call), "invocation_id": str(context.invocation_id)}

    @compensate_for("book")
    def unbook(self, seat: str, call: ToolCallIdentity) -> None:
        _record(f"unbook:{seat}", call)
        if seat.startswith("stubborn") and call.attempt == 1:
            raise RuntimeError(f"seat {seat} could not be released yet")

    @tool("Refuses every seat", pool=POOL, timeout=10)
    def refuse(self, seat: str) -> str:
        raise ValueError(f"seat {seat} is taken")


seats = Seats()


class Retry(Exception):
    """A transient failure the tool declares retryable."""


@tool("Fails its first two attempts", pool=POOL, timeout=10, retries=2, retry_on=(Retry,))
def third_time_lucky(label: str, call: ToolCallIdentity) -> int:
    _record(f"lucky:{label}", call)
    if call.attempt < 3:
        raise Retry(f"attempt {call.attempt} failed")
    return call.attempt


class PaymentDeclined(Exception):
    """A tool's own exception type: its qualified name reaches handlers on workers too."""


class CardHint(ToolErrorVisibleToLlm, Exception):
    """A failure whose text the model may read."""


@tool("Pays, wrapping the provider's refusal", pool=POOL, timeout=10)
def pay_wrapped(amount: int) -> str:
    try:
        raise PaymentDeclined(f"card declined for {amount}")
    except PaymentDeclined as exc:
        raise RuntimeError("payment failed") from exc


@tool("Pays, raising the provider's refusal itself", pool=POOL, timeout=10)
def pay_plain(amount: int) -> str:
    raise PaymentDeclined(f"card declined for {amount}")


@tool("Pays, telling the model what to do", pool=POOL, timeout=10)
def pay_visible(amount: int) -> str:
    raise CardHint("try another card") from PaymentDeclined(f"secret reason for {amount}")
