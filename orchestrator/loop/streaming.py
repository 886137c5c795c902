"""An invocation run as a task whose events are yielded as they happen, then its `Result`; and the
guard of the synchronous edges, which must not be called inside an event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from orchestrator.errors import OrchestratorError
from orchestrator.loop.state import Emit
from orchestrator.messages import AiMessage
from orchestrator.models.base import ChatResponse
from orchestrator.result import CompleteResponse, Result, StreamEvent

__all__ = ["events_of", "outside_a_loop"]


async def events_of(start: Callable[[Emit], Awaitable[Result | None]]) -> AsyncIterator[StreamEvent]:
    """Run `start(emit)` as a task, yielding what it emits, then one `CompleteResponse` carrying its
    `Result` (none when it returns None); its error ends the stream by raising. Closing the stream
    early cancels the task, and waits while it undoes what it did."""
    queue: asyncio.Queue[StreamEvent | None] = asyncio.Queue()
    task = asyncio.ensure_future(start(queue.put_nowait))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while True:
            event = await queue.get()
            if event is None:
                break
            yield event
        result = task.result()
        if result is not None:
            yield CompleteResponse(_final_response(result), result)
    finally:
        if not task.done():  # the consumer stopped: cancel it, and wait while it undoes what it did
            task.cancel()
            while not task.done():
                try:
                    await asyncio.wait({task})
                except asyncio.CancelledError:  # cancelled again (a drain, then a shutdown): still wait
                    continue


def _final_response(result: Result) -> ChatResponse:
    return ChatResponse(AiMessage(result.content), result.finish_reason, result.token_usage)


def outside_a_loop(method: str, instead: str) -> None:
    """Refuse synchronous `method` inside a running event loop, naming its async twin `instead`."""
    with contextlib.suppress(RuntimeError):  # raised when no loop runs here, as it should be
        asyncio.get_running_loop()
        raise OrchestratorError(
            f"{method}() cannot run inside an event loop: use `await service.{instead}(...)`"
        )
