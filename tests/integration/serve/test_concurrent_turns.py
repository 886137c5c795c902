"""Twenty turns of one conversation sent at once, across two replicas: each waits for the one before
(in arrival order), sees every earlier turn in its history, and the stored conversation ends with all
twenty — none lost, none answered with an error."""

from __future__ import annotations

import asyncio
import itertools
import uuid

import openai
import pytest

from orchestrator.memory import SqlChatMemoryStore
from orchestrator.messages import UserMessage
from tests.integration.serve.replicas import AGENT, API_KEY, Replica

pytestmark = pytest.mark.integration

TURNS = 20


def test_twenty_concurrent_turns_of_one_conversation_are_kept_in_order(
    replicas: tuple[Replica, Replica], database_url: str
) -> None:
    conversation = f"busy-{uuid.uuid4().hex}"

    async def run() -> list[str]:
        clients = [
            openai.AsyncOpenAI(base_url=r.base_url, api_key=API_KEY, max_retries=0, timeout=120)
            for r in replicas
        ]

        async def turn(n: int) -> str:
            completion = await clients[n % 2].chat.completions.create(
                model=AGENT,
                messages=[{"role": "user", "content": f"turn {n}"}],
                metadata={"conversation_id": conversation},
                stream=n % 3 == 0,  # streamed or not, the same queue
            )
            if isinstance(completion, openai.AsyncStream):
                return "".join([c.choices[0].delta.content or "" async for c in completion if c.choices])
            return completion.choices[0].message.content or ""

        try:
            return await asyncio.gather(*(turn(n) for n in range(TURNS)))
        finally:
            for client in clients:
                await client.close()

    answers = asyncio.run(run())

    # then: each answer names every user message the model was sent ("heard: a | b | ..."): the turns
    # saw 1, 2, ... 20 of them, each history the one before plus its own turn
    heard = sorted((answer.removeprefix("heard: ").strip().split(" | ") for answer in answers), key=len)
    assert [len(h) for h in heard] == list(range(1, TURNS + 1)), answers
    assert all(later[:-1] == earlier for earlier, later in itertools.pairwise(heard)), heard
    # ... and the conversation kept holds all twenty turns, in that order
    store = SqlChatMemoryStore(database_url)
    try:
        kept = store.get_messages(f"{AGENT}/{conversation}")
    finally:
        store.engine.dispose()
    assert [m.text for m in kept if isinstance(m, UserMessage)] == heard[-1]
