"""Tools: `@tool`, `@compensate_for`, their definitions, and discovery from objects and modules."""

from workers.tools._discovery import (
    Compensation,
    ToolDefinition,
    ToolOptions,
    ToolParameter,
    check_compensations,
    compensate_for,
    discover_tools,
    tool,
    tool_specifications_from,
)

__all__ = [
    "Compensation",
    "ToolDefinition",
    "ToolOptions",
    "ToolParameter",
    "check_compensations",
    "compensate_for",
    "discover_tools",
    "tool",
    "tool_specifications_from",
]
