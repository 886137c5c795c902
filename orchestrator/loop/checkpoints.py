"""What a checkpointing invocation journals as it goes: the conversation it starts from, and each turn's
response with the intents of the calls it publishes, so that another process can carry it on."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from orchestrator.loop.config import LoopConfig
from orchestrator.loop.state import RunState
from orchestrator.messages import AiMessage, message_to_json, messages_to_json
from orchestrator.saga.async_journal import to_the_end
from workers.tools import ToolDefinition

__all__ = ["checkpoint", "opening"]


async def opening(config: LoopConfig, state: RunState) -> dict[str, Any] | None:
    """The checkpoint an invocation starts from: the conversation before it, and its question."""
    if not config.checkpointing:
        return None
    history = messages_to_json(await state.messages())
    return {"history": history, "user_message": message_to_json(state.user_message)}


async def checkpoint(
    config: LoopConfig, state: RunState, message: AiMessage, waiting: Collection[int]
) -> dict[int, int]:
    """Journal the turn's response with the intents of the calls it publishes now (those of the
    service's tools not waiting for a person), in one transaction; their rows by index."""
    published = [
        (index, request, tool)
        for index, request in enumerate(message.tool_execution_requests)
        if index not in waiting and isinstance(tool := state.tools.get(request.name), ToolDefinition)
    ]
    rows, cancelled = await to_the_end(
        state.saga.checkpoint(
            message_to_json(message), [(request, tool) for _, request, tool in published], state.invocation()
        )
    )
    if cancelled:  # journaled, never published: given up with the invocation, no row left dispatched
        await to_the_end(state.saga.abandon(rows))
        raise asyncio.CancelledError
    return {index: row for (index, _, _), row in zip(published, rows, strict=False)}
