"""The tools of the approval tests, on pool `approvals`: a transfer that needs a person's approval, a
reservation that does not, each undone by its compensation; every run and undo is counted in Redis
under the test's key, so a test sees what ran, how often and with which arguments."""

from __future__ import annotations

import json

from tests.integration.side_effects import process_client
from workers import compensate_for, tool

POOL = "approvals"


def runs_key(key: str, what: str) -> str:
    return f"approval-test:{key}:{what}"


@tool(pool=POOL, requires_approval=True, timeout=30)
def approval_transfer(to: str, amount: int, key: str) -> str:
    """Transfer money: every call waits for a person's approval."""
    process_client().rpush(runs_key(key, "transfers"), json.dumps({"to": to, "amount": amount}))
    return f"transferred {amount} to {to}"


@compensate_for("approval_transfer")
def undo_transfer(to: str, amount: int, key: str) -> None:
    process_client().incr(runs_key(key, "transfers-undone"))


@tool(pool=POOL, timeout=30)
def approval_reserve(key: str) -> str:
    """Reserve the funds (needs no approval)."""
    process_client().incr(runs_key(key, "reserved"))
    return "reserved"


@compensate_for("approval_reserve")
def release(key: str) -> None:
    process_client().incr(runs_key(key, "released"))
