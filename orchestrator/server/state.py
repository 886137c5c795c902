"""What every route of one replica shares, and reading a request's body within its limit."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from fastapi import Request

from orchestrator.errors import ApiError
from orchestrator.memory import SqlChatMemoryStore
from orchestrator.server.settings import ServeSettings
from orchestrator.service import AiService
from workers.settings import Settings

__all__ = ["ServiceState", "read_body", "service_state"]


@dataclass
class ServiceState:
    """What every route of one replica shares."""

    agents: Mapping[str, AiService]
    serve: ServeSettings
    settings: Settings
    memory_store: SqlChatMemoryStore
    redis: aioredis.Redis
    started_at: int = field(default_factory=lambda: int(time.time()))
    in_flight: int = 0
    draining: bool = False

    @contextlib.contextmanager
    def admitted(self) -> Iterator[None]:
        """Hold one of the replica's invocation places for the block, or refuse (429, 503 draining)."""
        if self.draining:
            raise ApiError(
                503, "this replica is shutting down: retry on another", headers={"Retry-After": "1"}
            )
        if self.in_flight >= self.serve.max_invocations:
            raise ApiError(
                429,
                f"this replica runs {self.in_flight} invocations, its limit: retry shortly",
                headers={"Retry-After": "1"},
            )
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1


def service_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.toolfleet
    return state


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the request body is {declared} bytes, over the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the request body passes the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
