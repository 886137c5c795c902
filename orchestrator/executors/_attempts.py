"""Which dispatch of a call this is: the attempt number its deterministic task id is derived from."""

from __future__ import annotations

import threading
from collections import OrderedDict

__all__ = ["Attempts"]


class Attempts:
    """Counts the dispatches of each idempotency key in this process, for the most recent keys.

    The first dispatch of a call is attempt 0, whose task id the journal records before publishing;
    a dispatch again (its worker was lost) is attempt 1, 2, ... Calling the executor twice with one
    key (the same invocation and call id) dispatches further attempts too, so no task id is ever
    published twice: a second publish under one id would read the first one's stored result, and
    workers drop an id once revoked.
    """

    def __init__(self, max_keys: int = 100_000) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys}")
        self._max_keys = max_keys
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def next(self, key: str) -> int:
        """The attempt number of the next dispatch of `key`."""
        with self._lock:
            attempt = self._counts.pop(key, -1) + 1
            self._counts[key] = attempt
            if len(self._counts) > self._max_keys:
                self._counts.popitem(last=False)
            return attempt
