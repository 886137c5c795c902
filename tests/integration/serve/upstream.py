"""The scripted upstream model of the `toolfleet serve` tests, in OpenAI's format.

The script reads the conversation the agent sends, so what the served agent answers shows what it
was given. A user message of commands is a plan: steps separated by `;`, each step one batch of
calls separated by `&`; a call is `add A B`, `nap NS SECONDS`, `hnap NS SECONDS` (on the prefork
pool), `book NS WHAT`, `stamp NS WHAT`, `refuse NS` or `crash NS`. The
model asks for the next step's calls after each step's results, and when the plan is done answers
`done: <the last step's results, joined by " | ">`. Any other user message is answered
`heard: <every user message of the conversation, joined by " | ">`.

`hold(ns, turn)` makes the model's answer to a plan naming `ns` wait, at that turn (0 is the first
request of the plan), until the test releases it: the test kills a replica while the model thinks.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tests.integration.fake_openai import Reply, ToolCall

__all__ = ["Hold", "hold", "script"]

COMMANDS = {"add", "nap", "hnap", "book", "stamp", "refuse", "crash"}
HOLD_S = 60.0  # the longest a held answer waits for its release


@dataclass
class Hold:
    """One answer held back: `asked` once its request came, sent once `released`."""

    turn: int
    asked: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)


_holds: dict[str, Hold] = {}


def hold(ns: str, turn: int) -> Hold:
    """Hold back the model's answer to `ns`'s plan at `turn` (once)."""
    _holds[ns] = held = Hold(turn)
    return held


def script(body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    asked = max(i for i, m in enumerate(messages) if m["role"] == "user")
    text = _text(messages[asked]["content"])
    steps = [step.strip() for step in text.split(";") if step.strip()]
    if not steps or steps[0].split()[0] not in COMMANDS:
        heard = [_text(m["content"]) for m in messages if m["role"] == "user"]
        return Reply(content="heard: " + " | ".join(heard))
    done = sum(1 for m in messages[asked:] if m["role"] == "assistant" and m.get("tool_calls"))
    for ns, held in list(_holds.items()):
        if ns in text and held.turn == done and not held.asked.is_set():
            held.asked.set()
            held.released.wait(HOLD_S)
    if done < len(steps):
        calls = [call.split() for call in steps[done].split("&")]
        return Reply(tool_calls=[_call(f"call_{done}_{i}", *words) for i, words in enumerate(calls)])
    results = []
    for message in reversed(messages):
        if message["role"] != "tool":
            break
        results.insert(0, _text(message["content"]))
    return Reply(content="done: " + " | ".join(results))


def _call(call_id: str, command: str, *args: str) -> ToolCall:
    if command == "add":
        return ToolCall(call_id, "add", {"a": int(args[0]), "b": int(args[1])})
    if command == "nap":
        return ToolCall(call_id, "nap", {"ns": args[0], "seconds": float(args[1])})
    if command == "hnap":
        return ToolCall(call_id, "heavy_nap", {"ns": args[0], "seconds": float(args[1])})
    if command in ("book", "stamp"):
        return ToolCall(call_id, command, {"ns": args[0], "what": args[1]})
    return ToolCall(call_id, command, {"ns": args[0]})  # refuse, crash


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return str(content or "")
