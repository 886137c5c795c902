"""Tools of the `AiService` acceptance tests, served on pool `acc` by that module's own worker.

One tool per return behavior (each can be told to fail), a slow one, a counting one, one with typed
arguments, one that fails in a chosen way (a secret message, a `ToolErrorVisibleToLlm`, an empty
message, a wrapped cause), one that outlives its deadline, and one on a pool nobody serves.
Tool names start with `acc_` so the live catalog never confuses them with other tests' tools.
"""

from __future__ import annotations

import os
import time

import redis

from workers import ReturnBehavior, ToolErrorVisibleToLlm, tool

POOL = "acc"
ORPHAN_POOL = "acc-orphan"
SECRET = "password=hunter2"
SECRET_MESSAGE = f"db login failed for ORDERS_V2 ({SECRET})"

# What the tools raised in this process, latest last: with LocalExecutor they run here, so a test can
# check that the invocation fails with that very exception.
RAISED: list[BaseException] = []


class PaymentDeclined(ToolErrorVisibleToLlm, Exception):
    """A failure that says what the model may read; its own message holds a secret."""

    def __init__(self, account: str) -> None:
        super().__init__(f"card of {account} rejected by gateway ({SECRET})")
        self.account = account

    def message_for_llm(self) -> str:
        return f"The card of {self.account} was declined"


class WrapperError(Exception):
    """An exception wrapping the real cause (like LangChain4j's ToolGuardrailException)."""


def _raise(error: BaseException) -> None:
    RAISED.append(error)
    raise error


def _answer(behavior: ReturnBehavior, label: str, fail: bool) -> str:
    if fail:
        _raise(ValueError(f"{behavior.value} {label} failed"))
    return f"{behavior.value} {label} done"


@tool("Answers; the result goes back to the model", pool=POOL, timeout=10)
def acc_to_llm(label: str, fail: bool = False) -> str:
    return _answer(ReturnBehavior.TO_LLM, label, fail)


@tool(
    "Answers; the invocation returns at once", pool=POOL, timeout=10, return_behavior=ReturnBehavior.IMMEDIATE
)
def acc_immediate(label: str, fail: bool = False) -> str:
    return _answer(ReturnBehavior.IMMEDIATE, label, fail)


@tool(
    "Answers; the invocation returns at once when it is the last call",
    pool=POOL,
    timeout=10,
    return_behavior=ReturnBehavior.IMMEDIATE_IF_LAST,
)
def acc_if_last(label: str, fail: bool = False) -> str:
    return _answer(ReturnBehavior.IMMEDIATE_IF_LAST, label, fail)


@tool("Sleeps, then answers", pool=POOL, timeout=10)
def acc_slow(label: str, seconds: float) -> str:
    time.sleep(seconds)
    return f"{label} slept {seconds}"


@tool("Counts its calls in Redis", pool=POOL, timeout=10)
def acc_count(key: str) -> int:
    client = redis.Redis.from_url(os.environ["TOOLFLEET_REDIS_URL"])
    try:
        return int(client.incr(f"acc:count:{key}"))
    finally:
        client.close()


@tool("Takes typed arguments", pool=POOL, timeout=10)
def acc_typed(count: int, flag: bool = False) -> str:
    return f"count={count} flag={flag}"


@tool("Fails in a chosen way", pool=POOL, timeout=10)
def acc_raise(how: str) -> str:
    if how == "secret":
        _raise(RuntimeError(SECRET_MESSAGE))
    if how == "visible":
        _raise(PaymentDeclined("ACME"))
    if how == "empty":
        _raise(RuntimeError())
    if how == "wrapped":
        error = WrapperError("wrapper: guardrail tripped")
        error.__cause__ = LookupError("inner: order 7 not found")
        _raise(error)
    return f"did not fail: {how}"


@tool("Sleeps past its deadline", pool=POOL, timeout=0.3)
def acc_sleepy(seconds: float) -> str:
    time.sleep(seconds)
    return f"slept {seconds}"


@tool("Lives on a pool no worker serves", pool=ORPHAN_POOL, timeout=5)
def acc_orphan() -> str:
    return "served"
