"""The scripted upstream model of the `toolfleet serve` tests, in OpenAI's format.

The script reads the conversation the agent sends, so what the served agent answers shows what it
was given. A user message of commands is a plan: steps separated by `;`, each step one batch of
calls separated by `&`; a call is `add A B`, `nap NS SECONDS`, `book NS WHAT`, `refuse NS` or
`crash NS`. The
model asks for the next step's calls after each step's results, and when the plan is done answers
`done: <the last step's results, joined by " | ">`. Any other user message is answered
`heard: <every user message of the conversation, joined by " | ">`.
"""

from __future__ import annotations

from typing import Any

from tests.integration.fake_openai import Reply, ToolCall

__all__ = ["script"]

COMMANDS = {"add", "nap", "book", "refuse", "crash"}


def script(body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    asked = max(i for i, m in enumerate(messages) if m["role"] == "user")
    text = _text(messages[asked]["content"])
    steps = [step.strip() for step in text.split(";") if step.strip()]
    if not steps or steps[0].split()[0] not in COMMANDS:
        heard = [_text(m["content"]) for m in messages if m["role"] == "user"]
        return Reply(content="heard: " + " | ".join(heard))
    done = sum(1 for m in messages[asked:] if m["role"] == "assistant" and m.get("tool_calls"))
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
    if command == "book":
        return ToolCall(call_id, "book", {"ns": args[0], "what": args[1]})
    return ToolCall(call_id, command, {"ns": args[0]})  # refuse, crash


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return str(content or "")
