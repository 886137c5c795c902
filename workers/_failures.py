"""`ToolFailure`: what a tool task raises for an error outcome, one class per tool exception type name.

The classes live in this module, whose dotted path is part of the wire contract (`FAILURE_MODULE`:
the orchestrator reads the outcome back from a stored failure of this module), so that Celery can
pickle them and keeps their own names: Flower then shows a failed call as, say,
`InsufficientFunds('...')`. A prefork pool's parent process unpickles what its children raise, so a
class is created on first lookup by name (the module's `__getattr__`), in any process.
"""

from __future__ import annotations

from typing import Any, cast

from workers.protocol import FAILURE_MODULE, ToolOutcome

__all__ = ["ToolFailure", "failure_for", "failure_type"]

if __name__ != FAILURE_MODULE:  # pragma: no cover - a move of this module must move the contract too
    raise ImportError(f"{__name__} must be importable as {FAILURE_MODULE}")


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


_failure_types: dict[str, type[ToolFailure]] = {"ToolFailure": ToolFailure}


def failure_type(name: str) -> type[ToolFailure]:
    """The `ToolFailure` subclass named `name`, created in this module on first use.

    Celery reads a stored failure back as `getattr(<this module>, name)`, which finds this module's
    own names first: a name it holds for something else (`Any`, `ToolOutcome`) is `ToolFailure`.
    """
    cls = _failure_types.get(name)
    if cls is None:
        if not _is_free(name):
            return ToolFailure
        cls = cast(type[ToolFailure], type(name, (ToolFailure,), {"__module__": __name__}))
        _failure_types[name] = cls
    return cls


def _is_free(name: str) -> bool:
    """Whether a class named `name` is found by name in this module: only through `__getattr__`."""
    return name.isidentifier() and not name.startswith("__") and name not in globals()


def _rebuild_failure(name: str, args: tuple[Any, ...]) -> ToolFailure:
    return failure_type(name)(*args)


def failure_for(outcome: ToolOutcome, worker: str | None = None) -> ToolFailure:
    """The exception a task raises for an error outcome, named after the tool's exception type."""
    return failure_type(outcome.error_type or "ToolFailure")(outcome.text, outcome.to_wire(worker))


def __getattr__(name: str) -> Any:
    # Called only for names this module does not hold: the failure classes, found or made by name.
    if not _is_free(name):
        raise AttributeError(name)
    return failure_type(name)
