"""What Flower shows of a tool task's arguments."""

from __future__ import annotations

from typing import Any

__all__ = ["flower_reprs"]


def flower_reprs(kwargs: dict[str, Any]) -> dict[str, str]:
    """What Flower shows as a task's arguments: the model's arguments and the ids, never the
    invocation's parameters (they may hold credentials)."""
    request = kwargs.get("request") or (kwargs.get("execution") or {}).get("request") or {}
    arguments = str(request.get("arguments", ""))
    if len(arguments) > 1024:
        arguments = arguments[:1024] + "…"
    invocation_id = ((kwargs.get("invocation") or {}).get("context") or {}).get("invocation_id")
    call_id = request.get("id")
    shown = f"{{'arguments': {arguments!r}, 'call_id': {call_id!r}, 'invocation_id': '{invocation_id}'}}"
    return {"argsrepr": "()", "kwargsrepr": shown}
