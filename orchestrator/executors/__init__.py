"""Where tool calls run: the `ToolExecutor` protocol and its implementations."""

from orchestrator.executors.base import ToolExecutor, execute_batch
from orchestrator.executors.celery import CeleryExecutor
from orchestrator.executors.local import LocalExecutor

__all__ = ["CeleryExecutor", "LocalExecutor", "ToolExecutor", "execute_batch"]
