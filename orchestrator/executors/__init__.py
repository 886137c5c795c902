"""Where tool calls run: the `ToolExecutor` protocol and its implementations."""

from orchestrator.executors._call_events import CallEvent, observe_calls
from orchestrator.executors._progress import observe_progress
from orchestrator.executors.base import ToolExecutor, execute_batch
from orchestrator.executors.celery import CeleryExecutor
from orchestrator.executors.local import LocalExecutor

__all__ = [
    "CallEvent",
    "CeleryExecutor",
    "LocalExecutor",
    "ToolExecutor",
    "execute_batch",
    "observe_calls",
    "observe_progress",
]
