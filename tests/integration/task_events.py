"""The task events a broker carries (what Flower sees), captured on a thread while a block runs."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from orchestrator.executors.celery import CeleryExecutor
from tests._waiting import wait_for, wait_until
from workers import ToolExecutionRequest
from workers.app import make_publisher
from workers.settings import Settings


@contextlib.contextmanager
def task_events(
    settings: Settings, celery: CeleryExecutor, probe: ToolExecutionRequest
) -> Iterator[list[dict[str, Any]]]:
    """Every task event on `settings`' broker while the block runs. Events are pub/sub: the block
    starts once a `probe` call's events arrived, so none of the block's are missed."""
    app = make_publisher(settings)
    events: list[dict[str, Any]] = []
    stop = threading.Event()

    def consume() -> None:
        with app.connection_for_read() as connection:
            receiver = app.events.Receiver(connection, handlers={"*": events.append})

            def stop_when_asked() -> None:
                stop.wait()
                receiver.should_stop = True  # seen within a second, at its next poll

            threading.Thread(target=stop_when_asked, daemon=True).start()
            receiver.capture(limit=None, timeout=None, wakeup=False)

    thread = threading.Thread(target=consume, name="task-events", daemon=True)
    thread.start()
    try:

        def probe_seen() -> bool:
            task_id = asyncio.run(celery.execute(probe)).task_id
            return wait_until(lambda: any(e.get("uuid") == task_id for e in events), 1.0)

        wait_for(probe_seen, 15.0, "the event receiver")
        yield events
    finally:
        stop.set()
        thread.join(timeout=5)
        app.close()
