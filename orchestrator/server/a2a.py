"""A2A (the Agent2Agent protocol, version 0.3, JSON-RPC binding) on `toolfleet serve`: another agent
finds each agent here by its card and talks to it as to any A2A agent.

- `GET /.well-known/agent-card.json` is the card of the service's first agent; each agent's own is at
  `GET /a2a/{name}/.well-known/agent-card.json`. Cards are public (discovery); they say that calls
  need a bearer key when keys are configured.
- `POST /a2a/{name}` takes the JSON-RPC methods `message/send`, `message/stream`, `tasks/get` and
  `tasks/cancel`. A task is an invocation (its id the invocation's), its context a conversation: a
  message with a `contextId` continues that conversation, one without starts a new one.
  `message/send` waits for the invocation's end (`configuration.blocking`, the default) or answers
  the submitted task at once; `message/stream` tells the task, then its progress as `status-update`s
  (each tool call's start and end), the answer as an `artifact-update`, and the final status.
- States: a running invocation is `working`, a paused one (calls waiting for approval)
  `input-required`, then `completed` (the answer in the status message and an artifact), `failed`, or
  `canceled`. A task of another tenant is not found, as on every route.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from orchestrator.errors import ApiError, JsonRpcError
from orchestrator.memory import ChatMemory
from orchestrator.messages import UserMessage
from orchestrator.server.approvals import cancel_paused_invocation
from orchestrator.server.artifacts import safe_media_type
from orchestrator.server.conversations import start_turn
from orchestrator.server.events import TERMINAL_TYPES
from orchestrator.server.invocations import Run
from orchestrator.server.quota import within_budget
from orchestrator.server.state import ServiceState, checked_id, find_agent, read_body, service_state
from orchestrator.server.visibility import sees_invocation, viewer_of
from workers.artifacts import refs_in

__all__ = ["CARD_PATH", "PROTOCOL_VERSION", "router"]

router = APIRouter()

PROTOCOL_VERSION = "0.3.0"
CARD_PATH = "/.well-known/agent-card.json"
KEEPALIVE_S = 2.0  # a stream's longest silence: A2A clients give up on a read after 5 s by default
TASK_NOT_FOUND, TASK_NOT_CANCELABLE = -32001, -32002
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
_STATES = {
    "invocation.succeeded": "completed",
    "invocation.failed": "failed",
    "invocation.cancelled": "canceled",
    "invocation.paused": "input-required",
}


@router.get(CARD_PATH)
async def service_card(request: Request) -> dict[str, Any]:
    """The card of the service's first agent."""
    state = service_state(request)
    return await _card(request, state, next(iter(state.agents)))


@router.get("/a2a/{name}" + CARD_PATH)
async def agent_card(name: str, request: Request) -> dict[str, Any]:
    state = service_state(request)
    find_agent(state, name, param=None)
    return await _card(request, state, name)


@router.post("/a2a/{name}", response_model=None)
async def rpc(name: str, request: Request) -> Response:
    """One JSON-RPC request to agent `name`."""
    state = service_state(request)
    find_agent(state, name, param=None)
    raw = await read_body(request, state.serve.max_body_bytes)
    request_id: Any = None
    try:
        try:
            call = json.loads(raw)
        except ValueError as exc:
            raise JsonRpcError(PARSE_ERROR, f"the body is not JSON: {exc}") from None
        if (
            not isinstance(call, dict)
            or call.get("jsonrpc") != "2.0"
            or not isinstance(call.get("method"), str)
        ):
            raise JsonRpcError(INVALID_REQUEST, "not a JSON-RPC 2.0 request")
        request_id = call.get("id")
        params = call.get("params") or {}
        if not isinstance(params, dict):
            raise JsonRpcError(INVALID_PARAMS, "params must be an object")
        method = call["method"]
        if method == "message/stream":
            task_id = await _start(request, state, name, params)
            stream = _stream(state, request_id, task_id, _base(request))
            return StreamingResponse(stream, media_type="text/event-stream")
        if method == "message/send":
            task_id = await _start(request, state, name, params)
            blocking = (params.get("configuration") or {}).get("blocking", True) is not False
            result = await _task(state, task_id, _base(request), wait=blocking)
        elif method == "tasks/get":
            result = await _task(state, await _known(request, state, params), _base(request), wait=False)
        elif method == "tasks/cancel":
            result = await _cancel(request, state, params)
        else:
            raise JsonRpcError(METHOD_NOT_FOUND, f"no method {method!r}")
        return JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": result})
    except JsonRpcError as exc:
        error = {"code": exc.code, "message": exc.message}
        return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error})
    except ApiError as exc:  # refused as any request would be (budget, capacity, a busy conversation)
        error = {"code": INVALID_REQUEST if exc.status < 500 else -32603, "message": exc.message}
        return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error})


async def _card(request: Request, state: ServiceState, name: str) -> dict[str, Any]:
    service = state.agents[name]
    try:  # a service given no tools offers the live catalog's: read off the event loop
        specifications = await asyncio.to_thread(service.tool_specifications)
    except Exception:  # the catalog unreadable (Redis away): the card says less, not nothing
        specifications = []
    base = _base(request)
    skills = [
        {"id": spec.name, "name": spec.name, "description": spec.description or spec.name, "tags": ["tool"]}
        for spec in specifications
    ] or [{"id": name, "name": name, "description": f"Talk to {name}", "tags": ["chat"]}]
    card: dict[str, Any] = {
        "name": name,
        "description": f"The toolfleet agent {name}: its tool calls run on worker pools",
        "url": f"{base}/a2a/{name}",
        "version": "1.0.0",
        "protocolVersion": PROTOCOL_VERSION,
        "preferredTransport": "JSONRPC",
        "capabilities": {"streaming": True, "pushNotifications": False},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
    }
    if state.serve.api_keys:
        card["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        card["security"] = [{"bearer": []}]
    return card


async def _start(request: Request, state: ServiceState, name: str, params: dict[str, Any]) -> str:
    """Start the invocation the message asks for; its id (the task's)."""
    message = params.get("message")
    if not isinstance(message, dict) or message.get("role") not in (None, "user"):
        raise JsonRpcError(INVALID_PARAMS, "params.message must be the user's message")
    text = "\n".join(
        str(part.get("text") or "")
        for part in message.get("parts") or []
        if isinstance(part, dict) and part.get("kind", "text") == "text"
    ).strip()
    if not text:
        raise JsonRpcError(INVALID_PARAMS, "the message has no text part")
    context = message.get("contextId") or str(uuid.uuid4())
    if not isinstance(context, str) or len(context) > 200:
        raise JsonRpcError(INVALID_PARAMS, "contextId must be a string of at most 200 characters")
    service = state.agents[name]
    tenant = viewer_of(request).tenant
    invocation_id = str(uuid.uuid4())

    def run(memory: ChatMemory) -> Run:
        return Run(
            invocation_id,
            name,
            service,
            UserMessage(text),
            memory,
            {"tenant": tenant},
            conversation_id=context,
            tenant=tenant,
        )

    await within_budget(service, tenant)
    await start_turn(state, state.admit(), name, context, [], run, tenant=tenant)
    return invocation_id


async def _known(request: Request, state: ServiceState, params: dict[str, Any]) -> str:
    """The task `params.id` names, if the request's tenant sees it; else a task-not-found error."""
    given = params.get("id")
    try:
        task_id = checked_id(str(given))
    except ApiError:
        raise JsonRpcError(TASK_NOT_FOUND, f"no task {given!r}") from None
    viewer = viewer_of(request)
    if not await state.events.exists(task_id) or not await sees_invocation(
        viewer, state.events, state.journal, task_id
    ):
        raise JsonRpcError(TASK_NOT_FOUND, f"no task {task_id}")
    return task_id


async def _cancel(request: Request, state: ServiceState, params: dict[str, Any]) -> dict[str, Any]:
    task_id = await _known(request, state, params)
    last = await state.events.last(task_id) or {}
    if last.get("type") in TERMINAL_TYPES:
        raise JsonRpcError(TASK_NOT_CANCELABLE, f"task {task_id} has ended ({_STATES[last['type']]})")
    if not await cancel_paused_invocation(state, task_id):
        await state.invocations.cancel(task_id)
    return await _task(state, task_id, _base(request), wait=True)


async def _task(state: ServiceState, task_id: str, base: str, *, wait: bool) -> dict[str, Any]:
    """The task as its events tell it now (`wait`: once it has ended or paused)."""
    first: dict[str, Any] = {}
    last: dict[str, Any] = {}
    files: list[dict[str, Any]] = []
    async for entry in state.events.entries(task_id, keepalive_s=KEEPALIVE_S):
        if entry is None:
            if wait:
                continue
            break
        _, event = entry
        first = first or event
        last = event
        files += _files(event, base)
        if event["type"] in TERMINAL_TYPES or (wait and event["type"] == "invocation.paused"):
            break
        if not wait and await state.events.last_id(task_id) == entry[0]:
            break
    return _task_json(task_id, str(first.get("conversation_id") or ""), last, files=files)


async def _stream(state: ServiceState, request_id: Any, task_id: str, base: str) -> AsyncIterator[str]:
    """The task's story as SSE frames of JSON-RPC responses, until its final status."""
    context = ""
    async for entry in state.events.entries(task_id, keepalive_s=KEEPALIVE_S):
        if entry is None:
            yield ": keep-alive\n\n"
            continue
        _, event = entry
        kind = event["type"]
        if kind == "invocation.started":
            context = str(event.get("conversation_id") or "")
            frame: dict[str, Any] = _task_json(task_id, context, {}, state_="submitted")
        elif kind in ("tool_call.started", "tool_call.finished"):
            for file in _files(event, base):
                yield _frame(request_id, _update(task_id, context, file))
            verb = "running" if kind.endswith("started") else f"ended ({event.get('outcome')})"
            text = f"tool {event.get('tool')} {verb}"
            frame = _status(task_id, context, "working", text, final=False)
        elif kind == "invocation.succeeded":
            yield _frame(request_id, _artifact(task_id, context, str(event.get("content") or "")))
            frame = _status(task_id, context, "completed", event.get("content"), final=True)
        elif kind in _STATES:
            why = event.get("error") or ("waiting for approval" if kind == "invocation.paused" else None)
            frame = _status(task_id, context, _STATES[kind], why, final=True)
        else:
            continue
        yield _frame(request_id, frame)
        if frame.get("final"):
            return


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _files(event: dict[str, Any], base: str) -> list[dict[str, Any]]:
    """The artifacts a finished call made, each an A2A artifact of one file part whose URI is this
    service's download of it (`GET /v1/artifacts/{id}`, with the same bearer key)."""
    if event.get("type") != "tool_call.finished":
        return []
    found = []
    for ref in refs_in(event.get("artifacts")):
        media_type = safe_media_type(ref.media_type)  # as the download sends it
        file = {"uri": f"{base}/v1/artifacts/{ref.id}", "name": ref.name, "mimeType": media_type}
        found.append({"artifactId": ref.id, "name": ref.name, "parts": [{"kind": "file", "file": file}]})
    return found


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _frame(request_id: Any, result: dict[str, Any]) -> str:
    return f"data: {json.dumps({'jsonrpc': '2.0', 'id': request_id, 'result': result})}\n\n"


def _message(task_id: str, context: str, text: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "agent",
        "messageId": str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": text}],
        "taskId": task_id,
        "contextId": context,
    }


def _status(task_id: str, context: str, state_: str, text: Any, *, final: bool) -> dict[str, Any]:
    status: dict[str, Any] = {"state": state_, "timestamp": _now()}
    if text:
        status["message"] = _message(task_id, context, str(text))
    return {
        "kind": "status-update",
        "taskId": task_id,
        "contextId": context,
        "status": status,
        "final": final,
    }


def _artifact(task_id: str, context: str, text: str) -> dict[str, Any]:
    return _update(task_id, context, _answer(task_id, text))


def _answer(task_id: str, text: str) -> dict[str, Any]:
    return {"artifactId": f"{task_id}-answer", "name": "answer", "parts": [{"kind": "text", "text": text}]}


def _update(task_id: str, context: str, artifact: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "artifact-update",
        "taskId": task_id,
        "contextId": context,
        "append": False,
        "lastChunk": True,
        "artifact": artifact,
    }


def _task_json(
    task_id: str,
    context: str,
    last: dict[str, Any],
    state_: str | None = None,
    *,
    files: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The task as `last` (its latest event) tells it, with the answer and the `files` its calls made
    (A2A artifacts) as its artifacts."""
    kind = str(last.get("type", ""))
    status: dict[str, Any] = {"state": state_ or _STATES.get(kind, "working"), "timestamp": _now()}
    task: dict[str, Any] = {"kind": "task", "id": task_id, "contextId": context, "status": status}
    artifacts = list(files or ())
    if kind == "invocation.succeeded":
        answer = str(last.get("content") or "")
        status["message"] = _message(task_id, context, answer)
        artifacts.insert(0, _answer(task_id, answer))
    elif last.get("error"):
        status["message"] = _message(task_id, context, str(last["error"]))
    if artifacts:
        task["artifacts"] = artifacts
    return task
