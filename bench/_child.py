"""A `python -m bench.batch_child` subprocess (measure 11), driven one line at a time over its stdin and
stdout."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from bench._worker import log_tail, spawn, stop_group

__all__ = ["CHILD_MODULE", "BatchChild"]

CHILD_MODULE = "bench.batch_child"
STOP_TIMEOUT_S = 5.0


class BatchChild:
    """One child process: `side` names it in the results; `flags` are its command-line options.

    It runs in a session of its own and gets SIGTERM if the benchmark dies (`bench._worker.spawn`);
    `stop` ends it (SIGTERM, then SIGKILL) and is safe to call on every path. Its stderr goes to
    `<directory>/<side>.log`, whose end is quoted in every error about it.
    """

    def __init__(self, side: str, flags: list[str], env: Mapping[str, str], directory: Path) -> None:
        self.side = side
        self.command = [sys.executable, "-m", CHILD_MODULE, *flags]
        self.log_path = directory / f"{side}.log"
        self._env = dict(env)
        self._buffer = b""
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = spawn(self.command, self._env, self.log_path, pipes=True)

    def ready(self, timeout_s: float) -> float:
        """Wait for its `ready` line; the seconds its imports and set-up took."""
        word, _, seconds = self._read_line(timeout_s).partition(" ")
        if word != "ready":
            raise self._error(f"said {word!r} instead of ready")
        return float(seconds)

    def ask(self, command: str, timeout_s: float) -> str:
        """Send one command line; its one-line answer."""
        process = self._started()
        assert process.stdin is not None
        try:
            process.stdin.write(f"{command}\n".encode())
            process.stdin.flush()
        except BrokenPipeError:
            raise self._error(f"is gone ({self._status()}) before {command!r}") from None
        return self._read_line(timeout_s)

    def stop(self) -> None:
        stop_group(self.process, STOP_TIMEOUT_S)
        if self.process is not None:
            for pipe in (self.process.stdin, self.process.stdout):
                if pipe is not None:
                    with contextlib.suppress(BrokenPipeError):  # stdin's unwritten rest, the child gone
                        pipe.close()

    def _started(self) -> subprocess.Popen[bytes]:
        if self.process is None:
            raise RuntimeError(f"the {self.side} child is not started")
        return self.process

    def _read_line(self, timeout_s: float) -> str:
        """The next line of its stdout, waiting at most `timeout_s` for it (read from the descriptor
        itself, so that nothing waits in a buffer that `select` cannot see)."""
        process = self._started()
        assert process.stdout is not None
        descriptor = process.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._error(f"did not answer within {timeout_s:g} s")
            readable, _, _ = select.select([descriptor], [], [], left)
            if readable:
                chunk = os.read(descriptor, 4096)
                if not chunk:
                    raise self._error(f"closed its stdout ({self._status()})")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode().strip()

    def _status(self) -> str:
        """Its exit status, waiting a little for it (its stdout closes just before it exits)."""
        process = self._started()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=1.0)
        return "still running" if process.returncode is None else f"status {process.returncode}"

    def _error(self, what: str) -> RuntimeError:
        return RuntimeError(f"the {self.side} child ({' '.join(self.command[1:])}) {what}{self.tail()}")

    def tail(self) -> str:
        """The end of its log, or nothing if it wrote none."""
        empty = not self.log_path.exists() or self.log_path.stat().st_size == 0
        return "" if empty else log_tail(self.log_path, f"{self.side} child")
