"""The states tasks publish in the Redis result backend, recorded as they happen, for tests."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import redis
from celery.states import READY_STATES

META = "celery-task-meta-"


class StateRecorder:
    """Every state the Redis result backend publishes (`celery-task-meta-*`), as it happens."""

    def __init__(self, redis_url: str) -> None:
        self._client = redis.Redis.from_url(redis_url)
        self._pubsub = self._client.pubsub()
        self._pubsub.psubscribe(META + "*")
        confirmation = self._pubsub.get_message(timeout=2)
        assert confirmation is not None and confirmation["type"] == "psubscribe"
        self._states: list[tuple[str, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
            if message is not None and message["type"] == "pmessage":
                channel = message["channel"].decode()
                self._states.append((channel[len(META) :], json.loads(message["data"])))

    def statuses(self, task_id: str | None, *, final: bool = True, timeout: float = 5.0) -> list[str]:
        """The task's states so far; with `final`, first waits (bounded) until one is final.

        The executor can read a result before this recorder's thread has taken the same message
        off its own subscription, so a test reading right after the call waits for it here.
        """
        deadline = time.monotonic() + timeout
        while True:
            found = [meta["status"] for tid, meta in list(self._states) if tid == task_id]
            if not final or (found and found[-1] in READY_STATES) or time.monotonic() > deadline:
                return found
            time.sleep(0.01)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._pubsub.close()
        self._client.close()
