"""toolfleet's agent side: the LLM loop, models, memory, and where tool calls run."""

from orchestrator.errors import OrchestratorError, UnknownToolError
from orchestrator.executors import LocalExecutor, ToolExecutor
from workers import ToolExecution, ToolExecutionRequest

__all__ = [
    "LocalExecutor",
    "OrchestratorError",
    "ToolExecution",
    "ToolExecutionRequest",
    "ToolExecutor",
    "UnknownToolError",
]
