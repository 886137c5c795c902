"""What every route of one replica shares: its state, its agents, conversations, and reading a
request's body within its limit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from fastapi import Request

from orchestrator.errors import ApiError
from orchestrator.memory import InMemoryChatMemoryStore, MessageWindowChatMemory, SqlChatMemoryStore
from orchestrator.messages import ChatMessage
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.server.events import EventLog
from orchestrator.server.invocations import Invocations
from orchestrator.server.settings import ServeSettings
from orchestrator.service import AiService
from workers.settings import Settings

__all__ = [
    "MAX_CONVERSATION_ID",
    "Conversation",
    "Place",
    "ServiceState",
    "find_agent",
    "open_conversation",
    "read_body",
    "save_conversation",
    "service_state",
]

MAX_CONVERSATION_ID = 200
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


@dataclass
class Conversation:
    """One turn's conversation: its memory for the invocation, and where it is kept (`key`; None for
    a conversation the request carries, which is kept nowhere)."""

    memory: MessageWindowChatMemory
    key: str | None = None


async def open_conversation(
    state: ServiceState, agent: str, conversation_id: str | None, history: list[ChatMessage]
) -> Conversation:
    """The conversation of one turn: with `conversation_id`, the server's SQL memory of it, read once
    (only the new user message is added to it, and `save_conversation` writes it back); without,
    `history` (the request's own messages)."""
    if conversation_id:
        if len(conversation_id) > MAX_CONVERSATION_ID:
            message = f"conversation_id is longer than {MAX_CONVERSATION_ID} characters"
            raise ApiError(400, message, param="conversation_id")
        key = f"{agent}/{conversation_id}"
        window = MessageWindowChatMemory(
            state.serve.history_messages, id=key, store=InMemoryChatMemoryStore()
        )
        window.set_messages(await state.memory_store.aget_messages(key))
        return Conversation(window, key)
    window = MessageWindowChatMemory(
        len(history) + state.serve.history_messages, store=InMemoryChatMemoryStore()
    )
    window.set_messages(history)
    return Conversation(window)


async def save_conversation(state: ServiceState, conversation: Conversation) -> None:
    """Write a kept conversation back after its turn, even while the turn's caller is cancelled."""
    if conversation.key is not None:
        saving = asyncio.ensure_future(
            state.memory_store.aupdate_messages(conversation.key, conversation.memory.messages())
        )
        try:
            await asyncio.shield(saving)
        except asyncio.CancelledError:
            await saving
            raise
