"""An invocation caught as it starts: its first event written, its journal row a moment later (as its
run on a busy replica writes it), for the tests of whatever reads it in between."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Iterator

import redis

from orchestrator.saga.journal import Journal
from orchestrator.server.events import EVENTS_KEY
from workers.calls.invocation import Invocation, InvocationContext

__all__ = ["journaled_late"]


@contextlib.contextmanager
def journaled_late(redis_url: str, database_url: str, agent: str, text: str) -> Iterator[str]:
    """Within: an invocation of `agent` asked `text`, whose `invocation.started` is written and whose
    journal row comes a second after entering; its id. It ends journaled failed, never run."""
    context = InvocationContext(invocation_id=uuid.uuid4(), memory_id="default", user_message=text)
    invocation_id = str(context.invocation_id)
    started = {"type": "invocation.started", "invocation_id": invocation_id, "agent": agent}
    redis.Redis.from_url(redis_url).xadd(EVENTS_KEY.format(invocation_id), {"event": json.dumps(started)})
    journal = Journal(database_url)
    late = threading.Timer(1.0, lambda: journal.start_invocation(context, Invocation(context).to_json()))
    late.start()
    try:
        yield invocation_id
    finally:
        late.join()
        journal.set_invocation_state(invocation_id, "failed", "a test's invocation, never run")
        journal.engine.dispose()
