"""What every route of one replica shares: its state, admission, its agents, and reading a request's
body within its limit."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from fastapi import Request

from orchestrator.errors import ApiError
from orchestrator.memory import SqlChatMemoryStore
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.server.events import EventLog
from orchestrator.server.invocations import Invocations
from orchestrator.server.settings import ServeSettings
from orchestrator.service import AiService
from workers.settings import Settings

__all__ = [
    "NOT_FOUND",
    "Place",
    "ServiceState",
    "checked_id",
    "find_agent",
    "read_body",
    "service_state",
]

RETRY_SOON = {"Retry-After": "1"}  # seconds a refused client waits before it tries again


@dataclass
class ServiceState:
    """What every route of one replica shares."""

    agents: Mapping[str, AiService]
    serve: ServeSettings
    settings: Settings
    memory_store: SqlChatMemoryStore
    journal: AsyncJournal
    redis: aioredis.Redis
    events: EventLog
    invocations: Invocations
    started_at: int = field(default_factory=lambda: int(time.time()))
    in_flight: int = 0
    draining: bool = False

    def admit(self) -> Place:
        """Take one of the replica's invocation places, or refuse (429 at capacity, 503 draining)."""
        if self.draining:
            raise ApiError(
                503, "this replica is shutting down: retry on another", headers={"Retry-After": "1"}
            )
        if self.in_flight >= self.serve.max_invocations:
            raise ApiError(
                429,
                f"this replica runs {self.in_flight} invocations, its limit: retry shortly",
                headers=RETRY_SOON,
            )
        self.in_flight += 1
        return Place(self)

    def admit_adopted(self) -> Place:
        """A place for an invocation adopted from a dead replica: taken even at capacity (the
        invocation was admitted once already, and nobody else would carry it on)."""
        self.in_flight += 1
        return Place(self)


class Place:
    """One invocation place of a replica, held until `release()` (which may be called more than once)."""

    def __init__(self, state: ServiceState) -> None:
        self._state: ServiceState | None = state

    def release(self) -> None:
        if self._state is not None:
            self._state.in_flight -= 1
            self._state = None

    def __enter__(self) -> Place:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


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


def find_agent(state: ServiceState, name: str, *, param: str | None = "model") -> AiService:
    """The agent named `name`, or 404 naming `param`."""
    service = state.agents.get(name)
    if service is None:
        raise ApiError(404, f"no agent named {name!r}: GET /v1/models lists them", param=param)
    return service


NOT_FOUND = "invocation_not_found"


def checked_id(invocation_id: str) -> str:
    """The invocation id in its canonical form, or 404 when it is not one."""
    try:
        return str(uuid.UUID(invocation_id))
    except ValueError:
        raise ApiError(404, f"{invocation_id!r} is not an invocation id", code=NOT_FOUND) from None
