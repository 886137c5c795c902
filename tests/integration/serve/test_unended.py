"""A replica killed after journaling its invocation's end, before telling it in the stream: whoever
recovers the dead replica tells the end as the journal has it (the calls' ends first), adds the turn to
its conversation when it was not saved, and does neither twice; a conversation still held is looked
at again later, the dead replica staying known meanwhile."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from orchestrator import LocalExecutor
from orchestrator.memory import SqlChatMemoryStore
from orchestrator.messages import AiMessage, ChatMessage, UserMessage
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.journal import Journal
from orchestrator.server.events import EventLog
from orchestrator.server.replicas import REPLICAS_KEY, ReplicaWatch
from orchestrator.server.state import ServiceState
from orchestrator.server.turns import take_turn
from orchestrator.server.unended import tell_unended
from tests.integration.serve.test_replica_watch import GHOST, beat
from workers.calls.invocation import Invocation, InvocationContext
from workers.protocol import OutcomeKind, ToolExecutionRequest, ToolOutcome

pytestmark = pytest.mark.integration

QUESTION, ANSWER = "book a seat", "booked: seat 4"


def ended_by_the_ghost(journal: Journal) -> str:
    """An invocation the ghost replica answered in the journal (its call's end journaled too)."""
    context = InvocationContext(invocation_id=uuid.uuid4(), memory_id="bank/c1", user_message=QUESTION)
    invocation_id = str(context.invocation_id)
    journal.start_invocation(context, Invocation(context).to_json())
    request = ToolExecutionRequest("c1", "book", "{}")
    row = journal.record_intent(
        invocation_id, 1, request, pool="alpha", compensable=True, idempotency_key=f"{invocation_id}:c1"
    )
    journal.record_outcome(row, ToolOutcome(OutcomeKind.SUCCESS, "seat 4"), "seat 4")
    beat(journal, invocation_id, 5.0)
    journal.set_invocation_state(invocation_id, "succeeded", final_answer=ANSWER, owner=GHOST)
    return invocation_id


async def _recovery(
    redis_url: str, journal_file: Path, conversation_id: str, invocation_id: str, *, held: bool = False
) -> dict[str, Any]:
    """One look of a live replica's watch for dead replicas, twice, with the ghost's invocation started on
    its stream (of `conversation_id`) and never ended; `held`: another turn holds the conversation."""
    client = aioredis.Redis.from_url(redis_url)
    events = EventLog(client)
    journal = AsyncJournal(f"sqlite:///{journal_file}")
    store = SqlChatMemoryStore(f"sqlite:///{journal_file.parent / 'memory.db'}")
    state = SimpleNamespace(
        journal=journal,
        events=events,
        redis=client,
        memory_store=store,
        serve=SimpleNamespace(history_messages=100),
    )
    key = f"bank/{conversation_id}"
    executor = LocalExecutor()
    watch = ReplicaWatch(client, journal, lambda: executor, events, ttl_s=2.0, stale_after_s=1.5)
    watch.tell_unended = lambda owner: tell_unended(cast(ServiceState, state), owner)
    started = {"type": "invocation.started", "invocation_id": invocation_id, "agent": "bank"}
    await events.add(invocation_id, {**started, "conversation_id": conversation_id, "tenant": "default"})
    await client.sadd(REPLICAS_KEY, GHOST)
    turn = await take_turn(client, key, 1.0) if held else None
    try:
        await watch.recover_dead()
        known = bool(await client.sismember(REPLICAS_KEY, GHOST))
        if turn is not None:
            await turn.release()
        await watch.recover_dead()  # again: nothing is told or saved twice
        entries: Any = await client.xrange(f"toolfleet:events:{invocation_id}")
        return {
            "events": [json.loads(fields[b"event"]) for _, fields in entries],
            "memory": await store.aget_messages(key),
            "known after the first look": known,
        }
    finally:
        await client.srem(REPLICAS_KEY, GHOST)
        executor.close()
        await store.adispose()
        await client.aclose()


def _told(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(e["type"], e.get("call_id") or e.get("content")) for e in events]


def test_a_journaled_end_never_told_is_told_and_its_lost_turn_added_once(
    redis_url: str, journal_file: Path, journal: Journal
) -> None:
    # given: the ghost replica died after journaling its answer, before saving the turn or ending the stream
    invocation_id = ended_by_the_ghost(journal)
    conversation_id = f"c-{uuid.uuid4().hex[:8]}"

    # when: a live replica recovers the ghost (twice over)
    seen = asyncio.run(_recovery(redis_url, journal_file, conversation_id, invocation_id))

    # then: the stream tells the call's end, then the answer the journal has, once each; the
    # conversation holds the turn once
    assert _told(seen["events"]) == [
        ("invocation.started", None),
        ("tool_call.finished", "c1"),
        ("invocation.succeeded", ANSWER),
    ]
    memory: list[ChatMessage] = seen["memory"]
    assert memory == [UserMessage(QUESTION), AiMessage(ANSWER)]


def test_a_turn_already_saved_is_not_added_again(
    redis_url: str, journal_file: Path, journal: Journal
) -> None:
    # given: the ghost saved the turn (with its tool messages) before it died, without ending the stream
    invocation_id = ended_by_the_ghost(journal)
    conversation_id = f"c-{uuid.uuid4().hex[:8]}"
    saved: list[ChatMessage] = [
        UserMessage("hello"),
        AiMessage("hi"),
        UserMessage(QUESTION),
        AiMessage(ANSWER),
    ]
    SqlChatMemoryStore(f"sqlite:///{journal_file.parent / 'memory.db'}").update_messages(
        f"bank/{conversation_id}", saved
    )

    # when: a live replica recovers the ghost
    seen = asyncio.run(_recovery(redis_url, journal_file, conversation_id, invocation_id))

    # then: the end is told; the conversation is as the ghost saved it
    assert _told(seen["events"])[-1] == ("invocation.succeeded", ANSWER)
    assert seen["memory"] == saved


def test_a_conversation_still_held_leaves_the_end_for_a_later_look(
    redis_url: str, journal_file: Path, journal: Journal
) -> None:
    # given: the ghost's lost turn, its conversation held by another turn at the first look
    invocation_id = ended_by_the_ghost(journal)
    conversation_id = f"c-{uuid.uuid4().hex[:8]}"

    # when: a live replica looks, then looks again once the conversation is free
    seen = asyncio.run(_recovery(redis_url, journal_file, conversation_id, invocation_id, held=True))

    # then: the ghost stayed known after the first look; the second told the end and added the turn
    assert seen["known after the first look"] is True
    assert _told(seen["events"])[-1] == ("invocation.succeeded", ANSWER)
    assert seen["memory"] == [UserMessage(QUESTION), AiMessage(ANSWER)]
