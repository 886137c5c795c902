"""`ToolFailure`: what a tool task raises for an error outcome, and the outcome read back from it."""

from __future__ import annotations

from typing import Any, cast

from workers import _failures
from workers.protocol import ToolOutcome

__all__ = ["ToolFailure", "failure_for", "failure_type", "outcome_from_failure"]

_FAILURE_MODULE = _failures.__name__


class ToolFailure(Exception):
    """A tool call that ended in an error; `args` are (message, outcome JSON)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else type(self).__name__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A prefork child hands its exception to the parent by pickle, and the parent has never seen
        # this dynamically named class: rebuild it by name there instead of looking it up.
        return (_rebuild_failure, (type(self).__name__, self.args))


def failure_type(name: str) -> type[ToolFailure]:
    cls = _failure_types.get(name)
    if cls is None:
        cls = cast(type[ToolFailure], type(name, (ToolFailure,), {"__module__": _FAILURE_MODULE}))
        setattr(_failures, name, cls)
        _failure_types[name] = cls
    return cls


def _rebuild_failure(name: str, args: tuple[Any, ...]) -> ToolFailure:
    return ToolFailure(*args) if name == "ToolFailure" else failure_type(name)(*args)


_failure_types: dict[str, type[ToolFailure]] = {}


def failure_for(outcome: ToolOutcome, worker: str | None = None) -> ToolFailure:
    """The exception a task raises for an error outcome, named after the tool's exception type."""
    name = outcome.error_type or "ToolFailure"
    if not name.isidentifier() or name == "ToolFailure":
        name = "ToolFailure"
        return ToolFailure(outcome.text, {**outcome.to_json(), "worker": worker})
    return failure_type(name)(outcome.text, {**outcome.to_json(), "worker": worker})


def outcome_from_failure(result: Any) -> ToolOutcome | None:
    """The structured outcome carried by a stored `ToolFailure`, or `None` for any other failure."""
    if not isinstance(result, dict) or result.get("exc_module") != _FAILURE_MODULE:
        return None
    message = result.get("exc_message")
    if isinstance(message, list | tuple) and len(message) == 2 and isinstance(message[1], dict):
        try:
            return ToolOutcome.from_json(message[1])
        except (KeyError, ValueError):
            return None
    return None
