"""Work a test starts on a thread of its own, so it can inject a fault while that work runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Background"]

T = TypeVar("T")


class Background(Generic[T]):
    """`target()` on a daemon thread, started at once; `join` hands back its value or raises its error."""

    def __init__(self, target: Callable[[], T]) -> None:
        self._target = target
        self._values: list[T] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._values.append(self._target())
        except BaseException as exc:
            self._error = exc

    @property
    def running(self) -> bool:
        """Whether `target()` has not returned (nor raised) yet."""
        return self._thread.is_alive()

    def join(self, timeout_s: float) -> T:
        """What `target()` returned, once it has; fails if it still runs after `timeout_s`."""
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"still running after {timeout_s} s"
        if self._error is not None:
            raise self._error
        return self._values[0]
