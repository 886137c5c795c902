"""`toolfleet recover --agent`: the stale invocations of the agents given are carried on, not undone."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from orchestrator.loop.adopting import adoptable
from orchestrator.saga.journal import InvocationRecord, Journal
from orchestrator.service import AiService
from workers.redis_client import connect as connect_redis
from workers.settings import Settings

__all__ = ["Carried", "carry_on_stale"]

log = logging.getLogger(__name__)

_EVENTS_KEY = "toolfleet:events:{}"  # a served invocation's event log: its first event names its agent


@dataclass
class Carried:
    """What `carry_on_stale` did: the invocations carried on (id, answer), and those that could have
    been but whose agent was not given (recovery undoes them)."""

    answers: list[tuple[str, str | None]] = field(default_factory=list)
    undone: list[str] = field(default_factory=list)


async def carry_on_stale(
    journal: Journal,
    agents: Mapping[str, AiService],
    settings: Settings,
    stale_after_s: float,
    only: str | None,
) -> Carried:
    """Carry on each stale invocation (or the one named) that can be, whose agent is among `agents`
    (by the name its service journals, else the agent its served event log names)."""
    carried = Carried()
    records = [journal.invocation(only)] if only is not None else journal.unfinished(stale_after_s)
    for record in records:
        if record is None or record.state.finished or not adoptable(journal, record.id):
            continue
        service = agents.get(_agent_of(record, settings))
        if service is None or not service.carries_on:
            carried.undone.append(record.id)
            continue
        result = await service.aadopt(record.id, stale_after_s=stale_after_s)
        if result is not None:
            carried.answers.append((record.id, result.content))
    return carried


def _agent_of(record: InvocationRecord, settings: Settings) -> str:
    if record.service_name:
        return record.service_name
    try:
        client = connect_redis(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
        try:
            entries: Any = client.xrange(_EVENTS_KEY.format(record.id), count=1)
        finally:
            client.close()
    except redis.RedisError as exc:
        log.warning("the agent of invocation %s is not known (Redis: %s)", record.id, exc)
        return ""
    if not entries:
        return ""
    first = json.loads(entries[0][1][b"event"])
    return str(first.get("agent") or "")
