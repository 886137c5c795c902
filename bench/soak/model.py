"""The soak's scripted model, served in OpenAI's format by the test suite's fake server.

A user message is a plan: `plan <id> <JSON list of steps>`, each step a list of calls
`[tool, ref, seconds?]`. The model asks for the next step's calls after each step's results (however
they came out) and, once the plan is done, answers `done <id>: <the last step's results>`. Any other
message is answered `heard <message>`.

The model is outside the fleet under test, so it keeps its own record for the checks: every result it
was told succeeded (`ok <ref>`), by ref.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.integration.fake_openai import Reply, ToolCall

__all__ = ["PlanModel", "plan_text"]


def plan_text(plan_id: str, steps: list[list[list[Any]]]) -> str:
    """The user message that asks for `steps`."""
    return f"plan {plan_id} {json.dumps(steps, separators=(',', ':'))}"


@dataclass
class PlanModel:
    """The script (`__call__`, given a request body) and what it was told."""

    told_ok: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        asked = max(i for i, m in enumerate(messages) if m["role"] == "user")
        text = _text(messages[asked]["content"])
        results = [_text(m["content"]) for m in messages[asked:] if m["role"] == "tool"]
        with self._lock:
            self.told_ok.update(r[3:] for r in results if r.startswith("ok "))
        if not text.startswith("plan "):
            return Reply(content=f"heard {text}")
        _, plan_id, steps_json = text.split(" ", 2)
        steps = json.loads(steps_json)
        done = sum(1 for m in messages[asked:] if m["role"] == "assistant" and m.get("tool_calls"))
        if done < len(steps):
            return Reply(tool_calls=[_call(f"c{done}_{i}", *call) for i, call in enumerate(steps[done])])
        last = []
        for message in reversed(messages):
            if message["role"] != "tool":
                break
            last.insert(0, _text(message["content"]))
        return Reply(content=f"done {plan_id}: " + " | ".join(last))


def _call(call_id: str, tool: str, ref: str, *seconds: float) -> ToolCall:
    arguments: dict[str, Any] = {"ref": ref}
    if seconds:
        arguments["seconds"] = seconds[0]
    return ToolCall(call_id, tool, arguments)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return str(content or "")
