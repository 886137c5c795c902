"""Which failures are worth another attempt, and how long to wait before it."""

from __future__ import annotations

import math
import random

from workers.protocol import OutcomeKind, ToolOutcome
from workers.settings import Settings, is_amqp
from workers.tools import ToolDefinition

__all__ = ["backoff_s", "call_state_ttl_s", "compensation_timeout_s", "is_transient", "retry_delay_s"]

MIN_COMPENSATION_ATTEMPT_S = 30.0
MIN_CALL_STATE_TTL_S = 60


def is_transient(outcome: ToolOutcome, definition: ToolDefinition) -> bool:
    """An execution error raised as a connection error, a timeout, or a type the tool declared retryable."""
    if outcome.kind is not OutcomeKind.EXECUTION_ERROR or outcome.exception is None:
        return False
    return isinstance(outcome.exception, (ConnectionError, TimeoutError, *definition.options.retry_on))


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Exponential backoff with jitter: between half and all of `base_s * 2**attempt`, at most `cap_s`."""
    ceiling = min(cap_s, base_s * (2**attempt))
    return random.uniform(ceiling / 2, ceiling)


def retry_delay_s(attempt: int, settings: Settings) -> float:
    """How long to wait before retry `attempt + 1`: `backoff_s`, in whole seconds (rounded up) on a
    RabbitMQ broker with quorum queues, whose native delayed delivery counts whole seconds and refuses
    a delay under one."""
    delay = backoff_s(attempt, settings.retry_backoff_s, settings.retry_backoff_max_s)
    if is_amqp(settings.broker_url) and settings.broker_queue_type == "quorum":
        return float(max(1, math.ceil(delay)))
    return delay


def compensation_timeout_s(definition: ToolDefinition, settings: Settings) -> float:
    """How long undoing one call may take, retries and backoff included."""
    per_attempt = max(definition.timeout or settings.default_tool_timeout_s, MIN_COMPENSATION_ATTEMPT_S)
    return per_attempt * (1 + settings.compensation_retries) + settings.retry_backoff_max_s


def call_state_ttl_s(settings: Settings) -> int:
    """How long a call's per-call state (`call_state_key`: finished or abandoned) is kept: as long as
    its result, and at least a minute, so a late completion always finds the orchestrator's mark."""
    return int(max(settings.result_expires_s, MIN_CALL_STATE_TTL_S))
