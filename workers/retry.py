"""Which failures are worth another attempt, and how long to wait before it."""

from __future__ import annotations

import random

from workers.protocol import OutcomeKind, ToolOutcome
from workers.tools import ToolDefinition

__all__ = ["backoff_s", "is_transient"]


def is_transient(outcome: ToolOutcome, definition: ToolDefinition) -> bool:
    """An execution error raised as a connection error, a timeout, or a type the tool declared retryable."""
    if outcome.kind is not OutcomeKind.EXECUTION_ERROR or outcome.exception is None:
        return False
    return isinstance(outcome.exception, (ConnectionError, TimeoutError, *definition.options.retry_on))


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Exponential backoff with jitter: between half and all of `base_s * 2**attempt`, at most `cap_s`."""
    ceiling = min(cap_s, base_s * (2**attempt))
    return random.uniform(ceiling / 2, ceiling)
