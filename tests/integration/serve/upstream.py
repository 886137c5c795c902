"""The scripted upstream model of the `toolfleet serve` tests, in OpenAI's format.

The script reads the conversation the agent sends, so what the served agent answers shows what it
was given. On a user message:

- `add A B` calls `add`; `nap NS S` calls `nap`; `book NS WHAT` calls `book`;
- `book-then-refuse NS WHAT` calls `book` and `refuse` in one batch (the saga undoes the booking);
- anything else is answered `heard: <every user message of the conversation, joined by " | ">`.

After tool results it answers `done: <the results, joined by " | ">`.
"""

from __future__ import annotations

from typing import Any

from tests.integration.fake_openai import Reply, ToolCall

__all__ = ["script"]


def script(body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        results = []
        for message in reversed(messages):
            if message["role"] != "tool":
                break
            results.insert(0, _text(message["content"]))
        return Reply(content="done: " + " | ".join(results))
    words = _text(last["content"]).split()
    prefix = f"call_{len(messages)}"
    command, args = (words[0], words[1:]) if words else ("", [])
    if command == "add":
        return Reply(tool_calls=[ToolCall(f"{prefix}_0", "add", {"a": int(args[0]), "b": int(args[1])})])
    if command == "nap":
        return Reply(tool_calls=[ToolCall(f"{prefix}_0", "nap", {"ns": args[0], "seconds": float(args[1])})])
    if command == "book":
        return Reply(tool_calls=[ToolCall(f"{prefix}_0", "book", {"ns": args[0], "what": args[1]})])
    if command == "book-then-refuse":
        return Reply(
            tool_calls=[
                ToolCall(f"{prefix}_0", "book", {"ns": args[0], "what": args[1]}),
                ToolCall(f"{prefix}_1", "refuse", {"ns": args[0]}),
            ]
        )
    heard = [_text(m["content"]) for m in messages if m["role"] == "user"]
    return Reply(content="heard: " + " | ".join(heard))


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return str(content or "")
