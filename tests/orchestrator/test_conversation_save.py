"""A turn's conversation is written back through a brief database outage (a restart, a proxy before it
restarting): the turn is not lost while its invocation's answer stands."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import cast

import sqlalchemy as sa

from orchestrator.memory import InMemoryChatMemoryStore, MessageWindowChatMemory
from orchestrator.messages import AiMessage, ChatMessage, UserMessage
from orchestrator.server.conversations import Conversation, save_conversation
from orchestrator.server.state import ServiceState


class Restarting:
    """A memory store whose database refuses the first `refusals` connections."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.saved: dict[str, list[ChatMessage]] = {}

    async def aupdate_messages(self, key: str, messages: list[ChatMessage]) -> None:
        if self.refusals:
            self.refusals -= 1
            raise sa.exc.OperationalError("UPDATE", {}, ConnectionRefusedError("connection refused"))
        self.saved[key] = list(messages)


def test_a_turn_is_saved_through_a_database_restart() -> None:
    store = Restarting(refusals=2)
    memory = MessageWindowChatMemory(10, id="bank/c1", store=InMemoryChatMemoryStore())
    memory.add(UserMessage("hi"))
    memory.add(AiMessage("hello"))
    state = cast(ServiceState, SimpleNamespace(memory_store=store))

    asyncio.run(save_conversation(state, Conversation(memory, "bank/c1")))

    assert store.saved == {"bank/c1": [UserMessage("hi"), AiMessage("hello")]}
    assert store.refusals == 0
