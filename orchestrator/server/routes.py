"""The routes: health, the agents as models, and chat completions in OpenAI's shape."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from orchestrator.errors import ApiError
from orchestrator.models.base import PartialResponse
from orchestrator.result import CompleteResponse, Result
from orchestrator.server import openai_wire, readiness
from orchestrator.server.conversations import close_conversation, open_conversation, save_conversation
from orchestrator.server.error_shape import api_error_body, error_body, invocation_failure
from orchestrator.server.state import (
    Place,
    find_agent,
    read_body,
    service_state,
)
from orchestrator.telemetry.metrics import exposition

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive and answering."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> Response:
    """Redis, the database and the broker answer, and every pool the agents' tools need has a live
    worker; otherwise 503 naming what is missing."""
    problems = await readiness.problems(service_state(request))
    if problems:
        return JSONResponse(
            {"status": "not ready", "problems": problems, **error_body(503, "; ".join(problems))},
            status_code=503,
        )
    return JSONResponse({"status": "ready"})


@router.get("/metrics")
async def metrics() -> Response:
    """This replica's Prometheus metrics: tool calls per tool and pool, compensations, approvals
    waiting, invocations and model calls per service."""
    body, content_type = await asyncio.to_thread(exposition)  # the approvals are counted in SQL
    return Response(body, media_type=content_type)


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    """The agents, as OpenAI's model list."""
    state = service_state(request)
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": state.started_at, "owned_by": "toolfleet"}
            for name in state.agents
        ],
    }


@router.post("/v1/chat/completions", response_model=None)
async def chat_completions(request: Request) -> Response:
    """One invocation of the agent named by `model`, its tool loop run here; the final answer comes
    back as a completion, or as chunks when `stream` is true."""
    state = service_state(request)
    body = openai_wire.parse_request(
        await read_body(request, state.serve.max_body_bytes), state.serve.max_messages
    )
    service = find_agent(state, body.model)
    history, question = openai_wire.conversation_of(body.messages)
    conversation_id = (body.metadata or {}).get("conversation_id") or request.headers.get("x-conversation-id")
    invocation_id = str(uuid.uuid4())
    completion_id = f"chatcmpl-{invocation_id}"
    parameters = {"user": body.user} if body.user else None
    headers = {"X-Invocation-Id": invocation_id}
    if not body.stream:
        with state.admit():
            conversation = await open_conversation(state, body.model, conversation_id, history)
            try:
                result = await _run(
                    service.achat(
                        question,
                        memory=conversation.memory,
                        parameters=parameters,
                        invocation_id=invocation_id,
                    ),
                    invocation_id,
                )
            finally:
                await save_conversation(state, conversation)
        content = openai_wire.paused_text(result) or result.content
        payload = openai_wire.completion(
            completion_id, body.model, content, result.finish_reason, result.token_usage
        )
        return JSONResponse(payload, headers=headers)
    place = state.admit()  # refused here, before the stream starts, with the error's own status
    try:
        conversation = await open_conversation(state, body.model, conversation_id, history)
    except BaseException:
        place.release()
        raise
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    events = service.stream(
        question, memory=conversation.memory, parameters=parameters, invocation_id=invocation_id
    )
    chunks = _chunks(events, completion_id, body.model, invocation_id, include_usage)
    # The place (and the conversation's turn) is held until the stream ends (the conversation saved),
    # or the client leaves before the stream starts.

    async def let_go() -> None:
        place.release()
        await close_conversation(conversation)

    return StreamingResponse(
        _holding(chunks, place, lambda: save_conversation(state, conversation)),
        media_type="text/event-stream",
        headers=headers,
        background=BackgroundTask(let_go),
    )


async def _holding(
    chunks: AsyncIterator[str], place: Place, finish: Callable[[], Awaitable[None]]
) -> AsyncIterator[str]:
    """`chunks`, then `finish()` and the place released, however the stream ends."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        try:
            await finish()
        finally:
            place.release()


async def _run(invocation: Awaitable[Result], invocation_id: str) -> Result:
    try:
        return await invocation
    except ApiError:
        raise
    except Exception as exc:
        raise invocation_failure(exc, invocation_id) from exc


async def _chunks(
    events: AsyncIterator[Any],
    completion_id: str,
    agent: str,
    invocation_id: str,
    include_usage: bool,
) -> AsyncIterator[str]:
    """The invocation's text as `chat.completion.chunk` events, then `[DONE]`; an error mid-stream is
    sent as an error event (the status line is gone by then). A client that leaves closes `events`,
    which cancels the invocation (what it did is compensated)."""

    head = (completion_id, agent)
    yield _sse(openai_wire.delta_chunk(*head, {"role": "assistant", "content": ""}))
    async with contextlib.aclosing(events):  # type: ignore[type-var]
        try:
            async for event in events:
                if isinstance(event, PartialResponse) and event.text:
                    yield _sse(openai_wire.delta_chunk(*head, {"content": event.text}))
                elif isinstance(event, CompleteResponse):
                    paused = openai_wire.paused_text(event.result)
                    if paused:
                        yield _sse(openai_wire.delta_chunk(*head, {"content": paused}))
                    yield _sse(openai_wire.finish_chunk(*head, event.result.finish_reason))
                    if include_usage:
                        yield _sse(openai_wire.usage_chunk(*head, event.result.token_usage))
        except Exception as exc:
            yield _sse(api_error_body(invocation_failure(exc, invocation_id)))
    yield "data: [DONE]\n\n"


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"
