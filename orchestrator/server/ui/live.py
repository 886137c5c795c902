"""Where the running calls of an invocation stand between their journal rows' writes: the journal has a
call `dispatched` from its publication to its end, while its event stream says when it waited for a
slot, was queued, and started on which worker. The run view's live fragment reads both."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis.exceptions import RedisError

from orchestrator.saga.journal import CallRecord
from orchestrator.server.events import EVENTS_KEY, EventLog

__all__ = ["STEPS", "LiveStep", "live_steps", "placed"]

# The steps of a call the stream tells before its end, each as the view says it.
STEPS = {
    "tool_call.waiting": "waiting for a slot",
    "tool_call.queued": "queued",
    "tool_call.started": "started",
}


@dataclass(frozen=True)
class LiveStep:
    """A call's latest step before its end, as its invocation's event stream told it."""

    step: str  # one of STEPS' values
    worker: str | None  # the worker that took it (a started call's)
    at: datetime  # when the stream took the event (its id's time, Redis' clock)


async def live_steps(events: EventLog, invocation_id: str) -> dict[str, LiveStep]:
    """Each call's latest step (by call id), from the invocation's event stream; nothing when Redis
    cannot be read (the page then shows what the journal says)."""
    try:
        entries: Any = await events.client.xrange(EVENTS_KEY.format(invocation_id))
    except (RedisError, OSError):
        return {}
    steps: dict[str, LiveStep] = {}
    for raw_id, fields in entries:
        event = json.loads(fields[b"event"])
        call_id, kind = event.get("call_id"), event.get("type")
        if call_id is None or kind not in STEPS:
            continue
        earlier = steps.get(str(call_id))
        worker = event.get("worker") or (earlier.worker if earlier else None)
        steps[str(call_id)] = LiveStep(STEPS[kind], worker, _time_of(raw_id))
    return steps


def placed(calls: list[CallRecord], steps: Mapping[str, LiveStep]) -> list[CallRecord]:
    """`calls`, each running one with the worker its stream named (the journal learns it at the end)."""
    return [
        dataclasses.replace(call, worker=step.worker)
        if call.worker is None and call.call_id and (step := steps.get(call.call_id)) and step.worker
        else call
        for call in calls
    ]


def _time_of(raw_id: bytes | str) -> datetime:
    """The time of a stream entry id (`<milliseconds>-<sequence>`)."""
    text = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
    return datetime.fromtimestamp(int(text.split("-", 1)[0]) / 1000, UTC)
