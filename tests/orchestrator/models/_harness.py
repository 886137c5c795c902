"""One HTTP harness for every provider's tests: recorded answers replayed through `httpx.MockTransport`.

A `Recorder` is the transport's handler: it keeps each request and answers with the next scripted
reply (the last one again once only one is left, so "always 429" is one reply). `chat` and `stream` run
a model on its own event loop and close it after.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol

import httpx

from orchestrator.models.base import ChatEvent, ChatRequest, ChatResponse

FIXTURES = Path(__file__).parent / "fixtures"

Reply = httpx.Response | Callable[[httpx.Request], httpx.Response]


def recorded_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def recorded_json(name: str) -> Any:
    return json.loads(recorded_text(name))


def answer(name: str, status: int = 200) -> httpx.Response:
    """The recorded JSON body `name`, with `status`."""
    return httpx.Response(
        status, content=(FIXTURES / name).read_bytes(), headers={"content-type": "application/json"}
    )


def sse_answer(name: str) -> httpx.Response:
    """The recorded server-sent events `name`, as one body."""
    return httpx.Response(
        200, content=(FIXTURES / name).read_bytes(), headers={"content-type": "text/event-stream"}
    )


class SseChunks(httpx.AsyncByteStream):
    """A recorded SSE body sent one event per network chunk, counting what has been sent."""

    def __init__(self, name: str) -> None:
        text = recorded_text(name)
        self.blocks = [block + "\n\n" for block in text.split("\n\n") if block.strip()]
        self.sent = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for block in self.blocks:
            self.sent += 1
            yield block.encode()

    async def aclose(self) -> None:
        self.closed = True

    def chunks(self) -> list[Any]:
        return [json.loads(b[len("data: ") :]) for b in self.blocks if b.strip() != "data: [DONE]"]


def sse(chunks: SseChunks) -> httpx.Response:
    return httpx.Response(200, stream=chunks, headers={"content-type": "text/event-stream"})


class Recorder:
    """A `MockTransport` handler: records each request and answers with the next scripted reply."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return reply(request) if callable(reply) else reply

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(request.content) for request in self.requests]

    def body(self, index: int = -1) -> dict[str, Any]:
        return self.bodies[index]


class Model(Protocol):
    async def chat(self, request: ChatRequest) -> ChatResponse: ...

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatEvent]: ...

    async def aclose(self) -> None: ...


def chat(model: Model, request: ChatRequest) -> ChatResponse:
    async def go() -> ChatResponse:
        try:
            return await model.chat(request)
        finally:
            await model.aclose()

    return asyncio.run(go())


def stream(model: Model, request: ChatRequest, into: list[ChatEvent] | None = None) -> list[ChatEvent]:
    """Every event of one streamed answer; with `into`, the events also land there as they come
    (what arrived before an error stays readable)."""
    events = [] if into is None else into

    async def go() -> None:
        try:
            async for event in model.stream(request):
                events.append(event)
        finally:
            await model.aclose()

    asyncio.run(go())
    return events
