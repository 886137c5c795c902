"""The names of toolfleet's tasks, and what a worker says when it refuses one it does not serve.

Part of the wire contract, re-exported by `workers.protocol`: `tool.<name>` runs a call of a tool,
`compensate.<name>` undoes one, and nothing else is a toolfleet task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "COMPENSATION_PREFIX",
    "TASK_PREFIX",
    "NotRegisteredDetail",
    "compensation_task_name",
    "is_compensation_task",
    "is_toolfleet_task",
    "tool_of_task",
    "tool_task_name",
]

TASK_PREFIX = "tool."
COMPENSATION_PREFIX = "compensate."


def tool_task_name(tool: str) -> str:
    """The Celery task that runs a call of `tool`."""
    return TASK_PREFIX + tool


def compensation_task_name(tool: str) -> str:
    """The Celery task that undoes a call of `tool`."""
    return COMPENSATION_PREFIX + tool


def is_toolfleet_task(task: str) -> bool:
    """Whether the task named `task` is toolfleet's: a tool's call or its compensation."""
    return task.startswith((TASK_PREFIX, COMPENSATION_PREFIX))


def is_compensation_task(task: str) -> bool:
    """Whether the task named `task` undoes a call (`compensate.<name>`)."""
    return task.startswith(COMPENSATION_PREFIX)


def tool_of_task(task: str) -> str | None:
    """The tool whose calls the task named `task` runs (`tool.<name>`), else `None`."""
    return task[len(TASK_PREFIX) :] if task.startswith(TASK_PREFIX) else None


@dataclass(frozen=True)
class NotRegisteredDetail:
    """What a worker adds to Celery's `NotRegistered(<task name>)` when it refuses a task it does not
    serve: its hostname, the pool the message came through and the tools it serves there."""

    worker: str
    pool: str | None
    tools: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"worker": self.worker, "pool": self.pool, "tools": list(self.tools)}

    @classmethod
    def from_json(cls, data: Any) -> NotRegisteredDetail | None:
        """The detail stored by a toolfleet worker; `None` for anything else (a plain Celery worker
        stores none)."""
        if not isinstance(data, dict):
            return None
        worker, pool, tools = data.get("worker"), data.get("pool"), data.get("tools")
        if not isinstance(worker, str) or not worker or not isinstance(tools, list):
            return None
        return cls(
            worker=worker, pool=pool if isinstance(pool, str) and pool else None, tools=tuple(map(str, tools))
        )
