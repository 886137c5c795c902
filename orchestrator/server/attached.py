"""A chat completion sent again with its `Idempotency-Key`: it hears, from the shared event log, the
invocation its first request started (on this replica or another), from its first event: the text as
it came, then its end, its pause, or its failure. Leaving it cancels nothing: the invocation is the
first request's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from orchestrator.errors import ApiError
from orchestrator.models.base import FinishReason, PartialResponse, TokenUsage
from orchestrator.server.answers import Ending, Quiet
from orchestrator.server.events import EventLog
from orchestrator.server.idempotency import HEADER, IdempotencyKey

__all__ = ["Attached"]

START_GRACE_S = 5.0  # how long past the first request's turn wait its invocation may take to start


class Attached:
    """The events of invocation `invocation_id` (another request's), as a completion hears them."""

    def __init__(self, events: EventLog, key: IdempotencyKey, invocation_id: str, turn_wait_s: float) -> None:
        self.log = events
        self.key = key
        self.invocation_id = invocation_id
        self.start_wait_s = turn_wait_s + START_GRACE_S

    async def events(self) -> AsyncIterator[object]:
        await self.started()
        waiting: list[dict[str, Any]] = []
        async for entry in self.log.entries(self.invocation_id):
            if entry is None:
                yield Quiet()
                continue
            entry_id, event = entry
            kind = event.get("type")
            if kind == "text.delta":
                yield PartialResponse(str(event.get("text") or ""))
            elif kind == "approval.requested":
                waiting = list(event.get("approvals") or [])
            elif kind == "invocation.paused" and await self.log.last_id(self.invocation_id) == entry_id:
                # paused, and not resumed since: what waits is the answer
                yield Ending(self.invocation_id, None, FinishReason.APPROVAL_REQUIRED, None, waiting)
                return
            elif kind == "invocation.succeeded":
                yield self._completed(event)
                return
            elif kind == "invocation.failed":
                raise ApiError(500, f"the invocation {self.invocation_id} failed: {event.get('error')}")
            elif kind == "invocation.cancelled":
                raise ApiError(
                    409, f"the invocation {self.invocation_id} was cancelled", code="invocation_cancelled"
                )
        raise ApiError(404, f"the events of invocation {self.invocation_id} are gone", code="not_found")

    def leave(self) -> None:
        """Nothing to cancel: the invocation belongs to the request that started it."""

    async def started(self) -> None:
        """Wait for the first request's invocation to have events (it may wait for its conversation's
        turn first); a 409 to send the request again if it never starts within the first request's
        turn wait (that request died), or its request was refused."""
        deadline = time.monotonic() + self.start_wait_s
        while not await self.log.exists(self.invocation_id):
            if time.monotonic() >= deadline or not await self.key.holds(self.invocation_id):
                raise ApiError(
                    409,
                    f"the request first sent with this {HEADER} has not started its invocation: "
                    "send it again",
                    param=HEADER,
                    code="idempotency_key_in_use",
                    headers={"Retry-After": "1"},
                )
            await asyncio.sleep(0.1)

    def _completed(self, event: dict[str, Any]) -> Ending:
        reason = event.get("finish_reason")
        usage = event.get("usage")
        return Ending(
            self.invocation_id,
            event.get("content"),
            FinishReason(str(reason).upper()) if reason else None,
            None if not usage else TokenUsage(usage.get("input_tokens"), usage.get("output_tokens")),
        )
