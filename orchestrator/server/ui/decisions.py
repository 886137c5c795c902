"""The run view's approvals: the calls paused invocations wait on, and a person's decision on each
(approve, approve with edited arguments, reject with a reason), sent through the same function as
`POST /v1/invocations/{id}/approvals` (`decide_calls`)."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from orchestrator.approvals import ApprovalDecision, ApprovalState, approve, reject
from orchestrator.errors import ApiError, OrchestratorError
from orchestrator.saga.journal import ApprovalRecord, InvocationRecord, Journal
from orchestrator.server.approvals import decide_calls, resume_in_background
from orchestrator.server.state import ServiceState
from orchestrator.server.tenants import Viewer
from orchestrator.server.ui.auth import Session
from orchestrator.server.ui.context import UiContext
from orchestrator.server.ui.pages import acted, common, guarded, uuid_or_none
from orchestrator.server.ui.render import html

__all__ = ["Waiting", "router", "waiting"]

router = APIRouter(prefix="/ui", include_in_schema=False)


@dataclass(frozen=True)
class Waiting:
    """A paused invocation and the calls it waits on."""

    record: InvocationRecord
    approvals: list[ApprovalRecord]


def waiting(journal: Journal, invocation_id: str | None = None, *, viewer: Viewer) -> list[Waiting]:
    """The pending calls, by invocation (of one, or of all `viewer` sees), oldest first."""
    pending = journal.approvals(invocation_id, state=ApprovalState.PENDING)
    found: dict[str, list[ApprovalRecord]] = {}
    for approval in pending:
        found.setdefault(approval.invocation_id, []).append(approval)
    views = []
    for key, approvals in found.items():
        record = journal.invocation(key)
        if record is not None and viewer.sees(record.tenant):
            views.append(Waiting(record, approvals))
    return views


@router.get("/approvals")
async def approvals_page(request: Request) -> Response:
    async def page(request: Request, context: UiContext, session: Session) -> Response:
        views = await context.journal.run(lambda journal: waiting(journal, viewer=session.viewer))
        return html("approvals.html", waiting=views, **common(context, session))

    return await guarded(request, page)


@router.post("/invocations/{invocation_id}/approvals")
async def decide(invocation_id: str, request: Request) -> Response:
    async def action(
        request: Request, context: UiContext, session: Session, fields: dict[str, str]
    ) -> Response:
        checked = uuid_or_none(invocation_id)
        try:
            if checked is None:
                raise ApiError(404, f"{invocation_id!r} is not an invocation id")
            decision = _decision(fields)
            service: ServiceState | None = getattr(request.app.state, "toolfleet", None)
            resume = None if service is None else (lambda: resume_in_background(service, checked))
            await decide_calls(
                context.journal,
                checked,
                {fields.get("call_id", ""): decision},
                "ui",
                resume,
                viewer=session.viewer,
            )
        except ApiError as exc:
            return html(
                "message.html",
                status_code=exc.status,
                title="Not decided",
                message=exc.message,
                **common(context, session),
            )
        return RedirectResponse(f"/ui/invocations/{checked}", status_code=303)

    return await acted(request, action)


def _decision(fields: dict[str, str]) -> ApprovalDecision:
    """The form's decision: `approve`, `edit` (approve with the form's `arguments`, JSON) or `reject`
    (with its `reason`), bound to the arguments the person saw (`arguments_hash`)."""
    seen = fields.get("arguments_hash") or None
    try:
        if fields.get("decision") == "approve":
            return approve(arguments_hash=seen)
        if fields.get("decision") == "edit":
            return approve(fields.get("arguments", ""), arguments_hash=seen)  # JSON text, checked
        if fields.get("decision") == "reject":
            return reject(fields.get("reason"), arguments_hash=seen)
    except OrchestratorError as exc:
        raise ApiError(400, str(exc)) from None
    raise ApiError(400, "Choose approve, approve with edited arguments, or reject")
