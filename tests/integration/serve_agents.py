"""The agent and tools of the `toolfleet serve` tests.

`assistant` is an `AiService` on the real OpenAI provider pointed at the test's scripted upstream
(`SERVE_TEST_UPSTREAM`), its tools on pool `serve`, its journal at `TOOLFLEET_DATABASE_URL`. The
tools record what they did in the test Redis under `serve:<ns>:*`, `ns` being an argument the
scripted model passes (one per test):

- `serve:<ns>:booked` (list): every `book` call's `what`;
- `serve:<ns>:undone` (list): every compensation of `book`, in the order they ran;
- `serve:<ns>:napping` (counter): `nap` and `heavy_nap` calls that started;
- `serve:<ns>:stamped` (list): every `stamp` call's `what` (an idempotent tool);
- `serve:<ns>:unbooking` (counter): slow compensations of `book` (of `what` "slowly") that started;
- `serve:<ns>:wired` (list): every `wire` call's amount (`banker`'s tool, which needs approval).
"""

from __future__ import annotations

import json
import os
import time

from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    Journal,
    LocalExecutor,
    OpenAiChatModel,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from orchestrator.models.base import ChatRequest
from tests.integration.side_effects import process_client
from workers import ToolErrorVisibleToLlm, compensate_for, tool

POOL = "serve"


@tool("Adds two integers", pool=POOL, timeout=10)
def add(a: int, b: int) -> int:
    return a + b


@tool("Sleeps `seconds`, then says so", pool=POOL, timeout=90)
def nap(ns: str, seconds: float) -> str:
    process_client().incr(f"serve:{ns}:napping")
    time.sleep(seconds)
    return f"slept {seconds:g} s"


@tool(
    "Always raises (an error the model is not meant to see, unless the handler sends it)",
    pool=POOL,
    timeout=10,
)
def crash(ns: str) -> str:
    raise RuntimeError(f"the printer of {ns} caught fire")


class Desk:
    """Bookings that are undone when a later call of the batch fails."""

    @tool("Books `what`; returns what was booked", pool=POOL, timeout=10)
    def book(self, ns: str, what: str) -> str:
        process_client().rpush(f"serve:{ns}:booked", what)
        return f"booked {what}"

    @compensate_for("book")
    def unbook(self, ns: str, what: str) -> None:
        if what == "slowly":  # a compensation long enough to kill its replica during it
            process_client().incr(f"serve:{ns}:unbooking")
            time.sleep(3)
        process_client().rpush(f"serve:{ns}:undone", what)

    @tool("Always fails", pool=POOL, timeout=10)
    def refuse(self, ns: str) -> str:
        raise ToolErrorVisibleToLlm.from_message("the desk refuses")


@tool(
    "Stamps `what`; safe to run again with the same idempotency key", pool=POOL, timeout=30, idempotent=True
)
def stamp(ns: str, what: str) -> str:
    process_client().rpush(f"serve:{ns}:stamped", what)
    return f"stamped {what}"


HEAVY_POOL = "serve-heavy"


@tool("Sleeps `seconds` in a prefork pool's child, then says so", pool=HEAVY_POOL, timeout=120)
def heavy_nap(ns: str, seconds: float) -> str:
    process_client().incr(f"serve:{ns}:napping")
    time.sleep(seconds)
    return f"slept {seconds:g} s"


def assistant() -> AiService:
    """The agent the tests serve (a callable, as `--agent NAME=MODULE:ATTRIBUTE` allows)."""
    model = OpenAiChatModel("gpt-4o-mini", api_key="sk-upstream", base_url=os.environ["SERVE_TEST_UPSTREAM"])
    return AiService(
        chat_model=model,
        tools=[add, nap, crash, stamp, Desk()],
        executor=CeleryExecutor(),
        journal=Journal(os.environ["TOOLFLEET_DATABASE_URL"]),
        compensate_on_tool_errors=True,
    )


def heavy() -> AiService:
    """`assistant` with its heavy tool, on a prefork pool (the replicas serving it need that pool)."""
    model = OpenAiChatModel("gpt-4o-mini", api_key="sk-upstream", base_url=os.environ["SERVE_TEST_UPSTREAM"])
    return AiService(
        chat_model=model,
        tools=[heavy_nap],
        executor=CeleryExecutor(),
        journal=Journal(os.environ["TOOLFLEET_DATABASE_URL"]),
    )


def undoer() -> AiService:
    """`assistant`, but an invocation whose replica dies is undone by another, not carried on."""
    model = OpenAiChatModel("gpt-4o-mini", api_key="sk-upstream", base_url=os.environ["SERVE_TEST_UPSTREAM"])
    return AiService(
        chat_model=model,
        tools=[add, nap, crash, Desk()],
        executor=CeleryExecutor(),
        journal=Journal(os.environ["TOOLFLEET_DATABASE_URL"]),
        compensate_on_tool_errors=True,
        on_orchestrator_loss="compensate",
    )


@tool("Runs where no worker serves", pool="serve-unstaffed", timeout=10)
def unstaffed() -> str:
    return "never"


def _fails(request: object) -> str:
    raise RuntimeError("internal detail: the vault password is hunter2")


def broken() -> AiService:
    """An agent whose model fails unexpectedly: the service answers 500 without the details."""
    return AiService(chat_model=ScriptedChatModel(_fails), executor=LocalExecutor())


def lonely() -> AiService:
    """An agent whose tool's pool has no worker: the replica is not ready."""
    return AiService(chat_model=ScriptedChatModel(["unused"]), tools=[unstaffed], executor=CeleryExecutor())


@tool("Wires `amount` (needs a person's approval)", pool=POOL, timeout=10, requires_approval=True)
def wire(ns: str, amount: int) -> str:
    process_client().rpush(f"serve:{ns}:wired", str(amount))
    return f"wired {amount}"


def _banker_script(request: ChatRequest) -> AiMessage | str:
    results = [m for m in request.messages if isinstance(m, ToolExecutionResultMessage)]
    if results:
        return f"banker: {results[-1].text}"
    ns = next(m.single_text for m in request.messages if isinstance(m, UserMessage))
    arguments = json.dumps({"ns": ns, "amount": 2500})
    return AiMessage(tool_execution_requests=[ToolExecutionRequest("wire-1", "wire", arguments)])


def banker() -> AiService:
    """An agent whose one call waits for approval (the user's message is the test's namespace)."""
    return AiService(
        chat_model=ScriptedChatModel(_banker_script),
        tools=[wire],
        executor=CeleryExecutor(),
        journal=Journal(os.environ["TOOLFLEET_DATABASE_URL"]),
        name="banker",
    )
