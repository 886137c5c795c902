"""Data of one invocation that tools may receive: parameters, context, memory id and call identity.

A tool asks for them by annotating a parameter with one of these types; they are injected by the
runtime and never shown to the model.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

__all__ = [
    "Invocation",
    "InvocationContext",
    "InvocationParameters",
    "ToolCallIdentity",
    "ToolMemoryId",
    "idempotency_key",
]


class InvocationParameters(MutableMapping[str, Any]):
    """A mapping given to `chat(..., parameters=...)` and shared by every tool of the invocation.

    Values must be JSON-serializable: a tool on a worker machine receives a copy, and what it writes
    is merged back into the invocation and seen by the next tool.
    """

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = dict(values or {})
        self._initial: dict[str, Any] = copy.deepcopy(self._values)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._values[key] = value

    def __delitem__(self, key: str) -> None:
        del self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"InvocationParameters({self._values!r})"

    def to_json(self) -> dict[str, Any]:
        return dict(self._values)

    def changes(self) -> dict[str, Any]:
        """What differs from the values given at creation, in-place changes included.

        A removed key maps to a removal marker; `merge()` applies the result to another copy.
        """
        changed = {k: v for k, v in self._values.items() if k not in self._initial or self._initial[k] != v}
        changed.update({k: _REMOVED for k in self._initial if k not in self._values})
        return changed

    def merge(self, changes: Mapping[str, Any]) -> None:
        """Apply `changes()` of another copy of these parameters."""
        for key, value in changes.items():
            if value == _REMOVED:
                self._values.pop(key, None)
            else:
                self._values[key] = value


_REMOVED = {"__toolfleet_removed__": True}


class ToolMemoryId(str):
    """The memory id of the invocation (`"default"` when none was given)."""

    __slots__ = ()


@dataclass(frozen=True)
class InvocationContext:
    """Who and what an invocation is about; injected into tools, providers and error handlers."""

    invocation_id: UUID = field(default_factory=uuid4)
    service_name: str | None = None
    memory_id: str = "default"
    user_message: str | None = None
    timestamp: datetime = field(default_factory=lambda: datetime.now(UTC))

    def to_json(self) -> dict[str, Any]:
        return {
            "invocation_id": str(self.invocation_id),
            "service_name": self.service_name,
            "memory_id": self.memory_id,
            "user_message": self.user_message,
            "timestamp": self.timestamp.isoformat(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InvocationContext:
        return cls(
            invocation_id=UUID(str(data["invocation_id"])),
            service_name=data.get("service_name"),
            memory_id=str(data.get("memory_id") or "default"),
            user_message=data.get("user_message"),
            timestamp=datetime.fromisoformat(str(data["timestamp"])),
        )


@dataclass(frozen=True)
class Invocation:
    """The invocation data that travels with every call: context and a snapshot of the parameters."""

    context: InvocationContext = field(default_factory=InvocationContext)
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"context": self.context.to_json(), "parameters": dict(self.parameters)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Invocation:
        return cls(InvocationContext.from_json(data["context"]), dict(data.get("parameters") or {}))


def idempotency_key(invocation_id: UUID | str, call_id: str) -> str:
    """The key that identifies one tool call everywhere: its invocation id and its call id."""
    return f"{invocation_id}:{call_id}"


@dataclass(frozen=True)
class ToolCallIdentity:
    """Which call this is: injected into a tool or compensation parameter of this type.

    `idempotency_key` is the same wherever the call runs (in-process or on a worker), on every retry,
    and in the compensation that undoes it: pass it on to a payment API or a database so a repeated
    request is recognised. `attempt` counts the runs of this call (or of this compensation): 1 for the
    first, 2 for the first retry. `call_id` is the model's id of the call (`None` when it gave none).
    """

    invocation_id: UUID
    call_id: str | None
    idempotency_key: str
    attempt: int = 1

    @classmethod
    def of(
        cls,
        context: InvocationContext,
        call_id: str | None,
        tool_name: str,
        *,
        attempt: int = 1,
        key: str | None = None,
    ) -> ToolCallIdentity:
        """The identity of call `call_id` of `tool_name`; `key` when the dispatcher already made it."""
        return cls(
            invocation_id=context.invocation_id,
            call_id=call_id,
            idempotency_key=key or idempotency_key(context.invocation_id, call_id or tool_name),
            attempt=max(attempt, 1),
        )
