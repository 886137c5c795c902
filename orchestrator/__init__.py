"""toolfleet's agent side: the LLM loop, models, memory, and where tool calls run."""

from orchestrator.errors import OrchestratorError, UnknownToolError
from orchestrator.executors import CeleryExecutor, LocalExecutor, ToolExecutor
from workers import ToolExecution, ToolExecutionRequest

__all__ = [
    "CeleryExecutor",
    "LocalExecutor",
    "OrchestratorError",
    "ToolExecution",
    "ToolExecutionRequest",
    "ToolExecutor",
    "UnknownToolError",
]
