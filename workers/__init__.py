"""toolfleet's tool side: define tools, describe them to the model, bind the model's arguments.

A worker machine needs only this package: it never imports `orchestrator`.
"""

from workers.artifacts import Artifact, ArtifactRef
from workers.calls.invocation import InvocationContext, InvocationParameters, ToolCallIdentity, ToolMemoryId
from workers.calls.progress import ToolProgressReporter
from workers.calls.results import ToolExecutionResult
from workers.contents import Image, ImageContent, TextContent
from workers.errors import (
    ToolArgumentsError,
    ToolCancelled,
    ToolDefinitionError,
    ToolErrorVisibleToLlm,
    ToolfleetError,
    ToolProgressError,
    ToolResultError,
)
from workers.protocol import OutcomeKind, ToolExecution, ToolExecutionRequest, ToolOutcome
from workers.tools import ToolDefinition, compensate_for, tool, tool_specifications_from
from workers.tools._types import Param
from workers.tools.registry import ToolRegistry
from workers.tools.specification import ReturnBehavior, SearchBehavior, ToolSpecification

__all__ = [
    "Artifact",
    "ArtifactRef",
    "Image",
    "ImageContent",
    "InvocationContext",
    "InvocationParameters",
    "OutcomeKind",
    "Param",
    "ReturnBehavior",
    "SearchBehavior",
    "TextContent",
    "ToolArgumentsError",
    "ToolCallIdentity",
    "ToolCancelled",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolErrorVisibleToLlm",
    "ToolExecution",
    "ToolExecutionRequest",
    "ToolExecutionResult",
    "ToolMemoryId",
    "ToolOutcome",
    "ToolProgressError",
    "ToolProgressReporter",
    "ToolRegistry",
    "ToolResultError",
    "ToolSpecification",
    "ToolfleetError",
    "compensate_for",
    "tool",
    "tool_specifications_from",
]
