"""Human approval of tool calls: what a person decides, and what the model reads of it.

A tool declared `@tool(requires_approval=True)`, or any call the service's `approval_policy`
picks, does not run when the model asks for it: the invocation pauses (its state in the journal,
nothing held for it in any process) and each such call waits, bound to the hash of its arguments,
until a person decides it from any process — `AiService.resume()`, `toolfleet approve` /
`toolfleet reject`, or `POST /v1/invocations/{id}/approvals` — or its time runs out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from orchestrator.errors import ApprovalConflictError, ApprovalError, OrchestratorError
from orchestrator.finite_json import loads_finite
from orchestrator.providers import ToolRunContext
from orchestrator.saga.journal import ApprovalRecord, ApprovalState, Journal, arguments_hash
from workers.protocol import ToolExecutionRequest

__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT_S",
    "REJECTED",
    "TIMED_OUT",
    "ApprovalDecision",
    "ApprovalPolicy",
    "ApprovalRecord",
    "ApprovalState",
    "approve",
    "arguments_hash",
    "record_decisions",
    "reject",
    "rejected_text",
]

DEFAULT_APPROVAL_TIMEOUT_S = 24 * 3600.0
REJECTED = "The user rejected the call to '{tool}': {reason}"
TIMED_OUT = "The call to '{tool}' was not approved within {seconds} s, so it did not run"
NO_REASON = "no reason given"

# Decides per call whether it waits for a person: `policy(request, context) -> bool`.
ApprovalPolicy: TypeAlias = Callable[[ToolExecutionRequest, ToolRunContext], bool]


@dataclass(frozen=True)
class ApprovalDecision:
    """A person's decision on one waiting call: approve (with edited `arguments`, or as asked) or
    reject (with a `reason` the model reads). With `arguments_hash`, the decision holds only if
    the call still waits with those arguments (what the person saw)."""

    approve: bool
    arguments: str | None = None  # edited arguments, as JSON text
    reason: str | None = None
    arguments_hash: str | None = None

    def __post_init__(self) -> None:
        if self.arguments is not None:
            if not self.approve:
                raise OrchestratorError("Only an approval takes edited arguments")
            try:
                parsed = loads_finite(self.arguments)
            except ValueError as exc:
                raise OrchestratorError(f"Edited arguments are not valid JSON: {exc}") from None
            if not isinstance(parsed, dict):
                raise OrchestratorError("Edited arguments must be a JSON object")


def approve(
    arguments: Mapping[str, Any] | str | None = None, *, arguments_hash: str | None = None
) -> ApprovalDecision:
    """Approve a call as the model asked it, or with `arguments` edited (a mapping or JSON text)."""
    text = arguments if arguments is None or isinstance(arguments, str) else json.dumps(dict(arguments))
    return ApprovalDecision(True, arguments=text, arguments_hash=arguments_hash)


def reject(reason: str | None = None, *, arguments_hash: str | None = None) -> ApprovalDecision:
    """Reject a call; the model reads `The user rejected the call to '<tool>': <reason>`."""
    return ApprovalDecision(False, reason=(reason or "").strip() or NO_REASON, arguments_hash=arguments_hash)


def rejected_text(approval: ApprovalRecord, timeout_s: float) -> str:
    """What the model reads of a call that did not run: rejected, expired, or cancelled."""
    if approval.state is ApprovalState.EXPIRED:
        return TIMED_OUT.format(tool=approval.tool, seconds=f"{timeout_s:g}")
    return REJECTED.format(tool=approval.tool, reason=approval.reason or NO_REASON)


def record_decisions(
    journal: Journal, invocation_id: str, decisions: Mapping[str, ApprovalDecision], by: str | None
) -> list[ApprovalRecord]:
    """Write each decision (call id → decision) of one invocation, in one transaction; each call's row
    as it then stands. A decision taken before is taken again without effect; one that contradicts
    it, or whose `arguments_hash` is not the call's, raises `ApprovalConflictError`; an unknown call
    or an invocation that waits no more raises `ApprovalError`. A call whose time ran out is left
    `expired`: the caller says so."""
    standing = {a.call_id: a for a in journal.approvals(invocation_id)}
    decided: list[ApprovalRecord] = []
    for call_id, decision in decisions.items():
        current = standing.get(call_id)
        if current is None:
            raise ApprovalError(f"Invocation {invocation_id} has no call {call_id} waiting for approval")
        if decision.arguments_hash is not None and decision.arguments_hash != current.arguments_hash:
            raise ApprovalConflictError(
                f"Call {call_id} of tool '{current.tool}' waits with other arguments than those decided on"
            )
        record = journal.decide(
            invocation_id,
            call_id,
            approve=decision.approve,
            arguments=decision.arguments,
            reason=decision.reason,
            by=by,
        )
        assert record is not None
        _check_outcome(record, decision)
        decided.append(record)
    return decided


def _check_outcome(record: ApprovalRecord, decision: ApprovalDecision) -> None:
    wanted = ApprovalState.APPROVED if decision.approve else ApprovalState.REJECTED
    where = f"Call {record.call_id} of tool '{record.tool}'"
    if record.state is ApprovalState.CANCELLED:
        raise ApprovalError(f"{where} waits no more: its invocation was cancelled")
    if record.state is ApprovalState.EXPIRED:
        return
    if record.state is not wanted:
        raise ApprovalConflictError(
            f"{where} was already {record.state.value} (by {record.decided_by or '?'})"
        )
    if decision.approve and _hash_of(decision.arguments) != _hash_of(record.approved_arguments):
        raise ApprovalConflictError(f"{where} was already approved with other arguments")


def _hash_of(arguments: str | None) -> str | None:
    return None if arguments is None else arguments_hash(arguments)
