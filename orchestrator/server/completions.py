"""Chat completions in OpenAI's shape: each one an invocation the replica runs in the background, as
the native API's are, so that it journals its agent, has an event stream and can be resumed by any
replica once the calls it paused for are decided; the handler listens to its own invocation.

Streamed or not, an invocation runs the same way (the stream's handler defaults), so one agent gives
one outcome for one request. The answer comes back as one completion, or as chunks; a paused
invocation says so (`X-Invocation-State: paused`, and a `toolfleet` object naming what waits). A
client that leaves before the end cancels the invocation (what it did is compensated), unless its
request has an `Idempotency-Key` (sent again, it attaches to the invocation: `attached`); past a
drain's grace, a waiting client gets a 503 and a streaming one an error chunk, then `[DONE]`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from orchestrator.errors import ApiError, InvocationTakenOverError
from orchestrator.memory import ChatMemory
from orchestrator.models.base import PartialResponse
from orchestrator.result import CompleteResponse
from orchestrator.server import openai_wire
from orchestrator.server.answers import Ending, Quiet, Told
from orchestrator.server.attached import Attached
from orchestrator.server.conversations import start_turn
from orchestrator.server.error_shape import api_error_body
from orchestrator.server.events import KEEPALIVE, KEEPALIVE_S
from orchestrator.server.idempotency import key_of, until_started
from orchestrator.server.invocations import Invocations, Run
from orchestrator.server.quota import with_priority, within_budget
from orchestrator.server.state import find_agent, read_body, service_state
from orchestrator.server.visibility import viewer_of

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter()

PAUSED = "paused"  # the X-Invocation-State of an invocation waiting for approvals


@router.post("/v1/chat/completions", response_model=None)
async def chat_completions(request: Request) -> Response:
    """One invocation of the agent named by `model`; the final answer comes back as a completion, or
    as chunks when `stream` is true. With an `Idempotency-Key` the request sent again attaches to the
    invocation the first one started."""
    state = service_state(request)
    raw = await read_body(request, state.serve.max_body_bytes)
    body = openai_wire.parse_request(raw, state.serve.max_messages)
    service = find_agent(state, body.model)
    history, question = openai_wire.conversation_of(body.messages)
    conversation_id = (body.metadata or {}).get("conversation_id") or request.headers.get("x-conversation-id")
    tenant = viewer_of(request).tenant
    invocation_id = str(uuid.uuid4())
    key = key_of(request, state.redis, "chat.completions", raw, tenant)
    told: Told
    if key is not None and (first := await key.claim(invocation_id)) != invocation_id:
        invocation_id = first
        told = Attached(state.events, key, invocation_id, state.serve.turn_wait_s)
    else:
        heard = told = Heard(state.invocations, invocation_id, keeps_running=key is not None)
        parameters: dict[str, Any] = {}

        def run(memory: ChatMemory) -> Run:
            return Run(
                invocation_id,
                body.model,
                service,
                question,
                memory,
                parameters,
                conversation_id=conversation_id,
                tenant=tenant,
                listener=heard.put,
            )

        async with until_started(key, invocation_id):  # refused: a request sent again starts afresh
            await within_budget(service, tenant)
            given = {"user": body.user} if body.user else {}
            parameters.update(with_priority(given, None, viewer_of(request), "priority"), tenant=tenant)
            await start_turn(state, state.admit(), body.model, conversation_id, history, run, tenant=tenant)
    head = (f"chatcmpl-{invocation_id}", body.model)
    headers = {"X-Invocation-Id": invocation_id}
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            _chunks(told, head, include_usage), media_type="text/event-stream", headers=headers
        )
    try:
        ending = await _ending(told)
    except ApiError as refused:  # its client is told which invocation failed, as for an answer
        refused.headers.update(headers)
        raise
    payload = openai_wire.completion(*head, ending.text(), ending.finish, ending.usage)
    if ending.waiting is not None:
        headers["X-Invocation-State"] = PAUSED
        payload["toolfleet"] = openai_wire.waiting_object(invocation_id, ending.waiting)
    return JSONResponse(payload, headers=headers)


class Heard:
    """What one invocation's run tells its chat completion handler, as the events of a stream, with
    a `Quiet` after each `keepalive_s` without one."""

    def __init__(
        self,
        invocations: Invocations,
        invocation_id: str,
        keepalive_s: float = KEEPALIVE_S,
        *,
        keeps_running: bool = False,
    ) -> None:
        self.invocations = invocations
        self.invocation_id = invocation_id
        self.keepalive_s = keepalive_s
        self.keeps_running = keeps_running  # an Idempotency-Key: its client may come back for it
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        self.ended = False  # the run told its end (or the drain took it)

    def put(self, item: object) -> None:
        self.queue.put_nowait(item)

    async def events(self) -> AsyncIterator[object]:
        """The stream's events up to its `Ending`; how it failed, raised as an `ApiError`."""
        while True:
            item = await self._next()
            if isinstance(item, BaseException):
                self.ended = True
                raise self._refusal(item)
            if isinstance(item, CompleteResponse):
                self.ended = True
                yield Ending.of(item.result)
                return
            yield item

    def leave(self) -> None:
        """The client is gone (or the handler ended): an invocation that has not ended is cancelled,
        unless its request has an Idempotency-Key (its client may send it again, to any replica)."""
        task = self.invocations.running.get(self.invocation_id)
        if not self.ended and not self.keeps_running and task is not None:
            task.cancel()

    async def _next(self) -> object:
        """The next item, unless a drain's grace runs out first (the drain then cancels the run)."""
        if not self.queue.empty():
            return self.queue.get_nowait()
        got = asyncio.ensure_future(self.queue.get())
        grace = asyncio.ensure_future(self.invocations.past_grace.wait())
        try:
            await asyncio.wait({got, grace}, timeout=self.keepalive_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            grace.cancel()
            if not got.done():
                got.cancel()
        if got.done() and not got.cancelled():
            return got.result()
        return asyncio.CancelledError() if self.invocations.past_grace.is_set() else Quiet()

    def _refusal(self, error: BaseException) -> ApiError:
        if isinstance(error, ApiError):
            return error
        if isinstance(error, InvocationTakenOverError):  # this replica was taken for dead
            return ApiError(
                503,
                f"the invocation {self.invocation_id} goes on in another replica: send the request "
                "again (with its Idempotency-Key) to hear its end",
                code="service_unavailable",
                headers={"Retry-After": "1"},
            )
        if self.invocations.past_grace.is_set():
            return ApiError(
                503,
                f"this replica shut down before the invocation {self.invocation_id} ended: it was "
                "cancelled, and what it did is undone",
                code="service_unavailable",
                headers={"Retry-After": "1"},
            )
        log.info("invocation %s was cancelled (%s)", self.invocation_id, type(error).__name__)
        return ApiError(
            409, f"the invocation {self.invocation_id} was cancelled", code="invocation_cancelled"
        )


async def _ending(told: Told) -> Ending:
    try:
        async for event in told.events():
            if isinstance(event, Ending):
                return event
        raise AssertionError("an invocation's events end with its Ending or raise")
    finally:
        told.leave()


async def _chunks(told: Told, head: tuple[str, str], include_usage: bool) -> AsyncIterator[str]:
    """The invocation's text as `chat.completion.chunk` events, then `[DONE]`; an error mid-stream is
    sent as an error event (the status line is gone by then). Closed early (the client left), the
    invocation is cancelled (unless the request has an Idempotency-Key)."""
    try:
        yield _sse(openai_wire.delta_chunk(*head, {"role": "assistant", "content": ""}))
        streamed: list[str] = []
        try:
            async for event in told.events():
                if isinstance(event, PartialResponse) and event.text:
                    streamed.append(event.text)
                    yield _sse(openai_wire.delta_chunk(*head, {"content": event.text}))
                elif isinstance(event, Quiet):
                    yield KEEPALIVE  # a comment line: clients skip it, proxies see the stream alive
                elif isinstance(event, Ending):
                    # the answer's rest, when its text stopped streaming before its end was known (its
                    # replica failed as it told it, the journal having it whole)
                    sent, whole = "".join(streamed), event.content or ""
                    if event.waiting is None and len(whole) > len(sent) and whole.startswith(sent):
                        yield _sse(openai_wire.delta_chunk(*head, {"content": whole[len(sent) :]}))
                    yield from_the_end(head, event, include_usage)
        except ApiError as exc:
            yield _sse(api_error_body(exc))
        yield "data: [DONE]\n\n"
    finally:
        told.leave()


def from_the_end(head: tuple[str, str], ending: Ending, include_usage: bool) -> str:
    """The stream's last chunks: what a paused invocation waits for, its finish, and its usage."""
    chunks = []
    if ending.waiting is not None:
        chunks.append(openai_wire.delta_chunk(*head, {"content": ending.text()}))
    finish = openai_wire.finish_chunk(*head, ending.finish)
    if ending.waiting is not None:
        finish["toolfleet"] = openai_wire.waiting_object(ending.invocation_id, ending.waiting)
    chunks.append(finish)
    if include_usage:
        chunks.append(openai_wire.usage_chunk(*head, ending.usage))
    return "".join(_sse(chunk) for chunk in chunks)


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"
