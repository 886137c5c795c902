"""The soak's agent and tools: what the fleet under test serves.

The tools stand for the kinds a fleet runs, each writing what it did to the ledger
(`bench/soak/ledger.py`), never to anything the fleet itself reads:

- `book` (threads pool): a side effect, undone by `unbook`; not idempotent.
- `charge` (prefork pool): a slower side effect, undone by `refund`; not idempotent.
- `stamp` (threads pool): an idempotent effect, keyed by the call's idempotency key.
- `crunch` (prefork pool): a slow tool that reports progress and must beat within its heartbeat
  timeout; its effect (that it finished) is not idempotent.
- `refuse` (threads pool): always fails, so the saga undoes what its batch and turn did.
- `wire` (threads pool): needs a person's approval; undone by `unwire`.

Every tool takes `ref`, a name the scripted model makes unique per call of a plan, so the ledger tells
which call of which request each entry belongs to.
"""

from __future__ import annotations

import os
import time

from bench.soak import ledger
from orchestrator import AiService, CeleryExecutor, Journal, OpenAiChatModel
from workers import ToolCallIdentity, ToolErrorVisibleToLlm, ToolProgressReporter, compensate_for, tool

__all__ = ["HEAVY_POOL", "POOL", "TOOLS", "soak"]

POOL = "soak"
HEAVY_POOL = "soak-heavy"
MODEL_ENV = "SOAK_MODEL_URL"
CRUNCH_HEARTBEAT_S = 3.0
APPROVAL_TIMEOUT_S = 30.0  # an approval nobody decides expires (rejected) after this


def _effect(tool_name: str, ref: str, identity: ToolCallIdentity) -> str:
    ledger.effect(
        identity.idempotency_key,
        tool=tool_name,
        ref=ref,
        invocation=str(identity.invocation_id),
        call=identity.call_id,
    )
    return f"ok {ref}"


def _undo(tool_name: str, ref: str, identity: ToolCallIdentity) -> None:
    ledger.undo(identity.idempotency_key, tool=tool_name, ref=ref, invocation=str(identity.invocation_id))


class Desk:
    """Bookings and wires: side effects a failed batch or an abandoned invocation must undo."""

    @tool("Books `ref`", pool=POOL, timeout=20)
    def book(self, ref: str, identity: ToolCallIdentity) -> str:
        time.sleep(0.05)
        return _effect("book", ref, identity)

    @compensate_for("book")
    def unbook(self, ref: str, identity: ToolCallIdentity) -> None:
        _undo("book", ref, identity)

    @tool("Wires money for `ref` (a person approves it first)", pool=POOL, timeout=20, requires_approval=True)
    def wire(self, ref: str, identity: ToolCallIdentity) -> str:
        return _effect("wire", ref, identity)

    @compensate_for("wire")
    def unwire(self, ref: str, identity: ToolCallIdentity) -> None:
        _undo("wire", ref, identity)

    @tool("Always fails", pool=POOL, timeout=20)
    def refuse(self, ref: str) -> str:
        raise ToolErrorVisibleToLlm.from_message(f"{ref} refused")


class Till:
    """Charges on the prefork pool, refunded when their saga fails."""

    @tool("Charges `ref` after `seconds` of work", pool=HEAVY_POOL, timeout=30)
    def charge(self, ref: str, seconds: float, identity: ToolCallIdentity) -> str:
        time.sleep(seconds)
        return _effect("charge", ref, identity)

    @compensate_for("charge")
    def refund(self, ref: str, seconds: float, identity: ToolCallIdentity) -> None:
        _undo("charge", ref, identity)


@tool("Stamps `ref`; safe to run again with the same idempotency key", pool=POOL, timeout=20, idempotent=True)
def stamp(ref: str, identity: ToolCallIdentity) -> str:
    return _effect("stamp", ref, identity)


@tool(
    "Crunches `ref` for `seconds`, reporting progress",
    pool=HEAVY_POOL,
    timeout=40,
    heartbeat_timeout_s=CRUNCH_HEARTBEAT_S,
)
def crunch(ref: str, seconds: float, identity: ToolCallIdentity, progress: ToolProgressReporter) -> str:
    steps = max(int(seconds / 0.25), 1)
    for step in range(steps):
        time.sleep(seconds / steps)
        progress.progress(fraction=(step + 1) / steps, message=f"{ref} {step + 1}/{steps}")
    return _effect("crunch", ref, identity)


TOOLS = ("book", "wire", "refuse", "charge", "stamp", "crunch")
COMPENSABLE = frozenset({"book", "wire", "charge"})
IDEMPOTENT = frozenset({"stamp"})


def soak() -> AiService:
    """The agent the soak's replicas serve (`--agent soak=bench.soak.agents:soak`)."""
    model = OpenAiChatModel("soak-model", api_key="sk-soak", base_url=os.environ[MODEL_ENV], timeout_s=30)
    return AiService(
        chat_model=model,
        tools=[Desk(), Till(), stamp, crunch],
        executor=CeleryExecutor(),
        journal=Journal(os.environ["TOOLFLEET_DATABASE_URL"]),
        compensate_on_tool_errors=True,
        approval_timeout_s=APPROVAL_TIMEOUT_S,
        name="soak",
    )
