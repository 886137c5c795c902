"""A turn's conversation: read once from the server's SQL memory at its start, written back at its
end, on the memory store's async engine; or the request's own messages, kept nowhere. A kept
conversation's turns run one at a time, in arrival order, across replicas (`turns.py`): a turn holds
its conversation from before it reads the history until after it wrote it back.

Conversations are each tenant's own: the default tenant's conversation `c1` of agent `bank` is kept
as `bank/c1` (as before tenants), another tenant's as `acme:bank/c1`, so two tenants naming one
conversation id have two conversations (tenant names hold no ':', and agent names none once tenants
are configured: no key of one tenant is another's)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from orchestrator.errors import ApiError
from orchestrator.memory import ChatMemory, InMemoryChatMemoryStore, MessageWindowChatMemory
from orchestrator.messages import ChatMessage
from orchestrator.saga.async_journal import to_the_end
from orchestrator.server.invocations import Run
from orchestrator.server.state import Place, ServiceState
from orchestrator.server.tenants import DEFAULT_TENANT
from orchestrator.server.turns import Turn, take_turn

__all__ = [
    "MAX_CONVERSATION_ID",
    "Conversation",
    "close_conversation",
    "conversation_key",
    "open_conversation",
    "save_conversation",
    "start_turn",
]

MAX_CONVERSATION_ID = 200
SAVE_OUTAGE_S = 15.0  # a turn's save is tried again this long while the database does not answer
SAVE_RETRY_S = 0.25


@dataclass
class Conversation:
    """One turn's conversation: its memory for the invocation, and where it is kept (`key`; None for
    a conversation the request carries, which is kept nowhere)."""

    memory: MessageWindowChatMemory
    key: str | None = None
    turn: Turn | None = None  # held for a kept conversation until the turn ends


def conversation_key(tenant: str, agent: str, conversation_id: str) -> str:
    """Where `tenant`'s conversation `conversation_id` with `agent` is kept (its memory id)."""
    kept = f"{agent}/{conversation_id}"
    return kept if tenant == DEFAULT_TENANT else f"{tenant}:{kept}"


async def open_conversation(
    state: ServiceState, agent: str, conversation_id: str | None, history: list[ChatMessage], tenant: str
) -> Conversation:
    """The conversation of one turn: with `conversation_id`, the server's SQL memory of `tenant`'s
    conversation of that id, read once (only the new user message is added to it, and
    `save_conversation` writes it back); without, `history` (the request's own messages)."""
    if conversation_id:
        if len(conversation_id) > MAX_CONVERSATION_ID:
            message = f"conversation_id is longer than {MAX_CONVERSATION_ID} characters"
            raise ApiError(400, message, param="conversation_id")
        key = conversation_key(tenant, agent, conversation_id)
        turn = await take_turn(state.redis, key, state.serve.turn_wait_s)
        try:
            window = MessageWindowChatMemory(
                state.serve.history_messages, id=key, store=InMemoryChatMemoryStore()
            )
            window.set_messages(await state.memory_store.aget_messages(key))
        except BaseException:
            await turn.release()
            raise
        return Conversation(window, key, turn)
    window = MessageWindowChatMemory(
        len(history) + state.serve.history_messages, store=InMemoryChatMemoryStore()
    )
    window.set_messages(history)
    return Conversation(window)


async def save_conversation(state: ServiceState, conversation: Conversation) -> None:
    """Write a kept conversation back after its turn, even while the turn's caller is cancelled; then
    the next turn of the conversation goes on."""
    try:
        if conversation.key is not None:
            key, messages = conversation.key, conversation.memory.messages()
            _, cancelled = await to_the_end(
                _through_outage(lambda: state.memory_store.aupdate_messages(key, messages))
            )
            if cancelled:
                raise asyncio.CancelledError
    finally:
        await close_conversation(conversation)


async def _through_outage(save: Callable[[], Awaitable[None]]) -> None:
    """`save()`, tried again while the database does not answer (a restart, a proxy before it), for up to
    `SAVE_OUTAGE_S`: the turn is written whole, so writing it again is harmless, and the conversation's
    next turn waits for it meanwhile."""
    deadline = time.monotonic() + SAVE_OUTAGE_S
    while True:
        try:
            await save()
            return
        except sa.exc.OperationalError:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(SAVE_RETRY_S)


async def close_conversation(conversation: Conversation) -> None:
    """End the turn without writing it (its request refused or abandoned before it ran): the next
    turn of the conversation goes on. Idempotent."""
    if conversation.turn is not None:
        await conversation.turn.release()


async def start_turn(
    state: ServiceState,
    place: Place,
    agent: str,
    conversation_id: str | None,
    history: Sequence[ChatMessage],
    run: Callable[[ChatMemory], Run],
    *,
    tenant: str,
) -> None:
    """Open `tenant`'s conversation (taking its turn) and start `run(its memory)` in the background: the
    conversation is written back when it ends, and `place` freed. Refused or failing before the run
    started, the place and the turn are let go."""
    conversation = None
    try:
        conversation = await open_conversation(state, agent, conversation_id, list(history), tenant)
        opened = conversation
        await state.invocations.start(
            run(opened.memory),
            finish=lambda: save_conversation(state, opened),
            on_end=place.release,
            let_go=lambda: close_conversation(opened),
        )
    except BaseException:
        place.release()
        if conversation is not None:
            await close_conversation(conversation)
        raise
