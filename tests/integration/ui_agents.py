"""The agent and tools of the run view's browser tests, on pool `ui`.

`clerk` is an `AiService` whose scripted model reads the user's message as a plan: steps separated
by `;`, each step one batch of calls separated by `&`; a call is `book WHAT`, `refuse`, or
`crawl STEPS SECONDS` (a tool reporting its progress step by step), or `pay TO AMOUNT` (a tool
that waits for a person's approval). When the plan is done it
answers `done: <the last step's results, joined by " | ">`. A message starting `echo ` asks the
tool `echo` to repeat the rest, and the answer repeats what it said. A failed call fails the
invocation (after its compensations).
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
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from orchestrator.handlers import fail_invocation
from orchestrator.models.base import ChatRequest
from workers import ToolErrorVisibleToLlm, ToolProgressReporter, compensate_for, tool

POOL = "ui"


class Desk:
    """Bookings undone when a later call fails."""

    @tool("Books `what`", pool=POOL, timeout=20)
    def book(self, what: str) -> str:
        return f"booked {what}"

    @compensate_for("book")
    def unbook(self, what: str) -> None:
        return None

    @tool("Always fails", pool=POOL, timeout=20)
    def refuse(self) -> str:
        raise ToolErrorVisibleToLlm.from_message("the desk refuses")


@tool("Works through `steps` steps over `seconds`, reporting each", pool=POOL, timeout=120)
def crawl(steps: int, seconds: float, progress: ToolProgressReporter) -> str:
    for step in range(1, steps + 1):
        time.sleep(seconds / steps)
        progress.progress(fraction=step / steps, message=f"step {step} of {steps}")
    return f"crawled {steps} steps"


@tool("Pays `amount` to `to`, once a person approves", pool=POOL, timeout=20, requires_approval=True)
def pay(to: str, amount: int) -> str:
    return f"paid {amount} to {to}"


@tool("Repeats `text`", pool=POOL, timeout=20)
def echo(text: str) -> str:
    return text


def _plan(request: ChatRequest) -> AiMessage | str:
    messages = request.messages
    asked = max(i for i, m in enumerate(messages) if isinstance(m, UserMessage))
    text = messages[asked].single_text  # type: ignore[union-attr]
    later = messages[asked + 1 :]
    results = [m.text for m in later if isinstance(m, ToolExecutionResultMessage)]
    if text.startswith("echo "):
        if not results:
            return _calls([("echo", {"text": text[5:]})], "echo")
        return f"said: {results[-1]}"
    steps = [step.strip() for step in text.split(";") if step.strip()]
    done = sum(1 for m in later if isinstance(m, AiMessage) and m.tool_execution_requests)
    if done < len(steps):
        return _calls([_call(words.split()) for words in steps[done].split("&")], f"s{done}")
    last = [m.text for m in later[-len(steps[-1].split("&")) :] if isinstance(m, ToolExecutionResultMessage)]
    return "done: " + " | ".join(last)


def _call(words: list[str]) -> tuple[str, dict[str, object]]:
    if words[0] == "book":
        return "book", {"what": words[1]}
    if words[0] == "pay":
        return "pay", {"to": words[1], "amount": int(words[2])}
    if words[0] == "crawl":
        return "crawl", {"steps": int(words[1]), "seconds": float(words[2])}
    return "refuse", {}


def _calls(calls: list[tuple[str, dict[str, object]]], prefix: str) -> AiMessage:
    requests = [
        ToolExecutionRequest(id=f"call_{prefix}_{i}", name=name, arguments=json.dumps(arguments))
        for i, (name, arguments) in enumerate(calls)
    ]
    return AiMessage(tool_execution_requests=requests)


def clerk() -> AiService:
    """The agent the tests serve."""
    return AiService(
        name="clerk",
        chat_model=ScriptedChatModel(_plan),
        tools=[Desk(), crawl, pay, echo],
        executor=CeleryExecutor(),
        journal=Journal(os.environ["TOOLFLEET_DATABASE_URL"]),
        compensate_on_tool_errors=True,
        tool_execution_error_handler=fail_invocation(),
    )
