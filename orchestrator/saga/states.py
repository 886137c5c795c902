"""The states the journal records, as `str` enums: a member is its stored text (`CallState.KEPT == "kept"`).

An invocation is `running` (or `paused`, waiting for approvals, nothing running for it) until it
ends `succeeded`, `failed` or `cancelled` (stopped by its caller, what it did compensated); it is
`compensating` while its compensations run, and stays so when it ended owing some (`toolfleet
recover` retries them). A call is `dispatched` (its intent, written before it is sent), then
`succeeded` or `failed`; a success of a compensable tool later becomes `compensated` or
`compensation_failed`, or `kept` when it stands in an invocation left owing compensations; a call
given up at its deadline is `abandoned` (its worker undoes it if it finishes). A compensation is
`pending`, `running`, then `succeeded` or `failed`. A call waiting for approval is `pending`, then
`approved`, `rejected`, `expired` or `cancelled`.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "CANCELLED_BY_CALLER",
    "CANCELLED_WHILE_PAUSED",
    "ApprovalState",
    "CallState",
    "CompensationState",
    "InvocationState",
]

# The error of a cancelled invocation; one left owing compensations keeps it first, so that whoever
# finishes them ends it `cancelled`, as it was told.
CANCELLED_BY_CALLER = "cancelled by its caller"
CANCELLED_WHILE_PAUSED = "cancelled while paused for approval"


class InvocationState(StrEnum):
    """Where an invocation stands."""

    RUNNING = "running"
    PAUSED = "paused"  # waiting for a person's approval of some of its calls; nothing runs for it
    COMPENSATING = "compensating"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """Whether the invocation has ended for good (an owing one has not: it is `compensating`)."""
        return self in (InvocationState.SUCCEEDED, InvocationState.FAILED, InvocationState.CANCELLED)


class CallState(StrEnum):
    """Where one tool call stands."""

    DISPATCHED = "dispatched"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"
    KEPT = "kept"
    ABANDONED = "abandoned"


class CompensationState(StrEnum):
    """Where one compensation stands."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class ApprovalState(StrEnum):
    """Where one call waiting for a person's approval stands."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"  # not decided within its time: rejected, and never run
    CANCELLED = "cancelled"  # its invocation was cancelled while it waited
