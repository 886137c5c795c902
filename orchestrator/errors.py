"""Errors of the agent side. `OrchestratorError` is the root; it derives from toolfleet's root."""

from __future__ import annotations

from workers.errors import ToolfleetError

__all__ = ["OrchestratorError", "UnknownToolError"]


class OrchestratorError(ToolfleetError):
    """Root of the errors raised by the orchestrator."""


class UnknownToolError(OrchestratorError):
    """An executor was asked to run a tool it does not know."""
