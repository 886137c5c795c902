"""The end of an invocation whose replica died after the journal had it, before its stream told it.

A run journals its invocation's end, then saves the conversation's turn, then tells the end in its
stream. A replica killed between the first and the last leaves an invocation the journal calls ended
(nothing adopts it) whose stream never ends: a client following it, or a chat completion sent again
with its `Idempotency-Key`, would wait for an end nobody tells. Whoever recovers the dead replica
finishes the job for each of its invocations that ended lately with a stream left open: the calls'
ends the stream lacks, the conversation's turn when it was not saved (the question and the answer),
then the end as the journal has it.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from orchestrator.errors import ApiError
from orchestrator.memory import InMemoryChatMemoryStore, MessageWindowChatMemory
from orchestrator.messages import AiMessage, ChatMessage, UserMessage
from orchestrator.saga._journal_records import utc_now
from orchestrator.saga.journal import InvocationRecord
from orchestrator.saga.states import InvocationState
from orchestrator.server.answers import answer_of
from orchestrator.server.conversations import conversation_key
from orchestrator.server.error_shape import failure_text
from orchestrator.server.events import tell_settled
from orchestrator.server.invocations import succeeded_event
from orchestrator.server.state import ServiceState
from orchestrator.server.turns import take_turn

__all__ = ["LOOK_BACK_S", "tell_unended"]

log = logging.getLogger(__name__)

LOOK_BACK_S = 600.0  # how long before its recovery a dead replica's ended invocations are looked at
TURN_WAIT_S = 0.0  # a conversation still held is looked at again next time: the watch never waits on it


async def tell_unended(state: ServiceState, owner: str) -> int:
    """Tell the ends of the invocations the replica `owner` (dead) ended in the journal, in the last
    `LOOK_BACK_S`, whose streams never told them; how many are left for a later look (their
    conversation still held)."""
    since = utc_now() - timedelta(seconds=LOOK_BACK_S)
    ended = await state.journal.run(lambda journal: journal.ended_since(owner, since))
    if not ended:
        return 0
    open_ = set(await state.events.unended([record.id for record in ended]))
    left = 0
    for record in (r for r in ended if r.id in open_):
        if not await _turn_saved(state, record):
            left += 1
            continue
        log.warning("replica %s stopped before telling invocation %s ended: told now", owner, record.id)
        await tell_settled(state.journal, state.events, record.id)
        await state.events.add(record.id, _end(record))
    return left


async def _turn_saved(state: ServiceState, record: InvocationRecord) -> bool:
    """Make sure a succeeded invocation's turn is in its kept conversation (the question, then the
    answer, added when missing); False when the conversation is still held by a turn."""
    origin = await state.events.first(record.id) or {}
    conversation_id = origin.get("conversation_id")
    if record.state is not InvocationState.SUCCEEDED or not conversation_id or record.final_answer is None:
        return True
    agent = str(origin.get("agent") or record.service_name)
    key = conversation_key(record.tenant, agent, str(conversation_id))
    try:
        turn = await take_turn(state.redis, key, TURN_WAIT_S)
    except ApiError:
        return False
    try:
        messages = await state.memory_store.aget_messages(key)
        if not _holds(messages, record.user_message or "", record.final_answer):
            window = MessageWindowChatMemory(
                state.serve.history_messages, id=key, store=InMemoryChatMemoryStore()
            )
            window.set_messages(messages)
            window.add(UserMessage(record.user_message))
            window.add(AiMessage(record.final_answer))
            await state.memory_store.aupdate_messages(key, window.messages())
            log.warning("invocation %s: its turn was not in conversation %s: added", record.id, key)
    finally:
        await turn.release()
    return True


def _holds(messages: list[ChatMessage], question: str, answer: str) -> bool:
    """Whether the conversation's latest turn asking `question` was answered `answer`."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, UserMessage) and message.single_text == question:
            later = messages[index + 1 :]
            return any(isinstance(m, AiMessage) and m.text == answer for m in later)
    return False


def _end(record: InvocationRecord) -> dict[str, Any]:
    """The invocation's last event, as the journal has its end."""
    if record.state is InvocationState.SUCCEEDED:
        return succeeded_event(answer_of(record), 0.0)
    if record.state is InvocationState.CANCELLED:
        return {"type": "invocation.cancelled", "invocation_id": record.id}
    return {"type": "invocation.failed", "error": failure_text(record.id)}
