"""Where tool calls run: the `ToolExecutor` protocol and its implementations."""

from orchestrator.executors.base import ToolExecutor
from orchestrator.executors.local import LocalExecutor

__all__ = ["LocalExecutor", "ToolExecutor"]
