"""The native API, for what OpenAI's shape cannot carry: invocations started in the background with
their events streamed (and resumed on any replica), an invocation's journaled story, cancellation."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime
from enum import Enum
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.errors import ApiError
from orchestrator.memory import ChatMemory
from orchestrator.messages import UserMessage
from orchestrator.saga.journal import Journal
from orchestrator.saga.states import ApprovalState
from orchestrator.server.approvals import cancel_paused_invocation
from orchestrator.server.attached import Attached
from orchestrator.server.conversations import start_turn
from orchestrator.server.events import TERMINAL_TYPES, once_journaled, stream_position
from orchestrator.server.idempotency import key_of, until_started
from orchestrator.server.invocations import Run
from orchestrator.server.quota import with_priority, within_budget
from orchestrator.server.state import (
    NOT_FOUND,
    ServiceState,
    checked_id,
    find_agent,
    read_body,
    service_state,
)
from orchestrator.server.visibility import sees_invocation, viewer_of

__all__ = ["router"]

router = APIRouter()


class InvocationRequest(BaseModel):
    """What starts an invocation: the user's input, the conversation it continues, its parameters."""

    model_config = ConfigDict(extra="forbid")

    input: str = Field(min_length=1)
    conversation_id: str | None = Field(default=None, max_length=200)
    parameters: dict[str, Any] | None = None
    priority: int | None = None  # 0 to 9, higher sooner: at most the key's, if it has one


@router.post("/v1/agents/{name}/invocations", response_model=None, status_code=202)
async def start_invocation(name: str, request: Request) -> Response:
    """Start one invocation of agent `name`: its id at once (202), or, with `Accept:
    text/event-stream`, its events as they happen."""
    state = service_state(request)
    raw = await read_body(request, state.serve.max_body_bytes)
    body = _invocation_request(raw)
    service = find_agent(state, name, param=None)
    tenant = viewer_of(request).tenant
    invocation_id = str(uuid.uuid4())
    key = key_of(request, state.redis, f"agents/{name}/invocations", raw, tenant)
    if key is not None and (first := await key.claim(invocation_id)) != invocation_id:
        # sent again: the first one's invocation, once it has started (a 409 if it never does: the
        # request is sent again, and starts it afresh once the first one's starting lease lapsed)
        await Attached(state.events, key, first, state.serve.turn_wait_s).started()
        return _started(request, state, name, first)
    question = UserMessage(body.input)
    parameters: dict[str, Any] = {}

    def run(memory: ChatMemory) -> Run:
        return Run(
            invocation_id,
            name,
            service,
            question,
            memory,
            parameters,
            conversation_id=body.conversation_id,
            tenant=tenant,
        )

    async with until_started(key, invocation_id):  # refused: a request sent again starts afresh
        await within_budget(service, tenant)
        given = with_priority(body.parameters or {}, body.priority, viewer_of(request), "priority")
        # the request's tenant, whatever the client sent as `tenant`: a client claims no other tenant
        parameters.update(given, tenant=tenant)
        await start_turn(state, state.admit(), name, body.conversation_id, [], run, tenant=tenant)
    return _started(request, state, name, invocation_id)


def _started(request: Request, state: ServiceState, name: str, invocation_id: str) -> Response:
    """The answer to a request that started (or, sent again with its Idempotency-Key, names) an
    invocation: its id (202), or its events from the first."""
    headers = {"X-Invocation-Id": invocation_id}
    if "text/event-stream" in request.headers.get("accept", ""):
        return StreamingResponse(
            state.events.follow(invocation_id, "0"), media_type="text/event-stream", headers=headers
        )
    payload = {
        "id": invocation_id,
        "object": "invocation",
        "agent": name,
        "status": "running",
        "events": f"/v1/invocations/{invocation_id}/events",
    }
    return JSONResponse(payload, status_code=202, headers=headers)


@router.get("/v1/invocations/{invocation_id}/events", response_model=None)
async def invocation_events(invocation_id: str, request: Request) -> Response:
    """The invocation's events as server-sent events, from the start or after `Last-Event-ID`, until
    its last; any replica serves them."""
    state = service_state(request)
    given = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    after = stream_position(given)
    if after is None:
        raise ApiError(
            400, f"Last-Event-ID {given!r} is not an event id of this service", param="Last-Event-ID"
        )
    invocation_id = checked_id(invocation_id)
    if not await state.events.exists(invocation_id) or not await _sees(request, state, invocation_id):
        raise ApiError(404, f"no events of invocation {invocation_id}", code=NOT_FOUND)
    return StreamingResponse(state.events.follow(invocation_id, after), media_type="text/event-stream")


@router.get("/v1/invocations/{invocation_id}")
async def invocation_story(invocation_id: str, request: Request) -> dict[str, Any]:
    """The invocation as the journal tells it: its state, answer, calls and compensations, and the
    calls waiting for approval (`waiting`)."""
    checked = checked_id(invocation_id)
    state = service_state(request)
    story = await once_journaled(
        state.events, checked, lambda: state.journal.run(lambda journal: _story(journal, checked))
    )
    if story is None or not viewer_of(request).sees(story["tenant"]):
        raise ApiError(404, f"the journal has no invocation {invocation_id}", code=NOT_FOUND)
    return story


@router.post("/v1/invocations/{invocation_id}/cancel", status_code=202)
async def cancel_invocation(invocation_id: str, request: Request) -> dict[str, Any]:
    """Cancel an invocation: a running one, whichever replica runs it (running calls are abandoned as
    at a deadline), or a paused one, here; what succeeded is compensated, the journal says
    `cancelled`."""
    state = service_state(request)
    invocation_id = checked_id(invocation_id)  # the canonical form from here on: the form ids are kept in
    if not await _sees(request, state, invocation_id):
        raise ApiError(404, f"no invocation {invocation_id} is known to this service", code=NOT_FOUND)
    if await cancel_paused_invocation(state, invocation_id):
        return {"id": invocation_id, "object": "invocation", "status": "cancelled"}
    last = await state.events.last(invocation_id)
    if last is None:
        raise ApiError(404, f"no invocation {invocation_id} is known to this service", code=NOT_FOUND)
    if last.get("type") in TERMINAL_TYPES:
        raise ApiError(409, f"invocation {invocation_id} has already ended ({last['type']})")
    await state.invocations.cancel(invocation_id)
    return {"id": invocation_id, "object": "invocation", "status": "cancelling"}


async def _sees(request: Request, state: ServiceState, invocation_id: str) -> bool:
    """Whether the request's tenant owns the invocation (an operator's sees every one)."""
    return await sees_invocation(viewer_of(request), state.events, state.journal, invocation_id)


def _invocation_request(body: bytes) -> InvocationRequest:
    try:
        return InvocationRequest.model_validate_json(body)
    except ValidationError as exc:
        first: Any = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
        param = ".".join(str(p) for p in first["loc"]) or None
        raise ApiError(400, f"invalid request: {param}: {first['msg']}", param=param) from None


def _story(journal: Journal, invocation_id: str) -> dict[str, Any] | None:
    """The invocation's story (None if the journal has no such invocation), read in one transaction."""
    record = journal.invocation(invocation_id)
    if record is None:
        return None
    compensations = {c.tool_call_id: c for c in journal.compensations(invocation_id)}
    calls = []
    for call in journal.calls(invocation_id):
        row = _plain(call, exclude=("result_object", "idempotency_key"))
        compensation = compensations.get(call.id)
        row["compensation"] = None if compensation is None else _plain(compensation)
        calls.append(row)
    story = _plain(record, exclude=("sealed_invocation_json", "cipher", "owner"))
    # The calls waiting for a person are not run yet, so not among `calls`: what waits, by itself.
    waiting = [a.to_json() for a in journal.approvals(invocation_id, state=ApprovalState.PENDING)]
    story.update(object="invocation", calls=calls, waiting=waiting)
    return story


def _plain(record: Any, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        f.name: _json_value(getattr(record, f.name))
        for f in dataclasses.fields(record)
        if f.name not in exclude
    }


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    return value
